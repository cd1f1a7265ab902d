"""A sentence-transformers folder that csekit did not write, read as sentence-transformers reads it, or refused.

A folder with ``modules.json`` is a pipeline of modules (Transformer, Pooling, Dense, Normalize, ...) plus settings
(``sentence_bert_config.json``, ``config_sentence_transformers.json``: length, prompts). csekit scores such a folder
with the vectors ``SentenceTransformer(folder).encode`` gives (`load_st_embedder`): sentence-transformers is
the oracle of its own format. Without sentence-transformers installed, csekit applies what it reproduces exactly (a
root Transformer, mean or [CLS] pooling in either config format, Normalize, no prompt, no lower-casing) and refuses
anything else in one line naming the module (`plain_pipeline`).

`module_entries` is the one reader of ``modules.json``: every module path is the folder itself (``""``) or a
real sub-folder inside it, and a module folder holding only pickled weights is refused; ``csekit push`` lists a
folder's files through it too.
"""

import importlib.util
import json
from pathlib import Path, PurePosixPath
from typing import Optional

from .errors import DataError

MODULES_FILE = "modules.json"
ADAPTER_CONFIG = "adapter_config.json"  # peft's adapter folder (the Transformer module of --save_adapter's folder)
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
# the pooling modes of sentence-transformers' old config format (one boolean key each) and csekit's poolers that
# compute them exactly (pool(): "avg" is the masked mean over every real token, specials included, as theirs)
OLD_POOLING_KEYS = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean",
                    "pooling_mode_max_tokens": "max", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                    "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}
PLAIN_POOLERS = {"mean": "avg", "cls": "cls_before_pooler"}
# sentence_bert_config.json: settings that change the Transformer module's output when set, and those csekit's own
# reader applies at these values only
CHANGING_SETTINGS = ("do_lower_case", "model_kwargs", "config_kwargs", "processor_kwargs", "tokenizer_args",
                     "model_args", "config_args", "processing_kwargs")
ST_CHUNK_BATCHES = 4  # batches per SentenceTransformer.encode call while scoring (one step of csekit's bar)
DEFAULT_SETTINGS = {"transformer_task": "feature-extraction", "module_output_name": "token_embeddings"}
FAMILY_FILE = "config_sentence_transformers.json"
DENSE_FAMILY = "SentenceTransformer"
# the other families sentence-transformers writes, and why csekit refuses each
OTHER_FAMILIES = {
    "SparseEncoder": "sparse vocabulary-sized term weights, which its own SparseEncoder.encode gives; score it "
                     "with SparseEncoder or mteb",
    "CrossEncoder": "it scores a pair of sentences together and gives no sentence vector",
    "MultiVectorEncoder": "one vector per token, compared by late interaction, not one sentence vector",
}


def is_st_folder(folder) -> bool:
    return (Path(folder) / MODULES_FILE).is_file()


# where each family's own module classes live in sentence-transformers (5.x ``sparse_encoder.models``, 6.x
# ``sparse_encoder.modules``), and the sparse modules' class names, for a modules.json whose paths were rewritten
FAMILY_MODULES = {".sparse_encoder.": "SparseEncoder", ".cross_encoder.": "CrossEncoder",
                  ".multi_vector_encoder.": "MultiVectorEncoder"}
SPARSE_MODULE_CLASSES = ("SpladePooling", "MLMTransformer", "SparseAutoEncoder", "SparseStaticEmbedding", "CSRSparsity")


def module_family(folder) -> Optional[str]:
    """The family the module types of ``folder``'s ``modules.json`` belong to (a sparse encoder's SPLADE pooling, a
    cross-encoder's or multi-vector encoder's modules), ``None`` when none is another family's: what the folder is,
    whatever its declaration says or lacks."""
    if not is_st_folder(folder):
        return None
    try:
        entries = json.loads((Path(folder) / MODULES_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # (module_entries names a damaged modules.json)
    for entry in entries if isinstance(entries, list) else []:
        kind = f".{entry.get('type', '')}." if isinstance(entry, dict) else ""
        family = next((name for part, name in FAMILY_MODULES.items() if part in kind), None)
        if family or kind.rstrip(".").rsplit(".", 1)[-1] in SPARSE_MODULE_CLASSES:
            return family or "SparseEncoder"
    return None


def declared_family(folder) -> Optional[str]:
    """The sentence-transformers family ``folder`` declares, as sentence-transformers itself decides it:
    ``config_sentence_transformers.json``'s ``model_type`` (``"SentenceTransformer"`` when a folder with
    ``modules.json`` has none); for a folder without ``modules.json``, ``"CrossEncoder"`` when its ``config.json``
    carries a cross-encoder's activation (sentence-transformers 4's ``sentence_transformers`` entry, the older
    ``sbert_ce_default_activation_function``); ``None`` for a folder sentence-transformers did not write."""
    folder = Path(folder)
    if is_st_folder(folder) or (folder / FAMILY_FILE).is_file():  # (a declaration outlives a lost modules.json)
        declared = read_json(folder / FAMILY_FILE).get("model_type", DENSE_FAMILY)
        return declared if isinstance(declared, str) else repr(declared)
    try:  # a damaged config.json is named by the model checks that read it (csekit.preflight.read_model_config)
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    if isinstance(config.get("sentence_transformers"), dict) or "sbert_ce_default_activation_function" in config:
        return "CrossEncoder"
    return None


def check_family(name: str, folder) -> None:
    """A [`DataError`][csekit.st_folder.DataError] naming the family unless ``folder`` is a dense sentence embedder
    (or no sentence-transformers folder at all): csekit never converts a folder into another family, which is what
    ``SentenceTransformer(folder)`` does with a sparse or cross-encoder folder (it mean-pools their transformer)."""
    family = declared_family(folder)
    if family in (None, DENSE_FAMILY):
        family = module_family(folder)  # a declaration removed or edited: the modules say what the folder is
    if family in (None, DENSE_FAMILY):
        return
    why = OTHER_FAMILIES.get(family, "a family csekit does not read")
    raise DataError(f"{name}: a sentence-transformers {family} folder ({why}); csekit reads dense sentence embedders "
                    f"only and never converts one family into another")


def module_folders(folder, entries: list) -> list:
    """Every folder whose files a pipeline loads, relative to ``folder``: each module's path and, for a Router, the
    sub-module folders its ``router_config.json`` names (each checked to lie inside ``folder``)."""
    folder = Path(folder)
    found = []
    for index, entry in enumerate(entries):
        found.append(entry["path"])
        if module_kind(entry) == "Router":
            router = read_json(folder / entry["path"] / "router_config.json")
            for name in router.get("types") or {}:
                found.append(_module_path(folder, {"path": str(PurePosixPath(entry["path"] or ".") / name)}, index))
    return list(dict.fromkeys(found))


def transformer_folder(folder, entries: list) -> Optional[Path]:
    """The folder of the pipeline's first Transformer module (the root, or ``0_Transformer/`` of the older layout),
    or ``None`` (a Router, a StaticEmbedding)."""
    for entry in entries:
        if module_kind(entry) == "Transformer":
            return Path(folder) / entry["path"]
    return None


def adapter_base(folder, entries: list) -> Optional[str]:
    """The base model a folder's Transformer module adapts when that module is a peft adapter (its
    ``adapter_config.json``'s ``base_model_name_or_path``, what ``--save_adapter`` writes), else ``None``. Such a
    folder loads only through sentence-transformers with peft installed (it downloads the base model and puts the
    adapter in); without either, one line naming the extras."""
    backbone = transformer_folder(folder, entries)
    if backbone is None or not (backbone / ADAPTER_CONFIG).is_file():
        return None
    base = read_json(backbone / ADAPTER_CONFIG).get("base_model_name_or_path") or "an unnamed base model"
    missing = [package for package in ("sentence_transformers", "peft") if importlib.util.find_spec(package) is None]
    if missing:
        raise DataError(f"{folder}: an adapter folder (LoRA weights over {base}), which loads with "
                        f"sentence-transformers and peft; {' and '.join(missing)} not installed: pip install "
                        "'csekit[st,peft]'")
    return base


def module_kind(entry: dict) -> str:
    """``Transformer``, ``Pooling``, ``Dense``... : the class name a module entry's ``type`` ends with."""
    return str(entry.get("type", "")).rsplit(".", 1)[-1]


def _module_path(folder: Path, entry, index: int) -> str:
    path = entry.get("path") if isinstance(entry, dict) else None
    where = f"{folder / MODULES_FILE}: module {index}"
    if path is None:
        kind = module_kind(entry) if isinstance(entry, dict) else repr(entry)
        raise DataError(f"{where} ({kind}) has no path; refused (save the model again with sentence-transformers)")
    if not isinstance(path, str) or "\\" in path:
        raise DataError(f"{where}: path {path!r} is not a sub-folder of the model folder; refused")
    if path == "":
        return path
    parts = PurePosixPath(path).parts
    if PurePosixPath(path).is_absolute() or any(part in (".", "..") for part in path.split("/")) or not parts:
        raise DataError(f"{where}: path {path!r} is not a sub-folder of the model folder; refused")
    target = folder / path
    if target.is_symlink() or (target.exists() and not target.resolve().is_relative_to(folder.resolve())):
        raise DataError(f"{where}: path {path!r} leads outside the model folder; refused")
    return path


def module_entries(folder) -> list:
    """The entries of ``folder/modules.json``, each path checked (see the module docstring); ``[]`` without one."""
    folder = Path(folder)
    if not is_st_folder(folder):
        return []
    try:
        entries = json.loads((folder / MODULES_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise DataError(f"{folder / MODULES_FILE}: unreadable ({type(error).__name__})") from None
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise DataError(f"{folder / MODULES_FILE}: not a list of modules")
    for index, entry in enumerate(entries):
        path = _module_path(folder, entry, index)
        module = folder / path
        if path and module.is_dir() and not list(module.glob("*.safetensors")) and any(
                item.suffix in PICKLE_SUFFIXES for item in module.iterdir()):
            raise DataError(f"{module}: pickled weights only ({module_kind(entry)} module); csekit loads safetensors "
                            "only, since a pickle can run code when loaded")
    return entries


def read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise DataError(f"{path}: unreadable ({type(error).__name__})") from None
    return value if isinstance(value, dict) else {}


def pooling_modes(config: dict) -> list:
    """The modes a Pooling module's ``config.json`` switches on, in either format: sentence-transformers 6's
    ``"pooling_mode": "mean"`` (or a list) and the older ``"pooling_mode_mean_tokens": true`` keys."""
    mode = config.get("pooling_mode")
    if mode is not None:
        return [mode] if isinstance(mode, str) else list(mode)
    return [name for key, name in OLD_POOLING_KEYS.items() if config.get(key)]


def st_settings(folder: Path) -> dict:
    """The pipeline-wide settings: default prompt (its text, or ``None``) and the prompts."""
    top = read_json(folder / FAMILY_FILE)
    prompts = top.get("prompts") or {}
    default = top.get("default_prompt_name")
    return {"prompt": prompts.get(default) if default else None, "prompts": prompts}


def plain_pipeline(name: str, folder: Path, entries: list) -> str:
    """The csekit pooler that computes ``folder``'s pipeline exactly without sentence-transformers, or a
    [`DataError`][csekit.st_folder.DataError] naming the first module or setting it cannot apply."""
    install = "pip install 'csekit[st]' to score it with sentence-transformers itself"
    kinds = [module_kind(entry) for entry in entries]
    if kinds[:2] != ["Transformer", "Pooling"] or entries[0].get("path") != "" or any(
            kind != "Normalize" for kind in kinds[2:]):
        unknown = next((f"module {i} ({kind})" for i, kind in enumerate(kinds)
                        if (i, kind) not in ((0, "Transformer"), (1, "Pooling")) and kind != "Normalize"),
                       "its module order")
        raise DataError(f"{name}: {unknown} of its sentence-transformers pipeline is not applied by csekit's own "
                        f"reader; {install}")
    backbone = read_json(folder / "sentence_bert_config.json")
    changed = [key for key in CHANGING_SETTINGS if backbone.get(key)] + [
        key for key, value in DEFAULT_SETTINGS.items() if backbone.get(key, value) != value]
    if changed:
        raise DataError(f"{name}: module 0 (Transformer) sets {', '.join(changed)} in sentence_bert_config.json, "
                        f"which csekit's own reader does not apply; {install}")
    if st_settings(folder)["prompt"]:
        raise DataError(f"{name}: a default prompt, which csekit's own reader does not apply; {install}")
    modes = pooling_modes(read_json(folder / entries[1]["path"] / "config.json"))
    if len(modes) != 1 or modes[0] not in PLAIN_POOLERS:
        raise DataError(f"{name}: module 1 (Pooling) mode {'+'.join(modes) or 'none'} is not applied by csekit's own "
                        f"reader (mean and cls are); {install}")
    return PLAIN_POOLERS[modes[0]]


def plain_max_length(folder: Path, tokenizer) -> Optional[int]:
    """The length sentence-transformers truncates at: ``max_seq_length`` of ``sentence_bert_config.json``, else
    the tokenizer's ``model_max_length`` (what its Transformer module reads)."""
    recorded = read_json(folder / "sentence_bert_config.json").get("max_seq_length")
    if recorded is not None:
        return recorded
    length = tokenizer.model_max_length
    return length if length < 10**6 else None


def describe_modules(folder: Path, entries: list) -> list:
    """``["Transformer", "Pooling(mean)", "Dense(384->256)", "Normalize"]``: the pipeline, for the results record."""
    described = []
    for entry in entries:
        kind, config = module_kind(entry), read_json(folder / entry.get("path", "") / "config.json")
        if kind == "Pooling":
            kind += f"({'+'.join(map(str, pooling_modes(config)))})"
        elif kind == "Router":
            routes = read_json(folder / entry.get("path", "") / "router_config.json")
            kind += f"(default route: {routes.get('parameters', {}).get('default_route')})"
        elif kind == "Dense" and "in_features" in config:
            kind += f"({config['in_features']}->{config.get('out_features')})"
        described.append(kind)
    return described


def pipeline_name(modules: list) -> str:
    """``"sentence-transformers: Transformer > Pooling(mean) > Normalize"``: the ``pooler`` a results record and a
    card's base-model row name for a sentence-transformers folder (the same with or without the library)."""
    return f"sentence-transformers: {' > '.join(modules)}"


def load_st_embedder(name: str, folder, max_length: Optional[int], batch_size: int, device):
    """``(embed, info)`` for a sentence-transformers folder: ``SentenceTransformer(folder).encode``'s vectors (its
    modules, prompt, length; float32) when sentence-transformers is installed, else ``None`` so the caller applies
    `plain_pipeline`. A module type from outside sentence-transformers is refused (its code is never run)."""
    import numpy as np

    from .modeling.encoding import progress

    folder = Path(folder)
    entries = module_entries(folder)
    for index, entry in enumerate(entries):
        if not str(entry.get("type", "")).startswith("sentence_transformers."):
            raise DataError(f"{name}: module {index} is {entry.get('type')!r}, not a sentence-transformers module; "
                            "csekit runs no other code a folder names")
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        return None
    import torch

    try:
        model = SentenceTransformer(str(folder), device=str(device), local_files_only=True, trust_remote_code=False)
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as error:
        raise DataError(f"{name}: sentence-transformers cannot load it ({str(error).splitlines()[0][:200]})") from None
    model = model.to(torch.float32).eval()
    if max_length is not None:
        model.max_seq_length = max_length
    modules = describe_modules(folder, entries)
    info = {"model": name, "pooler": pipeline_name(modules), "dimension": model.get_embedding_dimension(),
            "modules": modules, "prompt": st_settings(folder)["prompt"], "max_length": model.max_seq_length}

    def embed(sentences, prompt=None):
        # SentenceTransformer.encode's own batches (its longest-first order), run a few batches a call so that the
        # bar is csekit's: titled with what is encoded, and lines rather than redraws away from a terminal; prompt:
        # in place of the folder's default one (None: the folder's)
        sentences = list(sentences)
        prompted = {} if prompt is None else {"prompt": prompt}
        order = np.argsort([-len(sentence) for sentence in sentences], kind="stable")
        chunk = ST_CHUNK_BATCHES * batch_size
        vectors = None
        for start in progress(range(0, len(sentences), chunk), disable=len(sentences) <= 10 * batch_size):
            rows = order[start:start + chunk]
            part = model.encode([sentences[row] for row in rows], batch_size=batch_size, convert_to_numpy=True,
                                show_progress_bar=False, **prompted)
            if vectors is None:
                vectors = np.empty((len(sentences), part.shape[1]), dtype=part.dtype)
            vectors[rows] = part
        return vectors

    return embed, info


__all__ = [
    "ADAPTER_CONFIG", "MODULES_FILE", "PICKLE_SUFFIXES", "adapter_base", "check_family", "declared_family",
    "describe_modules", "is_st_folder", "load_st_embedder", "module_entries", "module_folders", "module_kind",
    "pipeline_name", "plain_max_length", "plain_pipeline", "pooling_modes", "transformer_folder",
]

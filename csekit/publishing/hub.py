"""Publish a csekit model folder to the Hugging Face Hub: exactly the files needed to load it, nothing pickled.

The upload set is the model's files only (checkpoints stay local): safetensors weights, ``config.json`` with
its ``auto_map``, the model code files that ``auto_map`` names (with their same-folder imports), the tokenizer, the
model card, ``eval_results.json``, the JSON training arguments and card figure when present, and the
sentence-transformers layout (``modules.json`` and its module folders). ``*.bin`` /
``training_args.bin`` / optimizer states are never uploaded, so loading the repository never unpickles anything.

Nothing local is published: in the uploaded copies of the JSON records and the card, a local path the run was given
(``/home/me/data/wiki.txt``, ``outputs/run3``) appears as its base name, and the card says so; a Hub id stays as it
is ([`publishable_copy`][csekit.publishing.hub.publishable_copy]).

    files = files_to_push("outputs/simcse")  # validate + list, no network
    # create_repo + upload_folder(allow_patterns=files)
    push_to_hub("outputs/simcse", "me/simcse-minilm")
"""

import json
import os
import shutil
from pathlib import Path
from typing import Optional

from huggingface_hub import HfApi, constants

from ..atomic import private_folder, remove_abandoned, write_json, write_text
from ..errors import DataError
from ..loading import check_safetensors
from ..modeling.sentence_transformers_layout import TOP_LEVEL_FILES as ST_TOP_LEVEL_FILES
from ..preflight import CHECKPOINT_PREFIX, check_repo_id, weight_files
from ..st_folder import PICKLE_SUFFIXES, module_entries
from .figure import CURVE_FILE, FIGURE_FILE
from .model_card import ARGUMENTS_FILE, RESULTS_FILE, load_eval_record, write_model_card
from .model_folder import PATHS_NOTE, recorded_local_paths, strip_local_paths
from .mteb_meta import MODEL_META_FILE, write_model_meta

TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.txt",
    "vocab.json", "merges.txt", "spiece.model", "sentencepiece.bpe.model",
)
OPTIONAL_FILES = (ARGUMENTS_FILE, FIGURE_FILE, CURVE_FILE, MODEL_META_FILE)
# the uploaded files that record what the run was given (paths among them)
RECORD_FILES = ("config.json", "tokenizer_config.json", ARGUMENTS_FILE, RESULTS_FILE, MODEL_META_FILE)
UPLOAD_PREFIX = ".csekit-upload-"
# names never uploaded wherever they are: the Trainer's optimizer, scheduler and random states (pickles) and the
# records of a checkpoint (what a resumption reads)
NEVER_UPLOADED = ("optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json", "csekit_run.json",
                  "training_args.bin")
def published_records(folder: Path, files: list) -> tuple:
    """``({name: parsed record as published}, {local path: base name})`` for the record files among ``files``."""
    recorded, replaced = recorded_local_paths(folder), {}
    records = {name: strip_local_paths(json.loads((folder / name).read_text()), replaced, recorded)
               for name in files if Path(name).name in RECORD_FILES}
    return records, replaced


def publishable_copy(model_dir, files: list, destination: Path) -> dict:
    """``files`` of ``model_dir`` in ``destination`` as they are published: records and card without local paths,
    the other files linked (copied across file systems) with the folder's permissions. Returns ``{path: name}``."""
    folder = Path(model_dir)
    records, replaced = published_records(folder, files)
    for name in files:
        (destination / name).parent.mkdir(parents=True, exist_ok=True)
        if name in records:
            write_json(destination / name, records[name])
        elif name != "README.md":
            try:
                os.link(folder / name, destination / name)
            except OSError:
                shutil.copyfile(folder / name, destination / name)
    if "README.md" in files:
        card = (folder / "README.md").read_text()
        for path in sorted(replaced, key=len, reverse=True):  # a folder's path after the files inside it
            card = card.replace(path, replaced[path])
        write_text(destination / "README.md", card + (PATHS_NOTE if replaced and PATHS_NOTE not in card else ""))
    return replaced


def code_files(folder: Path, auto_map: dict) -> list:
    """The ``.py`` files behind ``auto_map`` plus the same-folder modules they import (transitively)."""
    pending = [reference.split(".")[0] + ".py" for reference in auto_map.values()]
    found = []
    while pending:
        name = pending.pop()
        if name in found:
            continue
        if not (folder / name).is_file():
            raise DataError(f"{folder}: config.json auto_map needs {name}, which is missing (re-save the model)")
        found.append(name)
        for line in (folder / name).read_text().splitlines():
            words = line.split()
            if len(words) > 2 and words[0] == "from" and words[1].startswith(".") and words[1] != ".":
                pending.append(words[1].lstrip(".") + ".py")
    return sorted(found)


def files_to_push(model_dir) -> list:
    """Check that ``model_dir`` is a complete, pickle-free csekit folder and list the files to upload.

    Raises [`DataError`][csekit.publishing.hub.DataError] naming the first missing piece (weights, ``auto_map``, code,
    tokenizer, card,
    ``eval_results.json``) or a truncated or corrupt safetensors file.
    """
    folder = Path(model_dir)
    if not (folder / "config.json").is_file():
        raise DataError(f"{folder}: not a model folder (no config.json)")
    config = json.loads((folder / "config.json").read_text())
    auto_map = config.get("auto_map") or {}
    if "AutoModel" not in auto_map or "AutoConfig" not in auto_map:
        raise DataError(f"{folder}/config.json has no auto_map for AutoConfig/AutoModel; save it with csekit "
                        "(import csekit first) so it loads with trust_remote_code")
    weights = [str(path.relative_to(folder)) for path in weight_files(folder)]
    if not weights:
        raise DataError(f"{folder}: no *.safetensors weights (pickled weights are never uploaded)")
    if weights != ["model.safetensors"]:
        index = folder / "model.safetensors.index.json"
        if not index.is_file():
            raise DataError(f"{folder}: sharded weights without model.safetensors.index.json")
        weights.append(index.name)
    check_safetensors(folder)
    tokenizer = [name for name in TOKENIZER_FILES if (folder / name).is_file()]
    if "tokenizer_config.json" not in tokenizer:
        raise DataError(f"{folder}: no tokenizer (tokenizer_config.json); save the tokenizer next to the model")
    if not (folder / "README.md").is_file():
        raise DataError(f"{folder}: no model card (README.md); run `csekit card {folder}`")
    load_eval_record(folder)
    optional = [name for name in OPTIONAL_FILES if (folder / name).is_file()]
    files = weights + ["config.json"] + code_files(folder, auto_map) + tokenizer + ["README.md", RESULTS_FILE]
    files = publishable(folder, sorted(set(files + optional + sentence_transformers_files(folder))))
    check_loads_as_saved(folder)
    return files


def check_loads_as_saved(folder: Path) -> None:
    """The folder loads with csekit's classes, and its sentence-transformers files say the model its config says
    (the loading's own check, [`LayoutDisagreement`][csekit.modeling.errors.LayoutDisagreement]): what is published
    encodes as what was trained, through ``AutoModel`` and ``SentenceTransformer`` alike."""
    from transformers import AutoModel

    AutoModel.from_pretrained(folder, local_files_only=True)


def sentence_transformers_files(folder: Path) -> list:
    """The sentence-transformers layout's files (``modules.json`` and the files of the module sub-folders it names,
    each path checked by `csekit.st_folder.module_entries`), if any. The root module (path ``""``) adds
    nothing: the folder's own files are listed by name."""
    if not (folder / "modules.json").is_file():
        return []
    files = [name for name in ST_TOP_LEVEL_FILES if (folder / name).is_file()]
    for module in module_entries(folder):
        if module["path"]:
            files += [str(path.relative_to(folder)) for path in sorted((folder / module["path"]).rglob("*"))
                      if path.is_file() or path.is_symlink()]
    return files


def publishable(folder: Path, files: list) -> list:
    """``files`` checked one by one, whatever listed them: a regular file inside ``folder`` (a symbolic link that
    leads outside, or a path through ``..``, is refused in one line), and never a pickle or a checkpoint's file."""
    root = folder.resolve()
    kept = []
    for name in files:
        path = folder / name
        if ".." in Path(name).parts or not path.resolve().is_relative_to(root) or not path.resolve().is_file():
            raise DataError(f"{folder}: {name} is not a file inside the model folder; refused (nothing uploaded)")
        parts = Path(name).parts
        if path.suffix in PICKLE_SUFFIXES or any(part.startswith(CHECKPOINT_PREFIX) for part in parts) or any(
                part in NEVER_UPLOADED for part in parts):
            continue
        kept.append(name)
    return kept


def push_plan(model_dir, repo_id: str, private: bool = False, refresh_card: bool = True) -> str:
    """What ``csekit push --dry-run`` prints: the repository, each file with its size, the total, and what the real
    push changes on the way (the card re-rendered, local paths shown by base name, the MTEB record's revision);
    nothing is written or uploaded."""
    folder = Path(model_dir)
    files = files_to_push(folder)
    sizes = {name: (folder / name).stat().st_size for name in files}
    replaced = published_records(folder, files)[1]
    lines = [f"would upload {len(files)} files ({human_size(sum(sizes.values()))}) to https://huggingface.co/{repo_id} "
             f"({'private' if private else 'public'}; created if it does not exist):"]
    lines += [f"  {name}  {human_size(size)}" for name, size in sizes.items()]
    lines.append("the real push also:")
    lines.append(f"  re-renders README.md with {repo_id} in its loading snippets" if refresh_card
                 else "  uploads README.md as it is (--keep-card)")
    lines.append(f"  shows {len(replaced)} local path(s) of the records and the card by base name: "
                 + ", ".join(f"{path} -> {name}" for path, name in sorted(replaced.items())) if replaced
                 else "  finds no local path to hide in the records")
    lines.append(f"  writes the pushed commit into the local {MODEL_META_FILE} as its revision")
    return "\n".join(lines)


def human_size(size: int) -> str:
    """``1.2 KiB``, ``87.2 MiB``: a byte count for a reader."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024


def push_to_hub(
    model_dir,
    repo_id: str,
    private: bool = False,
    refresh_card: bool = True,
    commit_message: str = "Upload csekit model",
    api: Optional[HfApi] = None,
):
    """Create ``repo_id`` (if needed) and upload the folder's publishable files in one commit.

    Args:
        refresh_card: re-render README.md with ``repo_id`` in the loading snippets (keeps an existing figure).
        api: an `HfApi` (default: one using the saved token / ``HF_TOKEN``).
    Returns:
        ``(commit_info, files)``.
    """
    check_repo_id(repo_id)
    if constants.is_offline_mode():
        raise DataError("HF_HUB_OFFLINE is set, so the Hub cannot be reached; unset it to push")
    if refresh_card:
        write_model_card(model_dir, repo_id=repo_id, figure="never")
    files = files_to_push(model_dir)
    remove_abandoned(model_dir, UPLOAD_PREFIX)
    upload = private_folder(model_dir, UPLOAD_PREFIX)  # beside the weights, so they are linked, not copied
    try:
        publishable_copy(model_dir, files, upload)
        api = api or HfApi()
        api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        commit = api.upload_folder(
            repo_id=repo_id, repo_type="model", folder_path=str(upload), allow_patterns=files,
            commit_message=commit_message,
        )
    finally:
        shutil.rmtree(upload, ignore_errors=True)
    revision = getattr(commit, "oid", None)
    if isinstance(revision, str):  # the local copy names the revision the Hub now serves (a results submission's)
        write_model_meta(model_dir, repo_id=repo_id, revision=revision)
    return commit, files


__all__ = ["files_to_push", "publishable_copy", "push_plan", "push_to_hub"]

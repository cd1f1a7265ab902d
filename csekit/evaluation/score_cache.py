"""The score cache: a model's STS test scores kept under its revision and the protocol they were measured with, so a
run does not score the same base model again.

An entry is ``<cache>/<key>.json``: the inputs its key was derived from and the scores. Its key
([`ScoreCache.key`][csekit.evaluation.score_cache.ScoreCache.key]) combines

* the model's revision ([`model_revision`][csekit.evaluation.score_cache.model_revision]): a sha256 over every file
  the model loads (weights, configs, tokenizer, every module folder ``modules.json`` or a Router names, whatever its
  name; not the card, scores, figures, checkpoints or logs beside it), so a folder or a Hub snapshot edited in place
  is a new revision; a snapshot's commit is named too;
* the protocol: the evaluator's aggregation, split and per-task content hashes
  ([STSEvaluator.fingerprint][csekit.evaluation.sts.STSEvaluator.fingerprint]), and the representation scored;
* the library versions (csekit, torch, transformers, ...) and the device type, which change the last digits.

Nothing is trusted as found: an entry is used only when the inputs it holds are those of the lookup, and its scores
pass the caller's check (the evaluator's tasks, finite numbers in range); anything else is scored again and
overwritten.

The folder is ``$CSEKIT_SCORE_CACHE``, else ``~/.cache/csekit/scores`` (``$XDG_CACHE_HOME`` honoured).
"""

import hashlib
import json
import logging
import os
from fnmatch import fnmatch
from pathlib import Path, PurePosixPath
from typing import Callable, Optional

from ..atomic import write_json
from ..fingerprint import combine
from ..loading import snapshot_of
from ..st_folder import module_entries, module_folders
from .protocol import library_versions

logger = logging.getLogger(__name__)
# files beside a model that do not change its vectors
NOT_THE_MODEL = ("README.md", "eval_results.json", "training_args.json", "comparison.md", "mteb_model_meta.json")
# sub-folders beside a model that do not change its vectors, unless a module lives there: mteb's results files
# (`csekit evaluate --mteb`), a run's checkpoints and TensorBoard logs
NOT_MODEL_FOLDERS = ("results", "checkpoint-*", "runs")


def default_cache_dir() -> Path:
    """``$CSEKIT_SCORE_CACHE``, else ``csekit/scores`` under ``$XDG_CACHE_HOME`` (default ``~/.cache``)."""
    if os.environ.get("CSEKIT_SCORE_CACHE"):
        return Path(os.environ["CSEKIT_SCORE_CACHE"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "csekit" / "scores"


def model_files(folder: Path) -> list:
    """The files of model ``folder`` that shape its vectors, sorted: every file but those of ``NOT_THE_MODEL``,
    figures, hidden entries and the ``NOT_MODEL_FOLDERS`` sub-folders, and always every file of a module folder
    the pipeline names (`csekit.st_folder.module_folders`), whatever its name."""
    modules = {PurePosixPath(path).parts[0] for path in module_folders(folder, module_entries(folder)) if path}
    files = []
    for path in sorted(folder.rglob("*")):
        parts = path.relative_to(folder).parts
        if not path.is_file():
            continue
        if len(parts) > 1 and parts[0] in modules:
            files.append(path)
        elif not (path.name in NOT_THE_MODEL or path.suffix == ".png" or any(part.startswith(".") for part in parts)
                  or (len(parts) > 1 and any(fnmatch(parts[0], pattern) for pattern in NOT_MODEL_FOLDERS))):
            files.append(path)
    return files


def model_revision(folder) -> str:
    """``sha256:<digest>`` over the names and bytes of the model's files
    ([`model_files`][csekit.evaluation.score_cache.model_files]; scoring a folder with ``--mteb``, which writes
    ``results/`` into it, keeps its revision), prefixed ``hub:<repo>@<commit>+`` for a Hugging Face cache snapshot
    (whose files a user can still edit in place)."""
    folder = Path(folder).resolve()
    digest = hashlib.sha256()
    for path in model_files(folder):
        digest.update(f"{path.relative_to(folder).as_posix()}|{path.stat().st_size}|".encode())
        with open(path, "rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
    snapshot = snapshot_of(folder)
    return (f"hub:{snapshot[0]}@{snapshot[1]}+" if snapshot else "") + f"sha256:{digest.hexdigest()}"


class ScoreCache:
    """STS test scores by (model revision, protocol, versions, device); see the module docstring."""

    def __init__(self, folder=None):
        self.folder = Path(folder).expanduser() if folder is not None else default_cache_dir()

    def inputs(self, model_folder, evaluator, device: Optional[str] = None, **settings) -> dict:
        """What an entry's key is derived from: the model's revision, ``evaluator``'s protocol (an
        [STSEvaluator][csekit.evaluation.sts.STSEvaluator]), the representation ``settings`` (``pooler=...``), the
        library versions and the device (default: where csekit would run it)."""
        if device is None:
            from ..loading import resolve_device

            device = resolve_device(None).type
        return json.loads(json.dumps({"revision": model_revision(model_folder), "protocol": evaluator.fingerprint(),
                                      "settings": settings, "versions": library_versions(), "device": device},
                                     sort_keys=True, default=str))

    def key(self, model_folder, evaluator, device: Optional[str] = None, **settings) -> str:
        """The entry's name for the model at ``model_folder`` scored by ``evaluator``: a hash of
        [`inputs`][csekit.evaluation.score_cache.ScoreCache.inputs]."""
        return key_of(self.inputs(model_folder, evaluator, device, **settings))

    def path(self, key: str) -> Path:
        """The entry's file."""
        return self.folder / f"{key}.json"

    def get(self, inputs: dict, check: Callable[[dict], bool]) -> Optional[dict]:
        """The scores kept for ``inputs``, or ``None``: when there is no entry, when it cannot be read, when the
        inputs it holds are not ``inputs`` (a file copied or edited under another key) or when ``check(scores)`` is
        false."""
        path = self.path(key_of(inputs))
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(entry, dict) or entry.get("inputs") != inputs:
            logger.warning("%s: a score cache entry for other inputs than its name says; scored again", path)
            return None
        scores = entry.get("scores")
        if not isinstance(scores, dict) or not check(scores):
            logger.warning("%s: a score cache entry whose scores fail their check; scored again", path)
            return None
        return scores

    def put(self, inputs: dict, scores: dict) -> None:
        """Keep ``scores`` for ``inputs`` (written atomically); a cache that cannot be written is logged and
        skipped."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_json(self.path(key_of(inputs)), {"inputs": inputs, "scores": scores})
        except OSError as error:
            logger.warning("the score cache %s cannot be written (%s); scores are not kept", self.folder, error)


def key_of(inputs: dict) -> str:
    """An entry's name: a hash of its inputs."""
    return combine(json.dumps(inputs, sort_keys=True))[:32]


__all__ = ["ScoreCache", "default_cache_dir", "key_of", "model_files", "model_revision"]

"""The score cache: a model's STS test scores kept under its revision and the protocol they were measured with, so a
run does not score the same base model again.

An entry is ``<cache>/<key>.json``; the key ([`ScoreCache.key`][csekit.evaluation.score_cache.ScoreCache.key]) combines

* the model's revision: the commit of a Hugging Face cache snapshot (``.../snapshots/<commit>``, which the Hub never
  changes), otherwise a sha256 over the folder's files that shape its vectors (weights, configs, tokenizer, module
  folders; not its card, scores or figures), so a folder overwritten in place is a new revision;
* the protocol: the evaluator's aggregation, split and per-task content hashes
  ([STSEvaluator.fingerprint][csekit.evaluation.sts.STSEvaluator.fingerprint]);
* the library versions (csekit, torch, transformers, ...) and the device type, which change the last digits.

The folder is ``$CSEKIT_SCORE_CACHE``, else ``~/.cache/csekit/scores`` (``$XDG_CACHE_HOME`` honoured). An entry that
cannot be read is ignored and written again.
"""

import hashlib
import json
import logging
import os
from fnmatch import fnmatch
from pathlib import Path
from typing import Optional

from ..atomic import write_json
from ..fingerprint import combine
from ..loading import snapshot_of
from .protocol import library_versions

logger = logging.getLogger(__name__)
# files beside a model that do not change its vectors
NOT_THE_MODEL = ("README.md", "eval_results.json", "training_args.json", "comparison.md", "mteb_model_meta.json")
# sub-folders beside a model that do not change its vectors: mteb's results files (`csekit evaluate --mteb`), a run's
# checkpoints and TensorBoard logs
NOT_MODEL_FOLDERS = ("results", "checkpoint-*", "runs")


def default_cache_dir() -> Path:
    """``$CSEKIT_SCORE_CACHE``, else ``csekit/scores`` under ``$XDG_CACHE_HOME`` (default ``~/.cache``)."""
    if os.environ.get("CSEKIT_SCORE_CACHE"):
        return Path(os.environ["CSEKIT_SCORE_CACHE"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "csekit" / "scores"


def model_revision(folder) -> str:
    """``hub:<repo>@<commit>`` for a Hugging Face cache snapshot, else ``sha256:<digest>`` over the folder's files
    (names and bytes) less those in ``NOT_THE_MODEL``, figures, hidden entries and the sub-folders of
    ``NOT_MODEL_FOLDERS`` (so scoring a folder with ``--mteb``, which writes ``results/`` into it, keeps its
    revision)."""
    folder = Path(folder).resolve()
    snapshot = snapshot_of(folder)
    if snapshot:
        return f"hub:{snapshot[0]}@{snapshot[1]}"
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        parts = path.relative_to(folder).parts
        relative = "/".join(parts)
        if (not path.is_file() or path.name in NOT_THE_MODEL or path.suffix == ".png"
                or any(part.startswith(".") for part in parts)
                or (len(parts) > 1 and any(fnmatch(parts[0], pattern) for pattern in NOT_MODEL_FOLDERS))):
            continue
        digest.update(f"{relative}|{path.stat().st_size}|".encode())
        with open(path, "rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
    return f"sha256:{digest.hexdigest()}"


class ScoreCache:
    """STS test scores by (model revision, protocol, versions, device); see the module docstring."""

    def __init__(self, folder=None):
        self.folder = Path(folder).expanduser() if folder is not None else default_cache_dir()

    def key(self, model_folder, evaluator, device: Optional[str] = None) -> str:
        """The entry's name for the model at ``model_folder`` scored by ``evaluator`` (an
        [STSEvaluator][csekit.evaluation.sts.STSEvaluator]) on ``device`` (default: where csekit would run it)."""
        if device is None:
            from ..loading import resolve_device

            device = resolve_device(None).type
        protocol = json.dumps(evaluator.fingerprint(), sort_keys=True)
        return combine(model_revision(model_folder), protocol, json.dumps(library_versions(), sort_keys=True),
                       device)[:32]

    def path(self, key: str) -> Path:
        """The entry's file."""
        return self.folder / f"{key}.json"

    def get(self, key: str) -> Optional[dict]:
        """The cached value, or ``None`` when there is none (or it cannot be read)."""
        try:
            value = json.loads(self.path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    def put(self, key: str, value: dict) -> None:
        """Keep ``value`` (written atomically); a cache that cannot be written is logged and skipped."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_json(self.path(key), value)
        except OSError as error:
            logger.warning("the score cache %s cannot be written (%s); scores are not kept", self.folder, error)


__all__ = ["ScoreCache", "default_cache_dir", "model_revision"]

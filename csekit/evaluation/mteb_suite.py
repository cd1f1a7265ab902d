"""MTEB tasks through the ``mteb`` package (``pip install 'csekit[mteb]'``): ``csekit evaluate MODEL --mteb STS12``.

The model is the same ``embed`` that scores the SentEval suites (a csekit model's ``encode``, or a Hugging Face
encoder with its pooler), wrapped in the encoder protocol mteb 2 expects (`CSEKitMTEBEncoder`: texts of mteb's
batches in, a ``(n, d)`` array out, cosine similarity). mteb is never asked to resolve the model, so a local folder
costs no Hub call. Task data is mteb's: each task's Hub dataset at the revision mteb pins, read through the Hugging
Face datasets cache, so with ``HF_HUB_OFFLINE=1`` a task runs from the cache of an earlier online run. Each task's
data is read when the task is named ([`load_mteb_tasks`][csekit.evaluation.mteb_suite.load_mteb_tasks]), before any
other suite runs. mteb's own result cache
is not read (every call scores); [`write_mteb_results`][csekit.evaluation.mteb_suite.write_mteb_results] writes mteb's
results files, in the layout of mteb's
results repository (``results/<model>/<revision>/<task>.json`` and ``model_meta.json``), where the caller says.

Instructions per task follow mteb's own rules (`mteb_prompts`): a dict of prompts keyed as mteb keys a model's
``model_prompts`` (a task name, a task type, ``query`` / ``document``, or ``<task or type>-<query|document>``),
given with ``--mteb-prompts FILE``, over the prompts the folder's sentence-transformers config names (as mteb's own
sentence-transformers wrapper takes ``model.prompts``). For each batch mteb's ``get_prompt_name`` picks one, which
replaces the model's default prompt; where none applies the model encodes as it always does.

Results are kept under mteb's task names and dataset ids, apart from the SentEval scores: MTEB's ``SICK-R`` is the
9,927-pair ``mteb/sickr-sts``, SentEval's ``SICKRelatedness`` the 4,927-pair test file; the two are different
numbers.
"""

import warnings
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from ..errors import DataError
from ..preflight import is_csekit_model


def _require_mteb():
    try:
        import mteb
    except ImportError:
        raise DataError("--mteb needs the mteb package: pip install 'csekit[mteb]'") from None
    return mteb


def model_meta(model_name: str, path: str):
    """mteb's ``ModelMeta`` of the scored model: a csekit folder's full record
    ([`csekit.publishing.mteb_meta.model_meta_record`][csekit.publishing.mteb_meta.model_meta_record]), else the name,
    revision and cosine similarity. The
    name is the Hub id of a Hub model ([`csekit.loading.hub_id_of`][csekit.loading.hub_id_of]: a Hub id, the embedded
    MiniLM, a cache
    snapshot), the repository a folder was pushed to (its ``mteb_model_meta.json``, written by ``csekit push``), else
    ``csekit/<folder>``; the revision is the snapshot's commit, else the first 40 hex digits of the folder's content
    hash ([model_revision][csekit.evaluation.score_cache.model_revision]), so results of
    different weights never share a revision."""
    _require_mteb()
    from mteb.models.model_meta import ModelMeta, ScoringFunction

    from ..loading import hub_id_of, snapshot_of
    from ..publishing.model_card import read_json
    from ..publishing.mteb_meta import MODEL_META_FILE
    from .score_cache import model_revision

    folder = Path(path)
    local = Path(model_name).exists()
    pushed = {}
    if local and (folder / MODEL_META_FILE).is_file():  # a damaged file is one line (read_json)
        recorded = read_json(folder / MODEL_META_FILE)
        pushed = recorded if recorded.get("revision") else {}
    name = hub_id_of(model_name) or pushed.get("name") or f"csekit/{Path(model_name.rstrip('/')).name}"
    snapshot = snapshot_of(folder)
    revision = snapshot[1] if snapshot else model_revision(folder).partition(":")[2][:40]
    if is_csekit_model(folder):
        from ..publishing.mteb_meta import model_meta_record

        return ModelMeta.model_validate(model_meta_record(folder, repo_id=None if local else model_name, name=name,
                                                          revision=revision))
    return ModelMeta.create_empty({"name": name, "revision": revision, "similarity_fn_name": ScoringFunction.COSINE,
                                   "framework": ["PyTorch"]})


def mteb_prompts(path, given: Optional[dict] = None) -> dict:
    """The prompts mteb picks from for each task (its ``model_prompts``): ``given`` (``--mteb-prompts``) over the
    prompts of the folder's ``config_sentence_transformers.json``, as mteb's sentence-transformers wrapper merges
    them (``given`` wins whole). Keys mteb does not read are left out of the folder's (its ``default``, which the
    model applies anyway) and are one line in ``given``, as are prompts that are not text."""
    _require_mteb()
    from mteb.models.abs_encoder import AbsEncoder

    from ..st_folder import FAMILY_FILE, read_json

    if given is not None:
        if not isinstance(given, dict) or not all(isinstance(value, str) and value.strip() for value in
                                                  given.values()):
            raise DataError("--mteb-prompts: a JSON object of non-blank prompts, keyed by task name, task type, "
                            "query / document, or <task or type>-<query|document>")
        unread = sorted(set(given) - set(readable_prompts(AbsEncoder, given)))
        if unread:
            raise DataError(f"--mteb-prompts: {', '.join(unread)}: not keys mteb reads (a task name, a task type, "
                            "query / document, or <task or type>-<query|document>)")
        return dict(given)
    settings = Path(path) / FAMILY_FILE
    own = (read_json(settings).get("prompts") or {}) if settings.is_file() else {}
    return readable_prompts(AbsEncoder, {key: value for key, value in own.items() if isinstance(value, str) and value})


def readable_prompts(encoder_class, prompts: dict) -> dict:
    """The entries of ``prompts`` whose keys mteb reads (its ``validate_task_to_prompt_name``), without the warning
    and log lines mteb writes for the others (each lists every task mteb knows)."""
    import logging

    quiet = logging.getLogger("mteb")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            resolved, _ = encoder_class.validate_task_to_prompt_name(prompts, raise_for_invalid_keys=False)
    finally:
        quiet.setLevel(level)
    return dict(resolved or {})


def mteb_encoder(embed: Callable[[list], np.ndarray], meta, prompts: Optional[dict] = None):
    """An mteb encoder (``AbsEncoder``) whose ``encode`` returns ``embed`` of the batches' texts; ``meta`` is its
    ``ModelMeta`` ([`model_meta`][csekit.evaluation.mteb_suite.model_meta]). ``prompts``
    ([`mteb_prompts`][csekit.evaluation.mteb_suite.mteb_prompts]): the one mteb's ``get_prompt_name`` picks for a
    task and prompt type is given to ``embed`` in place of the model's own."""
    _require_mteb()
    from mteb.models.abs_encoder import AbsEncoder, get_prompt_name

    class CSEKitMTEBEncoder(AbsEncoder):
        def __init__(self):
            self.model = None
            self.mteb_model_meta = meta
            self.model_prompts = prompts or None

        def encode(self, inputs, *, task_metadata, hf_split, hf_subset, prompt_type=None, **kwargs):
            texts = [text for batch in inputs for text in batch["text"]]
            name = get_prompt_name(self.model_prompts, task_metadata, prompt_type)
            vectors = embed(texts, self.model_prompts[name]) if name else embed(texts)
            return np.asarray(vectors, dtype=np.float32)

    return CSEKitMTEBEncoder()


def load_mteb_tasks(task_names: Sequence[str]) -> list:
    """mteb's task objects, with their data read: an unknown name, or data that cannot be had (not in the cache
    offline, not on the Hub), is a one-line error before any work. A name mteb marks as superseded is
    scored as asked, with a warning naming its successor (leaderboards show the successor)."""
    mteb = _require_mteb()
    try:
        tasks = [mteb.get_task(name) for name in task_names]
    except (KeyError, ValueError) as error:
        raise DataError(f"--mteb: {str(error).splitlines()[0]}") from None
    for task in tasks:
        successor = getattr(task, "superseded_by", None)
        if successor:
            warnings.warn(f"--mteb {task.metadata.name}: mteb marks this task superseded by {successor}; score "
                          f"{successor} for the current leaderboards")
        try:
            task.load_data()
        except Exception as error:  # datasets' and the Hub client's many errors: all mean "not to be had"
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise DataError(f"--mteb {task.metadata.name}: its data ({task.metadata.dataset['path']}) cannot be "
                            f"read: {reason}; the task data comes from the Hub through the Hugging Face datasets "
                            "cache: run once online, then HF_HUB_OFFLINE=1 works") from None
    return tasks


def evaluate_mteb(embed: Callable[[list], np.ndarray], meta, tasks: list, prompts: Optional[dict] = None) -> tuple:
    """``({task: main score x100}, {"version", "tasks": {task: {"dataset", "revision", "splits", "main_score"}}},
    mteb's ModelResult)`` for mteb task objects ([`load_mteb_tasks`][csekit.evaluation.mteb_suite.load_mteb_tasks]) and
    the model's ``ModelMeta``
    ([`model_meta`][csekit.evaluation.mteb_suite.model_meta]); with ``prompts``
    ([`mteb_prompts`][csekit.evaluation.mteb_suite.mteb_prompts]) the protocol holds them."""
    mteb = _require_mteb()
    try:
        result = mteb.evaluate(mteb_encoder(embed, meta, prompts), tasks, cache=None, show_progress_bar=False)
    except ConnectionError as error:
        raise DataError(f"--mteb: {error}; the task data is read from the Hub through the Hugging Face datasets "
                        "cache: run once online, then HF_HUB_OFFLINE=1 works") from None
    scores = {task.task_name: round(100 * float(task.get_score()), 2) for task in result.task_results}
    protocol = {task.metadata.name: {"dataset": task.metadata.dataset["path"],
                                     "revision": task.metadata.dataset["revision"],
                                     "splits": list(task.metadata.eval_splits),
                                     "main_score": task.metadata.main_score} for task in tasks}
    return scores, {"version": mteb.__version__, "tasks": protocol, **({"prompts": prompts} if prompts else {})}, result


def write_mteb_results(result, meta, folder) -> list:
    """mteb's results files of ``result`` (``evaluate_mteb``'s ModelResult) under ``folder``, as mteb's results
    repository lays them out: ``results/<name>/<revision>/<task>.json`` beside ``model_meta.json``. Returns the
    task files."""
    _require_mteb()
    from mteb.cache import ResultCache

    cache = ResultCache(Path(folder))
    for task_result in result.task_results:
        cache.save_to_cache(task_result, meta)
    return [cache.get_task_result_path(task.task_name, meta) for task in result.task_results]


__all__ = ["evaluate_mteb", "load_mteb_tasks", "model_meta", "mteb_encoder", "mteb_prompts", "write_mteb_results"]

"""MTEB tasks through the ``mteb`` package (``pip install 'csekit[mteb]'``): ``csekit evaluate MODEL --mteb STS12``.

The model is the same ``embed`` that scores the SentEval suites (a csekit model's ``encode``, or a Hugging Face
encoder with its pooler), wrapped in the encoder protocol mteb 2 expects (:class:`CSEKitMTEBEncoder`: texts of mteb's
batches in, a ``(n, d)`` array out, cosine similarity). mteb is never asked to resolve the model, so a local folder
costs no Hub call. Task data is mteb's: each task's Hub dataset at the revision mteb pins, read through the Hugging
Face datasets cache, so with ``HF_HUB_OFFLINE=1`` a task runs from the cache of an earlier online run. mteb's own
result cache is not used (every call scores), and nothing is written outside the record csekit returns.

Results are kept under mteb's task names and dataset ids, apart from the SentEval scores: MTEB's ``SICK-R`` is the
9,927-pair ``mteb/sickr-sts``, SentEval's ``SICKRelatedness`` the 4,927-pair test file; the two are different
numbers.
"""

from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..errors import DataError


def _require_mteb():
    try:
        import mteb
    except ImportError:
        raise DataError("--mteb needs the mteb package: pip install 'csekit[mteb]'") from None
    return mteb


def mteb_encoder(embed: Callable[[list], np.ndarray], model_name: str):
    """An mteb encoder (``AbsEncoder``) whose ``encode`` returns ``embed`` of the batches' texts."""
    _require_mteb()
    from mteb.models.abs_encoder import AbsEncoder
    from mteb.models.model_meta import ModelMeta, ScoringFunction

    class CSEKitMTEBEncoder(AbsEncoder):
        def __init__(self):
            self.model = None
            self.mteb_model_meta = ModelMeta.create_empty({
                "name": f"csekit/{Path(model_name.rstrip('/')).name or model_name}", "revision": "local",
                "similarity_fn_name": ScoringFunction.COSINE, "framework": ["PyTorch"]})

        def encode(self, inputs, *, task_metadata, hf_split, hf_subset, prompt_type=None, **kwargs):
            texts = [text for batch in inputs for text in batch["text"]]
            return np.asarray(embed(texts), dtype=np.float32)

    return CSEKitMTEBEncoder()


def load_mteb_tasks(task_names: Sequence[str]) -> list:
    """mteb's task objects (no data is read yet); an unknown name is a one-line error."""
    mteb = _require_mteb()
    try:
        return [mteb.get_task(name) for name in task_names]
    except (KeyError, ValueError) as error:
        raise DataError(f"--mteb: {str(error).splitlines()[0]}") from None


def evaluate_mteb(embed: Callable[[list], np.ndarray], model_name: str, tasks: list) -> tuple:
    """``({task: main score x100}, {"version", "tasks": {task: {"dataset", "revision", "splits", "main_score"}}})``
    for mteb task objects (:func:`load_mteb_tasks`)."""
    mteb = _require_mteb()
    try:
        result = mteb.evaluate(mteb_encoder(embed, model_name), tasks, cache=None, show_progress_bar=False)
    except ConnectionError as error:
        raise DataError(f"--mteb: {error}; the task data is read from the Hub through the Hugging Face datasets "
                        "cache: run once online, then HF_HUB_OFFLINE=1 works") from None
    scores = {task.task_name: round(100 * float(task.get_score()), 2) for task in result.task_results}
    protocol = {task.metadata.name: {"dataset": task.metadata.dataset["path"],
                                     "revision": task.metadata.dataset["revision"],
                                     "splits": list(task.metadata.eval_splits),
                                     "main_score": task.metadata.main_score} for task in tasks}
    return scores, {"version": mteb.__version__, "tasks": protocol}


__all__ = ["evaluate_mteb", "load_mteb_tasks", "mteb_encoder"]

"""Evaluation to the published protocols: STS (SentEval "all"), SentEval transfer, short-text clustering, embedding
geometry, and ``load_embedder`` to score any encoder. Each suite is one module; scikit-learn loads with the suites
that use it, not with this package."""

from .encoders import load_embedder
from .sts import STS_TASKS, STSEvaluator

__all__ = ["STS_TASKS", "STSEvaluator", "load_embedder"]

"""Evaluation to the published protocols: STS (SentEval "all"), SentEval transfer, short-text clustering, embedding
geometry, and ``load_embedder`` to score any encoder. Each suite is one module; scikit-learn loads with the suites
that use it, not with this package."""

from importlib import import_module

_LAZY = {"load_embedder": ".encoders", "STS_TASKS": ".sts", "STSEvaluator": ".sts"}


def __getattr__(name):  # PEP 562: the command line's parsers import this package without torch
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["STS_TASKS", "STSEvaluator", "load_embedder"]

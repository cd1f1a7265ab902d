"""Training-free sentence-embedding extraction (Stankevičius & Lukoševičius 2024): token-state sources, idf and
bias weighting, prompt templates, post-processing, and the grid that scores every combination. The names below are
imported on first use, so the ``csekit extract`` parser reads `settings` without torch."""

from importlib import import_module

_LAZY = dict.fromkeys(("ExtractionSetting", "Extractor", "HiddenStateCache", "load_reference", "load_source"),
                      ".extractor")


def __getattr__(name):  # PEP 562
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = sorted(_LAZY)

"""Training-free sentence-embedding extraction (Stankevičius & Lukoševičius 2024): token-state sources, idf and
bias weighting, prompt templates, post-processing, and the grid that scores every combination."""

from .extractor import ExtractionSetting, Extractor, HiddenStateCache, load_reference, load_source

__all__ = ["ExtractionSetting", "Extractor", "HiddenStateCache", "load_reference", "load_source"]

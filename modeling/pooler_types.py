"""The pooler names every csekit model, ``csekit evaluate --pooler`` and the recipes accept. The module imports
nothing, so the command line lists them without loading torch."""

POOLER_TYPES = ("cls", "cls_before_pooler", "avg", "avg_first_last", "avg_top2", "layers")

__all__ = ["POOLER_TYPES"]

"""The errors a model folder raises that are about the folder a user gave, not a bug: each message is one line.
Only the standard library (this file travels with the model code); ``csekit``'s commands report them as bad input
(exit 2)."""


class FolderInUse(ValueError):
    """A folder another process is writing: its lock is held."""


class LayoutDisagreement(ValueError):
    """A csekit folder whose sentence-transformers files say another model than its config: loaded either way, the
    two libraries would give different vectors."""


class TokenizerUnfit(ValueError):
    """A decoder's tokenizer that cannot pad or be pooled as csekit trains decoders (no end-of-sequence token)."""


__all__ = ["FolderInUse", "LayoutDisagreement", "TokenizerUnfit"]

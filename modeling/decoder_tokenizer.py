"""A decoder backbone's tokenizer, made ready to pad and pool as csekit trains decoders (Qwen3-Embedding and
e5-mistral prepare theirs so). The model applies it to a tokenizer it loads itself; ``csekit.preflight`` applies it to
the recipes' and trainers' tokenizers. Only the tokenizer's own API: this file travels with the model code."""

import logging
from typing import Optional

from .errors import TokenizerUnfit
from .pooler_types import DECODER_BACKBONES

logger = logging.getLogger(__name__)
# a sentence every check tokenizes (special tokens around it, unknown-token probes)
PROBE_SENTENCE = "A man is playing a guitar on the street."


def prepare_decoder_tokenizer(tokenizer, backbone_type: Optional[str], pooler_type: Optional[str], name: str):
    """Make a decoder's (``DECODER_BACKBONES``) ``tokenizer`` ready to train on and encode with, in place; an
    encoder's is returned as it is. A tokenizer saved by csekit is ready already and stays as it is.

    * a pad token when it has none: its end-of-sequence token (pooling reads the attention mask, never the ids, so a
      padded end-of-sequence token is never taken for the sentence's own);
    * for ``last_token`` pooling, the end-of-sequence token appended to every sentence, by the tokenizer itself
      (its post-processor, saved with it): ``SentenceTransformer(folder)`` then pools the same token.

    Raises [`TokenizerUnfit`][csekit.modeling.errors.TokenizerUnfit] when it has no end-of-sequence token to pad
    with or pool, or when its special tokens cannot be read around a sentence."""
    if backbone_type not in DECODER_BACKBONES:
        return tokenizer
    eos = tokenizer.eos_token
    if eos is None and (pooler_type == "last_token" or tokenizer.pad_token is None):
        need = "last-token pooling reads" if pooler_type == "last_token" else "padding needs"
        raise TokenizerUnfit(f"{name}: its tokenizer has no end-of-sequence token, which {need}; set one "
                             "(tokenizer.eos_token = '<|endoftext|>', the model's own) and save it with the model")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = eos
    if pooler_type == "last_token" and tokenizer(PROBE_SENTENCE)["input_ids"][-1] != tokenizer.eos_token_id:
        append_end_of_sequence(tokenizer, name)
    return tokenizer


def append_end_of_sequence(tokenizer, name: str) -> None:
    """Set ``tokenizer``'s post-processor to its own special tokens before a sentence, then the end-of-sequence token
    after it (and after each of a pair), keeping what it added before."""
    from tokenizers.processors import TemplateProcessing

    plain = tokenizer(PROBE_SENTENCE, add_special_tokens=False)["input_ids"]
    full = tokenizer(PROBE_SENTENCE)["input_ids"]
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or full[len(full) - len(plain):] != plain:
        raise TokenizerUnfit(f"{name}: cannot append the end-of-sequence token that last-token pooling reads (its "
                             "tokenizer is not a fast tokenizer with special tokens before the sentence only); save "
                             "a tokenizer that appends it, or use --pooler_type avg")
    prefix = tokenizer.convert_ids_to_tokens(full[: len(full) - len(plain)])
    eos = tokenizer.eos_token
    backend.post_processor = TemplateProcessing(
        single=" ".join([*prefix, "$A", eos]), pair=" ".join([*prefix, "$A", eos, "$B:1", f"{eos}:1"]),
        special_tokens=sorted({(token, tokenizer.convert_tokens_to_ids(token)) for token in (*prefix, eos)}))
    logger.info("%s: its tokenizer appends %s to every sentence (last-token pooling reads it)", name, eos)


__all__ = ["PROBE_SENTENCE", "append_end_of_sequence", "prepare_decoder_tokenizer"]

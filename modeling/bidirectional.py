"""Bidirectional attention for a decoder backbone, LLM2Vec's conversion (BehnamGhader et al., 2024): every token
attends to every real token of its sentence, the causal mask replaced by the padding mask alone.

It goes through transformers' own switch, without copying model code: a config whose ``is_causal`` is ``False``
builds the bidirectional mask (``masking_utils.create_causal_mask``), and each attention module's ``is_causal`` tells
SDPA and flash attention not to add the causal triangle when no mask is built (a batch without padding). LLM2Vec's
``*BiModel`` classes set the same attribute on subclassed attention layers and pass a padding-only 4D mask;
tests/test_bidirectional.py compares the two on the same weights in float64.

sentence-transformers' ``Transformer`` module loads a decoder causal whatever its config says, so a bidirectional
model gets no sentence-transformers files (``sentence_transformers_layout_problem``); ``AutoModel`` (csekit
registered, or ``trust_remote_code``) is its loader, and ``csekit export-st --layout remote-code`` its
sentence-transformers folder.
"""

from torch import nn


def set_attention_direction(encoder: nn.Module, bidirectional: bool) -> None:
    """Switch ``encoder`` (a decoder of ``DECODER_BACKBONES``) to bidirectional attention, in place; with
    ``bidirectional`` false, undo that switch where an earlier one made it (a csekit model fine-tuned without
    ``--bidirectional`` from a bidirectional one: its encoder is read from that folder). The switch's mark is the
    backbone config's ``is_causal`` false, which only this function sets; any other encoder is left as it is."""
    attention = [module for module in encoder.modules() if hasattr(module, "is_causal") and module is not encoder]
    if not bidirectional and getattr(encoder.config, "is_causal", True):
        return
    if not attention:  # a family whose attention no longer reads the attribute would stay causal: never silently
        raise ValueError(f"{type(encoder).__name__} has no attention module with an is_causal switch, so its "
                         "attention cannot be made bidirectional")
    encoder.config.is_causal = not bidirectional
    for module in attention:
        module.is_causal = not bidirectional


__all__ = ["set_attention_direction"]

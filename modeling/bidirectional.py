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


def make_bidirectional(encoder: nn.Module) -> None:
    """Switch ``encoder`` (a decoder of ``DECODER_BACKBONES``) to bidirectional attention, in place."""
    attention = [module for module in encoder.modules() if hasattr(module, "is_causal") and module is not encoder]
    if not attention:  # a family whose attention no longer reads the attribute would stay causal: never silently
        raise ValueError(f"{type(encoder).__name__} has no attention module with an is_causal switch, so its "
                         "attention cannot be made bidirectional")
    encoder.config.is_causal = False
    for module in attention:
        module.is_causal = False


__all__ = ["make_bidirectional"]

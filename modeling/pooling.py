"""Pooling: how token states become one sentence vector.

Layer numbering follows the extraction literature (Stankevičius & Lukoševičius 2024):

* ``-1`` — static token embeddings (the word-embedding lookup, no position/type embeddings, no LayerNorm)
* ``0``  — output of the embedding layer (what the first transformer block reads)
* ``i``  — output of transformer block ``i`` (``1 .. num_hidden_layers``)

Pooler types (names as in SimCSE):

========================  ==========================================================
``cls``                   [CLS] of the last layer, followed by the model's MLP head
``cls_before_pooler``     [CLS] of the last layer, no head
``avg``                   masked mean of the last layer
``avg_first_last``        masked mean of (layer 1 + last layer) / 2
``avg_top2``              masked mean of (second-to-last + last layer) / 2
``layers``                masked mean of the mean of ``pooling_layers``
``last_token``            the last real token of the last layer (a decoder's, after the end-of-sequence token
                          its tokenizer appends: sentence-transformers' ``lasttoken``)
``weighted_avg``          mean of the last layer weighted by position, 1 .. n over the real tokens (SGPT,
                          Muennighoff 2022: a causal token has seen more of the sentence the later it comes;
                          sentence-transformers' ``weightedmean``)
========================  ==========================================================

Left and right padding give the same vectors: the last real token is found from the attention mask, and the
position weights start at each sentence's first real token.

``avg_first_last`` uses layer 1 (the first transformer block), as SimCSE's final ``evaluation.py`` and the
"1+12" setting of the extraction paper do; SimCSE's training-time ``Pooler`` used layer 0 instead.
"""

from typing import Optional, Sequence

import torch

from .pooler_types import POOLER_TYPES

STATIC_EMBEDDINGS_LAYER = -1


def resolve_pooling_layers(pooler_type: str, pooling_layers: Optional[Sequence[int]], num_hidden_layers: int) -> list:
    """The absolute layer indices a pooler reads (see module docstring for the numbering).

    Raises ``ValueError`` for an unknown pooler type or an out-of-range layer, so a bad config fails when it is built.
    """
    if pooler_type not in POOLER_TYPES:
        raise ValueError(f"unknown pooler_type {pooler_type!r}; choose one of {', '.join(POOLER_TYPES)}")
    last = num_hidden_layers
    presets = {
        "cls": [last],
        "cls_before_pooler": [last],
        "avg": [last],
        "avg_first_last": [1, last],
        "avg_top2": [last - 1, last],
        "last_token": [last],
        "weighted_avg": [last],
    }
    if pooler_type != "layers":
        if pooling_layers:
            raise ValueError(f"pooling_layers is only used with pooler_type='layers', not {pooler_type!r}")
        return presets[pooler_type]
    if not pooling_layers:
        raise ValueError("pooler_type='layers' needs a non-empty pooling_layers list")
    for layer in pooling_layers:
        if not STATIC_EMBEDDINGS_LAYER <= layer <= last:
            raise ValueError(
                f"pooling layer {layer} is out of range for an encoder with {num_hidden_layers} layers "
                f"(valid: -1 static embeddings, 0 embedding output, 1..{last} blocks)"
            )
    return list(pooling_layers)


def encoder_layer_states(encoder, layers: Sequence[int], input_ids, attention_mask, **inputs) -> tuple:
    """Run ``encoder`` once for the states that ``layers`` name: the one path from tokens to layer states that
    training, evaluation and extraction share.

    Returns ``(outputs, hidden_states, static)``: ``hidden_states[i]`` is block ``i``'s output (every block only when
    more than the last one is needed), ``static`` the input token embeddings when ``layers`` holds
    [`STATIC_EMBEDDINGS_LAYER`][csekit.modeling.pooling.STATIC_EMBEDDINGS_LAYER], else ``None``.
    """
    last = encoder.config.num_hidden_layers
    needs_all_layers = list(layers) != [last]
    outputs = encoder(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=needs_all_layers,
                      **inputs)
    hidden_states = outputs.hidden_states if needs_all_layers else {last: outputs.last_hidden_state}
    static = encoder.get_input_embeddings()(input_ids) if STATIC_EMBEDDINGS_LAYER in layers else None
    return outputs, hidden_states, static


def masked_mean(states: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Weighted mean over the token axis.

    Args:
        states: ``(batch, seq_len, hidden)`` token states.
        weights: ``(batch, seq_len)`` non-negative weights, 0 on padding (an attention mask is the plain mean).
    Returns:
        ``(batch, hidden)``.
    """
    weights = weights.to(states.dtype).unsqueeze(-1)
    # clamp: an all-zero row (e.g. every token filtered out) gives a zero vector, not NaN
    return (states * weights).sum(1) / weights.sum(1).clamp(min=torch.finfo(states.dtype).tiny)


def last_token(states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """``(batch, hidden)``: each row's state at its last real token (the last 1 of ``attention_mask``), whichever side
    the padding is on."""
    positions = torch.arange(1, attention_mask.shape[1] + 1, device=attention_mask.device)
    last = (attention_mask * positions).argmax(dim=1)
    return states[torch.arange(states.shape[0], device=states.device), last]


def pool(
    pooler_type: str,
    layers: Sequence[int],
    hidden_states: Sequence[torch.Tensor],
    attention_mask: torch.Tensor,
    static_embeddings: Optional[torch.Tensor] = None,
    token_weights: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Pool token states into one vector per sentence.

    Args:
        pooler_type: one of ``POOLER_TYPES``.
        layers: absolute layer indices from [`resolve_pooling_layers`][csekit.modeling.pooling.resolve_pooling_layers].
        hidden_states: ``num_hidden_layers + 1`` tensors ``(batch, seq_len, hidden)``; index 0 is the embedding
            output. Only the layers in ``layers`` are read, so a caller may pass a sparse sequence.
        attention_mask: ``(batch, seq_len)``, 1 for real tokens.
        static_embeddings: ``(batch, seq_len, hidden)`` word-embedding lookups, needed when ``-1`` is in ``layers``.
        token_weights: optional ``(batch, seq_len)`` weights multiplied into the mask for the averaging poolers
            (idf weighting, or a one-hot on [MASK] positions for prompt-based extraction).
    Returns:
        ``(batch, hidden)`` pooled vectors, before any head.
    """
    if pooler_type in ("cls", "cls_before_pooler"):
        return hidden_states[layers[-1]][:, 0]
    if pooler_type == "last_token":
        return last_token(hidden_states[layers[-1]], attention_mask)
    weights = attention_mask if token_weights is None else attention_mask * token_weights
    if pooler_type == "weighted_avg":  # positions 1 .. n counted from each sentence's first real token
        weights = weights * attention_mask.cumsum(dim=1)
    # mean over layers commutes with the masked mean; averaging layers first keeps it one reduction
    return masked_mean(mean_layer_states(layers, hidden_states, static_embeddings), weights)


def mean_layer_states(
    layers: Sequence[int], hidden_states: Sequence[torch.Tensor], static_embeddings: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """Token states averaged over ``layers`` (numbering as in the module docstring): ``(batch, seq_len, hidden)``.

    Training-free extraction caches this per (model, dataset, template, layers) and re-weights it per aggregation.
    """

    def layer_states(index):
        if index == STATIC_EMBEDDINGS_LAYER:
            if static_embeddings is None:
                raise ValueError("layer -1 (static token embeddings) requested but no static embeddings were given")
            return static_embeddings
        return hidden_states[index]

    if len(layers) == 1:
        return layer_states(layers[0])
    return torch.stack([layer_states(i) for i in layers]).mean(0)

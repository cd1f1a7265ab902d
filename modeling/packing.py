"""Padding-free (packed) batches: every layer runs on real tokens only, and only attention needs the boundaries.

Layout. A packed batch holds the real tokens of all its sentences back to back in one row, ``input_ids (1, N)``,
and ``sequence_lengths (batch, views)``: the token count of view ``v`` of example ``i``, the sequences being stored
example-major (``i`` then ``v``), as ``(batch, views, seq_len)`` tensors flatten.
[`PackedSequences`][csekit.modeling.packing.PackedSequences] derives
from the lengths what the encoder needs: position ids that restart for every sentence, and the boundaries
``cu_seq_lens`` with the longest length, which reach the attention function through the backbone's ``**kwargs``
(transformers' ``TransformersKwargs``: ``cu_seq_lens_q/k``, ``max_length_q/k``). Embeddings, linear layers,
LayerNorm, GELU and dropout then see the ``N`` real tokens instead of ``sentences x longest`` positions.

Attention. BERT's mask builder does not derive sentence boundaries from ``position_ids`` (only the causal builder
does), so [`packed_attention`][csekit.modeling.packing.packed_attention] takes them from the boundaries passed down.
Without flash-attn it scatters q/k/v into padded ``(sentences, heads, longest, dim)`` blocks, runs one SDPA call per
block with its key mask, and gathers the real rows back. How the blocks are cut depends on where the step runs
([`PackedSequences.of_batch`][csekit.modeling.packing.PackedSequences.of_batch]):

* eagerly on the CPU, [`ATTENTION_BLOCKS`][csekit.modeling.packing.ATTENTION_BLOCKS] blocks of sentences of similar
  length ([`from_lengths`][csekit.modeling.packing.PackedSequences.from_lengths], which reads the lengths on the
  host): a few calls for the whole batch, never one per sentence (whose per-call overhead would outweigh what
  packing saves), and not one block padded to the longest sentence (a supervised batch's short hypotheses would pay
  for its premises);
* compiled, or on an accelerator, one block at the width of the padded batch's attention mask, which the collator
  sends along ([`from_layout`][csekit.modeling.packing.PackedSequences.from_layout]): no host read and no shape that
  depends on the lengths' values, so the step traces into one graph and launches one attention call per layer (a GPU
  step is bound by its kernel launches, not by the attention's padded positions).

Called without boundaries (a padded batch: evaluation, ``encode``) it is transformers' SDPA, so a model switched to
it still encodes padded batches exactly as before. With ``attn_implementation="flash_attention_2"`` transformers' own
varlen path reads the same ``cu_seq_lens_*`` kwargs.

Dropout. The packed path drops exactly the same kind of units as the padded one: each real token's features (and
each real query-key attention weight) are kept with probability ``1 - p``, independently. Only the layout of the
random draws differs (draws for padding, in every layer of the padded path and in the attention blocks of both, are
discarded), so the same seed gives the two paths different per-position masks, with the same distribution over the
real tokens.

What it implements, and nothing else. Within-sentence attention, bidirectional or, for a module that attends causally
(a decoder's ``is_causal``), causal inside each sentence, with a backbone's local window (``sliding_window``,
ModernBERT's local layers, Mistral's) applied inside each block: a query attends to the keys of its own sentence less
than ``sliding_window`` positions away (flash-attention's convention, which the backbone's ``sliding_window`` argument
follows; its padded mask is the same band), and under causal attention only to those at or before it. Any other
attention feature (logit softcapping, an extra mask or bias) raises
[`PackingUnsupported`][csekit.modeling.packing.PackingUnsupported], and the model's
`packing_mismatch` probe, run before training, then turns packing off. No ``N x N`` mask is ever built: a
packed row's mask builder returns ``None`` and each block's mask is ``(sentences, longest, longest)`` at most.

Poolers. [`PackedSequences.unpack`][csekit.modeling.packing.PackedSequences.unpack] scatters the layers a pooler reads
back into ``(sentences, longest, hidden)``
with the matching attention mask, and the padded poolers of ``pooling.py`` run unchanged: one pooling code path.
"""

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, PreTrainedConfig, PreTrainedModel
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

PACKED_ATTENTION = "csekit_packed"
# attention implementations that read cu_seq_lens_* themselves (transformers' varlen kernels)
VARLEN_ATTENTIONS = ("flash_attention_2", "flash_attention_3", "flash_attention_4")
# packed sentences are attended in this many blocks of similar length (sorted by length, equal counts): a single
# block would pad every sentence to the batch's longest, one block per sentence costs a call each
ATTENTION_BLOCKS = 4


class PackingUnsupported(RuntimeError):
    """The backbone asked [`packed_attention`][csekit.modeling.packing.packed_attention] for an attention feature it
    does not implement."""


@dataclass
class PackedSequences:
    """Boundaries of the sequences of one packed row, and the maps between the packed layout and padded ones.

    Built once per forward ([`of_batch`][csekit.modeling.packing.PackedSequences.of_batch]: at most one host read of
    the lengths, none when compiled or on an accelerator) and handed to every layer's attention through the
    backbone's ``**kwargs`` (``packed_sequences``), so no layer waits on the device.
    """

    lengths: torch.Tensor  # (sentences,) token counts, in packed order
    cu_seq_lens: torch.Tensor  # (sentences + 1,) int32: where each sequence starts, then the total
    max_length: int
    positions: torch.Tensor  # (N,) index of each token inside its sentence (0 at every start)
    padded_index: torch.Tensor  # (N,) row of each token in the flattened (sentences * max_length) padded layout
    block_index: torch.Tensor  # (N,) row of each token in the attention blocks, laid out one after the other
    blocks: list  # (first row, sentences, longest, key mask (sentences, longest)) of each attention block

    @classmethod
    def from_lengths(cls, lengths: torch.Tensor) -> "PackedSequences":
        device, lengths = lengths.device, lengths.reshape(-1).long()
        host = lengths.cpu()  # the one synchronisation of a packed forward
        starts = torch.cumsum(host, 0) - host
        sequence = torch.repeat_interleave(torch.arange(len(host)), host)
        positions = torch.arange(len(sequence)) - starts[sequence]
        max_length = int(host.max())
        # attention blocks: the sentences sorted by length, cut into ATTENTION_BLOCKS groups of equal count
        order = torch.argsort(host, descending=True, stable=True)
        first_row, blocks, row_of_sentence = 0, [], torch.empty_like(host)
        for members in order.chunk(min(ATTENTION_BLOCKS, len(host))):
            longest = int(host[members].max())
            row_of_sentence[members] = first_row + torch.arange(len(members)) * longest
            mask = torch.arange(longest) < host[members, None]
            blocks.append((first_row, len(members), longest, mask.to(device)))
            first_row += len(members) * longest
        return cls(
            lengths=lengths, cu_seq_lens=F.pad(torch.cumsum(host, 0), (1, 0)).to(device, torch.int32),
            max_length=max_length, positions=positions.to(device),
            padded_index=(sequence * max_length + positions).to(device),
            block_index=(row_of_sentence[sequence] + positions).to(device), blocks=blocks,
        )

    @classmethod
    def from_layout(cls, lengths: torch.Tensor, max_length: int, tokens: int) -> "PackedSequences":
        """The boundaries of a row of ``tokens`` real tokens whose sentences fit a padded layout ``max_length`` long
        (the padded batch's width, which the collator sends as ``attention_mask``), computed on the device with no
        host read: every shape is known without the lengths' values, so a compiled step holds it as one graph. The
        sentences are attended as one block at ``max_length``: one attention call per layer, whatever the lengths."""
        lengths = lengths.reshape(-1).long()
        torch._assert_async((lengths <= max_length).all(), "a packed sentence is longer than its padded layout")
        ends = torch.cumsum(lengths, 0)
        token = torch.arange(tokens, device=lengths.device)
        sequence = torch.searchsorted(ends, token, right=True)
        positions = token - (ends - lengths)[sequence]
        padded_index = sequence * max_length + positions
        key_mask = torch.arange(max_length, device=lengths.device) < lengths[:, None]
        return cls(lengths=lengths, cu_seq_lens=F.pad(ends, (1, 0)).int(), max_length=max_length, positions=positions,
                   padded_index=padded_index, block_index=padded_index,
                   blocks=[(0, lengths.shape[0], max_length, key_mask)])

    @classmethod
    def of_batch(cls, lengths: torch.Tensor, layout: Optional[torch.Tensor], tokens: int) -> "PackedSequences":
        """A packed batch's boundaries: ``lengths`` its sentences' token counts, ``layout`` the padded batch's
        attention mask (only its width is read; ``None`` when unknown), ``tokens`` the row's length. On the CPU,
        eagerly, [`from_lengths`][csekit.modeling.packing.PackedSequences.from_lengths] (blocks of similar lengths:
        the CPU pays for every padded position and nothing for a host read); compiled or on an accelerator,
        [`from_layout`][csekit.modeling.packing.PackedSequences.from_layout] (no host read, one attention call per
        layer: that step is bound by the kernels it launches)."""
        if laid_out_on_device(lengths, layout):
            return cls.from_layout(lengths, layout.shape[-1], tokens)
        return cls.from_lengths(lengths)

    @property
    def attention_mask(self) -> torch.Tensor:
        """``(sentences, max_length)`` 1 on real tokens: the padded layout's mask."""
        return (torch.arange(self.max_length, device=self.lengths.device) < self.lengths[:, None]).long()

    def attention_kwargs(self) -> dict:
        """What the attention function needs, passed through the backbone's ``**kwargs``: transformers' varlen keys
        (which its flash-attention path reads) and this object (which
        [`packed_attention`][csekit.modeling.packing.packed_attention] reads)."""
        return {"cu_seq_lens_q": self.cu_seq_lens, "cu_seq_lens_k": self.cu_seq_lens,
                "max_length_q": self.max_length, "max_length_k": self.max_length, "packed_sequences": self}

    def unpack(self, states: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        """Encoder output ``(1, N, hidden)`` -> ``(sentences, max_length, hidden)``, zeros on padding (differentiable;
        ``None`` stays ``None``)."""
        if states is None:
            return None
        tokens = states[0]
        padded = tokens.new_zeros(len(self.lengths) * self.max_length, tokens.shape[-1])
        return padded.index_put((self.padded_index,), tokens).view(len(self.lengths), self.max_length, -1)


def laid_out_on_device(lengths: torch.Tensor, layout: Optional[torch.Tensor]) -> bool:
    """Whether a packed batch is laid out with no host read
    ([`from_layout`][csekit.modeling.packing.PackedSequences.from_layout]): when its padded layout is known and the
    step is compiled or runs on an accelerator. Code that would cut a packed row by its lengths' values asks this
    first."""
    return layout is not None and (lengths.device.type != "cpu" or torch.compiler.is_compiling())


def packed_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """An ``AttentionInterface`` function: attention within each sentence of a packed row.

    ``query``/``key``/``value`` are ``(1, heads, N, dim)``; returns ``((1, N, heads, dim), None)`` as transformers'
    attention functions do. The tokens are scattered into a few padded blocks of sentences of similar length
    ([`ATTENTION_BLOCKS`][csekit.modeling.packing.ATTENTION_BLOCKS]), each attended by one SDPA call with its key mask,
    and gathered back. Without
    ``cu_seq_lens_q`` (a padded batch) this is transformers' SDPA function.
    """
    packed = kwargs.pop("packed_sequences", None)
    if packed is None:
        if kwargs.get("cu_seq_lens_q") is None:
            return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                          scaling=scaling, **kwargs)
        cu_seq_lens = kwargs["cu_seq_lens_q"]
        packed = PackedSequences.from_lengths(cu_seq_lens[1:] - cu_seq_lens[:-1])
    causal = getattr(module, "is_causal", False)  # a decoder's: each token sees its sentence's tokens up to itself
    if kwargs.get("softcap") is not None:
        raise PackingUnsupported(f"{type(module).__name__} softcaps its attention logits")
    if attention_mask is not None:
        raise PackingUnsupported(f"{type(module).__name__} passes an attention mask or bias of its own")
    window = kwargs.get("sliding_window")
    heads, dim = query.shape[1], query.shape[-1]
    if key.shape[1] != heads:  # grouped-query attention: query head h reads key/value head h // (heads / kv heads)
        key, value = repeat_kv(key, heads // key.shape[1]), repeat_kv(value, heads // value.shape[1])
    rows = sum(count * longest for _, count, longest, _ in packed.blocks)

    def scatter(states):  # (1, heads, N, dim) -> (block rows, heads, dim), zeros on padding
        tokens = states[0].transpose(0, 1)
        return tokens.new_zeros(rows, heads, dim).index_put((packed.block_index,), tokens)

    query, key, value = scatter(query), scatter(key), scatter(value)
    outputs = []
    for first, count, longest, key_mask in packed.blocks:
        q, k, v = (states[first : first + count * longest].view(count, longest, heads, dim).transpose(1, 2)
                   for states in (query, key, value))
        mask = key_mask[:, None, None, :]
        offsets = torch.arange(longest, device=key_mask.device)
        if window is not None and longest > window:  # the local window, inside each sentence (longest x longest)
            mask = mask & ((offsets[:, None] - offsets[None, :]).abs() < window)[None, None]
        if causal:  # (a sentence's tokens start its block's row, so the triangle is within the sentence)
            mask = mask & (offsets[:, None] >= offsets[None, :])[None, None]
        output = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, scale=scaling)
        outputs.append(output.transpose(1, 2).reshape(count * longest, heads, dim))
    return torch.cat(outputs)[packed.block_index][None], None  # rows of padding queries are dropped here


def packed_mask(*args, attention_mask=None, **kwargs):
    """The mask builder of [`PACKED_ATTENTION`][csekit.modeling.packing.PACKED_ATTENTION]: ``None`` for a packed row
    (no 2D mask: the boundaries and any
    local window are applied per block by [`packed_attention`][csekit.modeling.packing.packed_attention]), SDPA's mask
    for a padded batch."""
    return None if attention_mask is None else sdpa_mask(*args, attention_mask=attention_mask, **kwargs)


def view_tokens(input_ids: torch.Tensor, sequence_lengths: torch.Tensor, view: int) -> torch.Tensor:
    """The tokens of one view's sequences in an example-major packed row ``(1, N)`` of ``sequence_lengths (batch,
    views)`` (every example's views back to back): a ``(1, sequence_lengths[:, view].sum())`` row, in order."""
    views = torch.arange(sequence_lengths.shape[1], device=input_ids.device).repeat(sequence_lengths.shape[0])
    return input_ids[:, torch.repeat_interleave(views, sequence_lengths.flatten()) == view]


def register_packed_attention() -> None:
    """Make [`PACKED_ATTENTION`][csekit.modeling.packing.PACKED_ATTENTION] a name transformers resolves (idempotent)."""
    AttentionInterface.register(PACKED_ATTENTION, packed_attention)
    AttentionMaskInterface.register(PACKED_ATTENTION, packed_mask)


def position_offset(encoder: PreTrainedModel) -> int:
    """The position id of a sentence's first token: 0 for BERT, ``padding_idx + 1`` for RoBERTa-style embeddings
    (whose own position ids count from there)."""
    padding_idx = getattr(getattr(encoder, "embeddings", None), "padding_idx", None)
    return 0 if padding_idx is None else padding_idx + 1


def packing_unsupported(encoder: PreTrainedModel) -> Optional[str]:
    """Why ``encoder`` cannot run packed batches, or ``None`` when it can: it must pick its attention function
    through ``AttentionInterface`` and take ``position_ids``: an encoder's ``.embeddings`` add position embeddings of
    them, a decoder's rotary embedding (``.rotary_emb``) rotates by them."""
    if not getattr(encoder, "_supports_attention_backend", False):
        return f"{type(encoder).__name__} does not select its attention through transformers' AttentionInterface"
    if not hasattr(encoder, "embeddings") and not hasattr(encoder, "rotary_emb"):
        return f"{type(encoder).__name__} has neither .embeddings nor a rotary embedding taking position ids"
    return None


def use_packed_attention(module: torch.nn.Module) -> list:
    """Route the attention of every transformers model inside ``module`` through
    [`packed_attention`][csekit.modeling.packing.packed_attention] (a
    varlen flash-attention choice is kept: it reads the same boundaries). The setting is not saved in
    ``config.json``: a saved model loads with stock transformers and its default attention. Returns what
    [`restore_attention`][csekit.modeling.packing.restore_attention] needs to undo it."""
    register_packed_attention()
    # every config below the wrapper: the backbone's, and those of blocks copied out of it (CMLM-CSE's extractor
    # and fusioner hold copies of their own)
    configs = {id(sub.config): sub.config for sub in module.modules()
               if isinstance(getattr(sub, "config", None), PreTrainedConfig) and sub.config is not module.config}
    previous = {}
    for key, config in configs.items():
        previous[key] = (config, config._attn_implementation)
        if config._attn_implementation not in VARLEN_ATTENTIONS:
            config._attn_implementation = PACKED_ATTENTION
    return list(previous.values())


def restore_attention(previous: list) -> None:
    """Undo [`use_packed_attention`][csekit.modeling.packing.use_packed_attention] (its return value): each config gets
    its attention implementation back."""
    for config, implementation in previous:
        config._attn_implementation = implementation

"""WhitenedCSE configuration (Zhuo et al., 2023, "WhitenedCSE: Whitening-based Contrastive Learning of Sentence
Embeddings")."""

from huggingface_hub.dataclasses import strict

from .configuration_encoder import SentenceEncoderConfig
from .whitening import GROUPED_WHITENING, WHITENING_TYPES

POSITIVE_SOURCES = ("sgw", "dropout")
LOSS_TYPES = ("L1", "L2")
INFERENCE_REPRESENTATIONS = ("pooled", "whitened", "head", "head_no_whitening")
# §4.1: "For BERT-base and BERT-large, we set the number of group size as 384, for RoBERTa-base and RoBERTa-large,
# we set the number of group size as 256" -- k, the number of groups (§3.2.1, §5.3, the code's `num_groups`)
PAPER_NUM_GROUPS = {"roberta": 256}
PAPER_NUM_GROUPS_BERT = 384


def paper_num_groups(model_type: str, hidden_size: int) -> int:
    """The paper's k for a backbone: 256 for RoBERTa, 384 otherwise (BERT), when it splits ``hidden_size`` into
    groups of at least 2 channels; else ``hidden_size // 2``, the 2-channel groups of the paper's bert-base run."""
    groups = PAPER_NUM_GROUPS.get(model_type, PAPER_NUM_GROUPS_BERT)
    if hidden_size % groups == 0 and hidden_size // groups >= 2:
        return groups
    return hidden_size // 2


@strict
class WhitenedCSEConfig(SentenceEncoderConfig):
    r"""Configuration of [`WhitenedCSEModel`][csekit.modeling.modeling_whitenedcse.WhitenedCSEModel].

    Training head ("MLP" in the paper): whitening -> linear (hidden x hidden) -> tanh, on the pooled backbone feature
    of each view; the multi-positive contrastive loss (eq. 7 or 8) is computed on its output. Defaults follow the
    paper for bert-base (shuffled group whitening in k = 384 groups, 3 "positive samples", temperature 0.05).

    **k is a number of groups.** §3.2.1: "group whitening first divide it into k groups",
    each Z_k an N × d/k matrix; §5.3 "we divide the representation into k groups"; the authors'
    ``ShuffledGroupWhitening`` takes ``num_groups`` and views the feature as ``(N, G, D // G)`` (SupstarZh/WhitenedCSE,
    ``shuffled_group_whitening.py``). Table 4 and §4.1 call k the "group size", but the paper's best k = 384 on
    bert-base is 384 groups of 2 channels. Read as channels, 384 channels with a batch of 64 would be rank-deficient:
    every group's whitened batch is a regular simplex (all cosines -1/(N-1)), and the authors' code (``rsqrt`` of the
    eigenvalues, no eps) cannot even run it. ``num_groups=None`` resolves, when the config is built, to the paper's
    k for the backbone (see `paper_num_groups`), and ``config.json`` stores the number:

    * BERT (bert-base 768, 2 channels per group): 384; RoBERTa (768 -> 3 channels, 1024 -> 4): 256 (§4.1).
    * Hidden sizes the paper's k does not fit -- it does not divide bert-large's 1024 (the printed BERT-large setting
      cannot run; the code asserts ``num_features % num_groups == 0``), and it splits MiniLM's 384 into 1-channel
      groups, where whitening is per-channel standardisation and the shuffle is a no-op, so every SGW draw is the
      same and the positives lose the diversity the method is about (§3.2.2) -- get ``hidden // 2`` groups: the
      2-channel groups of the paper's bert-base setting (bert-large 512, MiniLM 192).

    The trainer refuses groups at least as wide as the per-process batch (``group``/``shuffled_group``): no row of
    the paper's tables needs them.

    Choices where the paper is ambiguous (each is a field, so every reading can be run):

    * ``positive_source`` -- how the positives are formed. ``"sgw"`` (default, the paper's "little cost" reading,
      Fig. 2 "given a single backbone feature, we repeat the SGW process several times"): the backbone runs once on
      SimCSE's two dropout views; the anchor is one SGW draw of view 0 and the ``num_positives`` positives are
      independent SGW draws (new permutations) of view 1, so extra positives cost no extra backbone pass.
      ``"dropout"``: ``1 + num_positives`` dropout views, each whitened by its own SGW draw (one permutation per
      view). Neither is the authors' released code, which encodes 3 dropout views per sentence sentence-major (row
      ``3 i + v``) and whitens contiguous thirds of that ``(3B, d)`` tensor with one permutation each, so a third
      mixes the views of about B/3 sentences. (With ``whitening="none"``/``"group"``/``"zca"``/``"pca"`` the
      ``sgw`` draws are identical, so only ``dropout`` adds positive diversity there.) Whitening statistics are
      those of the local batch of each process, as in the released code.
    * ``num_positives`` -- ``m`` in eq. 7/8, positives per anchor. The paper's "positive number" (Table 5, default 3)
      counts all views of a sentence including the anchor (the released code uses 3 views and the loss
      ``CE(z1, z2) + CE(z1, z3)``), so paper ``k`` = ``num_positives + 1`` and the default is 2.
    * ``positive_weights`` -- ``λ_m`` of eq. 7/8, "controls the impact of each positive", one per positive. The
      paper gives no value; the released code sums the terms (``loss1 + loss2``: all 1, the default); the authors'
      code of January 2023 (compiled ``models.cpython-37.pyc``) used ``loss1 + 0.8 * loss2``:
      ``--positive_weights 1 0.8``.
    * ``whitening_gradient`` -- let gradients flow through the whitening matrix ``W``. The released code stops them
      (default False); True back-propagates through ``(Σ + eps I)^-1/2`` with a formula that is finite for
      rank-deficient batches (not available for ``pca``).
    * ``inference_representation`` -- the sentence vector of ``encode``/eval mode: ``"pooled"`` (default, the
      released code's ``mlp_only_train``, its STS-B dev selection metric: the backbone feature, no head),
      ``"head_no_whitening"`` (linear -> tanh on the backbone feature, no whitening: the README's ``--pooler cls``
      after SimCSE's usual ``mlp`` -> ``pooler`` conversion, since the authors' inference never whitens),
      ``"whitened"`` (group whitening with the running statistics of eq. 13, consecutive groups) or ``"head"``
      (that whitening -> linear -> tanh; the paper's §4.1 "output of the MLP layer"). Every option is independent of
      the rest of the batch.
    * ``loss_type`` -- ``"L1"`` (eq. 7, the paper's choice): ``Σ_p λ_p ℓ_p`` with ``ℓ_p`` the InfoNCE of positive
      ``p`` against the in-batch candidates of that positive's view. ``"L2"`` (eq. 8): the sum inside the log with
      the paper's negative sign on the positive similarity, ``log Σ_p λ_p e^{-sim_p/τ} D_p = log Σ_p λ_p e^{ℓ_p}``,
      a soft maximum over the per-positive losses (the least similar positive dominates). Eq. 8 as printed,
      ``-log Σ_p λ_p e^{-sim_p/τ} / D_p``, decreases when positives move apart, so it is implemented as its stated
      intent. Both reduce to SimCSE's InfoNCE for ``m = 1, λ = 1``.

    Args:
        temperature: InfoNCE temperature tau (> 0).
        whitening: ``none``, ``pca``, ``zca``, ``group`` or ``shuffled_group`` (Table 3).
        num_groups: k, the number of whitening groups (§3.2.1: "divide it into k groups", each Z_k an N × d/k
            matrix; the "group size" of Table 4 and §4.1); each group has hidden / k channels, so k must divide the
            hidden size.
            Default: the paper's k for the backbone: 384 for BERT (2 channels on bert-base), 256 for RoBERTa,
            hidden / 2 where those do not fit (MiniLM 192, bert-large 512). Used by ``group``/``shuffled_group``;
            ``pca``/``zca`` whiten the whole feature.
        num_positives: ``m >= 1`` (Table 5: paper positive number 2..5 = ``num_positives`` 1..4).
        positive_source: ``sgw`` or ``dropout`` (above).
        loss_type: ``L1`` (eq. 7) or ``L2`` (eq. 8).
        positive_weights: ``λ`` of eq. 7/8, one weight > 0 per positive (``num_positives`` values). Default: all 1,
            as the released code (``loss1 + loss2``); ``1 0.8`` is the authors' January 2023 code.
        whitening_eps: added to the covariance eigenvalues (> 0; the released code has none).
        whitening_momentum: ``β`` of eq. 13 for the running statistics, in [0, 1).
        whitening_gradient: back-propagate through ``W`` (above).
        inference_representation: ``pooled``, ``head_no_whitening``, ``whitened`` or ``head`` (above).
    """

    model_type = "csekit-whitenedcse"

    temperature: float = 0.05
    whitening: str = "shuffled_group"
    num_groups: int | None = None
    num_positives: int = 2
    positive_source: str = "sgw"
    loss_type: str = "L1"
    positive_weights: list[float] | None = None
    whitening_eps: float = 1e-5
    whitening_momentum: float = 0.9
    whitening_gradient: bool = False
    inference_representation: str = "pooled"

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        if self.num_groups is None:
            self.num_groups = paper_num_groups(self.encoder_config.model_type, self.hidden_size)
        if self.positive_weights is None:
            self.positive_weights = [1.0] * self.num_positives

    def validate_temperature(self):
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")

    def validate_whitening(self):
        _check_choice("whitening", self.whitening, WHITENING_TYPES)
        if self.num_groups < 1:
            raise ValueError(f"num_groups must be >= 1, got {self.num_groups}")
        if self.whitening in GROUPED_WHITENING and self.hidden_size % self.num_groups:
            raise ValueError(
                f"num_groups {self.num_groups} must divide the hidden size {self.hidden_size} "
                f"(k groups of hidden / k channels)"
            )
        if not self.whitening_eps > 0:
            raise ValueError(f"whitening_eps must be > 0, got {self.whitening_eps}")
        if not 0 <= self.whitening_momentum < 1:
            raise ValueError(f"whitening_momentum must be in [0, 1), got {self.whitening_momentum}")
        if self.whitening_gradient and self.whitening == "pca":
            raise ValueError("whitening_gradient is not available for pca whitening; use zca, group or shuffled_group")

    def validate_positives(self):
        if self.num_positives < 1:
            raise ValueError(f"num_positives must be >= 1, got {self.num_positives}")
        _check_choice("positive_source", self.positive_source, POSITIVE_SOURCES)
        _check_choice("loss_type", self.loss_type, LOSS_TYPES)
        weights = self.positive_weights
        if len(weights) != self.num_positives or not all(weight > 0 for weight in weights):
            raise ValueError(
                f"positive_weights must be {self.num_positives} values > 0 (one per positive), got {weights}"
            )

    def validate_inference_representation(self):
        _check_choice("inference_representation", self.inference_representation, INFERENCE_REPRESENTATIONS)

    @property
    def group_width(self) -> int:
        """Channels whitened together: ``hidden / num_groups`` for grouped whitening, the whole feature otherwise."""
        return self.hidden_size // self.num_groups if self.whitening in GROUPED_WHITENING else self.hidden_size

    @property
    def num_views(self) -> int:
        """Dropout views the collator must provide per sentence."""
        return dropout_views(self.positive_source, self.num_positives)


def dropout_views(positive_source: str, num_positives: int) -> int:
    """Views per sentence the backbone encodes in training: SimCSE's 2 for ``sgw``, ``1 + m`` for ``dropout``."""
    return 2 if positive_source == "sgw" else 1 + num_positives


def _check_choice(name: str, value: str, choices: tuple) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")

"""WhitenedCSE configuration (Zhuo et al., 2023, "WhitenedCSE: Whitening-based Contrastive Learning of Sentence
Embeddings")."""

from huggingface_hub.dataclasses import strict

from .configuration_encoder import SentenceEncoderConfig
from .whitening import WHITENING_TYPES

POSITIVE_SOURCES = ("sgw", "dropout")
LOSS_TYPES = ("L1", "L2")
INFERENCE_REPRESENTATIONS = ("pooled", "whitened", "head")


@strict
class WhitenedCSEConfig(SentenceEncoderConfig):
    r"""Configuration of :class:`WhitenedCSEModel`.

    Training head ("MLP" in the paper): whitening -> linear (hidden x hidden) -> tanh, on the pooled backbone feature
    of each view; the multi-positive contrastive loss (eq. 7 or 8) is computed on its output. Defaults follow the
    paper for bert-base (shuffled group whitening, group size 384, 3 "positive samples", temperature 0.05).

    Choices where the paper is ambiguous (each is a field, so every reading can be run):

    * ``positive_source`` -- how the positives are formed. ``"sgw"`` (default, the paper's "little cost" reading):
      the backbone runs once on SimCSE's two dropout views; the anchor is one SGW draw of view 0 and the
      ``num_positives`` positives are independent SGW draws (new permutations) of view 1, so extra positives cost no
      extra backbone pass. ``"dropout"`` (the authors' released code): ``1 + num_positives`` dropout views, each
      whitened by its own SGW draw. (With ``whitening="none"``/``"group"``/``"zca"``/``"pca"`` the ``sgw`` draws
      are identical, so only ``dropout`` adds positive diversity there.) Whitening statistics are those of the local
      batch of each process, as in the released code.
    * ``num_positives`` -- ``m`` in eq. 7/8, positives per anchor. The paper's "positive number" (Table 5, default 3)
      counts all views of a sentence including the anchor (the released code uses 3 views and the loss
      ``CE(z1, z2) + CE(z1, z3)``), so paper ``k`` = ``num_positives + 1`` and the default is 2.
    * ``whitening_gradient`` -- let gradients flow through the whitening matrix ``W``. The released code stops them
      (default False); True back-propagates through ``(Σ + eps I)^-1/2`` with a formula that is finite for
      rank-deficient batches (not available for ``pca``).
    * ``inference_representation`` -- the sentence vector of ``encode``/eval mode: ``"pooled"`` (default, the
      released code's ``mlp_only_train``: the backbone feature, no whitening), ``"whitened"`` (group whitening with
      the running statistics of eq. 13, consecutive groups) or ``"head"`` (that whitening -> linear -> tanh). Every
      option is independent of the rest of the batch.
    * ``loss_type`` -- ``"L1"`` (eq. 7, the paper's choice): ``λ_m Σ_p ℓ_p`` with ``ℓ_p`` the InfoNCE of positive
      ``p`` against the in-batch candidates of that positive's view. ``"L2"`` (eq. 8): the sum inside the log with
      the paper's negative sign on the positive similarity, ``log Σ_p λ_m e^{-sim_p/τ} D_p = log Σ_p λ_m e^{ℓ_p}``,
      a soft maximum over the per-positive losses (the least similar positive dominates). Eq. 8 as printed,
      ``-log Σ_p λ_m e^{-sim_p/τ} / D_p``, decreases when positives move apart, so it is implemented as its stated
      intent. Both reduce to SimCSE's InfoNCE for ``m = 1, λ = 1``.

    Args:
        temperature: InfoNCE temperature tau (> 0).
        whitening: ``none``, ``pca``, ``zca``, ``group`` or ``shuffled_group`` (Table 3).
        group_size: channels per whitening group; must divide the hidden size. Ignored by ``pca``/``zca`` (whole
            feature) and ``none``. Note: the paper's "group size" k (Table 4, 384 for bert-base) is, by its text
            ("divide the representation into k groups") and the released code (``num_groups``), the number of
            groups, i.e. ``group_size = hidden / k`` (2 channels for bert-base). The default 384 follows the
            number as printed; with a group at least as large as the batch the batch covariance is rank-deficient
            and each group's whitened batch is a regular simplex (only the eps keeps it finite).
        num_positives: ``m >= 1`` (Table 5: paper positive number 2..5 = ``num_positives`` 1..4).
        positive_source: ``sgw`` or ``dropout`` (above).
        loss_type: ``L1`` (eq. 7) or ``L2`` (eq. 8).
        positive_weight: ``λ_m`` of eq. 7/8 (> 0); 1.0 as the released code (plain sum of per-positive terms).
        whitening_eps: added to the covariance eigenvalues (> 0).
        whitening_momentum: ``β`` of eq. 13 for the running statistics, in [0, 1).
        whitening_gradient: back-propagate through ``W`` (above).
        inference_representation: ``pooled``, ``whitened`` or ``head`` (above).
    """

    model_type = "csekit-whitenedcse"

    temperature: float = 0.05
    whitening: str = "shuffled_group"
    group_size: int = 384
    num_positives: int = 2
    positive_source: str = "sgw"
    loss_type: str = "L1"
    positive_weight: float = 1.0
    whitening_eps: float = 1e-5
    whitening_momentum: float = 0.9
    whitening_gradient: bool = False
    inference_representation: str = "pooled"

    def validate_temperature(self):
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")

    def validate_whitening(self):
        _check_choice("whitening", self.whitening, WHITENING_TYPES)
        if self.group_size < 1 or self.hidden_size % self.group_size:
            raise ValueError(
                f"group_size {self.group_size} must be a positive divisor of the hidden size {self.hidden_size}"
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
        if not self.positive_weight > 0:
            raise ValueError(f"positive_weight must be > 0, got {self.positive_weight}")

    def validate_inference_representation(self):
        _check_choice("inference_representation", self.inference_representation, INFERENCE_REPRESENTATIONS)

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

"""ESimCSE configuration (Wu et al., 2022, "ESimCSE: Enhanced Sample Building Method for Contrastive Learning of
Unsupervised Sentence Embedding")."""

from huggingface_hub.dataclasses import strict

from .configuration_simcse import SimCSEConfig

REPETITION_UNITS = ("subword", "word")
MOMENTUM_INITS = ("random", "copy")  # momentum_init: the authors' start, or MoCo's


@strict
class ESimCSEConfig(SimCSEConfig):
    r"""Configuration of [`ESimCSEModel`][csekit.modeling.modeling_esimcse.ESimCSEModel] and of its training-only
    momentum encoder.

    The published model is a SimCSE encoder (every [`SimCSEConfig`][csekit.modeling.configuration_simcse.SimCSEConfig]
    field applies). The fields below are ESimCSE's two changes, with the defaults of the authors' BERT-base run
    (caskcsg/sentemb ``ESimCSE/run.sh``): word repetition of the positive view and a queue of 160 momentum-encoded
    negatives, momentum 0.995.

    Args:
        dup_rate: the largest share of a sentence's tokens repeated in its positive view (the authors'
            ``dup_rate``, in [0, 1); 0 repeats nothing). The authors' code draws
            ``dup_len = randrange(min(10, int(dup_rate * N)))`` (uniform in ``0 .. min(10, int(dup_rate * N)) - 1``),
            ``N`` counting the special tokens, where the paper prints ``[0, max(2, int(dup_rate * N))]``; the code
            is followed.
        repetition_unit: ``"subword"`` (the authors' ``--dup_type bpe``, their runs): tokens after truncation to
            ``max_seq_length``, never ``[CLS]``/``[SEP]``; ``"word"`` (their ``--dup_type word``): the sentence's
            space-separated words, before tokenization.
        queue_size: momentum-encoded sentence vectors of earlier steps kept as extra negatives (the authors'
            ``neg_size``: 160 for BERT-base, 2.5x the batch of 64); 0 turns the momentum contrast off.
        momentum: lambda of the momentum encoder's update, ``theta_m <- lambda theta_m + (1 - lambda) theta``.
        momentum_init: how the momentum encoder starts: ``"random"``, BERT's initialisation (normal weights of
            standard deviation ``initializer_range``, zero biases, unit LayerNorm), as the authors' code starts it
            (``BertForCL`` copies its encoder into ``momentum_model``, then ``cl_init`` re-initialises every weight
            and the checkpoint fills only ``bert.*``; their log lists every ``momentum_model`` weight as newly
            initialised); ``"copy"``, a copy of the pretrained encoder (MoCo's start).
    """

    model_type = "csekit-esimcse"
    fields_without_flags = ("prompt",)
    prompt_refused = "ESimCSE repeats tokens of the tokenized sentence, which would repeat the prompt's too"

    dup_rate: float = 0.32
    repetition_unit: str = "subword"
    queue_size: int = 160
    momentum: float = 0.995
    momentum_init: str = "random"

    def validate_esimcse(self):
        if not 0 <= self.dup_rate < 1:
            raise ValueError(f"dup_rate must be in [0, 1), got {self.dup_rate}")
        if self.repetition_unit not in REPETITION_UNITS:
            raise ValueError(f"repetition_unit must be one of {', '.join(REPETITION_UNITS)}, got "
                             f"{self.repetition_unit!r}")
        if self.queue_size < 0:
            raise ValueError(f"queue_size must be >= 0, got {self.queue_size}")
        if not 0 <= self.momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum}")
        if self.momentum_init not in MOMENTUM_INITS:
            raise ValueError(f"momentum_init must be one of {', '.join(MOMENTUM_INITS)}, got {self.momentum_init!r}")

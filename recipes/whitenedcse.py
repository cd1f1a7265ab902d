"""WhitenedCSE training recipe (Zhuo et al., 2023).

    accelerate launch recipes/whitenedcse.py [--config recipes/configs/X.yaml] [--key value ...]

Defaults are the paper's bert-base setting: bert-base-uncased, wiki1m, 1 epoch, batch 64, lr 3e-5, max length 32,
temperature 0.05, [CLS] pooler, shuffled group whitening with group size 384, paper "positive number" 3
(``--num_positives 2``: anchor + 2 positives), loss eq. 7, STS-B dev every 125 steps, best checkpoint kept.
``--help`` lists every flag. The paper's ablations are flags:

* Table 3: ``--whitening none|pca|zca|group|shuffled_group``
* Table 4: ``--group_size 32..384`` with ``--whitening shuffled_group`` (shuffled) or ``group`` (w/o shuffle)
* Table 5: paper positive number 2..5 = ``--num_positives 1..4``
* loss: ``--loss_type L1|L2``; also ``--positive_source sgw|dropout``, ``--whitening_gradient true``,
  ``--inference_representation pooled|whitened|head``.
"""

from dataclasses import dataclass, field

from modeling import WhitenedCSEModel
from modeling.configuration_whitenedcse import dropout_views
from trainers import ContrastiveCollator, WhitenedCSETrainer
from trainers.recipe import (
    ContrastiveModelArguments,
    CSETrainingArguments,
    DataArguments,
    main_guard,
    parse_recipe_args,
    run_recipe,
)


@dataclass
class WhitenedCSEArguments(ContrastiveModelArguments):
    pooler_type: str = field(
        default="cls", metadata={"help": "Backbone feature: cls, cls_before_pooler, avg, avg_first_last, avg_top2 or "
                                 "layers (cls and cls_before_pooler are the same here: the head is always SGW+MLP)."}
    )
    whitening: str = field(
        default="shuffled_group", metadata={"help": "Table 3: none, pca, zca, group or shuffled_group."}
    )
    group_size: int = field(
        default=384, metadata={"help": "Table 4: channels per whitening group; must divide the hidden size."}
    )
    num_positives: int = field(
        default=2, metadata={"help": "Positives per anchor m (Table 5's positive number minus 1; >= 1)."}
    )
    positive_source: str = field(
        default="sgw",
        metadata={"help": "sgw: extra SGW draws on SimCSE's 2 dropout views (one backbone pass); dropout: "
                  "1 + num_positives dropout views, one SGW draw each (the released code)."},
    )
    loss_type: str = field(default="L1", metadata={"help": "L1 (eq. 7, sum of logs) or L2 (eq. 8, sum in the log)."})
    positive_weight: float = field(default=1.0, metadata={"help": "lambda_m of eq. 7/8."})
    whitening_eps: float = field(default=1e-5, metadata={"help": "Added to the covariance eigenvalues."})
    whitening_momentum: float = field(
        default=0.9, metadata={"help": "beta of eq. 13 for the running statistics used at inference."}
    )
    whitening_gradient: bool = field(
        default=False, metadata={"help": "Back-propagate through the whitening matrix (the released code does not)."}
    )
    inference_representation: str = field(
        default="pooled",
        metadata={"help": "Sentence vector at inference: pooled (backbone feature), whitened (running-stat "
                  "whitening) or head (whitening + linear + tanh)."},
    )


@dataclass
class WhitenedCSETrainingArguments(CSETrainingArguments):
    output_dir: str = field(default="outputs/whitenedcse", metadata={"help": "Where checkpoints and the model go."})


def build_model(model_path: str, args: WhitenedCSEArguments) -> WhitenedCSEModel:
    return WhitenedCSEModel.from_encoder(
        model_path,
        pooler_type=args.pooler_type,
        pooling_layers=args.pooling_layers,
        temperature=args.temperature,
        whitening=args.whitening,
        group_size=args.group_size,
        num_positives=args.num_positives,
        positive_source=args.positive_source,
        loss_type=args.loss_type,
        positive_weight=args.positive_weight,
        whitening_eps=args.whitening_eps,
        whitening_momentum=args.whitening_momentum,
        whitening_gradient=args.whitening_gradient,
        inference_representation=args.inference_representation,
    )


def main():
    model_args, data_args, training_args = parse_recipe_args(
        (WhitenedCSEArguments, DataArguments, WhitenedCSETrainingArguments)
    )
    views = dropout_views(model_args.positive_source, model_args.num_positives)

    def collator(tokenizer):
        return ContrastiveCollator(tokenizer, max_length=data_args.max_seq_length, unsupervised_views=views)

    run_recipe(model_args, data_args, training_args, build_model, WhitenedCSETrainer, collator=collator)


if __name__ == "__main__":
    main_guard(main)

"""CMLM-CSE training recipe (SimCSE + conditional-MLM auxiliary network).

    accelerate launch recipes/cmlm_cse.py [--config recipes/configs/X.yaml] [--key value ...]

Defaults are the paper's BERT-base setting: unsupervised SimCSE (wiki1m, batch 64, lr 3e-5, length 32, [CLS] +
MLP in training only, temperature 0.05) with a frozen 8-block lexical extractor, a 3-block fusioner, mask rate 15%
and lambda 0.005. The final model folder holds only the encoder + pooler; checkpoints keep the auxiliary network.

The paper's ablations are flags:

* Table 2  ``--mlm_weight 0`` (without MLM loss), ``--contrastive_weight 0`` (without contrastive loss)
* Table 3  ``--contrastive_augmentation word_repetition`` (``--word_repetition_rate 0.32``) or ``drop_one_word``
* Table 4  ``--mask_rate 0.15 ... 0.45``
* Table 5  ``--mlm_weight 0 ... 0.1``
* Table 6  ``--extractor_layers K --fusion_layers F`` (K < the encoder's layers: MiniLM has 6), ``--fusion_init``

``--help`` lists every flag.
"""

from dataclasses import dataclass, field

from modeling import CMLMCSEForPreTraining
from trainers import CMLMCSECollator, CMLMCSETrainer
from trainers.cmlm_cse import CONTRASTIVE_AUGMENTATIONS, contrastive_augmentation
from trainers.recipe import (
    ContrastiveModelArguments,
    CSETrainingArguments,
    DataArguments,
    main_guard,
    parse_recipe_args,
    run_recipe,
)


@dataclass
class CMLMCSEArguments(ContrastiveModelArguments):
    mlp_only_train: bool = field(default=True, metadata={"help": "Use the [CLS] MLP only in training."})
    extractor_layers: int = field(
        default=8, metadata={"help": "Blocks of the frozen lexical extractor (1 .. encoder layers - 1; paper 8)."}
    )
    fusion_layers: int = field(default=3, metadata={"help": "Transformer blocks of the fusioner (paper 3)."})
    fusion_init: str = field(
        default="top_layers",
        metadata={"help": "Fusioner start: 'top_layers' (copy of the pretrained top blocks) or 'random'."},
    )
    mask_rate: float = field(default=0.15, metadata={"help": "Share of tokens masked on the MLM side (80/10/10)."})
    mlm_weight: float = field(default=0.005, metadata={"help": "lambda, the MLM loss weight (0 = without MLM)."})
    contrastive_weight: float = field(
        default=1.0, metadata={"help": "Contrastive loss weight (0 = without contrastive loss, Table 2)."}
    )
    contrastive_augmentation: str = field(
        default="none",
        metadata={"help": f"Augmentation of the positive view (Table 3): {', '.join(CONTRASTIVE_AUGMENTATIONS)}."},
    )
    word_repetition_rate: float = field(
        default=0.32, metadata={"help": "Share of words repeated by --contrastive_augmentation word_repetition."}
    )


@dataclass
class CMLMCSETrainingArguments(CSETrainingArguments):
    output_dir: str = field(default="outputs/cmlm_cse", metadata={"help": "Where checkpoints and the model go."})


def build_model(model_path: str, args: CMLMCSEArguments) -> CMLMCSEForPreTraining:
    return CMLMCSEForPreTraining.from_encoder(
        model_path,
        pooler_type=args.pooler_type,
        pooling_layers=args.pooling_layers,
        mlp_only_train=args.mlp_only_train,
        temperature=args.temperature,
        extractor_layers=args.extractor_layers,
        fusion_layers=args.fusion_layers,
        fusion_init=args.fusion_init,
        mask_rate=args.mask_rate,
        mlm_weight=args.mlm_weight,
        contrastive_weight=args.contrastive_weight,
    )


def main():
    model_args, data_args, training_args = parse_recipe_args(
        (CMLMCSEArguments, DataArguments, CMLMCSETrainingArguments)
    )
    augment = contrastive_augmentation(model_args.contrastive_augmentation, model_args.word_repetition_rate)

    def collator(tokenizer):
        return CMLMCSECollator(
            tokenizer, max_length=data_args.max_seq_length, augment=augment, mask_rate=model_args.mask_rate
        )

    run_recipe(model_args, data_args, training_args, build_model, CMLMCSETrainer, collator=collator)


if __name__ == "__main__":
    main_guard(main)

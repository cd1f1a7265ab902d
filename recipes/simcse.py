"""SimCSE training recipe.

    accelerate launch recipes/simcse.py [--config recipes/configs/X.yaml] [--key value ...]

Defaults are the paper's unsupervised setting: bert-base-uncased, wiki1m, 1 epoch, batch 64, lr 3e-5, max length
32, temperature 0.05, [CLS] pooler with the MLP in training only, STS-B dev every 125 steps, best checkpoint kept.
A ``.csv`` train file (sent0,sent1[,hard_neg]) switches to supervised SimCSE. ``--help`` lists every flag.
"""

from modeling import SimCSEModel
from trainers import SimCSETrainer
from trainers.recipe import (
    CSETrainingArguments,
    DataArguments,
    SimCSEArguments,
    main_guard,
    parse_recipe_args,
    run_recipe,
)


def build_model(model_path: str, args: SimCSEArguments) -> SimCSEModel:
    return SimCSEModel.from_encoder(
        model_path,
        pooler_type=args.pooler_type,
        pooling_layers=args.pooling_layers,
        mlp_only_train=args.mlp_only_train,
        temperature=args.temperature,
        hard_negative_weight=args.hard_negative_weight,
    )


def main():
    model_args, data_args, training_args = parse_recipe_args((SimCSEArguments, DataArguments, CSETrainingArguments))
    run_recipe(model_args, data_args, training_args, build_model, SimCSETrainer)


if __name__ == "__main__":
    main_guard(main)

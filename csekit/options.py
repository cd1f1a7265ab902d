"""The command-line options several commands share, declared once, and the one check of sizes and counts.

``csekit evaluate`` and ``csekit extract`` (and the other commands, for the data folder) add these with the same
names, defaults and help. `positive_int` is the "integer >= 1" check of every size, length and count, in the
commands (as an argparse type) and in the recipes (``trainers/arguments.py``), so a bad value reads the same
everywhere: ``argument --batch-size: must be an integer >= 1, got '0'``.
"""

import argparse

from .data import DATA_DIR_HELP

# config fields whose recipe flag says more than the field's name: {field: flag} (the model card maps them back)
FLAG_NAMES = {"max_length": "inference_max_length"}
# recipe flags renamed in this release, still accepted (with a warning) until the next one: {old: new}
FLAG_ALIASES = {"max_length": "inference_max_length"}


def positive_int(value) -> int:
    """An integer >= 1. A length or batch of 0 would silently mean "no truncation" or fail after the model loads."""
    text = str(value).strip()
    if not text.lstrip("-").isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {str(value)!r}")
    return int(text)


def add_data_dir(parser) -> None:
    """``--data-dir``, also spelled ``--data_dir`` as the recipes spell it."""
    parser.add_argument("--data-dir", "--data_dir", dest="data_dir", default=None, help=DATA_DIR_HELP)


def add_device(parser, what: str = "The model runs") -> None:
    parser.add_argument("--device", default="auto", help=f"{what} here: auto (a CUDA GPU when there is one, else "
                        "cpu), cpu, cuda or cuda:N.")


def add_encoding(parser, batch_size: int) -> None:
    """``--batch-size`` and ``--max-length`` of the forward passes."""
    parser.add_argument("--batch-size", type=positive_int, default=batch_size, help="Texts per forward pass.")
    parser.add_argument("--max-length", type=positive_int, default=None,
                        help="Truncation length (default: the model's maximum).")


def add_output(parser, what: str) -> None:
    parser.add_argument("--output", default=None, help=f"Write {what} as JSON here.")


def add_suite_options(parser, transfer_protocols) -> None:
    """The caps and settings of the transfer and clustering suites."""
    parser.add_argument(
        "--transfer-max-train", type=positive_int, default=None,
        help="transfer: cap training examples per task (seeded stratified subsample; whole task for CV tasks).",
    )
    parser.add_argument(
        "--transfer-protocol", choices=transfer_protocols, default="senteval",
        help="transfer: 'senteval' = SentEval's scikit-learn protocol (raw features; C by inner 10-fold CV, 10-fold "
        "CV on train or the dev split; 11 tasks with SICK-R and STS-B); 'simcse' = SentEval's PyTorch classifier as "
        "SimCSE's evaluation.py --mode test runs it (the SimCSE/WhitenedCSE tables; 7 tasks); 'fast' = a "
        "StandardScaler + C=1 shortcut on 9 tasks (quick runs). Avg. is the mean of MR..MRPC in every protocol.",
    )
    parser.add_argument("--transfer-jobs", type=positive_int, default=1,
                        help="transfer: cross-validation folds fitted in parallel (joblib).")
    parser.add_argument("--clustering-max-examples", type=positive_int, default=None,
                        help="clustering: cap texts per dataset (seeded random subsample).")
    parser.add_argument("--clustering-runs", type=positive_int, default=10,
                        help="clustering: k-means runs averaged per dataset.")


__all__ = ["add_data_dir", "add_device", "add_encoding", "add_output", "add_suite_options", "positive_int"]

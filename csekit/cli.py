"""The ``csekit`` command line: one sub-command per job, each defined next to the code it runs.

    csekit train METHOD [recipe flags]       train (one process; several: accelerate launch -m csekit.recipes.METHOD)
    csekit evaluate MODEL [--tasks ...]      score an encoder on STS / transfer / clustering / geometry / MTEB
    csekit compare RESULT...                 results side by side, warning where protocols differ
    csekit extract [--models ...]            training-free extraction grid
    csekit mine MODEL --pairs F --output F   hard negatives for sent0,sent1 pairs: triplets or n-tuples
    csekit card | push | export-st | export-onnx   publish a trained model folder, ship it as one ONNX graph
    csekit download wiki1m|nli|senteval      SimCSE's corpora and the SentEval data from the Hub

Bad input ends with one line on stderr and exit status 2.
"""

import argparse
import sys

from .errors import OneLineUsageErrors, report_errors
from .evaluation.cli import add_evaluate_parser
from .evaluation.compare import add_compare_parser
from .extraction.cli import add_extract_parser
from .mining.cli import add_mine_parser
from .publishing.cli import add_card_parser, add_export_onnx_parser, add_export_st_parser, add_push_parser


def recipe_names() -> list:
    """The training methods: the method registry's names."""
    from .methods import METHODS

    return list(METHODS)


def add_train_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "train",
        help="Train with a method's recipe in this process (`csekit train METHOD --help` lists its flags).",
        description="Run the training recipe of METHOD in this process, on a GPU when there is one. For several "
        "processes, GPUs or machines use `accelerate launch [--multi_gpu --num_processes N] -m "
        "csekit.recipes.METHOD [flags]`, which takes the same flags.",
    )
    parser.add_argument("method", metavar="METHOD", choices=recipe_names(), help=", ".join(recipe_names()))
    parser.add_argument("recipe_args", nargs=argparse.REMAINDER, help="The recipe's flags (--config, --key value).")
    parser.set_defaults(handler=run_train)


def run_train(args) -> int:
    from .methods import get_method

    if args.recipe_args in (["--help"], ["-h"]):  # the shipped text: no torch import (csekit/recipe_help.py)
        from .recipe_help import help_text

        print(help_text(args.method), end="")
        return 0
    try:
        get_method(args.method).recipe_module.main(args.recipe_args, prog=f"csekit train {args.method}")
    except SystemExit as stop:  # the recipe's parser: --help (0) or a usage error, already printed in one line (2)
        return stop.code if isinstance(stop.code, int) else 2
    return 0


def add_download_parser(subparsers) -> None:
    from .download import CORPORA, DATA_REPO
    from .options import add_data_dir

    parser = subparsers.add_parser(
        "download",
        help="Download SimCSE's corpora (wiki1m, nli) or the SentEval data (senteval) into the data folder.",
        description=f"Fetch files of the Hub dataset {DATA_REPO} through the Hugging Face cache, check each against "
        "the hash the Hub published, and place it in the data folder (wiki1m -> wiki/wiki1m_for_simcse.txt, nli -> "
        "nli/nli_for_simcse.csv, senteval -> senteval/downstream/). Nothing appears in the data folder unless the "
        "file is complete and verified.",
    )
    parser.add_argument("names", metavar="NAME", nargs="+", choices=sorted(CORPORA),
                        help=", ".join(f"{name} ({corpus.size})" for name, corpus in CORPORA.items()))
    add_data_dir(parser)
    parser.add_argument("--revision", default=None, help="A branch, tag or commit of the Hub repository.")
    parser.add_argument("--force", action="store_true", help="Replace a copy that is already there.")
    parser.set_defaults(handler=run_download)


def run_download(args) -> int:
    from .download import download

    for name in args.names:
        print(f"{name}: {download(name, args.data_dir, force=args.force, revision=args.revision)}")
    return 0


class ArgumentParser(OneLineUsageErrors, argparse.ArgumentParser):
    """The parser of ``csekit`` and (``add_subparsers`` uses the parent's class) of its sub-commands."""


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="csekit", description="Contrastive sentence embeddings: train, evaluate, extract, publish, download."
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    add_train_parser(subparsers)
    add_evaluate_parser(subparsers)
    add_compare_parser(subparsers)
    add_extract_parser(subparsers)
    add_card_parser(subparsers)
    add_push_parser(subparsers)
    add_export_st_parser(subparsers)
    add_export_onnx_parser(subparsers)
    add_mine_parser(subparsers)
    add_download_parser(subparsers)
    return parser


def main(argv=None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as stop:  # --help (0) or a usage error, already printed in one line (2)
        return stop.code if isinstance(stop.code, int) else 2
    return report_errors(lambda: args.handler(args))


if __name__ == "__main__":
    sys.exit(main())

"""``csekit mine``: the command line of [`csekit.mining.hard_negatives`][csekit.mining.hard_negatives] (its module
docstring says what each option means).

    csekit mine MODEL --pairs pairs.csv --output triplets.csv [--num_negatives 1] [--output_format n-tuple] ...
"""

import sys

from ..errors import DataError
from ..options import add_device, add_encoding, positive_int
from . import OUTPUT_FORMATS, SAMPLING


def add_mine_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "mine", help="Mine hard negatives for sent0,sent1 pairs with an embedder: triplets or n-tuples.",
        description="Mine hard negatives for (anchor, positive) pairs with an embedder, as sentence-transformers' "
        "mine_hard_negatives does (its triplet and n-tuple outputs), and write the sent0,sent1,hard_neg CSV (or "
        "sent0,sent1,hard_neg_1,...,hard_neg_k) supervised SimCSE trains on. MODEL is any embedder csekit evaluate "
        "reads.")
    parser.add_argument("model", metavar="MODEL")
    parser.add_argument("--pairs", required=True, help="A sent0,sent1 CSV, or a Hub dataset with those columns.")
    parser.add_argument("--output", required=True, help="The CSV file of the mined rows.")
    parser.add_argument("--output_format", "--output-format", choices=OUTPUT_FORMATS, default="triplet",
                        help="triplet: sent0,sent1,hard_neg, a row per negative; n-tuple: "
                        "sent0,sent1,hard_neg_1,...,hard_neg_k, a row per pair with its --num_negatives negatives.")
    parser.add_argument("--overwrite", action="store_true", help="Replace --output if it exists.")
    parser.add_argument("--corpus", default=None,
                        help="A text file of further candidates, one a line (default: the positives alone).")
    parser.add_argument("--num_negatives", "--num-negatives", type=positive_int, default=1,
                        help="Negatives per pair (rows per pair).")
    parser.add_argument("--range_min", "--range-min", type=int, default=0,
                        help="Skip the first ranks of each anchor's candidates.")
    parser.add_argument("--range_max", "--range-max", type=positive_int, default=None,
                        help="The last rank considered (default: range_min + num_negatives (x10 with a filter) + the "
                        "most positives of one anchor).")
    parser.add_argument("--relative_margin", "--relative-margin", type=float, default=None,
                        help="Drop candidates scoring above the positive's score less this share of it (e.g. 0.05).")
    parser.add_argument("--absolute_margin", "--absolute-margin", type=float, default=None,
                        help="Drop candidates scoring above the positive's score less this number.")
    parser.add_argument("--max_score", "--max-score", type=float, default=None,
                        help="Drop candidates scoring above this.")
    parser.add_argument("--sampling", choices=SAMPLING, default="top",
                        help="top: the best candidates; random: drawn among those kept (seeded by --seed).")
    parser.add_argument("--seed", type=int, default=42, help="The seed of --sampling random.")
    parser.add_argument("--query_prompt", "--query-prompt", default=None,
                        help="Text put before each anchor when it is encoded, in place of MODEL's default prompt "
                        "('': none; default: MODEL's own).")
    parser.add_argument("--corpus_prompt", "--corpus-prompt", default=None,
                        help="Text put before each candidate (positives and --corpus) when it is encoded, in place of "
                        "MODEL's default prompt ('': none; default: MODEL's own).")
    parser.add_argument("--use_faiss", "--use-faiss", action="store_true",
                        help="Rank the candidates with an exact faiss index (pip install 'csekit[faiss]').")
    add_encoding(parser, batch_size=128)
    add_device(parser)
    parser.set_defaults(handler=run_mine)


def run_mine(args) -> int:
    from pathlib import Path

    from ..atomic import write_text
    from ..data import read_sentences
    from ..evaluation.encoders import load_embedder
    from ..preflight import check_output_file
    from ..trainers.data import load_training_dataset
    from .hard_negatives import check_candidates, check_mining_options, mine_hard_negatives, mined_csv

    check_mining_options(args.num_negatives, args.range_min, args.range_max, args.relative_margin,
                         args.absolute_margin, args.max_score, args.sampling, args.output_format, args.use_faiss)
    output = check_output_file(args.output, "--output", [args.model])
    if output.exists() and not args.overwrite:
        raise DataError(f"--output {args.output}: exists; give --overwrite to replace it")
    pairs = load_training_dataset(args.pairs)
    if "sent1" not in pairs.column_names:
        raise DataError(f"--pairs {args.pairs}: one sentence a row; mining needs sent0,sent1 pairs")
    corpus = read_sentences(Path(args.corpus)) if args.corpus else None
    check_candidates((corpus or []) + list(pairs["sent1"]), args.num_negatives)  # before the model loads
    embed, _ = load_embedder(args.model, max_length=args.max_length, batch_size=args.batch_size, device=args.device)
    columns, summary = mine_hard_negatives(
        pairs["sent0"], pairs["sent1"], embed, corpus, args.num_negatives, args.range_min, args.range_max,
        args.relative_margin, args.absolute_margin, args.max_score, args.sampling, args.seed,
        output_format=args.output_format, query_prompt=args.query_prompt, corpus_prompt=args.corpus_prompt,
        use_faiss=args.use_faiss)
    if not summary["rows"]:
        raise DataError("no negative survived the filters (--relative_margin, --absolute_margin, --max_score, "
                        "--range_max); loosen them")
    write_text(output, mined_csv(columns))
    dropped = ", ".join(f"{count} by --{name}" for name, count in summary["dropped"].items()) or "none"
    print(f"{summary['rows']} {args.output_format}s from {summary['anchors']} anchors and {summary['candidates']} "
          f"candidates (ranks {args.range_min}..{summary['range_max']}; candidates dropped: {dropped}; anchors with "
          f"fewer than {args.num_negatives} negative(s): {summary['anchors_short']}) in {output}", file=sys.stderr)
    return 0


__all__ = ["add_mine_parser", "run_mine"]

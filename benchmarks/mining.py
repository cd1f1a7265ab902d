"""Hard-negative mining: csekit's (``csekit/mining/hard_negatives.py``) against sentence-transformers'
``mine_hard_negatives``, on the same vectors.

Both encode with the same model, so the texts are encoded once and both rank those vectors: csekit through an
embedder that looks them up, sentence-transformers through its own embedding cache (``cache_folder``, which it fills
on the first call). What is timed is the rest: ranking every anchor's candidates, the filters and the rows. Each run
mines ``--num-negatives`` negatives with ``--relative-margin``, alternating round by round, and the outputs are
checked equal. With faiss installed (``csekit[faiss]``) csekit's ``use_faiss`` ranking is a third run, its rows
compared with the matrix products' (those not among them counted). The largest score matrix each holds at once is
computed from its chunking: csekit's ``CHUNK_ELEMENTS``, sentence-transformers' ``faiss_batch_size`` anchors (16,384
by default) times the corpus.

    OMP_NUM_THREADS=2 python benchmarks/mining.py --data-dir DATA [--pairs 5000] [--rounds 5] [--output DIR]
"""

import argparse
import importlib.util
import os
import random
import sys
import tempfile
import time

from common import command_line, format_spread, interleaved, machine_description, set_threads, spread, write_outputs
from csekit.mining import hard_negatives
from csekit.trainers.data import load_training_dataset

ST_ANCHOR_CHUNK = 16384  # sentence-transformers' default faiss_batch_size: anchors ranked at once


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default=os.environ.get("CSEKIT_DATA_DIR"))
    parser.add_argument("--pairs-file", default="nli/snli_devtest_for_simcse.csv",
                        help="sent0,sent1[,hard_neg] CSV in the data folder (its first two columns are mined).")
    parser.add_argument("--pairs", type=int, default=5000)
    parser.add_argument("--num-negatives", type=int, default=3)
    parser.add_argument("--relative-margin", type=float, default=0.05)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--output", default=None, help="Folder for mining.json / .md.")
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.util import mine_hard_negatives as reference

    from csekit.loading import embedded_minilm_path

    args = parse(argv)
    set_threads(args.threads)
    pairs = load_training_dataset(args.pairs_file, args.data_dir, max_examples=args.pairs)
    anchors, positives = list(pairs["sent0"]), list(pairs["sent1"])
    model = SentenceTransformer(str(embedded_minilm_path()), device="cpu")
    # the vectors sentence-transformers' miner computes (the same calls: candidates as documents, distinct anchors as
    # queries, its batch size and normalisation), so both rank bit-identical vectors
    candidates, queries = list(dict.fromkeys(positives)), list(dict.fromkeys(anchors))
    start = time.perf_counter()
    vectors = {"candidates": model.encode_document(candidates, batch_size=32, normalize_embeddings=True),
               "queries": model.encode_query(queries, batch_size=32, normalize_embeddings=True)}
    encode_seconds = time.perf_counter() - start

    def embed(batch):
        return vectors["candidates" if batch == candidates else "queries"]

    options = {"num_negatives": args.num_negatives, "relative_margin": args.relative_margin}
    cache = tempfile.mkdtemp()
    dataset = Dataset.from_dict({"sent0": anchors, "sent1": positives})
    outputs = {}

    def csekit_run(use_faiss: bool = False) -> float:
        begin = time.perf_counter()
        columns, _ = hard_negatives.mine_hard_negatives(anchors, positives, embed, progress=False,
                                                        use_faiss=use_faiss, **options)
        outputs["csekit, faiss" if use_faiss else "csekit"] = list(zip(*columns.values()))
        return time.perf_counter() - begin

    def st_run() -> float:
        random.seed(42)
        begin = time.perf_counter()
        mined = reference(dataset, model, cache_folder=cache, verbose=False, output_format="triplet", **options)
        outputs["sentence-transformers"] = list(zip(mined["sent0"], mined["sent1"], mined["negative"]))
        return time.perf_counter() - begin

    runs = {"csekit": csekit_run, "sentence-transformers": st_run}
    if importlib.util.find_spec("faiss") is not None:  # csekit[faiss]: --use_faiss
        runs["csekit, faiss"] = lambda: csekit_run(use_faiss=True)
    timings = interleaved(runs, args.rounds)
    same = outputs["csekit"] == outputs["sentence-transformers"]
    # faiss sums the same inner products in another order: a candidate on a filter's boundary or a tie may fall the
    # other way, so its rows are compared with the matrix products' and the differing ones counted
    faiss_differ = (len(set(outputs["csekit, faiss"]) - set(outputs["csekit"])) if "csekit, faiss" in outputs
                    else None)
    corpus = len(set(positives))
    largest = {"csekit": min(hard_negatives.CHUNK_ELEMENTS // corpus, len(set(anchors))) * corpus,
               "sentence-transformers": min(ST_ANCHOR_CHUNK, len(set(anchors))) * corpus}
    ratio = spread(timings["sentence-transformers"])["median"] / spread(timings["csekit"])["median"]
    faiss_ratio = (spread(timings["sentence-transformers"])["median"] / spread(timings["csekit, faiss"])["median"]
                   if "csekit, faiss" in timings else None)
    command, shown = command_line("mining.py", argv)
    lines = [f"Command: `{shown}`",
             f"Machine: {machine_description()}.",
             f"Workload: {len(anchors)} pairs of `{args.pairs_file}` ({len(set(anchors))} distinct anchors, {corpus} "
             f"candidates), all-MiniLM-L6-v2 vectors computed once ({encode_seconds:.0f} s), {args.num_negatives} "
             f"negatives with relative margin {args.relative_margin}; {args.rounds} alternating rounds. Same rows: "
             f"{'yes' if same else 'NO'}" + ("" if faiss_differ is None else
                                               f"; faiss's rows not among the matrix products': {faiss_differ}")
             + ".", "",
             "| miner | s, median (min–max) | largest score matrix held (floats) |", "|---|---:|---:|"]
    lines += [f"| {name} | {format_spread(values, 3)} | {largest[name]:,} |" if name in largest else
              f"| {name} | {format_spread(values, 3)} | faiss's own blocks |" for name, values in timings.items()]
    lines += ["", f"csekit / sentence-transformers speed: {ratio:.2f}x."]
    if faiss_ratio is not None:
        lines += [f"csekit with faiss / sentence-transformers speed: {faiss_ratio:.2f}x."]
    table = "\n".join(lines) + "\n"
    print(table)
    record = {"command": command, "machine": machine_description(), "rounds": args.rounds, "pairs": len(anchors),
              "seconds": timings, "same_rows": same, "largest_score_matrix": largest, "speed_ratio": ratio,
              "faiss_speed_ratio": faiss_ratio, "faiss_rows_differing": faiss_differ}
    if args.output:
        write_outputs(args.output, "mining", record, table)
    if not same:
        sys.exit("mining.py: csekit's rows differ from sentence-transformers'")
    return record


if __name__ == "__main__":
    main()

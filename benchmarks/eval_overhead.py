"""The host's share of an in-loop evaluation: what one STS-B dev evaluation costs besides the model.

The recipes score STS-B dev every 125 steps (the papers' cadence): 125 evaluations of the same 3,000 sentences per
wiki1m epoch. Besides the encoder's forward passes, each evaluation pays on the host for a tokenizer pass to sort
the sentences by length, the tokenization of every batch, and the Spearman scoring. Here the model is replaced by
a function of the token ids that does next to no work, so what is timed is that host cost alone: with every
batch tokenized again (``cache`` off), and with the batches tokenized once and reused
(``modeling/encoding.py`` ``BatchCache``, what the trainer's evaluation does). The two alternate round by round.

    OMP_NUM_THREADS=2 python benchmarks/eval_overhead.py [--rounds 10] [--batch-size 128] [--output DIR]
"""

import argparse
import time

from transformers import AutoTokenizer

from common import command_line, format_spread, interleaved, machine_description, set_threads, spread, write_outputs
from csekit.evaluation.sts import STSEvaluator
from csekit.loading import embedded_minilm_path
from csekit.modeling.encoding import BatchCache, encode_sentences

EVALUATIONS_PER_EPOCH = 125  # wiki1m: 15,625 steps of 64, STS-B dev every 125 steps


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=128, help="The trainer's evaluation batch (default 128).")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--output", default=None, help="Folder for eval_overhead.json / .md.")
    return parser.parse_args(argv)


def evaluation(evaluator, tokenizer, batch_size: int, cache) -> float:
    """Seconds of one STS-B dev evaluation whose "model" is a sum of token ids."""
    def encode(sentences):
        return encode_sentences(lambda batch: batch["input_ids"].float().sum(-1, keepdim=True).repeat(1, 2),
                                tokenizer, sentences, batch_size=batch_size, show_progress_bar=False,
                                cache=cache).numpy()

    start = time.perf_counter()
    evaluator(encode)
    return time.perf_counter() - start


def main(argv=None) -> dict:
    args = parse(argv)
    set_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(str(embedded_minilm_path()))
    evaluator = STSEvaluator(None, ("STSBenchmark",), split="dev")
    cache = BatchCache()
    timings = interleaved({"tokenized every time": lambda: evaluation(evaluator, tokenizer, args.batch_size, None),
                           "tokenized once": lambda: evaluation(evaluator, tokenizer, args.batch_size, cache)},
                          args.rounds)
    command, shown = command_line("eval_overhead.py", argv)
    lines = [f"Command: `{shown}`",
             f"Machine: {machine_description()}.",
             f"Workload: one STS-B dev evaluation ({len(evaluator.sentences())} distinct sentences, batch "
             f"{args.batch_size}, the all-MiniLM-L6-v2 tokenizer), the model replaced by a sum of token ids; "
             f"{args.rounds} alternating rounds.", "",
             "| host work per evaluation | ms, median (min–max) | s per wiki1m epoch (125 evaluations) |",
             "|---|---:|---:|"]
    lines += [f"| {name} | {format_spread(values, 1, 1000)} | {spread(values)['median'] * EVALUATIONS_PER_EPOCH:.1f} |"
              for name, values in timings.items()]
    table = "\n".join(lines) + "\n"
    print(table)
    record = {"command": command, "machine": machine_description(), "rounds": args.rounds,
              "batch_size": args.batch_size, "seconds": timings}
    if args.output:
        write_outputs(args.output, "eval_overhead", record, table)
    return record


if __name__ == "__main__":
    main()

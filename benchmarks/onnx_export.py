"""What ``csekit export-onnx`` ships: STS of the exported graphs against the PyTorch model, and their CPU speed.

    CSEKIT_DATA_DIR=... python benchmarks/onnx_export.py [--model all-MiniLM-L6-v2] [--rounds 3] [--threads 2]

Exports MODEL twice (float32, ``--quantize int8``), scores the 7 STS test sets (SentEval "all", Spearman x 100) with
``SentenceTransformer.encode`` (PyTorch) and with each graph through onnxruntime, then times the three encoding the
STS-B test sentences (batch 64, length-sorted batches for all three), the three alternating within each round so a
busy machine slows all of them alike. Reported: the scores, and per backend the median seconds and its ratio to
PyTorch's. PyTorch and onnxruntime run with the same thread count (``--threads``).
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args(argv)

    import onnxruntime
    import torch
    from transformers import AutoTokenizer

    from csekit.data import resolve_data_dir
    from csekit.evaluation.sts import STS_TASKS, STSEvaluator
    from csekit.publishing.onnx_export import GRAPH_FILE, export_onnx, load_sentence_transformer, onnx_vectors

    torch.set_num_threads(args.threads)
    data_dir = resolve_data_dir(None)
    test = STSEvaluator(data_dir, STS_TASKS, split="test")
    sentences = STSEvaluator(data_dir, ["STSBenchmark"], split="test").sentences()
    st = load_sentence_transformer(args.model)
    work = tempfile.TemporaryDirectory()
    encoders = {"PyTorch (SentenceTransformer.encode)": lambda texts: st.encode(
        texts, batch_size=args.batch_size, convert_to_numpy=True)}
    for label, quantize in (("ONNX float32", None), ("ONNX int8", "int8")):
        folder = Path(work.name) / label.replace(" ", "-")
        start = time.perf_counter()
        record = export_onnx(args.model, folder, quantize=quantize)
        size = (folder / GRAPH_FILE).stat().st_size / 2**20
        check = record["check"]
        print(f"{label}: exported in {time.perf_counter() - start:.0f} s, {size:.1f} MiB, probe check max |difference| "
              f"{check['max_abs_difference']:.1e}, min cosine {check['min_cosine']:.4f}", file=sys.stderr)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = args.threads
        options.log_severity_level = 3
        session = onnxruntime.InferenceSession(str(folder / GRAPH_FILE), options, providers=["CPUExecutionProvider"])
        tokenizer = AutoTokenizer.from_pretrained(folder)
        encoders[label] = (lambda session, tokenizer, length: lambda texts: onnx_vectors(
            session, tokenizer, texts, length, args.batch_size))(session, tokenizer, record["max_length"])

    scores = {label: test(encode) for label, encode in encoders.items()}
    seconds = {label: [] for label in encoders}
    for _ in range(args.rounds):
        for label, encode in encoders.items():
            start = time.perf_counter()
            encode(sentences)
            seconds[label].append(time.perf_counter() - start)
    work.cleanup()

    reference = statistics.median(next(iter(seconds.values())))
    print(f"| backend | STS avg | {' | '.join(STS_TASKS)} | median s ({len(sentences)} sentences) | time vs PyTorch |")
    print(f"|---|---:|{'---:|' * len(STS_TASKS)}---:|---:|")
    for label in encoders:
        median = statistics.median(seconds[label])
        cells = " | ".join(f"{scores[label][task]:.2f}" for task in STS_TASKS)
        print(f"| {label} | {scores[label]['avg']:.2f} | {cells} | {median:.2f} | {median / reference:.2f} |")


if __name__ == "__main__":
    main()

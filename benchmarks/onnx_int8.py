"""Which int8 graph ``csekit export-onnx --quantize int8`` ships, measured: onnxruntime's quantisation settings side by
side on one model, next to sentence-transformers' own int8 export.

    CSEKIT_DATA_DIR=... python benchmarks/onnx_int8.py --st-python VENV/bin/python --output benchmarks/results

Graphs, all from the same float32 export (``csekit export-onnx MODEL``, pooling and Normalize inside):

* ``per-tensor``: ``quantize_dynamic`` with one weight scale per matrix (what ``--quantize int8`` shipped before);
* ``per-channel``: ``--quantize int8`` as it is (``INT8_SETTINGS``: one scale per output channel);
* ``per-channel, int8/uint8 weights``: the same with the other 8-bit weight type (signed or unsigned);
* ``per-channel, fused``: the same after onnxruntime's BERT graph optimisations (``optimize_model``);
* ``static``: activation scales calibrated once (MinMax, QDQ) on 200 other sentences, per-channel weights;
* ``weight-only``: ``MatMulNBits``, 8 bits, blocks of 32, int8 compute (accuracy level 4: each token's activations
  quantised on their own);
* ``sentence-transformers int8`` (``--st-python``: a Python where ``sentence-transformers[onnx]`` installs, which
  needs transformers<4.58): ``export_dynamic_quantized_onnx_model(model, "avx2")`` on the model loaded with
  ``backend="onnx"``, encoded by sentence-transformers (optimum's graph of the Transformer, pooling in PyTorch).

Per graph: over the export's 200 check sentences of varied length (3 to about 300 words), the lowest and mean cosine
and the largest coordinate difference to the float32 vectors (batches of 64, length-sorted); the batch dependence,
the lowest cosine between a sentence encoded alone and in its batch; the 7 STS test sets (SentEval "all", Spearman
x 100) for float32, csekit's int8 and sentence-transformers' int8 (``STS_GRAPHS``); the median seconds of
``--rounds`` encodings of the 2,551 STS-B test sentences, the csekit graphs alternating within each round
(sentence-transformers' side times itself in its own process, same threads and texts); the graph's size.
``--threads`` for onnxruntime and torch alike.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_description, write_outputs  # noqa: E402

# the graphs scored on the 7 STS test sets (the others: their distance to float32 only, which is cheaper)
STS_GRAPHS = ("float32", "per-channel (--quantize int8)")


def st_side(args) -> None:
    """Run under ``--st-python``: sentence-transformers' int8 export, its vectors and its time, into ``--st-side``."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.backend import export_dynamic_quantized_onnx_model

    torch.set_num_threads(args.threads)
    out = Path(args.st_side)
    texts = json.loads(Path(args.texts).read_text())
    model = SentenceTransformer(args.model, backend="onnx", model_kwargs={"provider": "CPUExecutionProvider"})
    model.save(str(out))  # the folder, its float32 onnx/model.onnx included; the int8 graph is written beside it
    export_dynamic_quantized_onnx_model(model, "avx2", str(out))
    graph = next((out / "onnx").glob("model_*int8_avx2.onnx"))  # named by its weights' type (quint8 for avx2)
    int8 = SentenceTransformer(str(out), backend="onnx", model_kwargs={
        "file_name": f"onnx/{graph.name}", "provider": "CPUExecutionProvider"})
    encode = lambda sentences, batch=64: int8.encode(sentences, batch_size=batch, convert_to_numpy=True)  # noqa: E731
    vectors = {"check": encode(texts["check"]), "alone": np.stack([encode([s], 1)[0] for s in texts["check"]]),
               "sts": encode(texts["sts"])}
    seconds = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        encode(texts["timed"])
        seconds.append(time.perf_counter() - start)
    np.savez(out / "vectors.npz", **vectors)
    size = graph.stat().st_size / 2**20
    import sentence_transformers
    import transformers
    (out / "times.json").write_text(json.dumps({"seconds": seconds, "mib": size, "versions": {
        "sentence-transformers": sentence_transformers.__version__, "transformers": transformers.__version__}}))


def session(path, threads: int):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def candidates(float32: Path, work: Path, model: str, tokenizer) -> dict:
    """The int8 graphs' paths, by name, built from the float32 export."""
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    from onnxruntime.transformers.optimizer import optimize_model

    from csekit.publishing.onnx_export import GRAPH_FILE, INPUTS, INT8_SETTINGS, check_sentences, export_onnx

    graphs = {}
    quantize_dynamic(str(float32), str(work / "per-tensor.onnx"), weight_type=QuantType.QInt8)
    graphs["per-tensor"] = work / "per-tensor.onnx"
    export_onnx(model, work / "csekit-int8", quantize="int8")
    graphs["per-channel (--quantize int8)"] = work / "csekit-int8" / GRAPH_FILE
    other = "QUInt8" if INT8_SETTINGS["weight_type"] == "QInt8" else "QInt8"
    quantize_dynamic(str(float32), str(work / "per-channel-other.onnx"),
                     **{**INT8_SETTINGS, "weight_type": QuantType[other]})
    graphs[f"per-channel, {other[1:].lower()} weights"] = work / "per-channel-other.onnx"
    optimize_model(str(float32), model_type="bert", num_heads=0, hidden_size=0).save_model_to_file(
        str(work / "fused.onnx"))
    quantize_dynamic(str(work / "fused.onnx"), str(work / "fused-int8.onnx"),
                     **{**INT8_SETTINGS, "weight_type": QuantType[INT8_SETTINGS["weight_type"]]})
    graphs["per-channel, fused"] = work / "fused-int8.onnx"

    class Calibration(CalibrationDataReader):  # 200 sentences that are not the check's
        def __init__(self):
            texts = check_sentences(400)[200:]
            self.feeds = iter([{name: tokenizer(texts[i:i + 16], padding=True, truncation=True, max_length=256,
                                                return_tensors="np")[name].astype(np.int64) for name in INPUTS}
                               for i in range(0, len(texts), 16)])

        def get_next(self):
            return next(self.feeds, None)

    quantize_static(str(float32), str(work / "static.onnx"), Calibration(), quant_format=QuantFormat.QDQ,
                    op_types_to_quantize=["MatMul"], per_channel=True, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax)
    graphs["static"] = work / "static.onnx"
    quantizer = MatMulNBitsQuantizer(onnx.load(str(float32)), bits=8, block_size=32, is_symmetric=True,
                                     accuracy_level=4)
    quantizer.process()
    quantizer.model.save_model_to_file(str(work / "weight-only.onnx"), False)
    graphs["weight-only"] = work / "weight-only.onnx"
    return graphs


def real_text(args, argv) -> None:
    """``--real-text``: ``csekit export-onnx --quantize int8`` (the shipped graph) against the float32 export on the
    2,551 distinct STS-B test sentences: the lowest and mean cosine and the largest coordinate difference (batches of
    64), and each graph's batch dependence (a sentence alone against the same sentence in a batch of 32)."""
    import torch
    from transformers import AutoTokenizer

    from csekit.data import resolve_data_dir
    from csekit.evaluation.sts import STSEvaluator
    from csekit.publishing.onnx_export import GRAPH_FILE, cosines, export_onnx, onnx_vectors

    torch.set_num_threads(args.threads)
    texts = STSEvaluator(resolve_data_dir(None), ["STSBenchmark"], split="test").sentences()
    work = Path(tempfile.mkdtemp())
    rows = {}
    for name, quantize in (("float32", None), ("int8 (--quantize int8)", "int8")):
        record = export_onnx(args.model, work / name.split()[0], quantize=quantize)
        tokenizer = AutoTokenizer.from_pretrained(work / name.split()[0])
        graph = session(work / name.split()[0] / GRAPH_FILE, args.threads)
        rows[name] = {batch: onnx_vectors(graph, tokenizer, texts, record["max_length"], batch)
                      for batch in (64, 32, 1)}
    reference = rows["float32"][64]
    lines = [f"Command: `python benchmarks/onnx_int8.py {' '.join(argv if argv is not None else sys.argv[1:])}`", "",
             f"Machine: {machine_description()}; {args.threads} onnxruntime threads. Model: {args.model}. Text: the "
             f"{len(texts):,} distinct STS-B test sentences.", "",
             "| graph | min cosine to float32 | mean cosine | max diff | alone vs batch of 32, min cosine |",
             "|---|---:|---:|---:|---:|"]
    record = {}
    for name, vectors in rows.items():
        cosine = cosines(vectors[64], reference)
        record[name] = {"min_cosine": float(cosine.min()), "mean_cosine": float(cosine.mean()),
                        "max_abs_difference": float(np.abs(vectors[64] - reference).max()),
                        "batch_min_cosine": float(cosines(vectors[1], vectors[32]).min())}
        lines.append(f"| {name} | {record[name]['min_cosine']:.4f} | {record[name]['mean_cosine']:.4f} | "
                     f"{record[name]['max_abs_difference']:.4f} | {record[name]['batch_min_cosine']:.4f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output:
        write_outputs(args.output, "onnx_int8_real_text", {"command": lines[0], "machine": machine_description(),
                                                           "rows": record}, text)


def st_row(folder: Path, test, sts_texts: list, reference) -> tuple:
    """``(row, versions)`` of sentence-transformers' int8 graph from what its own process wrote into ``folder``."""
    from csekit.publishing.onnx_export import cosines

    saved = np.load(folder / "vectors.npz")
    times = json.loads((folder / "times.json").read_text())
    lookup = dict(zip(sts_texts, saved["sts"]))
    cosine = cosines(saved["check"], reference)
    return {"min_cosine": float(cosine.min()), "mean_cosine": float(cosine.mean()),
            "max_abs_difference": float(np.abs(saved["check"] - reference).max()),
            "batch_min_cosine": float(cosines(saved["alone"], saved["check"]).min()),
            "sts": test(lambda texts: np.stack([lookup[text] for text in texts])), "mib": times["mib"],
            "seconds": times["seconds"]}, times["versions"]


def table_lines(rows: dict, args, argv, st_versions) -> list:
    """The markdown table: each graph's agreement with float32, its STS scores, its speed against float32."""
    from csekit.evaluation.sts import STS_TASKS

    base = statistics.median(rows["float32"]["seconds"])
    lines = [f"Command: `python benchmarks/onnx_int8.py {' '.join(argv if argv is not None else sys.argv[1:])}`", "",
             f"Machine: {machine_description()}; {args.threads} onnxruntime threads. Model: {args.model}."
             + (f" sentence-transformers side: {st_versions}." if st_versions else ""), "",
             "| graph | min cosine | mean cosine | max diff | alone vs batch, min cosine | STS avg | "
             + " | ".join(STS_TASKS) + " | median s (STS-B test) | speed x float32 | MiB |",
             "|---|---:|---:|---:|---:|---:|" + "---:|" * len(STS_TASKS) + "---:|---:|---:|"]
    for name, row in rows.items():
        median = statistics.median(row["seconds"])
        sts = [row["sts"][task] if row["sts"] else None for task in ("avg", *STS_TASKS)]
        lines.append(f"| {name} | {row['min_cosine']:.4f} | {row['mean_cosine']:.4f} | "
                     f"{row['max_abs_difference']:.4f} | {row['batch_min_cosine']:.4f} | "
                     + " | ".join("-" if value is None else f"{value:.2f}" for value in sts)
                     + f" | {median:.2f} | {base / median:.2f} | {row['mib']:.1f} |")
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--st-python", default=None, help="A Python with sentence-transformers[onnx] (optional).")
    parser.add_argument("--output", default=None)
    parser.add_argument("--st-side", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--texts", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--real-text", action="store_true",
                        help="Only the shipped int8 graph's accuracy on the STS-B test sentences (no timing).")
    args = parser.parse_args(argv)
    if args.st_side:
        st_side(args)
        return
    if args.real_text:
        real_text(args, argv)
        return

    import torch
    from transformers import AutoTokenizer

    from csekit.data import resolve_data_dir
    from csekit.evaluation.sts import STS_TASKS, STSEvaluator
    from csekit.loading import resolve_model_path
    from csekit.publishing.onnx_export import GRAPH_FILE, check_sentences, cosines, export_onnx, onnx_vectors

    torch.set_num_threads(args.threads)
    data_dir = resolve_data_dir(None)
    test = STSEvaluator(data_dir, STS_TASKS, split="test")
    timed = STSEvaluator(data_dir, ["STSBenchmark"], split="test").sentences()
    check = check_sentences()
    work = Path(tempfile.mkdtemp())
    sts_texts = test.sentences()
    if args.st_python:  # first: its own process, its own timing, before this one loads anything heavy
        texts = work / "texts.json"
        texts.write_text(json.dumps({"check": check, "sts": sts_texts, "timed": timed}))
        subprocess.run([args.st_python, __file__, "--st-side", str(work / "st"), "--texts", str(texts), "--model",
                        str(resolve_model_path(args.model)), "--threads", str(args.threads), "--rounds",
                        str(args.rounds)], check=True)
    record = export_onnx(args.model, work / "float32")
    tokenizer = AutoTokenizer.from_pretrained(work / "float32")
    length = record["max_length"]
    graphs = {"float32": work / "float32" / GRAPH_FILE, **candidates(work / "float32" / GRAPH_FILE, work, args.model,
                                                                      tokenizer)}
    sessions = {name: session(path, args.threads) for name, path in graphs.items()}
    encoders = {name: (lambda s: lambda texts, batch=64: onnx_vectors(s, tokenizer, list(texts), length, batch))(s)
                for name, s in sessions.items()}
    reference = encoders["float32"](check)
    rows = {}
    for name, encode in encoders.items():
        vectors = encode(check)
        alone = encode(check, 1)
        cosine = cosines(vectors, reference)
        rows[name] = {"min_cosine": float(cosine.min()), "mean_cosine": float(cosine.mean()),
                      "max_abs_difference": float(np.abs(vectors - reference).max()),
                      "batch_min_cosine": float(cosines(alone, vectors).min()),
                      "sts": test(encode) if name in STS_GRAPHS else None,
                      "mib": graphs[name].stat().st_size / 2**20, "seconds": []}
        print(name, {k: v for k, v in rows[name].items() if k != "sts"}, flush=True)
    for _ in range(args.rounds):
        for name, encode in encoders.items():
            start = time.perf_counter()
            encode(timed)
            rows[name]["seconds"].append(time.perf_counter() - start)
    st_versions = None
    if args.st_python:
        rows["sentence-transformers int8 (avx2)"], st_versions = st_row(work / "st", test, sts_texts, reference)
    lines = table_lines(rows, args, argv, st_versions)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output:
        write_outputs(args.output, "onnx_int8", {"command": lines[0], "machine": machine_description(),
                                                 "rows": rows, "st_versions": st_versions}, text)


if __name__ == "__main__":
    main()

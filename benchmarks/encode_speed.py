"""Encoding speed: csekit's ``model.encode`` vs ``SentenceTransformer.encode`` on the same model and sentences.

all-MiniLM-L6-v2, mean pooling, max length 256 on both sides, batch 64, the STS-B test sentences (2,758 texts).
Rounds alternate between the two so background load hits both equally; the embeddings are also compared.

    python benchmarks/encode_speed.py [--rounds 3] [--sentences 2758]
"""

import argparse

import numpy as np
from common import Stopwatch, device_description, interleaved, median
from sentence_transformers import SentenceTransformer

from csekit.modeling import SimCSEModel
from csekit.data import resolve_data_dir
from csekit.loading import embedded_minilm_path, resolve_device
from csekit.evaluation.sts import load_sts_task


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=2758)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: %(default)s).")
    args = parser.parse_args()
    device = resolve_device(args.device)
    pairs = load_sts_task(resolve_data_dir(), "STSBenchmark")
    sentences = (pairs.sentences1 + pairs.sentences2)[: args.sentences]

    ours = SimCSEModel.from_encoder(str(embedded_minilm_path()), pooler_type="avg", max_length=256).to(device).eval()
    theirs = SentenceTransformer(str(embedded_minilm_path()), device=str(device))
    outputs = {}

    def timed(name, encode):
        def run():
            with Stopwatch() as watch:
                outputs[name] = encode()
            return watch.seconds

        return run

    timings = interleaved({
        "csekit": timed("csekit", lambda: ours.encode(sentences, batch_size=args.batch_size, normalize=True)),
        "sentence-transformers": timed("sentence-transformers", lambda: theirs.encode(
            sentences, batch_size=args.batch_size, normalize_embeddings=True, convert_to_numpy=True)),
    }, args.rounds)
    difference = np.abs(outputs["csekit"] - outputs["sentence-transformers"]).max()
    ours_rate = len(sentences) / median(timings["csekit"])
    theirs_rate = len(sentences) / median(timings["sentence-transformers"])
    print(f"machine: {device_description(device)}")
    for name, values in timings.items():
        print(f"{name}: {', '.join(f'{v:.2f}' for v in values)} s for {len(sentences)} sentences")
    print(f"sentences/s csekit {ours_rate:.0f}, sentence-transformers {theirs_rate:.0f}, "
          f"ratio {ours_rate / theirs_rate:.2f}; max |embedding difference| {difference:.2e}")


if __name__ == "__main__":
    main()

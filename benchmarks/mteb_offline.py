"""``csekit evaluate MODEL --mteb STSBenchmark`` offline, against csekit's own STS-B score, on a machine without the
Hub: the loopback Hub of ``tests/fake_hub.py`` serves ``mteb/stsbenchmark-sts`` built from the data folder's
SentEval ``sts-test.csv`` (the same 1,379 pairs), one run fills an empty Hugging Face cache through mteb's real
loading path, and a second run with ``HF_HUB_OFFLINE=1`` reads it from the datasets cache.

    python benchmarks/mteb_offline.py [--model all-MiniLM-L6-v2] [--data-dir DIR]

Prints both runs' MTEB score and csekit's STS-B score of the offline run. On a machine that reaches the Hub, plain
``csekit evaluate MODEL --mteb STSBenchmark`` does the same with MTEB's real copy.
"""

import argparse
import gzip
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fake_hub import FakeHub  # noqa: E402  (the tests' loopback Hub)


def stsbenchmark_repo(data_dir: Path) -> dict:
    rows, path = [], data_dir / "senteval/downstream/STS/STSBenchmark/sts-test.csv"
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = line.split("\t")
        rows.append({"sentence1": fields[5], "sentence2": fields[6], "score": float(fields[4])})
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as stream:
        stream.write("".join(json.dumps(row) + "\n" for row in rows).encode())
    return {("datasets", "mteb/stsbenchmark-sts"): {"test.jsonl.gz": buffer.getvalue()}}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--data-dir", default=os.environ.get("CSEKIT_DATA_DIR", "data"))
    args = parser.parse_args(argv)
    data_dir = Path(args.data_dir)
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "HF_HOME": home, "CSEKIT_DATA_DIR": str(data_dir)}
        command = [sys.executable, "-m", "csekit", "evaluate", args.model, "--mteb", "STSBenchmark"]
        with FakeHub(stsbenchmark_repo(data_dir)) as hub:
            online = Path(home) / "online.json"
            subprocess.run(command + ["--output", str(online)], check=True,
                           env={**env, "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0"})
        offline = Path(home) / "offline.json"
        subprocess.run(command + ["--tasks", "sts", "--output", str(offline)], check=True,
                       env={**env, "HF_HUB_OFFLINE": "1"})
        first, second = json.loads(online.read_text()), json.loads(offline.read_text())
    print(f"MTEB STSBenchmark: {first['mteb']['STSBenchmark']:.2f} (loopback Hub), "
          f"{second['mteb']['STSBenchmark']:.2f} (offline); csekit STS-B: {second['sts']['STSBenchmark']:.2f}")


if __name__ == "__main__":
    main()

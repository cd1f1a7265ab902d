"""``csekit compare``: side by side, and a one-line warning for each result measured differently from the first."""

import json

from csekit.cli import main as csekit
from csekit.evaluation.sts import STS_TASKS


def record(aggregation="all", pairs=1379, torch_version="2.13.0", offset=0.0) -> dict:
    sts = {task: 70.0 + offset + index for index, task in enumerate(STS_TASKS)}
    sts["avg"] = 73.0 + offset
    return {"model": "m", "pooler": "avg", "sts": sts, "transfer": {"MR": 75.0, "avg": 80.0},
            "protocol": {"pooler": "avg", "sts": {"aggregation": aggregation, "split": "test",
                                                  "tasks": {"STSBenchmark": {"pairs": pairs, "sha256": "ab"}}},
                         "versions": {"torch": torch_version}}}


def write(folder, name, value) -> str:
    path = folder / f"{name}.json"
    path.write_text(json.dumps(value))
    return str(path)


def test_same_protocol_prints_the_table_and_no_warning(tmp_path, capsys):
    a, b = write(tmp_path, "a", record()), write(tmp_path, "b", record(offset=1.0))
    assert csekit(["compare", a, b]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "| " + a + " | 70.00 |" in out and "| " + b + " | 71.00 |" in out and "transfer" in out


def test_each_difference_is_named_in_one_warning_line(tmp_path, capsys):
    a = write(tmp_path, "a", record())
    b = write(tmp_path, "b", record(aggregation="mean", pairs=1378, torch_version="2.12.0"))
    legacy = {key: value for key, value in record().items() if key != "protocol"}
    c = write(tmp_path, "c", legacy)
    assert csekit(["compare", a, b, c]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"csekit: warning: {b} and {a} were not measured the same way: sts.aggregation: all != mean; "
        "sts.tasks.STSBenchmark.pairs: 1379 != 1378; versions.torch: 2.13.0 != 2.12.0",
        f"csekit: warning: {c} and {a} were not measured the same way: no protocol record",
    ]


def test_a_missing_result_is_one_line(tmp_path, capsys):
    assert csekit(["compare", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.startswith("csekit: error: ")

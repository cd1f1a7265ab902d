"""The STS protocol: SentEval 'all' pair counts, Spearman of cosine, and agreement with published scores."""

import json
import shutil

import numpy as np
import pytest
from scipy.stats import spearmanr

from csekit.cli import main as cli_main
from csekit.evaluation.encoders import load_embedder
from csekit.evaluation.sts import STSEvaluator, cosine_spearman, format_sts_table, load_sts_task

# Pairs with a gold score (SentEval skips the rest; STS13 has no SMT input)
EXPECTED_PAIRS = {"STS12": 3108, "STS13": 1500, "STS14": 3750, "STS15": 3000, "STS16": 1186,
                  "STSBenchmark": 1379, "SICKRelatedness": 4927}


@pytest.mark.parametrize("task, count", EXPECTED_PAIRS.items())
def test_pair_counts(real_data_dir, task, count):
    pairs = load_sts_task(real_data_dir, task)
    assert len(pairs.sentences1) == len(pairs.sentences2) == len(pairs.scores) == count
    assert all(s == " ".join(s.split()) for s in pairs.sentences1[:200])


def test_dev_splits(real_data_dir):
    assert len(load_sts_task(real_data_dir, "STSBenchmark", "dev").scores) == 1500
    assert len(load_sts_task(real_data_dir, "SICKRelatedness", "dev").scores) == 500


def test_unscored_lines_are_skipped_and_splits_read(data_dir):
    # the synthetic folder: 12 pairs per sub-dataset, one of them unscored in each STS15/16 sub-dataset
    counts = {task: len(load_sts_task(data_dir, task).scores) for task in ("STS12", "STS13", "STS15", "STS16")}
    assert counts == {"STS12": 5 * 12, "STS13": 3 * 12, "STS15": 5 * 11, "STS16": 5 * 11}
    assert [len(load_sts_task(data_dir, "STSBenchmark", split).scores) for split in ("train", "dev", "test")] == \
        [80, 40, 40]
    assert [len(load_sts_task(data_dir, "SICKRelatedness", split).scores) for split in ("train", "dev", "test")] == \
        [60, 30, 40]
    with pytest.raises(ValueError, match="only a test split"):
        load_sts_task(data_dir, "STS12", "dev")


def test_cosine_spearman_matches_scipy():
    rng = np.random.default_rng(0)
    a, b, gold = rng.normal(size=(50, 8)), rng.normal(size=(50, 8)), rng.normal(size=50)
    cosine = [x @ y / np.linalg.norm(x) / np.linalg.norm(y) for x, y in zip(a, b)]
    assert cosine_spearman(a, b, gold) == pytest.approx(spearmanr(cosine, gold).statistic * 100)


def test_evaluator_embeds_both_sentences_of_every_pair(data_dir):
    # duplicates kept, as SentEval's prepare() sees a task: a target-fitted post-processing depends on it
    evaluator = STSEvaluator(data_dir, ["STS12", "STS16"])
    vectors, calls = {}, []

    def vector(sentence):
        return vectors.setdefault(sentence, np.random.default_rng(len(vectors)).normal(size=4))

    def embed(sentences):
        calls.append(list(sentences))
        return np.stack([vector(s) for s in sentences])

    results = evaluator(embed)
    expected = [s for pairs in evaluator.pairs.values() for s in pairs.sentences1 + pairs.sentences2]
    assert calls == [expected] and len(expected) > len(set(expected))
    for task, pairs in evaluator.pairs.items():
        direct = cosine_spearman(np.stack([vector(s) for s in pairs.sentences1]),
                                 np.stack([vector(s) for s in pairs.sentences2]), pairs.scores)
        assert results[task] == round(direct, 2)


def senteval_aggregations(data_dir, task, vector):
    """SentEval's ``STSEval.run`` for one year, from the files: per sub-dataset Spearman of cosine, then "all" over
    the concatenation (SimCSE), "mean" and the size-weighted "wmean" of the per-dataset values."""
    from csekit.evaluation.sts import STS_YEAR_DATASETS

    folder = data_dir / "senteval" / "downstream" / "STS" / f"{task}-en-test"
    per_set, sizes, all_sims, all_gold = [], [], [], []
    for name in STS_YEAR_DATASETS[task]:
        lines = (folder / f"STS.input.{name}.txt").read_text(encoding="utf-8").splitlines()
        gold = (folder / f"STS.gs.{name}.txt").read_text(encoding="utf-8").splitlines()
        kept = [(line.split("\t"), float(g)) for line, g in zip(lines, gold) if g.strip()]
        sims = []
        for (a, b, *_), _ in kept:
            u, v = vector(" ".join(a.split())), vector(" ".join(b.split()))
            sims.append(u @ v / np.linalg.norm(u) / np.linalg.norm(v))
        per_set.append(spearmanr(sims, [g for _, g in kept]).statistic * 100)
        sizes.append(len(kept))
        all_sims += sims
        all_gold += [g for _, g in kept]
    return {"all": spearmanr(all_sims, all_gold).statistic * 100, "mean": np.mean(per_set),
            "wmean": np.average(per_set, weights=sizes)}


def test_sts_years_report_sentevals_three_aggregations(data_dir, tmp_path):
    vectors = {}

    def vector(sentence):
        return vectors.setdefault(sentence, np.random.default_rng(len(vectors)).normal(size=4))

    # a copy of the data whose STS13 sub-datasets differ in size (5, 12, 12 pairs), so "mean" and "wmean" differ
    sts = tmp_path / "senteval" / "downstream" / "STS"
    shutil.copytree(data_dir / "senteval" / "downstream" / "STS", sts)
    for name in ("STS.input.FNWN.txt", "STS.gs.FNWN.txt"):
        path = sts / "STS13-en-test" / name
        path.write_text("\n".join(path.read_text(encoding="utf-8").splitlines()[:5]) + "\n", encoding="utf-8")
    data_dir = tmp_path
    evaluator = STSEvaluator(data_dir, ["STS12", "STS13", "STSBenchmark"])
    scores = evaluator.evaluate(lambda sentences: np.stack([vector(s) for s in sentences]))
    for task in ("STS12", "STS13"):
        expected = senteval_aggregations(data_dir, task, vector)
        for aggregation in ("all", "mean", "wmean"):
            assert scores[aggregation][task] == pytest.approx(expected[aggregation], abs=0.006)
    assert len({scores[name]["STSBenchmark"] for name in ("all", "mean", "wmean")}) == 1  # one set: one value
    assert STSEvaluator(data_dir, ["STS12"], aggregation="wmean")(
        lambda sentences: np.stack([vector(s) for s in sentences]))["STS12"] == scores["wmean"]["STS12"]


def test_minilm_matches_published_mteb_scores(real_data_dir):
    # all-MiniLM-L6-v2 on the MTEB leaderboard: STSBenchmark 82.03 (cosine Spearman, test split)
    embed, info = load_embedder("all-MiniLM-L6-v2")
    assert info["modules"] == ["Transformer", "Pooling(mean)", "Normalize"]  # as sentence-transformers reads it
    results = STSEvaluator(real_data_dir, ["STSBenchmark"])(embed)
    assert results["STSBenchmark"] == pytest.approx(82.03, abs=0.05)


def test_evaluate_cli_writes_foundation_schema(tmp_path, saved_tiny_model, capsys, data_dir):
    output = tmp_path / "r.json"
    assert cli_main(["evaluate", str(saved_tiny_model), "--tasks", "sts", "--output", str(output)]) == 0
    record = json.loads(output.read_text())
    assert set(record) == {"model", "pooler", "dimension", "sts", "sts_aggregations", "protocol", "local_paths"}
    assert record["local_paths"] == [str(saved_tiny_model)]  # shown by base name wherever it is published
    assert record["dimension"] == 32  # the size of the vectors scored
    assert list(record["sts"]) == list(EXPECTED_PAIRS) + ["avg"]
    assert record["sts_aggregations"]["all"] == record["sts"]
    assert record["protocol"]["sts"]["aggregation"] == "all" and record["protocol"]["pooler"] == record["pooler"]
    assert {task: entry["pairs"] for task, entry in record["protocol"]["sts"]["tasks"].items()} == {
        task: len(load_sts_task(data_dir, task).scores) for task in EXPECTED_PAIRS}
    assert record["sts"]["avg"] == pytest.approx(np.mean([record["sts"][t] for t in EXPECTED_PAIRS]), abs=0.006)
    assert "| STS12 |" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [(["--tasks", "nope"], "unknown task suite"),
                                           (["--pooler", "mean"], "unknown pooler"),
                                           (["--batch-size", "0"], "--batch-size"),
                                           (["--device", "tpu7"], "bad device")])
def test_evaluate_cli_bad_flags(saved_tiny_model, capsys, args, message):
    assert cli_main(["evaluate", str(saved_tiny_model), *args]) == 2
    assert message in capsys.readouterr().err


def test_format_table():
    table = format_sts_table({"m": {"STS12": 1.0, "avg": 1.0}})
    assert table.splitlines()[0] == "| model | STS12 | Avg. |"


def test_evaluate_uncached_hub_id_fails_in_one_line(capsys):
    assert cli_main(["evaluate", "some-org/not-a-cached-model"]) == 2
    assert "not in the local Hugging Face cache" in capsys.readouterr().err

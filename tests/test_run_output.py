"""What a run shows while it works: bars that say what they encode, lines instead of redraws away from a terminal,
and a base model scored once per (revision, protocol) (the score cache)."""

import io
import json
import shutil

import pytest

from conftest import recipe_flags
from csekit import cli
from csekit.evaluation.score_cache import ScoreCache, model_revision
from csekit.evaluation.sts import STS_TASKS, STSEvaluator
from csekit.modeling.encoding import encoding_label, progress


def flags(backbone, corpus, out, *extra) -> list:
    return ["train", "simcse", "--model_name_or_path", str(backbone), "--train_file", str(corpus), "--output_dir",
            str(out), "--per_device_train_batch_size", "8", "--max_steps", "2", "--save_strategy", "no",
            "--eval_strategy", "no", "--max_seq_length", "16", "--do_test_eval", "true", "--seed", "7",
            *recipe_flags("simcse"), *extra]


def test_away_from_a_terminal_a_bar_is_a_line_every_five_percent_titled_by_the_label():
    stream = io.StringIO()  # not a terminal: a log file, a pipe
    with encoding_label("Encoding base-model for the STS test sets"):
        for _ in progress(range(1000), stream=stream):
            pass
    lines = stream.getvalue().splitlines()
    assert 20 <= len(lines) <= 22 and "\r" not in stream.getvalue()
    assert all(line.startswith("Encoding base-model for the STS test sets:") for line in lines)
    assert "1000/1000" in lines[-1]
    assert progress(range(3), stream=io.StringIO()).desc == "Encoding"  # no label in force


def test_a_training_run_logged_to_a_file_has_a_few_lines_per_bar_each_naming_its_model(tiny_backbone, corpus,
                                                                                        tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.main(flags(tiny_backbone, corpus, out, "--max_steps", "40", "--per_device_train_batch_size", "2")) == 0
    err = capsys.readouterr().err
    training = [line for line in err.splitlines() if line.startswith("Training:")]
    assert 2 <= len(training) <= 22, training  # 40 steps: a line every 2 steps at most, not 40 redraws
    encoding = [line for line in err.splitlines() if line.startswith("Encoding")]
    assert all(" for the STS test sets:" in line for line in encoding)


def test_the_base_model_is_scored_once_per_revision_and_protocol(tiny_backbone, corpus, tmp_path, monkeypatch,
                                                                   score_cache, data_dir):
    import csekit.trainers.runner as runner

    calls = []
    real = runner.load_embedder
    monkeypatch.setattr(runner, "load_embedder", lambda name, **kw: calls.append(name) or real(name, **kw))
    assert cli.main(flags(tiny_backbone, corpus, tmp_path / "a")) == 0
    assert cli.main(flags(tiny_backbone, corpus, tmp_path / "b", "--seed", "8")) == 0
    assert calls == [str(tiny_backbone)]
    first, second = (json.loads((tmp_path / name / "eval_results.json").read_text()) for name in "ab")
    assert first["base_sts"] == second["base_sts"] and len(list(score_cache.iterdir())) == 1
    # a changed model folder is a new revision; changed test data is a new protocol: both scored again
    copy = tmp_path / "backbone-copy"
    shutil.copytree(tiny_backbone, copy)
    assert model_revision(copy) == model_revision(tiny_backbone)
    for beside in ("results/csekit__x/abc/STS12.json", "checkpoint-2/optimizer.safetensors", "runs/events"):
        (copy / beside).parent.mkdir(parents=True, exist_ok=True)  # what evaluate --mteb and training leave
        (copy / beside).write_text("{}")
    assert model_revision(copy) == model_revision(tiny_backbone)
    (copy / "config.json").write_text((copy / "config.json").read_text().replace("}", ', "note": 1}', 1))
    assert model_revision(copy) != model_revision(tiny_backbone)
    test = STSEvaluator(data_dir, STS_TASKS, split="test")
    cache = ScoreCache(score_cache)
    assert cache.key(tiny_backbone, test) != cache.key(copy, test)
    other = STSEvaluator(data_dir, STS_TASKS, split="test", aggregation="mean")
    assert cache.key(tiny_backbone, test) != cache.key(tiny_backbone, other)


@pytest.mark.parametrize("folder", ["models--org--name/snapshots/" + "a" * 40])
def test_a_hub_snapshot_is_named_by_its_commit(tmp_path, folder):
    (tmp_path / folder).mkdir(parents=True)
    assert model_revision(tmp_path / folder) == f"hub:org/name@{'a' * 40}"

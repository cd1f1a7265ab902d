"""What a run shows while it works: bars that say what they encode, lines instead of redraws away from a terminal,
and a base model scored once per (revision, protocol) (the score cache)."""

import io
import json
import shutil

import pytest
import torch

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
    import csekit.evaluation.run_scores as runner

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


def test_a_hub_snapshot_is_named_by_its_commit_and_an_edit_in_place_is_a_new_revision(tmp_path):
    folder = tmp_path / "models--org--name" / "snapshots" / ("a" * 40)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    first = model_revision(folder)
    assert first.startswith(f"hub:org/name@{'a' * 40}+sha256:")
    (folder / "config.json").write_text('{"edited": 1}')  # the blob behind a snapshot's link, edited in place
    assert model_revision(folder) != first


@pytest.mark.parametrize("module_folder", ["runs", "results", "checkpoint-1", ".hidden-dense"])
def test_a_module_folder_modules_json_names_is_the_model_whatever_its_name(tiny_backbone, tmp_path, module_folder):
    folder = tmp_path / "model"
    shutil.copytree(tiny_backbone, folder)
    (folder / "modules.json").write_text(json.dumps([{"idx": 0, "name": "0", "path": "",
                                                      "type": "sentence_transformers.base.modules.Transformer"}]))
    entries = json.loads((folder / "modules.json").read_text())
    (folder / module_folder).mkdir()
    (folder / module_folder / "config.json").write_text('{"out_features": 4}')
    entries.append({"idx": len(entries), "name": str(len(entries)), "path": module_folder,
                    "type": "sentence_transformers.base.modules.dense.Dense"})
    (folder / "modules.json").write_text(json.dumps(entries))
    before = model_revision(folder)
    (folder / module_folder / "config.json").write_text('{"out_features": 8}')
    assert model_revision(folder) != before


def test_a_cache_entry_is_used_only_when_its_inputs_and_scores_check_out(tiny_backbone, tmp_path, data_dir):
    from csekit.evaluation.run_scores import base_scores_valid

    test = STSEvaluator(data_dir, STS_TASKS, split="test")
    cache, check = ScoreCache(tmp_path / "cache"), base_scores_valid(test, "cls_before_pooler")
    inputs = cache.inputs(tiny_backbone, test, pooler="cls_before_pooler")
    scores = {"base_sts": {task: 50.0 for task in (*STS_TASKS, "avg")}, "base_pooler": "cls_before_pooler"}
    cache.put(inputs, scores)
    assert cache.get(inputs, check) == scores
    other = cache.inputs(tiny_backbone, test, pooler="avg")  # another representation is another entry
    assert cache.get(other, check) is None
    shutil.copy(cache.path(cache.key(tiny_backbone, test, pooler="cls_before_pooler")),
                cache.path(cache.key(tiny_backbone, test, pooler="avg")))  # an entry under another entry's name
    assert cache.get(other, check) is None
    entry = json.loads(cache.path(cache.key(tiny_backbone, test, pooler="cls_before_pooler")).read_text())
    for bad in ({"STS12": float("nan")}, {"STS12": 1e9}, {"STS12": "88"}, {"STS12": True}, {"extra-task": 1.0},
                {"avg": 99.0}):  # a crafted entry: its scores are not a row the evaluator returns
        entry["scores"]["base_sts"] = {**scores["base_sts"], **bad}
        cache.path(cache.key(tiny_backbone, test, pooler="cls_before_pooler")).write_text(json.dumps(entry))
        assert cache.get(inputs, check) is None, bad
    entry["scores"] = {**scores, "base_pooler": "avg"}  # scores of another representation than the lookup's
    cache.path(cache.key(tiny_backbone, test, pooler="cls_before_pooler")).write_text(json.dumps(entry))
    assert cache.get(inputs, check) is None


def test_the_base_row_scores_a_bare_encoder_with_the_trained_models_representation(tiny_backbone, corpus, tmp_path,
                                                                                    score_cache, data_dir):
    """A bare BERT's ``pooler_output`` (linear + tanh over [CLS], SimCSE's evaluation convention for ``cls``) is not
    what the trained ``cls`` model serves (the [CLS] hidden state): the base row is scored on the [CLS] hidden state,
    computed here with transformers' BertModel, and both rows name their representation."""
    from transformers import AutoModel, AutoTokenizer

    out = tmp_path / "out"
    assert cli.main(flags(tiny_backbone, corpus, out)) == 0
    record = json.loads((out / "eval_results.json").read_text())
    assert (record["pooler"], record["base_pooler"]) == ("cls", "cls_before_pooler")
    bert, tokenizer = AutoModel.from_pretrained(tiny_backbone).eval(), AutoTokenizer.from_pretrained(tiny_backbone)

    def cls_state(sentences):
        with torch.no_grad():
            batch = tokenizer(sentences, padding=True, truncation=True, return_tensors="pt")
            return bert(**batch).last_hidden_state[:, 0].numpy()

    test = STSEvaluator(data_dir, STS_TASKS, split="test")
    assert record["base_sts"] == test(cls_state)
    card = (out / "README.md").read_text()
    assert "| **this model** (`cls`, reproduced" in card and "| base model alone (`cls_before_pooler`)" in card

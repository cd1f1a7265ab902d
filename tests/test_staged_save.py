"""Every save is staged: ``save_pretrained`` and a trainer's ``save_model`` write the folder beside the destination,
then commit it under the destination's lock (``modeling/folder_commit.py``). Killed at any step, the folder is the
old model exactly or no model, never new weights under an old card; the old model's records and card go; two saves
into one folder end as one of them, whole; a folder a running process holds is waited for, then refused."""

import os
import threading

import numpy as np
import pytest
import torch
from datasets import Dataset
from sentence_transformers import SentenceTransformer
from transformers import AutoModel

import csekit.modeling.folder_commit as folder_commit
from conftest import tiny_bert_config
from csekit.atomic import RunLock
from csekit.modeling import SimCSEConfig, SimCSEModel
from csekit.trainers import CSETrainingArguments, SimCSETrainer
from test_atomic import files, killed_at

SENTENCES = ["A man is playing a guitar.", "Two dogs run on the beach.", "The harbour is quiet tonight."]
OLD_RECORDS = {"eval_results.json": b'{"STSBenchmark": 99.9}', "README.md": b"# the old model's card",
               "training_curve.png": b"old figure"}


def tiny_model(seed: int, tokenizer, pooler_type: str = "avg") -> SimCSEModel:
    torch.manual_seed(seed)
    model = SimCSEModel(SimCSEConfig(encoder_config=tiny_bert_config().to_dict(), pooler_type=pooler_type))
    model.tokenizer = tokenizer
    return model.eval()


def saved_with_records(folder, model) -> dict:
    """``model`` saved in ``folder`` with the records and card a recipe writes beside it; the folder's files."""
    model.save_pretrained(folder)
    for name, content in OLD_RECORDS.items():
        (folder / name).write_bytes(content)
    return files(folder)


def assert_loads_as(folder, model) -> None:
    expected = model.encode(SENTENCES)
    assert np.allclose(SentenceTransformer(str(folder), device="cpu").encode(SENTENCES), expected, atol=1e-5)
    assert np.allclose(AutoModel.from_pretrained(folder).encode(SENTENCES), expected, atol=1e-5)


@pytest.mark.parametrize("door", ["save_pretrained", "trainer.save_model"])
def test_a_save_over_another_model_is_the_new_model_without_the_old_ones_records(tmp_path, tokenizer, door):
    folder = tmp_path / "model"
    saved_with_records(folder, tiny_model(0, tokenizer, "cls"))
    new = tiny_model(1, tokenizer)
    if door == "save_pretrained":
        new.save_pretrained(folder)
    else:
        args = CSETrainingArguments(output_dir=str(tmp_path / "out"), use_cpu=True, report_to="none",
                                    eval_strategy="no", load_best_model_at_end=False)
        SimCSETrainer(model=new, args=args, train_dataset=Dataset.from_dict({"sent0": SENTENCES}),
                      processing_class=tokenizer).save_model(str(folder))
    assert not set(OLD_RECORDS) & set(os.listdir(folder))
    assert not [name for name in os.listdir(tmp_path) if name.startswith(folder_commit.SAVE_PREFIX)]
    assert_loads_as(folder, new)


def test_a_save_killed_at_every_step_leaves_the_old_model_or_none(tmp_path, tokenizer):
    """SIGKILLed at each touch of the destination (a forked child), the folder holds exactly the old model's files,
    or has no config.json (no loader takes it), or is the new model whole; never a mix."""
    folder, new_folder = tmp_path / "model", tmp_path / "new"
    old = saved_with_records(folder, tiny_model(0, tokenizer, "cls"))
    new_model = tiny_model(1, tokenizer)
    new_model.save_pretrained(new_folder)
    new = files(new_folder)
    outcomes, nth = set(), 1
    while True:
        for name in os.listdir(folder):  # the previous child's state, replaced by the old model again
            (folder / name).unlink() if (folder / name).is_file() else None
        saved_with_records(folder, tiny_model(0, tokenizer, "cls"))
        status = killed_at(nth, folder, new_model.save_pretrained, folder)
        now = files(folder)
        state = "old" if now == old else "new" if now == new else "none" if "config.json" not in now else "MIXED"
        assert state != "MIXED", (nth, sorted(now))
        outcomes.add(state)
        if status == 0:
            break
        nth += 1
    assert outcomes == {"old", "none", "new"} and nth > 3
    SimCSEModel.from_pretrained(folder)  # the lock of the killed children is taken over by the next save
    new_model.save_pretrained(folder)
    assert files(folder) == new


def every_file(folder) -> dict:
    """``{relative path: sha256}`` of every visible file under ``folder`` (the module sub-folders included)."""
    return {str(path.relative_to(folder)): files(path.parent)[path.name] for path in sorted(folder.rglob("*"))
            if path.is_file() and not any(part.startswith(".") for part in path.relative_to(folder).parts)}


def test_two_saves_into_one_folder_end_as_one_model_whole(tmp_path, tokenizer):
    folder = tmp_path / "model"
    models = [tiny_model(seed, tokenizer) for seed in (1, 2)]
    expected = []
    for index, model in enumerate(models):
        model.save_pretrained(tmp_path / f"alone{index}")
        expected.append(every_file(tmp_path / f"alone{index}"))
    errors = []

    def save(model):
        try:
            model.save_pretrained(folder)
        except Exception as error:  # (a thread's exception does not reach the test)
            errors.append(error)

    threads = [threading.Thread(target=save, args=(model,)) for model in models]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors  # the second save waited for the first, it was not refused
    assert every_file(folder) in expected
    assert_loads_as(folder, models[expected.index(every_file(folder))])


def test_a_folder_a_running_process_holds_is_waited_for_then_refused(tmp_path, tokenizer, monkeypatch):
    folder = tmp_path / "run"
    folder.mkdir()
    held = RunLock(folder / folder_commit.LOCK, "--output_dir").acquire()  # a training run writing there
    monkeypatch.setattr(folder_commit, "SAVE_WAIT", 0.3)
    try:
        with pytest.raises(folder_commit.FolderInUse, match=f"save_pretrained {folder}: in use by process "
                                                            f"{os.getpid()}"):
            tiny_model(0, tokenizer).save_pretrained(folder)
    finally:
        held.release()
    assert not (folder / "config.json").exists()

"""Every door gets every check: a Python caller's trainer refuses, in one line and before its first step, what
``csekit train`` refuses, because ``train()`` runs the same checks (``ContrastiveTrainer.preflight``,
``trainers/data.py`` ``check_train_dataset``, ``csekit.preflight.check_trainer_model``) that the recipe's
``check_run`` runs; the registry's pairing of model and trainer is what README's table shows; several trainers in one
process each train what they train alone."""

import re
from pathlib import Path

import pytest
import torch
from datasets import Dataset, DatasetDict
from transformers import BertModel

from conftest import REPO_ROOT, embedded_minilm_path, tiny_bert_config
from csekit.errors import DataError
from csekit.methods import METHODS, load_object
from csekit.modeling import SimCSEModel
from csekit.preflight import check_trainer_model
from csekit.trainers import ContrastiveTrainer, CSETrainingArguments, SimCSETrainer

SENTENCES = [f"sentence {i} tells of the {['red', 'old', 'quiet'][i % 3]} harbour {i * 7}" for i in range(24)]
TRAINER_METHODS = [method for method in METHODS.values() if issubclass(method.trainer_class, ContrastiveTrainer)]


def arguments(folder, **overrides) -> CSETrainingArguments:
    values = dict(output_dir=str(folder), per_device_train_batch_size=8, max_steps=2, use_cpu=True, report_to="none",
                  save_strategy="no", eval_strategy="no", load_best_model_at_end=False, seed=3)
    return CSETrainingArguments(**{**values, **overrides})


def simcse_model(backbone):
    return SimCSEModel.from_encoder(str(backbone), pooler_type="cls")


def small_vocabulary_backbone(folder, tokenizer):
    torch.manual_seed(0)
    BertModel(tiny_bert_config(vocab_size=1000), add_pooling_layer=False).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def streamed(rows: dict):
    return Dataset.from_dict(rows).to_iterable_dataset()


# (case, what the trainer is given, the refusal's words): each a run the command line refuses, or whose file reader
# never lets it through (blank or non-string texts, no examples)
BAD_DATA = [
    ("one example per step", lambda: Dataset.from_dict({"sent0": SENTENCES}), {"per_device_train_batch_size": 1},
     "each anchor would see no negative"),
    ("a blank text", lambda: Dataset.from_dict({"sent0": SENTENCES[:5] + [""] + SENTENCES[5:]}), {},
     "row 6: sent0 is blank"),
    ("a whitespace-only text", lambda: Dataset.from_dict({"sent0": SENTENCES[:5] + [" \t "] + SENTENCES[5:]}), {},
     "row 6: sent0 is blank"),
    ("a None text", lambda: Dataset.from_dict({"sent0": SENTENCES[:2], "sent1": [SENTENCES[3], None]}).select(
        [0, 1] * 12), {}, "row 2: sent1 is a NoneType"),
    ("non-string texts", lambda: Dataset.from_dict({"sent0": list(range(24))}), {}, "row 1: sent0 is a int"),
    ("no examples", lambda: Dataset.from_dict({"sent0": []}), {}, "0 example(s)"),
    ("fewer examples than a step", lambda: Dataset.from_dict({"sent0": SENTENCES[:5]}), {},
     "fewer than one step's batch of 8"),
    ("a dict of datasets, one empty", lambda: DatasetDict({"wiki": Dataset.from_dict({"sent0": SENTENCES}),
                                                           "nli": Dataset.from_dict({"sent0": []})}), {},
     "train_dataset['nli']: no examples"),
    ("a streaming dataset without the method's columns", lambda: streamed({"text": SENTENCES}), {},
     "columns none of sent0"),
    ("a streaming dataset with a blank text", lambda: streamed({"sent0": SENTENCES[:3] + [" "] + SENTENCES[3:]}), {},
     "(streamed) row 4: sent0 is blank"),
    ("every candidate a masked duplicate", lambda: Dataset.from_dict({"sent0": ["the same sentence"] * 24}),
     {"duplicate_negatives": "mask"}, "every in-batch candidate of this data is a copy"),
    ("pairs whose anchors are all one text", lambda: Dataset.from_dict({"sent0": ["one premise"] * 24,
                                                                         "sent1": SENTENCES}),
     {"duplicate_negatives": "mask"}, "every in-batch candidate of this data is a copy"),
]


@pytest.mark.parametrize("make, overrides, words", [case[1:] for case in BAD_DATA], ids=[case[0] for case in BAD_DATA])
def test_a_python_trainer_refuses_in_one_line_what_the_command_line_refuses(tiny_backbone, tmp_path, make, overrides,
                                                                             words):
    """Built as docs/python.md builds it, the trainer stops with one line before any update, and writes nothing."""
    model = simcse_model(tiny_backbone)
    before = {name: value.clone() for name, value in model.state_dict().items()}
    out = tmp_path / "out"
    with pytest.raises(DataError) as error:  # when built (the columns, where known) or at train()
        SimCSETrainer(model=model, args=arguments(out, **overrides), train_dataset=make()).train()
    assert words in str(error.value) and "\n" not in str(error.value)
    assert all(torch.equal(before[name], value) for name, value in model.state_dict().items())
    assert not out.exists() or not any(out.iterdir())


def test_a_backbone_smaller_than_its_tokenizer_is_one_line(tmp_path, tokenizer):
    model = simcse_model(small_vocabulary_backbone(tmp_path / "small", tokenizer))
    trainer = SimCSETrainer(model=model, args=arguments(tmp_path / "out"),
                            train_dataset=Dataset.from_dict({"sent0": SENTENCES}))
    with pytest.raises(DataError, match="its tokenizer has 30522 tokens but the model's embedding matrix has 1000"):
        trainer.train()


def test_the_recipe_and_the_trainer_run_the_same_checks():
    """One check for both doors: ``check_run`` and ``train()`` call the same functions."""
    import csekit.trainers.runner as runner
    import csekit.trainers.trainer as trainer_module

    assert runner.check_train_dataset is trainer_module.check_train_dataset
    assert runner.check_contrastable is trainer_module.check_contrastable
    assert "check_step(" in Path(runner.__file__).read_text()


def test_every_trainer_takes_its_methods_training_model_and_refuses_every_other():
    """The registry's pairing, checked when a trainer is built: another method's model would train with the wrong
    loss, and a method's published encoder lacks its training-only parts (ESimCSE's momentum encoder)."""
    classes = {(method.name, kind): load_object(reference) for method in METHODS.values()
               for kind, reference in (("trained", method.training_model or method.model), ("published", method.model))}
    for method in METHODS.values():
        trainer_class = method.trainer_class
        for (owner, kind), model_class in classes.items():
            model = model_class.__new__(model_class)  # only its class is read
            if owner == method.name and kind == "trained" or model_class is method.training_model_class:
                check_trainer_model(model, trainer_class)
            else:
                with pytest.raises(DataError, match=f"model: a {model_class.__name__} "):
                    check_trainer_model(model, trainer_class)


def test_readmes_table_pairs_each_trainer_with_the_model_it_takes():
    """Each row of README's method table names, first in its model cell, the class its trainer trains."""
    import csekit.modeling
    import csekit.trainers

    readme = (REPO_ROOT / "README.md").read_text()
    rows = re.findall(r"^\| \[[^]]+\]\(docs/methods/\w+\.md\)[^|]*\|[^|]*\| `(\w+)`[^|]*\| `(\w+)` \|", readme, re.M)
    assert len(rows) == len(METHODS)
    for model_name, trainer_name in rows:
        model_class = getattr(csekit.modeling, model_name)
        check_trainer_model(model_class.__new__(model_class), getattr(csekit.trainers, trainer_name))


def test_sentence_transformers_objects_get_a_line_saying_what_to_pass(tiny_backbone, tmp_path):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.evaluation import EmbeddingSimilarityEvaluator

    data = Dataset.from_dict({"sent0": SENTENCES})
    st_model = SentenceTransformer(str(embedded_minilm_path()), device="cpu")
    with pytest.raises(DataError, match=r"model: a sentence-transformers SentenceTransformer; .*SimCSEModel"):
        SimCSETrainer(model=st_model, args=arguments(tmp_path / "a"), train_dataset=data)
    evaluator = EmbeddingSimilarityEvaluator(SENTENCES[:3], SENTENCES[3:6], [0.1, 0.5, 0.9])
    with pytest.raises(DataError, match=r"sts_evaluator: a sentence_transformers\..*STSEvaluator"):
        SimCSETrainer(model=simcse_model(tiny_backbone), args=arguments(tmp_path / "b"), train_dataset=data,
                      sts_evaluator=evaluator)
    with pytest.raises(TypeError, match="a SentenceTransformer object; pass the folder or Hub id"):
        SimCSEModel.from_encoder(st_model)


def trained_weights(trainer) -> dict:
    trainer.train()
    return {name: value.detach().clone() for name, value in trainer.model.state_dict().items()}


def test_trainers_built_in_one_process_each_train_what_they_train_alone(tiny_backbone, tmp_path):
    """A second trainer (another method, seed, precision and batch) built before the first one trains leaves the first
    one's run bit-identical to its run alone."""
    from csekit.modeling import WhitenedCSEModel
    from csekit.trainers import WhitenedCSETrainer

    data = Dataset.from_dict({"sent0": SENTENCES})

    def first():
        torch.manual_seed(1)
        return SimCSETrainer(model=simcse_model(tiny_backbone), args=arguments(tmp_path / "first"), train_dataset=data)

    alone = trained_weights(first())
    trainer = first()
    WhitenedCSETrainer(model=WhitenedCSEModel.from_encoder(str(tiny_backbone), num_groups=16),
                       args=arguments(tmp_path / "second", seed=9, bf16=True, per_device_train_batch_size=12),
                       train_dataset=data)
    together = trained_weights(trainer)
    assert all(torch.equal(alone[name], together[name]) for name in alone)


def test_a_python_resume_on_other_data_is_refused_and_on_the_same_data_continues(tiny_backbone, tmp_path):
    """The run record of a Python run holds its data's hash, as the recipe's does."""
    def trainer(sentences):
        return SimCSETrainer(model=simcse_model(tiny_backbone), train_dataset=Dataset.from_dict({"sent0": sentences}),
                             args=arguments(tmp_path / "out", save_strategy="steps", save_steps=1))

    trainer(SENTENCES).train()
    with pytest.raises(DataError, match=r"another setup \(the training data .* -> sha256:"):
        trainer([sentence + " again" for sentence in SENTENCES]).train(resume_from_checkpoint=True)
    trainer(SENTENCES).train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-1"))


def test_clsr_from_dataset_runs_the_same_checks(tmp_path):
    """CLSR's own loop takes its dataset through the same check, and refuses another method's model."""
    from csekit.methods import get_method

    clsr = get_method("clsr")
    arguments_class = load_object("csekit.trainers.clsr:CLSRTrainingArguments")
    args = arguments_class(output_dir=str(tmp_path / "clsr"), per_device_train_batch_size=4)
    pairs = Dataset.from_dict({"sent0": SENTENCES[:8], "sent1": SENTENCES[8:15] + [" "]})
    model = clsr.model_class.__new__(clsr.model_class)
    with pytest.raises(DataError, match="row 8: sent1 is blank"):
        clsr.trainer_class.from_dataset(model, args, pairs)
    with pytest.raises(DataError, match="model: a SimCSEModel"):
        clsr.trainer_class.from_dataset(SimCSEModel.__new__(SimCSEModel), args, pairs)

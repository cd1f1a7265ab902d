"""The shipped paper configurations (``recipes/configs/paper/``): one YAML per headline row of the papers.

Every YAML there is found by its header (``csekit.paper_configs``: the row, score, weights, compute, the paper's
settings and the command), with no list of them here. Each must hold its header's settings (the paper's values as
its text and the authors' run scripts give them, written from those beside the words that cite them), be found by
name (``--config paper/<name>``, also from an installed package), and build its model and trainer without a
configuration error or a degenerate-whitening warning. The build runs on a tiny random backbone in place of the
YAML's (12 layers like bert-base/roberta-base, hidden 32), with the settings tied to the backbone width scaled so
that their rule holds: WhitenedCSE's k groups keep 768 / k channels each (384 groups of 2 -> 16 groups of 2), CLSR's
output keeps the backbone's width.
"""

import configparser
import dataclasses
import logging
from importlib import import_module

import pytest
import torch
import yaml
from transformers import BertForMaskedLM, BertModel, RobertaForMaskedLM

from conftest import REPO_ROOT, tiny_bert_config, tiny_roberta_config
from csekit.evaluation.sts import STSEvaluator
from csekit.methods import METHODS
from csekit.paper_configs import configs_dir, paper_configs, read_paper_config, reproduce_table
from csekit.trainers.arguments import shipped_configs
from csekit.trainers.data import load_training_dataset
from csekit.trainers.trainer import ContrastiveTrainer

PAPER_DIR = REPO_ROOT / "recipes" / "configs" / "paper"
BASE_HIDDEN = 768  # bert-base / roberta-base
TINY_HIDDEN, TINY_LAYERS = 32, 12
SBERT = "sentence-transformers/bert-base-nli-mean-tokens"  # CLSR Table 3 caption: SBERT-base, NLI-trained, mean pooling
CONFIGS = {config.name: config for config in paper_configs()}  # every YAML in recipes/configs/paper/, by its header


def read_yaml(name: str) -> dict:
    return yaml.safe_load((PAPER_DIR / f"{name}.yaml").read_text())


# ------------------------------------------------------------------------------------------------ the headers
def test_every_paper_yaml_has_a_header_and_every_method_a_paper_yaml():
    assert sorted(path.stem for path in PAPER_DIR.glob("*.yaml")) == sorted(CONFIGS)
    assert {config.recipe for config in CONFIGS.values()} == set(METHODS)  # commands run registered recipes


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_config_holds_the_papers_hyperparameters(name):
    """The body holds every value of the header's ``settings`` (the paper's, cited in the words beside them)."""
    settings = CONFIGS[name].settings
    assert settings and {key: read_yaml(name).get(key) for key in settings} == settings
    # the row names its source: a table of the paper, or the authors' README where csekit took the number from it
    assert "Table" in CONFIGS[name].row or "README" in CONFIGS[name].row


HEADER = """# paper:
#   row: A method, bert-base (Table 2)
#   score: 77.10 (7 tasks)
#   weights: bert-base-uncased
#   compute: not counted
#   settings: {learning_rate: 3.0e-05}
# Words on the sources.
#   accelerate launch recipes/simcse.py --config paper/new_method
learning_rate: 3.0e-5
"""


def test_a_new_paper_yaml_is_picked_up_with_no_other_edit(tmp_path, monkeypatch):
    (tmp_path / "new_method.yaml").write_text(HEADER)
    monkeypatch.setattr("csekit.paper_configs.paper_dir", lambda: tmp_path)
    (config,) = paper_configs()
    assert (config.name, config.recipe, config.score, config.settings) == (
        "new_method", "simcse", "77.10 (7 tasks)", {"learning_rate": 3e-5})
    table = reproduce_table().splitlines()
    row = "| A method, bert-base (Table 2) | 77.10 (7 tasks) | `paper/new_method` | bert-base-uncased | not counted |"
    assert row in table
    assert table[-4:] == ["# A method, bert-base (Table 2)",
                          "accelerate launch recipes/simcse.py --config paper/new_method",
                          "accelerate launch -m csekit.recipes.simcse --config paper/new_method", "```"]
    assert reproduce_table("clsr").count("\n") == 1  # a recipe with no config: the table's head alone


@pytest.mark.parametrize("broken, message", [
    (HEADER.replace("#   score: 77.10 (7 tasks)\n", ""), "mapping of row, score"),
    (HEADER.replace("77.10 (7 tasks)", "77.1"), "'score' must read like"),
    (HEADER.replace("paper/new_method", "paper/other"), "must name its command once"),
    (HEADER.replace("{learning_rate: 3.0e-05}", "{learning_rate: [}"), "not valid YAML"),
    ("learning_rate: 3.0e-5\n", "must start with a commented 'paper:' mapping"),
])
def test_a_malformed_header_is_one_line(tmp_path, broken, message):
    path = tmp_path / "new_method.yaml"
    path.write_text(broken)
    with pytest.raises(ValueError, match=message) as error:
        read_paper_config(path)
    assert "\n" not in str(error.value)


# ------------------------------------------------------------------------------------------------ found when installed
def test_paper_configs_are_shipped_package_data():
    """Found by name through the package's resources, and matched by setup.cfg's package_data (so in the wheel)."""
    assert {f"paper/{name}" for name in CONFIGS} <= set(shipped_configs())
    assert configs_dir().name == "configs" and (configs_dir() / "paper").is_dir()
    config = configparser.ConfigParser()
    config.read(REPO_ROOT / "setup.cfg")
    patterns = config["options.package_data"]["csekit.recipes"].replace(",", " ").split()
    packaged = {path for pattern in patterns for path in (REPO_ROOT / "recipes").glob(pattern)}  # setuptools' glob
    assert {PAPER_DIR / f"{name}.yaml" for name in CONFIGS} <= packaged, patterns


# ------------------------------------------------------------------------------------------------ they build
def save_tiny(folder, model_name: str, tokenizer):
    """The tiny stand-in for the YAML's backbone, saved the way the real checkpoint is (an MLM head for BERT and
    RoBERTa, as bert-base-uncased and roberta-base have; a bare encoder for the sentence-transformers model)."""
    torch.manual_seed(0)
    size = dict(hidden_size=TINY_HIDDEN, num_hidden_layers=TINY_LAYERS, max_position_embeddings=512)
    build = {
        "bert-base-uncased": lambda: BertForMaskedLM(tiny_bert_config(**size)),
        "roberta-base": lambda: RobertaForMaskedLM(tiny_roberta_config(**{**size, "max_position_embeddings": 514})),
        SBERT: lambda: BertModel(tiny_bert_config(**size)),
    }[model_name]
    build().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def scaled_flags(values: dict) -> list:
    """Backbone-width settings on the tiny backbone, by the YAML's rule (channels per group; output = backbone)."""
    flags = []
    if "num_groups" in values:
        channels = BASE_HIDDEN // values["num_groups"]
        flags += ["--num_groups", str(TINY_HIDDEN // channels)]
    if values.get("representation_size") == BASE_HIDDEN:
        flags += ["--representation_size", str(TINY_HIDDEN)]
    return flags


def further_models(name: str) -> list:
    """The config fields of ``name``'s YAML naming a further model (the method config's ``model_path_fields``)."""
    config_class = METHODS[CONFIGS[name].recipe].config_class
    return [field for field in getattr(config_class, "model_path_fields", {}) if field in read_yaml(name)]


def build_contrastive(name, tiny, tmp_path, tokenizer, data_dir):
    module = import_module(f"csekit.recipes.{CONFIGS[name].recipe}")
    argv = ["--config", f"paper/{name}", "--model_name_or_path", str(tiny), "--output_dir", str(tmp_path / "out"),
            "--train_file", "wiki/wiki1m_for_simcse.txt", "--fp16", "false",  # fp16 needs a GPU
            *scaled_flags(read_yaml(name))]
    for field in further_models(name):  # a further model the config names (a generator): the tiny masked LM
        argv += [f"--{field}", str(tiny)]
    model_args, data_args, training_args, extra_args = module.RECIPE.parse(argv)
    assert training_args.per_device_train_batch_size == read_yaml(name)["per_device_train_batch_size"]
    model = module.RECIPE.build_model(str(tiny), model_args)
    model.tokenizer = tokenizer
    return module.RECIPE.trainer_class(
        model=model, args=training_args,
        train_dataset=load_training_dataset(data_args.train_file, str(data_dir), training_args.train_batch_size),
        data_collator=module.RECIPE.collator(tokenizer, model, data_args, extra_args), processing_class=tokenizer,
        sts_evaluator=STSEvaluator(data_dir, ("STSBenchmark",), split="dev"),
    )


def build_own_loop(name, tiny, tmp_path):
    """The trainer of a method with its own loop (CLSR's: pairs of cached vectors) on one full batch of pairs."""
    from csekit.trainers.clsr_data import HeldOutSentences, PairCorpus

    module = import_module(f"csekit.recipes.{CONFIGS[name].recipe}")
    argv = ["--config", f"paper/{name}", "--model_name_or_path", str(tiny), "--output_dir", str(tmp_path / "out"),
            *scaled_flags(read_yaml(name))]
    model_args, backbone_args, _, training_args = module.RECIPE.parse(argv)
    model = module.RECIPE.build_model(model_args, backbone_args, training_args.seed)
    pairs = torch.arange(2 * training_args.per_device_train_batch_size).view(-1, 2)  # one full batch of pairs
    corpus = PairCorpus([f"s{i}" for i in range(pairs.numel())], pairs)
    vectors = torch.randn(pairs.numel(), model.config.hidden_size)
    return module.RECIPE.method.trainer_class(model, training_args, vectors, corpus, HeldOutSentences({}))


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_config_builds_its_model_without_error_or_warning(name, tmp_path, tokenizer, data_dir, caplog):
    model_name = read_yaml(name)["model_name_or_path"]
    tiny = save_tiny(tmp_path / "backbone", model_name, tokenizer)
    with caplog.at_level(logging.INFO, logger="csekit"):
        if not issubclass(METHODS[CONFIGS[name].recipe].trainer_class, ContrastiveTrainer):  # its own loop
            trainer = build_own_loop(name, tiny, tmp_path)
        else:
            trainer = build_contrastive(name, tiny, tmp_path, tokenizer, data_dir)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("csekit")]
    assert not warnings, warnings
    config = trainer.model.config
    fields = {field.name for field in dataclasses.fields(type(config))}
    expected = {k: v for k, v in CONFIGS[name].settings.items() if k in fields}
    expected.pop("representation_size", None)
    expected.pop("num_groups", None)
    for field in further_models(name):  # the tiny stand-in (build_contrastive)
        expected.pop(field)
    assert {k: getattr(config, k) for k in expected} == expected  # the YAML's values reached the model config
    if "num_groups" in CONFIGS[name].settings:  # the paper's 2 channels per group, fewer than the batch's sentences
        assert config.group_width == BASE_HIDDEN // CONFIGS[name].settings["num_groups"] == 2


def test_reproduce_page_renders_the_headers_table():
    """docs/reproduce.md keeps no table of its own: the docs build renders the headers' (docs/hooks.py)."""
    page = (REPO_ROOT / "docs" / "reproduce.md").read_text()
    assert "<!-- paper table -->" in page and "| paper row |" not in page
    table = reproduce_table()
    lines = table.splitlines()
    for config in CONFIGS.values():
        (row,) = [line for line in lines if f"| `paper/{config.name}` |" in line]
        assert row.startswith(f"| {config.row} | {config.score} | `paper/{config.name}` | {config.weights} |")
        at = lines.index(f"# {config.row}")  # its commands in the shell block under the table, one a line
        assert lines[at + 1:at + 3] == list(config.commands())
        assert config.commands()[0] == f"accelerate launch recipes/{config.recipe}.py --config paper/{config.name}"

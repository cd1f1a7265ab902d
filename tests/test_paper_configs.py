"""The shipped paper configurations (``recipes/configs/paper/``): one YAML per headline row of the papers.

Each YAML must hold the paper's hyper-parameters (checked against a table written here from the papers' text and
the authors' run scripts, not read from csekit), be found by name (``--config paper/<name>``, also from an installed
package), and build its model and trainer without a configuration error or a degenerate-whitening warning. The
build runs on a tiny random backbone in place of the YAML's (12 layers like bert-base/roberta-base, hidden 32), with
the settings tied to the backbone width scaled so that their rule holds: WhitenedCSE's k groups keep 768 / k channels
each (384 groups of 2 -> 16 groups of 2), CLSR's output keeps the backbone's width.
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
from csekit.trainers.arguments import configs_dir, shipped_configs
from csekit.trainers.data import load_training_dataset

PAPER_DIR = REPO_ROOT / "recipes" / "configs" / "paper"
BASE_HIDDEN = 768  # bert-base / roberta-base
TINY_HIDDEN, TINY_LAYERS = 32, 12
WIKI = "wiki/wiki1m_for_simcse.txt"
NLI = "nli/nli_for_simcse.csv"
SBERT = "sentence-transformers/bert-base-nli-mean-tokens"  # Table 3 caption: SBERT-base, NLI-trained, mean pooling

# SimCSE: run_unsup_example.sh + the README "Hyperparameters" table (princeton-nlp/SimCSE); scores: SimCSE Table 5,
# reprinted in WhitenedCSE Table 1 and CMLM-CSE Table 1.
SIMCSE_UNSUP = dict(train_file=WIKI, num_train_epochs=1, max_seq_length=32, temperature=0.05, pooler_type="cls",
                    mlp_only_train=True, eval_steps=125, fp16=True)
SIMCSE_BERT = dict(SIMCSE_UNSUP, model_name_or_path="bert-base-uncased", per_device_train_batch_size=64,
                   learning_rate=3e-5)
SIMCSE_ROBERTA = dict(SIMCSE_UNSUP, model_name_or_path="roberta-base", per_device_train_batch_size=512,
                      learning_rate=1e-5)
# CMLM-CSE §4.1 ("the same settings as the unsupervised SimCSE", first 8 blocks frozen, 3 fusion blocks), Table 3's
# text (15% masking, no contrastive-side augmentation), Table 5 (λ = 0.005)
CMLM = dict(extractor_layers=8, fusion_layers=3, mask_rate=0.15, mlm_weight=0.005, contrastive_weight=1.0,
            contrastive_augmentation="none")
# CLSR §4.1 + Table 4 (mean pooling) + §4.2 (Table 3 is NLI-trained)
CLSR = dict(train_file=NLI, pooler_type="avg", representation_size=768, temperature=0.1, num_train_epochs=2000,
            per_device_train_batch_size=512, learning_rate=0.5, weight_decay=1e-4, warmup_epochs=10)

PAPER = {  # name: (recipe, the paper's score, its hyper-parameters)
    "simcse_bert_base": ("simcse", "76.25", SIMCSE_BERT),
    "simcse_roberta_base": ("simcse", "76.57", SIMCSE_ROBERTA),
    # WhitenedCSE §4.1: lr 3e-5, batch 64, 1 epoch, τ 0.05, k = 384 groups, 3 positives (= the anchor's view + 2),
    # eq. 7 (L1), STS-B dev every 125 steps; max length 32, [CLS] and fp16 from the authors' script
    "whitenedcse_bert_base": ("whitenedcse", "78.78", dict(
        model_name_or_path="bert-base-uncased", train_file=WIKI, num_train_epochs=1, per_device_train_batch_size=64,
        learning_rate=3e-5, max_seq_length=32, temperature=0.05, pooler_type="cls", whitening="shuffled_group",
        num_groups=384, num_positives=2, loss_type="L1", eval_steps=125, fp16=True)),
    "cmlm_cse_bert_base": ("cmlm_cse", "76.80", dict(SIMCSE_BERT, **CMLM)),
    "cmlm_cse_roberta_base": ("cmlm_cse", "76.87", dict(SIMCSE_ROBERTA, **CMLM)),
    "clsr_bert_base": ("clsr", "66.61", dict(CLSR, model_name_or_path="bert-base-uncased")),
    "clsr_sbert_base": ("clsr", "73.11", dict(CLSR, model_name_or_path=SBERT)),
}


def read_yaml(name: str) -> dict:
    return yaml.safe_load((PAPER_DIR / f"{name}.yaml").read_text())


# ------------------------------------------------------------------------------------------------ the paper's values
def test_one_config_per_headline_row():
    assert sorted(path.stem for path in PAPER_DIR.glob("*.yaml")) == sorted(PAPER)


@pytest.mark.parametrize("name", sorted(PAPER))
def test_config_holds_the_papers_hyperparameters(name):
    recipe, score, expected = PAPER[name]
    values = read_yaml(name)
    assert {key: values.get(key) for key in expected} == expected
    text = (PAPER_DIR / f"{name}.yaml").read_text()
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    assert f"Paper: {score}" in header and "Table" in header  # the comment names the score and its table
    assert f"recipes/{recipe}.py --config paper/{name}" in header  # and the command that runs it


# ------------------------------------------------------------------------------------------------ found when installed
def test_paper_configs_are_shipped_package_data():
    """Found by name through the package's resources, and matched by setup.cfg's package_data (so in the wheel)."""
    assert {f"paper/{name}" for name in PAPER} <= set(shipped_configs())
    assert configs_dir().name == "configs" and (configs_dir() / "paper").is_dir()
    config = configparser.ConfigParser()
    config.read(REPO_ROOT / "setup.cfg")
    patterns = config["options.package_data"]["csekit.recipes"].replace(",", " ").split()
    packaged = {path for pattern in patterns for path in (REPO_ROOT / "recipes").glob(pattern)}  # setuptools' glob
    assert {PAPER_DIR / f"{name}.yaml" for name in PAPER} <= packaged, patterns


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


def build_contrastive(name, tiny, tmp_path, tokenizer, data_dir):
    module = import_module(f"csekit.recipes.{PAPER[name][0]}")
    argv = ["--config", f"paper/{name}", "--model_name_or_path", str(tiny), "--output_dir", str(tmp_path / "out"),
            "--train_file", "wiki/wiki1m_for_simcse.txt", "--fp16", "false",  # fp16 needs a GPU
            *scaled_flags(read_yaml(name))]
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


def build_clsr(name, tiny, tmp_path):
    from csekit.trainers.clsr import CLSRTrainer
    from csekit.trainers.clsr_data import HeldOutSentences, PairCorpus

    module = import_module("csekit.recipes.clsr")
    argv = ["--config", f"paper/{name}", "--model_name_or_path", str(tiny), "--output_dir", str(tmp_path / "out"),
            *scaled_flags(read_yaml(name))]
    model_args, backbone_args, _, training_args = module.RECIPE.parse(argv)
    model = module.RECIPE.build_model(model_args, backbone_args, training_args.seed)
    pairs = torch.arange(2 * training_args.per_device_train_batch_size).view(-1, 2)  # one full batch of pairs
    corpus = PairCorpus([f"s{i}" for i in range(pairs.numel())], pairs)
    vectors = torch.randn(pairs.numel(), model.config.hidden_size)
    return CLSRTrainer(model, training_args, vectors, corpus, HeldOutSentences({}))


@pytest.mark.parametrize("name", sorted(PAPER))
def test_config_builds_its_model_without_error_or_warning(name, tmp_path, tokenizer, data_dir, caplog):
    model_name = read_yaml(name)["model_name_or_path"]
    tiny = save_tiny(tmp_path / "backbone", model_name, tokenizer)
    with caplog.at_level(logging.INFO, logger="csekit"):
        if PAPER[name][0] == "clsr":
            trainer = build_clsr(name, tiny, tmp_path)
        else:
            trainer = build_contrastive(name, tiny, tmp_path, tokenizer, data_dir)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("csekit")]
    assert not warnings, warnings
    config = trainer.model.config
    expected = {k: v for k, v in PAPER[name][2].items() if k in {f.name for f in dataclasses.fields(type(config))}}
    expected.pop("representation_size", None)
    expected.pop("num_groups", None)
    assert {k: getattr(config, k) for k in expected} == expected  # the YAML's values reached the model config
    if "num_groups" in PAPER[name][2]:  # the paper's 2 channels per group, fewer than the batch's sentences
        assert config.group_width == BASE_HIDDEN // PAPER[name][2]["num_groups"] == 2


def test_reproduce_page_lists_every_config_with_the_papers_score():
    section = (REPO_ROOT / "docs" / "reproduce.md").read_text()
    rows = {line for line in section.splitlines() if line.startswith("| ")}
    for name, (recipe, score, _) in PAPER.items():
        (row,) = [line for line in rows if f"--config paper/{name}`" in line]
        assert f"| {score} " in row and f"recipes/{recipe}.py" in row and f"-m csekit.recipes.{recipe} " in row, name

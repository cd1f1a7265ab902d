"""The Python path (docs/python.md): every method's trainer built from a ``datasets.Dataset`` as a sentence-transformers
user builds a trainer, its saved folder loaded by ``SentenceTransformer``; the page's snippets run as printed."""

import ast
import json
import os
import re
import subprocess
import sys
from importlib import import_module
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from transformers import AutoConfig, AutoModel, BertModel, TrainingArguments

from conftest import REPO_ROOT, masked_lm_beside, tiny_bert_config
from csekit.errors import DataError
from csekit.loading import embedded_minilm_path
from csekit.methods import METHODS
from csekit.paper_configs import paper_configs
from csekit.trainers import ContrastiveTrainer
from fake_hub import build_hub_cache
from test_decoders import SMALL, bpe_tokenizer

PAGE = REPO_ROOT / "docs" / "python.md"
SENTENCE = "A man is playing a guitar."
# the methods whose trainer is a transformers Trainer (CLSR's is its own loop: from_dataset, tested below)
TRAINER_METHODS = [method for method in METHODS.values() if issubclass(method.trainer_class, ContrastiveTrainer)]


def page_snippets() -> dict:
    """``{method title: [python snippets]}`` of the page's "Every method" section, in order."""
    section = PAGE.read_text().split("## Every method", 1)[1]
    snippets = {}
    for block in re.split(r"^### ", section, flags=re.M)[1:]:
        title = block.splitlines()[0].strip()
        snippets[title] = re.findall(r"```python\n(.*?)```", block, flags=re.S)
    return snippets


def literal_keywords(snippet: str) -> dict:
    """Every ``name=<literal>`` keyword argument of the snippet's calls."""
    values = {}
    for node in ast.walk(ast.parse(snippet)):
        if isinstance(node, ast.Call):
            for keyword in node.keywords:
                try:
                    values[keyword.arg] = ast.literal_eval(keyword.value)
                except ValueError:
                    pass
    return values


def test_the_page_has_a_snippet_for_every_registered_method():
    assert set(page_snippets()) == {method.title for method in METHODS.values()}
    assert all(snippets for snippets in page_snippets().values())


def test_each_methods_first_snippet_sets_its_papers_values():
    """A value a snippet spells out for a setting of the method's BERT-base paper row is that row's value."""
    rows = {config.name: config.settings for config in paper_configs()}
    for method in METHODS.values():
        settings = rows[f"{method.name}_bert_base"]
        given = literal_keywords(page_snippets()[method.title][0])
        shared = {key: value for key, value in given.items() if key in settings}
        assert shared and shared == {key: settings[key] for key in shared}, (method.name, shared)


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory, tokenizer) -> Path:
    """A Hugging Face cache holding the page's ids: ``bert-base-uncased`` a seeded 12-layer, hidden-32 BERT (every
    method's default layer counts fit it) and ``distilbert-base-uncased`` a masked LM with its vocabulary (DiffCSE's
    generator), each with the MiniLM tokenizer (bert-base-uncased's vocabulary)."""
    root = tmp_path_factory.mktemp("python_api")
    backbone = root / "bert"
    torch.manual_seed(0)
    BertModel(tiny_bert_config(num_hidden_layers=12, max_position_embeddings=512), add_pooling_layer=False
              ).save_pretrained(backbone)
    tokenizer.save_pretrained(backbone)
    cache = root / "hub"
    build_hub_cache(cache, "bert-base-uncased", backbone)
    build_hub_cache(cache, "distilbert-base-uncased", masked_lm_beside(backbone))
    decoder = root / "qwen3"  # the decoder snippet's Qwen3: tiny, random, a byte-level BPE with no pad token
    decoder_tokenizer = bpe_tokenizer()
    AutoModel.from_config(AutoConfig.for_model("qwen3", **SMALL, eos_token_id=decoder_tokenizer.eos_token_id)
                          ).save_pretrained(decoder)
    decoder_tokenizer.save_pretrained(decoder)
    build_hub_cache(cache, "Qwen/Qwen3-0.6B", decoder)
    build_hub_cache(cache, "sentence-transformers/all-MiniLM-L6-v2", embedded_minilm_path())  # the mining embedder
    return cache


def write_page_data(folder: Path) -> None:
    """The page's files, small: 128 sentences, 600 NLI triplets (CLSR's batch is 512 pairs)."""
    (folder / "wiki1m_for_simcse.txt").write_text("".join(
        f"sentence {i} tells of the {['red', 'old', 'quiet', 'bright'][i % 4]} harbour {i * 7}\n" for i in range(128)))
    (folder / "nli_for_simcse.csv").write_text("sent0,sent1,hard_neg\n" + "".join(
        f"a traveller reads map {i},someone holds map {i},nobody saw map {i}\n" for i in range(600)))


RUN_SNIPPETS = """
import json, sys
import numpy as np
import csekit
from transformers import AutoModel

results = {}
for title, snippet, folder in json.loads(sys.stdin.read()):
    namespace = {}
    exec(compile(snippet, title, "exec"), namespace)
    expected = AutoModel.from_pretrained(folder).encode([%r])
    results.setdefault(title, []).append(float(np.abs(namespace["embeddings"] - np.asarray(expected)).max()))
print(json.dumps(results))
""" % SENTENCE


def test_every_snippet_runs_as_printed_and_its_folder_loads_in_sentence_transformers(hub_cache, tmp_path, data_dir):
    """Each snippet trains its method from the page's files, saves, and ``SentenceTransformer(folder).encode`` gives
    csekit's vectors of the saved model (float32 rounding)."""
    write_page_data(tmp_path)
    # as printed, but for CLSR's 2000 epochs (its paper's), run as 20: the same loop, in 2 s instead of 3 minutes
    runs = [(title, snippet.replace("num_train_epochs=2000", "num_train_epochs=20"),
             re.search(r'(?:save_model|save_pretrained)\("([^"]+)"\)', snippet).group(1))
            for title, snippets in page_snippets().items() for snippet in snippets]
    assert sum("num_train_epochs=2000" in snippet for snippets in page_snippets().values() for snippet in snippets) == 1
    env = {**os.environ, "HF_HUB_CACHE": str(hub_cache), "HF_HUB_OFFLINE": "1", "CSEKIT_DATA_DIR": str(data_dir),
           "HF_DATASETS_CACHE": str(tmp_path / "datasets-cache"), "TOKENIZERS_PARALLELISM": "false"}
    result = subprocess.run([sys.executable, "-c", RUN_SNIPPETS], input=json.dumps(runs), cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    differences = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(differences) == {method.title for method in METHODS.values()}
    assert all(value < 1e-5 for values in differences.values() for value in values), differences
    for _, _, folder in runs:
        assert (tmp_path / folder / "modules.json").is_file() and (tmp_path / folder / "tokenizer.json").is_file()


# ------------------------------------------------------------------------------------------------ what a trainer takes
@pytest.fixture(scope="module")
def backbone(tmp_path_factory, tokenizer) -> Path:
    from conftest import save_tiny_backbone

    return save_tiny_backbone(tmp_path_factory.mktemp("python_api_backbone"), tokenizer)


def trainer_for(method, backbone: Path, output_dir: Path, **trainer_kwargs):
    """``method``'s trainer on the tiny backbone with the registry's test settings (``test_flags``, read as the
    recipe reads them), 2 steps of 8 examples."""
    from conftest import recipe_flags
    from csekit.trainers.arguments import config_kwargs

    recipe = import_module(f"csekit.recipes.{method.name}").RECIPE
    model_args = recipe.parse(["--model_name_or_path", str(backbone), *recipe_flags(method, backbone)])[0]
    model = method.training_model_class.from_encoder(str(backbone), **config_kwargs(model_args, method.config_class))
    args = TrainingArguments(output_dir=str(output_dir), per_device_train_batch_size=8, max_steps=2, report_to="none",
                             use_cpu=True, save_strategy="no")
    return method.trainer_class(model=model, args=args, **trainer_kwargs)


@pytest.mark.parametrize("method", TRAINER_METHODS, ids=lambda method: method.name)
def test_a_trainer_from_a_dataset_alone_trains_and_saves_a_folder_sentence_transformers_loads(method, backbone,
                                                                                               tmp_path):
    """No collator, no tokenizer, no column setting: the method's own; ``save_pretrained`` of the trained model writes
    the same whole folder."""
    from sentence_transformers import SentenceTransformer

    sentences = [f"sentence {i} about the {['red', 'old'][i % 2]} harbour" for i in range(32)]
    trainer = trainer_for(method, backbone, tmp_path / "run", train_dataset=Dataset.from_dict({"sent0": sentences}))
    assert type(trainer.data_collator).__module__.startswith("csekit.trainers")
    trainer.train()
    trainer.save_model(str(tmp_path / "saved"))
    published = trainer.model.sentence_encoder() if hasattr(trainer.model, "sentence_encoder") else trainer.model
    published.save_pretrained(tmp_path / "pretrained")
    expected = published.eval().encode([SENTENCE])
    for folder in ("saved", "pretrained"):
        vectors = SentenceTransformer(str(tmp_path / folder), device="cpu").encode([SENTENCE])
        assert abs(vectors - expected).max() < 1e-5, folder


def test_a_trainer_refuses_data_without_the_methods_columns_and_turns_off_evaluation_it_cannot_run(backbone,
                                                                                                    tmp_path, caplog):
    from csekit.methods import get_method
    from csekit.trainers import CSETrainingArguments

    cmlm = get_method("cmlm_cse")
    with pytest.raises(DataError, match=r"train_dataset: columns sent0,sent1, but CMLMCSETrainer trains on sent0"):
        trainer_for(cmlm, backbone, tmp_path, train_dataset=Dataset.from_dict({"sent0": ["a"], "sent1": ["b"]}))
    simcse = get_method("simcse")
    model = simcse.training_model_class.from_encoder(str(backbone))
    args = CSETrainingArguments(output_dir=str(tmp_path / "run"), use_cpu=True, report_to="none")
    trainer = simcse.trainer_class(model=model, args=args, train_dataset=Dataset.from_dict({"sent0": ["a", "b"]}))
    assert trainer.args.eval_strategy == "no" and not trainer.args.load_best_model_at_end
    assert args.eval_strategy == "steps"  # the caller's arguments are left as they were
    assert "no sts_evaluator" in caplog.text


def test_a_model_that_knows_no_tokenizer_is_refused_before_anything_is_written(tmp_path):
    from csekit.modeling import SimCSEConfig, SimCSEModel

    model = SimCSEModel(SimCSEConfig(encoder_config=tiny_bert_config().to_dict()))
    with pytest.raises(ValueError, match=r"no tokenizer to save beside the weights.*set model.tokenizer"):
        model.save_pretrained(tmp_path / "model")
    assert not (tmp_path / "model").exists()


def test_clsr_from_a_dataset_drops_pairs_touching_a_held_out_sentence(backbone, data_dir):
    from csekit.evaluation.sts import load_sts_task
    from csekit.methods import get_method
    from csekit.trainers import CLSRTrainingArguments

    clsr = get_method("clsr")
    model = clsr.training_model_class.from_encoder(str(backbone), pooler_type="avg")
    test_sentence = load_sts_task(data_dir, "STS12").sentences1[0]
    pairs = {"sent0": [f"pair {i} one" for i in range(5)] + [test_sentence],
             "sent1": [f"pair {i} two" for i in range(5)] + ["a partner"]}
    args = CLSRTrainingArguments(output_dir="unused", per_device_train_batch_size=4, num_train_epochs=1,
                                 warmup_epochs=0)
    trainer = clsr.trainer_class.from_dataset(model, args, Dataset.from_dict(pairs))
    assert len(trainer.corpus.pairs) == 5 and test_sentence not in trainer.corpus.sentences
    with pytest.raises(DataError, match="CLSR trains on positive pairs, sent0,sent1"):
        clsr.trainer_class.from_dataset(model, args, Dataset.from_dict({"sent0": ["a"]}))


# ------------------------------------------------------------------------------------------------ what is published
def card_rows(folder: Path) -> dict:
    """``{setting: value}`` of the training table of the folder's card (values without their code fences)."""
    from csekit.publishing.model_card import render_model_card

    scores = dict.fromkeys(("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness", "avg"), 1.0)
    (folder / "eval_results.json").write_text(json.dumps({"model": "m", "pooler": "cls", "sts": scores}))
    section = str(render_model_card(folder)).split("## Training", 1)[1].split("\n## ", 1)[0]
    return {cells[0]: cells[1].strip("`") for line in section.splitlines() if line.startswith("| ")
            for cells in [[cell.strip() for cell in line.strip("|").split("|")]]}


def test_a_python_runs_folder_has_the_recipes_training_table_with_the_length_it_trained_at(backbone, tmp_path):
    """A trainer's final save commits the run's ``training_args.json`` with its weights, as a recipe's folder has
    it: the backbone, the data's hash and size, the truncation length the collator trained at (not the tokenizer's
    or the inference length) and the training arguments, so the card's training table is the recipe's. CLSR's loop
    hands its arguments to the model it trained, which writes them when saved."""
    from csekit.methods import get_method, load_object
    from csekit.trainers.data import data_fingerprint

    sentences = {"sent0": [f"sentence {i} about the {['red', 'old'][i % 2]} harbour" for i in range(32)]}
    trainer = trainer_for(get_method("simcse"), backbone, tmp_path / "run", train_dataset=Dataset.from_dict(sentences))
    trainer.data_collator.max_length = 12
    trainer.train()
    trainer.save_model(str(tmp_path / "saved"))
    arguments = json.loads((tmp_path / "saved" / "training_args.json").read_text())
    assert arguments["model_args"]["model_name_or_path"] == str(backbone)
    assert arguments["data_args"]["train_dataset"] == data_fingerprint(sentences)
    assert (arguments["data_args"]["train_examples"], arguments["data_args"]["max_seq_length"]) == (32, 12)
    assert (arguments["training_args"]["learning_rate"], arguments["training_args"]["max_steps"]) == (
        trainer.args.learning_rate, 2)
    rows = card_rows(tmp_path / "saved")
    assert (rows["model_name_or_path"], rows["max_seq_length"], rows["max_steps"]) == (backbone.name, "12", "2")
    assert rows["per_device_train_batch_size"] == "8" and rows["temperature"] == "0.05"
    assert str(backbone.parent) not in str(rows)  # local paths by their base name

    clsr = get_method("clsr")
    model = clsr.training_model_class.from_encoder(str(backbone), pooler_type="avg")
    pairs = {"sent0": [f"pair {i} one" for i in range(8)], "sent1": [f"pair {i} two" for i in range(8)]}
    args = load_object(clsr.exports[0])(output_dir=str(tmp_path / "clsr-run"), per_device_train_batch_size=4,
                                        num_train_epochs=1, warmup_epochs=0)
    clsr.trainer_class.from_dataset(model, args, Dataset.from_dict(pairs)).train()
    model.save_pretrained(tmp_path / "clsr")
    rows = card_rows(tmp_path / "clsr")
    assert (rows["model_name_or_path"], rows["train_pairs"], rows["num_train_epochs"]) == (backbone.name, "8", "1")


# ------------------------------------------------------------------------------------------------ a run's stages
RUN_STAGES = r"""
import json, sys
from pathlib import Path
from unittest import mock
from csekit.methods import get_method
from csekit.trainers.runner import (TrainingRecipe, batch_record, build_trainer, check_run, commit_model,
                                    remove_checkpoints, train_run)

backbone, corpus, out = sys.argv[1:4]
recipe = TrainingRecipe(get_method("simcse"))
model_args, data_args, training_args, extra = recipe.parse(
    ["--model_name_or_path", backbone, "--train_file", corpus, "--output_dir", out, "--per_device_train_batch_size",
     "8", "--max_steps", "2", "--eval_steps", "2", "--save_steps", "2", "--max_seq_length", "16", "--report_to",
     "none"])
run = check_run(recipe, model_args, data_args, training_args)
trainer = build_trainer(recipe, run, model_args, data_args, training_args)
run.folder.acquire(lock=True)
train_run(trainer, run)
folder = commit_model(run.folder, True, lambda staging: trainer.save_model(str(staging)), {"model_args": model_args})
remove_checkpoints(run.folder, keep=False)
run.folder.release()
training_loaded = sorted(name for name in sys.modules if name.startswith(("csekit.publishing", "csekit.recipe_run")))

import huggingface_hub.constants
import csekit.recipe_run as stages
from csekit.evaluation.run_scores import score_run

record, table = score_run(trainer, run.test, model_args.model_name_or_path, run.model_path,
                          batch_record(trainer, run.columns))
stages.finish_run(folder, record, table, card={"repo_id": "someone/tiny", "data_dir": run.data_dir})
huggingface_hub.constants.HF_HUB_OFFLINE = False
api = mock.MagicMock()
stages.HfApi = lambda token=None: api
training_args.hub_model_id = "someone/tiny"
stages.publish_run(folder, training_args)
print(json.dumps({"training_loaded": training_loaded, "files": sorted(p.name for p in folder.iterdir()),
                  "uploaded": api.upload_folder.call_args.kwargs["allow_patterns"],
                  "repo": api.create_repo.call_args.args[0]}))
"""


def test_a_runs_stages_run_one_by_one_from_python_and_training_loads_no_publishing_code(tiny_backbone, corpus,
                                                                                          tmp_path, data_dir):
    """check, build, train and commit (csekit.trainers.runner) train and commit a loadable folder with no publishing
    module loaded; then score, card and push (csekit.evaluation.run_scores, csekit.recipe_run) finish it."""
    out = tmp_path / "out"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CSEKIT_DATA_DIR": str(data_dir), "TOKENIZERS_PARALLELISM": "false"}
    result = subprocess.run([sys.executable, "-c", RUN_STAGES, str(tiny_backbone), str(corpus), str(out)],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["training_loaded"] == []
    assert {"config.json", "training_args.json", "modules.json", "eval_results.json", "README.md"} <= set(seen["files"])
    assert not any(name.startswith("checkpoint-") for name in seen["files"])
    assert "README.md" in seen["uploaded"] and "eval_results.json" in seen["uploaded"]
    assert seen["repo"] == "someone/tiny"

"""Publishing: model cards equal the recorded JSON, the Hub upload set loads without csekit or pickle, and
sentence-transformers exports give the same embeddings as ``model.encode``."""

import importlib.util
import json
import shutil
from unittest import mock

import numpy as np
import pytest
import torch
from huggingface_hub import ModelCard
from sentence_transformers import SentenceTransformer
from transformers import AutoTokenizer, BertModel

from conftest import REPO_ROOT, run_isolated_python, tiny_bert_config
from csekit.cli import main as csekit
from csekit.errors import DataError
from csekit.evaluation.sts import STS_TASKS
from csekit.modeling import MODEL_CLASSES, SimCSEConfig, SimCSEModel
from csekit.publishing.hub import files_to_push, push_to_hub
from csekit.publishing.model_card import MODEL_CARDS_DIR, card_template, render_model_card, write_model_card
from csekit.publishing.st_export import export_sentence_transformers
from csekit.recipe_run import run_recipe
from csekit.recipes.simcse import RECIPE
from csekit.trainers.simcse import SimCSETrainer

SENTENCES = ["A cat sits on the mat.", "Markets rallied after the announcement of lower rates.", "hi", "Why?"]
# tiny-config adjustments some methods need (their defaults assume a 12-layer, 768-wide backbone)
TINY_OVERRIDES = {"csekit-cmlm-cse": {"extractor_layers": 1, "fusion_layers": 1}}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny matrices: one thread is ~3x faster than two on the busy 2-core test machine (measured on STS12)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tokenizer, data_dir):
    """A tiny SimCSE trained for 2 steps by the real recipe runner, test-scored, with its card and figure."""
    root = tmp_path_factory.mktemp("publishing")
    backbone = root / "backbone"
    BertModel(tiny_bert_config(max_position_embeddings=512)).save_pretrained(backbone)
    tokenizer.save_pretrained(backbone)
    corpus = root / "wiki.txt"
    corpus.write_text("\n".join((data_dir / "wiki" / "wiki1m_for_simcse.txt").read_text().splitlines()[:32]))
    output = root / "tiny-simcse"
    argv = ["--model_name_or_path", str(backbone), "--pooler_type", "cls", "--train_file", str(corpus),
            "--output_dir", str(output), "--per_device_train_batch_size", "8", "--max_steps", "2",
            "--eval_steps", "2", "--save_steps", "2", "--learning_rate", "1e-4", "--seed", "3"]
    run_recipe(RECIPE, *RECIPE.parse(argv))
    # the figure's evaluation on the first 600 STS-B train pairs (38 positives) keeps the test fast
    small = root / "data" / "senteval" / "downstream" / "STS" / "STSBenchmark"
    small.mkdir(parents=True)
    train = data_dir / "senteval" / "downstream" / "STS" / "STSBenchmark" / "sts-train.csv"
    (small / "sts-train.csv").write_text("\n".join(train.read_text().splitlines()[:600]) + "\n")
    write_model_card(output, figure="always", data_dir=root / "data")
    return output


def scored_on_senteval(trained, folder):
    """A copy of ``trained`` whose record says its STS scores were measured on SentEval's own test files (their
    pairs and hashes, ``SENTEVAL_TEST_SETS``), as a run on `csekit download senteval`'s data records them."""
    from csekit.evaluation.sts import SENTEVAL_TEST_SETS

    shutil.copytree(trained, folder, ignore=shutil.ignore_patterns("checkpoint-*"))
    record = json.loads((folder / "eval_results.json").read_text())
    record["protocol"]["sts"]["tasks"] = {task: {"pairs": pairs, "sha256": digest}
                                          for task, (pairs, digest) in SENTEVAL_TEST_SETS.items()}
    (folder / "eval_results.json").write_text(json.dumps(record))
    return folder


def test_senteval_labels_go_only_on_the_tasks_scored_on_senteval_files(trained, tmp_path):
    """One task whose recorded hash is not SentEval's (an edited file, another split, other data) loses its label,
    the others keep theirs; a record without a protocol names none."""
    folder = scored_on_senteval(trained, tmp_path / "model")
    record = json.loads((folder / "eval_results.json").read_text())
    record["protocol"]["sts"]["tasks"]["STS14"]["sha256"] = "0" * 16
    (folder / "eval_results.json").write_text(json.dumps(record))
    card = ModelCard(str(render_model_card(folder)))
    assert {result.dataset_type for result in card.data.eval_results} == {
        f"SentEval/{task}" for task in STS_TASKS if task != "STS14"}
    assert "**Not SentEval's test files:** the data scored for STS14 is not SentEval's" in card.text
    del record["protocol"]
    (folder / "eval_results.json").write_text(json.dumps(record))
    card = ModelCard(str(render_model_card(folder)))
    assert not card.data.eval_results and "records no protocol, so nothing shows which data was scored" in card.text


def table_row(card_text: str, label: str) -> list:
    line = next(line for line in card_text.splitlines() if line.startswith(f"| {label}"))
    return [cell.strip() for cell in line.strip().strip("|").split("|")][1:]


def test_card_cells_and_metadata_equal_the_recorded_json(trained, tmp_path):
    record = json.loads((trained / "eval_results.json").read_text())
    arguments = json.loads((trained / "training_args.json").read_text())
    card = ModelCard.load(trained / "README.md")
    cells = table_row(card.text, "**this model**")
    assert [float(cell) for cell in cells] == [record["sts"][task] for task in (*STS_TASKS, "avg")]
    # the tests' STS files are not SentEval's (their hashes differ): no SentEval label, and the text says so
    assert not card.data.eval_results and "**Not SentEval's test files:** the data scored for STS12, " in card.text
    # the same scores measured on SentEval's own files: the model-index holds them under SentEval's names, never
    # under an MTEB dataset id
    card = ModelCard(str(render_model_card(scored_on_senteval(trained, tmp_path / "senteval"))))
    index = {result.dataset_type: result for result in card.data.eval_results}
    assert {name: result.metric_value for name, result in index.items()} == {
        f"SentEval/{task}": record["sts"][task] for task in STS_TASKS}
    assert {(r.dataset_split, r.metric_type, r.task_type) for r in index.values()} == {
        ("test", "spearman_cosine", "sentence-similarity")}
    assert "mteb/" not in card.content.split("\n---\n")[0] and "Not SentEval's" not in card.text
    card = ModelCard(str(render_model_card(trained)))
    # the figure was drawn by this evaluation, on the sample the card names
    assert (trained / "alignment_uniformity.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"all {record['figure']['sentences']} STS-B train sentences" in card.text  # fewer than the sample size
    # the training curve, the framework versions and SentEval's other aggregations
    assert (trained / "training_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert record["training_curve"][-1]["step"] == 2 and "dev" in record["training_curve"][-1]
    assert "![training curve](training_curve.png)" in card.text
    assert f"torch {record['protocol']['versions']['torch']}" in card.text
    pairs = record["protocol"]["sts"]["tasks"]["STSBenchmark"]["pairs"]
    assert f"STSBenchmark {pairs}," in card.text and 'SentEval "all" as the headline' in card.text
    assert table_row(card.text, 'this model, SentEval "mean"')[:-1] == [
        f"{record['sts_aggregations']['mean'][task]:.2f}" for task in STS_TASKS]
    assert table_row(card.text, "learning_rate")[0] == f"`{arguments['training_args']['learning_rate']}`"
    assert table_row(card.text, "max_steps")[0] == "`2`" and table_row(card.text, "pooler_type")[0] == "`cls`"
    assert card.data.library_name == "sentence-transformers" and "simcse" in card.data.tags and card.data.license
    assert table_row(card.text, "base model alone (`cls_before_pooler`)") == [f"{record['base_sts'][task]:.2f}"
                                                                for task in (*STS_TASKS, "avg")]
    assert "@inproceedings{gao2021simcse" in card.text
    assert table_row(card.text, "SimCSE-BERT-base, unsup. (paper)")[-1] == "76.25"
    assert "training_args.bin" not in card.text  # arguments come from the JSON twin
    # the run wrote its card in a staging folder: the names are the output folder's
    meta = json.loads((trained / "mteb_model_meta.json").read_text())
    assert card.data.model_name == "tiny-simcse" and meta["name"] == "csekit/tiny-simcse" and meta["reference"] is None


def python_snippets(card_text: str) -> list:
    return [block.split("```", 1)[0] for block in card_text.split("```python\n")[1:]]


@pytest.mark.parametrize("name", ['x"); import os; os.system("echo owned") #', "it's $(echo owned) & more"])
def test_a_crafted_folder_name_is_one_string_in_every_snippet_and_command(name, trained, tmp_path):
    """The card's Python snippets and shell commands name the model as one string literal or shell word, whatever
    its folder (or repository) name holds: a name never adds code to what a reader runs."""
    import ast
    import shlex

    folder = tmp_path / name
    shutil.copytree(trained, folder, ignore=shutil.ignore_patterns("checkpoint-*"))
    text = str(render_model_card(folder))
    expected = f"<your-namespace>/{name}"
    for snippet in python_snippets(text):
        calls = [node for node in ast.walk(ast.parse(snippet)) if isinstance(node, ast.Call)]
        loads = [call for call in calls if getattr(call.func, "attr", getattr(call.func, "id", None)) in (
            "SentenceTransformer", "from_pretrained")]
        assert loads and all(isinstance(call.args[0], ast.Constant) and call.args[0].value == expected
                             for call in loads)
        assert not any(getattr(call.func, "attr", None) == "system" for call in calls)
    commands = [line for block in text.split("```bash\n")[1:] for line in block.split("```")[0].splitlines()]
    assert commands and all(shlex.split(line, comments=True)[2] == expected for line in commands)


def test_card_is_a_sentence_transformers_card_whose_snippets_run_as_printed(trained, tmp_path):
    """A folder sentence-transformers loads: its library, widget and tags, its snippet first; every snippet runs as
    printed (the repository id here is the folder) where csekit is absent, with no prompt and no warning."""
    from huggingface_hub import metadata_load

    folder = tmp_path / "tiny-simcse"
    shutil.copytree(trained, folder)
    write_model_card(folder, repo_id=str(folder), figure="never")
    metadata = metadata_load(folder / "README.md")
    assert (metadata["library_name"], metadata["pipeline_tag"]) == ("sentence-transformers", "sentence-similarity")
    assert {"sentence-transformers", "sentence-similarity", "feature-extraction"} <= set(metadata["tags"])
    # mteb's description of the model beside the card, as mteb's own ModelMeta reads it
    mteb_meta = pytest.importorskip("mteb.models.model_meta")
    meta = mteb_meta.ModelMeta.model_validate(json.loads((folder / "mteb_model_meta.json").read_text()))
    assert (meta.name, meta.embed_dim, meta.max_tokens, meta.similarity_fn_name) == (str(folder), 32, 512, "cosine")
    assert meta.n_parameters == sum(p.numel() for p in SimCSEModel.from_pretrained(trained).parameters())
    assert meta.revision is None and meta.open_weights and "Sentence Transformers" in meta.framework
    snippets = python_snippets((folder / "README.md").read_text())
    assert len(snippets) == 2 and "SentenceTransformer(" in snippets[0] and "AutoModel" in snippets[1]
    expected = SimCSEModel.from_pretrained(trained).encode(["A man is playing a guitar."])
    for snippet in snippets:
        result = run_isolated_python(snippet + "print(embeddings[0, :4].tolist())\n", tmp_path, timeout=120)
        assert result.returncode == 0, result.stderr[-2000:]
        printed = np.array(json.loads(result.stdout.strip().splitlines()[-1]))
        norm = 1.0 if "normalize=True" not in snippet else np.linalg.norm(expected[0])
        np.testing.assert_allclose(printed, expected[0, :4] / norm, atol=1e-5)
        noise = [line for line in result.stderr.splitlines() if line.strip() and "Loading weights" not in line]
        assert noise == [], noise  # no trust prompt ("[y/N]"), no warning


def test_a_folder_sentence_transformers_cannot_load_has_a_transformers_card_that_says_why(tmp_path, trained,
                                                                                           tokenizer):
    from huggingface_hub import metadata_load

    model = SimCSEModel(SimCSEConfig(encoder_config=tiny_bert_config(max_position_embeddings=512).to_dict(),
                                     pooler_type="avg_first_last"))
    model.tokenizer = tokenizer
    model.save_pretrained(tmp_path / "model")
    shutil.copy(trained / "eval_results.json", tmp_path / "model")
    write_model_card(tmp_path / "model", repo_id="org/model", figure="never")
    metadata = metadata_load(tmp_path / "model" / "README.md")
    assert (metadata["library_name"], metadata["pipeline_tag"]) == ("transformers", "feature-extraction")
    assert "sentence-transformers" not in metadata["tags"]
    text = (tmp_path / "model" / "README.md").read_text()
    assert '`SentenceTransformer("org/model")` does not load this model: its inference is not a backbone' in text
    assert [("AutoModel" in snippet) for snippet in python_snippets(text)] == [True]


def test_training_curve_has_no_empty_panel(tmp_path):
    from csekit.publishing.figure import training_curve_figure

    drawn = {}
    with mock.patch("csekit.publishing.figure.write_png", lambda figure, path: drawn.update(figure=figure)):
        training_curve_figure([{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.0}], tmp_path / "curve.png")
        assert [axis.get_title() for axis in drawn["figure"].axes] == ["training loss"]
        training_curve_figure([{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.0, "dev": 50.0}], tmp_path / "c.png")
        assert [axis.get_title() for axis in drawn["figure"].axes] == ["training loss", "dev STS (Spearman x100)"]


def test_mteb_results_are_the_model_index_under_mtebs_dataset_ids(trained, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(trained, folder, ignore=shutil.ignore_patterns("checkpoint-*"))
    record = json.loads((folder / "eval_results.json").read_text())
    record["mteb"] = {"STSBenchmark": 12.34, "SICK-R": 56.78}
    record["contaminated"] = {"SICKRelatedness": 1}  # training pairs shared sentences with SICK: not published
    record["protocol"]["mteb"] = {"version": "2.26.24", "tasks": {
        "STSBenchmark": {"dataset": "mteb/stsbenchmark-sts", "revision": "b0fddb56ed78048fa8b90373c8a3cfc37b684831",
                         "splits": ["test"], "main_score": "cosine_spearman"},
        "SICK-R": {"dataset": "mteb/sickr-sts", "revision": "20a6d6f312dd54037fe07a32d58e5e168867909d",
                   "splits": ["test"], "main_score": "cosine_spearman"}}}
    (folder / "eval_results.json").write_text(json.dumps(record))
    card = ModelCard(str(render_model_card(folder)))
    [result] = [result for result in card.data.eval_results if result.dataset_type.startswith("mteb/")]
    assert "SentEval/SICKRelatedness" not in {result.dataset_type for result in card.data.eval_results}
    assert (result.dataset_type, result.dataset_revision, result.metric_value) == (
        "mteb/stsbenchmark-sts", "b0fddb56ed78048fa8b90373c8a3cfc37b684831", 12.34)
    assert table_row(card.text, "STSBenchmark") == ["12.34"]


def test_every_model_class_has_a_family_card_and_exact_st_export(tmp_path, trained, tokenizer):
    record = (trained / "eval_results.json").read_text()
    for model_class in MODEL_CLASSES:
        config_class = model_class.config_class
        assert (MODEL_CARDS_DIR / card_template(config_class.model_type)).is_file()
        config = config_class(encoder_config=tiny_bert_config(max_position_embeddings=512).to_dict(),
                              pooler_type="avg_first_last", **TINY_OVERRIDES.get(config_class.model_type, {}))
        folder = tmp_path / config_class.model_type
        model = model_class(config).eval()
        model.tokenizer = tokenizer
        model.save_pretrained(folder)
        (folder / "eval_results.json").write_text(record)
        text = str(render_model_card(folder))
        assert f"({config_class.model_type}, class\n`{model_class.__name__}`)" in text
        assert "(paper) |" in text and "```bibtex\n@" in text
        result = export_sentence_transformers(folder, tmp_path / f"st-{config_class.model_type}")
        assert result["layout"] == "remote-code" and result["max_abs_difference"] <= 1e-5
        model.tokenizer = tokenizer
        exported = SentenceTransformer(result["out_dir"], trust_remote_code=True, device="cpu")
        np.testing.assert_allclose(exported.encode(SENTENCES), model.encode(SENTENCES), atol=1e-5)


@pytest.mark.parametrize("pooler", ["cls", "avg"])
def test_simcse_plain_export_loads_without_custom_code(tmp_path, tokenizer, pooler):
    model = SimCSEModel(SimCSEConfig(encoder_config=tiny_bert_config(max_position_embeddings=512).to_dict(),
                                     pooler_type=pooler)).eval()
    model.tokenizer = tokenizer
    model.save_pretrained(tmp_path / "model")
    assert csekit(["export-st", str(tmp_path / "model"), str(tmp_path / "st")]) == 0
    assert json.loads((tmp_path / "st" / "modules.json").read_text())[0]["type"].startswith("sentence_transformers.")
    exported = SentenceTransformer(str(tmp_path / "st"), device="cpu")  # no trust_remote_code
    np.testing.assert_allclose(exported.encode(SENTENCES), model.encode(SENTENCES), atol=1e-5)


def test_remote_code_export_loads_where_csekit_is_absent(tmp_path, trained):
    export_sentence_transformers(trained, tmp_path / "st", layout="remote-code")
    np.save(tmp_path / "expected.npy", SimCSEModel.from_pretrained(trained).encode(SENTENCES))
    code = (
        "import numpy as np\nfrom sentence_transformers import SentenceTransformer\n"
        f"model = SentenceTransformer({str(tmp_path / 'st')!r}, trust_remote_code=True, device='cpu')\n"
        f"got = model.encode({SENTENCES!r})\n"
        f"assert np.abs(got - np.load({str(tmp_path / 'expected.npy')!r})).max() <= 1e-5\nprint('ok')\n"
    )
    result = run_isolated_python(code, tmp_path)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-2000:]
    # the export's card is a sentence-transformers card, and its usage snippet runs as written
    card = (tmp_path / "st" / "README.md").read_text()
    assert "\nlibrary_name: sentence-transformers\n" in card.split("\n---\n")[0]
    snippet = card.split("```python\n", 1)[1].split("```", 1)[0]
    assert 'SentenceTransformer("st", trust_remote_code=True)' in snippet
    result = run_isolated_python(snippet + "print(embeddings.shape)\n", tmp_path)
    assert result.returncode == 0 and result.stdout.strip().endswith("(2, 32)"), result.stderr[-2000:]


def test_push_uploads_exactly_the_loadable_pickle_free_set(tmp_path, trained, monkeypatch):
    # the training output is the publishable folder: no pickle, no checkpoint, the card written by the run
    every_file = sorted(str(p.relative_to(trained)) for p in trained.rglob("*") if p.is_file())
    assert every_file == files_to_push(trained)
    # tests/run.sh runs offline; the upload itself is mocked, so let push past its offline guard
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    api = mock.MagicMock()
    api.upload_folder.return_value = mock.Mock(oid="0123abcd")
    commit, files = push_to_hub(trained, "someone/tiny-simcse", private=True, api=api)
    meta = json.loads((trained / "mteb_model_meta.json").read_text())  # the revision the Hub now serves
    assert (meta["name"], meta["revision"]) == ("someone/tiny-simcse", "0123abcd")
    assert files == sorted([
        "README.md", "adapters.py", "alignment_uniformity.png", "bidirectional.py", "config.json",
        "configuration_encoder.py",
        "configuration_simcse.py", "decoder_tokenizer.py",
        "encoding.py", "errors.py", "eval_results.json", "folder_commit.py", "model-head.safetensors",
        "model.safetensors.index.json", "mteb_model_meta.json",
        "modeling_encoder.py", "modeling_simcse.py", "packing.py", "pooler_types.py", "pooling.py", "prompts.py",
        "sentence_transformers_layout.py",
        "tokenizer.json", "tokenizer_config.json", "training_args.json", "training_curve.png",
        # the sentence-transformers layout; encoder/model.safetensors is also the csekit model's backbone shard
        "modules.json", "config_sentence_transformers.json", "1_Pooling/config.json", "encoder/config.json",
        "encoder/model.safetensors", "encoder/sentence_bert_config.json", "encoder/tokenizer.json",
        "encoder/tokenizer_config.json",
    ])
    api.create_repo.assert_called_once_with("someone/tiny-simcse", repo_type="model", private=True, exist_ok=True)
    upload = api.upload_folder.call_args.kwargs
    assert upload["repo_id"] == "someone/tiny-simcse" and upload["allow_patterns"] == files
    assert 'AutoModel.from_pretrained("someone/tiny-simcse"' in (trained / "README.md").read_text()
    # what upload_folder would send, after its own filtering, loads with transformers alone and never unpickles
    from huggingface_hub.utils import filter_repo_objects

    every_file = [str(p.relative_to(trained)) for p in trained.rglob("*") if p.is_file()]
    uploaded = sorted(filter_repo_objects(every_file, allow_patterns=upload["allow_patterns"]))
    assert uploaded == files
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in uploaded:
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(trained / name, repo / name)
    np.save(tmp_path / "expected.npy", SimCSEModel.from_pretrained(trained).encode(SENTENCES))
    code = (
        "import numpy as np, torch\nfrom transformers import AutoModel\n"
        "torch.load = None  # any unpickling attempt fails loudly\n"
        f"model = AutoModel.from_pretrained({str(repo)!r}, trust_remote_code=True)\n"
        f"got = model.encode({SENTENCES!r})\n"
        f"assert np.abs(got - np.load({str(tmp_path / 'expected.npy')!r})).max() <= 1e-6\n"
        "from sentence_transformers import SentenceTransformer\n"  # and with sentence-transformers, no remote code
        f"got = SentenceTransformer({str(repo)!r}, device='cpu').encode({SENTENCES!r})\n"
        f"assert np.abs(got - np.load({str(tmp_path / 'expected.npy')!r})).max() <= 1e-5\nprint('ok')\n"
    )
    result = run_isolated_python(code, tmp_path)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-2000:]


def test_cli_card_and_dry_run(trained, capsys):
    assert csekit(["card", str(trained), "--figure", "never", "--repo-id", "org/name"]) == 0
    assert 'AutoModel.from_pretrained("org/name"' in (trained / "README.md").read_text()
    capsys.readouterr()
    assert csekit(["push", str(trained), "org/name", "--dry-run", "--private"]) == 0
    plan = capsys.readouterr().out.splitlines()
    files = files_to_push(trained)
    assert plan[0].startswith(f"would upload {len(files)} files (") and plan[0].endswith(
        ") to https://huggingface.co/org/name (private; created if it does not exist):")
    assert [line.split()[0] for line in plan[1:1 + len(files)]] == files
    assert plan[1 + len(files):3 + len(files)] == ["the real push also:",
                                                   "  re-renders README.md with org/name in its loading snippets"]
    hidden = plan[3 + len(files)]  # the run's backbone, data and output folders: absolute paths where it ran
    assert hidden.startswith("  shows ") and f"{trained} -> {trained.name}" in hidden
    assert plan[-1] == "  writes the pushed commit into the local mteb_model_meta.json as its revision"
    assert not list(trained.glob(".csekit-upload-*"))  # nothing written


def test_bad_inputs_fail_with_one_clear_error(tmp_path, trained, capsys):
    incomplete = tmp_path / "incomplete"
    shutil.copytree(trained, incomplete, ignore=shutil.ignore_patterns("checkpoint-*"))
    (incomplete / "README.md").unlink()
    with pytest.raises(DataError, match="no model card"):
        files_to_push(incomplete)
    config = json.loads((incomplete / "config.json").read_text())
    del config["auto_map"]
    (incomplete / "config.json").write_text(json.dumps(config))
    with pytest.raises(DataError, match="auto_map"):
        files_to_push(incomplete)
    with pytest.raises(DataError, match="namespace/name"):
        push_to_hub(trained, "no-namespace", api=mock.MagicMock())
    (incomplete / "eval_results.json").write_text(json.dumps({"sts": {"STS12": 1.0}}))
    with pytest.raises(DataError, match="lacks STS13"):
        render_model_card(incomplete)
    with pytest.raises(DataError, match="already exists"):
        export_sentence_transformers(trained, incomplete)
    with pytest.raises(DataError, match="would overwrite the input"):
        export_sentence_transformers(trained, trained, overwrite=True)
    first_last = tmp_path / "first_last"
    first_last_model = SimCSEModel(SimCSEConfig(encoder_config=tiny_bert_config(max_position_embeddings=512).to_dict(),
                                                pooler_type="avg_first_last"))
    first_last_model.tokenizer = AutoTokenizer.from_pretrained(trained)
    first_last_model.save_pretrained(first_last)
    assert csekit(["export-st", str(first_last), str(tmp_path / "st"), "--layout", "plain"]) == 2
    assert "no plain sentence-transformers equivalent" in capsys.readouterr().err
    assert not (tmp_path / "st").exists()
    assert csekit(["card", str(tmp_path / "missing")]) == 2
    assert "not a model folder" in capsys.readouterr().err


def test_comparison_section_is_replaced_and_other_sections_kept(tmp_path):
    spec = importlib.util.spec_from_file_location("compare", REPO_ROOT / "benchmarks" / "compare.py")
    compare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compare)
    results = tmp_path / "RESULTS.md"
    results.write_text("# Results\n\n## Speed\n\nfast\n\n## Comparison\n\nold table\n\n## Quality\n\ngood\n")
    compare.replace_section(results, "## Comparison\n\nnew table\n")
    text = results.read_text()
    assert "old table" not in text and text.count("## Comparison") == 1 and text.endswith("new table\n")
    assert "## Speed\n\nfast" in text and "## Quality\n\ngood" in text
    seeds = [dict.fromkeys([task for task, _ in compare.STS_COLUMNS] + ["avg"], value) for value in (2.0, 4.0)]
    row = compare.table_row("X", [42, 43], seeds, {"geometry": {"alignment": 0.25, "uniformity": -2.5}}, [10.0, 20.0])
    assert row == "| X | " + "3.00 | " * 7 + "3.00 ± 1.41 | – | – | 0.250 | -2.500 | 15 | 42 43 |"


def test_push_refuses_in_offline_mode_before_touching_the_hub(trained, monkeypatch):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    api = mock.MagicMock()
    with pytest.raises(DataError, match="HF_HUB_OFFLINE is set"):
        push_to_hub(trained, "someone/tiny-simcse", api=api)
    api.create_repo.assert_not_called()
    api.upload_folder.assert_not_called()


def test_trainer_push_to_hub_uploads_the_csekit_set_and_trainer_side_pushes_are_refused(trained, monkeypatch):
    from transformers import TrainingArguments

    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    api = mock.MagicMock()
    monkeypatch.setattr("csekit.trainers.trainer.HfApi", lambda token=None: api)
    args = TrainingArguments(output_dir=str(trained), hub_model_id="someone/tiny-simcse", report_to="none",
                             use_cpu=True)
    trainer = SimCSETrainer(model=SimCSEModel.from_pretrained(trained), args=args)
    trainer.push_to_hub(private=True)
    upload = api.upload_folder.call_args.kwargs
    assert upload["allow_patterns"] == files_to_push(trained) and "training_args.bin" not in upload["allow_patterns"]
    api.create_repo.assert_called_once_with("someone/tiny-simcse", repo_type="model", private=True, exist_ok=True)
    # Trainer's own push_to_hub=True would upload checkpoints and training_args.bin mid-training: refused up front
    with pytest.raises(ValueError, match="publish once, after the test evaluation"):
        SimCSETrainer(model=SimCSEModel.from_pretrained(trained),
                      args=TrainingArguments(output_dir=str(trained), push_to_hub=True, report_to="none"))
    # the recipes check --push_to_hub's requirements before any training
    argv = ["--model_name_or_path", str(trained), "--output_dir", str(trained.parent / "never"), "--push_to_hub"]
    with pytest.raises(DataError, match="needs --hub_model_id"):
        run_recipe(RECIPE, *RECIPE.parse(argv))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    with pytest.raises(DataError, match="HF_HUB_OFFLINE is set"):
        run_recipe(RECIPE, *RECIPE.parse(argv + ["--hub_model_id", "someone/x"]))
    assert not (trained.parent / "never").exists()


def test_figure_sample_keeps_whole_positive_pairs_and_caps_the_sentences():
    from csekit.publishing.figure import sample_rows

    sentences = [f"s{i}" for i in range(5000)]
    positives = np.arange(4000).reshape(-1, 2)  # 2,000 positive pairs over the first 4,000 sentences
    chosen, rows = sample_rows(sentences, positives, 1000, seed=0)
    assert len(chosen) == 1000 == len(set(chosen.tolist())) and len(rows) == 250
    original = {tuple(pair) for pair in positives.tolist()}
    assert all((chosen[a], chosen[b]) in original for a, b in rows.tolist())  # re-indexed to the sample
    everything, same = sample_rows(sentences[:600], positives[:100], 1000, seed=0)
    assert len(everything) == 600 and np.array_equal(same, positives[:100])


@pytest.mark.parametrize("path", [".", "../..", "encoder/..", "/tmp", "./encoder"])
def test_a_modules_path_that_is_not_a_sub_folder_is_refused_before_any_upload(tmp_path, trained, path):
    folder = tmp_path / "folder"
    shutil.copytree(trained, folder)
    (folder / "training_args.bin").write_bytes(b"pickle")
    modules = json.loads((folder / "modules.json").read_text())
    modules[0]["path"] = path
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(DataError, match="not a sub-folder") as refused:
        files_to_push(folder)
    assert "\n" not in str(refused.value)


def test_every_listed_file_is_a_regular_file_inside_the_folder_and_never_a_pickle(tmp_path, trained):
    folder = tmp_path / "folder"
    shutil.copytree(trained, folder)
    pooling, encoder = folder / "1_Pooling", folder / "encoder"
    # a pickle and a checkpoint's files inside a module folder are filtered out, whatever listed them
    (encoder / "optimizer.pt").write_bytes(b"pickle")
    (encoder / "weights.bin").write_bytes(b"pickle")
    (encoder / "checkpoint-4").mkdir()
    (encoder / "checkpoint-4" / "trainer_state.json").write_text("{}")
    files = files_to_push(folder)
    assert not [name for name in files if name.endswith((".pt", ".bin")) or "checkpoint-" in name]
    assert files == files_to_push(trained)
    # a link out of the folder is refused, not followed
    (tmp_path / "secret.txt").write_text("token")
    (pooling / "notes.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(DataError, match="not a file inside the model folder"):
        files_to_push(folder)
    (pooling / "notes.txt").unlink()
    (folder / "2_Linked").symlink_to(tmp_path, target_is_directory=True)
    modules = json.loads((folder / "modules.json").read_text())
    (folder / "modules.json").write_text(json.dumps(modules + [{"idx": 9, "name": "9", "path": "2_Linked",
                                                                 "type": "sentence_transformers.models.Dense"}]))
    with pytest.raises(DataError, match="leads outside"):
        files_to_push(folder)


def test_the_card_carries_every_field_sentence_transformers_own_trainer_writes(trained, tmp_path):
    """Field by field against the card sentence-transformers 6's trainer generates for a run on the same folder:
    every metadata field it writes is in csekit's card (its tags less the trainer's own bookkeeping ones), with the
    same library, pipeline and widget shape; csekit adds language, the model-index and, for a Hub backbone,
    base_model. ``config_sentence_transformers.json`` has the keys sentence-transformers writes, ``__version__``
    included. Both are read back with huggingface_hub's metadata helpers."""
    from datasets import Dataset
    from huggingface_hub import metadata_load
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments, losses

    model = SentenceTransformer(str(trained), device="cpu")
    pairs = Dataset.from_dict({"anchor": ["A man plays a guitar.", "A dog runs.", "Kids play.", "It rains."],
                               "positive": ["Someone plays guitar.", "A dog is running.", "Children play.",
                                            "Rain falls."]}).repeat(4)  # enough rows for its widget
    arguments = SentenceTransformerTrainingArguments(output_dir=str(tmp_path / "st-run"), max_steps=1,
                                                     per_device_train_batch_size=4, report_to=[], use_cpu=True)
    SentenceTransformerTrainer(model=model, args=arguments, train_dataset=pairs,
                               loss=losses.MultipleNegativesRankingLoss(model)).train()
    model.save_pretrained(str(tmp_path / "st"))
    senteval = scored_on_senteval(trained, tmp_path / "senteval")  # (a model-index needs SentEval's own files)
    write_model_card(senteval, figure="never")
    theirs, ours = metadata_load(tmp_path / "st" / "README.md"), metadata_load(senteval / "README.md")
    assert set(theirs) <= set(ours), set(theirs) - set(ours)
    assert (ours["library_name"], ours["pipeline_tag"]) == (theirs["library_name"], theirs["pipeline_tag"])
    trainer_tags = {tag for tag in theirs["tags"] if tag == "generated_from_trainer" or ":" in tag}
    assert set(theirs["tags"]) - trainer_tags <= set(ours["tags"])
    assert all(set(example) == {"source_sentence", "sentences"} and len(example["sentences"]) == 3
               for example in ours["widget"] + theirs["widget"])
    assert ours["language"] == ["en"] and ours["model-index"][0]["results"]
    theirs_config = json.loads((tmp_path / "st" / "config_sentence_transformers.json").read_text())
    ours_config = json.loads((trained / "config_sentence_transformers.json").read_text())
    assert set(ours_config) == set(theirs_config) and set(ours_config["__version__"]) == set(
        theirs_config["__version__"])


def test_base_model_is_named_whenever_the_backbone_is_a_hub_model(tmp_path, monkeypatch):
    from csekit.loading import embedded_minilm_path, hub_id_of

    snapshot = tmp_path / "hub" / "models--org--encoder" / "snapshots" / ("0123456789" * 4)
    snapshot.mkdir(parents=True)
    assert hub_id_of(str(snapshot)) == "org/encoder"
    assert hub_id_of("org/encoder") == "org/encoder" and hub_id_of("all-MiniLM-L6-v2") == (
        "sentence-transformers/all-MiniLM-L6-v2")
    assert hub_id_of(str(tmp_path)) is None and hub_id_of("./org/encoder") is None
    if embedded_minilm_path() is not None:  # the embedded copy, given by its folder
        assert hub_id_of(str(embedded_minilm_path())) == "sentence-transformers/all-MiniLM-L6-v2"


def test_every_string_from_a_record_or_a_name_reaches_the_card_as_text(trained, tmp_path):
    """Task names, a cached pooler name, an argument's value: whatever a record holds is shown as literal text (no
    HTML, link, emphasis or extra table cell), in code spans that a backtick cannot close. The oracle is a CommonMark
    renderer with GitHub's tables (markdown-it-py)."""
    markdown_it = pytest.importorskip("markdown_it")

    folder = tmp_path / "card"
    shutil.copytree(trained, folder)
    record = json.loads((folder / "eval_results.json").read_text())
    record["base_pooler"] = "evil` <img src=x> |"
    record["mteb"] = {"STS|<b>x</b>[link](http://e.x)*": 50.0}
    (folder / "eval_results.json").write_text(json.dumps(record))
    arguments = json.loads((folder / "training_args.json").read_text())
    arguments["data_args"]["note"] = "a | b `c` <script>x</script> _em_"
    (folder / "training_args.json").write_text(json.dumps(arguments))
    html = markdown_it.MarkdownIt("commonmark").enable("table").render(render_model_card(folder).text)
    assert not [tag for tag in ("<img src=x", "<b>", "<script>", "<a href", "<em>") if tag in html]
    rows = [row for row in html.split("<tr>") if "STS|" in row or "note" in row or "base model alone" in row]
    assert [row.count("<td") for row in rows] == [3, 9, 2]  # the cells each table has
    assert "<code>evil` &lt;img src=x&gt; |</code>" in rows[1]
    assert "STS|&lt;b&gt;x&lt;/b&gt;[link](http://e.x)*" in rows[2]

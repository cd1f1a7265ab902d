"""``csekit mine`` (``csekit/mining``): hard negatives as sentence-transformers mines them.

Oracle: ``sentence_transformers.util.mine_hard_negatives`` (``output_format`` ``"triplet"`` and ``"n-tuple"``) on
the same sentence-transformers folder (all-MiniLM-L6-v2, real weights) and the same pairs: the same rows in the same
order, for each filter and sampling. csekit reads the folder through sentence-transformers too, so both rank the same
vectors."""

import csv
import json
import random
import sys

import pytest
from datasets import Dataset

from csekit import cli
from csekit.errors import DataError
from csekit.evaluation.encoders import load_embedder
from csekit.mining import hard_negatives
from csekit.mining.hard_negatives import mine_hard_negatives

SETTINGS = {
    "one, the defaults otherwise": {"num_negatives": 1},
    "three, margin, skip the first": {"num_negatives": 3, "relative_margin": 0.5, "range_min": 1, "range_max": 20},
    "absolute margin and max score": {"num_negatives": 2, "absolute_margin": 0.3, "max_score": 0.6},
    "random": {"num_negatives": 2, "sampling": "random", "range_max": 12},
    "with a corpus": {"num_negatives": 2, "corpus": True},
    "some anchors short of negatives": {"num_negatives": 3, "absolute_margin": 0.6, "range_max": 8},
    "query and corpus prompts": {"num_negatives": 2, "query_prompt": "query: ", "corpus_prompt": "passage: "},
}
PROMPTS = {"query_prompt": "query: ", "corpus_prompt": "passage: "}


@pytest.fixture(scope="module")
def pairs(corpus):
    """An anchor and a shortened copy of it (a close positive); one anchor twice, with two positives."""
    lines = [line for line in corpus.read_text().splitlines() if len(line.split()) > 6][:30]
    anchors, positives = lines, [" ".join(line.split()[:-2]) for line in lines]
    return anchors + [anchors[0]], positives + [" ".join(anchors[0].split()[1:])]


@pytest.fixture(scope="module")
def embed(minilm_path):
    return load_embedder(str(minilm_path), device="cpu")[0]


def sentence_transformers_rows(minilm_path, pairs, settings, extra, output_format: str) -> list:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.util import mine_hard_negatives as reference

    options = {key.replace("sampling", "sampling_strategy"): value for key, value in settings.items()
               if key not in ("corpus", "seed")}
    random.seed(settings.get("seed", 42))  # (its random sampling draws from the global generator)
    mined = reference(Dataset.from_dict({"sent0": pairs[0], "sent1": pairs[1]}),
                      SentenceTransformer(str(minilm_path), device="cpu"), corpus=extra, verbose=False,
                      output_format=output_format, **options)
    negatives = ["negative"] if output_format == "triplet" else [f"negative_{i}" for i in
                                                                  range(1, settings["num_negatives"] + 1)]
    assert mined.column_names == ["sent0", "sent1", *negatives]
    return list(zip(*(mined[name] for name in mined.column_names)))


@pytest.mark.parametrize("output_format", ["triplet", "n-tuple"])
@pytest.mark.parametrize("name", list(SETTINGS))
def test_the_negatives_are_sentence_transformers_own(name, output_format, pairs, embed, minilm_path, corpus):
    """Row for row: a triplet per negative, or (n-tuple) a row per pair with its negatives best first, none short."""
    settings = SETTINGS[name]
    extra = corpus.read_text().splitlines()[40:70] if settings.get("corpus") else None
    options = {key: value for key, value in settings.items() if key != "corpus"}
    columns, summary = mine_hard_negatives(*pairs, embed, corpus=extra, progress=False, output_format=output_format,
                                           **options)
    ours = list(zip(*columns.values()))
    assert ours == sentence_transformers_rows(minilm_path, pairs, settings, extra, output_format)
    assert len(ours) >= (len(pairs[0]) if output_format == "triplet" else len(pairs[0]) - summary["anchors_short"])
    for name in ("relative_margin", "absolute_margin", "max_score"):  # each filter given drops candidates here
        assert name not in options or summary["dropped"][name] > 0, (name, summary)
    assert all(row[1] not in row[2:] and len(row) == len(columns) for row in ours)
    assert len({len(texts) for texts in columns.values()}) == 1
    assert (summary["anchors_short"] > 0) == (settings is SETTINGS["some anchors short of negatives"]), summary
    if "query_prompt" in settings:  # the prompts change what is mined here, so a prompt dropped or swapped shows
        unprompted = {key: value for key, value in options.items() if key not in PROMPTS}
        plain, _ = mine_hard_negatives(*pairs, embed, progress=False, output_format=output_format, **unprompted)
        assert plain != columns


def test_chunks_of_anchors_rank_as_the_whole_matrix(pairs, embed, monkeypatch):
    whole, _ = mine_hard_negatives(*pairs, embed, num_negatives=3, progress=False)
    limit = 7 * len(set(pairs[1]))  # 7 anchors a chunk
    monkeypatch.setattr(hard_negatives, "CHUNK_ELEMENTS", limit)
    sizes, cosine = [], hard_negatives.cosine
    monkeypatch.setattr(hard_negatives, "cosine", lambda a, b: sizes.append(len(a) * len(b)) or cosine(a, b))
    assert mine_hard_negatives(*pairs, embed, num_negatives=3, progress=False)[0] == whole
    assert len(sizes) == 5 and max(sizes) <= limit  # 30 anchors: never the whole similarity matrix at once


@pytest.mark.parametrize("output_format, header", [("triplet", ["hard_neg"]),
                                                   ("n-tuple", ["hard_neg_1", "hard_neg_2"])])
def test_the_command_line_mines_rows_that_supervised_simcse_trains_on(output_format, header, pairs, minilm_path,
                                                                      tiny_backbone, tmp_path, capsys):
    """Triplets (a row per negative), or n-tuples (``sent0,sent1,hard_neg_1,hard_neg_2``, a row per pair), which
    ``csekit train simcse`` reads as written: with n-tuples both negatives of every row join each denominator."""
    source, out = tmp_path / "pairs.csv", tmp_path / "mined.csv"
    with source.open("w", newline="") as handle:
        csv.writer(handle).writerows([("sent0", "sent1"), *zip(*pairs)])
    assert cli.main(["mine", str(minilm_path), "--pairs", str(source), "--output", str(out), "--num_negatives",
                     "2", "--relative-margin", "0.05", "--output_format", output_format, "--device", "cpu"]) == 0
    rows = list(csv.reader(out.open()))
    assert rows[0] == ["sent0", "sent1", *header]
    assert len(rows) - 1 == (2 if output_format == "triplet" else 1) * len(pairs[0])  # no anchor short here
    assert f"{output_format}s from 30 anchors" in capsys.readouterr().err
    model = tmp_path / "model"
    assert cli.main(["train", "simcse", "--model_name_or_path", str(tiny_backbone), "--train_file", str(out),
                     "--output_dir", str(model), "--per_device_train_batch_size", "8", "--max_steps", "2",
                     "--save_strategy", "no", "--eval_strategy", "no", "--load_best_model_at_end", "false",
                     "--max_seq_length", "16", "--do_test_eval", "false"]) == 0
    assert json.loads((model / "config.json").read_text())["architectures"] == ["SimCSEModel"]


def test_the_command_line_prompts_are_the_functions(pairs, minilm_path, embed, tmp_path):
    """``--query_prompt`` / ``--corpus_prompt`` reach the anchors' and the candidates' encodings as
    ``mine_hard_negatives(query_prompt=, corpus_prompt=)`` (whose rows the oracle above holds to
    sentence-transformers')."""
    source, out = tmp_path / "pairs.csv", tmp_path / "mined.csv"
    with source.open("w", newline="") as handle:
        csv.writer(handle).writerows([("sent0", "sent1"), *zip(*pairs)])
    assert cli.main(["mine", str(minilm_path), "--pairs", str(source), "--output", str(out), "--num_negatives", "2",
                     "--query_prompt", PROMPTS["query_prompt"], "--corpus-prompt", PROMPTS["corpus_prompt"],
                     "--device", "cpu"]) == 0
    columns, _ = mine_hard_negatives(*pairs, embed, num_negatives=2, progress=False, **PROMPTS)
    assert list(csv.reader(out.open())) == [list(columns), *map(list, zip(*columns.values()))]


def test_a_faiss_index_ranks_as_the_matrix_products_and_as_sentence_transformers_faiss(pairs, embed, minilm_path,
                                                                                      corpus, monkeypatch):
    """``use_faiss`` (``csekit[faiss]``, an exact ``IndexFlatIP``) gives the rows of the chunked matrix products for
    every setting here (no two candidates of an anchor tie), and sentence-transformers' own ``use_faiss`` rows."""
    for name, settings in SETTINGS.items():
        extra = corpus.read_text().splitlines()[40:70] if settings.get("corpus") else None
        options = {key: value for key, value in settings.items() if key != "corpus"}
        plain, _ = mine_hard_negatives(*pairs, embed, corpus=extra, progress=False, **options)
        with monkeypatch.context() as patch:  # the index ranks, not the matrix products
            patch.setattr(hard_negatives, "cosine", None)
            ranked, _ = mine_hard_negatives(*pairs, embed, corpus=extra, progress=False, use_faiss=True, **options)
        assert ranked == plain, name
    settings = SETTINGS["three, margin, skip the first"]
    ranked, _ = mine_hard_negatives(*pairs, embed, progress=False, use_faiss=True, **settings)
    reference = sentence_transformers_rows(minilm_path, pairs, {**settings, "use_faiss": True}, None, "triplet")
    assert list(zip(*ranked.values())) == reference


def test_use_faiss_without_faiss_is_one_line_before_any_encoding(pairs, monkeypatch):
    monkeypatch.setitem(sys.modules, "faiss", None)  # (an import of it fails, as where it is not installed)

    def embed(texts, prompt=None):
        raise AssertionError("encoded before the check")

    with pytest.raises(DataError, match=r"^--use_faiss: faiss is not installed; pip install 'csekit\[faiss\]'"):
        mine_hard_negatives(*pairs, embed, progress=False, use_faiss=True)


@pytest.mark.parametrize("flags, line", [
    (["--relative_margin", "1.5"], "--relative_margin 1.5: must be in [0, 1]"),
    (["--max_score", "2"], "--max_score 2.0: must be in [-1, 1]"),
    (["--absolute_margin", "nan"], "--absolute_margin nan: must be a finite number"),
    (["--num_negatives", "40"], "--num_negatives 40: the candidates (positives and --corpus) hold"),
    (["--range_min", "3", "--range_max", "4", "--num_negatives", "2"],
     "--num_negatives 2: only 1 rank(s) between --range_min 3 and --range_max 4"),
    (["--pairs", "sentences.txt"], "mining needs sent0,sent1 pairs"),
    (["--output", "exists.csv"], "--output exists.csv: exists; give --overwrite to replace it"),
])
def test_bad_input_is_one_line_and_writes_nothing(flags, line, pairs, minilm_path, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with open("pairs.csv", "w", newline="") as handle:
        csv.writer(handle).writerows([("sent0", "sent1"), *zip(*pairs)])
    (tmp_path / "sentences.txt").write_text("one sentence\nanother one\n")
    (tmp_path / "exists.csv").write_text("kept\n")
    before = sorted(path.name for path in tmp_path.iterdir())
    argv = ["mine", str(minilm_path), "--pairs", "pairs.csv", "--output", "out.csv", "--device", "cpu", *flags]
    assert cli.main(argv) == 2
    err = [text for text in capsys.readouterr().err.strip().splitlines() if "Batches" not in text and text]
    assert len(err) == 1 and line in err[0], err
    assert sorted(path.name for path in tmp_path.iterdir()) == before
    assert (tmp_path / "exists.csv").read_text() == "kept\n"

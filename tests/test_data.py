"""Bad input: one clear line naming the file (and line), and nothing half-written."""

import subprocess
import sys

import pytest

from conftest import REPO_ROOT
from csekit.data import read_sentences, resolve_data_dir
from csekit.errors import DataError
from csekit.trainers.collators import ContrastiveCollator
from csekit.trainers.data import load_training_dataset, read_pairs


def write(path, content: bytes):
    path.write_bytes(content)
    return path


def test_blank_lines_are_skipped_and_counted(tmp_path, caplog):
    path = write(tmp_path / "c.txt", b"first\n\n  \nsecond\r\n")
    assert read_sentences(path) == ["first", "second"]
    assert "skipped 2 blank line(s)" in caplog.text


@pytest.mark.parametrize(
    "content, message",
    [(b"", "no sentences"), (b"\n \n", "no sentences"), (b"ok\nbad \xff byte\n", r"c\.txt:2: not valid UTF-8")],
)
def test_bad_sentence_files(tmp_path, content, message):
    with pytest.raises(DataError, match=message):
        read_sentences(write(tmp_path / "c.txt", content))


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        read_sentences(tmp_path / "nope.txt")


def test_pairs_with_hard_negatives(tmp_path):
    path = write(tmp_path / "p.csv", b'sent0,sent1,hard_neg\n"a, quoted",b,c\nd,e,f\n')
    assert read_pairs(path) == {"sent0": ["a, quoted", "d"], "sent1": ["b", "e"], "hard_neg": ["c", "f"]}


def test_rows_of_k_hard_negatives_read_and_collate_in_number_order(tokenizer, tmp_path):
    """``sent0,sent1,hard_neg_1..hard_neg_11``: read in the header's order, and collated as views in number order
    (``hard_neg_10`` after ``hard_neg_9``) whatever order a dataset keeps its columns in."""
    names = ["sent0", "sent1"] + [f"hard_neg_{i}" for i in range(1, 12)]
    columns = read_pairs(write(tmp_path / "p.csv", (",".join(names) + "\n" + ",".join(f"w{i}" for i in range(13))
                                                    + "\n").encode()))
    assert list(columns) == names and columns["hard_neg_11"] == ["w12"]
    row = {name: columns[name][0] for name in sorted(columns)}  # hard_neg_1, hard_neg_10, hard_neg_11, hard_neg_2...
    batch = ContrastiveCollator(tokenizer, max_length=8)([row])
    assert [tokenizer.decode(ids, skip_special_tokens=True) for ids in batch["input_ids"][0]] == [
        f"w{i}" for i in range(13)]


@pytest.mark.parametrize(
    "content, message",
    [(b"premise,hypothesis\na,b\n", r"p\.csv:1: header"), (b"sent0,sent1\na,b\nc\n", r"p\.csv:3: 1 field"),
     (b"sent0,sent1,hard_neg_2\na,b,c\n", r"p\.csv:1: header"),
     (b"sent0,sent1,hard_neg,hard_neg_1\na,b,c,d\n", r"p\.csv:1: header"),
     (b"sent0,sent1\na,\n", r"p\.csv:2: empty sent1"), (b"sent0,sent1\n", "header only"), (b"", "empty file")],
)
def test_bad_pair_files(tmp_path, content, message):
    with pytest.raises(DataError, match=message):
        read_pairs(write(tmp_path / "p.csv", content))


def test_fewer_sentences_than_one_batch(tmp_path):
    path = write(tmp_path / "c.txt", b"one\ntwo\nthree\n")
    with pytest.raises(DataError, match="3 example.*fewer than one batch of 4"):
        load_training_dataset(path, min_examples=4)


def test_explicit_data_dir_must_exist(tmp_path):
    with pytest.raises(DataError, match="no data folder"):
        resolve_data_dir(str(tmp_path / "missing"))


def test_data_folder_search_knows_no_development_machine_folder(tmp_path, monkeypatch):
    """A user's checkout has no ../shared beside it; where one exists (our machines) csekit still does not look there:
    the test runner chooses the data folder, through CSEKIT_DATA_DIR."""
    import csekit.data

    checkout = tmp_path / "csekit"
    checkout.mkdir()
    (tmp_path / "shared" / "data" / "senteval").mkdir(parents=True)
    monkeypatch.setattr(csekit.data, "CHECKOUT_ROOT", checkout)
    monkeypatch.setattr(csekit.data, "USER_DATA_DIR", tmp_path / "home" / ".cache" / "csekit" / "data")
    monkeypatch.delenv("CSEKIT_DATA_DIR")
    with pytest.raises(DataError, match="no data folder found") as error:
        resolve_data_dir()
    assert "shared" not in str(error.value) and "csekit download senteval" in str(error.value)
    (checkout / "data").mkdir()
    assert resolve_data_dir() == checkout / "data"  # what `csekit download` fills in a checkout


def test_collator_shapes_unsupervised_and_supervised(tokenizer):
    collator = ContrastiveCollator(tokenizer, max_length=8)
    unsup = collator([{"sent0": "a b c"}, {"sent0": "d e f g h i j k l m"}])
    assert unsup["input_ids"].shape == (2, 2, 8)
    assert (unsup["input_ids"][:, 0] == unsup["input_ids"][:, 1]).all()
    sup = collator([{"sent0": "a", "sent1": "b", "hard_neg": "c"}] * 3)
    assert sup["input_ids"].shape[:2] == (3, 3)
    decoded = tokenizer.decode(sup["input_ids"][0, 2], skip_special_tokens=True)
    assert decoded == "c"


def run_recipe_cli(*args, cwd):
    return subprocess.run([sys.executable, str(REPO_ROOT / "recipes" / "simcse.py"), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    "setup, args, message",
    [
        (lambda d: write(d / "c.txt", b"ok\n\xfe\n"), ["--train_file", "c.txt"], "c.txt:2: not valid UTF-8"),
        (lambda d: None, ["--train_file", "missing.txt"], "missing.txt: no such file"),
        (lambda d: write(d / "c.txt", b"a\nb\n"), ["--train_file", "c.txt"], "fewer than one batch of 64"),
        (lambda d: write(d / "p.csv", b"x,y\n1,2\n"), ["--train_file", "p.csv"], "p.csv:1: header"),
        (lambda d: write(d / "c.txt", b"a\n" * 70), ["--train_file", "c.txt", "--pooler_type", "mean"],
         "invalid model configuration: unknown pooler_type 'mean'"),
        (lambda d: (d / "empty_model").mkdir(), ["--train_file", "c.txt", "--model_name_or_path", "empty_model"],
         "empty_model: model folder has no weights"),
    ],
)
def test_recipe_reports_bad_input_in_one_line_and_writes_nothing(tmp_path, setup, args, message, monkeypatch,
                                                                 capsys):
    from csekit.cli import main

    setup(tmp_path)
    if not (tmp_path / "c.txt").exists():
        write(tmp_path / "c.txt", b"a\n" * 70)
    monkeypatch.chdir(tmp_path)
    defaults = ["--model_name_or_path", "all-MiniLM-L6-v2", "--output_dir", "out"]
    assert main(["train", "simcse", *defaults, *args]) == 2
    last_line = capsys.readouterr().err.strip().splitlines()[-1]
    assert last_line.startswith("csekit: error: ") and message in last_line
    assert not (tmp_path / "out").exists()


@pytest.mark.core("csekit's main_guard")
def test_the_recipe_script_exits_2_with_the_one_line(tmp_path):
    """``python recipes/simcse.py`` as a process: the same line, exit status 2 (``main_guard``)."""
    write(tmp_path / "c.txt", b"ok\n\xfe\n")
    result = run_recipe_cli("--model_name_or_path", "all-MiniLM-L6-v2", "--output_dir", "out", "--train_file",
                            "c.txt", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("csekit: error: c.txt:2: not valid UTF-8")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flag", ["--data-dir", "--data_dir"])
@pytest.mark.parametrize("command", [["evaluate", "m"], ["extract"], ["card", "m"], ["download", "wiki1m"]])
def test_every_command_takes_both_spellings_of_the_data_folder_flag(command, flag):
    from csekit.cli import build_parser

    assert build_parser().parse_args([*command, flag, "some/folder"]).data_dir == "some/folder"


@pytest.mark.parametrize("flag", ["--data-dir", "--data_dir"])
def test_recipes_take_both_spellings_of_the_data_folder_flag(flag, tmp_path):
    from csekit.recipes.simcse import RECIPE

    _, data_args, _, _ = RECIPE.parse([flag, "some/folder", "--output_dir", str(tmp_path)])
    assert data_args.data_dir == "some/folder"


def test_a_trainer_takes_k_hard_negatives_a_row_only_where_its_data_columns_say_so():
    """The Python door's column check (``check_columns``, which ``train()`` runs): SimCSE takes any k, a method of
    one text column refuses them in one line naming what it takes, and numbered negatives with a gap are no shape."""
    from csekit.trainers import SimCSETrainer, WhitenedCSETrainer

    names = ["example_index", "hard_neg_2", "sent1", "hard_neg_1", "sent0"]
    assert SimCSETrainer.check_columns(names) == ("sent0", "sent1", "hard_neg_1", "hard_neg_2")
    with pytest.raises(DataError, match="columns sent0,sent1,hard_neg_1,hard_neg_2, but WhitenedCSETrainer trains on "
                                        "sent0 "):
        WhitenedCSETrainer.check_columns(names)
    with pytest.raises(DataError, match="hard_neg_1,hard_neg_3, but SimCSETrainer trains on .*hard_neg_1..k"):
        SimCSETrainer.check_columns(["sent0", "sent1", "hard_neg_1", "hard_neg_3"])

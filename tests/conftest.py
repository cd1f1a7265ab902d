"""Shared fixtures: tiny random encoders built in code, the real MiniLM tokenizer, the data folders, and subprocesses
that cannot hang the suite (free rendezvous ports, a deadline that kills the whole process group).

Data. Every test runs on a small folder that the suite builds (`tests.synthetic_data`): ``CSEKIT_DATA_DIR``
points at it for the whole session, subprocesses included, so the suite needs no data folder anywhere. The few tests
whose oracle is a published number on the real data (MTEB's score for MiniLM, the extraction paper's rows, the
papers' pair counts) take the ``real_data_dir`` fixture instead, which marks them ``real_data``: they run when the
test runner's ``CSEKIT_DATA_DIR`` names a real data folder, and skip otherwise with `REAL_DATA_REASON`.
"""

import contextlib
import gc
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertModel, RobertaConfig

from csekit.loading import embedded_minilm_path
from synthetic_data import build_data_dir

REPO_ROOT = Path(__file__).resolve().parent.parent
# the real data folder, when the test runner names one (tests/run.sh does where ../shared/data exists); read once,
# before the session points CSEKIT_DATA_DIR at the synthetic folder
REAL_DATA_DIR = Path(os.environ["CSEKIT_DATA_DIR"]) if os.environ.get("CSEKIT_DATA_DIR") else None
REAL_DATA_MARKER = "real_data"
REAL_DATA_REASON = ("needs the real evaluation data: run `csekit download senteval` and point CSEKIT_DATA_DIR at "
                    "that data folder")


def tiny_bert_config(**overrides) -> BertConfig:
    """A 2-layer, hidden-32 BERT with the real 30522-token vocabulary (so the MiniLM tokenizer fits)."""
    values = dict(
        vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=64,
    )
    values.update(overrides)
    return BertConfig(**values)


def tiny_roberta_config(**overrides) -> RobertaConfig:
    values = dict(
        vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=66, pad_token_id=0, bos_token_id=101, eos_token_id=102,
    )
    values.update(overrides)
    return RobertaConfig(**values)


@pytest.fixture(scope="session")
def tokenizer():
    return AutoTokenizer.from_pretrained(embedded_minilm_path())


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    return embedded_minilm_path()


@pytest.fixture(scope="session", autouse=True)
def data_dir(tmp_path_factory) -> Path:
    """The synthetic data folder, which ``CSEKIT_DATA_DIR`` names for the whole session."""
    folder = build_data_dir(tmp_path_factory.mktemp("synthetic") / "data")
    previous = os.environ.get("CSEKIT_DATA_DIR")
    os.environ["CSEKIT_DATA_DIR"] = str(folder)
    yield folder
    if previous is None:
        os.environ.pop("CSEKIT_DATA_DIR", None)
    else:
        os.environ["CSEKIT_DATA_DIR"] = previous


@pytest.fixture(scope="session")
def real_data_dir() -> Path:
    """The real data folder (SentEval's data, and ``clustering/`` where a test reads it); skips without one."""
    if REAL_DATA_DIR is None or not (REAL_DATA_DIR / "senteval" / "downstream").is_dir():
        pytest.skip(REAL_DATA_REASON)
    return REAL_DATA_DIR


@pytest.fixture
def bert_base_uncased(tmp_path, monkeypatch, tokenizer) -> Path:
    """``bert-base-uncased`` as ``from_pretrained`` leaves it in a Hugging Face cache (temp folder, offline): its
    config (``BertConfig``'s defaults are bert-base-uncased's) and tokenizer files, no weights. The MiniLM tokenizer
    stands in for bert-base-uncased's: the two ``vocab.txt`` files are the same bytes."""
    from fake_hub import build_hub_cache

    folder = tmp_path / "bert-base-uncased"
    BertConfig().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    build_hub_cache(tmp_path / "hf-cache", "bert-base-uncased", folder)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.delenv("CSEKIT_BERT_TOKENIZER", raising=False)
    return folder


@pytest.fixture(scope="session")
def real_bert_tokenizer() -> Path:
    """bert-base-uncased's own tokenizer folder (``CSEKIT_BERT_TOKENIZER``, which the test runner sets where the
    development machines keep one), for the tests whose oracle is a paper's number; skips without it."""
    folder = os.environ.get("CSEKIT_BERT_TOKENIZER")
    if not folder or not (Path(folder) / "config.json").is_file():
        pytest.skip("needs bert-base-uncased's tokenizer: point CSEKIT_BERT_TOKENIZER at a folder holding its "
                    "config.json and tokenizer files")
    return Path(folder)


BOUNDARY_MARKER = "boundary"
CORE_MARKER = "core"
# The tiers (tests/README.md "Tiers"). The lower-bounds pass changes the libraries csekit calls, not csekit and not
# torch (pinned alike in both passes), so it runs the tests marked `boundary`: those that reach a library's API
# (Trainer hooks, save_pretrained/from_pretrained, sentence-transformers loading, accelerate launch, datasets, the Hub,
# mteb, onnx, scikit-learn, argument parsing, the installed package). Every module is `boundary` unless it is named
# here with the reason it is not; a test of one of these modules that does reach a library carries the mark itself,
# and a test of another module that reaches none (csekit's own files, locks or doors) carries `core`, with its reason.
# A method's own module is core for the reason `lower_bounds_case` gives: its library calls go through the shared code
# that the conformance suite's cases of one Trainer-based method and of CLSR run at the lower bounds.
CORE_MODULES = {
    "test_atomic": "csekit/atomic.py's commits at every kill point",
    "test_augmentations": "the augmentations' draws from their own generator",
    "test_losses": "InfoNCE against a loop written in the test",
    "test_pooling": "poolers against direct computations on hidden states",
    "test_duplicate_negatives": "csekit's mask of duplicate in-batch candidates",
    "test_simcse": "a method's own code: SimCSE's loss on the model's views",
    "test_whitenedcse": "a method's own code: shuffled group whitening and the multi-positive losses",
    "test_esimcse": "a method's own code: ESimCSE's rules and momentum queue against its authors' code",
    "test_clsr": "a method's own code: CLSR's loop, caches, LARS and data guards",
    "test_compare": "csekit compare's protocol differences",
    "test_registry": "the registry's derived lists and a plug-in method's conformance run",
    "test_suite": "the suite's own collection, deadlines and tiers",
    "test_docs_site": "docs/check_site.py on planted pages",
    "test_docs_browser": "docs/check_browser.py on planted pages",
    "test_benchmarks": "the benchmark scripts at tiny sizes",
    "test_conformance_decoders": "the conformance checks again on a decoder: the library calls they reach are the "
                                 "BERT cases' and test_decoders.py's, which run at the lower bounds",
}


def pytest_configure(config):
    config.addinivalue_line("markers", f"{REAL_DATA_MARKER}: the oracle is a published number on the real data "
                            "(uses the real_data_dir fixture; skipped without a real data folder)")
    config.addinivalue_line("markers", f"{BOUNDARY_MARKER}: reaches a library's API, so it runs in the lower-bounds "
                            "pass too (every module but conftest.CORE_MODULES)")
    config.addinivalue_line("markers", f"{CORE_MARKER}(reason): reaches no library's API, so it runs in the newest "
                            "versions' pass only, though its module is `boundary`")


# the lower-bounds pass of .ci/run (tests/run.sh with CSEKIT_CONSTRAINTS=tests/constraints-min.txt); CSEKIT_EVERY_CASE=1
# runs every test there too
LOWER_BOUNDS = (os.environ.get("CSEKIT_CONSTRAINTS", "").endswith("constraints-min.txt")
                and os.environ.get("CSEKIT_EVERY_CASE") != "1")


COLLECTED = pytest.StashKey[int]()  # the number of tests collected, before any deselection
STARTED_AS = "csekit_started_as"  # an xdist worker's copy of its controller's started_as


def started_as(config):
    """How the command line started this pytest: ``python -m pytest`` ("module"), the ``pytest`` script ("script"),
    else ``None``. An xdist worker answers for its controller."""
    if hasattr(config, "workerinput"):
        return config.workerinput.get(STARTED_AS)
    program = Path(sys.argv[0])
    if program.name == "__main__.py" and program.parent.name == "pytest":
        return "module"
    return "script" if program.name in ("pytest", "py.test") else None


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """xdist, on the controller: each worker learns how the controller was started (`started_as`)."""
    node.workerinput[STARTED_AS] = started_as(node.config)


def method_of(item):
    """The registered method a test case is parametrized over (a ``method`` or ``name`` parameter), else ``None``."""
    from csekit.methods import METHODS, Method

    params = getattr(getattr(item, "callspec", None), "params", {})
    for key in ("method", "name"):
        value = params.get(key)
        if isinstance(value, Method):
            return value
        if isinstance(value, str) and value in METHODS:
            return METHODS[value]
    return None


def lower_bounds_case(item) -> tuple:
    """What a case can show at the lower bounds that the newest versions' pass has not: the libraries' behaviour, which
    csekit reaches through its shared code once per kind of training loop. So a test parametrized over the methods
    keeps one case per (other parameters, loop): the first method training with a transformers ``Trainer`` and the
    first with its own loop (CLSR); the other methods' cases differ only in csekit's own code, the same in both
    passes. Tests not parametrized over methods run whole."""
    from csekit.trainers.trainer import ContrastiveTrainer

    method = method_of(item)
    if method is None:
        return (item.nodeid,)
    others = tuple(sorted((key, repr(value)) for key, value in item.callspec.params.items()
                          if key not in ("method", "name")))
    return (item.module.__name__, item.originalname, others, issubclass(method.trainer_class, ContrastiveTrainer))


def runs_at_the_lower_bounds(item) -> bool:
    """A `boundary` test, or a `real_data` one: the published-number oracles run where the data is, which in CI is
    the lower-bounds pass."""
    return any(item.get_closest_marker(name) for name in (BOUNDARY_MARKER, REAL_DATA_MARKER))


def pytest_collection_modifyitems(config, items):
    """The one marker follows the one fixture, so ``-m real_data`` selects exactly the tests that read real data, and
    ``-m boundary`` the tests of every module but `CORE_MODULES`, less those marked `core`. In the lower-bounds pass,
    the tests [`runs_at_the_lower_bounds`] leaves out and the cases [`lower_bounds_case`] leaves out are deselected
    (and counted in the summary)."""
    for item in items:
        if "real_data_dir" in getattr(item, "fixturenames", ()):
            item.add_marker(REAL_DATA_MARKER)
        if item.module.__name__ not in CORE_MODULES and not item.get_closest_marker(CORE_MARKER):
            item.add_marker(BOUNDARY_MARKER)
    config.stash[COLLECTED] = len(items)
    if LOWER_BOUNDS:
        seen, kept, deselected = set(), [], []
        for item in items:
            case = lower_bounds_case(item)
            (deselected if case in seen or not runs_at_the_lower_bounds(item) else kept).append(item)
            seen.add(case)
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = kept
        os.environ["CSEKIT_EVERY_CASE"] = "1"  # a pytest a test starts runs the cases it selects, all of them


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    """What the collection imported (torch, transformers, every test module: about 0.8 M objects) lives as long as
    the process: frozen, it is left out of every later garbage collection. Each ``Trainer.train()`` ends with
    accelerate's ``gc.collect()``, which would walk all of it (0.3-0.5 s a call on the 2-core machine)."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def score_cache(tmp_path, monkeypatch) -> Path:
    """A score cache of the test's own (csekit.evaluation.score_cache), never the user's ~/.cache."""
    folder = tmp_path / "score-cache"
    monkeypatch.setenv("CSEKIT_SCORE_CACHE", str(folder))
    return folder


def run_isolated_python(code: str, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter where csekit cannot be imported.

    The repository root and the installed project are removed from ``sys.path`` first, so a model that loads there
    loads through ``trust_remote_code`` alone.
    """
    prelude = (
        "import sys\n"
        f"sys.path = [p for p in sys.path if p not in ('', {str(REPO_ROOT)!r}) and '__editable__' not in p]\n"
        # a setuptools editable install imports through a meta-path finder, not a sys.path entry
        "sys.meta_path = [f for f in sys.meta_path if '__editable__' not in getattr(f, '__module__', '')]\n"
        "import importlib.util\n"
        "assert all(importlib.util.find_spec(name) is None for name in ('csekit', 'modeling', 'trainers'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run(
        [sys.executable, "-c", prelude + code], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="session")
def saved_tiny_model(tmp_path_factory, tokenizer):
    """A tiny random SimCSE model saved with a tokenizer: a complete csekit model folder."""
    from csekit.modeling import SimCSEConfig, SimCSEModel

    folder = tmp_path_factory.mktemp("tiny_simcse")
    config = SimCSEConfig(encoder_config=tiny_bert_config(max_position_embeddings=512).to_dict(), pooler_type="avg")
    model = SimCSEModel(config)
    model.tokenizer = tokenizer
    model.save_pretrained(folder)
    return folder


# ------------------------------------------------------------------------------------------------ tiny recipe runs
def another_value(default: float) -> float:
    """A valid value other than ``default`` for a rate, weight, temperature or epsilon (all in (0, 1] or 0)."""
    return 0.5 if default == 0.0 else default * 2 + 0.1 if default * 2 + 0.1 < 1 else default / 2


def loss_settings(name: str) -> list:
    """The settings a method's oracle test runs at, as ``pytest.param`` config overrides: the defaults, then every
    float setting its loss reads (the config's float fields less the registry's ``fields_outside_the_loss``) changed
    at once, so a setting hard-coded at its default value, or read nowhere, fails the oracle."""
    from csekit.methods import get_method
    from csekit.trainers.arguments import config_fields

    method = get_method(name)
    defaults = method.config_class()
    changed = {field.name: another_value(getattr(defaults, field.name)) for field in config_fields(method.config_class)
               if isinstance(getattr(defaults, field.name), float) and field.name not in method.fields_outside_the_loss}
    return [pytest.param({}, id="defaults"), pytest.param(changed, id="changed")]


def recipe_flags(method, backbone=None) -> list:
    """The method flags that build a recipe's model on the 2-layer, hidden-32 test backbone: the registry's
    ``test_flags`` (`csekit.methods`), ``{backbone}`` there standing for ``backbone``'s folder and ``{masked_lm}`` for
    it with a seeded masked-LM head ([`masked_lm_beside`]: DiffCSE's generator)."""
    from csekit.methods import get_method

    flags = (get_method(method) if isinstance(method, str) else method).test_flags
    if "{masked_lm}" in flags and backbone is not None:
        masked_lm = masked_lm_beside(Path(backbone))
    return [str(backbone) if flag == "{backbone}" and backbone is not None else
            str(masked_lm) if flag == "{masked_lm}" and backbone is not None else flag for flag in flags]


def masked_lm_beside(backbone: Path) -> Path:
    """``backbone`` as a masked LM (its encoder + a seeded masked-LM head, its tokenizer) in a folder beside it, made
    once (atomically: test workers may ask together): DiffCSE's generator in the tests."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    folder = backbone.parent / f"{backbone.name}-masked-lm"
    if not folder.is_dir():
        staging = Path(tempfile.mkdtemp(dir=backbone.parent, prefix=".masked-lm-"))
        torch.manual_seed(0)
        AutoModelForMaskedLM.from_pretrained(backbone).save_pretrained(staging)
        AutoTokenizer.from_pretrained(backbone).save_pretrained(staging)
        try:
            staging.rename(folder)
        except OSError:  # another worker made it first
            shutil.rmtree(staging, ignore_errors=True)
    return folder


def record_output_dtypes(model, seen: dict) -> None:
    """Forward hooks adding, while ``model`` trains, the output dtype of every linear layer of its encoder to
    ``seen["encoder"]`` and of its whitening (where it has one) to ``seen["whitening"]`` (sets)."""
    def record(what):
        def hook(module, inputs, output):
            if module.training:
                seen.setdefault(what, set()).add(output.dtype)
        return hook

    for module in model.encoder.modules():
        if isinstance(module, torch.nn.Linear):
            module.register_forward_hook(record("encoder"))
    if hasattr(model, "whitening"):  # whitening computes in float32, outside autocast
        model.whitening.register_forward_hook(record("whitening"))


def fixed_masks(collator):
    """A CMLM-CSE ``collator`` whose MLM side is masked by a rule of the sentence alone instead of at random: its
    1st and 3rd word pieces become [MASK] (one in a one-word sentence). The masks then do not depend on the random
    state, on which process collates the sentence, or on what else is in its batch; and collating leaves the
    random state as it found it. Padded ``(B, T)`` and packed ``(1, N0)`` MLM sides alike."""
    special_ids = torch.tensor(collator.tokenizer.all_special_ids)

    def chosen_pieces(tokens):  # (n, T) rows of one sentence each
        special = torch.isin(tokens, special_ids)
        position = (~special).cumsum(dim=1)  # 1, 2, ... over the word pieces
        return ~special & ((position == 1) | (position == 3))

    def collate(features):
        with torch.random.fork_rng():
            batch = collator(features)
        if "sequence_lengths" in batch:  # the packed row of view 0's sentences, restored from the labels
            labels = batch["mlm_labels"]
            tokens = torch.where(labels != -100, labels, batch["mlm_input_ids"])
            lengths = batch["sequence_lengths"][:, 0].tolist()
            chosen = torch.cat([chosen_pieces(s) for s in tokens.split(lengths, dim=1)], dim=1)
        else:
            tokens = batch["input_ids"][:, 0]
            chosen = chosen_pieces(tokens)
        batch["mlm_labels"] = torch.where(chosen, tokens, torch.full_like(tokens, -100))
        batch["mlm_input_ids"] = tokens.masked_fill(chosen, collator.tokenizer.mask_token_id)
        return batch

    return collate


def load_weights(folder) -> dict:
    """Every tensor of a saved model folder: ``model.safetensors``, or the files its index names (a csekit folder
    keeps the backbone's in ``encoder/`` and the inference head's in the sentence-transformers Dense modules, whose
    one Linear is stored as ``linear.weight``/``linear.bias``)."""
    import json

    from safetensors import safe_open
    from safetensors.torch import load_file

    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        return load_file(folder / "model.safetensors")
    weights = {}
    for key, name in json.loads(index.read_text())["weight_map"].items():
        stored = f"linear.{key.rsplit('.', 1)[1]}" if Path(name).parent.name.endswith("_Dense") else key
        with safe_open(folder / name, "pt") as opened:
            weights[key] = opened.get_tensor(stored)
    return weights


def save_tiny_backbone(folder: Path, tokenizer, dropout: float = 0.1) -> Path:
    """A seeded random `tiny_bert_config` BERT + the MiniLM tokenizer: a ``--model_name_or_path`` folder."""
    torch.manual_seed(0)
    config = tiny_bert_config(max_position_embeddings=512, hidden_dropout_prob=dropout,
                              attention_probs_dropout_prob=dropout)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_backbone(tmp_path_factory, tokenizer) -> Path:
    """With BERT's dropout 0.1: training draws from the random generator (resuming must restore it)."""
    return save_tiny_backbone(tmp_path_factory.mktemp("tiny_backbone"), tokenizer)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory, data_dir) -> Path:
    """96 wiki-like sentences, one a line."""
    lines = (data_dir / "wiki" / "wiki1m_for_simcse.txt").read_text().splitlines()[:96]
    path = tmp_path_factory.mktemp("corpus") / "wiki.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


@contextlib.contextmanager
def mounted_tmpfs(folder: Path, size: str):
    """A tmpfs of ``size`` mounted at ``folder`` for the block: a real file system of its own (a second disk, a full
    one). Root only: skips the test where mounting is not allowed."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


# ------------------------------------------------------------------------------------------------ subprocesses
def free_ports(count: int = 1) -> list:
    """``count`` distinct TCP ports free right now (each bound to port 0 while all are held, then released).

    ``accelerate launch`` otherwise rendezvouses on 29500, which collides with any other launch on the host.
    """
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class BoundedProcess:
    """A subprocess in its own process group with a deadline; output goes to files (never a pipe that can fill).

    `wait` returns the ``CompletedProcess``; past the deadline it kills the whole group (a launcher and its
    workers) and fails the test with the end of the command's stderr, as it does for a non-zero exit with
    ``check=True``.
    """

    def __init__(self, command: list, timeout: float, **popen_kwargs):
        self.command, self.timeout = [str(part) for part in command], timeout
        self.stdout, self.stderr = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        self.process = subprocess.Popen(self.command, stdout=self.stdout, stderr=self.stderr, text=True,
                                        start_new_session=True, **popen_kwargs)
        self.deadline = time.monotonic() + timeout

    def kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()

    def _output(self) -> tuple:
        outputs = []
        for handle in (self.stdout, self.stderr):
            handle.seek(0)
            outputs.append(handle.read())
            handle.close()
        return tuple(outputs)

    def wait(self, check: bool = True) -> subprocess.CompletedProcess:
        try:
            self.process.wait(timeout=max(0.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()
            _, stderr = self._output()
            pytest.fail(f"{' '.join(self.command)}\nran past its {self.timeout:.0f} s and was killed with its process "
                        f"group; stderr ends with:\n{stderr[-6000:]}", pytrace=False)
        finally:
            if self.process.poll() is None:  # interrupted (Ctrl-C): leave no workers behind
                self.kill()
        stdout, stderr = self._output()
        result = subprocess.CompletedProcess(self.command, self.process.returncode, stdout, stderr)
        if check and result.returncode != 0:
            pytest.fail(f"{' '.join(self.command)}\nexited with {result.returncode}; stdout ends with:\n"
                        f"{stdout[-3000:]}\nstderr ends with:\n{stderr[-6000:]}", pytrace=False)
        return result


def run_bounded(command: list, timeout: float, check: bool = True, **popen_kwargs) -> subprocess.CompletedProcess:
    """`BoundedProcess` started and waited for."""
    return BoundedProcess(command, timeout, **popen_kwargs).wait(check)


# ------------------------------------------------------------------ gradient caching (test_gradient_cache/test_device)
@pytest.fixture(scope="module")
def backbones(tmp_path_factory, tokenizer) -> dict:
    """Tiny backbones without and with dropout, by dropout rate."""
    root = tmp_path_factory.mktemp("cache_backbones")
    return {dropout: save_tiny_backbone(root / str(dropout), tokenizer, dropout=dropout) for dropout in (0.0, 0.1)}


@pytest.fixture(scope="module")
def sentences(corpus) -> list:
    """24 corpus sentences: a batch of 8 examples, as triplets too."""
    return corpus.read_text().splitlines()[:24]

"""The conformance suite: every method of the registry (`csekit.methods.METHODS`) through the same checks.

Each test is parametrized over the registry when the suite is collected, so a newly registered method is covered with
no edit here (``test_registry.py`` registers a throwaway method and runs this module on it). What a method cannot do
is a capability of its registry entry, and the test says so when it skips.

* train through its recipe on a tiny backbone, save; load with ``AutoModel`` (csekit imported) and with
  ``trust_remote_code`` in an interpreter without csekit, ``SentenceTransformer(folder)`` where the folder has the
  sentence-transformers layout; all equal to ``model.encode``;
* ``csekit card`` and ``csekit push --dry-run``: no local path, no pickle among the files;
* packed and padded batches train to the same weights (``packing``);
* a run crashed right after its first checkpoint and resumed with ``--resume_from_checkpoint last`` ends with the
  uninterrupted run's weights, for every random draw of the method (``stochastic``; the backbone has dropout);
* ``--bf16`` (``--fp16`` on a GPU): the encoder computes in half precision, the losses and the whitening stay float32
  (``mixed_precision``);
* 2 processes equal 1 (``one_process``), launched once for every method (``dist_worker.py``); with
  ``--mini_batch_size`` (``gradient_caching``), 2 caching processes equal 1 uncached; with ``--matryoshka_dims`` (a
  method whose recipe has it), 2 processes equal 1;
* bad input: one line, exit status 2, nothing written.
"""

import contextlib
import csv
import dataclasses
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import Trainer

from conftest import (
    BoundedProcess,
    another_value,
    free_ports,
    load_weights,
    recipe_flags,
    record_output_dtypes,
    run_isolated_python,
    save_tiny_backbone,
    tiny_bert_config,
)
from csekit import cli
from csekit.methods import METHODS, Method, OneProcess, load_object
from csekit.preflight import DECODER_BACKBONES
from csekit.trainers.arguments import config_fields

SENTENCES = ["A man is playing a guitar.", "Two dogs run on the beach.", "The stock market fell today."]
STEPS = 4  # checkpoints at steps 2 and 4
WORKER = Path(__file__).with_name("dist_worker.py")


def methods(capability: str = None) -> list:
    """The registered methods as parameters (``capability``: an attribute of `Method`; a method without it
    is a skipped case that says why)."""
    cases = []
    for method in METHODS.values():
        marks = ([pytest.mark.skip(reason=f"{method.name}: {capability} is not one of its capabilities")]
                 if capability and not getattr(method, capability) else [])
        cases.append(pytest.param(method, id=method.name, marks=marks))
    return cases


def stochastic_cases() -> list:
    return [pytest.param(method, flags, id=f"{method.name}-{label.replace(' ', '-')}")
            for method in METHODS.values() for label, flags in method.stochastic.items()]


MATRYOSHKA = ("--matryoshka_dims", "16", "8", "--matryoshka_weights", "0.5", "2.0")  # sizes of the hidden-32 backbone


def offers_matryoshka(method: Method) -> bool:
    """The method's recipe has ``--matryoshka_dims`` (its config takes Matryoshka sizes)."""
    return "matryoshka_dims" in {field.name for field in config_fields(method.config_class)}


def matryoshka_methods() -> list:
    return [pytest.param(method, id=method.name, marks=[] if offers_matryoshka(method) else [pytest.mark.skip(
        reason=f"{method.name}: its recipe has no --matryoshka_dims")]) for method in METHODS.values()]


def trains_with_trainer(method: Method) -> bool:
    """A ``Trainer``-based method (the others, CLSR's head trainer, take their schedule from ``test_flags``)."""
    return issubclass(method.trainer_class, Trainer)


def recipe_argv(method: Method, backbone: Path, data: dict, output_dir: Path, *extra, steps: int = STEPS,
                batch: int = 8) -> list:
    """The flags of a tiny run of ``method``'s recipe: its registry ``test_flags`` on the tests' backbone."""
    argv = ["--model_name_or_path", backbone, "--train_file", data[method.test_data], "--output_dir", output_dir,
            "--do_test_eval", "false", "--seed", 7, "--keep_checkpoints", "true"]  # the tests read checkpoints
    if trains_with_trainer(method):
        argv += ["--per_device_train_batch_size", batch, "--max_steps", steps, "--save_steps", 2, "--eval_strategy",
                 "no", "--load_best_model_at_end", "false", "--logging_steps", 1, "--learning_rate", "1e-3",
                 "--max_seq_length", 16, "--disable_tqdm", "true", "--report_to", "none"]
    else:
        argv += ["--cache_dir", output_dir.parent / f"{output_dir.name}-cache"]
    return [str(item) for item in [*argv, *backbone_flags(recipe_flags(method, backbone), backbone), *extra]]


def backbone_flags(flags: list, backbone: Path) -> list:
    """A method's test flags for ``backbone``: on a decoder, last-token pooling where they name the first token's."""
    config = json.loads((Path(backbone) / "config.json").read_text())
    if config.get("model_type") not in DECODER_BACKBONES:
        return list(flags)
    return ["last_token" if flag == "cls" else flag for flag in flags]


def train(method: Method, argv: list, trainer_class=None, model_hook=None) -> None:
    """Run ``method``'s recipe in this process; a Trainer-based recipe may get a test subclass of its trainer and a
    hook on the model it builds."""
    recipe = method.recipe_module.RECIPE
    if trainer_class is None and model_hook is None:
        recipe.main(argv)
        return
    from csekit.recipe_run import run_recipe

    build_model = recipe.build_model

    def hooked(model_path, model_args):
        model = build_model(model_path, model_args)
        return model_hook(model) if model_hook else model

    changed = dataclasses.replace(recipe, trainer_class=trainer_class or recipe.trainer_class)
    object.__setattr__(changed, "build_model", hooked)
    run_recipe(changed, *changed.parse(argv))


@pytest.fixture(scope="module")
def data(tmp_path_factory, corpus, data_dir) -> dict:
    """The training data of the tests' runs: 96 sentences, or 64 entailment pairs."""
    pairs = tmp_path_factory.mktemp("pairs") / "pairs.csv"
    nli = (data_dir / "nli" / "snli_devtest_pairs.tsv").read_text().splitlines()[1:]
    entailed = [line.split("\t")[1:3] for line in nli if line.endswith("\tentailment")][:64]
    pairs.write_text("sent0,sent1\n" + "".join(f'"{a}","{b}"\n' for a, b in entailed))
    return {"sentences": corpus, "pairs": pairs}


@pytest.fixture(scope="module")
def make_backbone(tokenizer):
    """``(folder, dropout) -> folder``: a fresh tests' backbone saved in ``folder``, the tiny BERT of ``conftest.py``
    (``test_conformance_decoders.py`` gives a tiny decoder instead, and ``tiny_backbone`` one with dropout 0.1)."""
    return lambda folder, dropout=0.1: save_tiny_backbone(folder, tokenizer, dropout)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_backbone, data) -> dict:
    """``{method name: output folder}`` of one uninterrupted run per method, made on first use; ``get.vectors[name]``
    holds the trained model's own inference vectors of ``SENTENCES``, taken in memory when the run saved its final
    model (the training model's, before the published encoder is made from it)."""
    from csekit.modeling import SentenceEncoderPreTrainedModel
    from csekit.trainers import ContrastiveTrainer

    folders, vectors = {}, {}

    def get(method: Method) -> Path:
        if method.name not in folders:
            folder = tmp_path_factory.mktemp(method.name) / "out"
            save_model, save_pretrained = ContrastiveTrainer.save_model, SentenceEncoderPreTrainedModel.save_pretrained

            def recording_save_model(self, output_dir=None, _internal_call=False):
                if not _internal_call:
                    vectors.setdefault(method.name, self.accelerator.unwrap_model(self.model).encode(SENTENCES))
                return save_model(self, output_dir, _internal_call)

            def recording_save_pretrained(self, directory, *args, **kwargs):
                if not self.saving_checkpoint:  # (CLSR's own loop saves its trained model directly)
                    vectors.setdefault(method.name, self.encode(SENTENCES))
                return save_pretrained(self, directory, *args, **kwargs)

            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(ContrastiveTrainer, "save_model", recording_save_model)
                patch.setattr(SentenceEncoderPreTrainedModel, "save_pretrained", recording_save_pretrained)
                train(method, recipe_argv(method, tiny_backbone, data, folder, "--do_test_eval", "true"))
            folders[method.name] = folder
        return folders[method.name]

    get.vectors = vectors
    return get


def assert_same_weights(reference: dict, other: dict, rtol: float = 1e-5, atol: float = 1e-7) -> None:
    assert reference.keys() == other.keys()
    for name, tensor in reference.items():
        torch.testing.assert_close(other[name], tensor, rtol=rtol, atol=atol, msg=name)


# ------------------------------------------------------------------------------------------------ publishing
def selected(request, test) -> list:
    """The methods of the collected cases of ``test`` in the requesting module (a fixture shared by them does the work
    of those only) that its backbone takes (the module's ``applies``, where it has one)."""
    applies = getattr(request.module, "applies", lambda method: True)
    chosen = {item.callspec.params["method"].name for item in request.session.items
              if getattr(item, "originalname", None) == test.__name__ and hasattr(item, "callspec")
              and item.module is request.module}
    return [method for name, method in METHODS.items() if name in chosen and applies(method)]


LOAD_ALL = """
import json, sys, numpy as np
from transformers import AutoModel
sentences, folders = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for name, (folder, model_class, has_st) in folders.items():
    model = AutoModel.from_pretrained(folder, trust_remote_code=True)
    assert type(model).__name__ == model_class, (name, type(model).__name__)
    np.save(f"{folder}-remote.npy", np.asarray(model.encode(sentences)))
    if has_st:
        from sentence_transformers import SentenceTransformer
        np.save(f"{folder}-st.npy", SentenceTransformer(folder, device="cpu").encode(sentences))
print("imported:", json.dumps(sorted(name for name in sys.modules if name.split(".")[0] == "csekit")))
"""


@pytest.fixture(scope="module")
def loaded_without_csekit(request, trained, tmp_path_factory) -> dict:
    """The selected methods' folders loaded with ``trust_remote_code`` (and ``SentenceTransformer`` where the
    folder has that layout) in one interpreter where csekit cannot be imported: ``{name: {way: vectors}}``."""
    methods = selected(request, test_saved_model_loads_with_automodel_remote_code_and_sentence_transformers)
    folders = {method.name: (str(trained(method)), method.model_class.__name__,
                             (trained(method) / "modules.json").is_file()) for method in methods}
    root = tmp_path_factory.mktemp("remote_code")
    (root / "load.py").write_text(LOAD_ALL)
    result = run_isolated_python(
        f"import runpy, sys; sys.argv = ['load.py', {json.dumps(json.dumps(SENTENCES))}, "
        f"{json.dumps(json.dumps(folders))}]; runpy.run_path({str(root / 'load.py')!r}, run_name='__main__')",
        cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    # (sentence-transformers asks whether to run the folder's code, on stdout without a newline: csekit's layout
    # loads without it, and the answer read from a closed stdin is no)
    assert "imported: []" in result.stdout, result.stdout[-2000:] + result.stderr[-2000:]  # no csekit import
    return {name: {way: np.load(f"{folder}-{way}.npy") for way in ("remote", "st") if Path(f"{folder}-{way}.npy")
                   .is_file()} for name, (folder, _, _) in folders.items()}


@pytest.mark.parametrize("method", methods())
def test_saved_model_loads_with_automodel_remote_code_and_sentence_transformers(method, trained,
                                                                               loaded_without_csekit):
    """Trained = published: the trained model's own vectors (in memory, at its final save) equal ``AutoModel`` on the
    saved folder, which equals ``trust_remote_code`` without csekit and ``SentenceTransformer(folder)``."""
    from transformers import AutoModel

    folder = trained(method)
    model = AutoModel.from_pretrained(folder)
    assert type(model) is method.model_class  # the published model, never a training-only one
    expected = np.asarray(model.encode(SENTENCES))
    np.testing.assert_allclose(expected, trained.vectors[method.name], atol=1e-6, rtol=0)  # trained = published
    loaded = loaded_without_csekit[method.name]
    np.testing.assert_allclose(loaded["remote"], expected, atol=1e-6, rtol=0)
    if (folder / "modules.json").is_file():
        np.testing.assert_allclose(loaded["st"], expected, atol=1e-5, rtol=0)
    else:  # the card says why the folder has no sentence-transformers layout
        assert cli.main(["card", str(folder), "--figure", "never"]) == 0
        assert "no modules.json" in (folder / "README.md").read_text()


@pytest.mark.parametrize("method", methods())
def test_card_and_push_dry_run_publish_no_local_path_and_no_pickle(method, trained, tmp_path, capsys):
    from csekit.publishing.hub import files_to_push, publishable_copy

    folder = trained(method)
    assert cli.main(["card", str(folder), "--figure", "never", "--repo-id", "org/name"]) == 0
    assert 'from_pretrained("org/name"' in (folder / "README.md").read_text()
    capsys.readouterr()
    assert cli.main(["push", str(folder), "org/name", "--dry-run"]) == 0
    plan = capsys.readouterr().out
    files = files_to_push(folder)
    assert all(f"\n  {name}  " in plan for name in files)
    assert {"config.json", "README.md"} <= set(files) and any(name.endswith(".safetensors") for name in files)
    assert not [name for name in files if name.endswith((".bin", ".pt", ".pkl", ".pickle", ".pth"))]
    published = tmp_path / "published"
    publishable_copy(folder, files, published)  # what the upload sends
    for name in files:
        if (published / name).suffix in (".json", ".md", ".txt", ".py"):
            text = (published / name).read_text(encoding="utf-8")
            assert str(tmp_path.parent.parent) not in text and "/tmp/" not in text, name


# ------------------------------------------------------------------------------------------------ training
@pytest.mark.parametrize("method", methods("packing"))
def test_packed_and_padded_batches_train_to_the_same_weights(method, tmp_path, make_backbone, data):
    backbone = make_backbone(tmp_path / "backbone", dropout=0.0)  # same draws in both layouts
    for layout in ("true", "false"):  # SGD: Adam's first steps would turn rounding in near-zero gradients into +-lr
        train(method, recipe_argv(method, backbone, data, tmp_path / layout, "--padding_free", layout, "--optim",
                                  "sgd", steps=2))
    packed, padded = (load_weights(tmp_path / layout) for layout in ("true", "false"))
    assert_same_weights(padded, packed, rtol=1e-4, atol=1e-6)  # float32 attention over other layouts
    start = load_weights(backbone)
    assert any(not torch.equal(packed[f"encoder.{name}"], tensor) for name, tensor in start.items())  # it trained


class Crash(Exception):
    """A crash right after the first checkpoint appeared."""


@contextlib.contextmanager
def crash_after_first_checkpoint():
    """Raise `Crash` just after the first ``checkpoint-*`` folder is moved into place, wherever csekit's
    trainers move one (they all use `csekit.atomic.move_into_place`)."""
    from csekit import atomic

    original = atomic.move_into_place

    def moving(source, destination):
        result = original(source, destination)
        if Path(destination).name.startswith("checkpoint-"):
            raise Crash(Path(destination).name)
        return result

    patched = [module for name, module in sys.modules.items()
               if name.startswith("csekit") and getattr(module, "move_into_place", None) is original]
    for module in patched:
        module.move_into_place = moving
    try:
        yield
    finally:
        for module in patched:
            module.move_into_place = original


def flattened(value, prefix: str = "") -> dict:
    """``{path: leaf}`` of a nested state (dicts, lists, tensors, numbers)."""
    if isinstance(value, dict):
        return {key: leaf for name, item in value.items() for key, leaf in flattened(item, f"{prefix}{name}/").items()}
    if isinstance(value, (list, tuple)):
        return {key: leaf for index, item in enumerate(value)
                for key, leaf in flattened(item, f"{prefix}{index}/").items()}
    return {prefix.rstrip("/"): value.detach().clone() if torch.is_tensor(value) else value}


def state_recorder(method: Method, states: list, step: int = 2):
    """``method``'s trainer, recording when step ``step + 1`` starts the whole training state in memory: every
    parameter and buffer of the training model (those a checkpoint does not hold included: a queue, running
    statistics), the optimizer's and the scheduler's state."""
    class Recording(method.trainer_class):
        def training_step(self, model, inputs, num_items_in_batch=None):
            if self.state.global_step == step and not states:
                unwrapped = self.accelerator.unwrap_model(model)
                states.append({**flattened(dict(unwrapped.named_parameters()), "parameters/"),
                               **flattened(dict(unwrapped.named_buffers()), "buffers/"),
                               **flattened(self.optimizer.state_dict(), "optimizer/"),
                               **flattened(self.lr_scheduler.state_dict(), "scheduler/")})
            return super().training_step(model, inputs, num_items_in_batch)

    return Recording if trains_with_trainer(method) else None


@pytest.mark.parametrize("method, flags", stochastic_cases())
def test_a_run_resumed_after_a_crash_ends_like_the_uninterrupted_one(method, flags, trained, tiny_backbone, data,
                                                                     tmp_path):
    """The resumed run's whole state when it takes its first step (every buffer and the optimizer's state, compared
    as state, which a tiny model's final weights cannot always tell apart) is the uninterrupted run's at that step,
    and both end with the same weights."""
    before, after = [], []
    if flags or trains_with_trainer(method):  # (a run that records its state: the shared run does not)
        uninterrupted = tmp_path / "full"
        train(method, recipe_argv(method, tiny_backbone, data, uninterrupted, *flags),
              trainer_class=state_recorder(method, before))
    else:
        uninterrupted = trained(method)
    crashed = tmp_path / "crashed"
    with crash_after_first_checkpoint(), pytest.raises(Crash):
        train(method, recipe_argv(method, tiny_backbone, data, crashed, *flags))
    assert not (crashed / "config.json").exists()
    train(method, recipe_argv(method, tiny_backbone, data, crashed, *flags, "--resume_from_checkpoint", "last"),
          trainer_class=state_recorder(method, after))
    if trains_with_trainer(method):
        assert before and after and before[0].keys() == after[0].keys(), sorted(set(before[0]) ^ set(after[0]))
        for name, value in before[0].items():
            if torch.is_tensor(value):
                torch.testing.assert_close(after[0][name], value, rtol=1e-5, atol=1e-7, msg=name)
            else:
                assert after[0][name] == value, name
    assert_same_weights(load_weights(uninterrupted), load_weights(crashed))


@pytest.mark.parametrize("precision", [
    "bf16", pytest.param("fp16", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="fp16 needs a GPU"))])
@pytest.mark.parametrize("method", methods("mixed_precision"))
def test_half_precision_runs_the_encoder_in_half_and_keeps_the_losses_float32(method, precision, tiny_backbone, data,
                                                                              tmp_path):
    seen = defaultdict(set)

    def hooked(model):
        record_output_dtypes(model, seen)
        return model

    class Recording(method.trainer_class):
        def compute_losses(self, model, outputs, inputs):
            components = super().compute_losses(model, outputs, inputs)
            seen["embeddings"].add(outputs.embeddings.dtype)
            seen["losses"].update(value.dtype for value in components.values())
            return components

    train(method, recipe_argv(method, tiny_backbone, data, tmp_path / "out", f"--{precision}", "true", steps=2),
          trainer_class=Recording, model_hook=hooked)
    assert seen["encoder"] == {torch.bfloat16 if precision == "bf16" else torch.float16}
    assert seen["embeddings"] == seen["losses"] == {torch.float32}
    assert seen.get("whitening", {torch.float32}) == {torch.float32}
    history = json.loads((tmp_path / "out" / "checkpoint-2" / "trainer_state.json").read_text())["log_history"]
    assert all(np.isfinite(entry["loss"]) for entry in history if "loss" in entry)


# ------------------------------------------------------------------------------------------------ what a step touches
def frozen_cases() -> list:
    """Trainer-based methods whose training model declares frozen networks (``frozen_modules``)."""
    cases = []
    for method in METHODS.values():
        why = ("its trainer is not a transformers Trainer" if not trains_with_trainer(method)
               else "its training model declares no frozen network"
               if not getattr(method.training_model_class, "frozen_modules", ()) else None)
        cases.append(pytest.param(method, id=method.name, marks=[pytest.mark.skip(reason=f"{method.name}: {why}")]
                                  if why else []))
    return cases


@pytest.mark.parametrize("method", frozen_cases())
def test_a_frozen_network_gets_no_gradient_and_no_optimizer_slot(method, tiny_backbone, data, tmp_path):
    """Every parameter under the training model's ``frozen_modules`` (ESimCSE's momentum encoder, DiffCSE's
    generator, CMLM-CSE's auxiliary extractor) has no gradient after a step and is in none of the optimizer's
    groups."""
    seen = {}

    class Checking(method.trainer_class):
        def training_step(self, model, inputs, num_items_in_batch=None):
            loss = super().training_step(model, inputs, num_items_in_batch)
            frozen = {f"{name}.{key}": parameter for name in model.frozen_modules
                      for key, parameter in model.get_submodule(name).named_parameters()}
            optimized = {id(parameter) for group in self.optimizer.param_groups for parameter in group["params"]}
            seen.update(frozen=sorted(frozen), optimized=[name for name, p in frozen.items() if id(p) in optimized],
                        gradient=[name for name, p in frozen.items() if p.requires_grad or p.grad is not None])
            return loss

    train(method, recipe_argv(method, tiny_backbone, data, tmp_path / "out", steps=1), trainer_class=Checking)
    assert seen["frozen"] and seen["gradient"] == [] and seen["optimized"] == []


def reseed(seed: int) -> None:
    """Every global generator a step could draw from: torch's, numpy's, Python's."""
    import random

    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def same_tensors(first: dict, second: dict) -> bool:
    return first.keys() == second.keys() and all(
        torch.equal(first[key], second[key]) if torch.is_tensor(first[key]) else first[key] == second[key]
        for key in first)


@pytest.mark.parametrize("method", [case for case in methods() if trains_with_trainer(case.values[0])])
def test_a_step_draws_nothing_from_the_global_generators_but_dropout(method, make_backbone, data, tmp_path):
    """With dropout off (a backbone saved with dropout 0) and the forward's declared global draws off
    (``Method.forward_draws``), the collator's batch and the step's loss and gradients are bit-identical under two
    seeds of torch's, numpy's and Python's global generators: every other draw (masks, repetitions, noise, orders)
    comes from the per-example generators a checkpoint saves. Temperature 1 where the method has one, so a draw that
    moves a negative's logit shows in the loss."""
    import copy

    backbone = make_backbone(tmp_path / "backbone", dropout=0.0)
    seen = {}

    class Checking(method.trainer_class):
        def training_step(self, model, inputs, num_items_in_batch=None):
            if not seen:
                features = [self.train_dataset[index] for index in range(8)]
                batches, steps = [], []
                for seed in (1, 2):
                    reseed(seed)
                    batches.append(self.data_collator(copy.deepcopy(features)))
                state = copy.deepcopy(model.state_dict())  # a step's side effects (a queue, a momentum update) undone
                for seed in (1, 2):
                    model.load_state_dict(state)
                    model.zero_grad(set_to_none=True)
                    reseed(seed)
                    loss = self.compute_loss(model, self._prepare_inputs(copy.deepcopy(inputs)))
                    loss.backward()
                    steps.append({"loss": loss.detach(), **{name: parameter.grad.clone() for name, parameter
                                                            in model.named_parameters() if parameter.grad is not None}})
                model.load_state_dict(state)
                model.zero_grad(set_to_none=True)
                seen.update(collator=same_tensors(*batches), step=same_tensors(*steps), gradients=len(steps[0]) - 1)
            return super().training_step(model, inputs, num_items_in_batch)

    flags = [flag for flags in method.forward_draws.values() for flag in flags]
    if "temperature" in {field.name for field in config_fields(method.config_class)}:
        flags += ["--temperature", "1.0"]
    train(method, recipe_argv(method, backbone, data, tmp_path / "out", *flags, steps=1), trainer_class=Checking)
    assert seen["gradients"] > 0 and seen["collator"] and seen["step"], seen


def declared_cases(attribute: str, nothing: str) -> list:
    """``(method, value)`` for each entry of the registry's ``{label: value}`` field ``attribute`` (``loss_terms``,
    ``augmentations``); a method without one is a skipped case saying it declares no ``nothing``."""
    cases = []
    for method in METHODS.values():
        cases += [pytest.param(method, value, id=f"{method.name}-{label.replace(' ', '-')}")
                  for label, value in getattr(method, attribute).items()] or [pytest.param(
            method, None, id=method.name, marks=[pytest.mark.skip(reason=f"{method.name}: declares no {nothing}")])]
    return cases


@pytest.mark.parametrize("method, weight", declared_cases("loss_terms", "loss term besides its contrastive one"))
def test_each_declared_loss_term_moves_the_loss_and_the_gradients_with_its_weight(method, weight, make_backbone, data,
                                                                                  tmp_path):
    """Each term of ``Method.loss_terms``: the same batch from the same weights, with dropout off, gives another loss
    and other gradients when the config field weighting the term changes (its default, then its default + 1): the
    term is computed, weighted by that field and reaches the parameters."""
    import copy

    backbone = make_backbone(tmp_path / "backbone", dropout=0.0)
    seen = {}

    class Checking(method.trainer_class):
        def training_step(self, model, inputs, num_items_in_batch=None):
            if not seen:
                state, default, steps = copy.deepcopy(model.state_dict()), getattr(model.config, weight), []
                for value in (default, default + 1.0):
                    setattr(model.config, weight, value)
                    model.load_state_dict(state)
                    model.zero_grad(set_to_none=True)
                    reseed(0)
                    loss = self.compute_loss(model, self._prepare_inputs(copy.deepcopy(inputs)))
                    loss.backward()
                    steps.append({"loss": loss.detach(), **{name: parameter.grad.clone() for name, parameter
                                                            in model.named_parameters() if parameter.grad is not None}})
                setattr(model.config, weight, default)
                model.load_state_dict(state)
                model.zero_grad(set_to_none=True)
                first, second = steps
                seen.update(loss=not torch.equal(first["loss"], second["loss"]),
                            gradients=[name for name in first if name != "loss" and name in second
                                       and not torch.allclose(first[name], second[name], rtol=1e-4, atol=1e-9)])
            return super().training_step(model, inputs, num_items_in_batch)

    train(method, recipe_argv(method, backbone, data, tmp_path / "out", steps=1), trainer_class=Checking)
    assert seen["loss"] and seen["gradients"], seen


def float_field_cases() -> list:
    """``(method, field)`` for each float setting of a method's config; one the registry declares outside the loss
    (``Method.fields_outside_the_loss``) is a skipped case saying why."""
    cases = []
    for method in METHODS.values():
        defaults = method.config_class()
        for name in [field.name for field in config_fields(method.config_class)
                     if isinstance(getattr(defaults, field.name), float)]:
            why = method.fields_outside_the_loss.get(name)
            cases.append(pytest.param(method, name, id=f"{method.name}-{name}", marks=[pytest.mark.skip(
                reason=f"{method.name}: {name}: {why}")] if why else []))
    return cases


@pytest.mark.parametrize("method, name", float_field_cases())
def test_every_float_setting_changes_the_loss_of_a_model_built_with_it(method, name, make_backbone, data,
                                                                       tmp_path):
    """Each float setting of the config is live: a model built anew from a config where only that setting differs
    (the same weights), with the method's collator for that config, gives the same examples another loss. A value
    hard-coded, copied at construction and never read again, or read nowhere fails here whatever its default is.
    Examples are triplets where the method takes them (so a hard-negative weight is read)."""
    import copy

    backbone = make_backbone(tmp_path / "backbone", dropout=0.0)
    if not trains_with_trainer(method):  # its own loop (CLSR): one epoch of the head from each model's config
        arguments = load_object(method.exports[0])
        pairs = {"sent0": [f"a sentence about harbour {i}" for i in range(16)],
                 "sent1": [f"a line on harbour {i}" for i in range(16)]}
        losses = []
        for value in (getattr(method.config_class(), name), another_value(getattr(method.config_class(), name))):
            args = arguments(output_dir=str(tmp_path / "out"), num_train_epochs=1, per_device_train_batch_size=8,
                             warmup_epochs=0, eval_epochs=1)
            reseed(0)  # the same head weights for both
            model = method.model_class.from_encoder(str(backbone), **{name: value})
            losses.append(method.trainer_class.from_dataset(model, args, pairs).train()["history"][0]["loss"])
        assert losses[0] != losses[1], (name, losses)
        return
    seen = {}

    class Checking(method.trainer_class):
        def training_step(self, model, inputs, num_items_in_batch=None):
            if not seen:
                unwrapped = self.accelerator.unwrap_model(model)
                state, losses = copy.deepcopy(unwrapped.state_dict()), []
                triplets = ("sent0", "sent1", "hard_neg") in self.data_columns
                features = [{"sent0": f"a sentence about harbour {i}", "example_index": i,
                             **({"sent1": f"a line on harbour {i}", "hard_neg": f"no word of sea {i}"} if triplets
                                else {})} for i in range(8)]
                for value in (getattr(unwrapped.config, name), another_value(getattr(unwrapped.config, name))):
                    config = copy.deepcopy(unwrapped.config)
                    setattr(config, name, value)
                    built = type(unwrapped)(config).to(unwrapped.device)
                    built.load_state_dict(state)
                    built.tokenizer = unwrapped.tokenizer
                    collator = (dataclasses.replace(self.data_collator, config=config)
                                if hasattr(self.data_collator, "config") else self.data_collator)
                    reseed(0)
                    batch = self._prepare_inputs(collator(copy.deepcopy(features)))
                    with torch.no_grad():
                        losses.append(self.compute_loss(built.train(), batch).detach().float())
                seen.update(losses=losses)
            return super().training_step(model, inputs, num_items_in_batch)

    train(method, recipe_argv(method, backbone, data, tmp_path / "out", "--padding_free", "false", steps=1),
          trainer_class=Checking)
    first, second = seen["losses"]
    assert torch.isfinite(first) and torch.isfinite(second) and not torch.equal(first, second), (name, seen)


@pytest.mark.parametrize("method, flags", declared_cases("augmentations", "text augmentation of its views"))
def test_each_declared_augmentation_makes_views_that_differ_from_the_sentence(method, flags, tiny_backbone, data,
                                                                             tmp_path):
    """The collator the recipe builds with the augmentation's flags, given 16 sentences of ten words (room for the
    repeated tokens within ``--max_seq_length 64``, also in a decoder's small byte-level BPE): most of each later
    view's token sequences differ from the sentence's (view 0). A repetition may draw zero copies (the authors'
    ``randint(0, ...)``), so not every one."""
    seen = {}

    class Checking(method.trainer_class):
        def training_step(self, model, inputs, num_items_in_batch=None):
            if not seen:
                features = [{"sent0": f"the fox {i} jumps over the lazy dog by noon", "example_index": i}
                            for i in range(16)]
                batch = self.data_collator(features)
                ids, mask = batch["input_ids"], batch["attention_mask"].bool()
                seen.update(views=ids.shape[1], differ=[
                    sum(not torch.equal(ids[i, 0][mask[i, 0]], ids[i, view][mask[i, view]]) for i in range(16))
                    for view in range(1, ids.shape[1])])
            return super().training_step(model, inputs, num_items_in_batch)

    train(method, recipe_argv(method, tiny_backbone, data, tmp_path / "out", "--padding_free", "false",
                              "--max_seq_length", "64", *flags, steps=1), trainer_class=Checking)
    assert seen["views"] >= 2 and all(count >= 8 for count in seen["differ"]), seen


# a flag's value needs another flag set with it: the weights of Matryoshka sizes, the layers of the layers pooler
COMPANIONS = {"matryoshka_weights": ["--matryoshka_dims", "16", "8"], "pooling_layers": ["--pooler_type", "layers"]}
# settings only a decoder backbone takes, round-tripped on a tiny Qwen3 config
DECODER_SETTINGS = ("bidirectional",)


def flag_candidates(method: Method, config_field, default) -> list:
    """Values other than ``default`` to give the field's flag, tried in order: a float changed, a bool flipped,
    small sizes, and for a string the values its docstring names (the flag's help)."""
    import re

    from csekit.trainers.arguments import docstring_arguments

    if isinstance(default, bool):
        return [[str(not default).lower()]]
    if isinstance(default, float):
        return [[str(another_value(default))]]
    kind = str(config_field.type)
    if "list" in kind:
        return [["1.0", "0.5"]] if "float" in kind else [["16", "8"], ["1", "2"]]
    if "int" in kind or "Optional" in kind:
        return [[str(value)] for value in (2, 1, 4, 16, 3) if value != default]
    words = re.findall(r'``"?([A-Za-z_][\w.-]*)"?``', docstring_arguments(method.config_class)[config_field.name])
    return [[word] for word in dict.fromkeys(words) if word != default]


def construction_kwargs(method: Method) -> dict:
    return {"extractor_layers": 1, "fusion_layers": 1} if method.name == "cmlm_cse" else {}


@pytest.mark.parametrize("method", methods())
def test_every_setting_round_trips_from_its_flag_to_config_json(method, tiny_backbone, tmp_path):
    """Each method setting's flag, given a value other than its default (the first one its config accepts), reaches
    ``config.json`` and ``AutoConfig`` as that value; and every key ``config.json`` holds beyond transformers' own is
    a dataclass field of the config, so a setting kept as a plain attribute (no flag, no check) fails here."""
    from huggingface_hub.errors import StrictDataclassClassValidationError
    from transformers import AutoConfig, PreTrainedConfig

    from csekit.options import FLAG_NAMES
    from csekit.trainers.arguments import config_kwargs

    config_class, recipe = method.config_class, method.recipe_module.RECIPE
    encoder = tiny_bert_config(num_hidden_layers=4).to_dict()  # room for CMLM-CSE's extractor and fusion depths
    defaults = config_class(encoder_config=encoder, **construction_kwargs(method))
    foreign = set(defaults.to_dict()) - set(PreTrainedConfig().to_dict()) - {f.name for f in dataclasses.fields(
        config_class)}
    assert not foreign, f"{config_class.__name__}: config.json keys that are no field: {sorted(foreign)}"
    untested = []
    for config_field in config_fields(config_class):
        flag = f"--{FLAG_NAMES.get(config_field.name, config_field.name)}"
        for values in flag_candidates(method, config_field, getattr(defaults, config_field.name)):
            argv = ["--model_name_or_path", str(tiny_backbone), *COMPANIONS.get(config_field.name, []), flag, *values]
            kwargs = {**config_kwargs(recipe.parse(argv)[0], config_class), **{
                name: value for name, value in construction_kwargs(method).items() if name != config_field.name}}
            backbone = encoder
            if config_field.name in DECODER_SETTINGS:
                backbone = AutoConfig.for_model("qwen3", hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
                                                num_key_value_heads=1, intermediate_size=64, head_dim=16).to_dict()
            try:  # (validated as save_pretrained validates: a config class left undecorated checks only there)
                config = config_class(encoder_config=backbone, **kwargs)
                config.validate()
            except (ValueError, StrictDataclassClassValidationError):  # a value this backbone or config refuses
                continue
            value = getattr(config, config_field.name)
            assert value != getattr(defaults, config_field.name), (config_field.name, values)
            folder = tmp_path / config_field.name
            config.save_pretrained(folder)
            assert json.loads((folder / "config.json").read_text())[config_field.name] == value, config_field.name
            assert getattr(AutoConfig.from_pretrained(folder), config_field.name) == value, config_field.name
            break
        else:
            untested.append(config_field.name)
    assert not untested, f"no value other than the default round-tripped: {untested}"


# ------------------------------------------------------------------------------------------------ processes
BATCH = 4  # per process; one process gets 2 * BATCH
TOKEN_BUDGET = 48
LAUNCH_TIMEOUT = 480


def launch(jobs: list, jobs_file: Path, num_processes: int, port=None) -> BoundedProcess:
    jobs_file.write_text(json.dumps(jobs))
    # On a CPU-only host `--multi_gpu` is what starts N processes (`--cpu --num_processes 2` silently runs one);
    # the recipes' training arguments then put them in one gloo group
    mode = ["--multi_gpu", "--main_process_port", port] if num_processes > 1 else ["--cpu"]
    command = [sys.executable, "-m", "accelerate.commands.launch", *mode, "--num_processes", num_processes,
               "--num_machines", 1, "--mixed_precision", "no", "--dynamo_backend", "no", WORKER, jobs_file]
    return BoundedProcess(command, LAUNCH_TIMEOUT)


@pytest.fixture(scope="module")
def launched(request, tmp_path_factory, make_backbone, data) -> Path:
    """The selected methods trained by 2 processes with batch B and by 1 process with batch 2B (float64, dropout
    off), the two launches at once; per-process whitening also by 1 process whitening each half alone. Each job
    records its batches and losses (``dist_worker.py``)."""
    root = tmp_path_factory.mktemp("processes")
    backbone = make_backbone(root / "backbone", dropout=0.0)
    two, one = [], []
    cached = selected(request, test_two_processes_with_gradient_caching_train_what_one_process_trains_uncached)
    plain = selected(request, test_two_processes_train_what_one_process_trains_with_the_whole_batch)
    matryoshka = selected(request, test_two_processes_with_matryoshka_terms_train_what_one_process_trains)
    for method in [method for method in METHODS.values() if method in [*plain, *cached, *matryoshka]]:
        equivalent = method.one_process or OneProcess()  # (no equivalent: the two-process runs are checked alone)
        extra = equivalent.flags

        def job(name, batch, flags=(), **options):
            chunks = next(((f"--{flag}", str(options.pop(flag))) for flag in ("mini_batch_size", "mini_batch_tokens")
                           if flag in options), ())
            argv = recipe_argv(method, backbone, data, root / name / "out", *extra, *chunks, *flags, steps=2,
                               batch=batch)
            return {"method": method.name, "recipe": method.recipe, "argv": argv,
                    "options": {"float64": trains_with_trainer(method), **options}}

        two.append(job(f"{method.name}-2", BATCH))
        if method in cached:  # chunks of 3 and 1: one chunk smaller than the other
            two.append(job(f"{method.name}-2-cached", BATCH, mini_batch_size=BATCH - 1))
            # a budget of about two examples' tokens: chunks of 1 to 3 examples
            two.append(job(f"{method.name}-2-tokens", BATCH, mini_batch_tokens=TOKEN_BUDGET))
        one.append(job(f"{method.name}-1", 2 * BATCH, **equivalent.worker_options))
        if method in matryoshka and offers_matryoshka(method):
            # with a head at inference (an MLP SimCSE keeps), the prefix terms reach it outside DDP's forward
            # (a per-process-statistics method is not compared with one process: its default head is kept, which
            # DiffCSE's batch-normalised projection needs for Matryoshka sizes)
            flags = (*MATRYOSHKA, *(("--mlp_only_train", "false") if "mlp_only_train" in {
                field.name for field in config_fields(method.config_class)}
                and method.one_process is not None else ()))
            two.append(job(f"{method.name}-2-matryoshka", BATCH, flags))
            one.append(job(f"{method.name}-1-matryoshka", 2 * BATCH, flags, **equivalent.worker_options))
    more = root / "more_sentences.txt"  # a second dataset for a method trained on sentences alone
    more.write_text("".join(f"{row['sent1']}\n" for row in csv.DictReader(data["pairs"].open())))
    for method in filter(trains_with_trainer, selected(
            request, test_two_processes_train_several_datasets_as_one_process_with_the_whole_batch)):
        # sentences, then pairs where it takes them (round robin): one step of each, B rows a process or 2B in one
        second = data["pairs"] if ("sent0", "sent1") in method.trainer_class.data_columns else more
        mixed = ("--train_file", str(second), "--multi_dataset_batch_sampler", "round_robin")
        equivalent = method.one_process or OneProcess()
        for name, batch, jobs, options in (("2", BATCH, two, {}), ("1", 2 * BATCH, one, equivalent.worker_options)):
            argv = recipe_argv(method, backbone, {**data, method.test_data: data["sentences"]},
                               root / f"{method.name}-{name}-datasets" / "out", *equivalent.flags, *mixed, steps=2,
                               batch=batch)
            jobs.append({"method": method.name, "recipe": method.recipe, "argv": argv,
                         "options": {"float64": True, **options}})
    port = free_ports(1)[0]
    processes = [launch(two, root / "two.json", 2, port), launch(one, root / "one.json", 1)]
    try:
        for process in processes:
            process.wait()
    finally:
        for process in processes:
            process.kill()
    return root


def records(run: Path) -> list:
    found = [json.loads(path.read_text()) for path in sorted(run.glob("record_rank*.json"))]
    assert [r["num_processes"] for r in found] == [len(found)] * len(found) and all(r["error"] is None for r in found)
    return found


@pytest.mark.parametrize("method", methods())
def test_two_processes_train_what_one_process_trains_with_the_whole_batch(method, launched):
    name = method.name
    (single,), ranks = records(launched / f"{name}-1" / "out"), records(launched / f"{name}-2" / "out")
    assert len(ranks) == 2, "the two processes did not form one group (each trained alone as rank 0)"
    if not trains_with_trainer(method):  # every process pools a share of the cache, then trains the same head
        assert 0 < ranks[0]["pooled_sentences"] < single["pooled_sentences"]
        assert ranks[0]["pooled_sentences"] + ranks[1]["pooled_sentences"] == single["pooled_sentences"]
        assert_same_weights(load_weights(launched / f"{name}-1" / "out"), load_weights(launched / f"{name}-2" / "out"),
                            rtol=0, atol=1e-5)
        return
    reference = f"{name}-1"
    (single,) = records(launched / reference / "out")
    for step in range(2):  # rows [0:B] and [B:2B] of one process's batch of 2B, in order
        assert ranks[0]["batches"][step] + ranks[1]["batches"][step] == single["batches"][step]
    if method.one_process is None:  # no one-process equivalent (`Method.one_process`)
        assert all(math.isfinite(loss) for rank in ranks for loss in rank["losses"])
        assert ranks[0]["losses"] != pytest.approx(ranks[1]["losses"], rel=1e-6)  # each its own half
        return
    averaged = [(a + b) / 2 for a, b in zip(ranks[0]["losses"], ranks[1]["losses"])]
    assert averaged == pytest.approx(single["losses"], rel=1e-6)
    assert single["losses"][1] != pytest.approx(single["losses"][0], rel=1e-6)  # the first step moved the model
    one, two = (load_weights(launched / run / "out" / "checkpoint-2") for run in (reference, f"{name}-2"))
    # float64 (a float32 whitening inside): 1 and 2 processes sum the gradient in another order
    assert_same_weights(one, two, rtol=1e-6, atol=1e-7)


def several_dataset_methods() -> list:
    return [pytest.param(method, id=method.name, marks=[] if trains_with_trainer(method) else [pytest.mark.skip(
        reason=f"{method.name}: its training loop is its own, on one set of pairs")]) for method in METHODS.values()]


@pytest.mark.parametrize("method", several_dataset_methods())
def test_two_processes_train_several_datasets_as_one_process_with_the_whole_batch(method, launched):
    """Two datasets (sentences, then entailment pairs or other sentences), one a step: each of 2 processes takes its
    half of the step's batch of one dataset, and the run steps as 1 process with the whole batch
    (``trainers/multi_dataset.py``)."""
    ranks, (single,) = (records(launched / f"{method.name}-{n}-datasets" / "out") for n in (2, 1))
    assert len(ranks) == 2
    for step in range(2):
        assert ranks[0]["batches"][step] + ranks[1]["batches"][step] == single["batches"][step]
    assert len({len(single["batches"][0]), len(single["batches"][1])}) == 1  # (a whole batch each step)
    if method.one_process is None:  # no one-process equivalent (`Method.one_process`)
        assert all(math.isfinite(loss) for rank in ranks for loss in rank["losses"])
        return
    averaged = [(a + b) / 2 for a, b in zip(ranks[0]["losses"], ranks[1]["losses"])]
    assert averaged == pytest.approx(single["losses"], rel=1e-6)
    one, two = (load_weights(launched / f"{method.name}-{n}-datasets" / "out" / "checkpoint-2") for n in (1, 2))
    assert_same_weights(one, two, rtol=1e-6, atol=1e-7)
    record = json.loads((launched / f"{method.name}-2-datasets" / "out" / "training_args.json").read_text())
    assert "50.0% of the steps" in record["data_args"]["train_dataset"]  # each dataset named, with its share


@pytest.mark.parametrize("chunks", ["cached", "tokens"])
@pytest.mark.parametrize("method", methods("gradient_caching"))
def test_two_processes_with_gradient_caching_train_what_one_process_trains_uncached(method, chunks, launched):
    """Each process caches its own chunks (``--mini_batch_size``, or ``--mini_batch_tokens``); the loss gathers every
    process's embeddings, and the gradients are averaged as DDP averages them (``trainers/gradient_cache.py``)."""
    name = method.name
    assert len(records(launched / f"{name}-2-{chunks}" / "out")) == 2
    reference = f"{name}-1"
    one, two = (load_weights(launched / run / "out" / "checkpoint-2") for run in (reference, f"{name}-2-{chunks}"))
    assert_same_weights(one, two, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("method", matryoshka_methods())
def test_two_processes_with_matryoshka_terms_train_what_one_process_trains(method, launched):
    """The prefix terms use the same gathered contrastive term as the full one, and the inference head (supervised
    SimCSE's MLP) is used outside DDP's forward: 2 processes must still step as 1 with the whole batch."""
    name = method.name
    ranks, (single,) = (records(launched / f"{name}-{n}-matryoshka" / "out") for n in (2, 1))
    assert len(ranks) == 2
    if method.one_process is None:  # no one-process equivalent (`Method.one_process`)
        assert all(math.isfinite(loss) for rank in ranks for loss in rank["losses"])
        return
    averaged = [(a + b) / 2 for a, b in zip(ranks[0]["losses"], ranks[1]["losses"])]
    assert averaged == pytest.approx(single["losses"], rel=1e-6)
    plain = records(launched / f"{name}-1" / "out")[0]
    assert single["losses"][0] != pytest.approx(plain["losses"][0], rel=1e-3)  # the prefix terms are in the loss
    one, two = (load_weights(launched / f"{name}-{n}-matryoshka" / "out" / "checkpoint-2") for n in (1, 2))
    assert_same_weights(one, two, rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------------------------------------------ bad input
def bad_inputs(method: Method, tmp_path: Path) -> dict:
    float_flag = next(f.name for f in config_fields(method.config_class) if f.type is float)
    return {
        "unknown flag": (["--no_such_flag", "1"], "unrecognized arguments: --no_such_flag 1"),
        "a word for a number": ([f"--{float_flag}", "abc"], f"argument --{float_flag}: invalid float value: 'abc'"),
        "not finite": ([f"--{float_flag}", "nan"], f"--{float_flag}"),
        "no such config": (["--config", str(tmp_path / "missing.yaml")], "no such file"),
        "a missing train file": (["--train_file", str(tmp_path / "missing.txt")], "missing.txt"),
        "a mini-batch of 0": (["--mini_batch_size", "0"], "--mini_batch_size"),
        **({} if method.gradient_caching else {
            "gradient caching where it does not apply": (["--mini_batch_size", "4"], "--mini_batch_size")}),
    }


@pytest.mark.parametrize("method", methods())
def test_bad_input_is_one_line_exit_2_and_writes_nothing(method, tiny_backbone, tmp_path, capsys):
    output = tmp_path / "out"
    for case, (flags, message) in bad_inputs(method, tmp_path).items():
        argv = ["train", method.name, "--model_name_or_path", str(tiny_backbone), "--output_dir", str(output), *flags]
        assert cli.main(argv) == 2, case
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (case, lines)
        assert not output.exists(), case

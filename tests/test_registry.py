"""The method registry (csekit/methods.py) is the one list of methods: every list in the library derives from it, and a
method registered from outside csekit, with no other edit, is exported, trainable, publishable and covered by the
conformance suite."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import REPO_ROOT, load_weights
from csekit.methods import METHODS, Method, OneProcess, get_method, register


def test_every_list_of_methods_in_the_library_is_the_registry():
    from transformers import AutoConfig, AutoModel

    import csekit
    import csekit.modeling
    import csekit.trainers
    from csekit.cli import recipe_names
    from csekit.publishing.model_card import MODEL_CARDS_DIR, card_template

    assert recipe_names() == list(METHODS)
    for method in METHODS.values():
        for name, reference in method.classes.items():
            assert name in csekit.__all__ and getattr(csekit, name).__name__ == name, name
            package = "csekit.modeling" if reference.startswith("csekit.modeling.") else "csekit.trainers"
            assert name in sys.modules[package].__all__, (package, name)
        config_class = method.config_class
        assert method.model_class in csekit.modeling.MODEL_CLASSES
        assert type(AutoConfig.for_model(config_class.model_type)) is config_class
        assert AutoModel._model_mapping[config_class] is method.model_class
        assert card_template(config_class.model_type) == method.card and (MODEL_CARDS_DIR / method.card).is_file()
        recipe = method.recipe_module.RECIPE
        assert recipe.method is method and recipe.output_dir == f"outputs/{method.name}"
        assert Path(REPO_ROOT / "recipes" / f"{method.name}.py").is_file()  # accelerate launch recipes/NAME.py


def test_a_name_is_registered_once_and_an_unknown_one_is_named():
    with pytest.raises(ValueError, match="already registered"):
        register(METHODS["simcse"])
    with pytest.raises(KeyError, match="registered: simcse"):
        get_method("nope")


PLUGIN = '''
"""A method defined outside csekit: its model files beside csekit's own modeling files (csekit.modeling's path), its
trainer and recipe here, one registry entry."""

import csekit.modeling

csekit.modeling.__path__.append({modeling!r})

from csekit.methods import Method, register  # noqa: E402
from csekit.recipe_run import ContrastiveRecipe, main_guard  # noqa: E402
from csekit.trainers.simcse import SimCSETrainer  # noqa: E402


class ThrowawayTrainer(SimCSETrainer):
    """SimCSE's loss; the model counts its optimizer steps (``after_optimizer_step``)."""


METHOD = register(Method(
    name="throwaway", paper="none (a test)", title="Throwaway", cite="a test", summary="SimCSE under another name",
    card="simcse.md", recipe=__name__,
    config="csekit.modeling.configuration_throwaway:ThrowawayConfig",
    model="csekit.modeling.modeling_throwaway:ThrowawayModel",
    trainer=f"{{__name__}}:ThrowawayTrainer", test_flags=("--pooler_type", "cls"), gradient_caching=True,
))
RECIPE = ContrastiveRecipe(METHOD, description="A throwaway method.")
main = RECIPE.main

if __name__ == "__main__":
    main_guard(main)
'''
CONFIGURATION = '''
from .configuration_simcse import SimCSEConfig


class ThrowawayConfig(SimCSEConfig):
    model_type = "csekit-throwaway"
'''
MODELING = '''
import torch

from .configuration_throwaway import ThrowawayConfig
from .modeling_simcse import SimCSEModel


class ThrowawayModel(SimCSEModel):
    config_class = ThrowawayConfig

    def __init__(self, config):
        super().__init__(config)
        self.register_buffer("optimizer_steps", torch.zeros((), dtype=torch.long))

    def after_optimizer_step(self):
        self.optimizer_steps += 1
'''


def write_throwaway(root: Path) -> Path:
    """The throwaway method's files under ``root``: ``plugins/throwaway_plugin.py`` and its model files in
    ``modeling/`` (with links to csekit's modeling files, which ``trust_remote_code`` copies beside them)."""
    import csekit.modeling

    modeling, plugins = root / "modeling", root / "plugins"
    modeling.mkdir(parents=True)
    plugins.mkdir()
    for source in Path(csekit.modeling.__file__).parent.glob("*.py"):
        if source.name != "__init__.py":
            (modeling / source.name).symlink_to(source)
    (modeling / "configuration_throwaway.py").write_text(textwrap.dedent(CONFIGURATION))
    (modeling / "modeling_throwaway.py").write_text(textwrap.dedent(MODELING))
    (plugins / "throwaway_plugin.py").write_text(PLUGIN.format(modeling=str(modeling)))
    return plugins


def test_a_method_registered_outside_csekit_is_covered_by_the_conformance_suite(tmp_path):
    """Its files and one ``register`` call, no other edit: every conformance test collects a case for it and
    passes, and its per-optimizer-step hook ran once per update."""
    plugins = write_throwaway(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugins), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "throwaway_plugin", "-rA",
               "tests/test_conformance.py", "-k", "throwaway"]
    result = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    passed = {line.split("::")[1].split("[")[0] for line in result.stdout.splitlines() if line.startswith("PASSED")}
    import test_conformance

    tests = {name for name in dir(test_conformance) if name.startswith("test_")}
    gpu_only = {"test_half_precision_runs_the_encoder_in_half_and_keeps_the_losses_float32"}  # bf16 case passes
    declared = set()  # tests of a capability the method declares it lacks (it has no frozen network)
    for reason, test in (("declares no frozen network", "test_a_frozen_network_gets_no_gradient_and_no_optimizer_slot"),
                         ("declares no loss term besides its contrastive one",
                          "test_each_declared_loss_term_moves_the_loss_and_the_gradients_with_its_weight"),
                         ("declares no text augmentation of its views",
                          "test_each_declared_augmentation_makes_views_that_differ_from_the_sentence")):
        if f"throwaway: {reason}" in result.stdout or f"throwaway: its training model {reason}" in result.stdout:
            declared.add(test)
    assert passed | declared == tests | gpu_only & passed, sorted(tests - passed - declared)


@pytest.mark.boundary  # a Trainer callback
def test_the_per_optimizer_step_hook_runs_once_per_update(tmp_path, tiny_backbone, corpus):
    """With 2 accumulated micro-batches per update, 3 updates call ``after_optimizer_step`` 3 times, and the count
    (a buffer) is in the checkpoint, so a resumed run continues it."""
    plugins = write_throwaway(tmp_path)
    sys.path.insert(0, str(plugins))
    try:
        import throwaway_plugin
        out = tmp_path / "out"
        throwaway_plugin.main([
            "--model_name_or_path", str(tiny_backbone), "--train_file", str(corpus), "--output_dir", str(out),
            "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "2", "--max_steps", "3",
            "--save_steps", "3", "--eval_strategy", "no", "--load_best_model_at_end", "false", "--max_seq_length",
            "16", "--do_test_eval", "false", "--disable_tqdm", "true", "--pooler_type", "cls",
            "--keep_checkpoints", "true"])
        assert int(load_weights(out / "checkpoint-3")["optimizer_steps"]) == 3
    finally:
        sys.path.remove(str(plugins))
        sys.modules.pop("throwaway_plugin", None)
        METHODS.pop("throwaway", None)


def test_method_capabilities_are_declared_with_their_meaning():
    for method in METHODS.values():
        assert isinstance(method, Method)
        assert method.one_process is None or isinstance(method.one_process, OneProcess), method.name
        assert method.test_data in ("sentences", "pairs") and method.stochastic, method.name


def test_a_capability_is_declared_data_never_a_mode_string():
    """A capability is a flag, a table or a structure the suite reads (``OneProcess``, ``stochastic``...), never a
    string naming a mode that shared code would branch on; strings are a method's identity and its files (and the
    key of its test data)."""
    import dataclasses
    import typing

    identity = {"name", "paper", "title", "cite", "summary", "config", "model", "trainer", "recipe", "card",
                "training_model", "test_data",
                "not_on_decoders", "no_lora"}  # reasons said to the user; code reads only whether there is one
    hints = typing.get_type_hints(Method)
    strings = {item.name for item in dataclasses.fields(Method) if str in (hints[item.name],
                                                                            *typing.get_args(hints[item.name]))}
    assert strings == identity


def test_the_method_tables_are_the_registrys():
    """README's table is the registry's, row for row (the training-free extraction row follows it); the docs' front
    page renders it at build time (docs/hooks.py)."""
    from csekit.methods import method_table

    readme = (REPO_ROOT / "README.md").read_text()
    assert f"\n{method_table('docs/methods/')}\n| [Training-free extraction]" in readme
    assert "<!-- method table -->" in (REPO_ROOT / "docs" / "index.md").read_text()


def test_which_method_takes_each_shared_flag_is_rendered_from_the_registry():
    """docs/training.md's flag table and docs/own-data.md's data columns are placeholders the docs build fills from
    the registry (docs/hooks.py); the table's cells are each method's: Matryoshka where its recipe has the flag,
    gradient caching, packing, mixed precision, decoders and LoRA from its capabilities, N processes from
    ``one_process``."""
    import dataclasses

    from csekit.methods import flag_table, titles_taking
    from csekit.trainers.arguments import model_arguments

    assert "<!-- flag table -->" in (REPO_ROOT / "docs" / "training.md").read_text()
    own_data = (REPO_ROOT / "docs" / "own-data.md").read_text()
    assert all(f"<!-- methods taking {shape} -->" in own_data for shape in ("sent0", "sent0,sent1",
                                                                            "sent0,sent1,hard_neg"))
    rows = {line.split(" | ")[0].strip("| "): line.strip("| ").split(" | ")[1:]
            for line in flag_table().splitlines()[2:]}
    assert list(rows) == [method.title for method in METHODS.values()]
    for method in METHODS.values():
        recipe_flags = ({field.name for field in dataclasses.fields(model_arguments(method.config_class))}
                        if method.name != "clsr" else set(vars(method.recipe_module.RECIPE.argument_types()[0])))
        matryoshka, caching, packing, precision, decoders, lora, processes = rows[method.title]
        assert matryoshka == ("yes" if "matryoshka_dims" in recipe_flags else "no"), method.name
        assert (caching, packing, precision, decoders, lora) == tuple("yes" if value else "no" for value in (
            method.gradient_caching, method.packing, method.mixed_precision, not method.not_on_decoders,
            not method.no_lora)), method.name
        assert processes.startswith("train what one process") == (method.one_process is not None), method.name
    assert titles_taking(("sent0", "sent1", "hard_neg")) == "SimCSE"
    assert titles_taking(("sent0", "sent1", "hard_neg_1..k")) == "SimCSE"


def test_no_hand_kept_list_of_methods():
    """No page, card, docstring or package description lists three or more registered methods by hand (such lists
    went stale as methods were added): which method does what is rendered from the registry. docs/reproduce.md is
    the exception: it says what each paper printed, a fact about those papers."""
    import re

    titles = sorted((method.title for method in METHODS.values()), key=len, reverse=True)
    title = "(?:" + "|".join(map(re.escape, titles)) + r")(?:\s*\([^)]*\))?"
    separator = r"(?:,\s+(?:and\s+)?|\s+and\s+|\s*/\s*)"
    listing = re.compile(rf"(?<![\w-]){title}{separator}{title}{separator}{title}")
    paths = [REPO_ROOT / "README.md", REPO_ROOT / "setup.cfg", *(REPO_ROOT / "docs").rglob("*.md"),
             *(REPO_ROOT / "model_cards").glob("*.md"),
             *(path for folder in ("csekit", "modeling", "trainers", "recipes")
               for path in (REPO_ROOT / folder).rglob("*.py") if not path.is_symlink())]
    found = [(path.relative_to(REPO_ROOT).as_posix(), match.group(0)) for path in paths
             if path.name != "reproduce.md" for match in listing.finditer(path.read_text())]
    assert not found, found


def overridden_hooks(cls) -> list:
    """``(base class, name)`` of each method ``cls`` or a class between it and csekit's shared bases defines over a
    method of those bases (``pool_tokens``, ``head``, ``compute_losses``, ``default_collator`` ...)."""
    import inspect

    from csekit.modeling.modeling_encoder import SentenceEncoderForTraining, SentenceEncoderPreTrainedModel
    from csekit.trainers.trainer import ContrastiveTrainer

    shared = [base for base in (SentenceEncoderForTraining, SentenceEncoderPreTrainedModel, ContrastiveTrainer)
              if issubclass(cls, base)]
    hooks = []
    for base in shared:
        for klass in cls.__mro__[: cls.__mro__.index(base)]:
            for name, value in vars(klass).items():
                base_value = inspect.getattr_static(base, name, None)
                function, base_function = getattr(value, "__func__", value), getattr(base_value, "__func__", base_value)
                if callable(function) and callable(base_function) and not isinstance(function, type):
                    hooks.append((klass, base, name))
    return hooks


@pytest.mark.parametrize("method", list(METHODS.values()), ids=lambda method: method.name)
def test_every_override_of_a_shared_hook_takes_every_argument_the_base_passes(method):
    """A base-class hook whose signature grows (``pool_tokens(..., encoder=)``) cannot leave a method's override
    behind: each override accepts every parameter of the base's, by name, and requires no other."""
    import inspect

    hooks = [hook for cls in {method.model_class, method.training_model_class, method.trainer_class}
             for hook in overridden_hooks(cls) if not hook[2].startswith("__")]
    checked = 0
    for klass, base, name in hooks:
        ours = inspect.signature(getattr(klass, name))
        theirs = inspect.signature(getattr(base, name))
        takes_any = any(p.kind is p.VAR_KEYWORD for p in ours.parameters.values())
        missing = [p for p in theirs.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
                   and p.name not in ours.parameters and not takes_any]
        extra = [p.name for p in ours.parameters.values() if p.default is p.empty
                 and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in theirs.parameters]
        assert not missing and not extra, (f"{klass.__name__}.{name} vs {base.__name__}.{name}: "
                                           f"missing {[p.name for p in missing]}, extra required {extra}")
        checked += 1
    assert checked  # every method overrides at least one shared hook (its loss or its head)

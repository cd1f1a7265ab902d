"""csekit as a library people install: one namespace, a lean import with no side effect, no import cycle, recipes
that run three ways with flags taken from the model configs, a wheel that works outside the checkout, declared
dependencies that are used, and a Dockerfile whose CUDA build is one argument away."""

import ast
import configparser
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from conftest import REPO_ROOT, BoundedProcess

PACKAGE_DIRS = {"csekit": "csekit", "csekit.modeling": "modeling", "csekit.trainers": "trainers",
                "csekit.recipes": "recipes", "csekit.model_cards": "model_cards"}


def fresh_python(code: str, cwd=None, timeout: int = 300) -> subprocess.CompletedProcess:
    """``code`` in a new interpreter, by default in an empty temporary folder: not the checkout's parent, where a
    clone named ``csekit`` (what ``git clone`` makes) would be imported as a namespace package."""
    with tempfile.TemporaryDirectory() as neutral:
        return subprocess.run([sys.executable, "-c", code], cwd=cwd or neutral, capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def csekit_modules() -> dict:
    """``{module name: source path}`` of every module csekit installs (the package_dir mapping of setup.cfg)."""
    modules = {}
    for package, folder in PACKAGE_DIRS.items():
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            relative = path.relative_to(REPO_ROOT / folder).with_suffix("")
            parts = [p for p in relative.parts if p != "__init__"]
            modules[".".join([package, *parts])] = path
    return modules


# ------------------------------------------------------------------------------------------------ the namespace
@pytest.mark.core("setup.cfg's text")
def test_setup_installs_one_namespace_over_the_design_card_folders():
    config = configparser.ConfigParser()
    config.read(REPO_ROOT / "setup.cfg")
    mapping = dict(line.split(" = ") for line in config["options"]["package_dir"].strip().splitlines())
    assert mapping == PACKAGE_DIRS
    packages = config["options"]["packages"].split()
    assert all(name == "csekit" or name.startswith("csekit.") for name in packages)
    assert config["options.entry_points"]["console_scripts"].strip() == "csekit = csekit.cli:main"


@pytest.mark.core("the checkout's links and sys.path")
def test_the_checkouts_csekit_folder_is_the_whole_package():
    """csekit/modeling, csekit/trainers, ... link the design card's folders, so the checkout on sys.path (pytest's
    ``pythonpath = .``, an editor) resolves ``csekit.modeling`` to the same files a plain install holds."""
    for package, folder in PACKAGE_DIRS.items():
        if package != "csekit":
            link = REPO_ROOT / "csekit" / package.split(".")[1]
            assert link.is_symlink() and link.resolve() == (REPO_ROOT / folder).resolve(), link
    result = fresh_python("import csekit.modeling, csekit.trainers.runner, csekit.recipes.simcse; "
                          "print(csekit.modeling.__file__)", cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith(str(REPO_ROOT / "csekit" / "modeling"))


def test_import_csekit_registers_models_and_is_lean():
    # what transformers loads by itself for a model class (transformers 5.15 imports sklearn with BertModel)
    baseline = fresh_python("import sys, transformers; from transformers import PreTrainedModel, BertModel; "
                            "print(sorted(m for m in ('jinja2', 'sklearn', 'matplotlib') if m in sys.modules))")
    code = (
        "import sys\n"
        "import csekit\n"
        "from transformers import AutoConfig, AutoModel\n"
        "from csekit import SimCSEModel, WhitenedCSEModel, CMLMCSEModel, CLSRModel\n"
        "for cls in (SimCSEModel, WhitenedCSEModel, CMLMCSEModel, CLSRModel):\n"
        "    config = AutoConfig.for_model(cls.config_class.model_type)\n"
        "    assert type(config) is cls.config_class and AutoModel._model_mapping[cls.config_class] is cls\n"
        "print(sorted(m for m in ('jinja2', 'sklearn', 'matplotlib', 'datasets', 'sentence_transformers') "
        "if m in sys.modules))\n"
        "from csekit import SimCSETrainer, STSEvaluator\n"  # the lazy names resolve
    )
    result = fresh_python(code)
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = eval(result.stdout.strip().splitlines()[-1])
    # jinja2 is imported by transformers itself (its chat-template utilities); csekit adds none of these
    assert loaded == eval(baseline.stdout.strip().splitlines()[-1])
    assert "matplotlib" not in loaded


REGISTRATION_ORDERS = {
    "csekit, then AutoModel": "import csekit\nfrom transformers import AutoModel\n",
    "csekit, then AutoConfig alone": "import csekit\nfrom transformers import AutoConfig\n",
    "transformers' Auto classes first": "from transformers import AutoModel\nimport csekit\n",
    "the trainers (transformers imported half-way)": "import csekit.trainers\n",
    "a csekit model module directly": "import csekit.modeling.modeling_encoder\n",
    "sentence-transformers after csekit": "import csekit\nimport sentence_transformers\n",
}


def registration_code(order: str) -> str:
    return (
        "import sys\nimport csekit\n"
        "assert not {'torch', 'transformers'} & set(sys.modules), sorted({'torch', 'transformers'} & set(sys.modules))"
        "\n"
        + REGISTRATION_ORDERS[order] +
        "from transformers import AutoConfig\n"
        "from transformers.models.auto.configuration_auto import CONFIG_MAPPING\n"
        "assert type(AutoConfig.for_model('csekit-simcse')).__name__ == 'SimCSEConfig'\n"
        "from transformers import AutoModel\n"
        "assert AutoModel._model_mapping[type(AutoConfig.for_model('csekit-clsr'))].__name__ == 'CLSRModel'\n"
        "assert not [f for f in sys.meta_path if type(f).__module__.startswith('csekit')]\n"
        "print('ok')\n"
    )


def test_import_csekit_loads_no_torch_and_registers_whatever_the_import_order(tmp_path):
    """``import csekit`` alone loads neither torch nor transformers; the registration runs when transformers' Auto
    classes arrive, whichever import brings them, and leaves no import hook behind. Every import order runs in a
    fresh interpreter of its own, all started at once (one test: the interpreters run once, on one worker)."""
    neutral = tmp_path / "neutral"  # not the checkout's parent (see fresh_python)
    neutral.mkdir()
    running = {order: BoundedProcess([sys.executable, "-c", registration_code(order)], 300, cwd=neutral,
                                     env={**os.environ, "HF_HUB_OFFLINE": "1"}) for order in REGISTRATION_ORDERS}
    results = {order: process.wait(check=False) for order, process in running.items()}
    failed = {order: result.stderr[-1500:] for order, result in results.items()
              if result.returncode != 0 or not result.stdout.strip().endswith("ok")}
    assert not failed, failed


HELP_COMMANDS = (["--help"], ["evaluate", "--help"], ["compare", "--help"], ["extract", "--help"], ["card", "--help"],
                 ["push", "--help"], ["export-st", "--help"], ["download", "--help"], ["train", "--help"])


def test_command_line_help_imports_no_torch():
    """``csekit --help`` and every sub-command's help load none of the heavy libraries (the time it takes is in
    benchmarks/import_time.py)."""
    code = (
        "import contextlib, io, sys\nfrom csekit.cli import main\n"
        f"for argv in {HELP_COMMANDS!r}:\n"
        "    with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "        assert main(argv) == 0, argv\n"
        "    assert 'usage: csekit' in out.getvalue(), argv\n"
        "print(sorted(m for m in ('torch', 'transformers', 'scipy', 'sklearn', 'matplotlib', 'datasets', 'jinja2', "
        "'huggingface_hub') if m in sys.modules))\n"
    )
    result = fresh_python(code)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"


def third_party_imports() -> list:
    """``(module, names)`` for every non-csekit import in csekit's modules (``from module import names``)."""
    found = {}
    for path in csekit_modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    found.setdefault(alias.name, set())
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module != "__future__":
                found.setdefault(node.module, set()).update(alias.name for alias in node.names)
    return sorted((module, sorted(names)) for module, names in found.items() if module.split(".")[0] != "csekit")


# the global state a library must leave as it found it; read before and after importing csekit's modules
GLOBAL_STATE = """
def global_state():
    import logging, os, random, warnings
    import matplotlib, numpy, torch, transformers
    root = logging.getLogger()
    return {
        "matplotlib backend": matplotlib.rcParams._get_backend_or_none(),
        "root logger": (root.level, [type(handler).__name__ for handler in root.handlers]),
        "transformers verbosity": transformers.logging.get_verbosity(),
        "environment": sorted(os.environ.items()),
        "warning filters": [repr(f) for f in warnings.filters],
        "torch threads": torch.get_num_threads(),
        "torch default dtype": str(torch.get_default_dtype()),
        "float32 matmul precision": torch.get_float32_matmul_precision(),
        "grad enabled": torch.is_grad_enabled(),
        "deterministic algorithms": torch.are_deterministic_algorithms_enabled(),
        "torch random state": torch.random.get_rng_state().tolist(),
        "numpy random state": str(numpy.random.get_state()),
        "python random state": random.getstate(),
    }
"""


def test_importing_every_module_has_no_global_side_effect():
    """Importing csekit changes no process-wide setting (logging, environment, warnings, torch/numpy/random state,
    matplotlib's backend). The third-party modules csekit imports are imported first: their own effects are not
    csekit's."""
    names = [name for name in csekit_modules() if not name.startswith("csekit.recipes.") and name != "csekit.__main__"]
    code = GLOBAL_STATE + (
        "import importlib\n"
        f"for module, names in {third_party_imports()!r}:\n"
        "    try:\n"
        "        imported = importlib.import_module(module)\n"
        "        for name in names:\n"
        "            getattr(imported, name, None)\n"  # resolves lazy attributes (transformers' lazy modules)
        "    except ImportError:\n"  # an optional extra that is not installed
        "        pass\n"
        "import torch\n"
        "torch.set_num_threads(3)\n"  # not a value a module would pick (the suite runs with OMP_NUM_THREADS=1)
        "before = global_state()\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        "after = global_state()\n"
        "changed = [key for key in before if before[key] != after[key]]\n"
        "assert not changed, [(key, before[key], after[key]) if key != 'environment' else\n"
        "                     (key, sorted(set(after[key]) ^ set(before[key]))) for key in changed]\n"
        "import matplotlib.pyplot\n"  # pyplot can still pick the user's backend
        "print('ok')\n"
    )
    result = fresh_python(code)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


def module_imports(name: str, path: Path) -> set:
    """csekit modules imported at module level by ``name`` (imports inside functions are lazy and excluded)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            candidates = [module] + [f"{module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        found.update(c for c in candidates if c == "csekit" or c.startswith("csekit."))
    return found


@pytest.mark.core("csekit's own imports, read from its source")
def test_no_import_cycle_and_layers_point_one_way():
    modules = csekit_modules()
    graph = {name: {m for m in module_imports(name, path) if m in modules and m != name}
             for name, path in modules.items()}
    # a package imports its __init__ first: an edge into a package also reaches the package's own imports
    state = {}

    def visit(node, stack):
        state[node] = "open"
        for successor in graph[node]:
            if state.get(successor) == "open":
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(successor):] + [successor]))
            if successor not in state:
                visit(successor, stack + [successor])
        state[node] = "done"

    for node in graph:
        if node not in state:
            visit(node, [node])
    # layers: the method registry imports nothing of csekit; the model files import nothing of csekit outside
    # csekit.modeling (their package file reads the registry); evaluation does not import extraction, publishing or
    # trainers
    assert not graph["csekit.methods"]
    for name, imports in graph.items():
        if name.startswith("csekit.modeling."):
            assert all(m.startswith("csekit.modeling") for m in imports), (name, imports)
        if name == "csekit.modeling":
            assert all(m.startswith("csekit.modeling") or m == "csekit.methods" for m in imports), (name, imports)
        if name.startswith("csekit.evaluation"):
            assert not any(m.startswith(("csekit.extraction", "csekit.publishing", "csekit.trainers"))
                           for m in imports), (name, imports)
        # training apart from publishing: the training stages (csekit.trainers) never import the card, the Hub push
        # or the run that adds them (csekit.recipe_run)
        if name.startswith("csekit.trainers"):
            assert not any(m.startswith(("csekit.publishing", "csekit.recipe_run")) for m in imports), (name, imports)


@pytest.mark.parametrize("model_class, expected", [
    ("SimCSEModel", {"adapters", "bidirectional", "configuration_encoder", "configuration_simcse",
                     "decoder_tokenizer", "encoding", "errors", "folder_commit", "modeling_encoder", "modeling_simcse",
                     "packing", "pooler_types", "pooling", "prompts", "sentence_transformers_layout"}),
    ("CLSRModel", {"adapters", "bidirectional", "configuration_clsr", "configuration_encoder",
                   "decoder_tokenizer", "encoding", "errors", "folder_commit", "modeling_clsr", "modeling_encoder",
                   "packing", "pooler_types", "pooling", "prompts", "sentence_transformers_layout"}),
])
def test_saved_folder_carries_only_the_code_its_class_needs(model_class, expected, tmp_path, tokenizer):
    import csekit
    from conftest import tiny_bert_config

    model_cls = getattr(csekit, model_class)
    model = model_cls(model_cls.config_class(encoder_config=tiny_bert_config().to_dict()))
    model.tokenizer = tokenizer
    model.save_pretrained(tmp_path)
    assert {path.stem for path in tmp_path.glob("*.py")} == expected


# ------------------------------------------------------------------------------------------------ the recipes
def flags(help_text: str) -> set:
    return set(re.findall(r"--(\w+)", help_text))


@pytest.mark.core("three doors to one parser give one flag set")
def test_recipes_run_from_the_checkout_the_package_and_the_cli(tmp_path):
    commands = {}
    for method in ("simcse", "clsr"):
        commands[method, "checkout"] = [sys.executable, str(REPO_ROOT / "recipes" / f"{method}.py"), "--help"]
        commands[method, "module"] = [sys.executable, "-m", f"csekit.recipes.{method}", "--help"]
        commands[method, "cli"] = [sys.executable, "-m", "csekit", "train", method, "--help"]
    running = {key: BoundedProcess(command, 300, cwd=tmp_path) for key, command in commands.items()}  # at once
    outputs = {key: flags(process.wait().stdout) for key, process in running.items()}
    for method in ("simcse", "clsr"):
        assert outputs[method, "checkout"] == outputs[method, "module"] == outputs[method, "cli"]


def test_inherited_flags_that_csekit_runs_differently_say_what_it_does():
    """``TrainingArguments``' own help is wrong for three flags of the Trainer-based recipes: csekit resumes from
    'last', pushes once after the test scores, and needs an extra for TensorBoard."""
    import dataclasses

    from csekit.recipes.simcse import RECIPE

    helps = {f.name: f.metadata.get("help", "") for cls in RECIPE.argument_types() for f in dataclasses.fields(cls)}
    assert "'last'" in helps["resume_from_checkpoint"]
    assert "once, after the test evaluation" in helps["push_to_hub"]
    assert "csekit[tensorboard]" in helps["report_to"]


def test_recipe_help_is_grouped_and_short_and_help_all_has_every_flag(monkeypatch, capsys):
    """Through the command's ``main``, in this process (at argparse's default width): ``--help`` prints the shipped
    text, ``--help-all`` the recipe parser's."""
    from csekit import cli

    monkeypatch.setenv("COLUMNS", "80")
    assert cli.main(["train", "simcse", "--help"]) == 0
    short = capsys.readouterr().out
    assert cli.main(["train", "simcse", "--help-all"]) == 0
    full = capsys.readouterr().out
    sections = [line for line in short.splitlines() if line and not line.startswith(" ") and line.endswith(":")]
    assert sections[-3:] == ["method: the model config's fields (the paper's defaults):", "data and evaluation:",
                             "training (the common flags; --help-all lists every one):"]
    assert "--temperature" in short and "--learning_rate" in short and "--adam_beta1" not in short
    assert "--adam_beta1" in full and len(short.splitlines()) < 250 < len(full.splitlines())


def test_every_recipe_speaks_one_vocabulary_and_takes_method_flags_from_the_config():
    import dataclasses

    from csekit.methods import METHODS
    from csekit.options import FLAG_NAMES
    from csekit.trainers.arguments import config_fields, docstring_arguments

    shared = {"model_name_or_path", "train_file", "data_dir", "do_test_eval", "output_dir", "seed", "report_to",
              "per_device_train_batch_size", "num_train_epochs", "learning_rate", "config"}
    for method in METHODS:
        module = METHODS[method].recipe_module
        types, config_class = module.RECIPE.argument_types(), module.RECIPE.config_class
        names = {f.name for cls in types for f in dataclasses.fields(cls)} | {"config"}
        assert shared <= names, (method, shared - names)
        model_fields = {f.name: f for f in dataclasses.fields(types[0])}
        helps = docstring_arguments(config_class)
        for field in config_fields(config_class):
            flag = model_fields[FLAG_NAMES.get(field.name, field.name)]
            default = flag.default_factory() if flag.default is dataclasses.MISSING else flag.default
            expected = field.default_factory() if field.default is dataclasses.MISSING else field.default
            assert default == expected and flag.metadata["help"] == helps[field.name], (method, field.name)
        # no method setting is declared twice: every model flag but the backbone is a config field
        assert set(model_fields) - {"model_name_or_path"} == {FLAG_NAMES.get(f.name, f.name)
                                                              for f in config_fields(config_class)}


def test_shipped_configs_are_found_by_name(tmp_path):
    from csekit.recipes.simcse import RECIPE

    model, data, training, _ = RECIPE.parse(["--config", "quickstart", "--output_dir", str(tmp_path)])
    assert model.model_name_or_path == "all-MiniLM-L6-v2" and training.max_steps == 100
    with pytest.raises(SystemExit):
        RECIPE.parse(["--config", "no_such_config"])


# ------------------------------------------------------------------------------------------------ the wheel
def test_built_wheel_works_outside_the_checkout(tmp_path, saved_tiny_model):
    # built from a copy of the sources: setuptools reuses the checkout's build/ folder, where a file dropped from
    # package_data lingers from an earlier build and the wheel would still ship it
    source = tmp_path / "source"
    for name in ("setup.cfg", "pyproject.toml", "README.md", *PACKAGE_DIRS.values()):
        if (REPO_ROOT / name).is_dir():
            shutil.copytree(REPO_ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            source.mkdir(exist_ok=True)
            shutil.copy2(REPO_ROOT / name, source / name)
    wheels = tmp_path / "wheels"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                            "--wheel-dir", str(wheels), str(source)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = wheels.glob("csekit-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for needed in ("csekit/__init__.py", "csekit/cli.py", "csekit/modeling/modeling_simcse.py",
                   "csekit/trainers/runner.py", "csekit/recipes/simcse.py", "csekit/recipes/configs/quickstart.yaml",
                   "csekit/model_cards/simcse.md", "csekit/model_cards/generic.md", "csekit/evaluation/sts.py",
                   "csekit/extraction/grid.py", "csekit/publishing/csekit_st.py"):
        assert needed in names, needed
    # every data file of the checkout's packages (card templates, shipped configs), not only the ones named above
    data_files = [f"csekit/{path.relative_to(REPO_ROOT).as_posix()}" for pattern in ("model_cards/*.md",
                  "recipes/configs/**/*.yaml") for path in sorted(REPO_ROOT.glob(pattern))]
    missing = [name for name in data_files if name not in names]
    assert data_files and missing == [], missing
    top_level = {name.split("/")[0] for name in names if not name.startswith("csekit-")}
    assert top_level == {"csekit"}, top_level  # no top-level modeling/ or trainers/
    (tmp_path / "names.txt").write_text("\n".join(names))

    site = tmp_path / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(site),
                              str(wheel)], capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-3000:]
    model = tmp_path / "model"
    shutil.copytree(saved_tiny_model, model)
    tasks = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness", "avg")
    (model / "eval_results.json").write_text('{"model": "m", "pooler": "avg", "sts": {%s}}'
                                             % ", ".join(f'"{t}": 50.0' for t in tasks))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    prelude = (  # the checkout and its editable install are out of reach: only the wheel's files can be imported
        "import sys\n"
        f"sys.path = [{str(site)!r}] + [p for p in sys.path if p not in ('', {str(REPO_ROOT)!r}) and "
        "'__editable__' not in p]\n"
        "sys.meta_path = [f for f in sys.meta_path if '__editable__' not in getattr(f, '__module__', '')]\n"
        "import csekit, csekit.cli\n"
        f"assert csekit.__file__.startswith({str(site)!r}), csekit.__file__\n"
        "sys.argv = ['csekit'] + sys.argv[1:]\n"
        "sys.exit(csekit.cli.main())\n"
    )
    for args in (["evaluate", "--help"], ["card", str(model), "--figure", "never"]):
        result = subprocess.run([sys.executable, "-c", prelude, *args], cwd=elsewhere, capture_output=True, text=True,
                                timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        assert result.returncode == 0, (args, result.stderr[-3000:])
    assert "## Evaluation" in (model / "README.md").read_text() or "Spearman" in (model / "README.md").read_text()


# ------------------------------------------------------------------------------------------------ dependencies
IMPORT_NAMES = {"scikit-learn": "sklearn", "pyyaml": "yaml", "huggingface_hub": "huggingface_hub"}
# declared without being imported: pinned because they decide results (README "Dependencies" says so)
PINNED_TRANSITIVE = {"tokenizers"}


@pytest.mark.core("setup.cfg against csekit's source")
def test_every_declared_dependency_is_used_or_dropped_with_a_reason():
    config = configparser.ConfigParser()
    config.read(REPO_ROOT / "setup.cfg")
    requirements = [re.split(r"[=<>\[ ]", line.strip())[0].lower() for line in
                    config["options"]["install_requires"].strip().splitlines()]
    imported = set()
    for path in csekit_modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                imported.add(node.module.split(".")[0])
    unused = [name for name in requirements if IMPORT_NAMES.get(name, name.replace("-", "_")) not in imported
              and name not in PINNED_TRANSITIVE]
    assert unused == [], f"declared but never imported by csekit: {unused}"
    readme = (REPO_ROOT / "docs" / "install.md").read_text()
    assert "evaluate" not in requirements and re.search(r"`evaluate`.*(not a dependency|dropped)", readme)
    assert all(f"`{name}`" in readme for name in PINNED_TRANSITIVE)


def declared_requirements() -> list:
    config = configparser.ConfigParser()
    config.read(REPO_ROOT / "setup.cfg")
    lines = config["options"]["install_requires"].strip().splitlines()
    for extra in config["options.extras_require"].values():
        lines += extra.strip().splitlines()
    return [line.strip() for line in lines if line.strip()]


def read_pins(name: str) -> dict:
    from packaging.requirements import Requirement

    pins = {}
    for line in (REPO_ROOT / "tests" / name).read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            requirement = Requirement(line)
            pins[requirement.name.lower().replace("_", "-")] = next(iter(requirement.specifier)).version
    return pins


@pytest.mark.core("setup.cfg against the constraint files")
def test_dependencies_are_ranges_tested_at_both_ends():
    """setup.cfg: a lower bound and the next major above the newest tested release as the upper bound, for every
    library; tests/constraints.txt pins the newest versions tested, tests/constraints-min.txt exactly the lower
    bounds (.ci/run runs the suite with each)."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    newest, oldest = read_pins("constraints.txt"), read_pins("constraints-min.txt")
    for line in declared_requirements():
        requirement = Requirement(line)
        name = requirement.name.lower().replace("_", "-")
        lower = next(spec.version for spec in requirement.specifier if spec.operator == ">=")
        assert Version(oldest[name]) == Version(lower), f"constraints-min.txt pins {name}=={oldest[name]}, not {lower}"
        if name == "setuptools":  # a build tool of the wheel test (torch's floor); the newest run takes pip's own
            continue
        operators = {spec.operator for spec in requirement.specifier}
        assert operators == {">=", "<"}, f"{line}: wants a lower bound and an upper bound"
        upper = next(spec.version for spec in requirement.specifier if spec.operator == "<")
        assert requirement.specifier.contains(newest[name]), f"{name}=={newest[name]} is outside {line}"
        assert upper == str(Version(newest[name]).major + 1), f"{line}: the upper bound is the next major"
    run = (REPO_ROOT / "tests" / "run.sh").read_text()
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert "CSEKIT_CONSTRAINTS" in run and "tests/constraints-min.txt" in ci


def test_installed_next_to_sentence_transformers_and_mteb_pip_check_is_clean():
    """The test environment holds csekit, sentence-transformers and mteb together (``csekit[test]``, installed by
    tests/run.sh): pip finds no broken or conflicting requirement."""
    pytest.importorskip("mteb")
    pytest.importorskip("sentence_transformers")
    result = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.core("the Dockerfile's text")
def test_dockerfile_builds_cpu_by_default_and_cuda_by_one_argument():
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu$", dockerfile, re.M)
    assert 'pip install --index-url "$TORCH_INDEX" torch==2.13.0' in dockerfile
    assert "HF_HUB_OFFLINE" not in dockerfile
    readme = (REPO_ROOT / "docs" / "install.md").read_text()
    assert "docker build -t csekit ." in readme and "--build-arg TORCH_INDEX=" in readme


@pytest.mark.core("csekit's own imports")
def test_no_import_loop_between_csekits_modules():
    """No two csekit modules import each other, directly or through others, at module level or inside a function
    (an import inside a function is still a dependency a reader and a tool must follow): the import graph of every
    module csekit installs, read from the sources, has no cycle."""
    import ast

    modules = csekit_modules()
    packages = {name for name, path in modules.items() if path.name == "__init__.py"}
    graph = {}
    for name, path in modules.items():
        package = name if name in packages else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parent + ([base] if base else []))
                candidates = [f"{base}.{alias.name}" for alias in node.names] + [base]
            elif isinstance(node, ast.Import):
                candidates = [alias.name for alias in node.names]
            else:
                continue
            targets.update(c for c in candidates if c in modules and c != name and c not in packages)
        graph[name] = targets

    def cycle_from(start):
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for target in graph[node]:
                if target == start:
                    return path
                if target not in seen:
                    seen.add(target)
                    stack.append((target, path + [target]))
        return None

    loops = {tuple(sorted(found)) for found in map(cycle_from, graph) if found}
    assert not loops, loops

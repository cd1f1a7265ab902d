"""``csekit train METHOD --help`` prints the text shipped in ``recipes/help/``: the live rendering of the recipe's
parser, printed without importing torch or transformers (``csekit/recipe_help.py``)."""

import subprocess
import sys

import pytest

from csekit.methods import METHODS
from csekit.recipe_help import HEADER, help_dir, render_help, shipped_help, transformers_version


@pytest.mark.parametrize("method", list(METHODS))
def test_shipped_help_is_the_live_rendering(method):
    """A recipe whose flags change without `python -m csekit.recipe_help` fails here (under the transformers version
    the files were rendered with; another version renders live)."""
    header = (help_dir() / f"{method}.txt").read_text().partition("\n")[0]
    if header != HEADER + str(transformers_version()):
        pytest.skip(f"shipped help rendered with another transformers ({header}); this version renders it live")
    assert shipped_help(method) == render_help(method)


def header_matches(method) -> bool:
    return (help_dir() / f"{method}.txt").read_text().partition("\n")[0] == HEADER + str(transformers_version())


def test_train_help_loads_neither_torch_nor_transformers_and_other_versions_render_live(monkeypatch, capsys):
    code = ("import sys\nfrom csekit.cli import main\nassert main(['train', 'simcse', '--help']) == 0\n"
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--inference_max_length" in result.stdout and "Turn --mlp_only_train off" in result.stdout
    if shipped_help("simcse") is not None:
        assert result.stdout.strip().splitlines()[-1] == "[]"
    rendered_with_this_version = header_matches("simcse")
    # a transformers version the text was not rendered with: the parser renders it live, the same flags
    monkeypatch.setattr("csekit.recipe_help.transformers_version", lambda: "0.0.0")
    assert shipped_help("simcse") is None
    from csekit.cli import main

    assert main(["train", "simcse", "--help"]) == 0
    live = capsys.readouterr().out
    assert "--inference_max_length" in live
    # rendered at the shipped text's width whatever the terminal: the same lines as the shipped file
    shipped = (help_dir() / "simcse.txt").read_text().partition("\n")[2]
    assert max(map(len, live.splitlines())) > 80 and len(live.splitlines()) < 250
    if rendered_with_this_version:
        assert live == shipped


@pytest.mark.parametrize("method", list(METHODS), ids=str)
def test_a_recipes_help_lists_its_own_paper_configs_only(method):
    """``--config``'s help names the shared configs and the paper configs whose header runs this recipe (their
    YAML headers, csekit.paper_configs), not another method's."""
    import re

    from csekit.paper_configs import paper_configs

    text = " ".join(render_help(method).split())
    shipped = re.search(r"the name of one shipped with csekit \(([^)]*)\)", text).group(1)
    listed = set(re.findall(r"paper/\w+", shipped))
    assert listed == {f"paper/{config.name}" for config in paper_configs() if config.recipe == method}

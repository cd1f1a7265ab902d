"""``csekit train METHOD --help`` without importing torch or transformers: the help text, rendered once from the
recipe's parser, ships in ``recipes/help/METHOD.txt``.

A recipe's ``--help`` is built from its config class and transformers' ``TrainingArguments``, whose imports take
seconds; the text they give is fixed by csekit's sources and transformers' version. So the rendered text ships with
the package, headed by the transformers version it was rendered with, and is printed as it is when that version is
the installed one; any other version renders it live (the same text, seconds slower). ``tests/test_recipe_help.py``
checks that each shipped file equals the live rendering; ``python -m csekit.recipe_help`` writes them again.
"""

import contextlib
import importlib.util
import io
import os
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Optional

WIDTH = "100"  # the terminal width the help is rendered for (argparse reads COLUMNS)
HEADER = "# csekit train --help, rendered with transformers "


def help_dir() -> Path:
    """``recipes/help`` of the installed package, found without importing it."""
    return Path(importlib.util.find_spec("csekit.recipes").submodule_search_locations[0]) / "help"


def transformers_version() -> Optional[str]:
    try:
        return version("transformers")
    except PackageNotFoundError:
        return None


def shipped_help(method: str) -> Optional[str]:
    """The shipped help of ``method``, or ``None`` when there is none for the installed transformers version."""
    path = help_dir() / f"{method}.txt"
    if not path.is_file():
        return None
    header, _, text = path.read_text(encoding="utf-8").partition("\n")
    return text if header == HEADER + str(transformers_version()) else None


def render_help(method: str) -> str:
    """The help of ``method``'s recipe parser, rendered live at `WIDTH` columns."""
    from .methods import get_method

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    output = io.StringIO()
    try:
        with contextlib.redirect_stdout(output), contextlib.suppress(SystemExit):
            get_method(method).recipe_module.main(["--help"], prog=f"csekit train {method}")
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous
    return output.getvalue()


def help_text(method: str) -> str:
    """``method``'s help: the shipped text, or the live rendering at the same width under another transformers."""
    text = shipped_help(method)
    return render_help(method) if text is None else text


def write_help_files() -> list:
    """Render every registered method's help into ``recipes/help/`` (run after changing a recipe's flags)."""
    from .methods import METHODS

    folder = help_dir()
    folder.mkdir(exist_ok=True)
    written = []
    for method in METHODS:
        path = folder / f"{method}.txt"
        path.write_text(HEADER + str(transformers_version()) + "\n" + render_help(method), encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write_help_files():
        print(path)
    sys.exit(0)

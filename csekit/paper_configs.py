"""The papers' headline rows, one shipped recipe config each (``recipes/configs/paper/NAME.yaml``), read from the
files' headers.

A paper config starts with a commented YAML mapping, then the command that runs it::

    # paper:
    #   row: SimCSE unsup., bert-base (SimCSE Table 5)
    #   score: 76.25 (7 tasks)
    #   weights: bert-base-uncased
    #   compute: 2.10 TFLOP/step x 15,625 steps = 32.8 PFLOP
    #   settings: {per_device_train_batch_size: 64, learning_rate: 3.0e-05, ...}
    # ...the sources and readings, in words...
    #   accelerate launch recipes/simcse.py --config paper/simcse_bert_base

``settings`` are the paper's values as its text and the authors' scripts give them (written from those, beside the
words that cite them); the file's body must hold each of them (``tests/test_paper_configs.py``).
docs/reproduce.md's table and the methods' pages are rendered from these headers
([`reproduce_table`][csekit.paper_configs.reproduce_table]), so a new paper config needs no edit anywhere else.
"""

import re
from dataclasses import dataclass
from itertools import takewhile
from pathlib import Path

import yaml

FIELDS = ("row", "score", "weights", "compute", "settings")
COMMAND = re.compile(r"^#\s+accelerate launch recipes/(?P<recipe>\w+)\.py --config paper/(?P<name>\w+)\s*$")
SCORE = re.compile(r"^\d+\.\d\d \(\d+ tasks\)$")


@dataclass(frozen=True)
class PaperConfig:
    """One paper config's header: ``name`` (the file's stem, ``--config paper/NAME``), the ``recipe`` its command
    runs, and the ``paper:`` mapping's fields."""

    name: str
    recipe: str
    row: str
    score: str
    weights: str
    compute: str
    settings: dict

    def commands(self) -> tuple:
        """The command from a checkout and the command from an installed csekit."""
        return (f"accelerate launch recipes/{self.recipe}.py --config paper/{self.name}",
                f"accelerate launch -m csekit.recipes.{self.recipe} --config paper/{self.name}")


def configs_dir() -> Path:
    """The YAML configurations shipped with the recipes (``recipes/configs`` = ``csekit.recipes/configs``)."""
    from importlib.resources import files

    return Path(str(files("csekit.recipes") / "configs"))


def paper_dir() -> Path:
    return configs_dir() / "paper"


def read_paper_config(path: Path) -> PaperConfig:
    """The header of the paper config at ``path``; a header that is missing, malformed or does not name its own
    file is a ``ValueError`` of one line."""
    path = Path(path)
    comments = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        comments.append(line)
    block = []
    if "# paper:" in comments:  # the mapping: its key line and the indented lines under it
        below = comments[comments.index("# paper:") + 1:]
        block = ["paper:", *(line[2:] for line in takewhile(lambda line: line.startswith("#   "), below))]
    try:
        header = yaml.safe_load("\n".join(block)) if block else None
    except yaml.YAMLError as error:
        reason = getattr(error, "problem", None) or type(error).__name__
        raise ValueError(f"{path}: its 'paper:' header is not valid YAML ({reason})") from None
    fields = header.get("paper") if isinstance(header, dict) else None
    if not isinstance(fields, dict) or set(fields) != set(FIELDS):
        raise ValueError(f"{path}: the header must start with a commented 'paper:' mapping of {', '.join(FIELDS)}")
    if not SCORE.match(str(fields["score"])) or not isinstance(fields["settings"], dict):
        raise ValueError(f"{path}: 'score' must read like '76.25 (7 tasks)' and 'settings' be a mapping")
    commands = [match for match in map(COMMAND.match, comments) if match]
    if len(commands) != 1 or commands[0]["name"] != path.stem:
        raise ValueError(f"{path}: the header must name its command once: accelerate launch recipes/METHOD.py "
                         f"--config paper/{path.stem}")
    return PaperConfig(name=path.stem, recipe=commands[0]["recipe"], **{key: fields[key] for key in FIELDS})


def paper_configs() -> list:
    """Every shipped paper config, in the method registry's order, then by name."""
    from .methods import METHODS

    order = {name: index for index, name in enumerate(METHODS)}
    configs = [read_paper_config(path) for path in paper_dir().glob("*.yaml")]
    return sorted(configs, key=lambda config: (order.get(config.recipe, len(order)), config.name))


def reproduce_table(recipe=None) -> str:
    """docs/reproduce.md's table (Markdown), a row per paper config or per config of ``recipe`` only, then its
    commands in a shell block: a table cell is no place to copy a command from."""
    configs = [config for config in paper_configs() if recipe is None or config.recipe == recipe]
    rows = ["| paper row | paper's score | config | weights | training compute (counted) |",
            "|---|---:|---|---|---|"]
    rows += [f"| {config.row} | {config.score} | `paper/{config.name}` | {config.weights} | {config.compute} |"
             for config in configs]
    if not configs:
        return "\n".join(rows)
    block = ["", "Each row's command, from a checkout and from an installed csekit:", "", "```bash"]
    for config in configs:
        block += [f"# {config.row}", *config.commands()]
    return "\n".join(rows + block + ["```"])


__all__ = ["PaperConfig", "paper_configs", "read_paper_config", "reproduce_table"]

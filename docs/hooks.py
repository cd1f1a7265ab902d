"""MkDocs hooks: the Methods section of the navigation comes from the method registry (every registered method has
its page, ``docs/methods/NAME.md``), and a public name of the API reference's modules without a docstring is a
warning, which ``mkdocs build --strict`` turns into a failed build."""

import inspect
import logging
from importlib import import_module
from pathlib import Path

log = logging.getLogger("mkdocs.plugins.csekit")
API_MODULES = ("csekit.methods", "csekit.trainers.runner", "csekit.trainers.augmentations",
               "csekit.trainers.arguments", "csekit.trainers.trainer", "csekit.modeling.modeling_encoder")


def on_config(config):
    from csekit.methods import METHODS

    docs = Path(config["docs_dir"])
    pages = []
    for name in METHODS:
        page = f"methods/{name}.md"
        if not (docs / page).is_file():
            log.warning("method %s is registered but has no page %s", name, page)
        pages.append(page)
    for entry in config["nav"]:
        if isinstance(entry, dict) and "Methods" in entry:
            extra = [item for item in entry["Methods"] if not str(item).startswith("methods/") or
                     isinstance(item, dict)]
            entry["Methods"] = pages + [item for item in extra if not isinstance(item, str)]
    return config


def on_page_markdown(markdown, page, config, files):
    """A method page's ``<!-- paper rows -->``: the rows of reproduce.md's table that run its recipe."""
    if "<!-- paper rows -->" not in markdown:
        return markdown
    name = Path(page.file.src_path).stem
    table = [line for line in (Path(config["docs_dir"]) / "reproduce.md").read_text(encoding="utf-8").splitlines()
             if line.startswith("|")]
    rows = [line for line in table[2:] if f"recipes/{name}.py" in line]
    if not rows:
        log.warning("%s: no row of reproduce.md runs recipes/%s.py", page.file.src_path, name)
    return markdown.replace("<!-- paper rows -->", "\n".join(table[:2] + rows))


def on_pre_build(config):
    for module_name in API_MODULES:
        module = import_module(module_name)
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            if getattr(value, "__module__", module_name) != module_name or not callable(value):
                continue
            if not inspect.getdoc(value):
                log.warning("%s.%s has no docstring", module_name, name)
            if inspect.isclass(value):
                for member, function in vars(value).items():
                    if (not member.startswith("_") and inspect.isfunction(function)
                            and not inspect.getdoc(function)):
                        log.warning("%s.%s.%s has no docstring", module_name, name, member)

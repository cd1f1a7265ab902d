"""MkDocs hooks (mkdocs.yml ``hooks:``; not a page: ``exclude_docs`` keeps it out of the site).

* The API reference reads the installed layout: setup.cfg installs ``modeling/`` as ``csekit.modeling`` (and
  ``trainers/``, ``recipes/``, ``model_cards/`` likewise), which a reader of the checkout's folders cannot see, so the
  build lays that package out once in a temporary folder of links and mkdocstrings reads it there: every object is
  documented under the name it is imported by (``csekit.modeling.modeling_simcse.SimCSEModel``).
* The Methods section of the navigation and the API reference's per-method entries come from the method registry
  (every registered method has its page, ``docs/methods/NAME.md``); reproduce.md's ``<!-- paper table -->`` and a
  method page's ``<!-- paper rows -->`` are rendered from the paper configs' headers (``csekit.paper_configs``).
* Equations are rendered at build time: pymdownx.arithmatex marks them, and each becomes MathML (latex2mathml), which
  browsers draw without a script, so the site has no math renderer to fetch from elsewhere.
* A public name of the API reference's modules without a docstring is a warning, which ``mkdocs build --strict``
  turns into a failed build.
"""

import html
import inspect
import logging
import re
from importlib import import_module
from pathlib import Path

try:
    from mkdocs.plugins import event_priority
except ImportError:  # docs/check_site.py reads API_MODULES here where mkdocs is not installed (the test run)
    def event_priority(priority):
        return lambda function: function

log = logging.getLogger("mkdocs.plugins.csekit")
API_MODULES = ("csekit.methods", "csekit.trainers.runner", "csekit.recipe_run", "csekit.evaluation.run_scores",
               "csekit.trainers.augmentations",
               "csekit.trainers.arguments", "csekit.trainers.trainer", "csekit.modeling.modeling_encoder",
               "csekit.evaluation.sts", "csekit.evaluation.encoders", "csekit.publishing.model_card",
               "csekit.publishing.hub", "csekit.publishing.onnx_export", "csekit.evaluation.score_cache",
               "csekit.paper_configs")
MATH = re.compile(r'<(?P<tag>span|div) class="arithmatex">\s*(?:\\\((?P<inline>.*?)\\\)|\\\[(?P<block>.*?)\\\])\s*'
                  r'</(?P=tag)>', re.S)


@event_priority(100)  # before mkdocstrings' own on_config, which starts its handlers with these paths
def on_config(config):
    from csekit.methods import METHODS

    root = Path(config["config_file_path"]).parent
    handler = config["plugins"]["mkdocstrings"].config["handlers"]["python"]
    handler["paths"] = [str(root)]  # the checkout's csekit/ is the whole package (its sub-packages are links)
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


METHODS_TAKING = re.compile(r"<!-- methods taking ([a-z_0-9,.]+) -->")


def methods_taking(columns: str) -> str:
    """``<!-- methods taking sent0,sent1 -->``: the registered methods that train on data with those columns."""
    from csekit.methods import titles_taking

    return titles_taking(tuple(columns.split(",")))


def method_api() -> str:
    """The API reference's entries of every registered method: its model, training model, trainer and further
    exports (the registry's classes, under the modules that define them); its config, with every field's type and
    default, is on the method's page."""
    from csekit.methods import METHODS

    blocks = []
    for name, method in METHODS.items():
        config = method.config.replace(":", ".")
        blocks.append(f"### {name}\n\nConfig: [`{config.rsplit('.', 1)[-1]}`][{config}] (on the method's page).\n")
        training = (method.training_model,) if method.training_model else ()
        for reference in (method.model, *training, method.trainer, *method.exports):
            blocks.append(f"::: {reference.replace(':', '.')}\n    options:\n      heading_level: 4\n")
    return "\n".join(blocks)


def paper_rows(markdown: str, page) -> str:
    """A method page's ``<!-- paper rows -->``: the rows of reproduce.md's table that run its recipe."""
    from csekit.paper_configs import reproduce_table

    name = Path(page.file.src_path).stem
    table = reproduce_table(name)
    if table.count("\n") < 2:
        log.warning("%s: no paper config (recipes/configs/paper/) runs recipes/%s.py", page.file.src_path, name)
    return markdown.replace("<!-- paper rows -->", table)


def on_page_markdown(markdown, page, config, files):
    if "<!-- paper table -->" in markdown:
        from csekit.paper_configs import reproduce_table

        markdown = markdown.replace("<!-- paper table -->", reproduce_table())
    if "<!-- paper rows -->" in markdown:
        markdown = paper_rows(markdown, page)
    if "<!-- method table -->" in markdown:
        from csekit.methods import method_table

        markdown = markdown.replace("<!-- method table -->", method_table("methods/"))
    if "<!-- flag table -->" in markdown:
        from csekit.methods import flag_table

        markdown = markdown.replace("<!-- flag table -->", flag_table())
    markdown = METHODS_TAKING.sub(lambda match: methods_taking(match.group(1)), markdown)
    if "<!-- method api -->" in markdown:
        markdown = markdown.replace("<!-- method api -->", method_api())
    return markdown


def mathml(match: re.Match) -> str:
    from latex2mathml.converter import convert

    block = match.group("block") is not None
    latex = html.unescape(match.group("block") if block else match.group("inline"))
    return convert(latex.strip(), display="block" if block else "inline")


def on_page_content(content, page, config, files):
    """Every equation arithmatex marked, as MathML."""
    return MATH.sub(mathml, content)


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

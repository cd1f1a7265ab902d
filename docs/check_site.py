"""Checks of the built documentation site (``python3 docs/check_site.py SITE``; .ci/run runs it after
``mkdocs build --strict``): what a reader would see as broken, read from the HTML itself.

* no raw LaTeX outside rendered math (``\\(``, ``\\[``, ``$$`` delimiters, ``\\frac``-like commands in text), and no
  failed conversion inside it (an ``<merror>``, a LaTeX command left as text);
* no Sphinx role text (``:class:`X```): cross-references are links;
* no list left as paragraph text (a line starting ``1. `` or ``- `` inside a ``<p>``);
* no code block line wider than 88 columns (a reader copies it without scrolling sideways);
* no table cell holding several code spans stacked on lines of their own (commands go in lists or blocks);
* every public name has an anchor: each name in the ``__all__`` of ``csekit`` and of the API reference's modules, and
  each registered method's config, model and trainer, under the module that defines it;
* no Python file of the build (``hooks.py``) published as a page asset.

Exit status 1 with one line per problem, 0 when the site is clean.
"""

import html
import re
import sys
from importlib import import_module
from pathlib import Path

HIDDEN = re.compile(r"<(math|code|pre|script|style)\b.*?</\1>", re.S | re.I)
TAGS = re.compile(r"<[^>]+>")
RAW_LATEX = re.compile(r"\\\(|\\\)|\\\[|\\\]|\$\$|\\(?:frac|mathrm|sum|tau|lambda|log|sqrt|top|cdot|exp)\b|[_^]\{")
SPHINX_ROLE = re.compile(r":(?:class|func|data|mod|meth|attr|obj|exc|py:\w+):`")
ANCHOR = re.compile(r'\bid="([^"]+)"')


def visible_text(page: str) -> str:
    """The page's text as a reader sees it outside rendered math and code."""
    return html.unescape(TAGS.sub(" ", HIDDEN.sub(" ", page)))


MATH_ELEMENT = re.compile(r"<math\b.*?</math>", re.S | re.I)
ANNOTATION = re.compile(r"<annotation\b.*?</annotation>", re.S | re.I)
LATEX_COMMAND = re.compile(r"\\[A-Za-z]+")


def math_problems(name: str, page: str) -> list:
    """Rendered math whose conversion failed: an ``<merror>``, or a LaTeX command left as text inside ``<math>``
    (its source annotation aside), which a reader sees as ``\\arg``."""
    problems = []
    for element in MATH_ELEMENT.findall(page):
        shown = html.unescape(TAGS.sub(" ", ANNOTATION.sub(" ", element)))
        match = LATEX_COMMAND.search(shown)
        if "<merror" in element.lower() or match:
            problems.append(f"{name}: a failed math conversion: {' '.join(shown.split())[:80]}")
    return problems


PARAGRAPH = re.compile(r"<p\b[^>]*>(.*?)</p>", re.S | re.I)
LIST_LINE = re.compile(r"^\s*(?:\d+\.|[-*+]) \S", re.M)


def list_problems(name: str, page: str) -> list:
    """A Markdown list that did not render: a paragraph with a line that starts ``1. `` or ``- `` (a list after a
    paragraph without a blank line, or indented less than its item)."""
    problems = []
    for paragraph in PARAGRAPH.findall(HIDDEN.sub(" ", page)):
        match = LIST_LINE.search(html.unescape(TAGS.sub("", paragraph)))
        if match:
            problems.append(f"{name}: a list that did not render: {match.group(0).strip()}...")
    return problems


CODE_BLOCK = re.compile(r"<pre\b[^>]*>(.*?)</pre>", re.S | re.I)
CODE_WIDTH = 88  # columns a code block shows without a sideways scroll on a laptop-width page


def code_problems(name: str, page: str) -> list:
    """A code block line wider than ``CODE_WIDTH`` columns: the reader scrolls sideways to copy it."""
    problems = []
    for block in CODE_BLOCK.findall(page):
        for line in html.unescape(TAGS.sub("", block)).splitlines():
            if len(line) > CODE_WIDTH:
                problems.append(f"{name}: a code line of {len(line)} columns (at most {CODE_WIDTH}): {line[:60]}...")
    return problems


TABLE_CELL = re.compile(r"<t[dh]\b[^>]*>(.*?)</t[dh]>", re.S | re.I)
STACKED_CODE = re.compile(r"</code>\s*<br\s*/?>\s*<code>", re.I)


def table_problems(name: str, page: str) -> list:
    """A table cell holding code spans stacked on lines of their own: commands to copy belong in a list or a block,
    where each is one line a reader selects whole."""
    return [f"{name}: a table cell holding several commands: {html.unescape(TAGS.sub(' ', cell)).strip()[:60]}..."
            for cell in TABLE_CELL.findall(page) if STACKED_CODE.search(cell)]


def page_problems(name: str, page: str) -> list:
    """Raw LaTeX and Sphinx role text on one page, math whose conversion failed, lists that did not render, code
    lines wider than a page, commands stacked in a table cell."""
    problems = math_problems(name, page) + list_problems(name, page) + code_problems(name, page)
    problems += table_problems(name, page)
    text = visible_text(page)
    for pattern, what in ((RAW_LATEX, "raw LaTeX"), (SPHINX_ROLE, "Sphinx role text")):
        match = pattern.search(text)
        if match:
            context = " ".join(text[max(0, match.start() - 40):match.end() + 40].split())
            problems.append(f"{name}: {what}: ...{context}...")
    if SPHINX_ROLE.search(TAGS.sub(" ", page)) and not SPHINX_ROLE.search(text):  # roles inside code spans too
        problems.append(f"{name}: Sphinx role text in a code span")
    return problems


def exported_names() -> list:
    """Each callable in the ``__all__`` of ``csekit`` and of the API reference's modules, as ``module.name`` of the
    module that defines it (a re-exported name is anchored where it is defined: that module needs a ``:::`` entry)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from hooks import API_MODULES

    names = []
    for module_name in ("csekit", *API_MODULES):
        module = import_module(module_name)
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            defined = getattr(value, "__module__", None)
            if callable(value) and defined and defined.startswith("csekit"):
                names.append(f"{defined}.{getattr(value, '__qualname__', name)}")
    return names


def public_names() -> list:
    """Every name the reference must anchor: the exported names and each registered method's config, model and
    trainer (their pages are generated from the registry)."""
    from csekit.methods import METHODS

    names = exported_names()
    for method in METHODS.values():
        names.extend(reference.replace(":", ".") for reference in (method.config, method.model, method.trainer))
    return sorted(set(names))


def site_problems(site: Path) -> list:
    problems, anchors = [], set()
    for path in sorted(site.rglob("*.html")):
        page = path.read_text(encoding="utf-8")
        anchors.update(ANCHOR.findall(page))
        problems.extend(page_problems(str(path.relative_to(site)), page))
    problems.extend(f"{path.relative_to(site)}: a build file published" for path in site.rglob("*.py"))
    problems.extend(f"no anchor for the public name {name}" for name in public_names() if name not in anchors)
    return problems


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python3 docs/check_site.py SITE_DIR", file=sys.stderr)
        return 2
    problems = site_problems(Path(argv[0]))
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

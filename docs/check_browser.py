"""The built site as a reader's browser shows it (``python3 docs/check_browser.py SITE [SHOTS]``; .ci/run runs it
after ``docs/check_site.py`` when a Chromium binary is present).

Every page is served from a loopback HTTP server and rendered by headless Chromium (the system's ``chromium``,
driven by playwright: ``pip install playwright``, no browser download) at a laptop's width, 1280 x 800:

* no code block overflows its box: each ``<pre>``'s code fits without a sideways scroll;
* math renders: each ``<math>`` element has a size on the page (Chromium lays out MathML itself);
* every internal link resolves: its page exists and, with a ``#fragment``, that page has the element;
* the copy button and the syntax highlighting of code blocks are there (the theme's script ran).

A screenshot of the front page, the Python page, the training page and one method page is written to ``SHOTS``
(default ``SITE/../site-screenshots``), the build's artefact. Exit status 1 with one line per problem, 0 when clean,
2 when no Chromium or playwright can be found.
"""

import functools
import http.server
import shutil
import sys
import threading
from pathlib import Path
from urllib.parse import urldefrag, urlparse

VIEWPORT = {"width": 1280, "height": 800}
SCREENSHOTS = {"index.html": "front", "python/index.html": "python", "training/index.html": "training",
               "methods/simcse/index.html": "method-simcse"}

# one call per page: what the reader sees, measured in the page
MEASURE = """() => {
  const overflowing = [...document.querySelectorAll("pre > code")]
    .filter(code => code.scrollWidth > code.clientWidth + 1)
    .map(code => (code.textContent.split("\\n").find(line => line.length > 0) || "").slice(0, 60));
  const unrendered = [...document.querySelectorAll("math")]
    .filter(math => { const box = math.getBoundingClientRect(); return !(box.width > 0 && box.height > 0); })
    .map(math => (math.getAttribute("alttext") || math.textContent).slice(0, 60));
  const blocks = document.querySelectorAll("pre > code").length;
  return {
    overflowing, unrendered, blocks,
    copy: document.querySelectorAll("pre .md-clipboard, .md-code__nav .md-code__button, button.md-clipboard").length,
    highlighted: document.querySelectorAll(".highlight pre > code").length,
    links: [...document.querySelectorAll("a[href]")].map(a => a.href),
    ids: [...document.querySelectorAll("[id]")].map(element => element.id),
  };
}"""


def chromium() -> str:
    """The system's Chromium binary, or an empty string."""
    return next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), "")


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(site: Path) -> http.server.ThreadingHTTPServer:
    """The site on a loopback port, served from a thread until ``shutdown()``."""
    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def page_problems(name: str, seen: dict) -> list:
    """What one page's measurement says a reader would see as broken."""
    problems = [f"{name}: a code block wider than its box: {line}..." for line in seen["overflowing"]]
    problems += [f"{name}: math that did not render: {text}..." for text in seen["unrendered"]]
    if seen["blocks"] and seen["highlighted"] < seen["blocks"]:
        problems.append(f"{name}: {seen['blocks'] - seen['highlighted']} of {seen['blocks']} code blocks have no "
                        "syntax highlighting")
    if seen["blocks"] and seen["copy"] < seen["blocks"]:
        problems.append(f"{name}: {seen['blocks'] - seen['copy']} of {seen['blocks']} code blocks have no copy button")
    return problems


def link_problems(base: str, pages: dict, site: Path) -> list:
    """Each internal link of ``pages`` (URL path -> measurement) must reach a file of ``site``, and a fragment of a
    page an element of that page."""
    problems = []
    for path, seen in pages.items():
        for href in seen["links"]:
            target, fragment = urldefrag(href)
            if not target.startswith(base):
                continue
            target_path = urlparse(target).path
            target_path += "index.html" if target_path.endswith("/") else ""
            if target_path not in pages:
                if not (site / target_path.lstrip("/")).is_file():
                    problems.append(f"{path.lstrip('/')}: a link to a missing page: {target_path}")
            elif fragment and fragment not in pages[target_path]["ids"]:
                problems.append(f"{path.lstrip('/')}: a link to a missing anchor: {target_path}#{fragment}")
    return problems


def check_site(site: Path, shots: Path) -> list:
    """Render every page of ``site`` in headless Chromium; the problems found, one line each."""
    from playwright.sync_api import sync_playwright

    server = serve(site)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    pages, problems = {}, []
    shots.mkdir(parents=True, exist_ok=True)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
            page = browser.new_page(viewport=VIEWPORT)
            for path in sorted(site.rglob("*.html")):
                name = path.relative_to(site).as_posix()
                page.goto(f"{base}/{name}", wait_until="load")
                seen = page.evaluate(MEASURE)
                pages["/" + name] = seen
                problems += page_problems(name, seen)
                if name in SCREENSHOTS:
                    page.screenshot(path=str(shots / f"{SCREENSHOTS[name]}.png"), full_page=False)
            browser.close()
    finally:
        server.shutdown()
    return problems + link_problems(base, pages, site)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (1, 2):
        print("usage: python3 docs/check_browser.py SITE_DIR [SCREENSHOT_DIR]", file=sys.stderr)
        return 2
    site = Path(argv[0])
    shots = Path(argv[1]) if len(argv) == 2 else site.parent / "site-screenshots"
    try:
        import playwright  # noqa: F401
    except ImportError:
        print("check_browser: playwright is not installed (pip install playwright)", file=sys.stderr)
        return 2
    if not chromium():
        print("check_browser: no Chromium binary on PATH (apt-get install chromium)", file=sys.stderr)
        return 2
    problems = check_site(site, shots)
    for problem in problems:
        print(problem)
    print(f"check_browser: {len(list(site.rglob('*.html')))} pages, screenshots in {shots}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

"""docs/check_browser.py, the real-browser check .ci/run runs on the built site: on a small site rendered in headless
Chromium, each kind of breakage a reader would see is found where it is planted, and a clean page passes. Runs where
a Chromium binary and playwright are installed (Debian's ``chromium``, ``pip install playwright``); skips elsewhere."""

import importlib.util
import sys

import pytest

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "docs"))
import check_browser  # noqa: E402

pytestmark = [
    pytest.mark.skipif(not check_browser.chromium(), reason="no Chromium binary (apt-get install chromium)"),
    pytest.mark.skipif(importlib.util.find_spec("playwright") is None,
                       reason="playwright is not installed (pip install playwright)"),
]

STYLE = "<style>pre > code { display: block; overflow: auto; font: 13px monospace; width: 400px; }</style>"
BLOCK = '<div class="highlight"><pre><button class="md-clipboard"></button><code>{}</code></pre></div>'
MATH = '<math display="block"><mi>x</mi><mo>=</mo><mn>1</mn></math>'


def page(*body: str) -> str:
    return f"<!doctype html><html><head>{STYLE}</head><body>{''.join(body)}</body></html>"


@pytest.fixture(scope="module")
def findings(tmp_path_factory):
    """One render of a site holding a clean page and one page per planted fault."""
    site = tmp_path_factory.mktemp("site")
    (site / "other").mkdir()
    (site / "other" / "index.html").write_text(page('<h2 id="here">here</h2>'))
    (site / "index.html").write_text(page(BLOCK.format("x = 1"), MATH, '<a href="other/#here">ok</a>',
                                          '<a href="https://example.org/missing">outside</a>'))
    (site / "wide.html").write_text(page(BLOCK.format("y = " + "1 + " * 40 + "1")))
    (site / "math.html").write_text(page('<math style="display: none"><mi>z</mi></math>'))
    (site / "links.html").write_text(page('<a href="gone/">a</a><a href="other/#nowhere">b</a>'))
    (site / "bare.html").write_text(page("<pre><code>plain = 1</code></pre>"))
    shots = site.parent / "shots"
    return check_browser.check_site(site, shots), shots


def test_a_clean_page_has_no_problem(findings):
    problems, _ = findings
    assert not [problem for problem in problems if problem.startswith(("index.html", "other/"))]


def test_each_planted_fault_is_found_once(findings):
    problems, shots = findings
    assert sorted(problems) == [
        "bare.html: 1 of 1 code blocks have no copy button",
        "bare.html: 1 of 1 code blocks have no syntax highlighting",
        "links.html: a link to a missing anchor: /other/index.html#nowhere",
        "links.html: a link to a missing page: /gone/index.html",
        "math.html: math that did not render: z...",
        "wide.html: a code block wider than its box: " + ("y = " + "1 + " * 14)[:60] + "...",
    ]
    assert (shots / "front.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # the front page's screenshot

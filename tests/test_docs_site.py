"""docs/check_site.py, the checks .ci/run runs on the built documentation site: each kind of breakage a reader would
see is found on a page that has it, and a clean page passes."""

import re
import sys

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "docs"))
import check_site  # noqa: E402

# rendered math may carry its source as an annotation, which no reader sees
CLEAN = ('<p>The loss <math display="block"><semantics><mi>ℓ</mi><mo>=</mo><mfrac><mi>a</mi><mi>b</mi></mfrac>'
         '<annotation encoding="application/x-tex">\\ell = \\frac{a}{b}</annotation></semantics></math> with '
         '<a href="#csekit.modeling.losses.info_nce_loss"><code>info_nce_loss</code></a>; a price of $5 and '
         '<code>\\(x\\)</code> in code are fine.</p>')


def test_a_clean_page_has_no_problem():
    assert check_site.page_problems("clean.html", CLEAN) == []


def test_raw_latex_outside_rendered_math_is_found():
    for raw in ('<div class="arithmatex">\\[\\ell_i = -\\log x\\]</div>', "<p>$$ a $$</p>",
                "<p>temperature \\tau = 0.05</p>", '<span class="arithmatex">\\(\\tau\\)</span>',
                "<p>Z_k ∈ R^{N×d/k}</p>"):
        [problem] = check_site.page_problems("page.html", CLEAN + raw)
        assert problem.startswith("page.html: raw LaTeX: ")


def test_sphinx_role_text_is_found_in_text_and_in_code():
    [problem] = check_site.page_problems("api.html", "<p>see :class:`SimCSEModel`</p>")
    assert problem.startswith("api.html: Sphinx role text: ")
    assert check_site.page_problems("api.html", "<p>see <code>:func:`encode`</code></p>") == [
        "api.html: Sphinx role text in a code span"]


def test_a_public_name_without_an_anchor_and_a_published_build_file_are_found(tmp_path):
    names = check_site.public_names()
    assert {"csekit.modeling.modeling_simcse.SimCSEModel", "csekit.trainers.simcse.SimCSETrainer",
            "csekit.evaluation.sts.STSEvaluator", "csekit.publishing.model_card.write_model_card"} <= set(names)
    anchors = "".join(f'<h3 id="{name}">x</h3>' for name in names if not name.endswith(".SimCSETrainer"))
    (tmp_path / "api").mkdir()
    (tmp_path / "api" / "index.html").write_text(CLEAN + anchors)
    assert check_site.site_problems(tmp_path) == ["no anchor for the public name csekit.trainers.simcse.SimCSETrainer"]
    (tmp_path / "hooks.py").write_text("")
    assert "hooks.py: a build file published" in check_site.site_problems(tmp_path)


def test_every_exported_name_is_defined_in_a_module_the_reference_renders():
    """The build-free half of the anchor check: a name re-exported from a module the reference renders, but defined in
    one it does not, has no anchor on the site."""
    from hooks import method_api

    pages = "".join(path.read_text() for path in (REPO_ROOT / "docs").rglob("*.md")) + method_api()
    rendered = set(re.findall(r"^::: ([\w.]+)$", pages, re.M))
    assert [name for name in check_site.exported_names()
            if not {name, name.rsplit(".", 1)[0], name.rsplit(".", 2)[0]} & rendered] == []


def test_a_failed_math_conversion_is_found_inside_math():
    for failed in ("<p><math><mi>\\arg</mi><mo>max</mo></math></p>",
                   "<p><math><merror><mtext>\\unknown</mtext></merror></math></p>"):
        [problem] = check_site.page_problems("page.html", CLEAN + failed)
        assert problem.startswith("page.html: a failed math conversion: ")


def test_a_list_left_as_paragraph_text_is_found():
    [problem] = check_site.page_problems("page.html", CLEAN + "<p>each step:\n1. encodes the batch;\n2. computes</p>")
    assert problem == "page.html: a list that did not render: 1. e..."


def test_a_code_line_wider_than_a_page_is_found():
    wide = "x = " + "1 + " * 25 + "1"
    [problem] = check_site.page_problems("python.html", CLEAN + f"<pre><code><span>{wide}</span>\nok</code></pre>")
    assert problem.startswith(f"python.html: a code line of {len(wide)} columns (at most 88)")
    assert check_site.page_problems("python.html", CLEAN + "<pre><code>short = 1</code></pre>") == []


def test_commands_stacked_in_a_table_cell_are_found():
    cell = "<table><tr><td><code>csekit train simcse</code><br><code>csekit card out</code></td></tr></table>"
    [problem] = check_site.page_problems("reproduce.html", CLEAN + cell)
    assert problem == "reproduce.html: a table cell holding several commands: csekit train simcse   csekit card out..."
    one = "<table><tr><td><code>paper/simcse_bert_base</code> and <code>x</code></td></tr></table>"
    assert check_site.page_problems("reproduce.html", CLEAN + one) == []

"""Tests of the book's local Sphinx extensions (book/_ext): author-year citation labels and
per-section numbering of exercises, theorems and figures."""

import sys
from pathlib import Path

import pytest
from pybtex.database import parse_string

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import bibstyle  # noqa: E402
import section_numbers  # noqa: E402


def _labels(bib):
    entries = parse_string(bib, "bibtex").entries
    return {e.key: e.label for e in bibstyle.AuthorYearStyle().format_entries(entries.values())}


def test_author_year_labels_are_distinct_and_follow_the_bibliography_order():
    labels = _labels(r"""
    @misc{b, author = {Collins, Liam and Hassani, Hamed and Mokhtari, Aryan}, title = {Zeta}, year = {2022}}
    @misc{a, author = {Collins, Liam and Mokhtari, Aryan and Oh, Sewoong}, title = {Alpha}, year = {2022}}
    @misc{c, author = {Collins, Liam and Hassani, Hamed and Mokhtari, Aryan}, title = {Old}, year = {2021}}
    @misc{d, author = {Golub, Gene H. and Van Loan, Charles F.}, title = {Matrix}, year = {2013}}
    @misc{e, author = {Kone{\v{c}}n{\'y}, Jakub}, title = {One}, year = {2020}}
    @misc{f, title = {No author}, organization = {Somebody}, year = {2001}}
    """)
    assert labels == {"c": "Collins et al., 2021", "a": "Collins et al., 2022b", "b": "Collins et al., 2022a",
                      "d": "Golub and Van Loan, 2013", "e": "Konečný, 2020", "f": "Somebody, 2001"}
    # the real bibliography: no two entries share a label
    real = _labels((ROOT / "references.bib").read_text())
    assert len(set(real.values())) == len(real)
    assert real["collins2022fedavg"] != real["collins2022maml"]
    assert real["wang2020objective"] != real["wang2020global"]


def test_section_number_from_title():
    assert section_numbers.section_number("5.4 Local-only vs FedAvg") == (5, 4)
    assert section_numbers.section_number("1. Why ARM fails") == (1,)
    assert section_numbers.section_number("B. Reproducing the papers' settings") == ("B",)
    for title in ("Bibliography", "Adaptivity & Shared Representations", "A tour", "5.4Local"):
        assert section_numbers.section_number(title) is None


def test_renumber_per_document_and_kind():
    numbers = {"exercise": {"ex-b": (98,), "ex-a": (97,), "ex-c": (99,)}, "theorem": {"t": (12,)}}
    got = section_numbers.renumber(numbers, (5, 4))
    assert got == {"exercise": {"ex-a": (5, 4, 1), "ex-b": (5, 4, 2), "ex-c": (5, 4, 3)},
                   "theorem": {"t": (5, 4, 1)}}


@pytest.mark.parametrize("title,expected", [("5.4 Local", (5, 4, 1)), ("Bibliography", (7,))])
def test_per_section_numbers_updates_the_environment(title, expected):
    class Title:
        def astext(self):
            return title

    class Env:
        titles = {"doc": Title()}
        toc_fignumbers = {"doc": {"exercise": {"x": (7,)}}}

    env = Env()
    changed = section_numbers.per_section_numbers(None, env)
    assert env.toc_fignumbers["doc"]["exercise"]["x"] == expected
    assert changed == (["doc"] if expected != (7,) else [])


def test_local_mathjax_points_sphinx_at_the_shipped_component(tmp_path):
    import local_mathjax

    es5 = local_mathjax.mathjax_es5()
    assert (es5 / "tex-mml-chtml.js").is_file() and (es5 / "output" / "chtml" / "fonts").is_dir()

    class Config:
        mathjax_path = "https://cdn.example/mathjax.js"

    config = Config()
    local_mathjax.use_local_mathjax(None, config)
    assert config.mathjax_path == "mathjax/tex-mml-chtml.js"  # relative: under _static/

    class App:
        outdir = str(tmp_path)

        class builder:
            format = "html"

    local_mathjax.copy_mathjax(App, None)
    assert (tmp_path / "_static" / "mathjax" / "tex-mml-chtml.js").is_file()
    local_mathjax.copy_mathjax(App, None)  # a rebuild copies over the old copy


def test_local_widgets_serve_the_shipped_html_manager():
    import hashlib

    import local_widgets

    scripts = local_widgets.widget_scripts()
    assert list(scripts) == ["widgets/setup.js", "widgets/require.js", "widgets/embed-amd.js"]
    assert all(not attrs for attrs in scripts.values())  # no CDN attribute (data-jupyter-widgets-cdn)
    static = ROOT / "book" / "_static"
    sources = (static / "widgets" / "SOURCES.txt").read_text()
    for name in ("embed-amd.js", "require.js"):  # the vendored files are the recorded ones
        digest = hashlib.sha256((static / "widgets" / name).read_bytes()).hexdigest()
        assert f"{name}   sha256 {digest}" in sources or f"{name}     sha256 {digest}" in sources
    # the manager's fonts (webpack asset names referenced by the bundle) are all there
    bundle = (static / "widgets" / "embed-amd.js").read_text()
    import re
    fonts = set(re.findall(r'"([0-9a-f]{20}\.woff2?)"', bundle))
    assert fonts and all((static / "widgets" / f).is_file() for f in fonts)

    class Config:
        nb_ipywidgets_js = {"https://cdn.example/require.js": {}}

    config = Config()
    local_widgets.use_local_widgets(None, config)
    assert config.nb_ipywidgets_js == scripts


def test_page_assets_remove_duplicate_inline_scripts():
    import page_assets
    from sphinx.builders.html._assets import _JavaScript

    thebe = "const THEBE_JS_URL = 'x'"
    scripts = [_JavaScript("doctools.js"), _JavaScript(None, body=thebe), _JavaScript("sphinx-thebe.js"),
               _JavaScript("", body=thebe), _JavaScript("", body="var a = 1"), _JavaScript("doctools.js")]
    assert page_assets.unique_scripts(scripts) == [scripts[0], scripts[1], scripts[2], scripts[4]]

    class Builder:
        _js_files = list(scripts)
        _orig_js_files = list(scripts)

    class App:
        builder = Builder

    context = {"script_files": Builder._js_files}
    page_assets.dedupe_scripts(App, "p", "page.html", context, None)
    assert Builder._js_files == Builder._orig_js_files == [scripts[0], scripts[1], scripts[2], scripts[4]]
    assert context["script_files"] is Builder._js_files

    class Config:
        html_static_path = ["_static"]

    page_assets.add_static_path(None, Config)
    page_assets.add_static_path(None, Config)
    assert Config.html_static_path == ["_static", str(ROOT / "book" / "_static")]
    for name in ("math-fit.js", "math-fit.css"):
        assert (ROOT / "book" / "_static" / name).is_file()


def test_works_named_in_the_prose_are_in_the_bibliography():
    """4.9 names Song et al. (2012) and Nguyen, Raghu and Kornblith (2021), 5.7 FedPer (Arivazhagan
    et al., 2019) and LG-FedAvg (Liang et al., 2020); the bibliography lists every entry (:all:)."""
    labels = set(_labels((ROOT / "references.bib").read_text()).values())
    assert {"Song et al., 2012", "Nguyen et al., 2021", "Arivazhagan et al., 2019", "Liang et al., 2020"} <= labels
    assert ":all:" in (ROOT / "book" / "bibliography.md").read_text()

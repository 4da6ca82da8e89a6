"""scripts/check_rendered.py finds raw math and roles in rendered HTML, and nothing else."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "check_rendered.py"
spec = importlib.util.spec_from_file_location("check_rendered", SCRIPT)
check_rendered = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_rendered)
find_stray = check_rendered.find_stray


def kinds(html):
    return [item.split(":")[0] for item in find_stray(html)]


def test_raw_latex_in_prose_is_found():
    # what a $...$ span broken by a list item looks like after the build
    html = "<ul><li><p>\\eta_j \\sum_{s&lt;t}\\sum_i \\nabla_{s,i,j}^2\\big] = </p></li></ul>"
    assert kinds(html) == ["command"] * 5          # \eta \sum \sum \nabla \big
    assert "\\eta_j" in find_stray(html)[0]


def test_stray_dollar_and_roles_are_found():
    assert kinds("<p>the distance is $0.3 from B</p>") == ["dollar"]
    assert kinds("<p>as shown in {glu:text}`fed-dist`</p>") == ["role"]
    assert kinds("<p>see {cite} for details</p>") == ["role"]
    # LaTeX arguments are reported once, with their command, not as roles
    assert kinds("<p>x \\delta_{ce}\\operatorname{diag}(a)</p>") == ["command", "command"]


def test_rendered_math_code_and_outputs_are_not_prose():
    html = """
    <head><title>x</title><script>var a = "$\\\\frac";</script><style>.a{color:red}</style></head>
    <p>Rendered <span class="math notranslate nohighlight">\\(\\eta = 0.5\\)</span> inline and</p>
    <div class="math notranslate nohighlight">\\[ \\sum_j \\frac{a}{b} \\]</div>
    <p>code <code class="docutils literal"><span class="pre">$REPLEARN_DATA</span></code> and</p>
    <div class="highlight"><pre>print(f"{x}\\n")</pre></div>
    <div class="cell_output docutils container"><div class="output stream"><pre>$ \\alpha</pre></div></div>
    <p>plain prose with braces {1, 2} and a price-free sentence.</p>
    """
    assert find_stray(html) == []


def test_nesting_and_unclosed_elements():
    # text after a skipped element is prose again; an unclosed <li> does not hide what follows
    html = "<div class='math'><span>\\alpha</span></div><p><li>one<li>two \\beta</p>"
    assert kinds(html) == ["command"]
    assert kinds("<p>a<br>b<img src='x.png'> \\gamma</p>") == ["command"]


def test_main_reports_pages_and_fails(tmp_path, capsys):
    (tmp_path / "good.html").write_text("<p>fine <span class='math'>\\(x\\)</span></p>")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "bad.html").write_text("<p>broken \\operatorname{dist}</p>")
    (tmp_path / "_static").mkdir()
    (tmp_path / "_static" / "ignored.html").write_text("<p>$ \\x</p>")
    assert check_rendered.main([str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "sub/bad.html: command: ...broken \\operatorname{dist}..." in out
    assert "good.html" not in out and "ignored" not in out
    (tmp_path / "sub" / "bad.html").write_text("<p>fixed</p>")
    assert check_rendered.main([str(tmp_path)]) == 0


@pytest.mark.parametrize("setup", ["missing", "empty"])
def test_main_needs_a_built_book(tmp_path, setup):
    root = tmp_path / "html"
    if setup == "empty":
        root.mkdir()
    assert check_rendered.main([str(root)]) == 2


def test_scripts_that_break_a_page_are_found():
    problems = check_rendered.find_script_problems
    thebe = '<script>const THEBE_JS_URL = "x"; const thebe_selector = ".cell"</script>'
    good = f"""<head><script src="../_static/doctools.js?v=1"></script>{thebe}
      <script>var togglebuttonSelector = '.toggle';</script>
      <script type="application/vnd.jupyter.widget-state+json">{{"state": {{}}}}</script>
      <script type="application/vnd.jupyter.widget-state+json">{{"state": {{}}}}</script>
      <script src="../../_static/widgets/require.js?v=2"></script>
      <script src="../../_static/widgets/embed-amd.js?v=3"></script></head><p>text</p>"""
    assert problems(good) == []
    # the same inline declaration twice throws "Identifier 'THEBE_JS_URL' has already been declared"
    assert [p.split(":")[0] for p in problems(good.replace("</head>", thebe + "</head>"))] == ["duplicate-script"]
    # widgets from a CDN: blank offline
    cdn = good.replace("../../_static/widgets/embed-amd.js?v=3",
                       "https://cdn.jsdelivr.net/npm/@jupyter-widgets/html-manager@1.0.6/dist/embed-amd.js")
    assert [p.split(":")[0] for p in problems(cdn)] == ["external-script", "widgets"]
    assert problems('<script src="//cdn.example/x.js"></script>') == ["external-script: //cdn.example/x.js"]
    # pages without widgets need no manager
    assert problems("<script>var a = 1;</script><p>x</p>") == []


def test_main_reports_script_problems(tmp_path, capsys):
    (tmp_path / "page.html").write_text("<script>const A = 1</script><script>const A = 1</script><p>ok</p>")
    assert check_rendered.main([str(tmp_path)]) == 1
    assert "page.html: duplicate-script: const A = 1" in capsys.readouterr().out

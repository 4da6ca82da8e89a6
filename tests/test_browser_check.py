"""scripts/browser_check.py: page discovery, the rules that decide a failure (on fake
measurements), the console filter, the report and the DevTools transport, all without a browser.
One end-to-end test loads a few tiny pages in headless Chromium when /usr/bin/chromium (or
$CHROMIUM) is installed, and is skipped otherwise."""

import base64
import hashlib
import importlib.util
import os
import shutil
import socket
import threading
import urllib.request
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "browser_check.py"
spec = importlib.util.spec_from_file_location("browser_check", SCRIPT)
bc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bc)


def kinds(view):
    return [kind for kind, _ in bc.judge(view)]


# ----------------------------------------------------------------------------- pages

def test_pages_are_the_books_html_files_without_sphinx_folders(tmp_path):
    for rel in ("index.html", "search.html", "book/intro.html", "book/01_arm/01_model.html",
                "_static/widgets/x.html", "_sources/book/intro.html", "book/_images/y.html", "book/notes.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("<p>x</p>")
    assert bc.discover_pages(tmp_path) == ["book/01_arm/01_model.html", "book/intro.html", "index.html",
                                           "search.html"]
    pages = bc.discover_pages(tmp_path)
    assert bc.select_pages(pages, None) == pages
    assert bc.select_pages(pages, ["book/*"]) == ["book/01_arm/01_model.html", "book/intro.html"]
    assert bc.select_pages(pages, ["01_model", "search.html"]) == ["book/01_arm/01_model.html", "search.html"]


def test_redirect_pages_are_checked_by_their_target(tmp_path):
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "intro.html").write_text("<html><body>intro</body></html>")
    (tmp_path / "index.html").write_text('<meta http-equiv="Refresh" content="0; url=book/intro.html" />')
    (tmp_path / "old.html").write_text("<meta http-equiv='refresh' content='0;url=book/gone.html'>")
    assert bc.redirect_target((tmp_path / "index.html").read_text()) == "book/intro.html"
    assert bc.check_redirect(tmp_path, "index.html") == []
    assert [k for k, _ in bc.check_redirect(tmp_path, "old.html")] == ["redirect"]
    assert bc.check_redirect(tmp_path, "book/intro.html") is None
    # a page with a body is a page, even with a refresh tag in its head
    assert bc.redirect_target('<head><meta http-equiv="refresh" content="30; url=x.html"></head><body>hi</body>') is None


# ----------------------------------------------------------------------------- rules

def clean_view(**changes):
    view = {"timeouts": [], "console": [],
            "document": {"scrollWidth": 385, "clientWidth": 385},
            "frames": [{"desc": "div.bd-article-container", "overflowX": "visible", "scrollWidth": 385, "clientWidth": 385},
                       {"desc": "body", "overflowX": "visible", "scrollWidth": 385, "clientWidth": 385}],
            "spills": [], "clips": [], "outside": [],
            "widgets": [{"model": "m1", "section": "#explore", "subarea": True, "children": 1, "width": 350,
                         "height": 420, "error": ""}],
            "images": [{"src": "/_images/a.png", "alt": "", "complete": True, "naturalWidth": 640}]}
    view.update(changes)
    return view


def test_a_clean_view_passes():
    assert bc.judge(clean_view()) == []


def test_a_document_wider_than_the_viewport_fails_beyond_rounding():
    assert kinds(clean_view(document={"scrollWidth": 515, "clientWidth": 385})) == ["horizontal scroll"]
    assert "515 px wide in a 385 px viewport" in bc.judge(clean_view(document={"scrollWidth": 515, "clientWidth": 385}))[0][1]
    assert kinds(clean_view(document={"scrollWidth": 386, "clientWidth": 385})) == []   # sub-pixel layout


def test_a_box_around_the_column_that_scrolls_or_clips_fails_and_a_visible_one_is_left_to_the_document():
    frame = {"desc": "div.bd-article-container", "scrollWidth": 600, "clientWidth": 385}
    assert kinds(clean_view(frames=[dict(frame, overflowX="auto")])) == ["horizontal scroll"]
    assert "clips sideways" in bc.judge(clean_view(frames=[dict(frame, overflowX="hidden")]))[0][1]
    assert kinds(clean_view(frames=[dict(frame, overflowX="visible")])) == []


def test_an_element_past_the_column_edge_fails():
    code = {"desc": "code.docutils.literal", "text": "replearn.experiments.ch05_fedrep.s07_cifar_personalisation",
            "section": "#overview", "left": 40, "right": 515, "colLeft": 0, "colRight": 385, "hidden": False}
    (kind, detail), = bc.judge(clean_view(spills=[code]))
    assert kind == "out of column"
    assert "replearn.experiments.ch05_fedrep" in detail and "#overview" in detail and "515 px" in detail
    assert kinds(clean_view(spills=[dict(code, left=-30, right=200)])) == ["out of column"]
    assert kinds(clean_view(spills=[dict(code, right=385.8)])) == []                      # rounding
    link = dict(code, desc="a.headerlink", text="#", right=400, hidden=True)
    assert "hidden until hovered" in bc.judge(clean_view(spills=[link]))[0][1]
    icon = {"desc": "svg.fa-angle-right", "text": "", "section": "", "right": 390, "limit": 385, "hidden": False}
    assert kinds(clean_view(outside=[icon])) == ["out of column"]


def test_content_cut_off_by_a_hidden_overflow_fails_and_glyph_overhang_does_not():
    clip = {"desc": "span.math", "text": "p_i(y|x) = ...", "section": "#proof", "overflowX": "hidden",
            "scrollWidth": 749, "clientWidth": 308, "boxLeft": 40, "boxRight": 348, "contentLeft": 40,
            "contentRight": 789}
    (kind, detail), = bc.judge(clean_view(clips=[clip]))
    assert kind == "clipped" and "441 px past its 308 px box" in detail
    # scrollWidth above clientWidth only from glyphs overhanging their boxes: nothing is cut off
    assert kinds(clean_view(clips=[dict(clip, scrollWidth=34, clientWidth=24, boxRight=64, contentRight=64.4)])) == []
    # content past the left edge counts too; a box that scrolls is not clipped; nor a 1-px box
    assert kinds(clean_view(clips=[dict(clip, contentLeft=20, contentRight=300)])) == ["clipped"]
    assert kinds(clean_view(clips=[dict(clip, overflowX="auto")])) == []
    assert kinds(clean_view(clips=[dict(clip, clientWidth=1)])) == []


def test_a_text_output_wider_than_its_box_fails_in_a_wide_window_only():
    # issue 44: at 1400 px a scrolled text output hides its ends ("holds (...)" details, a table's last
    # columns); a phone may scroll it
    text = {"desc": "pre", "text": "FedRep beats FedAvg ...", "section": "#results", "contentWidth": 1210,
            "boxWidth": 748, "line": "FedRep beats FedAvg without a personal head by more than the spread"}
    (kind, detail), = bc.judge(clean_view(viewport=1400, texts=[text]))
    assert kind == "cut off" and "1210 px wide in a 748 px box" in detail and "#results" in detail
    assert "FedRep beats FedAvg without" in detail
    assert kinds(clean_view(viewport=400, texts=[text])) == []                    # a phone may scroll it
    assert kinds(clean_view(viewport=1400, texts=[dict(text, contentWidth=748.6)])) == []   # rounding
    assert kinds(clean_view(texts=[text])) == []                                  # no viewport measured


def test_a_table_column_narrower_than_its_longest_word_fails():
    cell = {"desc": "table.replearn-table", "text": "setting paper code ...", "section": "#cifar",
            "column": 4, "word": "stated", "cellWidth": 30}
    (kind, detail), = bc.judge(clean_view(broken=[cell]))
    assert kind == "squeezed column" and "column 4 is 30 px wide" in detail and '"stated"' in detail
    assert kinds(clean_view(viewport=400, broken=[cell, dict(cell, column=2)])) == ["squeezed column"] * 2


def test_a_widget_that_did_not_render_or_rendered_an_error_fails():
    missing = {"model": "eb84", "section": "#explore", "subarea": False, "children": 0, "width": 0, "height": 0, "error": ""}
    empty = dict(missing, subarea=True)
    flat = dict(missing, subarea=True, children=1, height=0)
    error = dict(missing, subarea=True, children=1, height=40, error="Failed to create view")
    for w in (missing, empty, flat):
        (kind, detail), = bc.judge(clean_view(widgets=[w]))
        assert kind == "widget" and "eb84" in detail and "did not render" in detail
    assert "rendered an error: Failed to create view" in bc.judge(clean_view(widgets=[error]))[0][1]
    # rendered, but two sliders side by side on a phone left each track 0 px wide
    squeezed = dict(missing, subarea=True, children=1, height=296,
                    squeezed=[{"what": "slider", "label": "δ", "width": 0}, {"what": "select", "label": "", "width": 4}])
    assert bc.judge(clean_view(widgets=[squeezed])) == [
        ("widget", 'widget eb84 (in #explore): its slider "δ" is squeezed to 0 px wide, too narrow to use'),
        ("widget", "widget eb84 (in #explore): its select is squeezed to 4 px wide, too narrow to use")]


def test_an_image_that_did_not_load_fails():
    broken = {"src": "/_images/gone.png", "alt": "a figure", "complete": True, "naturalWidth": 0}
    pending = dict(broken, complete=False, naturalWidth=640)
    assert kinds(clean_view(images=[broken, pending])) == ["image", "image"]
    assert "/_images/gone.png" in bc.judge(clean_view(images=[broken]))[0][1]


def test_console_errors_and_timeouts_fail():
    view = clean_view(console=["console.error: boom"], timeouts=["widgets (20 s)"])
    assert sorted(kinds(view)) == ["console", "timeout"]
    assert kinds(clean_view(error="could not check the page: closed")) == ["timeout"]


def test_console_events_that_are_errors():
    msg = bc.console_message
    assert msg("Runtime.consoleAPICalled", {"type": "error", "args": [{"type": "string", "value": "bad"},
                                                                       {"type": "number", "value": 3}]}) \
        == "console.error: bad 3"
    assert msg("Runtime.consoleAPICalled", {"type": "warning", "args": [{"value": "meh"}]}) is None
    assert msg("Runtime.consoleAPICalled", {"type": "log", "args": [{"value": "hi"}]}) is None
    exc = {"exceptionDetails": {"text": "Uncaught", "url": "http://h/_static/x.js", "lineNumber": 9,
                                "exception": {"description": "TypeError: x is undefined\n    at f"}}}
    assert msg("Runtime.exceptionThrown", exc) == "uncaught TypeError: x is undefined at x.js:10"
    missing = {"entry": {"source": "network", "level": "error", "url": "http://h/_static/a.js",
                         "text": "Failed to load resource: 404"}}
    assert msg("Log.entryAdded", missing) == "network: Failed to load resource: 404 (http://h/_static/a.js)"
    assert msg("Log.entryAdded", {"entry": dict(missing["entry"], level="warning")}) is None
    assert msg("Log.entryAdded", {"entry": dict(missing["entry"], url="http://h/favicon.ico")}) is None
    assert msg("Page.loadEventFired", {}) is None


def test_report_lists_failing_views_with_their_failures():
    results = [{"page": "a.html", "width": 400, "failures": []},
               {"page": "b.html", "width": 400, "failures": [("image", "did not load: x.png"), ("console", "e")]}]
    lines, count = bc.format_report(results)
    assert count == 2
    assert lines == ["FAIL b.html at 400 px", "  - image: did not load: x.png", "  - console: e"]


# ----------------------------------------------------------------------------- transport

def test_websocket_accept_key_matches_rfc_6455():
    assert bc.ws_accept("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


@pytest.mark.parametrize("n", [0, 5, 125, 126, 65535, 65536, 200_000])
@pytest.mark.parametrize("mask", [None, b"\x01\x02\xfe\xff"])
def test_frames_round_trip(n, mask):
    payload = bytes(i % 251 for i in range(n))
    frame = bc.encode_frame(payload, 0x1, mask)
    assert bc.decode_frame(frame) == (True, 0x1, payload, len(frame))
    assert bc.decode_frame(frame + b"\x81\x00")[3] == len(frame)       # the next frame is left alone
    for cut in {0, 1, len(frame) // 2, len(frame) - 1} - {len(frame)}:
        assert bc.decode_frame(frame[:cut]) is None                    # incomplete: wait for more
    if mask is not None:
        assert frame[1] & 0x80 and (n < 4 or payload[:4] not in frame)


def test_devtools_port_file():
    assert bc.read_devtools_port("9222\n/devtools/browser/abc-123\n") == "ws://127.0.0.1:9222/devtools/browser/abc-123"
    assert bc.read_devtools_port("9222\n") is None
    assert bc.read_devtools_port("") is None


def test_websocket_client_against_a_tiny_server():
    """Handshake, a masked text frame out, then in: a ping (answered), a message in two fragments."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    seen = {}

    def serve_one():
        conn, _ = server.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(4096)
            key = next(line.split(":", 1)[1].strip() for line in data.decode().split("\r\n")
                       if line.lower().startswith("sec-websocket-key"))
            accept = base64.b64encode(hashlib.sha1((key + bc.WS_GUID).encode()).digest()).decode()
            conn.sendall(f"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                         f"Sec-WebSocket-Accept: {accept}\r\n\r\n".encode())
            buf = b""
            while (frame := bc.decode_frame(buf)) is None:
                buf += conn.recv(4096)
            seen["sent"] = frame[2].decode()
            buf = buf[frame[3]:]
            conn.sendall(bc.encode_frame(b"are you there", 0x9))
            conn.sendall(bytes([0x01, 6]) + b'{"id":' + bytes([0x80, 3]) + b"7}" + b" ")
            while (frame := bc.decode_frame(buf)) is None:
                buf += conn.recv(4096)
            seen["pong"] = (frame[1], frame[2])

    thread = threading.Thread(target=serve_one, daemon=True)
    thread.start()
    ws = bc.WebSocket(f"ws://127.0.0.1:{server.getsockname()[1]}/devtools/browser/x")
    ws.send('{"id": 1}')
    assert ws.recv(bc.time.monotonic() + 10) == '{"id":7} '
    thread.join(10)
    ws.close()
    server.close()
    assert seen == {"sent": '{"id": 1}', "pong": (0xA, b"are you there")}


def test_the_server_serves_the_book_folder(tmp_path):
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "p q.html").write_text("<p>hello</p>")
    server, base = bc.serve(tmp_path)
    try:
        with urllib.request.urlopen(base + "book/p%20q.html", timeout=10) as r:
            assert r.read() == b"<p>hello</p>"
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(base + "missing.html", timeout=10)
    finally:
        server.shutdown()
        server.server_close()


def test_main_refuses_a_missing_book(tmp_path, capsys):
    assert bc.main([str(tmp_path / "nothing")]) == 2
    assert "make book" in capsys.readouterr().err


# ----------------------------------------------------------------------------- end to end (optional)

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
PAGE = """<!doctype html><html><head><meta charset="utf-8"><style>
body {{ margin: 0; font: 16px sans-serif; }} .bd-article-container {{ width: 300px; }}
pre.scrolls {{ overflow-x: auto; }} div.cut {{ overflow: hidden; width: 100px; white-space: nowrap; }}
</style></head><body><div class="bd-article-container"><article class="bd-article"><section id="s">
{body}
</section></article></div></body></html>"""


@pytest.mark.skipif(not shutil.which(CHROMIUM), reason=f"no browser at {CHROMIUM} (apt-get install chromium)")
def test_end_to_end_in_headless_chromium(tmp_path, capsys):
    pages = {
        "good.html": "<p>short text</p><pre class='scrolls'>" + "x" * 300 + "</pre>",
        "wide.html": "<p>the driver is <code>" + "replearn.experiments." * 8 + "</code></p>",
        "cut.html": "<div class='cut'>" + "an output line that does not fit " * 3 + "</div>",
        "broken.html": "<img src='missing.png' alt='gone'><script>console.error('boom')</script>",
        "output.html": "<div class='cell_output'><pre class='scrolls'>" + "y " * 150 + "</pre></div>",
        "squeeze.html": "<table style='width: 60px'><tr><td style='overflow-wrap: anywhere'>"
                        "supercalifragilistic</td><td>x</td></tr></table>",
        "hyphen.html": "<table style='width: 10px'><tr><td>fine-tuning meta-gradients</td></tr></table>",
    }
    for name, body in pages.items():
        (tmp_path / name).write_text(PAGE.format(body=body))
    (tmp_path / "index.html").write_text('<meta http-equiv="Refresh" content="0; url=good.html" />')
    json_out = tmp_path / "out.json"
    assert bc.main([str(tmp_path), "--widths", "400", "--json", str(json_out)]) == 1
    out = capsys.readouterr().out
    assert "FAIL good.html" not in out and "FAIL index.html" not in out
    assert "FAIL wide.html at 400 px" in out and "horizontal scroll" in out and "out of column" in out
    assert "FAIL cut.html at 400 px" in out and "clipped: div.cut" in out
    assert "FAIL broken.html at 400 px" in out and "image: did not load: /missing.png" in out
    assert "console.error: boom" in out
    assert "FAIL output.html" not in out                       # a phone may scroll a text output
    assert "FAIL squeeze.html at 400 px" in out and 'squeezed column: table' in out
    assert "FAIL hyphen.html" not in out                       # a line may break after a hyphen
    assert bc.main([str(tmp_path), "--widths", "1400", "--page", "output.html"]) == 1
    assert "cut off: pre" in capsys.readouterr().out            # at desktop width it must fit its box


def test_the_layout_fixes_are_loaded_on_every_page():
    """book/_ext/page_assets.py loads layout.css (the CSS fixes for what this check found) and sets
    the theme's default colour mode (without it a first visit logged a console error)."""
    root = Path(__file__).resolve().parents[1] / "book"
    spec = importlib.util.spec_from_file_location("page_assets", root / "_ext" / "page_assets.py")
    page_assets = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(page_assets)
    css, events = [], []

    class App:
        def add_css_file(self, name, **kw):
            css.append(name)

        def add_js_file(self, *a, **kw):
            pass

        def connect(self, event, fn, **kw):
            events.append((event, fn))

    page_assets.setup(App())
    assert "layout.css" in css and (root / "_static" / "layout.css").is_file()

    class Config:
        html_context = {}

    for event, fn in events:
        if event == "config-inited" and fn is page_assets.default_colour_mode:
            fn(None, Config)
    assert Config.html_context == {"default_mode": "auto"}
    Config.html_context = {"default_mode": "dark"}
    page_assets.default_colour_mode(None, Config)
    assert Config.html_context == {"default_mode": "dark"}


@pytest.mark.parametrize("argv, message", [
    (["--widths", ""], "--widths"),
    (["--widths", "0"], "--widths"),
    (["--widths=-400"], "--widths"),
    (["--widths", "abc"], "--widths"),
    (["--widths", "1400,,400"], "--widths"),
    (["--json", "{tmp}"], "--json"),
    (["--json", "{tmp}/no such folder/out.json"], "--json"),
])
def test_bad_options_are_refused_before_any_work(tmp_path, capsys, argv, message):
    """Each option is checked before the book is looked for (here there is none) or a browser started."""
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    with pytest.raises(SystemExit) as exit_:
        bc.main([str(tmp_path / "nothing"), *argv])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and "make book" not in err and "Traceback" not in err


def test_widths_are_positive_integers_in_order():
    assert bc.widths_option(" 1400, 400 ") == [1400, 400]


def test_a_section_longer_than_its_screens_fails_at_a_wide_window_only_on_chosen_pages():
    def view(page, width, height):
        return {"page": page, "width": width, "failures": [],
                "view": {"document": {"scrollHeight": height}}}
    long_section = view("book/05_fedrep/07_cifar_personalisation.html", 1400, 13 * bc.HEIGHT)
    short_section = view("book/05_fedrep/08_local_epochs.html", 1400, 8 * bc.HEIGHT)
    phone = view("book/05_fedrep/07_cifar_personalisation.html", 400, 30 * bc.HEIGHT)
    appendix = view("book/appendix/paper_scale.html", 1400, 26 * bc.HEIGHT)
    results = [long_section, short_section, phone, appendix]
    hit = bc.too_long(results, 12, ["*05_fedrep/0[789]_*"])
    assert hit == [long_section]
    assert long_section["failures"][0][0] == "length" and "13.0 screens" in long_section["failures"][0][1]
    assert not short_section["failures"] and not phone["failures"] and not appendix["failures"]
    assert bc.too_long([appendix], 12, None) == [appendix]   # no pattern: every page
    assert bc.longest(results, k=2) == [f"   26.0 screens  {appendix['page']}",
                                        f"   13.0 screens  {long_section['page']}"]

"""Check the built book in a real browser: every page, headless Chromium, two window widths.

Usage: python scripts/browser_check.py [HTML_DIR] [--widths 1400,400] [--chromium PATH]
                                       [--page PATTERN ...] [--json FILE]

``make browser-check`` runs it on ``_build/html`` (installing Debian's ``chromium`` first if
``/usr/bin/chromium`` is missing). It serves HTML_DIR on a free localhost port (``http.server`` in
a thread), starts headless Chromium and drives it over the Chrome DevTools Protocol (a websocket
client from the standard library: nothing to install but the browser), loads every page of the
book afresh at each width, waits until it has settled (fonts, MathJax's first pass, the widget
explorers, images), measures it and fails (exit status 1, a report per page and width) on:

* **horizontal scroll** -- the document is wider than the viewport
  (``documentElement.scrollWidth > clientWidth``), or a layout box around the text column (the
  article, its container...) scrolls or clips sideways;
* **out of column** -- an element of the text column (the article and its previous/next links,
  ``.bd-article-container``) reaches past the column's edge and no box
  inside the column between them scrolls or clips it: it spills over the margin or the sidebar,
  or makes the page scroll (an element inside a box with ``overflow-x: auto``/``scroll`` -- a code
  block, a table's scroll container, a display equation -- is meant to scroll there; that box is
  itself checked);
* **clipped** -- an element of the text column with ``overflow-x: hidden`` or ``clip`` whose content
  reaches past its box: a cut-off output line or table that nobody can scroll to. "Content" is
  the boxes of the elements it holds and the lines of its text, not the ink of glyphs (MathJax's
  glyphs overhang their boxes by a few px, which raises ``scrollWidth`` without cutting anything
  off, so ``scrollWidth > clientWidth`` only selects the candidates). Boxes hidden by design
  (``clip``/``clip-path``, screen-reader text, MathJax's hidden MathML, at most 1 px wide) are
  skipped;
* **cut off** -- at a window at least :data:`WIDE` px wide, a text output of a notebook cell
  (``.cell_output`` ``pre``: printed text, a value's plain-text form) wider than its box: its ends
  are hidden unless the reader scrolls inside the box (on a phone such a box may scroll);
* **squeezed column** -- a table cell in which a word is broken across lines (not at a hyphen or a
  slash, where a line may break): its column is narrower than its longest word (a table too wide
  for the column must scroll in its box instead);
* **widget** -- an explorer saved in the page (``script[type="application/vnd.jupyter.widget-view+json"]``)
  that the widget manager did not render (it puts a ``div.widget-subarea`` with the view before
  the script), rendered as an error, or rendered with a control squeezed to nothing (a slider
  track, menu, text box or button under ``MIN_CONTROL`` px wide: unusable);
* **console** -- an error in the browser console: ``console.error``, an uncaught exception, or a
  browser-logged error such as a resource that failed to load;
* **image** -- an ``<img>`` that did not load (``complete && naturalWidth > 0`` is false);
* **timeout** -- the page did not load or settle in time;
* **length** -- only with ``--max-screens N``: at a window at least :data:`WIDE` px wide, a page
  (of those matching ``--screens-page``) longer than N screens of :data:`HEIGHT` px (a section
  that has grown into an audit). Every run prints the longest pages, in screens.

The measuring runs in the page (``SETTLE_JS``, ``MEASURE_JS``); the rules that decide a failure
(:func:`judge`) and the page discovery (:func:`discover_pages`) are plain Python, unit-tested in
``tests/test_browser_check.py`` without a browser.
"""

from __future__ import annotations

import argparse
import base64
import fnmatch
import functools
import hashlib
import http.server
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

#: Window widths checked, in CSS px: a desktop window and a phone held upright.
WIDTHS = (1400, 400)
HEIGHT = 900
#: Differences of at most this many px are rounding (sub-pixel layout), not overflow.
TOLERANCE = 1
#: Seconds for a page to load, and then to settle (MathJax, widgets, images).
LOAD_TIMEOUT = 30
SETTLE_TIMEOUT = 20
#: A widget's control (slider track, menu, text box, button) narrower than this many px is unusable.
MIN_CONTROL = 10
#: In a window at least this wide a text output must fit its box (a scrolled box hides its ends);
#: narrower windows (a phone) may scroll it.
WIDE = 1000
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-extensions", "--disable-default-apps", "--mute-audio",
                  "--force-device-scale-factor=1", "--remote-debugging-port=0")


# ----------------------------------------------------------------------------- pages

def discover_pages(root: Path) -> list[str]:
    """The book's HTML pages under ``root`` as sorted POSIX paths relative to it, without Sphinx's
    own folders (``_static``, ``_sources``, ``_images``: any folder whose name starts with ``_``)."""
    root = Path(root)
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.html")
                  if not any(part.startswith("_") for part in p.relative_to(root).parts[:-1]))


REFRESH = re.compile(r"""<meta\s+http-equiv=["']?refresh["']?\s+content=["']?\s*\d+\s*;\s*url=([^"'\s>]+)""",
                     re.IGNORECASE)


def redirect_target(html: str) -> str | None:
    """Where a redirect page (``<meta http-equiv="Refresh" content="0; url=...">`` and no body, as
    Jupyter Book writes the top-level ``index.html``) sends the reader, else None."""
    m = REFRESH.search(html)
    if not m or re.search(r"<body\b", html, re.IGNORECASE):
        return None
    return m.group(1)


def check_redirect(root: Path, page: str) -> list[tuple[str, str]] | None:
    """None if ``page`` is not a redirect page; else its failures: none if its target is a page of
    the book (checked there), one if the target is missing."""
    target = redirect_target((Path(root) / page).read_text(encoding="utf-8", errors="replace"))
    if target is None:
        return None
    path = urllib.parse.urlsplit(target).path
    resolved = (Path(root) / page).parent / urllib.parse.unquote(path)
    if urllib.parse.urlsplit(target).scheme or not resolved.is_file():
        return [("redirect", f"redirects to {target}, which is not a page of the built book")]
    return []


def select_pages(pages: list[str], patterns: list[str] | None) -> list[str]:
    """The pages matching any of the shell-style ``patterns`` (all pages when there are none)."""
    if not patterns:
        return list(pages)
    return [p for p in pages if any(fnmatch.fnmatch(p, pat) or fnmatch.fnmatch(p, f"*{pat}*")
                                    for pat in patterns)]


# ----------------------------------------------------------------------------- rules

def _px(value) -> str:
    return f"{round(float(value))} px"


def _where(item: dict) -> str:
    """``tag.class "text..." (in #section)`` for a measured element."""
    out = item.get("desc", "?")
    if item.get("text"):
        out += f' "{item["text"]}"'
    if item.get("section"):
        out += f" (in {item['section']})"
    return out


def judge(view: dict, tolerance: float = TOLERANCE) -> list[tuple[str, str]]:
    """The failures of one page view, as ``(kind, detail)`` pairs, from its measurements (the
    dictionary :data:`MEASURE_JS` returns, plus ``console`` and ``timeouts`` added by the driver).

    Rules (module docstring): the document or a box around the text column wider than its box;
    an element of the column that reaches past the column's edge and is not inside a box within
    the column that scrolls or clips; an element with ``overflow-x: hidden``/``clip`` whose content
    is wider than its box; in a window at least :data:`WIDE` px wide (``view["viewport"]``), a
    text output wider than its box; a table cell with a word broken across lines; a saved widget
    without a rendered view, or with an error view; an image that did not load; a console error;
    a page that did not load or settle.
    """
    found: list[tuple[str, str]] = []
    for what in view.get("timeouts", []):
        found.append(("timeout", f"{what} did not finish in time"))
    if view.get("error"):
        found.append(("timeout", view["error"]))
    doc = view.get("document")
    if doc and doc["scrollWidth"] > doc["clientWidth"] + tolerance:
        found.append(("horizontal scroll", f"the document is {_px(doc['scrollWidth'])} wide in a "
                                           f"{_px(doc['clientWidth'])} viewport: the page scrolls sideways"))
    for frame in view.get("frames", []):
        if frame["overflowX"] == "visible" or frame["scrollWidth"] <= frame["clientWidth"] + tolerance:
            continue  # a visible overflow reaches the next box out, finally the document (above)
        verb = "scrolls" if frame["overflowX"] in ("auto", "scroll") else "clips"
        found.append(("horizontal scroll", f"{frame['desc']} {verb} sideways: content {_px(frame['scrollWidth'])} "
                                           f"wide in a {_px(frame['clientWidth'])} box"))
    for item in view.get("spills", []):
        right = item["right"] > item["colRight"] + tolerance
        left = item["left"] < item["colLeft"] - tolerance
        if right or left:
            edge = (f"reaches {_px(item['right'])}, the column ends at {_px(item['colRight'])}" if right else
                    f"starts at {_px(item['left'])}, the column starts at {_px(item['colLeft'])}")
            hidden = " (hidden until hovered or focused, but it takes its room)" if item.get("hidden") else ""
            found.append(("out of column", f"{_where(item)} {edge}{hidden}"))
    for item in view.get("outside", []):
        if item["right"] > item["limit"] + tolerance:
            found.append(("out of column", f"{_where(item)} (outside the text column) reaches "
                                           f"{_px(item['right'])}, the viewport ends at {_px(item['limit'])}"))
    for item in view.get("clips", []):
        if item["overflowX"] not in ("hidden", "clip") or item["clientWidth"] <= 1:
            continue
        past = max(item["contentRight"] - item["boxRight"], item["boxLeft"] - item["contentLeft"])
        if past > tolerance:
            found.append(("clipped", f"{_where(item)}: its content reaches {_px(past)} past its "
                                     f"{_px(item['clientWidth'])} box and is cut off (overflow-x: {item['overflowX']})"))
    if view.get("viewport", 0) >= WIDE:
        for item in view.get("texts", []):
            if item["contentWidth"] > item["boxWidth"] + tolerance:
                found.append(("cut off", f"{_where(item)}: a text output {_px(item['contentWidth'])} wide in a "
                                         f"{_px(item['boxWidth'])} box; its ends are hidden unless the reader "
                                         f"scrolls inside the box (widest line: \"{item.get('line', '')}\")"))
    for item in view.get("broken", []):
        found.append(("squeezed column", f"{_where(item)}: column {item['column']} is "
                                         f"{_px(item['cellWidth'])} wide, narrower than its word "
                                         f"\"{item['word']}\", which is broken across lines"))
    for w in view.get("widgets", []):
        name = f"widget {w.get('model') or '?'}" + (f" (in {w['section']})" if w.get("section") else "")
        if w.get("error"):
            found.append(("widget", f"{name} rendered an error: {w['error']}"))
        elif not w.get("subarea") or not w.get("children") or w.get("height", 0) <= 0:
            found.append(("widget", f"{name} did not render (no visible view beside its saved state)"))
        else:
            for c in w.get("squeezed", []):
                what = c["what"] + (f' "{c["label"]}"' if c.get("label") else "")
                found.append(("widget", f"{name}: its {what} is squeezed to {_px(c['width'])} wide, too narrow to use"))
    for img in view.get("images", []):
        if not img.get("complete") or not img.get("naturalWidth"):
            found.append(("image", f"did not load: {img.get('src') or '(no src)'}"
                                   + (f' (alt "{img["alt"]}")' if img.get("alt") else "")))
    for message in view.get("console", []):
        found.append(("console", message))
    return found


def console_message(method: str, params: dict) -> str | None:
    """The text of a DevTools event that reports an error in the page's console, else None:
    ``console.error``/``console.assert``, an uncaught exception, or an error the browser logged
    (a resource that failed to load, a blocked request...). The browser's own request for
    ``/favicon.ico``, which no page asks for, is not the book's error."""
    if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
        parts = []
        for arg in params.get("args", []):
            value = arg.get("value", arg.get("description", arg.get("type", "")))
            parts.append(value if isinstance(value, str) else json.dumps(value))
        return "console.error: " + " ".join(parts)[:400]
    if method == "Runtime.exceptionThrown":
        details = params.get("exceptionDetails", {})
        exc = details.get("exception") or {}
        text = exc.get("description") or details.get("text") or "exception"
        where = details.get("url", "")
        if where:
            where = f" at {where.rsplit('/', 1)[-1]}:{details.get('lineNumber', 0) + 1}"
        return f"uncaught {text.splitlines()[0][:400]}{where}"
    if method == "Log.entryAdded":
        entry = params.get("entry", {})
        url = entry.get("url", "")
        if entry.get("level") == "error" and not url.endswith("/favicon.ico"):
            return f"{entry.get('source', 'browser')}: {entry.get('text', '')[:400]}" + (f" ({url})" if url else "")
    return None


def screens(view: dict) -> float:
    """How long a page is, in screens of the check's window (:data:`HEIGHT` px tall): the
    document's ``scrollHeight`` over the window's height (0 where it was not measured)."""
    return view.get("document", {}).get("scrollHeight", 0) / HEIGHT


def too_long(results: list[dict], max_screens: float, patterns: list[str]) -> list[dict]:
    """Add a ``length`` failure to each view of ``results`` at a wide window (>= :data:`WIDE` px)
    of a page matching ``patterns`` (:func:`select_pages`) that is longer than ``max_screens``
    screens (:func:`screens`); the views changed."""
    chosen = set(select_pages([r["page"] for r in results], patterns))
    hit = []
    for r in results:
        n = screens(r.get("view", {}))
        if r["width"] >= WIDE and r["page"] in chosen and n > max_screens:
            r["failures"].append(("length", f"{n:.1f} screens of {HEIGHT} px at {r['width']} px, over the "
                                            f"{max_screens:g} a section may take (move audit material to its "
                                            f"reproduction page)"))
            hit.append(r)
    return hit


def longest(results: list[dict], k: int = 8) -> list[str]:
    """Report lines for the ``k`` longest pages at the widest window checked, in screens."""
    wide = max((r["width"] for r in results), default=0)
    views = sorted((r for r in results if r["width"] == wide), key=lambda r: -screens(r.get("view", {})))[:k]
    return [f"  {screens(r['view']):5.1f} screens  {r['page']}" for r in views if screens(r.get("view", {}))]


def format_report(results: list[dict]) -> tuple[list[str], int]:
    """Report lines for the failing views of ``results`` (dicts with ``page``, ``width`` and
    ``failures``), and the number of failures."""
    lines, count = [], 0
    for r in results:
        if not r["failures"]:
            continue
        lines.append(f"FAIL {r['page']} at {r['width']} px")
        for kind, detail in r["failures"]:
            lines.append(f"  - {kind}: {detail}")
        count += len(r["failures"])
    return lines, count


# ----------------------------------------------------------------------------- websocket (RFC 6455)

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def ws_accept(key: str) -> str:
    """The ``Sec-WebSocket-Accept`` a server answers to ``Sec-WebSocket-Key: key``."""
    return base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()


def _mask(payload: bytes, key: bytes) -> bytes:
    n = len(payload)
    if not n:
        return payload
    stream = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(stream, "big")).to_bytes(n, "big")


def encode_frame(payload: bytes, opcode: int = 0x1, mask: bytes | None = None) -> bytes:
    """One final websocket frame (a client masks its frames with a 4-byte ``mask``)."""
    n = len(payload)
    bit = 0x80 if mask is not None else 0
    head = bytes([0x80 | opcode])
    if n < 126:
        head += bytes([bit | n])
    elif n < 1 << 16:
        head += bytes([bit | 126]) + struct.pack(">H", n)
    else:
        head += bytes([bit | 127]) + struct.pack(">Q", n)
    if mask is not None:
        return head + mask + _mask(payload, mask)
    return head + payload


def decode_frame(buf: bytes) -> tuple[bool, int, bytes, int] | None:
    """``(fin, opcode, payload, bytes used)`` of the frame at the start of ``buf``, or None if
    ``buf`` does not hold all of it yet."""
    if len(buf) < 2:
        return None
    fin, opcode = bool(buf[0] & 0x80), buf[0] & 0x0F
    masked, n = bool(buf[1] & 0x80), buf[1] & 0x7F
    pos = 2
    if n == 126:
        if len(buf) < 4:
            return None
        n, pos = struct.unpack(">H", buf[2:4])[0], 4
    elif n == 127:
        if len(buf) < 10:
            return None
        n, pos = struct.unpack(">Q", buf[2:10])[0], 10
    key = b""
    if masked:
        if len(buf) < pos + 4:
            return None
        key, pos = buf[pos:pos + 4], pos + 4
    if len(buf) < pos + n:
        return None
    payload = buf[pos:pos + n]
    return fin, opcode, (_mask(payload, key) if masked else payload), pos + n


class WebSocket:
    """A minimal websocket client: text messages, fragmentation, ping/pong, no extensions."""

    def __init__(self, url: str, timeout: float = 30) -> None:
        u = urllib.parse.urlsplit(url)
        self.sock = socket.create_connection((u.hostname, u.port or 80), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        path = u.path + (f"?{u.query}" if u.query else "")
        self.sock.sendall((f"GET {path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
                           ).encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError(f"websocket handshake with {url}: connection closed")
            buf += chunk
        head, self.buf = buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        if " 101 " not in lines[0] + " " or headers.get("sec-websocket-accept") != ws_accept(key):
            raise ConnectionError(f"websocket handshake with {url} refused: {lines[0]}")

    def send(self, text: str) -> None:
        self.sock.sendall(encode_frame(text.encode(), 0x1, os.urandom(4)))

    def recv(self, deadline: float) -> str:
        parts = []
        while True:
            frame = decode_frame(self.buf)
            if frame is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("no message from the browser in time")
                self.sock.settimeout(left)
                try:
                    chunk = self.sock.recv(1 << 16)
                except socket.timeout:
                    raise TimeoutError("no message from the browser in time") from None
                if not chunk:
                    raise ConnectionError("the browser closed the DevTools connection")
                self.buf += chunk
                continue
            fin, opcode, payload, used = frame
            self.buf = self.buf[used:]
            if opcode == 0x9:
                self.sock.sendall(encode_frame(payload, 0xA, os.urandom(4)))
            elif opcode == 0x8:
                raise ConnectionError("the browser closed the DevTools connection")
            elif opcode in (0x0, 0x1, 0x2):
                parts.append(payload)
                if fin:
                    return b"".join(parts).decode()

    def close(self) -> None:
        try:
            self.sock.sendall(encode_frame(b"", 0x8, os.urandom(4)))
        except OSError:
            pass
        self.sock.close()


class CDPError(RuntimeError):
    pass


class DevTools:
    """Calls and events of the Chrome DevTools Protocol over one browser connection."""

    def __init__(self, url: str) -> None:
        self.ws = WebSocket(url)
        self.next_id = 0
        self.events: list[dict] = []

    def _read(self, deadline: float) -> dict:
        return json.loads(self.ws.recv(deadline))

    def call(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 60) -> dict:
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))
        deadline = time.monotonic() + timeout
        while True:
            m = self._read(deadline)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise CDPError(f"{method}: {m['error'].get('message')} {m['error'].get('data', '')}")
                return m.get("result", {})
            if "method" in m:
                self.events.append(m)

    def wait_event(self, method: str, session: str, since: int, timeout: float) -> bool:
        """Whether event ``method`` of ``session`` arrived (among ``events[since:]`` or within ``timeout``)."""
        deadline = time.monotonic() + timeout
        i = since
        while True:
            for m in self.events[i:]:
                if m.get("method") == method and m.get("sessionId") == session:
                    return True
            i = len(self.events)
            try:
                m = self._read(deadline)
            except TimeoutError:
                return False
            if "method" in m:
                self.events.append(m)

    def evaluate(self, expression: str, session: str, timeout: float = 60):
        r = self.call("Runtime.evaluate", {"expression": expression, "awaitPromise": True,
                                           "returnByValue": True}, session, timeout)
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise CDPError("in the page: " + ((d.get("exception") or {}).get("description") or d.get("text", "")))
        return r["result"].get("value")


# ----------------------------------------------------------------------------- in the page

#: Wait until the page has settled: lazy images made eager, fonts, MathJax's first typesetting
#: pass, every saved widget rendered, every image loaded; then two frames and a short pause for
#: the page's own resize handlers (math-fit.js). Returns what did not finish in time.
SETTLE_JS = r"""
(async (timeoutMs) => {
  const start = Date.now();
  const left = () => Math.max(0, timeoutMs - (Date.now() - start));
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const within = (p, ms) => Promise.race([Promise.resolve(p).then(() => true, () => true), sleep(ms).then(() => false)]);
  const late = [];
  document.querySelectorAll('img[loading="lazy"]').forEach((img) => { img.loading = "eager"; });
  if (document.fonts && document.fonts.ready && !(await within(document.fonts.ready, left()))) late.push("fonts");
  const mj = window.MathJax;
  if (mj && mj.startup && mj.startup.promise && !(await within(mj.startup.promise, left()))) late.push("MathJax");
  const views = () => Array.from(document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]'));
  const shown = (s) => { const p = s.previousElementSibling; return !!(p && p.classList.contains("widget-subarea") && p.childElementCount > 0); };
  while (views().some((s) => !shown(s)) && left() > 0) await sleep(100);
  if (views().some((s) => !shown(s))) late.push("widgets");
  const pending = () => Array.from(document.images).some((i) => !i.complete);
  while (pending() && left() > 0) await sleep(100);
  if (pending()) late.push("images");
  if (window.MathJax && window.MathJax.startup && window.MathJax.startup.promise) {
    // widget labels are typeset after the first pass (widgets/setup.js chains them on this promise)
    await within(window.MathJax.startup.promise, left());
  }
  for (let i = 0; i < 2; i++) await within(new Promise((r) => requestAnimationFrame(r)), 200);
  await sleep(300);
  return late;
})(%d)
"""

#: Measure the page (see judge() for the rules applied to what this returns).
MEASURE_JS = r"""
(() => {
  const TOL = 0.5, MIN_CONTROL = %d;
  const de = document.documentElement, body = document.body;
  // The text column: the article with its footer (previous/next links); beside it the sidebars.
  const root = document.querySelector(".bd-article-container") || document.querySelector("article") ||
               document.querySelector("main") || body;
  const squash = (s) => (s || "").replace(/\s+/g, " ").trim();
  const text = (el) => { const t = squash(el.textContent); return t.length > 70 ? t.slice(0, 67) + "..." : t; };
  const section = (el) => { const s = el.closest("section[id]"); return s ? "#" + s.id : ""; };
  const desc = (el) => {
    let d = el.tagName.toLowerCase();
    if (el.id) d += "#" + el.id;
    const cls = Array.from(el.classList).slice(0, 3);
    if (cls.length) d += "." + cls.join(".");
    return d;
  };
  const info = (el) => ({desc: desc(el), text: text(el), section: section(el)});
  const r1 = (v) => Math.round(v * 10) / 10;
  // hidden from sight by design: clipped to nothing, screen-reader text, MathJax's hidden MathML
  const byDesign = (el, cs) =>
    (cs.clip && cs.clip !== "auto") || (cs.clipPath && cs.clipPath !== "none") ||
    el.classList.contains("visually-hidden") || el.classList.contains("sr-only") ||
    el.tagName.toLowerCase() === "mjx-assistive-mml";
  const range = document.createRange();
  // The horizontal extent of what a box holds: the boxes of its elements and the lines of its text
  // (not the ink of glyphs: MathJax's glyphs overhang their boxes by a few px, and such overhang
  // counts in scrollWidth without anything being cut off). A nested box that scrolls or clips
  // bounds its own content (it is checked itself).
  const extent = (box) => {
    let lo = Infinity, hi = -Infinity;
    const visit = (n) => {
      for (const c of n.childNodes) {
        if (c.nodeType === Node.TEXT_NODE) {
          if (!c.textContent.trim()) continue;
          range.selectNodeContents(c);
          for (const r of range.getClientRects()) {
            if (r.width > 0) { lo = Math.min(lo, r.left); hi = Math.max(hi, r.right); }
          }
        } else if (c.nodeType === Node.ELEMENT_NODE) {
          const cs = getComputedStyle(c);
          if (cs.display === "none" || cs.position === "fixed" || byDesign(c, cs)) continue;
          const r = c.getBoundingClientRect();
          if (r.width > 0 && r.height > 0) { lo = Math.min(lo, r.left); hi = Math.max(hi, r.right); }
          if (cs.overflowX === "visible") visit(c);
        }
      }
    };
    visit(box);
    return [lo, hi];
  };
  const col = root.getBoundingClientRect();
  const spills = [], clips = [], outside = [];
  // An element is "contained" when a box inside the column, between it and the column, has an
  // overflow-x other than visible: it scrolls there (meant to) or is clipped (reported at that box).
  // Elements hidden with visibility: hidden (a heading's link before it is hovered) or clipped to
  // nothing (MathJax's MathML for screen readers) still take room: they count.
  const walk = (el, ctx) => {
    const cs = getComputedStyle(el);
    if (cs.display === "none") return;
    if (!ctx.inColumn && cs.position === "fixed") return;  // off-canvas drawers: never scroll the page
    // hidden by design: never "clipped", but it still takes room and can make the page scroll
    const skip = ctx.skip || byDesign(el, cs);
    let reported = ctx.reported;
    {
      const r = el.getBoundingClientRect();
      if (r.width > 0 || r.height > 0) {
        const ox = cs.overflowX;
        if (!skip && ctx.inColumn && (ox === "hidden" || ox === "clip") && el.clientWidth > 1 && el.scrollWidth > el.clientWidth + TOL) {
          const [lo, hi] = extent(el);
          const left = r.left + el.clientLeft;
          if (hi > left + el.clientWidth + TOL || lo < left - TOL) {
            clips.push(Object.assign(info(el), {overflowX: ox, scrollWidth: el.scrollWidth, clientWidth: el.clientWidth,
                                                boxLeft: r1(left), boxRight: r1(left + el.clientWidth),
                                                contentLeft: r1(lo), contentRight: r1(hi)}));
          }
        }
        if (!ctx.contained && !reported) {
          const hidden = cs.visibility === "hidden";
          if (ctx.inColumn && (r.right > col.right + TOL || r.left < col.left - TOL)) {
            spills.push(Object.assign(info(el), {left: r1(r.left), right: r1(r.right), colLeft: r1(col.left),
                                                 colRight: r1(col.right), hidden}));
            reported = true;
          } else if (!ctx.inColumn && ctx.limit !== null && r.right > ctx.limit + TOL) {
            outside.push(Object.assign(info(el), {right: r1(r.right), limit: ctx.limit, hidden}));
            reported = true;
          }
        }
      }
    }
    const contained = ctx.contained || (ctx.inColumn && el !== root && cs.overflowX !== "visible");
    for (const child of el.children) {
      if (!ctx.inColumn && child === root) continue;
      walk(child, {skip, reported, contained, inColumn: ctx.inColumn, limit: ctx.limit});
    }
  };
  walk(root, {skip: false, reported: false, contained: false, inColumn: true, limit: null});
  if (de.scrollWidth > de.clientWidth + TOL && root !== body) {
    // what else sticks out of the viewport (header, sidebars), outside the text column
    walk(body, {skip: false, reported: false, contained: false, inColumn: false, limit: de.clientWidth});
  }
  // Text outputs of notebook cells: the widest box between the pre and its .cell_output that is
  // narrower than what it holds (a pre scrolls by itself; a visible one shows in its parent's box).
  const texts = [];
  root.querySelectorAll(".cell_output pre").forEach((pre) => {
    if (getComputedStyle(pre).display === "none" || pre.getBoundingClientRect().width === 0) return;
    const stop = pre.closest(".cell_output");
    for (let a = pre; a; a = a.parentElement) {
      if (a.scrollWidth > a.clientWidth + TOL && getComputedStyle(a).overflowX !== "visible") {
        const lines = pre.textContent.split("\n");
        const line = lines.reduce((x, y) => (y.length > x.length ? y : x), "");
        texts.push(Object.assign(info(pre), {contentWidth: a.scrollWidth, boxWidth: a.clientWidth,
                                             line: line.length > 70 ? line.slice(0, 67) + "..." : line}));
        break;
      }
      if (a === stop) break;
    }
  });
  // Table cells with a word broken across lines: the column is narrower than its longest word.
  const broken = [];
  root.querySelectorAll("table").forEach((table) => {
    const seen = new Set();
    table.querySelectorAll("th, td").forEach((cell) => {
      const column = cell.cellIndex + 1;
      if (seen.has(column) || cell.getBoundingClientRect().width === 0) return;
      const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
      for (let t = walker.nextNode(); t; t = walker.nextNode()) {
        if (t.parentElement && t.parentElement.closest("mjx-container, .MathJax")) continue;
        // a word, or the part of one up to a hyphen or slash: a line may break after those
        for (const m of t.textContent.matchAll(/[^\s\-\u2010-\u2014\/]+[\-\u2010-\u2014\/]?/g)) {
          if (m[0].length < 2) continue;
          range.setStart(t, m.index);
          range.setEnd(t, m.index + m[0].length);
          const rects = Array.from(range.getClientRects()).filter((r) => r.width > 0);
          const tops = new Set(rects.map((r) => Math.round(r.top)));
          if (tops.size > 1) {
            seen.add(column);
            broken.push(Object.assign(info(table), {column, word: m[0].slice(0, 40), cellWidth: r1(cell.clientWidth)}));
            return;
          }
        }
      }
    });
  });
  const frames = [];
  for (let a = root; a && a !== de; a = a.parentElement) {
    const cs = getComputedStyle(a);
    frames.push({desc: desc(a), overflowX: cs.overflowX, scrollWidth: a.scrollWidth, clientWidth: a.clientWidth});
  }
  const widgets = Array.from(document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]')).map((s) => {
    let model = "";
    try { model = JSON.parse(s.textContent).model_id; } catch (e) {}
    const p = s.previousElementSibling;
    const sub = p && p.classList.contains("widget-subarea") ? p : null;
    const r = sub ? sub.getBoundingClientRect() : null;
    const err = sub ? sub.querySelector(".jupyter-widgets-error-widget") : null;
    // controls squeezed to nothing: a slider's track, a menu, a text box or a button < MIN_CONTROL px wide
    const squeezed = [];
    if (sub) {
      sub.querySelectorAll(".slider-container, select, input, textarea, button").forEach((c) => {
        const cs = getComputedStyle(c);
        if (cs.display === "none" || cs.visibility === "hidden" || c.type === "hidden" || c.closest("[hidden]")) return;
        const w = c.getBoundingClientRect().width;
        if (w < MIN_CONTROL) {
          const box = c.closest(".widget-inline-hbox");
          const label = box ? box.querySelector(".widget-label") : null;
          squeezed.push({what: c.classList.contains("slider-container") ? "slider" : c.tagName.toLowerCase(),
                         label: label ? squash(label.textContent) : "", width: r1(w)});
        }
      });
    }
    return {model, section: section(s), subarea: !!sub, children: sub ? sub.childElementCount : 0,
            width: r ? r1(r.width) : 0, height: r ? r1(r.height) : 0, error: err ? text(err) || "error view" : "",
            squeezed};
  });
  const images = Array.from(document.images).map((i) => {
    const src = i.currentSrc || i.getAttribute("src") || "";
    return {src: src.startsWith("data:") ? src.slice(0, 40) + "..." : src.replace(location.origin, ""),
            alt: squash(i.alt).slice(0, 60), complete: i.complete, naturalWidth: i.naturalWidth};
  });
  return {url: location.pathname, document: {scrollWidth: de.scrollWidth, clientWidth: de.clientWidth,
                                             scrollHeight: de.scrollHeight},
          column: {desc: desc(root), left: r1(col.left), right: r1(col.right)}, frames, spills, clips, outside,
          texts, broken, viewport: window.innerWidth, widgets, images, elements: root.getElementsByTagName("*").length};
})()
"""


# ----------------------------------------------------------------------------- driver

class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def serve(root: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    """Serve ``root`` on a free port of 127.0.0.1 from a daemon thread; the server and its base URL."""
    handler = functools.partial(QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def read_devtools_port(text: str) -> str | None:
    """The browser's websocket URL from the ``DevToolsActivePort`` file Chromium writes into its
    profile (``port\\n/devtools/browser/<id>``), or None while it is incomplete."""
    lines = text.strip().splitlines()
    if len(lines) < 2 or not lines[0].strip().isdigit() or not lines[1].startswith("/devtools/"):
        return None
    return f"ws://127.0.0.1:{lines[0].strip()}{lines[1].strip()}"


class Browser:
    """Headless Chromium with a fresh profile; one tab, driven over the DevTools protocol."""

    def __init__(self, executable: str) -> None:
        self.profile = tempfile.mkdtemp(prefix="browser-check-")
        self.log = open(Path(self.profile).with_suffix(".log"), "w+b")
        self.proc = subprocess.Popen([executable, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}",
                                      "about:blank"], stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=self.log, start_new_session=True)
        active = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        url = None
        while url is None:
            if self.proc.poll() is not None:
                self.log.seek(0)
                output = self.log.read().decode(errors="replace")[-2000:]
                self.close()
                raise RuntimeError(f"{executable} exited with status {self.proc.returncode}:\n{output}")
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"{executable} did not open its DevTools port within 60 s")
            if active.is_file():
                url = read_devtools_port(active.read_text())
            if url is None:
                time.sleep(0.1)
        self.cdp = DevTools(url)
        self.version = self.cdp.call("Browser.getVersion").get("product", "?")
        target = self.cdp.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.cdp.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.cdp.call(f"{domain}.enable", session=self.session)

    def set_width(self, width: int) -> None:
        self.cdp.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": HEIGHT,
                                                             "deviceScaleFactor": 1, "mobile": False},
                      self.session)

    def goto(self, url: str, timeout: float) -> bool:
        """Navigate the tab to ``url``; whether its load event came within ``timeout`` s."""
        since = len(self.cdp.events)
        r = self.cdp.call("Page.navigate", {"url": url}, self.session)
        if r.get("errorText"):
            raise CDPError(f"navigation to {url} failed: {r['errorText']}")
        return self.cdp.wait_event("Page.loadEventFired", self.session, since, timeout)

    def check(self, url: str) -> dict:
        """Load ``url`` afresh, let it settle and measure it; the measurements plus ``timeouts``
        and ``console`` (the console errors between the start of its load and the next one)."""
        self.cdp.events.clear()
        view: dict = {"timeouts": []}
        try:
            if not self.goto(url, LOAD_TIMEOUT):
                view["timeouts"].append(f"loading the page ({LOAD_TIMEOUT} s)")
            late = self.cdp.evaluate(SETTLE_JS % (SETTLE_TIMEOUT * 1000), self.session, SETTLE_TIMEOUT + 30)
            view["timeouts"] += [f"{what} ({SETTLE_TIMEOUT} s)" for what in late or []]
            view.update(self.cdp.evaluate(MEASURE_JS % MIN_CONTROL, self.session, 60) or {})
        except (CDPError, TimeoutError) as exc:
            view["error"] = f"could not check the page: {exc}"
        try:  # unload it, so that its late errors are counted here and not on the next page
            self.goto("about:blank", 10)
        except (CDPError, TimeoutError):
            pass
        events = [(m["method"], m.get("params", {})) for m in self.cdp.events if m.get("sessionId") == self.session]
        view["console"] = list(dict.fromkeys(msg for msg in (console_message(*e) for e in events) if msg))
        return view

    def close(self) -> None:
        try:
            if getattr(self, "cdp", None):
                try:
                    self.cdp.call("Browser.close", timeout=5)
                except (CDPError, TimeoutError, ConnectionError, OSError):
                    pass
                self.cdp.ws.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            try:  # the browser's own helper processes, in the session it leads
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        finally:
            self.log.close()
            shutil.rmtree(self.profile, ignore_errors=True)
            Path(self.profile).with_suffix(".log").unlink(missing_ok=True)


def widths_option(text: str) -> list[int]:
    """``--widths``: comma-separated window widths in CSS px, each a positive integer (at least
    one; 0 would turn Chromium's width override off and measure its default window instead)."""
    items = [w.strip() for w in text.split(",")]
    if not all(w.isascii() and w.isdigit() and int(w) > 0 for w in items):
        raise argparse.ArgumentTypeError(f"need comma-separated positive integers (CSS px, e.g. 1400,400), "
                                         f"got {text!r}")
    return [int(w) for w in items]


def json_option(text: str) -> Path:
    """``--json``: a file to write, in a folder that exists (checked before any page is)."""
    path = Path(text)
    if path.is_dir() or not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; name a file to write" if path.is_dir() else
                                         f"{text!r}: its folder {str(path.parent)!r} does not exist")
    return path


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("html_dir", nargs="?", default="_build/html")
    ap.add_argument("--widths", type=widths_option, default=",".join(map(str, WIDTHS)),
                    help="comma-separated window widths in CSS px, positive integers (default: %(default)s)")
    ap.add_argument("--chromium", default=CHROMIUM, help="the browser (default: $CHROMIUM or %(default)s)")
    ap.add_argument("--page", action="append", metavar="PATTERN",
                    help="check only pages matching PATTERN (shell-style, or a substring); repeatable")
    ap.add_argument("--max-screens", type=float, metavar="N",
                    help=f"fail a page longer than N screens ({HEIGHT} px each) at a window of at least {WIDE} px")
    ap.add_argument("--screens-page", action="append", metavar="PATTERN",
                    help="with --max-screens: apply it only to pages matching PATTERN (repeatable; default: all)")
    ap.add_argument("--json", metavar="FILE", type=json_option,
                    help="also write every view's measurements and failures here (a file in a folder that exists)")
    args = ap.parse_args(argv)
    root = Path(args.html_dir)
    if not (root / "index.html").is_file():
        print(f"browser_check: no built book at {root}; run `make book` first", file=sys.stderr)
        return 2
    if not shutil.which(args.chromium):
        print(f"browser_check: no browser at {args.chromium}; install Debian's chromium "
              "(apt-get install chromium) or pass --chromium", file=sys.stderr)
        return 2
    widths = args.widths
    pages = select_pages(discover_pages(root), args.page)
    if not pages:
        print(f"browser_check: no pages under {root} match {args.page}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    server, base = serve(root)
    try:
        browser = Browser(args.chromium)
    except (RuntimeError, OSError) as exc:
        server.shutdown()
        server.server_close()
        print(f"browser_check: could not start the browser: {exc}", file=sys.stderr)
        return 2
    results = []
    try:
        print(f"browser_check: {len(pages)} pages x widths {', '.join(map(str, widths))} px in {browser.version}, "
              f"served from {base}", flush=True)
        for width in widths:
            browser.set_width(width)
            tw = time.monotonic()
            for page in pages:
                tv = time.monotonic()
                failures = check_redirect(root, page)
                if failures is not None:  # a redirect: its target is checked as a page of its own
                    results.append({"page": page, "width": width, "failures": failures, "seconds": 0,
                                    "view": {"redirect": True}})
                    continue
                view = browser.check(base + urllib.parse.quote(page))
                failures = judge(view)
                results.append({"page": page, "width": width, "failures": failures,
                                "seconds": round(time.monotonic() - tv, 2), "view": view})
                if failures:
                    print(f"  {page} at {width} px: {len(failures)} failure(s)", flush=True)
            print(f"  width {width} px: {len(pages)} pages in {time.monotonic() - tw:.0f} s", flush=True)
    finally:
        browser.close()
        server.shutdown()
        server.server_close()
    elapsed = time.monotonic() - t0
    if args.max_screens is not None:
        too_long(results, args.max_screens, args.screens_page)
    print(f"longest pages at {max(widths)} px (screens of {HEIGHT} px):")
    for line in longest(results):
        print(line)
    if args.json:
        args.json.write_text(json.dumps({"browser": browser.version, "seconds": round(elapsed, 1),
                                               "results": results}, indent=1))
    lines, count = format_report(results)
    for line in lines:
        print(line)
    views = len(results)
    bad = sum(1 for r in results if r["failures"])
    if count:
        print(f"browser_check: {count} failure(s) on {bad} of {views} page views ({len(pages)} pages x "
              f"{len(widths)} widths) in {elapsed:.0f} s", file=sys.stderr)
        return 1
    print(f"browser_check: {views} page views ({len(pages)} pages x {len(widths)} widths), no horizontal scroll, "
          f"nothing out of its column, clipped or cut off, no squeezed table column, every widget rendered, "
          f"every image loaded, no console error; {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""What every page of the book loads besides the theme: the book's own CSS/JS, and no script twice.

* ``book/_static`` (this book's static files) is added to ``html_static_path``, and every page loads
  ``math-fit.css`` / ``math-fit.js``: MathJax 3 has no automatic line breaking, so after MathJax has
  typeset a page, a display equation wider than the text column gets its equation number moved
  below it (as LaTeX does with a long numbered equation; beside it the number covered the end of
  the formula) and, if still too wide, its font scaled down to fit (not below 70 %; narrower
  screens scroll). See the comments in those files. It also loads ``layout.css``: the rules that
  keep a page inside a narrow window (long inline code wraps, a heading's link can move to the
  next line, the explorers' sliders wrap...), each one for a defect that
  ``scripts/browser_check.py`` (``make browser-check``) found in headless Chromium.
* The theme's colour mode defaults to ``auto`` (``html_context["default_mode"]``, unless the
  configuration sets it). pydata-sphinx-theme reads a first-time visitor's mode (nothing in
  localStorage yet) from that variable, which is empty by default, and then logs "Got invalid
  theme mode: . Resetting to auto." as an error in the browser console before using ``auto``.
* Inline scripts are de-duplicated. Sphinx 7 adds a script registered after the builder was set up
  (``app.add_js_file(None, body=...)`` in ``builder-inited`` or ``env-before-read-docs``, as
  sphinx-thebe and sphinx-togglebutton do) twice: once as registered (file name ``None``) and
  again from the registry when it prepares writing (file name ``''``). Two copies of
  sphinx-thebe's ``const THEBE_JS_URL = ...`` make every page log "Identifier 'THEBE_JS_URL' has
  already been declared" in the browser console. :func:`dedupe_scripts` keeps the first of the
  scripts that are equal up to that difference, on every page.
"""

from __future__ import annotations

from pathlib import Path

#: The book's own static files (copied into ``_build/html/_static/``).
STATIC = Path(__file__).resolve().parent.parent / "_static"


def script_key(script) -> tuple:
    """What makes two scripts the same: the file name (``None`` and ``''`` alike: an inline script)
    and the attributes, body included."""
    filename = getattr(script, "filename", script) or ""
    attributes = getattr(script, "attributes", None) or {}
    return str(filename), tuple(sorted((str(k), str(v)) for k, v in attributes.items()))


def unique_scripts(scripts) -> list:
    """``scripts`` without later copies of an earlier script (:func:`script_key`), in order."""
    seen, kept = set(), []
    for script in scripts:
        key = script_key(script)
        if key not in seen:
            seen.add(key)
            kept.append(script)
    return kept


def add_static_path(app, config) -> None:
    path = str(STATIC)
    if path not in config.html_static_path:
        config.html_static_path.append(path)


def default_colour_mode(app, config) -> None:
    """``html_context["default_mode"] = "auto"`` unless the configuration sets it (module docstring)."""
    if getattr(config, "html_context", None) is None:
        config.html_context = {}
    config.html_context.setdefault("default_mode", "auto")


def dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    """Remove duplicate scripts from the list the page template renders (``script_files`` is the
    builder's list; it is restored from ``_orig_js_files`` after every page, so both are cleaned)."""
    for name in ("_js_files", "_orig_js_files"):
        scripts = getattr(app.builder, name, None)
        if isinstance(scripts, list):
            scripts[:] = unique_scripts(scripts)
    if isinstance(context.get("script_files"), list):
        context["script_files"][:] = unique_scripts(context["script_files"])


def setup(app):
    app.connect("config-inited", add_static_path)
    app.connect("config-inited", default_colour_mode)
    app.add_css_file("math-fit.css")
    app.add_css_file("layout.css")
    app.add_js_file("math-fit.js", loading_method="defer", priority=600)  # after MathJax (500)
    app.connect("html-page-context", dedupe_scripts, priority=900)  # after per-page additions
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}

"""Serve the ipywidgets JavaScript from the built book, so that the explorers render offline.

myst-nb embeds each notebook's saved widget state in its page and, by default, loads RequireJS
and the Jupyter widgets HTML manager (``@jupyter-widgets/html-manager``'s ``embed-amd.js``, which
renders that state: the sliders and the output of the explorer's default settings) from two CDNs.
Without a network every explorer was blank. No pinned Python package ships the HTML manager, so
the book carries it in ``book/_static/widgets/`` (html-manager 1.0.15, the release line for
ipywidgets 8, its Font Awesome fonts and RequireJS 2.3.8; versions, checksums and licences in
``book/_static/widgets/SOURCES.txt``), and this extension points myst-nb's ``nb_ipywidgets_js``
at those files (copied to ``_build/html/_static/widgets/`` through ``html_static_path``, which
``page_assets`` extends). ``setup.js``, loaded first, tells the manager where its fonts are and
gives MathJax 3 the one MathJax 2 call (``MathJax.Hub.Queue``) with which the widgets typeset
their labels (without it every label threw an error); no ``data-jupyter-widgets-cdn`` is given, since
the book's widgets are all built-in ones (``@jupyter-widgets/base``, ``controls``, ``output``),
which the bundle contains. A page without widgets loads none of this.
"""

from __future__ import annotations

from pathlib import Path

WIDGETS = Path(__file__).resolve().parent.parent / "_static" / "widgets"
#: Loaded in this order on every page with widgets (paths relative to ``_static/``).
SCRIPTS = ("widgets/setup.js", "widgets/require.js", "widgets/embed-amd.js")


def widget_scripts() -> dict[str, dict[str, str]]:
    """The value of myst-nb's ``nb_ipywidgets_js``: the local scripts, no attributes."""
    for script in SCRIPTS:
        path = WIDGETS.parent / script
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: the widget manager that book/_ext/local_widgets.py "
                                    f"serves is part of the repository (see book/_static/widgets/SOURCES.txt)")
    return {script: {} for script in SCRIPTS}


def use_local_widgets(app, config) -> None:
    config.nb_ipywidgets_js = widget_scripts()


def setup(app):
    app.connect("config-inited", use_local_widgets)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}

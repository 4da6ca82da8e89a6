"""Serve MathJax 3 from the built book, so that its mathematics renders without a network.

By default Sphinx loads MathJax from a CDN, and a reader without a connection sees raw
``\\(\\operatorname{col}(B_*)\\)``. This extension copies the MathJax 3 distribution that the pinned
pip package ``django-static-mathjax`` ships (its ``es5`` folder: the components, fonts and TeX
extensions, about 20 MB) into ``_build/html/_static/mathjax/`` and points ``mathjax_path`` at
its ``tex-mml-chtml.js``, the component Sphinx's default CDN address names.
"""

from __future__ import annotations

import shutil
from importlib.resources import files
from pathlib import Path

#: The component that Sphinx 7's default ``mathjax_path`` loads from the CDN.
COMPONENT = "tex-mml-chtml.js"


def mathjax_es5() -> Path:
    """The ``es5`` folder of the installed MathJax 3 distribution."""
    folder = Path(str(files("mathjax"))) / "static" / "mathjax" / "es5"
    if not (folder / COMPONENT).is_file():
        raise FileNotFoundError(f"{folder / COMPONENT} is missing: install the pinned requirements "
                                f"(django-static-mathjax ships MathJax 3), e.g. make book")
    return folder


def use_local_mathjax(app, config) -> None:
    mathjax_es5()  # fail early, with the fix, when the package is missing
    config.mathjax_path = f"mathjax/{COMPONENT}"  # relative: resolved under _static/


def copy_mathjax(app, exception) -> None:
    if exception is None and app.builder.format == "html":
        shutil.copytree(mathjax_es5(), Path(app.outdir) / "_static" / "mathjax", dirs_exist_ok=True)


def setup(app):
    app.connect("config-inited", use_local_mathjax)
    app.connect("build-finished", copy_mathjax)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}

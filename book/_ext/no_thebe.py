"""No Thebe on the book's pages: the book has no live-code button, so sphinx-thebe only adds clutter.

Jupyter Book 1.x loads sphinx-thebe for every book (it is in Jupyter Book's default extension
list, which a book cannot shorten without restating the whole list in ``sphinx.config``). With
Thebe's launch button off (``launch_buttons.thebe`` unset or false in ``_config.yml``; the book
launches notebooks on Binder and Colab only), sphinx-thebe still writes into every page a
``<script type="text/x-thebe-config">`` that names sphinx-thebe's placeholder repository
(``binder-examples/jupyter-stacks-datascience``, branch ``master``), an inline script declaring
``THEBE_JS_URL`` (Thebe from unpkg.com), ``sphinx-thebe.js`` and ``sphinx-thebe.css``. None of it
is used. When the book's ``launch_buttons`` do not ask for Thebe, this extension disconnects
sphinx-thebe's event handlers (those that add the scripts, the per-page configuration and its
static path) and removes its CSS file, so that none of it reaches the HTML; with
``launch_buttons.thebe: true`` it does nothing (then set ``sphinx.config.thebe_config`` with the
book's repository, or Thebe would start the placeholder's kernel).
"""

from __future__ import annotations

THEBE_MODULE = "sphinx_thebe"
THEBE_CSS = "sphinx-thebe.css"


def thebe_wanted(config) -> bool:
    """Whether the book's launch buttons ask for Thebe (``html_theme_options.launch_buttons.thebe``,
    where Jupyter Book puts ``_config.yml``'s ``launch_buttons``)."""
    options = getattr(config, "html_theme_options", None) or {}
    return bool((options.get("launch_buttons") or {}).get("thebe"))


def thebe_listeners(app) -> list[int]:
    """The ids of the event handlers that sphinx-thebe connected."""
    return [listener.id for listeners in app.events.listeners.values() for listener in listeners
            if (getattr(listener.handler, "__module__", "") or "").split(".")[0] == THEBE_MODULE]


def remove_thebe(app, config) -> None:
    if thebe_wanted(config):
        return
    for listener_id in thebe_listeners(app):
        app.disconnect(listener_id)
    css = app.registry.css_files
    css[:] = [entry for entry in css if entry[0] != THEBE_CSS]


def setup(app):
    app.connect("config-inited", remove_thebe)  # after every extension's setup, before the builder
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}

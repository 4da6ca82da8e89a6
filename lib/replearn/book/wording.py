"""Settings in words: what the CIFAR sections of chapter 4 (4.7-4.9 and their reproduction pages)
say about the network, the training and the seeds of a run, read from a settings object or from the
settings dict of a committed results file alike, and a settings table of such rows, so that no page
prints a dataclass, a tuple or a library name such as ``fedrep_cnn``."""

from __future__ import annotations

from replearn.book.claims import fmt
from replearn.table import Table

__all__ = ["get", "network", "seeds", "settings_table", "side_by_side", "training"]


def get(settings, name: str):
    """Field ``name`` of ``settings`` (a settings object or a results file's settings dict);
    ``"train.lr"`` reads a field of the composed training settings."""
    value = settings
    for part in name.split("."):
        if isinstance(value, dict):
            if part not in value:
                raise ValueError(f"the settings have no field {name!r}")
            value = value[part]
        else:
            if not hasattr(value, part):
                raise ValueError(f"the settings have no field {name!r}")
            value = getattr(value, part)
    return value


def _and(items) -> str:
    items = [str(i) for i in items]
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def network(settings) -> str:
    """The network of ``settings`` in words, with its widths and float precision."""
    model, dtype = get(settings, "model"), get(settings, "dtype")
    if model == "fedavg_cnn":
        text = (f"the paper's CNN, three blocks of two convolutions ({_and(get(settings, 'channels'))} channels) "
                f"and linear layers of {_and(get(settings, 'hidden'))} units")
    elif model == "fedrep_cnn":
        variant = get(settings, "variant")
        text = ("the FedRep CNN (two convolutions, three linear layers)" +
                (", narrowed to 16 and 32 channels" if variant == "narrow" else ""))
    else:
        raise ValueError(f"model must be 'fedavg_cnn' or 'fedrep_cnn', got {model!r}")
    return f"{text}, in {'double' if dtype == 'float64' else 'single'} precision"


def training(settings) -> str:
    """The optimiser and participation of ``settings`` in words."""
    clients = get(settings, "clients")
    per_round = max(1, round(get(settings, "train.participation") * clients))
    return (f"{per_round} of {clients} clients per round; SGD with step size {fmt(get(settings, 'train.lr'), 'g')}, "
            f"momentum {fmt(get(settings, 'train.momentum'), 'g')}, batches of {get(settings, 'train.batch_size')}")


def seeds(settings) -> str:
    """``"3 (0, 1 and 2)"``: how many seeds and which."""
    s = list(get(settings, "seeds"))
    return f"{len(s)} ({_and(s)})"


def settings_table(rows, caption: str | None = None, columns=("value",)) -> Table:
    """A table of settings in words: one row per setting, ``(setting, value, ...)`` with one
    non-empty string per name in ``columns`` (e.g. ``("near-paper run", "CPU default")``)."""
    rows = [list(r) for r in rows]
    width = 1 + len(columns)
    if not rows or any(len(r) != width or not all(isinstance(c, str) and c for c in r) for r in rows):
        raise ValueError(f"settings_table needs rows of {width} non-empty strings (the setting, then one value per "
                         f"column of {tuple(columns)!r})")
    return Table(["setting", *columns], rows, caption=caption, align="l" * width)


def side_by_side(*row_lists) -> list[tuple[str, ...]]:
    """Rows of several runs' settings (lists of ``(setting, value)`` with the same settings in
    the same order) joined into rows ``(setting, value of run 1, value of run 2, ...)``."""
    names = [[name for name, _ in rows] for rows in row_lists]
    if any(n != names[0] for n in names):
        raise ValueError(f"side_by_side needs the same settings in the same order, got {names}")
    return [(name, *(rows[i][1] for rows in row_lists)) for i, name in enumerate(names[0])]


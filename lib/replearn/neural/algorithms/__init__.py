"""Federated algorithms as open units: every method of Table 1 of Collins et al. (2021), D-SGD
and fine-tuning, each in its own module, registered by discovery.

Each module of this package defines ``ALGORITHM`` (or ``ALGORITHMS``), instances of
:class:`replearn.neural.algorithms.base.Algorithm`: a name (Table 1's), its Table 1 row and
numbers, an ``Options`` dataclass of hyper-parameters and the hooks the engine's one round loop
(:func:`replearn.neural.run`) calls. The registry :data:`REGISTRY` is filled from the modules
found in the package, so adding an algorithm means adding one file (and its test); a reader's
own method, defined anywhere, joins with :func:`register`. The registry is the only list of
methods: :func:`table1` and :func:`paper_table1` read Table 1 from it, and the book's pages, the
benchmarks, the tests and Flower (:mod:`replearn.neural.flower`) take their methods from it. :func:`run` is the single entry point:
``algorithms.run("Ditto", model, clients, cfg, algorithms.get("Ditto").Options(lam=1.0))``;
``FedResult.final`` is the evaluation of what each client would use (its personal, mixed,
adapted or fine-tuned model). :func:`methods_table` lists them all: what each shares, keeps
personal and adds to its local objective, and its paper (each algorithm's ``summary``).
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import NamedTuple

from replearn import neural
from replearn.neural.algorithms.base import TABLE1_COLUMNS, Algorithm
from replearn.table import Table

__all__ = ["REGISTRY", "register", "unregister", "TABLE1_COLUMNS", "MethodRow", "MethodsTable", "get", "methods_table", "names", "paper_table1",
           "run", "table1"]


def _discover() -> dict[str, Algorithm]:
    found: dict[str, Algorithm] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.name == "base":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        algs = getattr(module, "ALGORITHMS", ()) + ((module.ALGORITHM,) if hasattr(module, "ALGORITHM") else ())
        for alg in algs:
            if not isinstance(alg, Algorithm) or not alg.name:
                raise TypeError(f"{module.__name__}: ALGORITHM(S) must be named replearn.neural.algorithms.base.Algorithm s")
            if alg.name in found:
                raise ValueError(f"two algorithms named {alg.name!r} ({module.__name__})")
            alg.module = module.__name__
            found[alg.name] = alg
    return found


def _order(alg: Algorithm) -> tuple:
    return (alg.table1_row is None, alg.table1_row or 0, alg.name)


#: Every algorithm of the package by name, in Table 1's order (then others by name). The only
#: list of methods: Table 1 membership, order and numbers are each algorithm's own data.
REGISTRY: dict[str, Algorithm] = dict(sorted(_discover().items(), key=lambda kv: _order(kv[1])))


def register(algorithm: Algorithm) -> Algorithm:
    """Add ``algorithm`` (defined outside this package, e.g. in a reader's own module) to
    :data:`REGISTRY`, in its place by ``table1_row`` then name; ``ValueError`` if its name is
    taken. Returns it (so ``ALGORITHM = register(MyMethod())``)."""
    if not isinstance(algorithm, Algorithm) or not algorithm.name:
        raise TypeError(f"register needs a named replearn.neural.algorithms.base.Algorithm, got {algorithm!r}")
    if algorithm.name in REGISTRY:
        raise ValueError(f"an algorithm named {algorithm.name!r} is already registered ({REGISTRY[algorithm.name].module})")
    check_table1_row(algorithm)
    algorithm.module = type(algorithm).__module__
    items = sorted([*REGISTRY.items(), (algorithm.name, algorithm)], key=lambda kv: _order(kv[1]))
    REGISTRY.clear()
    REGISTRY.update(items)
    return algorithm


def check_table1_row(algorithm: Algorithm) -> None:
    """A method with a ``table1_row`` must carry its Table 1 numbers for every column of
    :data:`TABLE1_COLUMNS` (``paper_accuracy``, :func:`~replearn.neural.algorithms.base.table1_accuracy`),
    since :func:`paper_table1` and the book's tables read them; ``ValueError`` naming the method
    and the columns it lacks otherwise."""
    if algorithm.table1_row is None:
        return
    missing = [col for col in TABLE1_COLUMNS if col not in (algorithm.paper_accuracy or {})]
    if missing:
        raise ValueError(f"{algorithm.name}: table1_row = {algorithm.table1_row} says it is a row of Table 1, but its "
                         f"paper_accuracy lacks the columns {missing}; give it table1_accuracy(...) with one number "
                         f"per column of TABLE1_COLUMNS, or leave table1_row = None for a method outside Table 1")


def unregister(name: str) -> None:
    """Remove ``name`` from :data:`REGISTRY` (the inverse of :func:`register`)."""
    get(name)
    del REGISTRY[name]


def names() -> tuple[str, ...]:
    """The registered algorithms' names (Table 1's order first)."""
    return tuple(REGISTRY)


def table1() -> tuple[str, ...]:
    """The registered methods of Table 1 of Collins et al. (2021), in its row order."""
    return tuple(n for n, a in REGISTRY.items() if a.table1_row is not None)


def paper_table1() -> dict[tuple[str, int, int], dict[str, float]]:
    """Table 1's numbers (average test accuracy, %) as ``{column: {method: accuracy}}`` for the
    columns of :data:`TABLE1_COLUMNS`, read from each registered method's ``paper_accuracy``."""
    return {col: {n: REGISTRY[n].paper_accuracy[col] for n in table1()} for col in TABLE1_COLUMNS}


def get(name: str) -> Algorithm:
    """The algorithm called ``name`` (see :func:`names`)."""
    if name not in REGISTRY:
        raise ValueError(f"unknown algorithm {name!r}; choose one of {names()}")
    return REGISTRY[name]


def run(name: str, model, clients: neural.ClientData, cfg: neural.TrainConfig, options=None, *, state=None,
        callback=None, workers: int | None = None, runner=None) -> neural.FedResult:
    """Train ``name`` on ``clients`` from ``model`` (its parameters, or ``state``) with ``cfg``
    and the algorithm's ``options`` (default: its ``Options()``); ``workers``: client threads
    (see :func:`replearn.neural.run`); ``runner``: what runs the rounds (default the engine's
    loop; :mod:`replearn.neural.flower` passes Flower's). Returns the run's
    :class:`~replearn.neural.FedResult`."""
    return get(name).run(model, clients, cfg, options, state=state, callback=callback, workers=workers,
                         runner=runner)


class MethodRow(NamedTuple):
    """One row of :func:`methods_table`: an algorithm's name and its ``summary``'s fields."""

    method: str
    shares: str
    personal: str
    local_objective: str
    cite: str


class MethodsTable(tuple):
    """The rows of :func:`methods_table` (a tuple of :class:`MethodRow`), shown in a notebook as
    the book's other tables (:meth:`table`, a :class:`replearn.table.Table`); :meth:`to_frame`
    makes a pandas DataFrame (pandas needed)."""

    #: The column headers, in the order of :class:`MethodRow`'s fields.
    COLUMNS = ("method", "shares", "keeps personal", "local objective adds", "citation key")

    def table(self, caption: str | None = None):
        """A :class:`replearn.table.Table` of the rows without their citation keys, which the
        page's prose cites as links (``display(...)`` it, with a caption); when rows of Table 1
        and others are both present, in two parts, Table 1's first."""
        shown, paper = self.COLUMNS[:-1], set(table1())
        rows = sorted(self, key=lambda r: r.method not in paper)    # stable: each part keeps its order
        first_other = next((i for i, r in enumerate(rows) if r.method not in paper), None)
        parts = {} if first_other in (None, 0) else {0: "the methods of Table 1",
                                                       first_other: "registered beside Table 1"}
        return Table(shown, [row[:-1] for row in rows], caption=caption, align="l" * len(shown), parts=parts)

    def to_frame(self):
        import pandas as pd
        return pd.DataFrame(list(self), columns=list(self.COLUMNS))

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()

    def __repr__(self) -> str:
        return repr(self.table())


def methods_table(algorithms=None) -> MethodsTable:
    """What each algorithm shares, keeps personal and adds to its local objective, and its
    paper's key in ``references.bib``: one :class:`MethodRow` per algorithm of ``algorithms``
    (names; default: the methods of Table 1, :func:`table1`, in its order, then every other
    registered method, a reader's own included), from its ``summary``
    (:class:`~replearn.neural.algorithms.base.Summary`)."""
    rows = []
    default = (*table1(), *(n for n in names() if n not in table1()))
    for name in (default if algorithms is None else algorithms):
        alg = get(name)
        if alg.summary is None:
            raise ValueError(f"{name}: the algorithm has no summary")
        s = alg.summary
        rows.append(MethodRow(alg.name, s.shares, s.personal, s.local_objective, s.cite))
    return MethodsTable(rows)

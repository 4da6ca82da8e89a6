"""Execution records of the book's notebooks, the "Execution status" table and the run times quoted
in the introduction, all from one source: the notebooks' own metadata.

**Records.** Every time ``scripts/execute_notebooks.py`` (``make execute``) re-runs a notebook
successfully it stores, in the notebook's metadata under ``metadata["replearn"]["execution"]``
(:func:`record_execution`), a record of that run::

    {"wall_time_s": 41, "profile": "default", "data": "offline subsets", "date": "2026-12-01",
     "cpu": "AMD EPYC", "threads": 2, "status": "ok"}

``wall_time_s`` is the wall time of the whole notebook in a fresh kernel (start-up included),
rounded to seconds; ``profile`` is ``REPLEARN_PROFILE``; ``data`` what the notebook trained on
(:func:`data_kind`: ``"none"``, ``"offline subsets"`` or ``"full datasets"``); ``date`` the UTC
day; ``cpu`` and ``threads`` the CPU model and torch's thread count of the machine that ran it;
``status`` is ``"ok"`` (a notebook whose execution fails is not written, so its record stays that of
its last successful run). Nothing compares this metadata: strict nbval compares cell outputs only.

**Page.** The directive ``{execution-status}`` becomes a table with one row per notebook of the
book, in the order of the table of contents: the section's title (a link), wall time, profile,
data, date and status (``not recorded`` for a notebook without a record), a total row, and the
machines that ran them.

**Prose.** The role ``{execution}`` writes one statistic of the recorded wall times of the
``default`` profile (what the stored outputs show): ``median``, ``max``, ``total`` (with "k of n
sections recorded" while some notebook has no record), ``slowest`` (the slowest section's title,
linked), ``machine`` (the CPU and threads; with the sections each ran where there were several)
or ``count``; so that no run time is typed by hand.

**Results files.** The directive ``{results-status}`` becomes a table of the committed results of runs
too long for the notebooks (``book/results/<profile>/<section>.json``, written by
``scripts/run_results.py``): for each file its profile and section, the commit of the code that
ran it, the date, the device (with the CPU and its threads), the seeds and the wall time, read from
the file's provenance when the book is built (:func:`results_rows`).

The first two are filled in after all documents were read (``doctree-resolved``: every title is known then),
and every page that uses them depends on every notebook (rebuilt when one changes).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import statistics
from dataclasses import dataclass
from pathlib import Path

from docutils import nodes
from sphinx.util.docutils import SphinxDirective, SphinxRole

from replearn.backend import cpu_name

#: The notebook metadata path of the record: ``metadata["replearn"]["execution"]``.
KEY = ("replearn", "execution")
#: What the status table and the prose show for a notebook without a record.
NOT_RECORDED = "not recorded"
#: The profile whose run times the prose quotes (what the stored outputs show).
DEFAULT_PROFILE = "default"

#: What :meth:`replearn.neural.data.CifarData.describe` prints for each kind of data it serves
#: (``source`` ``"full"`` and ``"subset"``), and the name the status table gives that kind.
DESCRIBED_SOURCES = {"full official dataset": "full datasets",
                     "offline subset of the official images": "offline subsets"}
#: ``data`` of a notebook that loads no data set.
NO_DATA = "none"
#: ``data`` of a notebook that loads CIFAR but never printed which data it was served.
UNREPORTED_DATA = "CIFAR (source not printed)"


# --------------------------------------------------------------------------- writing records


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value or "")


def _code_cells(nb) -> list:
    return [c for c in nb.get("cells", []) if c.get("cell_type") == "code"]


def uses_cifar(nb) -> bool:
    """Whether a code cell of the notebook calls ``load_cifar`` (:func:`replearn.neural.data.load_cifar`)."""
    return any("load_cifar(" in _text(c.get("source")) for c in _code_cells(nb))


def data_kind(nb) -> str:
    """What data an executed notebook ran on: ``"none"`` unless a code cell calls ``load_cifar``;
    else the kinds that :meth:`replearn.neural.data.CifarData.describe` printed in its outputs,
    ``"offline subsets"`` or ``"full datasets"`` (both, joined by ``" + "``, when a notebook was
    served both), or :data:`UNREPORTED_DATA` when it printed neither."""
    if not uses_cifar(nb):
        return NO_DATA
    text = []
    for cell in _code_cells(nb):
        for out in cell.get("outputs", []):
            text.append(_text(out.get("text")))
            text.extend(_text(v) for k, v in (out.get("data") or {}).items() if k.startswith("text/"))
    text = "\n".join(text)
    kinds = sorted(name for phrase, name in DESCRIBED_SOURCES.items() if phrase in text)
    return " + ".join(kinds) if kinds else UNREPORTED_DATA


def record_execution(nb, seconds: float, *, profile: str, threads: int, cpu: str | None = None,
                     today: _dt.date | None = None) -> dict:
    """Store the record of a successful execution of ``nb`` that took ``seconds`` in its metadata
    (``metadata["replearn"]["execution"]``; other keys under ``"replearn"`` are kept) and return it.
    ``cpu`` defaults to :func:`cpu_name`, ``today`` to the current UTC date."""
    seconds = float(seconds)
    if not 0 <= seconds < float("inf"):
        raise ValueError(f"seconds must be a finite non-negative number, got {seconds!r}")
    if not isinstance(profile, str) or not profile:
        raise ValueError(f"profile must be a non-empty string, got {profile!r}")
    record = {
        "wall_time_s": int(round(seconds)),
        "profile": profile,
        "data": data_kind(nb),
        "date": (today or _dt.datetime.now(_dt.timezone.utc).date()).isoformat(),
        "cpu": cpu if cpu is not None else cpu_name(),
        "threads": int(threads),
        "status": "ok",
    }
    outer, inner = KEY
    section = dict(nb["metadata"].get(outer) or {})
    section[inner] = record
    nb["metadata"][outer] = section
    return record


# --------------------------------------------------------------------------- reading records


def read_record(metadata) -> dict | None:
    """The execution record in a notebook's ``metadata``; None when there is none, or it is not a
    record (no non-negative number of seconds)."""
    outer, inner = KEY
    record = (metadata or {}).get(outer)
    record = record.get(inner) if isinstance(record, dict) else None
    if not isinstance(record, dict):
        return None
    wall = record.get("wall_time_s")
    if isinstance(wall, bool) or not isinstance(wall, (int, float)) or not 0 <= wall < float("inf"):
        return None
    return record


def read_notebook_record(path: str | os.PathLike) -> dict | None:
    """:func:`read_record` of the notebook file ``path`` (None when it cannot be read as JSON)."""
    try:
        with open(path, encoding="utf-8") as f:
            nb = json.load(f)
    except (OSError, ValueError):
        return None
    return read_record(nb.get("metadata") if isinstance(nb, dict) else None)


def format_duration(seconds: float | None) -> str:
    """``"8 s"``, ``"2 min 05 s"``, ``"1 h 03 min"``; :data:`NOT_RECORDED` for None."""
    if seconds is None:
        return NOT_RECORDED
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


@dataclass(frozen=True)
class Row:
    """One notebook of the status table: its document name and its record (None: not recorded)."""

    docname: str
    record: dict | None

    def cells(self) -> tuple[str, str, str, str, str]:
        """Wall time, profile, data, date and status as the table shows them."""
        if self.record is None:
            return NOT_RECORDED, "–", "–", "–", NOT_RECORDED
        r = self.record
        return (format_duration(r["wall_time_s"]), str(r.get("profile", "?")), str(r.get("data", "?")),
                str(r.get("date", "?")), str(r.get("status", "?")))

    @property
    def machine(self) -> str | None:
        """``"AMD EPYC, 2 threads"`` (None without a record)."""
        if self.record is None:
            return None
        cpu, threads = self.record.get("cpu") or "unknown CPU", self.record.get("threads")
        return f"{cpu}, {threads} thread{'s' * (threads != 1)}" if threads else str(cpu)


def status_rows(notebooks) -> list[Row]:
    """One :class:`Row` per ``(docname, path)`` of ``notebooks``, in that order."""
    return [Row(docname, read_notebook_record(path)) for docname, path in notebooks]


def summary(rows: list[Row], profile: str | None = DEFAULT_PROFILE) -> dict:
    """Statistics of the recorded wall times of the ``rows`` run with ``profile`` (any profile when
    None): ``count`` (those rows), ``notebooks`` (all rows), ``total``, ``median`` and ``max``
    seconds (None when no row counts), ``slowest`` (the docname of the maximum, the first of equal
    ones) and ``machines`` (how many of those rows each machine ran, most first)."""
    timed = [r for r in rows
             if r.record is not None and (profile is None or r.record.get("profile") == profile)]
    times = [r.record["wall_time_s"] for r in timed]
    slowest = max(timed, key=lambda r: r.record["wall_time_s"]).docname if timed else None
    counts: dict[str, int] = {}
    for r in timed:
        counts[r.machine] = counts.get(r.machine, 0) + 1
    return {"count": len(timed), "notebooks": len(rows), "total": sum(times) if times else None,
            "median": statistics.median(times) if times else None, "max": max(times) if times else None,
            "slowest": slowest, "machines": dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))}


def recorded_note(stats: dict) -> str:
    """``""`` when every notebook counts in ``stats``, else ``" (k of n sections recorded)"``."""
    if stats["count"] == stats["notebooks"]:
        return ""
    return f" ({stats['count']} of {stats['notebooks']} sections recorded)"


def statistic(what: str, stats: dict) -> str:
    """The text of the role ``{execution}`what``` for :func:`summary` ``stats`` (``slowest``: the
    docname, or :data:`NOT_RECORDED`; the page builder turns a docname into a link)."""
    if what in ("median", "max"):
        return format_duration(stats[what])
    if what == "total":
        return format_duration(stats["total"]) + (recorded_note(stats) if stats["total"] is not None else "")
    if what == "count":
        return f"{stats['count']} of {stats['notebooks']}"
    if what == "machine":
        machines = stats["machines"]
        if len(machines) < 2:
            return next(iter(machines), NOT_RECORDED)
        return " and ".join(f"{m} ({n} section{'s' * (n != 1)})" for m, n in machines.items())
    if what == "slowest":
        return stats["slowest"] or NOT_RECORDED
    raise ValueError(f"unknown statistic {what!r}; use one of {STATISTICS}")


#: What the role ``{execution}`` can write.
STATISTICS = ("median", "max", "total", "count", "machine", "slowest")


# --------------------------------------------------------------------------- Sphinx


def book_notebooks(env) -> list[tuple[str, str]]:
    """``(docname, path)`` of every notebook of the book: in the order of the table of contents
    (depth first from the root document), then any others found, by name."""
    order, seen = [], set()

    def visit(doc):
        if doc in seen:
            return
        seen.add(doc)
        order.append(doc)
        for child in env.toctree_includes.get(doc, []):
            visit(child)

    visit(env.config.root_doc)
    order += sorted(set(env.found_docs) - seen)
    return [(doc, str(env.doc2path(doc))) for doc in order
            if doc in env.found_docs and str(env.doc2path(doc)).endswith(".ipynb")]


RESULTS = Path(__file__).resolve().parents[1] / "results"


def results_rows(folder: Path = RESULTS) -> list[tuple[str, ...]]:
    """One row per results file under ``folder`` (``<profile>/<section>.json``), sorted by profile
    then section: profile, section, the run's commit (12 characters), its UTC day, device, seeds and
    wall time, from the file's ``provenance``; a file that cannot be read as JSON is a ValueError
    naming it (the book would otherwise show results nobody can trace)."""
    rows = []
    for path in sorted(folder.glob("*/*.json")):
        try:
            data = json.loads(path.read_text())
            prov, seeds = data["provenance"], data["seeds"]
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{path}: not a results file of scripts/run_results.py ({err}); "
                             f"re-run its section or delete the file") from err
        device = prov.get("device", "?")
        if device == "cpu" and prov.get("cpu"):
            device = f"{prov['cpu']}, {prov.get('threads', '?')} thread{'s' * (prov.get('threads') != 1)}"
        wall = prov.get("wall_s")
        rows.append((path.parent.name, path.stem, str(prov.get("commit", "?"))[:12], str(prov.get("date", "?"))[:10],
                     device, ", ".join(map(str, seeds)),
                     format_duration(wall) if isinstance(wall, (int, float)) else NOT_RECORDED))
    return rows


class ResultsStatusDirective(SphinxDirective):
    has_content = False

    def run(self):
        header = ("Profile", "Section", "Commit", "Date (UTC)", "Device", "Seeds", "Wall time")
        tbl = nodes.table(classes=["execution-status"])
        group = nodes.tgroup(cols=len(header))
        tbl += group
        for width in (8, 18, 14, 12, 30, 8, 10):
            group += nodes.colspec(colwidth=width)
        group += nodes.thead("", nodes.row("", *(entry(nodes.Text(h)) for h in header)))
        body = nodes.tbody()
        group += body
        for path in sorted(RESULTS.glob("*/*.json")):
            self.env.note_dependency(str(path))
        for row in results_rows():
            body += nodes.row("", *(entry(nodes.literal("", c) if i in (1, 2) else nodes.Text(c))
                                    for i, c in enumerate(row)))
        return [tbl]


class execution_status_table(nodes.General, nodes.Element):
    """Placeholder of the status table, replaced when the document is resolved."""


class execution_statistic(nodes.Inline, nodes.Element):
    """Placeholder of one statistic (attribute ``what``), replaced when the document is resolved."""


def _placeholder(node_class, **attributes):
    """A placeholder holding an empty math node: section titles may hold math (``4.4 FedAvg learns
    $B_*$``), and Sphinx loads MathJax only on pages that had math when they were read."""
    return node_class("", nodes.math("", ""), **attributes)


def note_notebooks(env):
    for docname in env.found_docs:
        path = str(env.doc2path(docname))
        if path.endswith(".ipynb"):
            env.note_dependency(path)


class ExecutionStatusDirective(SphinxDirective):
    has_content = False

    def run(self):
        note_notebooks(self.env)
        return [_placeholder(execution_status_table)]


class ExecutionRole(SphinxRole):
    def run(self):
        what = self.text.strip()
        if what not in STATISTICS:
            msg = self.inliner.reporter.error(
                f"{{execution}}: unknown statistic {what!r}; use one of {', '.join(STATISTICS)}",
                line=self.lineno)
            problem = self.inliner.problematic(self.rawtext, self.rawtext, msg)
            return [problem], [msg]
        note_notebooks(self.env)
        return [_placeholder(execution_statistic, what=what)], []


def link(app, fromdocname, docname):
    """A link to ``docname`` that shows its title (math included, as in the table of contents)."""
    title = app.env.titles.get(docname)
    children = [c.deepcopy() for c in title.children] if title is not None else [nodes.Text(docname)]
    uri = app.builder.get_relative_uri(fromdocname, docname)
    return nodes.reference("", "", *children, internal=True, refuri=uri)


def entry(*children):
    return nodes.entry("", nodes.paragraph("", "", *children))


def table(app, fromdocname, rows):
    header = ("Section", "Wall time", "Profile", "Data", "Date (UTC)", "Status")
    tbl = nodes.table(classes=["execution-status"])
    group = nodes.tgroup(cols=len(header))
    tbl += group
    for width in (40, 12, 10, 14, 12, 12):
        group += nodes.colspec(colwidth=width)
    head = nodes.thead()
    group += head
    head += nodes.row("", *(entry(nodes.Text(h)) for h in header))
    body = nodes.tbody()
    group += body
    for r in rows:
        body += nodes.row("", entry(link(app, fromdocname, r.docname)),
                          *(entry(nodes.Text(c)) for c in r.cells()))
    every = summary(rows, profile=None)
    total = format_duration(every["total"]) if every["total"] is not None else NOT_RECORDED
    label = "Total" + recorded_note(every)
    body += nodes.row("", entry(nodes.strong("", label)), entry(nodes.strong("", total)),
                      *(entry(nodes.Text("")) for _ in range(4)))
    out = [tbl]
    if every["machines"]:
        runs = "; ".join(f"{m} ({n} section{'s' * (n != 1)})" for m, n in every["machines"].items())
        out.append(nodes.paragraph("", f"Executed on: {runs}."))
    return out


def resolve(app, doctree, fromdocname):
    tables = list(doctree.findall(execution_status_table))
    values = list(doctree.findall(execution_statistic))
    if not tables and not values:
        return
    rows = status_rows(book_notebooks(app.env))
    for node in tables:
        node.replace_self(table(app, fromdocname, rows))
    stats = summary(rows)
    for node in values:
        what = node["what"]
        if what == "slowest" and stats["slowest"] is not None:
            node.replace_self(link(app, fromdocname, stats["slowest"]))
        else:
            node.replace_self(nodes.Text(statistic(what, stats)))


def setup(app):
    app.add_node(execution_status_table)
    app.add_node(execution_statistic)
    app.add_directive("execution-status", ExecutionStatusDirective)
    app.add_directive("results-status", ResultsStatusDirective)
    app.add_role("execution", ExecutionRole())
    app.connect("doctree-resolved", resolve)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}

"""Nothing in Python's voice on a page (issue 44): the stored outputs of every notebook, as the
reader sees them (a cell's HTML where it has one, else its text; a saved widget shows as the
widget, so its text fallback is not read), hold no dataclass repr, list or dict repr, array,
``None``/``True``/``False`` or unrounded float."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p for p in (ROOT / "book").rglob("*.ipynb") if "_build" not in p.parts
                   and ".ipynb_checkpoints" not in p.parts)

#: what Python prints and a page should not: name -> pattern
PYTHON_VOICE = {
    "dataclass repr": re.compile(r"\b[A-Z][A-Za-z0-9]+\([a-z_][a-z_0-9]*="),
    "list repr": re.compile(r"\[(['\"])[^'\"\n]*\1(?:, (['\"])[^'\"\n]*\2)+\]"),
    "dict repr": re.compile(r"\{(['\"])[^'\"\n]+\1: "),
    "None, True or False": re.compile(r"(?<![\w'\"])(None|True|False)(?![\w'\"])"),
    "array or tensor": re.compile(r"\b(array|tensor)\(\["),
    "unrounded float": re.compile(r"(?<![\w.])\d+\.\d{7,}"),
}


def shown_text(output: dict) -> str:
    """What the reader sees of a stored output, as text: the stream's text, or the HTML of a
    rich output where it has one (else its plain text); nothing of a widget or an image."""
    if output.get("output_type") == "stream":
        return "".join(output.get("text", ""))
    data = output.get("data", {})
    if "application/vnd.jupyter.widget-view+json" in data or "image/png" in data:
        return ""
    html = data.get("text/html")
    return re.sub(r"<[^>]+>", " ", "".join(html)) if html else "".join(data.get("text/plain", ""))


def voice(text: str) -> list[str]:
    """Every stretch of ``text`` in Python's voice (:data:`PYTHON_VOICE`), with its kind."""
    return [f"{kind}: ...{text[max(0, m.start() - 40):m.end() + 30]!r}..."
            for kind, pattern in PYTHON_VOICE.items() for m in pattern.finditer(text)]


def test_the_patterns_find_python_and_leave_the_books_words():
    assert voice("TrainConfig(rounds=20, lr=0.05)")
    assert voice("methods ['FedAvg', 'FedRep']") and voice("{'cifar10': 3}")
    assert voice("head epochs: None") and voice("augment True") and voice("array([1, 2])")
    assert voice("noise_std 0.03162277660168379")
    assert not voice("FedRep 84.7% (paper 87.70); none; yes; holds: +2 [+1, +3] points (n = 100)")
    assert not voice("mean ± sd 0.97 ± 0.02; the column (100, 2); f(x) = 3; 'FedAvg' and 'FedRep'")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT / "book")))
def test_no_stored_output_speaks_python(path):
    nb = json.loads(path.read_text())
    found = [f"cell {i}: {hit}" for i, cell in enumerate(nb["cells"]) if cell["cell_type"] == "code"
             for out in cell.get("outputs", []) for hit in voice(shown_text(out))]
    assert not found, "\n".join(found[:10])

"""Glued prose numbers are stored rounded, so strict nbval can compare them on another CPU.

myst-nb stores every ``glue(name, value)`` as a hidden notebook output holding ``repr(value)``,
and strict nbval compares it like any other output. A full-precision float
(``0.053518619444278936``) differs in its last bits between BLAS builds and fails CI on another
machine; glue through :func:`replearn.book.claims.glue_number`, which rounds to the digits the text
shows.
"""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(p for p in (ROOT / "book").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts
                   and "_build" not in p.parts)
MAX_SIGNIFICANT = 6
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def significant_digits(text: str) -> int:
    """Significant digits of a number written as ``text`` (``0.0535`` -> 3, ``12.50`` -> 4)."""
    mantissa = re.split(r"[eE]", text.lstrip("-"))[0]
    digits = mantissa.replace(".", "").lstrip("0")
    return len(digits) if "." in mantissa else len(digits.rstrip("0")) or 1


def glued_outputs(path: Path):
    nb = json.loads(path.read_text())
    for index, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            meta = out.get("metadata", {}).get("scrapbook")
            if meta:
                prefix = meta.get("mime_prefix", "")
                yield index, meta.get("name"), out.get("data", {}).get(prefix + "text/plain", "")


def test_significant_digits():
    assert significant_digits("0.053518619444278936") == 17
    assert significant_digits("0.0535") == 3
    assert significant_digits("5.13") == 3
    assert significant_digits("1200") == 2
    assert significant_digits("-1.5e-05") == 2


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[str(p.relative_to(ROOT / "book")) for p in NOTEBOOKS])
def test_glued_numbers_are_rounded(path):
    bad = []
    for index, name, text in glued_outputs(path):
        for number in NUMBER.findall(text):
            if significant_digits(number) > MAX_SIGNIFICANT:
                bad.append(f"cell {index}, glue {name!r}: {text[:60]}")
    assert not bad, ("glued values stored at full precision (use replearn.book.claims.glue_number, which "
                     "rounds to the digits the text shows):\n  " + "\n  ".join(bad))

"""docs/architecture.md against the layers tests/test_layout.py enforces: its diagram names
every layer of ``LAYERS``, in order, one row each, with its description in one column, and
its table of rooms has a row for every module and package of the package."""

from __future__ import annotations

import re
from pathlib import Path

from test_layout import LAYERS, PACKAGE, SRC

PAGE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
#: The column where every row's description starts.
COLUMN = 40


def diagram() -> list[str]:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index("```text\n") + len("```text\n")
    return text[start : text.index("```", start)].splitlines()


def test_the_diagram_is_the_layers_in_order_one_row_each() -> None:
    rows = [line for line in diagram() if not re.fullmatch(r"[\s|/\\]*", line)]
    names = [{name.rstrip("/") for name in row[:COLUMN].split()} for row in rows]
    assert names == [set(layer) for layer in LAYERS]


def test_every_description_starts_in_one_column() -> None:
    for line in diagram():
        if re.fullmatch(r"[\s|/\\]*", line):
            assert len(line) < COLUMN, line  # a connector stays left of the descriptions
            continue
        assert line[COLUMN - 2 : COLUMN] == "  " and line[COLUMN] != " ", line


def test_the_table_has_a_row_for_every_room() -> None:
    text = PAGE.read_text(encoding="utf-8")
    rooms = set(re.findall(r"^\| `([\w/.]+)` \|", text, flags=re.MULTILINE))
    package = SRC / PACKAGE
    expected = {f"{path.name}/" if path.is_dir() else path.name for path in package.iterdir()
                if (path.is_dir() and (path / "__init__.py").exists()) or path.suffix == ".py"}
    assert expected - rooms - {"__main__.py"} == set()

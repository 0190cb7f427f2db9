"""Running the command line inside a test: ``main`` with captured output, its JSON, and a
lengths file (shared by the tests/cli/test_cli*.py files; no torch)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from seqlen_balancing.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``(exit code, stdout, stderr)`` of ``seqlen-balancing *argv``."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    """The ``--json`` object of a run that must succeed."""
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    result: dict[str, Any] = json.loads(out)
    return result


def lengths_file(tmp_path: Path, values: list[int]) -> str:
    """A lengths file (one per line) in ``tmp_path``; its path."""
    path = tmp_path / "lengths.txt"
    path.write_text("".join(f"{v}\n" for v in values), encoding="utf-8")
    return str(path)

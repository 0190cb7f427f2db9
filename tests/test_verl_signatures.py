"""seqlen_balancing.verl.signatures: the prefix rule, and source reading equal to inspect's."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import pytest

from seqlen_balancing.verl.signatures import from_function, from_source, prefix_problem, render

SOURCE = '''
import os

def plain(a, /, b, c=1, *args, d, e=None, **kwargs):
    return 0

def defaults(x=-1, y=(1, "two"), z=os.sep, w=True):
    return 0

def defaults(x=-1, y=(1, "two"), z=os.sep, w=False):  # the last definition wins
    return 0

class Hidden:
    def method(self):
        return 0
'''


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "module.py"
    path.write_text(SOURCE, encoding="utf-8")
    return path


def test_source_reading_equals_inspect_on_the_loaded_function(source: Path) -> None:
    spec = importlib.util.spec_from_file_location("signatures_sample", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert from_source(source, "plain") == from_function(module.plain)
    read = from_source(source, "defaults")
    assert read is not None
    assert read[:2] == from_function(module.defaults)[:2]  # literals: equal values
    assert read[3][2] is False
    # a non-literal default is kept as its text and equals no value
    assert read[2][2] == "os.sep" and prefix_problem(read, from_function(module.defaults)) is not None
    assert from_source(source, "method") is None and from_source(source, "missing") is None


def test_prefix_rule() -> None:
    def verl(a, b=1, c=None):  # type: ignore[no-untyped-def]
        return 0

    def extra_keyword(a, b=1, c=None, *, pad=1):  # type: ignore[no-untyped-def]
        return 0

    def extra_positional(a, b=1, c=None, pad=1):  # type: ignore[no-untyped-def]
        return 0

    def extra_required(a, b=1, c=None, *, pad):  # type: ignore[no-untyped-def]
        return 0

    def other_default(a, b=True, c=None):  # type: ignore[no-untyped-def]
        return 0

    def renamed(a, k=1, c=None):  # type: ignore[no-untyped-def]
        return 0

    def shorter(a, b=1):  # type: ignore[no-untyped-def]
        return 0

    def keyword_b(a, *, b=1, c=None):  # type: ignore[no-untyped-def]
        return 0

    theirs = from_function(verl)
    assert prefix_problem(theirs, from_function(verl)) is None
    assert prefix_problem(theirs, from_function(extra_keyword)) is None
    assert prefix_problem(theirs, from_function(extra_positional)) == (
        "the library's extra parameter 'pad' is not keyword-only with a default"
    )
    assert prefix_problem(theirs, from_function(extra_required)) == (
        "the library's extra parameter 'pad' is not keyword-only with a default"
    )
    # 1 == True in Python, but a different default is a different behaviour
    assert prefix_problem(theirs, from_function(other_default)) == (
        "parameter 2: verl has b=1, the library has b=True"
    )
    assert prefix_problem(theirs, from_function(renamed)) == "parameter 2: verl has b=1, the library has k=1"
    assert prefix_problem(theirs, from_function(shorter)) == "verl has 3 parameters, the library 2"
    assert prefix_problem(theirs, from_function(keyword_b)) == (
        "parameter 2: verl has b=1, the library has b=1 (keyword-only)"
    )
    assert render(theirs) == "(a, b=1, c=None)" == str(inspect.signature(verl))

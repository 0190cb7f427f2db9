"""Runs every docstring example of the package (networkx-style runnable examples)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import seqlen_balancing

MODULES = sorted(
    {"seqlen_balancing"}
    | {
        info.name
        for info in pkgutil.walk_packages(seqlen_balancing.__path__, "seqlen_balancing.")
        if info.name != "seqlen_balancing.__main__"
    }
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, verbose=False, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {name}"


def test_every_public_name_is_documented_with_raises_or_example() -> None:
    for name in seqlen_balancing.__all__:
        if name.startswith("__"):
            continue
        doc = getattr(seqlen_balancing, name).__doc__ or ""
        assert "Returns" in doc or "Example" in doc, f"{name} lacks Returns/Example docs"

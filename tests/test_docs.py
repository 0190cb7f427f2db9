"""Runs every docstring example of the package (networkx-style runnable examples)."""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import pkgutil
import re
from pathlib import Path

import pytest

import seqlen_balancing

MODULES = sorted(
    {"seqlen_balancing"}
    | {
        info.name
        for info in pkgutil.walk_packages(seqlen_balancing.__path__, "seqlen_balancing.")
        # importing these is what they do (run the CLI; switch verl), not a library module
        if info.name not in ("seqlen_balancing.__main__", "seqlen_balancing.verl.enable")
    }
)


def _needs_torch(name: str) -> bool:
    """A module whose source imports torch or tensordict (read, not imported)."""
    spec = importlib.util.find_spec(name)
    source = Path(spec.origin).read_text(encoding="utf-8") if spec and spec.origin else ""
    return re.search(r"^\s*(import|from) (torch|tensordict)\b", source, re.MULTILINE) is not None


@pytest.mark.parametrize(
    "name",
    [pytest.param(name, marks=pytest.mark.torch) if _needs_torch(name) else name for name in MODULES],
)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, verbose=False, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {name}"


@pytest.mark.torch  # reads every public name, the TensorDict ones included
def test_every_public_name_is_documented_with_raises_or_example() -> None:
    for name in seqlen_balancing.__all__:
        if name.startswith("__"):
            continue
        doc = getattr(seqlen_balancing, name).__doc__ or ""
        assert "Returns" in doc or "Example" in doc, f"{name} lacks Returns/Example docs"

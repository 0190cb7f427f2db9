"""Shared fixtures, and the rule that keeps torch out of ``-m "not torch"`` runs.

Tests that need torch (or tensordict, or ``torch.distributed``) say so per module with
``pytestmark = pytest.mark.torch`` (a ``distributed`` mark implies ``torch``), or per test
with ``@pytest.mark.torch`` and a local ``import torch``. With a ``-m`` expression that
deselects every test a module's own marks allow (``-m "not torch"``, as CI's Python
3.10/3.13 stage runs, or ``-m "not slow"``), the module is never imported:
:func:`pytest_ignore_collect` reads its marks from the source, without running it; a
folder whose every test module is left out so is not entered either, so its
``conftest.py`` (``tests/compat``'s imports verl, which imports torch) is not imported.
``tests/test_torch_free.py`` fails when a module uses torch without the mark.

The fixtures build TensorDict batches from lists of effective lengths; they import torch
when called, so this file itself never does.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import itertools
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import torch
    from tensordict import TensorDict

#: Marks that mean "needs torch": ``distributed`` tests spawn torch.distributed processes.
TORCH_MARKS = frozenset({"torch", "distributed"})
#: Fixtures of this file that import torch; a test using one must be marked torch.
TORCH_FIXTURES = frozenset({"masked_batch", "jagged_batch"})
#: Marks whose tests run only when the ``-m`` expression names them (``-m fuzz``,
#: ``-m "fuzz or extras"``): so ``-m "not slow"`` or ``-m "not torch"`` leaves them out too.
OPT_IN_MARKS = ("fuzz", "extras")


def _mark_names(node: ast.AST) -> set[str]:
    """Names ``X`` of every ``pytest.mark.X`` (called or not) inside ``node``."""
    names = set()
    for sub in ast.walk(node):
        if (
            isinstance(sub, ast.Attribute)
            and isinstance(sub.value, ast.Attribute)
            and sub.value.attr == "mark"
            and isinstance(sub.value.value, ast.Name)
            and sub.value.value.id == "pytest"
        ):
            names.add(sub.attr)
    return names


@functools.cache
def module_marks(path: Path) -> frozenset[str]:
    """The marks a test module's ``pytestmark = ...`` assigns, read without importing it."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    marks: set[str] = set()
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign)
            else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in targets):
            marks |= _mark_names(node)
    return frozenset(marks)


def _names(markexpr: str) -> set[str]:
    """The mark names a ``-m`` expression mentions."""
    return set(re.findall(r"[A-Za-z_][\w.]*", markexpr)) - {"and", "or", "not"}


def _never_selects(markexpr: str, marks: frozenset[str]) -> bool:
    """True when ``-m markexpr`` deselects every test carrying ``marks``, whatever other
    marks a test adds (each other name in the expression is tried both ways)."""
    from _pytest.mark.expression import Expression

    expression = Expression.compile(markexpr)
    free = sorted(_names(markexpr) - marks)
    for values in itertools.product((False, True), repeat=len(free)):
        chosen = marks | {name for name, on in zip(free, values, strict=True) if on}

        def matcher(name: str, /, chosen: set[str] = chosen, **kwargs: Any) -> bool:
            return name in chosen

        if expression.evaluate(matcher):
            return False
    return True


def _left_out(path: Path, markexpr: str) -> bool:
    """True when ``-m markexpr`` deselects every test of the module at ``path``."""
    marks = module_marks(path)
    if marks & TORCH_MARKS:
        marks |= {"torch"}
    return bool(marks) and _never_selects(markexpr, marks)


def _selection(config: pytest.Config) -> str:
    """The ``-m`` expression in force: the one given, and ``not M`` for each opt-in mark
    ``M`` it does not name."""
    markexpr = config.getoption("markexpr", "") or ""
    parts = [f"({markexpr})"] if markexpr else []
    parts += [f"not {mark}" for mark in OPT_IN_MARKS if mark not in _names(markexpr)]
    return " and ".join(parts)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Do not import a module, or enter a folder, when the ``-m`` expression in force
    deselects all its tests."""
    markexpr = _selection(config)
    if collection_path.is_dir():
        modules = sorted(collection_path.rglob("test_*.py"))
        if modules and all(_left_out(module, markexpr) for module in modules):
            return True
        return None
    if collection_path.suffix == ".py" and collection_path.name.startswith("test_"):
        return True if _left_out(collection_path, markexpr) else None
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A ``distributed`` test needs torch too, so ``-m "not torch"`` deselects it; an
    opt-in test the ``-m`` expression does not name is deselected (pytest's own ``-m``
    then selects among the rest)."""
    for item in items:
        if item.get_closest_marker("distributed") and not item.get_closest_marker("torch"):
            item.add_marker(pytest.mark.torch)
    named = _names(config.getoption("markexpr", "") or "")
    left_out = [
        item for item in items
        if any(item.get_closest_marker(mark) for mark in OPT_IN_MARKS if mark not in named)
    ]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        removed = set(map(id, left_out))
        items[:] = [item for item in items if id(item) not in removed]
    items.sort(key=_long_first)  # stable: the other files keep their order


#: The test files that take longest, longest first (seconds of one process, CI's verl lane
#: and main; the machine at load 4). Under ``--dist loadfile`` a file runs whole on one
#: worker and the workers take the files in the order collected: these start first, so no
#: long file starts last and leaves the other worker idle (pytest-xdist's own order, the
#: files with the most tests first, put these single long tests at the end: see
#: :func:`pytest_configure`). A file missing here only runs later; none is left out.
LONG_FILES = (
    "compat/test_switch_jobs.py",  # 63 s: a Ray cluster, a tiny model through FSDP
    "compat/test_never_worse_a.py",  # 57 s (the two halves: 114 s)
    "compat/test_never_worse_b.py",  # 57 s
    "compat/test_switch.py",  # 40 s: three processes import verl
    "test_plans_unchanged.py",  # 39 s
    "docs/test_examples.py",  # 28-31 s
    "compat/test_functions.py",  # 22 s
    "test_torch_free.py",  # 22 s: fresh interpreters, pytest runs
    "test_repack.py",  # 14 s
    "compat/test_micro_batches.py",  # 13 s
    "test_step.py",  # 12 s
    "contracts/test_hardening_lists.py",  # 10-12 s: 65,536 samples under tracemalloc
    "cli/test_cli.py",  # 11 s
)
_RANK = {name: rank for rank, name in enumerate(LONG_FILES)}


def _long_first(item: pytest.Item) -> int:
    """Where ``item``'s file stands in :data:`LONG_FILES` (after all of them if absent)."""
    path = item.path.as_posix()
    return next((rank for name, rank in _RANK.items() if path.endswith(f"/tests/{name}")), len(LONG_FILES))


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, the files go to the workers in the order collected
    (:data:`LONG_FILES` first), not sorted by their number of tests."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


# tests/compat/ runs this library side by side with verl 0.9.1 itself. verl is not a
# dependency, so where it is not installed the directory is not collected at all (not
# reported as skipped tests): CI's "compat" stage builds a second environment with verl
# 0.9.1 and runs it there (see .ci/run).
collect_ignore = [] if importlib.util.find_spec("verl") is not None else ["compat"]


def _masked(
    lengths: Sequence[int], width: int | None = None, left_pad: bool = False,
    dtype: torch.dtype | None = None,
) -> TensorDict:
    import torch
    from tensordict import TensorDict

    n = len(lengths)
    width = max([*lengths, 1]) + 3 if width is None else width
    mask = torch.zeros(n, width, dtype=torch.long if dtype is None else dtype)
    for row, length in enumerate(lengths):
        if left_pad:
            mask[row, width - length :] = 1
        else:
            mask[row, :length] = 1
    ids = torch.arange(n * width, dtype=torch.long).reshape(n, width)
    return TensorDict({"attention_mask": mask, "input_ids": ids}, batch_size=[n])


def _jagged(lengths: Sequence[int]) -> TensorDict:
    import torch
    from tensordict import TensorDict

    rows = [torch.arange(length, dtype=torch.long) + 1000 * i for i, length in enumerate(lengths)]
    ids = torch.nested.nested_tensor(rows, layout=torch.jagged)
    return TensorDict({"input_ids": ids}, batch_size=[len(lengths)])


@pytest.fixture
def masked_batch() -> Callable[..., TensorDict]:
    """``masked_batch(lengths, width=None, left_pad=False, dtype=long)``: padded batch."""
    return _masked


@pytest.fixture
def jagged_batch() -> Callable[..., TensorDict]:
    """``jagged_batch(lengths)``: a batch whose ``input_ids`` is a jagged nested tensor."""
    return _jagged

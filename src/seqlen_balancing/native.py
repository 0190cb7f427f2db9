"""The compiled twins of the hot loops: which were built, and whether they are in use.

Five hot loops have a twin in C, built by ``setup.py`` where a C compiler is found (and
left out, without an error, where none is): Karmarkar-Karp (``_c_differencing.c``, twin
of ``differencing._differencing``), best fit decreasing on a sorted list of rooms and on
bins bucketed by room (``_c_packing.c``, of ``packing._best_fit_sorted`` and
``packing._best_fit_rooms``), LPT on plain sums
(``_c_balance.c``, of ``balance._lpt_plain``) and the count of a CPU mask's rows
(``batch/_c_lengths.c``, of ``batch.lengths._row_counts``). Each gives what its Python
code gives, so plans are identical with or without them; each answers
``NotImplemented`` for an input it does not take (ints past ``2**62``, not plain lists of
ints, an order naming an item twice, no items; a float mask), and the Python code runs
(:class:`Twinned`). :data:`ENV_PURE_PYTHON` keeps every loop on its Python code.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any, Generic, ParamSpec, TypeVar

from seqlen_balancing._checks import SWITCH_ON

__all__ = ["ENV_PURE_PYTHON", "Twinned", "in_use", "twin"]

_P = ParamSpec("_P")
_R = TypeVar("_R")

#: A switch (``1``, ``true``, ``yes``, ``on``; default off): the twinned loops run their
#: Python code even where their compiled twins were built (read when a room is imported;
#: the plans are the same either way). Any other value leaves the twins on; a switched verl
#: job refuses it (:func:`seqlen_balancing.options.env_values`).
ENV_PURE_PYTHON = "SEQLEN_BALANCING_PURE_PYTHON"


def twin(name: str) -> ModuleType | None:
    """The compiled module ``seqlen_balancing.<name>``, or ``None`` where it was not built
    or :data:`ENV_PURE_PYTHON` is on.

    Example:
        >>> twin("_no_such_twin") is None
        True
    """
    if os.environ.get(ENV_PURE_PYTHON, "").strip().lower() in SWITCH_ON:
        return None
    try:
        return importlib.import_module(f"seqlen_balancing.{name}")
    except ImportError:  # built without a C compiler
        return None


def in_use() -> dict[str, bool]:
    """Each twinned loop of this process (``"module.function"`` of its twin) and whether
    its compiled twin is in use: ``False`` where it was not built (no C compiler or no
    Python headers at install) or :data:`ENV_PURE_PYTHON` was on when the loop's room was
    imported.

    A loop is listed once its room is imported: the planning loops by ``import
    seqlen_balancing``, the mask's count (``batch._c_lengths.row_counts``) by the first
    TensorDict call or ``import seqlen_balancing.batch`` (torch installed).

    Example:
        >>> import seqlen_balancing
        >>> sorted(in_use())[:4]  # doctest: +NORMALIZE_WHITESPACE
        ['_c_balance.lpt_plain', '_c_differencing.differencing', '_c_packing.best_fit_rooms',
         '_c_packing.best_fit_sorted']
    """
    return {loop.twin_name: loop.native is not None for loop in _LOOPS}


#: Every :class:`Twinned` loop made (one per room that has a twin), for :func:`in_use`.
_LOOPS: list[Twinned[..., Any]] = []


class Twinned(Generic[_P, _R]):
    """A loop's Python code, called through its compiled twin where one is in use.

    ``Twinned(python, "_c_balance", "lpt_plain")(*args)`` returns the twin
    ``seqlen_balancing._c_balance.lpt_plain(*args)`` unless the twin is not in use
    (:func:`twin`) or answers ``NotImplemented``; then ``python(*args)``. The twin must give
    what ``python`` gives on every input it takes (``tests/test_native.py``).

    Attributes:
        python: the Python code.
        native: the twin's function, or ``None`` (set it to ``None`` to run the Python code).
    """

    def __init__(self, python: Callable[_P, _R], module: str, name: str) -> None:
        found = twin(module)
        self.python = python
        self.native: Callable[..., Any] | None = None if found is None else getattr(found, name)
        self.twin_name = f"{module}.{name}"
        functools.update_wrapper(self, python)
        _LOOPS.append(self)

    def __call__(self, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        if self.native is not None and not kwargs:
            found = self.native(*args)
            if found is not NotImplemented:
                return found  # type: ignore[no-any-return]
        return self.python(*args, **kwargs)

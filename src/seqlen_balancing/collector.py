"""The cyclic garbage collector paused while a plan is computed (no torch).

Planning a batch allocates millions of small lists and integers and frees them within
the call, none of them in reference cycles: reference counting reclaims all of them.
The cyclic collector, left running, walks every live object of the process each time
the allocations trigger its oldest generation, which at a million samples is 15-20% of
the call (``benchmarks/scale.py``). :func:`paused_collector` stops it for the duration
of one planning call and restarts it after, whatever the call raises.

It only ever restarts a collector it stopped itself: a caller that disabled the
collector (``gc.disable()``) finds it still disabled afterwards, and a nested call (the
step planner calls the rank planner) leaves the restart to the outermost one. The pause
never spans a collective (:mod:`seqlen_balancing.agreement.collective`): the planner's checks
and count search, and its plan at the agreed count, are paused separately. Objects
other threads leave in cycles during the pause are collected after it.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from typing import ParamSpec, TypeVar

__all__ = ["paused_collector"]

_P = ParamSpec("_P")
_R = TypeVar("_R")


def paused_collector(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """``function`` with the cyclic garbage collector paused while it runs.

    Args:
        function: a planning step that makes no reference cycles worth collecting.

    Returns:
        A wrapper with the same signature and docstring: it disables the collector if it
        is enabled, calls ``function`` and enables it again (also when ``function``
        raises). O(1) around the call.

    Example:
        >>> import gc
        >>> paused_collector(gc.isenabled)(), gc.isenabled()
        (False, True)
    """

    @functools.wraps(function)
    def paused(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        running = gc.isenabled()
        gc.disable()
        try:
            return function(*args, **kwargs)
        finally:
            if running:
                gc.enable()

    return paused

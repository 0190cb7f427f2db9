"""Exact oracles shared by the test modules (plain Python, no torch): slow, obviously
correct, for small inputs only."""

from __future__ import annotations


def brute_force_optimum(sizes: list[int], cap: int) -> int:
    """Fewest bins over every set partition of the items (restricted growth strings).

    Obviously correct and exponential: each item joins one of the blocks opened so far or
    opens a new one; a partition counts only if every block fits the cap. One bin at least,
    also for an empty or all-zero list (a micro-batch count is never 0).
    """
    best = max(1, len(sizes))
    loads: list[int] = []

    def extend(pos: int) -> None:
        nonlocal best
        if len(loads) >= best:
            return  # cannot beat the best partition found so far
        if pos == len(sizes):
            best = max(1, len(loads))
            return
        for b in range(len(loads)):
            if loads[b] + sizes[pos] <= cap:
                loads[b] += sizes[pos]
                extend(pos + 1)
                loads[b] -= sizes[pos]
        loads.append(sizes[pos])
        extend(pos + 1)
        loads.pop()

    extend(0)
    return best

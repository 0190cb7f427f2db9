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


def brute_force_optimum_cost(
    lengths: list[int], cap: int, pad: int = 1, bucket: int = 1, costs: list[int] | None = None
) -> int:
    """Fewest micro-batches under the cap on what the GPU holds, checked the literal way:
    each sample costs ``costs[i]`` (or its length rounded up to ``pad``), and a micro-batch
    fits when its summed cost rounded up to ``bucket`` is at most ``cap``. Independent of the
    library's ``cap // bucket * bucket`` shortcut (it never forms that number). Exponential.
    """
    weights = list(costs) if costs is not None else [-(-n // pad) * pad for n in lengths]
    best = max(1, len(weights))
    loads: list[int] = []

    def fits(load: int) -> bool:
        return -(-load // bucket) * bucket <= cap

    def extend(pos: int) -> None:
        nonlocal best
        if len(loads) >= best:
            return
        if pos == len(weights):
            best = max(1, len(loads))
            return
        for b in range(len(loads)):
            if fits(loads[b] + weights[pos]):
                loads[b] += weights[pos]
                extend(pos + 1)
                loads[b] -= weights[pos]
        if fits(weights[pos]):
            loads.append(weights[pos])
            extend(pos + 1)
            loads.pop()

    extend(0)
    return best

"""Exact oracles shared by the test modules (plain Python, no torch): slow, obviously
correct, for small inputs only."""

from __future__ import annotations

from collections.abc import Iterator


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


def model_karmarkar_karp(values: list[int], k: int, equal_size: bool) -> list[list[int]]:
    """verl 0.9.1's largest differencing method, written plainly on lists of item indices.

    A part is a list of indices in the order they joined it; parts compare by (sum, number
    of items, first index), an empty part below every other. A state is its k parts, largest
    first. The state to merge next has the largest spread (largest - smallest part); on a
    tie, the larger largest part. It takes the other state's parts in reverse (its i-th
    largest part joins the other's i-th smallest), and the joined parts are sorted again.
    Equal size: the first states are runs of k items in ascending (value, index) order.
    """

    def part_key(part: list[int]) -> tuple[int, int, int]:
        return (sum(values[i] for i in part), len(part), part[0] if part else -1)

    def state(parts: list[list[int]]) -> list[list[int]]:
        return sorted(parts, key=part_key, reverse=True)

    ascending = sorted(range(len(values)), key=lambda i: (values[i], i))
    if equal_size:
        states = [state([[i] for i in ascending[s : s + k]]) for s in range(0, len(values), k)]
    else:
        states = [state([[i]] + [[] for _ in range(k - 1)]) for i in ascending]

    def order(parts: list[list[int]]) -> tuple[int, tuple[int, int, int]]:
        spread = part_key(parts[0])[0] - part_key(parts[-1])[0]
        top = part_key(parts[0])
        return (-spread, (-top[0], -top[1], -top[2]))

    while len(states) > 1:
        states.sort(key=order)
        first, second = states[0], states[1]
        states = [*states[2:], state([first[i] + second[k - 1 - i] for i in range(k)])]
    return states[0]


def workload(s: int) -> int:
    """verl's cost of one sequence of ``s`` tokens."""
    return 24576 * s + s * s


def model_verl_plan(
    lengths: list[int],
    cap: int,
    num_batches_divided_by: int | None = None,
    min_num_micro_batch: int | None = None,
    force_group_size: int = 1,
) -> list[list[int]] | None:
    """verl 0.9.1's rearrange_micro_batches on one rank, as a plain model of its rule:
    start at min(groups, ceil(total / cap)), raised to min_num_micro_batch, rounded up to
    the divisor; Karmarkar-Karp (:func:`model_karmarkar_karp`) on the groups' workloads;
    next count (by the divisor) until every part fits the cap. Returns the partition of
    group indices, or ``None`` where verl raises (a count above the groups, or a group
    over the cap). Small inputs only."""
    groups = [lengths[g : g + force_group_size] for g in range(0, len(lengths), force_group_size)]
    sizes = [sum(group) for group in groups]
    loads = [sum(workload(s) for s in group) for group in groups]
    if max(sizes) > cap or sum(sizes) == 0:
        return None  # verl raises (over the cap), or asks for 0 parts (all empty)
    count = min(len(groups), -(-sum(sizes) // cap))
    if min_num_micro_batch is not None:
        count = max(count, min_num_micro_batch)
    step = num_batches_divided_by or 1
    count = -(-count // step) * step
    while count <= len(groups):
        parts = model_karmarkar_karp(loads, count, False)
        if all(sum(sizes[g] for g in part) <= cap for part in parts):
            return parts
        count += step
    return None


def brute_force_optimum_cost(
    lengths: list[int], cap: int, pad: int = 1, bucket: int = 1, costs: list[int] | None = None
) -> int:
    """Fewest micro-batches under the cap on what the GPU holds, checked the literal way:
    each sample costs ``costs[i]`` (or its length), rounded up to ``pad``, and a micro-batch
    fits when its summed cost rounded up to ``bucket`` is at most ``cap``. Independent of the
    library's ``cap // bucket * bucket`` shortcut (it never forms that number). Exponential.
    """
    weights = [-(-n // pad) * pad for n in (costs if costs is not None else lengths)]
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


def _up(value: int, multiple: int) -> int:
    return (value + multiple - 1) // multiple * multiple


def partitions(items: list[int]) -> Iterator[list[list[int]]]:
    """Every set partition of ``items``, as lists of blocks (Bell(n) of them)."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in partitions(rest):
        yield [[first], *part]
        for k in range(len(part)):
            yield [*part[:k], [first, *part[k]], *part[k + 1 :]]


def oracle_count(
    lengths: list[int],
    cap: int,
    *,
    padded: bool,
    group: int = 1,
    pad: int = 1,
    bucket: int = 1,
    limit: int | None = None,
    floor: int | None = None,
    divisor: int | None = None,
    costs: list[int] | None = None,
) -> int | None:
    """The fewest micro-batches over every partition of the forced groups into blocks
    that fit (padded: rows x widest row; else the summed cost; each rounded up to the
    bucket; at most ``limit`` samples), at least ``floor``, a multiple of ``divisor``;
    ``None`` when no count qualifies."""
    widths = costs if costs is not None else lengths
    n_groups = len(lengths) // group
    members = {g: list(range(g * group, (g + 1) * group)) for g in range(n_groups)}

    def fits(block: list[int]) -> bool:
        rows = [i for g in block for i in members[g]]
        if limit is not None and len(rows) > limit:
            return False
        if padded:
            cost = len(rows) * max(_up(widths[i], pad) for i in rows)
        else:
            cost = sum(widths[i] if costs is not None else _up(widths[i], pad) for i in rows)
        return _up(cost, bucket) <= cap

    reachable = {len(part) for part in partitions(list(range(n_groups))) if all(map(fits, part))}
    wanted = [k for k in sorted(reachable)
              if k >= (floor or 1) and k % (divisor or 1) == 0]
    return wanted[0] if wanted else None

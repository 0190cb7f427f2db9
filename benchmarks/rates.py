"""How often the micro-batch count meets the Martello-Toth L2 bound, and how often it is
proven optimal (meets ``lower_bound``), on real CHAMP batches.

Part 1 (the rate table). For each setting, ``--batches`` batches (default 100) are drawn as
``random.Random(seed).sample(lengths, n)`` (seed 0, 1, ...) from the bundled CHAMP token
lengths, each length multiplied by ``scale`` and clipped to the cap (a rollout truncated
at ``max_response_length``). Columns: the share of batches where plain best-fit decreasing
(``BFD@L2``) and ``planner.analyse`` (``ours@L2``) reach L2; the share where the count of
``analyse`` is proven optimal (``proven``: it meets ``lower_bound``, the best of L2, the
cardinality, large-item matching, reduction and Fekete-Schepers bounds); the total gap over
the batches, count minus L2 (``gap@L2``) and count minus ``lower_bound`` (``gap``); the
share above L2 + 1 or above best-fit decreasing (the latter must be 0); the bound that
``analyse`` reports most often; the mean and worst time of ``analyse``.

Part 2 (``--exact N``, default 200). Is L2 tight at all? On ``N`` small batches per
setting (``--exact-n`` samples, default 24, drawn and clipped the same way) an exact
branch-and-bound solver gives the optimum; the table gives how often OPT > L2, how often
``lower_bound`` equals OPT and how often ``analyse`` reaches OPT.

Timing: the torch import behind the package leaves ~300,000 objects for the cyclic
garbage collector; a full collection (100-300 ms) lands in whichever call happens to
trigger it. The timed calls run after ``gc.freeze()`` so the table shows the algorithm;
pass ``--no-freeze`` to see the raw numbers.

Run: ``python benchmarks/rates.py [--batches 100] [--exact 200] [--exact-n 24]``.
"""

from __future__ import annotations

import argparse
import gc
import random
import time
from collections import Counter
from collections.abc import Sequence

from seqlen_balancing.data import load_champ_lengths
from seqlen_balancing.planning.bounds import l2_lower_bound
from seqlen_balancing.planning.packing import best_fit_decreasing
from seqlen_balancing.planning.planner import analyse
from seqlen_balancing.planning.rule import lower_bound

# (scale, samples, cap). The target (>= 90 % at L2) covers all but the last setting.
SETTINGS = [
    (1, 256, 16384),
    (1, 1024, 16384),
    (4, 2048, 24576),
    (10, 256, 32768),
    (10, 512, 65536),
    (10, 256, 16384),
]


def batch(lengths: Sequence[int], seed: int, n: int, scale: int, cap: int) -> list[int]:
    return [min(cap, x * scale) for x in random.Random(seed).sample(list(lengths), n)]


def exact_bin_count(sizes: Sequence[int], cap: int, node_limit: int = 2_000_000) -> int | None:
    """Optimal bin count by depth-first search (None when ``node_limit`` nodes run out).

    Tries ``k = L2, L2 + 1, ...`` bins; items go largest first into bins of distinct loads
    (equal loads are symmetric), and a branch is cut when the remaining items exceed the
    capacity left (room below the smallest item counts as lost).
    """
    items = sorted(sizes, reverse=True)
    if not items:
        return 0
    smallest = items[-1]
    suffix = [0] * (len(items) + 1)
    for pos in range(len(items) - 1, -1, -1):
        suffix[pos] = suffix[pos + 1] + items[pos]
    nodes = 0

    def feasible(k: int) -> bool:
        loads = [0] * k

        def place(pos: int, capacity: int) -> bool:
            nonlocal nodes
            nodes += 1
            if nodes > node_limit:
                raise TimeoutError
            if pos == len(items):
                return True
            if suffix[pos] > capacity:
                return False
            size = items[pos]
            seen: set[int] = set()
            for b in range(k):
                load = loads[b]
                if load + size > cap or load in seen:
                    continue
                seen.add(load)
                loads[b] = load + size
                room = cap - loads[b]
                if place(pos + 1, capacity - size - (room if room < smallest else 0)):
                    return True
                loads[b] = load
            return False

        return place(0, k * cap)

    k = max(1, l2_lower_bound(items, cap))
    try:
        while not feasible(k):
            k += 1
    except TimeoutError:
        return None
    return k


def rate_table(lengths: list[int], batches: int) -> None:
    print(
        f"{'setting':>7} {'n':>5} {'cap':>6} {'BFD@L2':>7} {'ours@L2':>8} {'proven':>7} "
        f"{'gap@L2':>7} {'gap':>5} {'>L2+1':>6} {'>BFD':>5} {'bound':>16} {'mean ms':>8} "
        f"{'worst ms':>9}"
    )
    for scale, n, cap in SETTINGS:
        bfd_hits = our_hits = above = worse = proven = gap_l2 = gap = 0
        names: Counter[str] = Counter()
        times: list[float] = []
        for seed in range(batches):
            sizes = batch(lengths, seed, n, scale, cap)
            bound = l2_lower_bound(sizes, cap)
            bfd = len(best_fit_decreasing(sizes, cap))
            start = time.perf_counter()
            result = analyse(sizes, cap)
            times.append(time.perf_counter() - start)
            count = result.min_count
            best = lower_bound(sizes, cap)
            bfd_hits += bfd == bound
            our_hits += count == bound
            above += count > bound + 1
            worse += count > bfd
            proven += result.proven_optimal
            gap_l2 += count - bound
            gap += count - best
            names[result.bound_name] += 1
        share = 100 / batches
        print(
            f"{'x' + str(scale):>7} {n:>5} {cap:>6} {bfd_hits * share:>6.0f}% "
            f"{our_hits * share:>7.0f}% {proven * share:>6.0f}% {gap_l2:>7} {gap:>5} "
            f"{above * share:>5.0f}% {worse * share:>4.0f}% {names.most_common(1)[0][0]:>16} "
            f"{1000 * sum(times) / len(times):>8.1f} {1000 * max(times):>9.1f}",
            flush=True,
        )


def exact_table(lengths: list[int], instances: int, n: int) -> None:
    print(
        f"\nexact optimum on {instances} batches of {n} samples per setting\n"
        f"{'setting':>7} {'cap':>6} {'solved':>7} {'OPT>L2':>7} {'OPT>L2+1':>9} "
        f"{'LB=OPT':>7} {'ours=OPT':>9} {'BFD=OPT':>8}"
    )
    seen: set[tuple[int, int]] = set()
    for scale, _, cap in SETTINGS:
        if (scale, cap) in seen:
            continue
        seen.add((scale, cap))
        solved = loose = very_loose = tight = ours = bfd = 0
        for seed in range(instances):
            sizes = batch(lengths, 10_000 + seed, n, scale, cap)
            opt = exact_bin_count(sizes, cap)
            if opt is None:
                continue
            bound = l2_lower_bound(sizes, cap)
            count = analyse(sizes, cap).min_count
            if not bound <= opt <= count:
                raise RuntimeError(f"L2 {bound}, OPT {opt}, count {count} on {sizes} at {cap}")
            best = lower_bound(sizes, cap)
            if not bound <= best <= opt:
                raise RuntimeError(f"unsound bound {best} (OPT {opt}) on {sizes} at cap {cap}")
            solved += 1
            loose += opt > bound
            very_loose += opt > bound + 1
            tight += best == opt
            ours += count == opt
            bfd += len(best_fit_decreasing(sizes, cap)) == opt
        print(
            f"{'x' + str(scale):>7} {cap:>6} {solved:>7} {loose:>7} {very_loose:>9} "
            f"{tight:>7} {ours:>9} {bfd:>8}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--exact", type=int, default=200, help="small batches per setting")
    parser.add_argument("--exact-n", type=int, default=24, help="samples per small batch")
    parser.add_argument("--no-freeze", action="store_true", help="do not gc.freeze()")
    args = parser.parse_args()
    lengths = load_champ_lengths()
    if not args.no_freeze:
        gc.collect()
        gc.freeze()
    rate_table(lengths, args.batches)
    if args.exact:
        exact_table(lengths, args.exact, args.exact_n)


if __name__ == "__main__":
    main()

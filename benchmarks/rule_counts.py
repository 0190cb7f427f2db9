"""Micro-batch counts under the sample limit and the padded rule: the library against the
lower bound and against a plain randomized best fit under the same rule. Prints a table.

Run: ``python benchmarks/rule_counts.py`` (about a minute; ``--batches N`` per setting,
``--restarts R`` for the randomized best fit).

For every setting (a rule: a sample limit, padded rows one- or two-sided, or both, with a
cap) and every batch of it (seeds ``0..N-1``):

* ``bound``: the library's lower bound on the count under the rule (``analyse(...)``'s
  ``lower_bound``: no plan has fewer micro-batches);
* ``ours``: the count :func:`~seqlen_balancing.plan_micro_batches` plans (the TensorDict
  API plans the same count: it calls the same analysis);
* ``rbf``: the fewest micro-batches of ``R`` restarts of a plain best fit written here,
  independently of the library: each item, in a random order (half the restarts) or in
  decreasing cost with every cost scaled by a random factor in ``[0.8, 1.2]`` (the other
  half), goes into the fullest micro-batch it fits, else opens a new one, under the rule
  spelled out in :func:`cost` and :func:`fits` below; every micro-batch it returns is
  checked against that rule, and so is every one the library returns.

Columns: the mean of each count over the batches, ``@bound`` the batches whose count meets
the bound, ``>rbf`` the batches where the library plans more micro-batches than the
randomized best fit while above the bound (the target is 0 everywhere: at the bound, or no
worse than it), ``<rbf`` those where it plans fewer, ``ms`` the library's mean time per
batch (analysis and plan). The last line says whether the target holds.

Batches: the bundled CHAMP lengths (Qwen3 tokenizer, 174-9,236 tokens; ``x4`` scaled and
clipped at the cap, as a truncated rollout), drawn without replacement per seed; uniform
50-3,000-token documents (the issue's case: 64 of them, cap 8,192, at most 8 per
micro-batch: bound 13, where the library planned 14 before the one rule); lognormal
lengths; two-sided rows are a prompt (left-padded, 20-800 tokens) and a response
(right-padded, the CHAMP length).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from seqlen_balancing.data import load_champ_lengths
from seqlen_balancing.options import PlanOptions
from seqlen_balancing.planning.planner import analyse, build_plan


@dataclass(frozen=True)
class Setting:
    """One rule and the batches drawn for it."""

    name: str
    cap: int
    limit: int | None
    padded: bool
    two_sided: bool
    draw: Callable[[random.Random], list[int]]


def cost(left: list[int], right: list[int], rows: list[int], padded: bool) -> int:
    """What a micro-batch of these rows holds: rows x (widest left + widest right) when
    padded, else the summed lengths (``right`` holds the lengths then)."""
    if padded:
        return len(rows) * (max(left[i] for i in rows) + max(right[i] for i in rows))
    return sum(right[i] for i in rows)


def fits(left: list[int], right: list[int], rows: list[int], setting: Setting) -> bool:
    """The rule spelled out: the cost within the cap, at most ``limit`` rows."""
    if setting.limit is not None and len(rows) > setting.limit:
        return False
    return cost(left, right, rows, setting.padded) <= setting.cap


def randomized_best_fit(
    left: list[int], right: list[int], setting: Setting, restarts: int, seed: int
) -> list[list[int]]:
    """The fewest micro-batches over ``restarts`` randomized best-fit runs (see the module
    docstring); O(restarts * n * micro-batches)."""
    rng = random.Random(seed)
    n = len(right)
    best: list[list[int]] | None = None
    for restart in range(restarts):
        order = list(range(n))
        if restart % 2:
            rng.shuffle(order)
        else:
            weight = [(left[i] + right[i]) * rng.uniform(0.8, 1.2) for i in range(n)]
            order.sort(key=lambda i: -weight[i])
        bins: list[list[int]] = []
        for i in order:
            fitting = [b for b in bins if fits(left, right, [*b, i], setting)]
            if fitting:
                max(fitting, key=lambda b: cost(left, right, b, setting.padded)).append(i)
            else:
                bins.append([i])
        if best is None or len(bins) < len(best):
            best = bins
    assert best is not None
    return best


def champ(n: int, scale: int, cap: int) -> Callable[[random.Random], list[int]]:
    lengths = load_champ_lengths()
    return lambda rng: [min(cap, x * scale) for x in rng.sample(lengths, n)]


def uniform(n: int, low: int, high: int) -> Callable[[random.Random], list[int]]:
    return lambda rng: [rng.randint(low, high) for _ in range(n)]


def lognormal(n: int, median: int, cap: int) -> Callable[[random.Random], list[int]]:
    import math

    return lambda rng: [max(1, min(cap, int(rng.lognormvariate(math.log(median), 0.8))))
                        for _ in range(n)]


SETTINGS = [
    Setting("uniform 50-3000, N=8 (issue)", 8192, 8, False, False, uniform(64, 50, 3000)),
    Setting("uniform 50-3000, N=6", 8192, 6, False, False, uniform(64, 50, 3000)),
    Setting("CHAMP, N=16", 16384, 16, False, False, champ(256, 1, 16384)),
    Setting("CHAMP, N=12", 16384, 12, False, False, champ(512, 1, 16384)),
    Setting("CHAMP x4, N=8", 32768, 8, False, False, champ(128, 4, 32768)),
    Setting("lognormal, N=24", 32768, 24, False, False, lognormal(512, 1000, 32768)),
    Setting("CHAMP padded", 16384, None, True, False, champ(256, 1, 16384)),
    Setting("CHAMP padded, N=8", 16384, 8, True, False, champ(256, 1, 16384)),
    Setting("uniform padded", 8192, None, True, False, uniform(64, 50, 3000)),
    Setting("uniform padded, N=3", 8192, 3, True, False, uniform(64, 50, 3000)),
    Setting("CHAMP padded 2-sided", 16384, None, True, True, champ(128, 1, 9236)),
    Setting("CHAMP padded 2-sided, N=8", 16384, 8, True, True, champ(128, 1, 9236)),
]


def one_batch(setting: Setting, seed: int, restarts: int) -> tuple[int, int, int, float]:
    """``(bound, ours, rbf, ms)`` on the batch of ``seed`` (``ms``: the library's analysis
    and plan); every plan checked against the rule."""
    rng = random.Random(seed)
    right = setting.draw(rng)
    left = [rng.randint(20, 800) for _ in right] if setting.two_sided else [0] * len(right)
    extents = (left, right) if setting.two_sided else None
    start = time.perf_counter()
    result = analyse(right, setting.cap, PlanOptions(padded=setting.padded,
                     max_samples_per_micro_batch=setting.limit), padded_extents=extents)
    if result.error is not None:
        raise SystemExit(f"{setting.name}, seed {seed}: {result.error.message()}")
    ours = build_plan(result, result.min_count)
    elapsed = 1000 * (time.perf_counter() - start)
    theirs = randomized_best_fit(left, right, setting, restarts, seed)
    for plan, who in ((ours, "the library"), (theirs, "the randomized best fit")):
        if sorted(i for part in plan for i in part) != list(range(len(right))):
            raise SystemExit(f"{setting.name}, seed {seed}: {who}'s plan is not an exact cover")
        for part in plan:
            if not fits(left, right, part, setting):
                raise SystemExit(f"{setting.name}, seed {seed}: {who} broke the rule: {part}")
    return result.lower_bound, len(ours), len(theirs), elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=20, help="batches per setting")
    parser.add_argument("--restarts", type=int, default=32, help="randomized best-fit restarts")
    args = parser.parse_args()
    print(f"{args.batches} batches per setting (seeds 0..{args.batches - 1}); randomized best "
          f"fit: best of {args.restarts} restarts")
    print(f"{'setting':<28}{'n':>5}{'cap':>7}{'bound':>8}{'ours':>8}{'rbf':>8}{'@bound':>8}"
          f"{'>rbf':>6}{'<rbf':>6}{'ms':>8}")
    worse_anywhere = 0
    for setting in SETTINGS:
        rows = [one_batch(setting, seed, args.restarts) for seed in range(args.batches)]
        n = len(setting.draw(random.Random(0)))
        bound, ours, rbf = (sum(r[k] for r in rows) / len(rows) for k in range(3))
        at_bound = sum(r[1] == r[0] for r in rows)
        worse = sum(r[1] > r[2] and r[1] > r[0] for r in rows)
        better = sum(r[1] < r[2] for r in rows)
        worse_anywhere += worse
        ms = sum(r[3] for r in rows) / len(rows)
        print(f"{setting.name:<28}{n:>5}{setting.cap:>7}{bound:>8.2f}{ours:>8.2f}{rbf:>8.2f}"
              f"{at_bound:>5}/{len(rows):<2}{worse:>6}{better:>6}{ms:>8.1f}", flush=True)
    verdict = "holds" if not worse_anywhere else f"fails on {worse_anywhere} batches"
    print(f"target (at the bound, or no worse than the randomized best fit): {verdict}")


if __name__ == "__main__":
    main()

"""How often LPT's scaled-down trial (``balance._trial_fails``) is right. Prints one table.

Run: ``python benchmarks/lpt_trial.py [--batches N] [--seed S]`` (default 300 batches, a
few minutes on 2 cores).

Each batch: ``n`` in 32,768 / 65,536 / 131,072 items; lengths lognormal (median 200-3,000
tokens, sigma 0.5-1.5), uniform or bimodal, clipped to the cap; cap 8k-64k tokens; the count
from the lower bound up to twice it. LPT on the whole batch (the trial switched off) is the
oracle; the trial is asked the same question. ``wrong`` counts batches where the trial said
LPT fails but LPT on the whole batch succeeded: a plan changed (the trial must stay at 0).
"""

from __future__ import annotations

import argparse
import math
import random
import time

from seqlen_balancing import lower_bound
from seqlen_balancing.planning import balance
from seqlen_balancing.planning.balance import lpt
from seqlen_balancing.planning.partition import workload
from seqlen_balancing.planning.rule import Rule


def lengths(rng: random.Random, n: int, cap: int) -> tuple[str, list[int]]:
    kind = rng.choice(["lognormal", "uniform", "bimodal"])
    if kind == "lognormal":
        median, sigma = rng.uniform(200, 3000), rng.uniform(0.5, 1.5)
        return kind, [max(1, min(cap, int(rng.lognormvariate(math.log(median), sigma)))) for _ in range(n)]
    if kind == "uniform":
        top = rng.choice([cap // 16, cap // 4, cap // 2])
        return kind, [rng.randint(1, top) for _ in range(n)]
    short, long = rng.randint(50, 400), rng.randint(cap // 8, cap // 2)
    return kind, [rng.randint(short // 2, short) if rng.random() < 0.8 else rng.randint(long // 2, long)
                  for _ in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    table: dict[tuple[str, bool, bool], int] = {}
    saved = spent = 0.0
    for _ in range(args.batches):
        n = rng.choice([1 << 15, 1 << 16, 1 << 17])
        cap = rng.choice([8192, 16384, 32768, 65536])
        kind, sizes = lengths(rng, n, cap)
        works = [workload(s) for s in sizes]
        bound = lower_bound(sizes, cap)
        count = min(n, bound + int(bound * rng.choice([0, 0, 0, 0.002, 0.005, 0.01, 0.03, 0.1, 0.3, 1.0])))
        rule = Rule.sums(sizes, cap)
        start = time.process_time()
        trial = balance._trial_fails(rule, works, count, rule.by_size)
        spent += time.process_time() - start
        keep, balance._TRIAL_ITEMS = balance._TRIAL_ITEMS, 1 << 62
        try:
            start = time.process_time()
            whole = lpt(rule, works, count) is not None
            if trial:
                saved += time.process_time() - start
        finally:
            balance._TRIAL_ITEMS = keep
        key = (kind, whole, trial)
        table[key] = table.get(key, 0) + 1
    header = ("lengths", "batches", "LPT fits", "LPT fails", "trial caught", "wrong")
    print(f"{header[0]:10} {header[1]:>8} {header[2]:>9} {header[3]:>10} {header[4]:>13} {header[5]:>6}")
    for kind in ("lognormal", "uniform", "bimodal"):
        fits = sum(v for (k, w, _), v in table.items() if k == kind and w)
        fails = sum(v for (k, w, _), v in table.items() if k == kind and not w)
        caught = table.get((kind, False, True), 0)
        wrong = table.get((kind, True, True), 0)
        print(f"{kind:10} {fits + fails:8} {fits:9} {fails:10} {caught:13} {wrong:6}")
    print(f"trial CPU {spent:.2f} s in all; LPT CPU not spent where it caught a failure {saved:.2f} s")


if __name__ == "__main__":
    main()

"""The third never-worse axis, explored: the library's modeled step time against verl 0.9.1's own plans.

Run (needs verl 0.9.1 and torch):
``PYTHONPATH=src python benchmarks/never_slower.py --steps 900 --ranks 8 --samples 32 --cap 4096``.

Each step deals ``ranks x samples`` CHAMP lengths (scaled by 1, 2 or 4 as the tests draw
them, clipped to the cap) as ``DistributedSampler`` deals them, or after PPO's balance
step (30% of steps), as ``tests/compat/test_step_time.py`` draws them; verl's
``rearrange_micro_batches`` runs on every rank of a simulated DP group (one thread per
rank, its ``all_reduce`` answered in process) and the library plans the same ranks with
``plan_data_parallel``. For ``micro_batch_overhead`` 0, 0.05, 0.2 and one drawn from 0 to
0.5 it prints the steps where the library's lock-step time (``tests/compat``'s rule: for
each index the slowest rank's workload, plus count x ``f x 24576 x cap``) is above verl's
(expected: none), below it, and equal, and the largest count each planned.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "compat"))

from test_step_time import OVERHEADS, lock_step, verl_plans, workload

import seqlen_balancing as ours
from seqlen_balancing.data import load_champ_lengths


def deal(rng: random.Random, champ: list[int], dp: int, per: int, cap: int) -> list[list[int]]:
    scale = rng.choice([1, 1, 2, 4])
    rows = [min(cap, scale * rng.choice(champ)) for _ in range(dp * per)]
    if rng.random() < 0.3:  # PPO's balance step first: heaviest rows snake over the ranks
        rows.sort(key=workload, reverse=True)
        rows = [rows[i] for start in range(0, len(rows), dp) for i in
                (range(start, start + dp) if start // dp % 2 == 0 else reversed(range(start, start + dp)))]
    return [rows[r::dp] for r in range(dp)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=900)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--cap", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=3102)
    args = parser.parse_args()
    import verl.utils.seqlen_balancing as verl

    rng, champ = random.Random(args.seed), load_champ_lengths()
    slower, faster, tied, fails, most = [], 0, 0, 0, 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(verl, "get_device_name", lambda: "cpu")  # a CPU build says "cuda"
        for step in range(args.steps):
            ranks = deal(rng, champ, args.ranks, args.samples, args.cap)
            theirs = verl_plans(verl, patch, ranks, args.cap)
            if theirs is None:
                fails += 1
                continue
            most = max(most, len(theirs[0]))
            for f in (*OVERHEADS, rng.uniform(0.0, 0.5)):
                mine = ours.plan_data_parallel(ranks, args.cap, micro_batch_overhead=f)
                t_ours, t_verl = lock_step(mine, ranks, args.cap, f), lock_step(theirs, ranks, args.cap, f)
                if len(mine[0]) > len(theirs[0]) or t_ours > t_verl:
                    slower.append((step, f, len(mine[0]), len(theirs[0]), t_ours / t_verl))
                faster += t_ours < t_verl
                tied += t_ours == t_verl
    print(f"{args.steps} steps of {args.ranks} ranks x {args.samples} samples, cap {args.cap}, "
          f"4 overheads each: slower or more micro-batches than verl on {len(slower)}, faster on "
          f"{faster}, tied on {tied}; verl fails {fails} steps; verl's largest count {most}")
    for step, f, count, theirs, ratio in slower:
        print(f"  slower: step {step} f={f:.3f} count {count} vs verl {theirs}, time x{ratio:.4f}")


if __name__ == "__main__":
    main()

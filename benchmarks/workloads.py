"""Balancing on verl's 7B formula against the helper's 70B formula, measured in 70B cost.

Run: ``python benchmarks/workloads.py`` (about a minute; ``--trials 5`` for a quick run).

Lengths are the bundled CHAMP conversations (Qwen3 tokenizer), drawn with a fixed seed;
"x10" multiplies every length by 10 (long chain-of-thought rollouts), clipped to the cap.
Each batch is planned twice under the same cap (16,384 tokens), so with the same
micro-batch count: once with the default workload (verl's ``24576*s + s**2``, a 7B dense
model) and once with ``workloads=`` the helper's 70B formula
(``transformer_workloads(lengths, hidden_size=8192, num_layers=80)``: ``49152*s + s**2``).
Both plans are then measured in the 70B cost, which is what a 70B step's slowest
micro-batch waits on.

Columns:
  batch      samples per rank; scale: x1 or x10
  count      micro-batches (the same for both plans: the cap decides it)
  spread 7B  mean over the trials of (max - min) / mean of the micro-batches' 70B cost,
             for the plan balanced on verl's formula; spread 70B: balanced on the 70B one
  max/mean   the heaviest micro-batch's 70B cost over the mean, for each plan
  better     trials where the 70B-balanced plan's spread is below the 7B-balanced one's,
             equal, and above
"""

from __future__ import annotations

import argparse
import random
import statistics

from seqlen_balancing import plan_micro_batches
from seqlen_balancing.cost import transformer_workloads
from seqlen_balancing.data import load_champ_lengths
from seqlen_balancing.planning.balance import spread

CAP = 16_384
MODEL_70B = {"hidden_size": 8192, "num_layers": 80}


def draw(n: int, scale: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [min(CAP, x * scale) for x in rng.sample(load_champ_lengths(), n)]


def loads(plan: list[list[int]], cost: list[int]) -> list[int]:
    return [sum(cost[i] for i in mb) for mb in plan]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20, help="batches drawn per row")
    args = parser.parse_args()
    print(f"cap {CAP} tokens; cost: 70B ({MODEL_70B}); {args.trials} batches per row\n")
    header = (f"{'batch':>6} {'scale':>5} {'count':>6} {'spread 7B':>10} {'spread 70B':>11} "
              f"{'max/mean 7B':>12} {'max/mean 70B':>13} {'better/eq/worse':>16}")
    print(header)
    print("-" * len(header))
    for scale, sizes in ((1, (256, 1024)), (10, (64, 256))):
        for n in sizes:
            rows: dict[str, list[float]] = {"s7": [], "s70": [], "m7": [], "m70": []}
            counts, outcome = set(), [0, 0, 0]
            for trial in range(args.trials):
                lengths = draw(n, scale, 1000 * scale + trial)
                cost = transformer_workloads(lengths, **MODEL_70B)
                verl_plan = plan_micro_batches(lengths, CAP)
                ours = plan_micro_batches(lengths, CAP, workloads=cost)
                assert len(verl_plan) == len(ours)  # the cap alone decides the count
                counts.add(len(ours))
                for key, plan in (("7", verl_plan), ("70", ours)):
                    values = loads(plan, cost)
                    rows["s" + key].append(spread(values))
                    rows["m" + key].append(max(values) / statistics.mean(values))
                a, b = rows["s70"][-1], rows["s7"][-1]
                outcome[0 if a < b else 1 if a == b else 2] += 1
            count = f"{min(counts)}-{max(counts)}" if len(counts) > 1 else str(min(counts))
            print(f"{n:>6} {'x' + str(scale):>5} {count:>6} "
                  f"{statistics.mean(rows['s7']):>10.4%} {statistics.mean(rows['s70']):>11.4%} "
                  f"{statistics.mean(rows['m7']):>12.5f} {statistics.mean(rows['m70']):>13.5f} "
                  f"{'/'.join(map(str, outcome)):>16}")


if __name__ == "__main__":
    main()

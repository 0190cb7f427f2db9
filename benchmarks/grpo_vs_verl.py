"""GRPO-shaped steps: this library's micro-batch count against verl 0.9.1's rule. Prints a table.

Run: ``python benchmarks/grpo_vs_verl.py`` (about a minute; ``--steps N`` per setting).

A step is ``prompts x responses``: prompt lengths drawn from the bundled CHAMP lengths (a
quarter of each, the prompt part of a conversation, 16 to 2,048 tokens), ``responses`` per
prompt, each response uniform in ``1..max_response`` or, with probability ``truncated``,
exactly ``max_response`` (a rollout cut at its maximum length): so many lengths repeat, the
shape on which the count used to exceed verl's (issue 19: one step in about 800).

verl's count is :func:`seqlen_balancing.planning.verl_rule.verl_counts`: verl's own rule (Karmarkar-Karp
on workloads from ``ceil(total / cap)`` upwards until it fits) on this library's
Karmarkar-Karp, which returns verl's partitions exactly (``tests/compat`` checks both against
verl itself). Columns: steps where this library needs fewer, the same, more micro-batches;
the total saved; the mean planning time per step.
"""

from __future__ import annotations

import argparse
import random
import time

from seqlen_balancing import plan_micro_batches
from seqlen_balancing.data import load_champ_lengths
from seqlen_balancing.planning.verl_rule import verl_counts

#: (samples per step, responses per prompt, max response, cap, num_batches_divided_by)
SETTINGS = [
    (512, 8, 8192, 19_896, None),
    (512, 16, 4096, 16_384, None),
    (256, 8, 8192, 24_576, None),
    (128, 8, 8192, 19_896, 8),
    (128, 4, 2048, 8_192, 4),
]


def step(rng: random.Random, champ: list[int], samples: int, group: int, max_response: int,
         truncated: float = 0.3) -> list[int]:
    lengths = []
    for _ in range(samples // group):
        prompt = min(max(champ[rng.randrange(len(champ))] // 4, 16), 2048)
        for _ in range(group):
            response = max_response if rng.random() < truncated else rng.randint(1, max_response)
            lengths.append(prompt + response)
    return lengths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="steps per setting (default 200)")
    args = parser.parse_args()
    champ = load_champ_lengths()
    print(f"GRPO-shaped steps, {args.steps} per setting (seed 0)")
    print(f"{'samples':>8}{'group':>6}{'max resp':>9}{'cap':>8}{'divisor':>8}"
          f"{'fewer':>7}{'same':>6}{'more':>6}{'saved':>7}{'plan ms':>9}")
    for samples, group, max_response, cap, divisor in SETTINGS:
        rng = random.Random(0)
        fewer = same = more = saved = 0
        seconds = 0.0
        for _ in range(args.steps):
            lengths = step(rng, champ, samples, group, max_response)
            start = time.perf_counter()
            ours = len(plan_micro_batches(lengths, cap, num_batches_divided_by=divisor))
            seconds += time.perf_counter() - start
            verl = verl_counts([lengths], cap, num_batches_divided_by=divisor, max_tries=10_000).counts[0]
            fewer += ours < verl
            same += ours == verl
            more += ours > verl
            saved += verl - ours
        print(f"{samples:>8}{group:>6}{max_response:>9}{cap:>8}{divisor or '-':>8}"
              f"{fewer:>7}{same:>6}{more:>6}{saved:>7}{1000 * seconds / args.steps:>9.1f}")


if __name__ == "__main__":
    main()

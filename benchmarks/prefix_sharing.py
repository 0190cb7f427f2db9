"""GRPO steps with prompts counted once (``prefix_lengths``) against every prompt in full.

Run: ``python benchmarks/prefix_sharing.py`` (a few seconds; ``--steps N``, ``--cap C``).

A step: 32 prompts of 200-1,000 tokens, 8 responses each of 50-600 tokens (uniform, seeded),
one DP rank, cap 8,192 tokens. "Full" plans each sample at its whole length (prompt +
response, the cost without prefix sharing, verl's count); "shared" plans the same samples
with ``group_ids`` (the prompt) and ``prefix_lengths`` (its tokens): a micro-batch holding
``k`` responses of a prompt costs the prompt once plus the ``k`` responses, as prefix-shared
attention runs it (verl PR #6689, AReaL PR #804). Columns: the micro-batches of each, the
L1 bound of each (``ceil(tokens / cap)``, the shared tokens counting each prompt once), the
saving, and the tokens each plan's micro-batches hold in all (what the GPU computes).
"""

from __future__ import annotations

import argparse
import random
import time

from seqlen_balancing import plan_micro_batches


def grpo_step(
    rng: random.Random, prompts: int = 32, responses: int = 8,
) -> tuple[list[int], list[int], list[int]]:
    """``(lengths, group_ids, prefix_lengths)`` of one step, prompt by prompt."""
    lengths, ids, prefixes = [], [], []
    for prompt in range(prompts):
        prefix = rng.randint(200, 1000)
        for _ in range(responses):
            lengths.append(prefix + rng.randint(50, 600))
            ids.append(prompt)
            prefixes.append(prefix)
    return lengths, ids, prefixes


def shared_cost(part: list[int], ids: list[int], prefixes: list[int], lengths: list[int]) -> int:
    """A micro-batch's tokens with each prompt once (the rule, written out here)."""
    prompts = {ids[i]: prefixes[i] for i in part}
    return sum(lengths[i] - prefixes[i] for i in part) + sum(prompts.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--cap", type=int, default=8192)
    args = parser.parse_args()
    print(f"{'step':>4} {'full':>5} {'L1':>4} {'shared':>6} {'L1':>4} {'saved':>6} "
          f"{'full tokens':>11} {'shared tokens':>13} {'ms':>6}")
    totals = [0, 0]
    for seed in range(args.steps):
        lengths, ids, prefixes = grpo_step(random.Random(seed))
        full = plan_micro_batches(lengths, args.cap)
        start = time.perf_counter()
        shared = plan_micro_batches(lengths, args.cap, group_ids=ids, prefix_lengths=prefixes)
        ms = (time.perf_counter() - start) * 1000
        assert all(shared_cost(p, ids, prefixes, lengths) <= args.cap for p in shared)
        unique = sum(lengths) - sum(prefixes) + sum(dict(zip(ids, prefixes, strict=True)).values())
        held = sum(shared_cost(p, ids, prefixes, lengths) for p in shared)
        totals[0] += len(full)
        totals[1] += len(shared)
        print(f"{seed:>4} {len(full):>5} {-(-sum(lengths) // args.cap):>4} {len(shared):>6} "
              f"{-(-unique // args.cap):>4} {len(full) - len(shared):>6} {sum(lengths):>11} {held:>13} "
              f"{ms:>6.1f}")
    saved = 1 - totals[1] / totals[0]
    print(f"all: {totals[0]} micro-batches full, {totals[1]} shared ({saved:.0%} fewer)")


if __name__ == "__main__":
    main()

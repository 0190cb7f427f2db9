"""Padded micro-batches (``padded=True``, cut to their width) on the bundled CHAMP lengths:
the count against the padded lower bound, the padding share of the footprint, and the
footprint today's plan would put on the GPU for the same step. Prints a table.

Run: ``python benchmarks/padded.py`` (about 10 s; ``--steps N``, ``--ranks R``,
``--samples S`` per rank; no torch needed).

A step is ``R`` DP ranks of ``S`` samples each, drawn without replacement from the bundled
CHAMP lengths (Qwen3 tokenizer, 174 to 9,236 tokens) with seed ``0..steps-1``. For each cap:

* padded: ``plan_data_parallel(ranks, cap, padded=True)``: every micro-batch cut to its
  widest row, so it holds rows x that width token positions (its footprint), at most the
  cap. ``count`` is the agreed count per rank (mean over steps), ``bound`` the padded lower
  bound (the largest over the ranks of :func:`~seqlen_balancing.lower_bound` with
  ``padded=True``; no agreed count is below it), ``at bound`` the steps that meet it, and
  ``padding`` the share of the footprint that is padding (1 - effective tokens /
  token positions, over the whole step).
* today: ``plan_data_parallel(ranks, cap)`` (the cap on effective tokens) with its
  micro-batches untrimmed, as the TensorDict API returns them without ``padded``: every
  micro-batch as wide as its rank's batch, here the rank's longest row (the narrowest a
  padded batch can be). ``largest`` is the largest footprint of a micro-batch over all
  steps, ``x cap`` that over the cap, ``padding`` the share as above.
"""

from __future__ import annotations

import argparse
import random

from seqlen_balancing import lower_bound, plan_data_parallel
from seqlen_balancing.data import load_champ_lengths

CAPS = (16_384, 32_768)


def row(cap: int, steps: int, n_ranks: int, samples: int) -> str:
    champ = load_champ_lengths()
    counts = bounds = at_bound = 0
    positions = effective = 0
    today_count = today_positions = today_largest = 0
    for seed in range(steps):
        drawn = random.Random(seed).sample(champ, n_ranks * samples)
        ranks = [drawn[r * samples : (r + 1) * samples] for r in range(n_ranks)]
        plans = plan_data_parallel(ranks, cap, padded=True)
        bound = max(lower_bound(lengths, cap, padded=True) for lengths in ranks)
        counts += len(plans[0])
        bounds += bound
        at_bound += len(plans[0]) == bound
        effective += sum(map(sum, ranks))
        for lengths, plan in zip(ranks, plans, strict=True):
            for mb in plan:
                footprint = len(mb) * max(lengths[i] for i in mb)
                if footprint > cap:  # the benchmark checks the rule it reports on
                    raise SystemExit(f"step {seed}: a padded micro-batch of {footprint} > {cap}")
                positions += footprint
        today = plan_data_parallel(ranks, cap)
        today_count += len(today[0])
        for lengths, plan in zip(ranks, today, strict=True):
            width = max(lengths)
            for mb in plan:
                today_positions += len(mb) * width
                today_largest = max(today_largest, len(mb) * width)
    return (
        f"{cap:>7,}{counts / steps:>8.1f}{bounds / steps:>8.1f}{at_bound:>6}/{steps:<4}"
        f"{1 - effective / positions:>9.1%}{today_count / steps:>8.1f}{today_largest:>11,}"
        f"{today_largest / cap:>7.1f}{1 - effective / today_positions:>9.1%}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="steps per cap (default 10)")
    parser.add_argument("--ranks", type=int, default=8, help="DP ranks (default 8)")
    parser.add_argument("--samples", type=int, default=512, help="samples per rank (default 512)")
    args = parser.parse_args()
    print(f"CHAMP, {args.ranks} DP ranks x {args.samples} samples per step, {args.steps} steps "
          "per cap; micro-batches per rank")
    print(f"{'':>7}{'padded, trimmed':^35}|{'today (effective-token cap, untrimmed)':^38}")
    print(f"{'cap':>7}{'count':>8}{'bound':>8}{'at bound':>11}{'padding':>9}"
          f"{'count':>8}{'largest':>11}{'x cap':>7}{'padding':>9}")
    for cap in CAPS:
        print(row(cap, args.steps, args.ranks, args.samples))


if __name__ == "__main__":
    main()

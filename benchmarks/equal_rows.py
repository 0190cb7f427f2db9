"""Equal rows per micro-batch (``equal_rows_per_micro_batch=True``) on the bundled CHAMP
lengths: the filler rows it adds against padding a token-budget plan up to its largest row
count, as pipeline-parallel trainers do today. Prints a table.

Run: ``python benchmarks/equal_rows.py`` (``--steps N``, ``--ranks R``, ``--samples S`` per
rank; no torch needed).

A step is ``R`` DP ranks of ``S`` samples each, drawn without replacement from the bundled
CHAMP lengths (Qwen3 tokenizer, 174 to 9,236 tokens) with seed ``0..steps-1``, as a
``DistributedSampler`` deals them (no balancing). For each cap:

* naive: ``plan_data_parallel(ranks, cap)`` (the plain plan), every micro-batch then padded
  with copies of its rank's shortest row up to the largest row count of the step's plan
  (one micro-batch size for the pipeline schedule). ``filler`` is the share of the rows
  held that are such copies; ``over cap`` the share of micro-batches whose tokens, the
  copies counted, are then over the cap (the padding is not planned, so it can run the
  GPU out of memory).
* library: ``plan_data_parallel(ranks, cap, equal_rows_per_micro_batch=True)``: ``count``
  its agreed count per rank (against the plain plan's), ``rows`` the rows of every
  micro-batch, ``filler`` the share of filler rows, each micro-batch checked here against
  the cap with its filler rows (one token each) counted; ``ms`` the planning time per step.
"""

from __future__ import annotations

import argparse
import random
import time

from seqlen_balancing import plan_data_parallel
from seqlen_balancing.data import load_champ_lengths

CAPS = (10_240, 16_384, 32_768)


def row(cap: int, steps: int, n_ranks: int, samples: int) -> list[str]:
    champ = load_champ_lengths()
    plain_count = count = 0
    naive_filler = naive_rows = naive_over = naive_mbs = 0
    filler = held = rows_sum = 0
    seconds = 0.0
    for seed in range(steps):
        drawn = random.Random(seed).sample(champ, n_ranks * samples)
        ranks = [drawn[r * samples : (r + 1) * samples] for r in range(n_ranks)]
        plain = plan_data_parallel(ranks, cap)
        plain_count += len(plain[0])
        most = max(len(mb) for plan in plain for mb in plan)
        for lengths, plan in zip(ranks, plain, strict=True):
            shortest = min(lengths)
            for mb in plan:
                naive_filler += most - len(mb)
                naive_rows += most
                naive_mbs += 1
                naive_over += sum(lengths[i] for i in mb) + (most - len(mb)) * shortest > cap
        start = time.perf_counter()
        plans = plan_data_parallel(ranks, cap, equal_rows_per_micro_batch=True)
        seconds += time.perf_counter() - start
        count += len(plans[0])
        rows = {len(mb) + mb.filler for plan in plans for mb in plan}
        if len(rows) != 1:  # the benchmark checks the rule it reports on
            raise SystemExit(f"step {seed}: micro-batches of {sorted(rows)} rows")
        rows_sum += rows.pop()
        for lengths, plan in zip(ranks, plans, strict=True):
            for mb in plan:
                tokens = sum(lengths[i] for i in mb) + mb.filler  # a filler row: one token
                if tokens > cap:
                    raise SystemExit(f"step {seed}: a micro-batch of {tokens} tokens > {cap}")
                filler += mb.filler
                held += len(mb) + mb.filler
    return [
        str(cap), f"{plain_count / steps:.2f}", f"{naive_filler / naive_rows:.1%}",
        f"{naive_over / naive_mbs:.1%}", f"{count / steps:.2f}", f"{rows_sum / steps:.1f}",
        f"{filler / held:.1%}", f"{1000 * seconds / steps:.1f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--samples", type=int, default=64, help="samples per rank")
    args = parser.parse_args()
    header = ["cap", "count", "naive filler", "naive over cap", "count", "rows", "filler", "ms"]
    print(f"CHAMP, {args.ranks} ranks x {args.samples} samples, {args.steps} steps; "
          "naive: the plain plan padded to its largest row count; library: equal_rows_per_micro_batch")
    print("              plain plan + padding      |        library")
    table = [header, *(row(cap, args.steps, args.ranks, args.samples) for cap in CAPS)]
    widths = [max(len(r[j]) for r in table) for j in range(len(header))]
    for r in table:
        print("  ".join(cell.rjust(w) for cell, w in zip(r, widths, strict=True)))


if __name__ == "__main__":
    main()

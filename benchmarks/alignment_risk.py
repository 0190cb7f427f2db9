"""The risk a plan that ignores alignment carries: micro-batches that fit the cap in
effective tokens but exceed it once every sequence is padded to a multiple of ``pad``
(Megatron's packed THD alignment: tp, or tp*cp*2 with context parallelism). Prints a table.

Run: ``python benchmarks/alignment_risk.py`` (a few seconds; no torch needed).

For each batch of the bundled CHAMP lengths (Qwen3 tokenizer; x1, cap 16,384, seeds 0..N-1):
today's plan (``plan_micro_batches(lengths, 16384)``, this library's plan without
alignment) is taken as it is, every sample is aligned to ``pad`` and each micro-batch whose
aligned total exceeds the cap is counted. The plan with ``pad_to_multiple_of=pad`` never
has one (the cap holds on aligned tokens); its count is shown beside.

Columns: n (samples per batch), pad, batches, micro-batches of today's plans, over (how many
of them exceed the cap after alignment), batches hit (batches with at least one), largest
(the largest aligned total of today's micro-batches), count today / aligned (micro-batches
in all, without and with alignment).
"""

from __future__ import annotations

import argparse
import random

from seqlen_balancing import plan_micro_batches
from seqlen_balancing.cost import aligned_length
from seqlen_balancing.data import load_champ_lengths

CAP = 16384


def risk_row(n: int, pad: int, seeds: int) -> str:
    lengths_all = load_champ_lengths()
    micro = over = hit = largest = aligned_count = 0
    for seed in range(seeds):
        lengths = random.Random(seed).sample(lengths_all, n)
        today = plan_micro_batches(lengths, CAP)
        totals = [sum(aligned_length(lengths[i], pad) for i in part) for part in today]
        micro += len(today)
        batch_over = sum(t > CAP for t in totals)
        over += batch_over
        hit += batch_over > 0
        largest = max(largest, *totals)
        aligned_count += len(plan_micro_batches(lengths, CAP, pad_to_multiple_of=pad))
    return (
        f"{n:>6}{pad:>5}{seeds:>9}{micro:>15}{over:>7}{hit:>13}{largest:>9}"
        f"{micro:>9} / {aligned_count:<6}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="batches per row (default 20)")
    args = parser.parse_args()
    print(f"CHAMP x1, cap {CAP}: today's plan (no alignment) checked after alignment")
    print(
        f"{'n':>6}{'pad':>5}{'batches':>9}{'micro-batches':>15}{'over':>7}{'batches hit':>13}"
        f"{'largest':>9}{'count today / aligned':>24}"
    )
    for n in (256, 1024):
        for pad in (8, 16, 32):
            print(risk_row(n, pad, args.seeds), flush=True)


if __name__ == "__main__":
    main()

"""The agreed count is the fewest the ranks need alone; the step time against verl's plans. Prints a table.

Run: ``PYTHONPATH=src python benchmarks/agreed_count.py`` (seconds per setting on an
idle core; ``--steps N``, default 60). Needs torch (the steps are drawn as
``DistributedSampler`` draws them: ``benchmarks/step_time.py``'s ``sampler_steps``).

Each step takes ``ranks x samples`` CHAMP lengths (whole conversations, clipped to the cap),
dealt as ``DistributedSampler`` deals them (rank ``r`` takes rows ``r, r + ranks, ...``).
For each setting it prints:

* ``agreed``: the micro-batches per rank :func:`~seqlen_balancing.plan_data_parallel`
  plans, summed over the steps;
* ``own max``: for each step the largest count the ranks' plans reach alone
  (:func:`~seqlen_balancing.plan_micro_batches` per rank, rounded up to
  ``num_batches_divided_by``), summed: the oracle, equal to ``agreed``;
* ``verl``: verl 0.9.1's agreed count (:mod:`seqlen_balancing.planning.verl_rule`), summed;
* the modeled step time (:func:`~seqlen_balancing.global_batch.lockstep.lock_step_time`, fixed cost
  ``micro_batch_fixed_tokens = 0.05 x cap`` tokens, the library's former default share; 819.2
  tokens, today's default, at 16,384) of the
  library's plans relative to verl's plans of the same step (its count, Karmarkar-Karp at
  it, its order): the mean over the steps and the worst step (positive: slower).
"""

from __future__ import annotations

import argparse
import statistics
import time

from step_time import library_per_rank, sampler_steps, sft_deal, verl_per_rank

from seqlen_balancing import plan_micro_batches
from seqlen_balancing.data import load_champ_lengths
from seqlen_balancing.global_batch.lockstep import lock_step_time, micro_batch_fixed_cost
from seqlen_balancing.planning.partition import roundup_divisible, workload

#: (ranks, samples per rank, cap): the settings of issue 45.
SETTINGS = [(8, 256, 16384), (4, 128, 8192)]


def one_setting(champ: list[int], dp: int, per: int, cap: int, steps: int) -> dict[str, float]:
    agreed = own = verl = 0
    ratios: list[float] = []
    fixed = micro_batch_fixed_cost(0.05 * cap)
    for step in sampler_steps(champ, dp * per, steps):
        lengths = [min(s, cap) for s in step]
        dealt = sft_deal(len(lengths), dp)
        ours = library_per_rank(lengths, dealt, cap)
        agreed += len(ours[0])
        own += max(roundup_divisible(len(plan_micro_batches([lengths[i] for i in rows], cap)), 1)
                   for rows in dealt)
        theirs = verl_per_rank(lengths, dealt, cap)
        if theirs is None:
            continue
        verl += len(theirs[0])
        loads = [workload(s) for s in lengths]
        ratios.append(lock_step_time(ours, loads, fixed) / lock_step_time(theirs, loads, fixed) - 1)
    return {"agreed": agreed, "own": own, "verl": verl, "steps": len(ratios),
            "mean": statistics.fmean(ratios), "worst": max(ratios), "best": min(ratios)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    champ = load_champ_lengths()
    print(f"{'ranks x samples @ cap':<24}{'agreed':>8}{'own max':>9}{'verl':>7}"
          f"{'time vs verl: mean':>20}{'worst':>9}{'best':>9}{'s':>6}")
    everything: list[dict[str, float]] = []
    for dp, per, cap in SETTINGS:
        start = time.perf_counter()
        row = one_setting(champ, dp, per, cap, args.steps)
        everything.append(row)
        print(f"{f'{dp} x {per} @ {cap}':<24}{row['agreed']:>8}{row['own']:>9}{row['verl']:>7}"
              f"{row['mean']:>+20.2%}{row['worst']:>+9.2%}{row['best']:>+9.2%}"
              f"{time.perf_counter() - start:>6.0f}")
    means = [r["mean"] for r in everything]
    print(f"over the settings: mean {statistics.fmean(means):+.2%}, "
          f"worst step {max(r['worst'] for r in everything):+.2%}")


if __name__ == "__main__":
    main()

"""The step, not the rank: micro-batch counts and lock-step step time across DP ranks. Prints tables.

Run: ``python benchmarks/step_time.py`` (about 10 minutes on two idle cores; ``--steps N``
per setting, default 10; ``--quick`` for 3 steps and no timing table). Needs torch (the
sampler's shuffle is ``torch.randperm``, as ``DistributedSampler`` draws it).

**The lock-step model.** Under FSDP every micro-batch ends in a collective (the parameter
all-gather, the gradient reduce-scatter), so the DP ranks run their micro-batches in
lock-step: micro-batch ``k`` takes as long as the slowest rank's micro-batch ``k``. With
``W(r, k)`` the workload of rank ``r``'s micro-batch ``k`` (verl's ``24576*s + s**2`` per
sequence of ``s`` tokens) and ``K`` micro-batches per rank:

    step time = sum over k of max over r of W(r, k)  +  K x fixed cost
    floor     = (sum of all workloads) / dp          +  K x fixed cost

The fixed cost of one micro-batch here is ``f x 24576 x max_token_len``: the share ``f`` of
the linear term of a full micro-batch (``micro_batch_fixed_tokens = f x max_token_len``
tokens); the tables show ``f`` = 0, 0.05 and 0.2. No plan with ``K`` micro-batches per
rank beats the floor; ``x floor`` is the step time over it, summed over the steps of a row
(``worst``: the worst single step).
A rank with fewer micro-batches than another waits through the others' extra ones (not
the case here: every plan below has one count on all ranks).

**Steps.** A dataset is shuffled as ``DistributedSampler`` shuffles it (``torch.randperm``,
seed 0, epoch 0, then epoch 1 ...); step ``t`` of an epoch holds the rows
``t x G .. (t + 1) x G`` of its order (``G = ranks x samples per rank``), what
``DistributedSampler`` gives the ranks at that step.
A row longer than the cap is clipped to it (a truncated sequence). Datasets: the bundled
CHAMP lengths (``seqlen_balancing.data.load_champ_lengths``: whole conversations, mean
1,016 tokens), the CHAMP responses alone (``response_tokens``, mean 774: the lengths the
issue's first table was measured on) and a long-tailed synthetic set (lognormal,
median 545 tokens, 20,000 rows, seed 0).

**Dealing and plans.** ``SFT``: rank ``r`` takes rows ``r, r + dp, ...`` of the step (verl
0.9.1's torchrun ``sft_trainer``, no balancing). ``PPO``: verl 0.9.1's balance step
(``RayPPOTrainer._balance_batch``: Karmarkar-Karp on workloads into ``dp`` parts of equal
sizes, each part lightest at both ends; then the dispatch's equal contiguous chunks;
:func:`seqlen_balancing.cli.trainers.balance_order`). Each dealing is planned rank by rank
with one count on every rank, by ``verl`` (verl 0.9.1's own rule,
:mod:`seqlen_balancing.planning.verl_rule`: its count, Karmarkar-Karp at it, verl's order) and by
``library`` (:func:`~seqlen_balancing.plan_data_parallel`: each rank at the agreed count,
the largest any rank needs alone, whatever ``f``). ``global``:
:func:`~seqlen_balancing.plan_global_batch` on the whole step, which chooses the
assignment itself (its count may depend on ``f``; the count column is at ``f = 0.05``, the
default). ``bound``: ``ceil(B / dp)`` summed over the steps, ``B`` the best lower bound of
the whole step; ``at bound``: steps whose count meets it.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import time
from collections.abc import Callable, Sequence

import torch

from seqlen_balancing import karmarkar_karp, plan_data_parallel
from seqlen_balancing.cli.trainers import balance_order
from seqlen_balancing.data import load_champ_lengths, load_champ_records
from seqlen_balancing.global_batch.lockstep import lock_step_time, micro_batch_fixed_cost, step_time_floor
from seqlen_balancing.global_batch.step import plan_step
from seqlen_balancing.planning.balance import order_micro_batches
from seqlen_balancing.planning.partition import workload
from seqlen_balancing.planning.verl_rule import VerlSearchLimit, verl_counts

OVERHEADS = (0.0, 0.05, 0.2)
#: The share the counts are shown at: the library's default at a cap of 16,384 (819.2 tokens).
DEFAULT_SHARE = 0.05

#: The issue's first table: (ranks, samples per rank, cap) and what it printed there.
ISSUE_ROWS = [(8, 32, 8192), (8, 64, 16384), (8, 16, 8192), (32, 16, 16384), (64, 8, 16384)]
ISSUE_VALUES = {(8, 32, 8192): (42, 31, 1.27), (8, 64, 16384): (37, 30, 1.13),
                (8, 16, 8192): (22, 20, 1.33), (32, 16, 16384): (16, 10, 1.53),
                (64, 8, 16384): (10, 10, 1.84)}
#: 8, 32 and 64 ranks beside the issue's rows.
SETTINGS = [*ISSUE_ROWS, (8, 32, 16384), (32, 32, 16384), (64, 32, 16384), (32, 64, 16384), (64, 64, 16384)]

Plans = list[list[list[int]]]  # per rank, its micro-batches of global step indices


def long_tailed(rows: int = 20_000, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [max(16, int(rng.lognormvariate(6.3, 1.1))) for _ in range(rows)]


def datasets() -> dict[str, list[int]]:
    return {
        "CHAMP": load_champ_lengths(),
        "CHAMP responses": [r.response_tokens for r in load_champ_records()],
        "long-tailed": long_tailed(),
    }


def sampler_steps(lengths: list[int], width: int, steps: int) -> list[list[int]]:
    """The first ``steps`` global batches of ``DistributedSampler`` with seed 0, epoch after
    epoch (``set_epoch``: the shuffle is seeded ``0 + epoch``), whole steps only."""
    out: list[list[int]] = []
    epoch = 0
    while len(out) < steps:
        order = torch.randperm(len(lengths), generator=torch.Generator().manual_seed(epoch)).tolist()
        for t in range(min(len(lengths) // width, steps - len(out))):
            out.append([lengths[i] for i in order[t * width : (t + 1) * width]])
        epoch += 1
    return out


def sft_deal(n: int, dp: int) -> list[list[int]]:
    return [list(range(r, n, dp)) for r in range(dp)]


def ppo_deal(lengths: list[int], dp: int) -> list[list[int]]:
    order = balance_order(lengths, dp)
    size = len(lengths) // dp
    return [order[r * size : (r + 1) * size] for r in range(dp)]


def library_per_rank(lengths: list[int], dealt: list[list[int]], cap: int) -> Plans:
    plans = plan_data_parallel([[lengths[i] for i in rows] for rows in dealt], cap)
    return [[[rows[i] for i in mb] for mb in plan] for rows, plan in zip(dealt, plans, strict=True)]


def verl_per_rank(lengths: list[int], dealt: list[list[int]], cap: int) -> Plans | None:
    """verl 0.9.1's plans: its agreed count, Karmarkar-Karp at it, its order."""
    per_rank = [[lengths[i] for i in rows] for rows in dealt]
    try:
        count = verl_counts(per_rank, cap, max_tries=10_000).counts[0]
    except (VerlSearchLimit, ValueError):
        return None
    out = []
    for rows, lens in zip(dealt, per_rank, strict=True):
        loads = [workload(s) for s in lens]
        parts = [sorted(p) for p in karmarkar_karp(loads, count, equal_size=False)]
        out.append([[rows[i] for i in mb] for mb in order_micro_batches(parts, loads, True)])
    return out


class Tally:
    """One plan kind over the steps of a setting: counts, and step time and floor per ``f``."""

    def __init__(self) -> None:
        self.count = self.at_bound = self.steps = 0
        self.time = dict.fromkeys(OVERHEADS, 0.0)
        self.floor = dict.fromkeys(OVERHEADS, 0.0)
        self.worst = dict.fromkeys(OVERHEADS, 1.0)
        self.failed = 0

    def add(self, plans: Plans | None, workloads: list[int], cap: int, bound: int,
            overhead: float | None = None) -> None:
        """Add one step (``overhead``: only that ``f``; else every ``f``)."""
        if plans is None:
            self.failed += 1
            return
        count = len(plans[0])
        if overhead is None or overhead == DEFAULT_SHARE:
            self.count += count
            self.at_bound += count == bound
            self.steps += 1
        for f in OVERHEADS if overhead is None else (overhead,):
            fixed = micro_batch_fixed_cost(f * cap)
            t = lock_step_time(plans, workloads, fixed)
            floor = step_time_floor(workloads, len(plans), count, fixed)
            self.time[f] += t
            self.floor[f] += floor
            self.worst[f] = max(self.worst[f], t / floor)

    def row(self, label: str) -> str:
        if not self.steps:
            return f"  {label:<18}{'fails':>7}"
        ratios = "".join(f"{self.time[f] / self.floor[f]:>9.4f}{self.worst[f]:>7.3f}" for f in OVERHEADS)
        failed = f"  ({self.failed} steps verl cannot plan)" if self.failed else ""
        return f"  {label:<18}{self.count:>7}{self.at_bound:>6}/{self.steps:<3}{ratios}{failed}"


#: One step's global plan: its count at each ``f``, and the bound ``ceil(B / dp)``.
Outcome = tuple[dict[float, int], int]


def setting(lengths_all: list[int], dp: int, per: int, cap: int, steps: int
            ) -> tuple[dict[str, Tally], int, list[Outcome]]:
    tallies = {name: Tally() for name in ("verl, SFT", "library, SFT", "verl, PPO", "library, PPO", "global")}
    bound_total, outcomes = 0, []
    for step in sampler_steps(lengths_all, dp * per, steps):
        lengths = [min(s, cap) for s in step]
        workloads = [workload(s) for s in lengths]
        plans = {f: plan_step(lengths, dp, cap, micro_batch_fixed_tokens=f * cap) for f in OVERHEADS}
        bound = math.ceil(plans[DEFAULT_SHARE].lower_bound / dp)
        bound_total += bound
        for name, dealt in (("SFT", sft_deal(len(lengths), dp)), ("PPO", ppo_deal(lengths, dp))):
            tallies[f"verl, {name}"].add(verl_per_rank(lengths, dealt, cap), workloads, cap, bound)
            tallies[f"library, {name}"].add(library_per_rank(lengths, dealt, cap), workloads, cap, bound)
        for f, plan in plans.items():
            tallies["global"].add(plan.rank_micro_batches, workloads, cap, bound, overhead=f)
        outcomes.append(({f: plan.count for f, plan in plans.items()}, bound))
    return tallies, bound_total, outcomes


#: One setting's global plans: its dataset, ranks, samples per rank, cap and tally.
Row = tuple[str, int, int, int, "Tally"]


def main_tables(steps: int, rows: list[Row] | None = None) -> list[tuple[str, Outcome]]:
    """Print a table per dataset; return every step's outcome, with its dataset (and add
    each setting's global tally to ``rows``)."""
    header = "".join(f"{'x floor':>9}{'worst':>7}" for _ in OVERHEADS)
    fs = "".join(f"{'f=' + format(f, 'g'):>16}" for f in OVERHEADS)
    everything: list[tuple[str, Outcome]] = []
    for name, lengths in datasets().items():
        print(f"\n{name}: {steps} steps per setting; count and at bound at f={DEFAULT_SHARE}")
        print(f"  {'':<18}{'':>7}{'':>10}{fs}")
        print(f"  {'plan':<18}{'count':>7}{'at bound':>10}{header}")
        for dp, per, cap in SETTINGS:
            tallies, bound, outcomes = setting(lengths, dp, per, cap, steps)
            print(f"{dp} ranks x {per} samples, cap {cap:,}: bound {bound}")
            for label, tally in tallies.items():
                print(tally.row(label))
            everything += [(name, outcome) for outcome in outcomes]
            if rows is not None:
                rows.append((name, dp, per, cap, tallies["global"]))
    return everything


def summary(outcomes: list[tuple[str, Outcome]]) -> None:
    print("\nglobal: steps at the bound ceil(B / dp), and the most above it")
    for label, prefix in (("CHAMP steps", "CHAMP"), ("every step", "")):
        chosen = [o for name, o in outcomes if name.startswith(prefix)]
        cells = []
        for f in OVERHEADS:
            hits = sum(counts[f] == bound for counts, bound in chosen)
            most = max((counts[f] - bound for counts, bound in chosen), default=0)
            cells.append(f"f={f:g}: {hits}/{len(chosen)} ({hits / max(1, len(chosen)):.1%}), +{most} at most")
        print(f"  {label:<12}" + "; ".join(cells))


def targets(outcomes: list[tuple[str, Outcome]], rows: list[Row]) -> None:
    """Issue 31's targets for plan_global_batch, on the CHAMP sets, at each ``f``."""
    print("\nIssue 31's targets (plan_global_batch, CHAMP and CHAMP responses):")
    champ = [o for name, o in outcomes if name.startswith("CHAMP")]
    for f in OVERHEADS:
        hits = sum(counts[f] == bound for counts, bound in champ)
        most = max(counts[f] - bound for counts, bound in champ)
        share = hits / len(champ)
        verdict = "met" if share >= 0.95 and most <= 1 else "MISSED"
        print(f"  f={f:<5g}count at ceil(B / dp) on {hits}/{len(champ)} steps ({share:.1%}, target "
              f">= 95%), at most +{most} (target +1): {verdict}")
    wide = [row for row in rows if row[0].startswith("CHAMP") and row[2] >= 32]
    for f in OVERHEADS:
        ratios = [t.time[f] / t.floor[f] for *_, t in wide]
        worst = max(t.worst[f] for *_, t in wide)
        verdict = "met" if max(ratios) <= 1.02 else "MISSED"
        print(f"  f={f:<5g}step time / floor, ranks of 32+ samples ({len(wide)} settings): at most "
              f"{max(ratios):.4f} over a setting's steps (target 1.02): {verdict}; worst single "
              f"step {worst:.3f}")


def issue_table(steps: int) -> None:
    """The issue's first table: CHAMP responses, SFT dealing, the library per rank."""
    responses = datasets()["CHAMP responses"]
    print(f"\nThe issue's first table (CHAMP responses, DistributedSampler dealing, {steps} steps):")
    print(f"  {'setting':<20}{'count':>7}{'bound sum':>11}{'sum B/dp':>10}{'slowest/mean':>14}   issue")
    for dp, per, cap in ISSUE_ROWS:
        count = bounds = 0
        exact = ratio = 0.0
        for step in sampler_steps(responses, dp * per, steps):
            lengths = [min(s, cap) for s in step]
            dealt = sft_deal(len(lengths), dp)
            count += len(library_per_rank(lengths, dealt, cap)[0])
            plan = plan_step(lengths, dp, cap)
            bounds += math.ceil(plan.lower_bound / dp)
            exact += plan.lower_bound / dp
            loads = [sum(workload(lengths[i]) for i in rows) for rows in dealt]
            ratio += max(loads) / (sum(loads) / dp)
        issue = ISSUE_VALUES[(dp, per, cap)]
        print(f"  {f'{dp} x {per}, {cap:,}':<20}{count:>7}{bounds:>11}{exact:>10.1f}{ratio / steps:>14.2f}"
              f"   {issue[0]}, {issue[1]}, {issue[2]}")


def timed(call: Callable[[], object]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def timing_table() -> None:
    n_ranks, per = 64, 1563  # 100,032 samples
    lengths = [min(s, 16384) for s in random.Random(0).choices(load_champ_lengths(), k=n_ranks * per)]
    print(f"\nPlanning one step of {len(lengths):,} CHAMP samples across {n_ranks} ranks, cap 16,384 "
          f"(load average before: {os.getloadavg()[0]:.2f}):")
    dealt = sft_deal(len(lengths), n_ranks)
    rows: Sequence[tuple[str, Callable[[], object]]] = [
        ("global (plan_global_batch)", lambda: plan_step(lengths, n_ranks, 16384)),
        ("library per rank (plan_data_parallel)", lambda: library_per_rank(lengths, dealt, 16384)),
    ]
    for label, call in rows:
        wall, cpu = timed(call)
        target = "  (target < 5 s)" if label.startswith("global") else ""
        print(f"  {label:<40}{wall:>8.2f} s wall{cpu:>8.2f} s cpu{target}")
    print(f"  (load average after: {os.getloadavg()[0]:.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="steps per setting (default 10)")
    parser.add_argument("--quick", action="store_true", help="3 steps per setting, no timing")
    args = parser.parse_args()
    steps = 3 if args.quick else args.steps
    issue_table(steps)
    rows: list[Row] = []
    outcomes = main_tables(steps, rows)
    summary(outcomes)
    targets(outcomes, rows)
    if not args.quick:
        timing_table()


if __name__ == "__main__":
    main()

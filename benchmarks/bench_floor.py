"""What any call returning k micro-batches must spend on top of one gather. Prints a table.

Run: ``python benchmarks/bench_floor.py`` (about 20 s; ``--repeat N``, default 7).

The speed targets of issues 9 and 13 hold the padded call to 1.5x (issue 13) or 2x (issue
9) of ``r+g``: reading the lengths and gathering every row once, in one index-select. But
``rearrange_micro_batches`` must return k micro-batches (``list[TensorDict]``, the
interface verl's callers index), and it must plan them. This script measures, on the cases
of ``bench_plan.py``, the cost of those two duties alone, each added to the same floor, so
that a case where they already pass the target is one no implementation of the interface
can meet, however it plans or cuts:

  r+g ms      padded floor: ``attention_mask.sum(-1)`` to a list, then ``batch[order]``
  split ms    r+g, then ``torch.split`` of every gathered tensor into the k micro-batch
              sizes: k plain tensors per key, no TensorDict, the plan given for free
  TDs ms      r+g, then tensordict's ``split`` into the k TensorDicts the interface returns
  plan ms     ``plan_micro_batches`` on the lengths (pure Python, as DESIGN.md section 4 has it)
  call ms     ``rearrange_micro_batches`` on the padded batch (everything)
  split x     split ms / r+g ms: the least ratio for any call returning k tensors per key
  TDs x       TDs ms / r+g ms: the least for any call returning k TensorDicts
  +plan x     (TDs ms + plan ms) / r+g ms: the least with this library's planner
  call x      call ms / r+g ms (the ratio bench_plan.py prints)
  j r+g ms    jagged floor (bench_plan.py's): offsets to the host, the token values gathered
              once in plan order, one jagged tensor
  j NTs x     (j r+g + one jagged tensor per micro-batch on views of the gathered values,
              built the cheapest way known) / j r+g: the least for a jagged call returning
              k jagged tensors, planning aside
  j call x    jagged ``rearrange_micro_batches`` / j r+g

Every column of a case is measured in the same rounds, one after another, best of
``--repeat`` rounds. Padded columns are "-" above 40M elements (the batch would take over
200 MB), as in bench_plan.py.
"""

from __future__ import annotations

import argparse
import itertools

import torch
from bench_plan import (
    bench_cases,
    jagged_batch,
    jagged_read_and_gather,
    padded_batch,
    read_and_gather,
    timed_rounds,
)
from tensordict import TensorDict

from seqlen_balancing import plan_micro_batches, rearrange_micro_batches
from seqlen_balancing.batch.nested import _jagged  # the cheapest known build of one jagged tensor


def jagged_pieces(batch: TensorDict, order: list[int], sizes: list[int]) -> list[torch.Tensor]:
    """The jagged floor, then one jagged tensor per micro-batch on views of the gathered
    values, its offsets cut from one host tensor: the least a jagged call returning k
    micro-batches builds. Each is made the cheapest way known, this library's direct build
    from torch's jagged class (``batch.nested._jagged``, ~3x cheaper than the public
    ``nested_tensor_from_jagged``)."""
    joined = jagged_read_and_gather(batch, order)
    values, starts = joined.values(), joined.offsets().tolist()
    bounds = [0, *itertools.accumulate(sizes)]
    local = [o - starts[a] for a, b in itertools.pairwise(bounds) for o in starts[a : b + 1]]
    offsets = torch.tensor(local).split([size + 1 for size in sizes])
    rows = [b - a for a, b in itertools.pairwise(starts)]
    return [
        _jagged(values[starts[a] : starts[b]], offsets[m], 1, rows[a:b])
        for m, (a, b) in enumerate(itertools.pairwise(bounds))
    ]


def case_row(name: str, lengths: list[int], cap: int, repeat: int) -> str:
    plan = plan_micro_batches(lengths, cap)
    sizes = [len(part) for part in plan]
    order = [i for part in plan for i in part]
    jagged = jagged_batch(lengths)
    jagged_floor, jagged_nts, jagged_call = timed_rounds(
        [
            lambda: jagged_read_and_gather(jagged, order),
            lambda: jagged_pieces(jagged, order, sizes),
            lambda: rearrange_micro_batches(jagged, cap),
        ],
        repeat,
    )
    padded_cells = ["-"] * 9
    if len(lengths) * max(lengths) <= 40_000_000:
        batch = padded_batch(lengths)
        index = torch.tensor(order)

        def split_floor() -> object:
            _, gathered = read_and_gather(batch, index)
            return [value.split(sizes) for value in gathered.values()]

        def tensordicts_floor() -> object:
            _, gathered = read_and_gather(batch, index)
            return gathered.split(sizes)

        floor, split, tds, plan_ms, call = timed_rounds(
            [
                lambda: read_and_gather(batch, index),
                split_floor,
                tensordicts_floor,
                lambda: plan_micro_batches(lengths, cap),
                lambda: rearrange_micro_batches(batch, cap),
            ],
            repeat,
        )
        padded_cells = [
            f"{floor:.2f}", f"{split:.2f}", f"{tds:.2f}", f"{plan_ms:.2f}", f"{call:.2f}",
            f"{split / floor:.2f}", f"{tds / floor:.2f}", f"{(tds + plan_ms) / floor:.2f}",
            f"{call / floor:.2f}",
        ]
    cells = "".join(f"{c:>9}" for c in padded_cells)
    return (
        f"{name:<18}{len(lengths):>6}{len(plan):>5}{cells}{jagged_floor:>9.2f}"
        f"{jagged_nts / jagged_floor:>9.2f}{jagged_call / jagged_floor:>9.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="best of N rounds (default 7)")
    args = parser.parse_args()
    print(f"Cost on top of one gather, best of {args.repeat} rounds (ms; x: ratio to r+g)")
    header = ["r+g ms", "split ms", "TDs ms", "plan ms", "call ms", "split x", "TDs x",
              "+plan x", "call x", "j r+g ms", "j NTs x", "j call x"]
    print(f"{'case':<18}{'n':>6}{'k':>5}" + "".join(f"{h:>9}" for h in header))
    for name, lengths, cap, _ in bench_cases(quick=True):
        print(case_row(name, lengths, cap, args.repeat), flush=True)


if __name__ == "__main__":
    main()

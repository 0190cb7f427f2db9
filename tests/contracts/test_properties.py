"""The strict cap on every public planning entry point, with inputs that crowd the cap.

Runs in the default test run (a few seconds). Sizes are drawn from the values where an
off-by-one in a packing or a bound shows: exactly the cap, ``cap/2 +- 1``, ``cap/3 +- 1``,
``cap - 1``, 0 and 1, many equal sizes, two sizes mixed. Every plan is checked against
rules written here: each micro-batch within the cap (tokens counted from the input, or from
the micro-batch's own mask), an exact cover, no empty micro-batch, the count a multiple of
``num_batches_divided_by`` and at least ``min_num_micro_batch`` and ``ceil(total / cap)``,
forced groups kept whole; and valid input never raises.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqlen_balancing import plan_data_parallel, plan_micro_batches
from seqlen_balancing.planning.bounds import l1_lower_bound, l2_lower_bound
from seqlen_balancing.planning.packing import (
    best_fit_decreasing,
    closing_fit_decreasing,
    minimum_bin_slack,
    split_to_count,
)
from seqlen_balancing.planning.repack import reduce_bins

CAPS = st.one_of(
    st.sampled_from([1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 99, 100, 101, 16384]),
    st.integers(1, 3000),
)


def near_cap(cap: int) -> list[int]:
    """The sizes that crowd a cap: at it, halves and thirds +- 1, just under it, 0 and 1."""
    values = {cap, cap - 1, 0, 1}
    for part in (cap // 2, (cap + 1) // 2, cap // 3, (cap + 2) // 3):
        values |= {part - 1, part, part + 1}
    return sorted(v for v in values if 0 <= v <= cap)


@st.composite
def crowded_sizes(draw: st.DrawFn, cap: int, n: int) -> list[int]:
    near = near_cap(cap)
    shape = draw(st.sampled_from(["near", "equal", "two", "mixed", "zeros"]))
    if shape == "equal":
        return [draw(st.sampled_from(near))] * n
    if shape == "two":
        pair = draw(st.lists(st.sampled_from(near), min_size=2, max_size=2))
        return draw(st.lists(st.sampled_from(pair), min_size=n, max_size=n))
    if shape == "zeros":
        return draw(st.lists(st.sampled_from([0, 0, 0, cap, cap // 2 + 1]), min_size=n, max_size=n))
    element = st.sampled_from(near) if shape == "near" else st.one_of(
        st.sampled_from(near), st.integers(0, cap)
    )
    return draw(st.lists(element, min_size=n, max_size=n))


@st.composite
def crowded(draw: st.DrawFn, max_n: int = 30) -> tuple[list[int], int]:
    """``(sizes, cap)``; every size within the cap."""
    cap = draw(CAPS)
    return draw(crowded_sizes(cap, draw(st.integers(1, max_n)))), cap


def check_plan(
    plan: list[list[int]], sizes: list[int], cap: int, *, group: int = 1,
    divisor: int | None = None, minimum: int | None = None,
) -> None:
    """The rules of DESIGN.md section 3 on one rank's plan, from the input sizes alone."""
    n = len(sizes)
    assert sorted(i for part in plan for i in part) == list(range(n)), "not an exact cover"
    assert all(part for part in plan), "an empty micro-batch"
    loads = [sum(sizes[i] for i in part) for part in plan]
    assert max(loads) <= cap, f"a micro-batch of {max(loads)} tokens under cap {cap}"
    assert len(plan) >= -(-sum(sizes) // cap)
    assert len(plan) <= n // group
    if divisor is not None:
        assert len(plan) % divisor == 0
    if minimum is not None:
        assert len(plan) >= minimum
    where = {i: b for b, part in enumerate(plan) for i in part}
    for g in range(0, n, group):
        assert len({where[i] for i in range(g, g + group)}) == 1, f"group {g // group} split"


def valid(sizes: list[int], cap: int, group: int, divisor: int | None, minimum: int | None) -> bool:
    """Input with a plan for certain: one micro-batch per group is one, and it is allowed."""
    groups = [sum(sizes[g : g + group]) for g in range(0, len(sizes), group)]
    return (
        bool(sizes) and len(sizes) % group == 0 and max(groups) <= cap
        and (minimum is None or minimum <= len(groups))
        and (divisor is None or len(groups) % divisor == 0)
    )


SETTINGS = {
    "group": st.sampled_from([1, 1, 1, 2, 3]),
    "divisor": st.one_of(st.none(), st.integers(1, 4)),
    "minimum": st.one_of(st.none(), st.integers(1, 8)),
    "balance": st.booleans(),
}


@given(sample=crowded(), over=st.booleans(), **SETTINGS)
@settings(max_examples=250, deadline=None)
@pytest.mark.slow
def test_plan_micro_batches_keeps_the_cap(
    sample: tuple[list[int], int], over: bool, group: int, divisor: int | None,
    minimum: int | None, balance: bool,
) -> None:
    sizes, cap = sample
    sizes = sizes[: len(sizes) - len(sizes) % group] or sizes[:1] * group
    if over:  # one sample just over the cap
        sizes[len(sizes) // 2] = cap + 1
    try:
        plan = plan_micro_batches(
            sizes, cap, force_group_size=group, num_batches_divided_by=divisor,
            min_num_micro_batch=minimum, use_dynamic_bsz_balance=balance,
        )
    except ValueError as error:
        assert not valid(sizes, cap, group, divisor, minimum), f"valid input raised: {error}"
        if over:
            assert f"{sizes.index(cap + 1)} has {cap + 1} tokens, which exceeds max_token_len={cap}" \
                in str(error)
        return
    assert not over, "a sample over the cap was planned"
    check_plan(plan, sizes, cap, group=group, divisor=divisor, minimum=minimum)


@given(
    cap=CAPS, data=st.data(), ranks=st.integers(1, 4),
    divisor=SETTINGS["divisor"], minimum=SETTINGS["minimum"],
)
@settings(max_examples=80, deadline=None)
@pytest.mark.slow
def test_plan_data_parallel_keeps_the_cap_on_every_rank(
    cap: int, data: st.DataObject, ranks: int, divisor: int | None, minimum: int | None
) -> None:
    per_rank = [data.draw(crowded_sizes(cap, data.draw(st.integers(1, 20)))) for _ in range(ranks)]
    try:
        plans = plan_data_parallel(
            per_rank, cap, num_batches_divided_by=divisor, min_num_micro_batch=minimum
        )
    except ValueError as error:
        fewest = min(len(s) for s in per_rank)
        assert not all(valid(s, cap, 1, divisor, minimum) for s in per_rank) or (
            # every rank valid alone, yet the largest count is above a smaller rank's samples
            "micro-batches are needed but only" in str(error) and fewest < max(len(s) for s in per_rank)
        ), str(error)
        return
    assert len({len(plan) for plan in plans}) == 1, "ranks disagree on the count"
    for plan, sizes in zip(plans, per_rank, strict=True):
        check_plan(plan, sizes, cap, divisor=divisor, minimum=minimum)


def check_bins(bins: list[list[int]], sizes: list[int], cap: int) -> None:
    assert sorted(i for b in bins for i in b) == list(range(len(sizes)))
    assert all(sum(sizes[i] for i in b) <= cap for b in bins)


@given(sample=crowded(max_n=40), data=st.data())
@settings(max_examples=150, deadline=None)
@pytest.mark.slow
def test_packings_keep_the_cap(sample: tuple[list[int], int], data: st.DataObject) -> None:
    sizes, cap = sample
    l1, l2 = l1_lower_bound(sizes, cap), l2_lower_bound(sizes, cap)
    assert l1 == -(-sum(sizes) // cap) and l1 <= l2
    for packing in (best_fit_decreasing, closing_fit_decreasing, minimum_bin_slack):
        bins = packing(sizes, cap)
        check_bins(bins, sizes, cap)
        assert all(bins) and len(bins) >= l2, packing.__name__
    start = best_fit_decreasing(sizes, cap)
    reduced = reduce_bins(sizes, cap, start, target=l2)
    check_bins(reduced, sizes, cap)
    assert l2 <= len(reduced) <= len(start)
    count = data.draw(st.integers(len(start), len(sizes)))
    split = split_to_count(sizes, start, count)
    check_bins(split, sizes, cap)
    assert len(split) == count and all(split)


# --- the TensorDict entry points (torch) ------------------------------------------------


def masked(sizes: list[int]) -> Any:
    import torch
    from tensordict import TensorDict

    width = max([*sizes, 1]) + 1
    mask = (torch.arange(width).expand(len(sizes), width) < torch.tensor(sizes)[:, None]).long()
    # Right and left padding alternate: the effective length is the mask's sum, not a width.
    mask[1::2] = mask[1::2].flip(-1)
    return TensorDict({"attention_mask": mask, "row": torch.arange(len(sizes))}, batch_size=[len(sizes)])


def tokens_and_rows(micro_batches: list[Any]) -> tuple[list[int], list[int]]:
    """Tokens of each micro-batch, read from its own mask, and the input rows it holds."""
    tokens = [int(mb["attention_mask"].sum()) for mb in micro_batches]
    rows = [int(r) for mb in micro_batches for r in mb["row"]]
    return tokens, rows


@pytest.mark.torch
@given(sample=crowded(max_n=16), divisor=SETTINGS["divisor"], group=SETTINGS["group"])
@settings(max_examples=40, deadline=None)
def test_rearrange_micro_batches_keeps_the_cap(
    sample: tuple[list[int], int], divisor: int | None, group: int
) -> None:
    from seqlen_balancing import rearrange_micro_batches

    sizes, cap = sample
    sizes = sizes[: len(sizes) - len(sizes) % group] or sizes[:1] * group
    try:
        micro_batches, plan = rearrange_micro_batches(
            masked(sizes), cap, num_batches_divided_by=divisor, force_group_size=group
        )
    except ValueError as error:
        assert not valid(sizes, cap, group, divisor, None), f"valid input raised: {error}"
        return
    tokens, rows = tokens_and_rows(micro_batches)
    assert max(tokens) <= cap
    assert rows == [i for part in plan for i in part]
    check_plan(plan, sizes, cap, group=group, divisor=divisor)


class DataProtoLike:
    """What prepare_dynamic_batch needs of verl's DataProto, and nothing more."""

    def __init__(self, batch: Any, non_tensor_batch: dict[str, Any], meta_info: dict[str, Any]):
        self.batch, self.non_tensor_batch, self.meta_info = batch, non_tensor_batch, meta_info

    @classmethod
    def from_dict(
        cls, tensors: dict[str, Any], non_tensors: dict[str, Any], meta_info: dict[str, Any]
    ) -> DataProtoLike:
        from tensordict import TensorDict

        n = len(next(iter(tensors.values())))
        return cls(TensorDict(tensors, batch_size=[n]), non_tensors, meta_info)


@pytest.mark.torch
@given(sample=crowded(max_n=16), minimum=SETTINGS["minimum"])
@settings(max_examples=30, deadline=None)
def test_prepare_dynamic_batch_keeps_the_cap(
    sample: tuple[list[int], int], minimum: int | None
) -> None:
    import numpy as np

    from seqlen_balancing import prepare_dynamic_batch

    sizes, cap = sample
    data = DataProtoLike(masked(sizes), {"uid": np.arange(len(sizes))}, {"step": 1})
    try:
        micro_batches, plan = prepare_dynamic_batch(data, cap, min_num_micro_batch=minimum)
    except ValueError as error:
        assert not valid(sizes, cap, 1, None, minimum), f"valid input raised: {error}"
        return
    tokens, rows = tokens_and_rows([mb.batch for mb in micro_batches])
    assert max(tokens) <= cap
    assert [int(u) for mb in micro_batches for u in mb.non_tensor_batch["uid"]] == rows
    check_plan(plan, sizes, cap, minimum=minimum)


@pytest.mark.torch
@given(
    sample=crowded(max_n=16), sp_size=st.sampled_from([1, 1, 2]), group=SETTINGS["group"],
    divisor=SETTINGS["divisor"],
)
@settings(max_examples=30, deadline=None)
def test_prepare_micro_batches_keeps_the_cap(
    sample: tuple[list[int], int], sp_size: int, group: int, divisor: int | None
) -> None:
    from tensordict import NonTensorData

    from seqlen_balancing import prepare_micro_batches

    sizes, per_gpu = sample
    sizes = sizes[: len(sizes) - len(sizes) % group] or sizes[:1] * group
    cap = per_gpu * sp_size  # verl's budget: max_token_len_per_gpu * sp_size
    batch = masked(sizes)
    batch["max_token_len_per_gpu"] = NonTensorData(per_gpu)
    batch["sp_size"] = NonTensorData(sp_size)
    batch["force_group_size"] = NonTensorData(group)
    try:
        micro_batches, plan = prepare_micro_batches(batch, num_batches_divided_by=divisor)
    except ValueError as error:
        assert not valid(sizes, cap, group, divisor, None), f"valid input raised: {error}"
        return
    assert plan is not None
    tokens, _ = tokens_and_rows(micro_batches)
    assert max(tokens) <= cap
    check_plan(plan, sizes, cap, group=group, divisor=divisor)

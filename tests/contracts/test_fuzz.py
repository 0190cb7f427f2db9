"""Fuzz: random TensorDicts and arguments. A valid plan or ValueError/TypeError, nothing else.

The oracle is written here: each drawn argument carries the int it stands for (or BAD),
so the test knows which inputs are valid; valid input with a sure plan never raises, and a
plan keeps the cap, covers every row once, has a count that is a multiple of
``num_batches_divided_by`` and at least ``min_num_micro_batch``, and keeps every
``force_group_size`` group in one micro-batch.

Marked ``fuzz``: excluded from the default run; ``.ci/run`` runs it with
``FUZZ_EXAMPLES=2000`` (``python -m pytest -m fuzz``).
"""

from __future__ import annotations

import math
import os
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from tensordict import NonTensorData, TensorDict

from seqlen_balancing import rearrange_micro_batches

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "200"))


#: Needs torch and tensordict: selected out by `-m "not torch"` (see conftest.py).
pytestmark = pytest.mark.torch

#: What an argument means, decided here: the positive int it stands for, None, or BAD.
BAD = "bad"
Tagged = tuple[Any, Any]

ANY_ARGUMENT = st.one_of(
    st.just((None, None)),
    st.integers(-3, 12).map(lambda v: (v, v if v >= 1 else BAD)),
    st.sampled_from([(0, BAD), (1.5, BAD), (math.nan, BAD), (True, BAD), ("8", BAD), (2.0, BAD)]),
    st.builds(lambda v: (torch.tensor(v), v), st.integers(1, 12)),
    st.builds(lambda v: (torch.tensor([v, v]), BAD), st.integers(1, 12)),
)
GOOD_ARGUMENT = st.one_of(st.just((None, None)), st.integers(1, 4).map(lambda v: (v, v)))
# Most draws are valid, so that "valid input never raises" is tested often.
ARGUMENT = st.tuples(st.integers(0, 9), GOOD_ARGUMENT, ANY_ARGUMENT).map(
    lambda t: t[1] if t[0] < 8 else t[2]
)
ANY_CAP = st.one_of(
    st.integers(1, 200).map(lambda v: (v, v)),
    st.sampled_from([(0, BAD), (-5, BAD), (10.0, BAD), (math.nan, BAD), (True, BAD), (None, BAD),
                     ("64", BAD)]),
    st.builds(lambda v: (torch.tensor(v), v), st.integers(1, 200)),
    st.builds(lambda v: (torch.tensor(float(v)), BAD), st.integers(1, 200)),
)
CAP = st.tuples(st.integers(0, 9), st.integers(60, 200), ANY_CAP).map(
    lambda t: (t[1], t[1]) if t[0] < 8 else t[2]
)
#: force_group_size has no "not given": None is as bad as 0.
GROUP = st.one_of(
    st.just((1, 1)), st.just((2, 2)), ARGUMENT.map(lambda t: (t[0], BAD if t[1] is None else t[1]))
)


@st.composite
def batches(draw: st.DrawFn) -> tuple[TensorDict, list[int] | None]:
    """A random batch and its true effective lengths (None when unreadable by design)."""
    n = draw(st.integers(0, 24))
    lengths = draw(st.lists(st.integers(0, 60), min_size=n, max_size=n))
    kind = draw(st.sampled_from(["mask"] * 6 + ["jagged"] * 3 + ["none", "mask3d", "rows"]))
    if kind == "jagged" and n > 0:
        ids = torch.nested.nested_tensor([torch.zeros(max(v, 1)) for v in lengths], layout=torch.jagged)
        truth = [max(v, 1) for v in lengths]
        return TensorDict({"input_ids": ids}, batch_size=[n]), truth
    width = max([*lengths, 1]) + draw(st.integers(0, 5))
    dtype = draw(st.sampled_from([torch.bool, torch.int32, torch.int64, torch.float32]))
    mask = torch.zeros(n, width, dtype=dtype)
    for row, length in enumerate(lengths):
        positions = torch.randperm(width, generator=torch.Generator().manual_seed(row))[:length]
        mask[row, positions] = 1
    if kind == "none":
        return TensorDict({"input_ids": mask.long()}, batch_size=[n]), None
    if kind == "mask3d":
        return TensorDict({"attention_mask": mask.unsqueeze(-1)}, batch_size=[n]), None
    if kind == "rows" and n > 0:
        td = TensorDict({"x": torch.zeros(n)}, batch_size=[n])
        td.set_non_tensor("attention_mask", mask[:-1]) if draw(st.booleans()) else None
        return td, None
    td = TensorDict({"attention_mask": mask, "flag": NonTensorData("x")}, batch_size=[n])
    return td, lengths


def must_plan(
    truth: list[int] | None, cap: Any, divisor: Any, minimum: Any, group: Any
) -> bool:
    """Valid input, with a plan for certain (one micro-batch per forced group is one)."""
    if truth is None or BAD in (cap, divisor, minimum, group) or not truth:
        return False
    if len(truth) % group:
        return False
    groups = [sum(truth[g : g + group]) for g in range(0, len(truth), group)]
    return (
        max(groups) <= cap
        and (minimum is None or minimum <= len(groups))
        and (divisor is None or len(groups) % divisor == 0)
    )


@pytest.mark.fuzz
@given(
    sample=batches(),
    cap=CAP,
    divisor=ARGUMENT,
    minimum=ARGUMENT,
    group=GROUP,
    balance=st.booleans(),
)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_only_a_valid_plan_or_a_clear_error(
    sample: tuple[TensorDict, list[int] | None], cap: Tagged, divisor: Tagged, minimum: Tagged,
    group: Tagged, balance: bool,
) -> None:
    batch, truth = sample
    (cap, limit), (divisor, every), (minimum, least), (group, size) = cap, divisor, minimum, group
    valid = must_plan(truth, limit, every, least, size)
    event(f"must plan: {valid}")
    try:
        micro_batches, plan = rearrange_micro_batches(
            batch, cap, num_batches_divided_by=divisor, min_num_micro_batch=minimum,
            use_dynamic_bsz_balance=balance, force_group_size=group,
        )
    except (ValueError, TypeError) as error:
        assert not valid, f"valid input raised {error!r}"
        assert str(error)
        return
    assert truth is not None, "an unreadable batch must raise"
    assert BAD not in (limit, every, least, size), "a bad argument was accepted"
    assert len(micro_batches) == len(plan)
    assert [len(mb) for mb in micro_batches] == [len(part) for part in plan]
    assert sorted(i for part in plan for i in part) == list(range(len(truth)))
    assert all(part for part in plan)
    assert max(sum(truth[i] for i in part) for part in plan) <= limit
    if every is not None:
        assert len(plan) % every == 0
    if least is not None:
        assert len(plan) >= least
    where = {i: b for b, part in enumerate(plan) for i in part}
    for start in range(0, len(truth), size):
        assert len({where[i] for i in range(start, start + size)}) == 1, "a forced group was split"
    assert len(plan) <= len(truth) // size

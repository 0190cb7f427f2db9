"""Fuzz: random TensorDicts and arguments. A valid plan or ValueError/TypeError, nothing else.

Marked ``fuzz``: excluded from the default run; ``.ci/run`` runs it with
``FUZZ_EXAMPLES=2000`` (``python -m pytest -m fuzz``).
"""

from __future__ import annotations

import math
import os
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensordict import NonTensorData, TensorDict

from seqlen_balancing import rearrange_micro_batches

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "200"))


#: Needs torch and tensordict: selected out by `-m "not torch"` (see conftest.py).
pytestmark = pytest.mark.torch

ARGUMENT = st.one_of(
    st.none(),
    st.integers(-3, 12),
    st.sampled_from([0, 1.5, math.nan, True, "8", 2.0]),
    st.builds(lambda v: torch.tensor(v), st.integers(1, 12)),
    st.builds(lambda v: torch.tensor([v, v]), st.integers(1, 12)),
)
CAP = st.one_of(
    st.integers(1, 200),
    st.sampled_from([0, -5, 10.0, math.nan, True, None, "64"]),
    st.builds(lambda v: torch.tensor(v), st.integers(1, 200)),
    st.builds(lambda v: torch.tensor(float(v)), st.integers(1, 200)),
)


@st.composite
def batches(draw: st.DrawFn) -> tuple[TensorDict, list[int] | None]:
    """A random batch and its true effective lengths (None when unreadable by design)."""
    n = draw(st.integers(0, 24))
    lengths = draw(st.lists(st.integers(0, 60), min_size=n, max_size=n))
    kind = draw(st.sampled_from(["mask", "mask", "jagged", "none", "mask3d", "rows"]))
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


@pytest.mark.fuzz
@given(
    sample=batches(),
    cap=CAP,
    divisor=ARGUMENT,
    minimum=ARGUMENT,
    group=st.one_of(st.just(1), ARGUMENT),
    balance=st.booleans(),
)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_only_a_valid_plan_or_a_clear_error(
    sample: tuple[TensorDict, list[int] | None], cap: Any, divisor: Any, minimum: Any,
    group: Any, balance: bool,
) -> None:
    batch, truth = sample
    try:
        micro_batches, plan = rearrange_micro_batches(
            batch, cap, num_batches_divided_by=divisor, min_num_micro_batch=minimum,
            use_dynamic_bsz_balance=balance, force_group_size=group,
        )
    except (ValueError, TypeError) as error:
        assert str(error)
        return
    assert truth is not None, "an unreadable batch must raise"
    limit = int(cap)
    assert len(micro_batches) == len(plan)
    assert sorted(i for part in plan for i in part) == list(range(len(truth)))
    assert all(part for part in plan)
    assert max(sum(truth[i] for i in part) for part in plan) <= limit
    if divisor is not None:
        assert len(plan) % int(divisor) == 0

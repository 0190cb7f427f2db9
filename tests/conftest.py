"""Shared fixtures: TensorDict batches built from lists of effective lengths."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence

import pytest
import torch
from tensordict import TensorDict

# tests/compat/ runs this library side by side with verl 0.9.1 itself. verl is not a
# dependency, so where it is not installed the directory is not collected at all (not
# reported as skipped tests): CI's "compat" stage builds a second environment with verl
# 0.9.1 and runs it there (see .ci/run).
collect_ignore = [] if importlib.util.find_spec("verl") is not None else ["compat"]


def _masked(
    lengths: Sequence[int], width: int | None = None, left_pad: bool = False,
    dtype: torch.dtype = torch.long,
) -> TensorDict:
    n = len(lengths)
    width = max([*lengths, 1]) + 3 if width is None else width
    mask = torch.zeros(n, width, dtype=dtype)
    for row, length in enumerate(lengths):
        if left_pad:
            mask[row, width - length :] = 1
        else:
            mask[row, :length] = 1
    ids = torch.arange(n * width, dtype=torch.long).reshape(n, width)
    return TensorDict({"attention_mask": mask, "input_ids": ids}, batch_size=[n])


def _jagged(lengths: Sequence[int]) -> TensorDict:
    rows = [torch.arange(length, dtype=torch.long) + 1000 * i for i, length in enumerate(lengths)]
    ids = torch.nested.nested_tensor(rows, layout=torch.jagged)
    return TensorDict({"input_ids": ids}, batch_size=[len(lengths)])


@pytest.fixture
def masked_batch() -> Callable[..., TensorDict]:
    """``masked_batch(lengths, width=None, left_pad=False, dtype=long)``: padded batch."""
    return _masked


@pytest.fixture
def jagged_batch() -> Callable[..., TensorDict]:
    """``jagged_batch(lengths)``: a batch whose ``input_ids`` is a jagged nested tensor."""
    return _jagged

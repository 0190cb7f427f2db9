"""heaviest_first on the batch entry points, the sampler and the verl switch (issue 47, item 4).

The oracle is tests/test_heaviest_first.py's rule, spelled out again here: a micro-batch
weighs the sum of ``24576*s + s**2`` over its samples' effective lengths; the order is
workload descending, ties by the smallest first index, over verl's balanced order.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tensordict import NonTensorData, TensorDict

from seqlen_balancing import (
    BalancedDistributedSampler,
    prepare_dynamic_batch,
    prepare_micro_batches,
    rearrange_micro_batches,
)

pytestmark = pytest.mark.torch

#: Each sample alone (cap 5): by hand, 5 tokens (122,905) at 1 then 2 (the tie by first
#: index), 3 (73,737) at 4, 2 (49,156) at 0, 1 (24,577) at 3.
ALONE = [2, 5, 5, 1, 3]
ALONE_HEAVIEST = [[1], [2], [4], [0], [3]]
#: A batch that packs: 37 tokens under a cap of 10.
PACKS = [6, 2, 7, 3, 4, 8, 1, 5, 1]


def workload(s: int) -> int:
    return 24576 * s + s * s


def oracle(plan: list[list[int]], lengths: list[int]) -> list[list[int]]:
    return sorted(plan, key=lambda mb: (-sum(workload(lengths[i]) for i in mb), mb[0]))


def batch(lengths: list[int]) -> TensorDict:
    mask = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for row, s in enumerate(lengths):
        mask[row, max(lengths) - s:] = 1  # left-padded: effective length, not position
    return TensorDict({"attention_mask": mask, "row": torch.arange(len(lengths))}, [len(lengths)])


class Proto:
    """A DataProto stand-in (no verl import)."""

    def __init__(self, batch: Any, non_tensor_batch: Any = None, meta_info: Any = None) -> None:
        self.batch, self.non_tensor_batch, self.meta_info = batch, non_tensor_batch or {}, meta_info or {}

    @classmethod
    def from_dict(cls, tensors: dict[str, Any], non_tensors: Any, meta_info: Any = None) -> Proto:
        size = len(next(iter(tensors.values())))
        return cls(TensorDict(tensors, batch_size=[size]), non_tensors, meta_info)


def settings(lengths: list[int], cap: int, **values: Any) -> TensorDict:
    data = batch(lengths)
    data["max_token_len_per_gpu"] = NonTensorData(cap)
    for key, value in values.items():
        data[key] = NonTensorData(value)
    return data


def check(micro_batches: list[Any], plan: list[list[int]], lengths: list[int], rows: Any) -> None:
    """``plan`` heaviest first by the oracle, and each micro-batch holds the rows it names."""
    assert plan == oracle(plan, lengths)
    for micro_batch, indices in zip(micro_batches, plan, strict=True):
        assert rows(micro_batch).tolist() == indices


@pytest.mark.parametrize("balance", [True, False])
def test_rearrange_micro_batches(balance: bool) -> None:
    micro_batches, plan = rearrange_micro_batches(batch(ALONE), 5, min_num_micro_batch=5,
                                                  use_dynamic_bsz_balance=balance, heaviest_first=True)
    assert plan == ALONE_HEAVIEST
    micro_batches, plan = rearrange_micro_batches(batch(PACKS), 10, use_dynamic_bsz_balance=balance,
                                                  heaviest_first=True)
    check(micro_batches, plan, PACKS, lambda mb: mb["row"])
    _, plain = rearrange_micro_batches(batch(PACKS), 10, use_dynamic_bsz_balance=balance)
    assert sorted(plan) == sorted(plain) and (plan != plain or not balance)


def test_prepare_micro_batches_from_the_batch_and_as_a_keyword() -> None:
    _, plan = prepare_micro_batches(settings(ALONE, 5, heaviest_first=True), min_num_micro_batch=5)
    assert plan == ALONE_HEAVIEST
    micro_batches, plan = prepare_micro_batches(settings(PACKS, 10), heaviest_first=True)
    assert plan is not None
    check(micro_batches, plan, PACKS, lambda mb: mb["row"])
    # the static path refuses it, as every option that does not act there
    static = settings(ALONE, 5, use_dynamic_bsz=False, micro_batch_size_per_gpu=2, heaviest_first=True)
    with pytest.raises(ValueError, match="heaviest_first"):
        prepare_micro_batches(static)


def test_prepare_dynamic_batch() -> None:
    parts, plan = prepare_dynamic_batch(Proto(batch(ALONE)), 5, min_num_micro_batch=5, heaviest_first=True)
    assert plan == ALONE_HEAVIEST
    parts, plan = prepare_dynamic_batch(Proto(batch(PACKS)), 10, heaviest_first=True)
    check(parts, plan, PACKS, lambda part: part.batch["row"])


def test_the_balanced_sampler_orders_each_step_by_its_heaviest_index() -> None:
    lengths = [100, 900, 300, 700, 500, 500, 200, 800] * 4
    samplers = [BalancedDistributedSampler(range(32), num_replicas=2, rank=r, lengths=lengths, batch_size=8,
                                           max_token_len=1000, shuffle=False, heaviest_first=True)
                for r in range(2)]
    plan = samplers[0].step_plan(0)
    tops = [max(sum(workload(lengths[i]) for i in mbs[k]) for mbs in plan.rank_micro_batches)
            for k in range(plan.count)]
    assert tops == sorted(tops, reverse=True) and len(set(tops)) > 1
    # what each rank yields is its micro-batches in that order
    for rank, sampler in enumerate(samplers):
        assert list(sampler)[:8] == [i for mb in plan.rank_micro_batches[rank] for i in mb]


def test_the_switchs_variable_reaches_the_switched_functions(monkeypatch: pytest.MonkeyPatch) -> None:
    from seqlen_balancing.verl.switch import _library_functions, options_from_env

    assert options_from_env({"SEQLEN_BALANCING_HEAVIEST_FIRST": "on"}) == {"heaviest_first": True}
    monkeypatch.setenv("SEQLEN_BALANCING_HEAVIEST_FIRST", "1")
    ours = _library_functions()
    assert ours["rearrange_micro_batches"](batch(ALONE), 5, min_num_micro_batch=5)[1] == ALONE_HEAVIEST
    assert ours["prepare_dynamic_batch"](Proto(batch(ALONE)), 5, min_num_micro_batch=5)[1] == ALONE_HEAVIEST
    assert ours["prepare_micro_batches"](settings(ALONE, 5), min_num_micro_batch=5)[1] == ALONE_HEAVIEST
    # a caller's own value wins: verl's order
    plan = ours["rearrange_micro_batches"](batch(ALONE), 5, min_num_micro_batch=5, heaviest_first=False)[1]
    assert plan == [[3], [4], [2], [1], [0]]

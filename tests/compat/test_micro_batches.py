"""Micro-batches against verl 0.9.1: order for a given partition, contents, counts, restore."""

from __future__ import annotations

import random
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict

from seqlen_balancing.planning.planner import order_micro_batches

pytestmark = [pytest.mark.torch, pytest.mark.slow]  # with torch and verl only (tests/conftest.py)


def jagged(rows: list[torch.Tensor], ragged_dim: int = 1) -> torch.Tensor:
    values = torch.cat(rows, dim=ragged_dim - 1)
    sizes = [row.shape[ragged_dim - 1] for row in rows]
    offsets = torch.tensor([0, *np.cumsum(sizes).tolist()], dtype=torch.long)
    return torch.nested.nested_tensor_from_jagged(values, offsets, jagged_dim=ragged_dim)


def ids_batch(lengths: list[int]) -> TensorDict:
    rows = [torch.arange(n, dtype=torch.long) + 1000 * i for i, n in enumerate(lengths)]
    return TensorDict({"input_ids": jagged(rows)}, batch_size=[len(lengths)])


def random_partition(rng: random.Random, n_groups: int, group: int) -> list[list[int]]:
    count = rng.randint(1, n_groups)
    labels = list(range(count)) + [rng.randrange(count) for _ in range(n_groups - count)]
    rng.shuffle(labels)
    return [
        sorted(s for g in range(n_groups) if labels[g] == p for s in range(g * group, (g + 1) * group))
        for p in range(count)
    ]


def test_order_for_a_given_partition(
    random_inputs: int,
    verl: ModuleType, ours: ModuleType, verl_with_partition: Callable[..., None]
) -> None:
    rng = random.Random(10)
    for trial in range(random_inputs):
        group = [1, 1, 2, 3][trial % 4]
        n_groups = rng.randint(1, 24)
        # Small lengths make equal workloads (verl's tie-break) common.
        lengths = [rng.choice([rng.randint(1, 4), rng.randint(1, 3000)]) for _ in range(n_groups * group)]
        partition = random_partition(rng, n_groups, group)
        verl_with_partition(partition, group)
        _, want = verl.rearrange_micro_batches(
            ids_batch(lengths), max_token_len=sum(lengths), force_group_size=group
        )
        loads = ours.calculate_workload(torch.tensor(lengths)).view(-1, group).sum(1).tolist()
        assert order_micro_batches(partition, loads, True, group) == want


def same_nested(a: torch.Tensor, b: torch.Tensor) -> bool:
    rows_a, rows_b = a.unbind(), b.unbind()
    return (
        a.layout == b.layout
        and a.dtype == b.dtype
        and len(rows_a) == len(rows_b)
        and all(torch.equal(x, y) for x, y in zip(rows_a, rows_b, strict=True))
    )


def rich_batch(rng: random.Random, lengths: list[int]) -> TensorDict:
    n = len(lengths)
    channels = rng.choice([1, 3, 4])
    batch = ids_batch(lengths)
    batch["position_ids"] = jagged([torch.randint(0, 99, (channels, s)) for s in lengths], ragged_dim=2)
    batch["old_log_probs"] = jagged([torch.randn(s) for s in lengths])
    batch["advantages"] = torch.randn(n, 3)
    batch["uid"] = NonTensorStack(*(NonTensorData(f"uid-{i}") for i in range(n)))
    batch["temperature"] = NonTensorData(0.7)
    return batch


def test_micro_batch_contents_equal_verls_for_the_same_partition(
    verl: ModuleType, ours: ModuleType, verl_with_partition: Callable[..., None]
) -> None:
    rng = random.Random(11)
    for _ in range(100):
        lengths = [rng.randint(1, 40) for _ in range(rng.randint(1, 24))]
        cap = max(max(lengths), rng.randint(40, 200))
        batch = rich_batch(rng, lengths)
        mine, plan = ours.rearrange_micro_batches(batch, cap)
        verl_with_partition(plan)
        theirs, verl_plan = verl.rearrange_micro_batches(batch, cap)
        assert plan == verl_plan
        for a, b in zip(mine, theirs, strict=True):
            assert torch.equal(a["advantages"], b["advantages"])
            assert a.get("uid").tolist() == b.get("uid").tolist()
            assert a["temperature"] == b["temperature"]
            for key in ("input_ids", "old_log_probs", "position_ids"):
                assert same_nested(a[key], b[key])
                assert a[key]._ragged_idx == b[key]._ragged_idx
                assert torch.equal(a[key].values(), b[key].values())
                assert torch.equal(a[key].offsets(), b[key].offsets())


def test_counts_never_worse_than_verls(verl: ModuleType, ours: ModuleType) -> None:
    # The partitions themselves differ (the README says how); the count never grows.
    rng = random.Random(12)
    fewer = 0
    for trial in range(200):
        group = 2 if trial % 5 == 0 else 1
        lengths = [max(1, int(rng.lognormvariate(5, 1.2))) for _ in range(group * rng.randint(2, 32))]
        largest = max(sum(lengths[i : i + group]) for i in range(0, len(lengths), group))
        cap = max(largest, int(largest * rng.uniform(1.0, 4.0)))
        kwargs: dict[str, Any] = {"force_group_size": group}
        if trial % 7 == 0:
            kwargs["num_batches_divided_by"] = 2
        batch = ids_batch(lengths)
        try:
            _, want = verl.rearrange_micro_batches(batch, cap, **kwargs)
        except ValueError:
            continue  # verl found no count (divisor past the sample count); ours raises too
        _, got = ours.rearrange_micro_batches(batch, cap, **kwargs)
        assert len(got) <= len(want)
        assert max(sum(lengths[i] for i in part) for part in got) <= cap
        fewer += len(got) < len(want)
    assert fewer > 0  # the difference the README lists: fewer micro-batches where verl retries


def test_restore_round_trips_equal_verls(random_inputs: int, verl: ModuleType, ours: ModuleType) -> None:
    rng = random.Random(13)
    for trial in range(random_inputs):
        n = rng.randint(1, 30)
        plan = random_partition(rng, n, 1)
        rng.shuffle(plan)
        kind = trial % 3
        ragged = 1
        if kind == 0:
            outputs = [torch.randn(len(part), 5) for part in plan]
            joined = torch.cat(outputs)
        else:
            ragged = 1 if kind == 1 else 2
            shape = (lambda s: (s,)) if ragged == 1 else (lambda s: (3, s))
            outputs = [
                jagged([torch.randn(shape(rng.randint(1, 9))) for _ in part], ragged) for part in plan
            ]
            joined = jagged([row for out in outputs for row in out.unbind()], ragged)
        want = verl.restore_dynamic_batch(joined, plan)
        for got in (ours.restore_dynamic_batch(joined, plan), ours.restore_dynamic_batch(outputs, plan)):
            if kind == 0:
                assert torch.equal(got, want)
            else:
                assert same_nested(got, want) and got._ragged_idx == ragged
                # verl rebuilds with as_nested_tensor, which picks ragged dim 1 when all
                # rows have one shape (README: restore keeps the ragged dim).
                if len({row.shape for row in want.unbind()}) > 1:
                    assert want._ragged_idx == ragged


def test_prepare_dynamic_batch_on_verls_dataproto(
    verl: ModuleType, ours: ModuleType, verl_with_partition: Callable[..., None]
) -> None:
    from verl.protocol import DataProto

    rng = random.Random(14)
    for _ in range(50):
        lengths = [rng.randint(1, 30) for _ in range(rng.randint(1, 16))]
        n = len(lengths)
        mask = torch.zeros(n, 32, dtype=torch.long)
        for row, s in enumerate(lengths):
            mask[row, :s] = 1
        data = DataProto.from_dict(
            {"attention_mask": mask, "input_ids": torch.randint(0, 50, (n, 32))},
            {"uid": np.array([f"u{i}" for i in range(n)], dtype=object)},
            meta_info={"temperature": 1.0},
        )
        mine, plan = ours.prepare_dynamic_batch(data, max_token_len=64)
        verl_with_partition(plan)
        theirs, verl_plan = verl.prepare_dynamic_batch(data, max_token_len=64)
        assert plan == verl_plan
        for a, b in zip(mine, theirs, strict=True):
            assert type(a) is DataProto
            assert torch.equal(a.batch["input_ids"], b.batch["input_ids"])
            assert list(a.non_tensor_batch["uid"]) == list(b.non_tensor_batch["uid"])
            assert a.meta_info == b.meta_info


def test_prepare_micro_batches_equal_verls(
    verl_engine_utils_module: ModuleType, ours: ModuleType, verl_with_partition: Callable[..., None]
) -> None:
    rng = random.Random(15)
    for trial in range(50):
        lengths = [rng.randint(1, 30) for _ in range(4 * rng.randint(1, 6))]
        batch = rich_batch(rng, lengths)
        if trial % 2:
            batch["use_dynamic_bsz"] = NonTensorData(False)
            batch["micro_batch_size_per_gpu"] = NonTensorData(2)
        else:
            batch["max_token_len_per_gpu"] = NonTensorData(48)
        mine, plan = ours.prepare_micro_batches(batch)
        if plan is not None:
            verl_with_partition(plan)
        theirs, verl_plan = verl_engine_utils_module.prepare_micro_batches(batch)
        assert plan == verl_plan
        for a, b in zip(mine, theirs, strict=True):
            assert torch.equal(a["advantages"], b["advantages"])
            for key in ("input_ids", "position_ids"):
                assert same_nested(a[key], b[key]) and a[key]._ragged_idx == b[key]._ragged_idx


LENGTHS_8 = [3, 1, 2, 4, 2, 1, 3, 2]


def test_static_micro_batches_are_views_of_the_input_as_verls(
    verl_engine_utils_module: ModuleType, ours: ModuleType
) -> None:
    """Issue 20, case 8: on the static path (use_dynamic_bsz=False) a write into a
    micro-batch's dense entry reaches the input, in verl and here alike; jagged entries are
    rebuilt (copies) in both."""
    inputs = []
    for prepare in (verl_engine_utils_module.prepare_micro_batches, ours.prepare_micro_batches):
        batch = ids_batch(LENGTHS_8)
        batch["adv"] = torch.zeros(8)
        batch["use_dynamic_bsz"] = NonTensorData(False)
        batch["micro_batch_size_per_gpu"] = NonTensorData(4)
        micro_batches, indices = prepare(batch)
        assert indices is None and len(micro_batches) == 2
        micro_batches[0]["adv"].add_(1)
        micro_batches[1]["input_ids"].values().add_(1)
        inputs.append(batch)
    for batch in inputs:
        assert batch["adv"].tolist() == [1, 1, 1, 1, 0, 0, 0, 0]
        assert torch.equal(batch["input_ids"].values(), ids_batch(LENGTHS_8)["input_ids"].values())

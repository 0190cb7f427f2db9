"""Bad input is refused clearly (exact type and message); odd but valid input works."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from tensordict import TensorDict

from seqlen_balancing import (
    calculate_workload,
    get_reverse_idx,
    get_seqlen_balanced_partitions,
    karmarkar_karp,
    plan_micro_batches,
    prepare_micro_batches,
    rearrange_micro_batches,
    restore_dynamic_batch,
)
from seqlen_balancing.batch import lengths as lengths_module

Batch = Callable[..., TensorDict]


#: Needs torch and tensordict: selected out by `-m "not torch"` (see conftest.py).
pytestmark = pytest.mark.torch


@pytest.mark.parametrize(
    ("cap", "error", "fragment"),
    [
        (0, ValueError, "max_token_len must be a positive integer (>= 1), got 0"),
        (-5, ValueError, "max_token_len must be a positive integer (>= 1), got -5"),
        (1.5, TypeError, "max_token_len must be a positive integer, got a value that is not an integer"),
        (math.nan, TypeError, "nan (float)"),
        (True, TypeError, "True (bool)"),
        ("64", TypeError, "'64' (str)"),
        (torch.tensor(64.0), TypeError, "max_token_len must be a positive integer"),
        (torch.tensor([64, 64]), TypeError, "max_token_len must be a positive integer"),
    ],
)
def test_bad_max_token_len(masked_batch: Batch, cap: Any, error: type[Exception], fragment: str) -> None:
    with pytest.raises(error) as info:
        rearrange_micro_batches(masked_batch([3, 4]), cap)
    assert fragment in str(info.value)


def test_tensor_cap_holding_one_integer_is_fine(masked_batch: Batch) -> None:
    _, plan = rearrange_micro_batches(masked_batch([3, 4, 5]), torch.tensor(8))
    assert len(plan) == 2


@pytest.mark.parametrize("name", ["force_group_size", "num_batches_divided_by", "min_num_micro_batch"])
@pytest.mark.parametrize(
    ("value", "error", "fragment"),
    [(0, ValueError, "got 0"), (-2, ValueError, "got -2"), (2.0, TypeError, "2.0 (float)"),
     (False, TypeError, "False (bool)")],
)
def test_bad_integer_arguments(
    masked_batch: Batch, name: str, value: Any, error: type[Exception], fragment: str
) -> None:
    with pytest.raises(error) as info:
        rearrange_micro_batches(masked_batch([3, 4]), 100, **{name: value})
    assert f"{name} must be a positive integer" in str(info.value)
    assert fragment in str(info.value)


def test_batch_without_a_length_source() -> None:
    batch = TensorDict({"input_ids": torch.ones(2, 5, dtype=torch.long)}, batch_size=[2])
    with pytest.raises(ValueError, match="neither an 'attention_mask' nor jagged"):
        rearrange_micro_batches(batch, 10)


def test_mask_must_be_two_dimensional() -> None:
    batch = TensorDict({"attention_mask": torch.ones(2, 5, 3)}, batch_size=[2])
    with pytest.raises(ValueError, match=r"attention_mask must be 2-D .* got a 3-D tensor"):
        rearrange_micro_batches(batch, 100)


def test_mask_rows_must_match_batch_size() -> None:
    batch = TensorDict({"x": torch.zeros(3)}, batch_size=[3])
    batch.set_non_tensor("attention_mask", torch.ones(2, 4))
    with pytest.raises(ValueError, match="attention_mask has 2 rows but the batch has 3 samples"):
        rearrange_micro_batches(batch, 100)


def test_not_a_tensordict() -> None:
    with pytest.raises(TypeError, match="batch must be a TensorDict with a batch dimension"):
        rearrange_micro_batches({"attention_mask": torch.ones(2, 2)}, 10)  # type: ignore[arg-type]


def test_negative_lengths_and_workloads() -> None:
    with pytest.raises(ValueError, match=r"seq_lens\[1\] is -1; lengths must be >= 0"):
        plan_micro_batches([3, -1], 10)
    with pytest.raises(TypeError, match=r"seq_lens\[0\] is not an integer"):
        plan_micro_batches([2.5], 10)  # type: ignore[list-item]
    with pytest.raises(ValueError, match="negative length"):
        calculate_workload(torch.tensor([5, -2]))
    with pytest.raises(ValueError, match=r"seqlen_list\[0\] is 1.5, not a whole number"):
        calculate_workload(torch.tensor([1.5]))
    with pytest.raises(ValueError, match=r"seqlen_list\[0\] is -7"):
        get_seqlen_balanced_partitions([-7, 1], 1, equal_size=False)


def test_reverse_index_and_restore_reject_non_permutations() -> None:
    with pytest.raises(ValueError, match="not a permutation of range"):
        get_reverse_idx([1, 1, 0])
    with pytest.raises(ValueError, match="index 0 appears at positions 0 and 1"):
        restore_dynamic_batch(torch.arange(2), [[0], [0]])
    with pytest.raises(ValueError, match="holds 3 indices but data has 2 rows"):
        restore_dynamic_batch(torch.arange(2), [[0, 1], [2]])


# Odd but valid input.
@pytest.mark.parametrize("dtype", [torch.bool, torch.int32, torch.float32, torch.float16])
def test_mask_dtypes_and_holes(dtype: torch.dtype) -> None:
    mask = torch.tensor(
        [[1, 0, 1, 0, 1, 1], [0, 0, 0, 0, 1, 1], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0]]
    ).to(dtype)
    _, plan = rearrange_micro_batches(TensorDict({"attention_mask": mask}, [4]), 6)
    # effective lengths 4, 2, 6, 0: two micro-batches of at most 6 tokens
    sums = sorted(sum([4, 2, 6, 0][i] for i in part) for part in plan)
    assert sums == [6, 6]


def test_one_sample(masked_batch: Batch) -> None:
    micro_batches, plan = rearrange_micro_batches(masked_batch([5]), 5)
    assert plan == [[0]] and micro_batches[0]["attention_mask"].sum() == 5


def test_zero_length_rows_ride_along(masked_batch: Batch) -> None:
    _, plan = rearrange_micro_batches(masked_batch([0, 8, 0, 8]), 8)
    assert len(plan) == 2
    assert sorted(i for part in plan for i in part) == [0, 1, 2, 3]


def test_lengths_read_with_one_host_copy(
    masked_batch: Batch, jagged_batch: Batch, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Device-to-host syncs, counted on the CPU: `.tolist()`, `.item()`, `int()`, `bool()`.

    A GPU batch pays one copy of the lengths; cutting the micro-batches adds none per
    micro-batch or element (jagged gather indices are built from host-side offsets).
    """
    calls: list[str] = []
    for name in ("tolist", "item", "__int__", "__bool__", "__index__"):
        original = getattr(torch.Tensor, name)

        def counted(self: torch.Tensor, *args: Any, _name: str = name, _original: Any = original) -> Any:
            if self.dim() == 0 or _name == "tolist":
                calls.append(_name)
            return _original(self, *args)

        monkeypatch.setattr(torch.Tensor, name, counted)
    dense = masked_batch([5, 9, 3, 7, 2, 8, 6, 4] * 8)
    calls.clear()
    micro_batches, _ = rearrange_micro_batches(dense, 16)
    assert len(micro_batches) > 10
    assert calls == []  # a CPU mask is counted by numpy in place: no copy at all
    # A mask numpy cannot read (a GPU's) is counted by torch: one copy of the counts.
    monkeypatch.setattr(lengths_module, "_NUMPY_DTYPES", frozenset())
    calls.clear()
    micro_batches, _ = rearrange_micro_batches(dense, 16)
    assert len(micro_batches) > 10
    assert calls == ["tolist"]
    jagged = jagged_batch([5, 9, 3, 7, 2, 8, 6, 4] * 8)
    calls.clear()
    micro_batches, _ = rearrange_micro_batches(jagged, 16)
    assert len(micro_batches) > 10
    assert calls == ["tolist"]


# Found by adversarial testing.
def test_jagged_rows_with_holes_count_their_real_lengths() -> None:
    padded = torch.arange(64).reshape(4, 16)
    ids = torch.nested.narrow(
        padded, 1, torch.zeros(4, dtype=torch.long), torch.tensor([3, 4, 2, 5]), layout=torch.jagged
    )
    micro_batches, plan = rearrange_micro_batches(TensorDict({"input_ids": ids}, [4]), 7)
    sizes = [[len(row) for row in mb["input_ids"].unbind()] for mb in micro_batches]
    # verl's order: the heavier micro-batch (2**2 + 5**2 > 3**2 + 4**2) first.
    assert plan == [[2, 3], [0, 1]] and sizes == [[2, 5], [3, 4]]
    overlapping = torch.nested.nested_tensor_from_jagged(
        torch.arange(6), torch.tensor([0, 1, 2]), lengths=torch.tensor([5, 1])
    )
    with pytest.raises(ValueError, match="sample 0 has 5 tokens, which exceeds max_token_len=2"):
        rearrange_micro_batches(TensorDict({"input_ids": overlapping}, [2]), 2)


def test_strided_nested_tensors_keep_their_layout() -> None:
    rows = [torch.ones(2, 3), torch.ones(1, 4), torch.ones(3, 2)]
    batch = TensorDict({"attention_mask": torch.ones(3, 2), "extra": torch.nested.nested_tensor(rows)}, [3])
    micro_batches, plan = rearrange_micro_batches(batch, 2)
    assert len(plan) == 3
    assert all(mb["extra"].layout == torch.strided and mb["extra"].is_nested for mb in micro_batches)
    joined = torch.nested.as_nested_tensor([r for mb in micro_batches for r in mb["extra"].unbind()])
    restored = restore_dynamic_batch(joined, plan)
    assert restored.layout == torch.strided
    assert [tuple(r.shape) for r in restored.unbind()] == [(2, 3), (1, 4), (3, 2)]


def test_calculate_workload_range() -> None:
    assert calculate_workload([]).dtype == torch.int64
    with pytest.raises(ValueError, match="overflows int64 above 3036988212 tokens"):
        calculate_workload([3036988213])
    assert calculate_workload([3036988212]).item() == 24576 * 3036988212 + 3036988212**2
    with pytest.raises(TypeError, match="seqlen_list must be a tensor or list"):
        calculate_workload(None)  # type: ignore[arg-type]


def test_restore_refuses_non_tensors_and_non_integer_indices() -> None:
    with pytest.raises(TypeError, match=r"a TensorDict or a list of them, got str"):
        restore_dynamic_batch("12", [[0, 1]])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"micro-batch 0: output must be a torch\.Tensor or a TensorDict"):
        restore_dynamic_batch([1, 2], [[0], [1]])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="got a 0-d tensor"):
        restore_dynamic_batch(torch.tensor(3), [[0]])
    with pytest.raises(TypeError, match=r"must be an integer, got 1.7 \(float\)"):
        restore_dynamic_batch(torch.arange(2), [[1.7], [0]])  # type: ignore[list-item]


def test_prepare_micro_batches_names_missing_and_bad_settings(masked_batch: Batch) -> None:
    from tensordict import NonTensorData

    from seqlen_balancing import prepare_micro_batches

    batch = masked_batch([3, 4])
    with pytest.raises(ValueError, match="the batch has no 'max_token_len_per_gpu' setting"):
        prepare_micro_batches(batch)
    batch["max_token_len_per_gpu"] = NonTensorData(8)
    batch["sp_size"] = NonTensorData(0)
    with pytest.raises(ValueError, match=r"sp_size must be a positive integer \(>= 1\), got 0"):
        prepare_micro_batches(batch)
    batch["sp_size"] = NonTensorData(1)
    batch["use_dynamic_bsz"] = NonTensorData("False")
    with pytest.raises(TypeError, match="use_dynamic_bsz must be a bool"):
        prepare_micro_batches(batch)


# Issue 10: every malformed input of the gloo fuzz catalogue, planned locally.
def _load_catalogue() -> Any:
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "distributed" / "_malformed.py"
    spec = importlib.util.spec_from_file_location("_seqlen_balancing_malformed_local", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


CATALOGUE = _load_catalogue()


@pytest.mark.parametrize("kind", CATALOGUE.KINDS, ids=lambda kind: kind.name)
@pytest.mark.parametrize("dp_group", [None, "a group, but torch.distributed is not initialised"])
def test_malformed_input_raises_only_type_or_value_error_locally(kind: Any, dp_group: Any) -> None:
    """Without agreement (dp_group=None, or a group while torch.distributed is down, as
    verl 0.9.1 decides) the faulty input alone raises the catalogue's exception type and
    message, with no rank prefix; inputs that are only wrong next to a peer plan fine."""
    import random

    entry = kind.build(True, random.Random(7))
    if kind.local_error is None:
        CATALOGUE.call(entry, dp_group=dp_group)
        return
    with pytest.raises((TypeError, ValueError)) as info:
        CATALOGUE.call(entry, dp_group=dp_group)
    error, fragment = kind.alone or (kind.error, kind.fragment)
    assert type(info.value).__name__ == error
    assert fragment in str(info.value)
    assert not str(info.value).startswith("rank ")


def test_catalogue_valid_inputs_plan_locally() -> None:
    import random

    for kind in CATALOGUE.KINDS:
        for seed in range(3):
            CATALOGUE.call(kind.build(False, random.Random(seed)))


@pytest.mark.parametrize(
    ("value", "shown"),
    [(-(2**70), f"got {-(2**70)}"), (-(2**75), f"got {-(2**75)}"),
     (-(2**80), f"got {-(2**80)}")],
)
def test_values_beyond_int64_are_reported_as_given_or_out_of_range(
    masked_batch: Batch, value: int, shown: str
) -> None:
    from seqlen_balancing import plan_data_parallel

    with pytest.raises(ValueError, match="max_token_len must be") as info:
        rearrange_micro_batches(masked_batch([3, 4]), value)
    assert str(info.value) == f"max_token_len must be a positive integer (>= 1), {shown}"
    # Through the agreement, the same text (prefixed with the rank at fault).
    with pytest.raises(ValueError, match=r"^rank 0 of the DP group: ") as agreed:
        plan_data_parallel([[3], [4]], value)
    assert str(agreed.value) == f"rank 0 of the DP group: {info.value}"


def test_errors_cross_the_agreement_whole() -> None:
    from seqlen_balancing.agreement import combine, decode, encode, needs_reports, report
    from seqlen_balancing.errors import NotDivisible, SampleOverCap
    from seqlen_balancing.planning.planner import RankAnalysis, analyse

    big = 2**90  # no integer coding: any value arrives as the rank at fault states it
    error = SampleOverCap(big, 2**63, 2**62 + 1, 1, big, big, 1, 1, False)
    ranks = [analyse([1, 2], 10), RankAnalysis(error)]
    reduced = combine([encode(a, r) for r, a in enumerate(ranks)])
    assert needs_reports(reduced)
    count, decoded, rank = decode(reduced, 1, [report(a) for a in ranks], lambda r: r + 40)
    assert (count, rank) == (0, 1)
    assert decoded is not None
    assert decoded.message().startswith(
        f"rank 1 of the DP group (global rank 41): sample {2**63} has {big} tokens"
    )
    assert NotDivisible(2**76, 2).message().startswith(f"batch size {2**76} is not divisible by")


def test_static_path_errors_locally(masked_batch: Batch) -> None:
    from tensordict import NonTensorData

    from seqlen_balancing import prepare_micro_batches

    batch = masked_batch([3] * 7)
    batch["use_dynamic_bsz"] = NonTensorData(False)
    batch["micro_batch_size_per_gpu"] = NonTensorData(2)
    with pytest.raises(ValueError, match="batch size 7") as info:
        prepare_micro_batches(batch)
    assert str(info.value) == (
        "batch size 7 is not a positive multiple of micro_batch_size_per_gpu * force_group_size "
        "= 2 * 1; change micro_batch_size_per_gpu or the batch size"
    )
    batch = masked_batch([3] * 6)
    batch["use_dynamic_bsz"] = NonTensorData(False)
    batch["micro_batch_size_per_gpu"] = NonTensorData(3)
    micro_batches, indices = prepare_micro_batches(batch, dp_group=None)
    assert indices is None
    assert [mb["input_ids"][:, 0].tolist() for mb in micro_batches] == [[0, 6, 12], [18, 24, 30]]


def test_mode_and_static_count_are_part_of_the_agreed_vector() -> None:
    """The rule, worked by hand: MAX over the vectors of a static rank 0 (count 4), a static
    rank 1 (count 3) and, separately, a dynamic rank."""
    from seqlen_balancing.agreement import combine, decode, encode, report
    from seqlen_balancing.planning.planner import RankAnalysis, analyse

    static = RankAnalysis(None)
    global_of = {0: 10, 1: 11, 2: 12}.__getitem__
    count, error, rank = decode(combine([encode(static, 0, 4), encode(static, 1, 4)]), global_rank=global_of)
    assert (count, error, rank) == (4, None, None)
    _, error, rank = decode(combine([encode(static, 0, 4), encode(static, 1, 3)]), global_rank=global_of)
    assert rank is None and error is not None
    assert str(error.exception()) == (
        "the ranks of the DP group would run different numbers of static micro-batches: "
        "rank 0 (global rank 10) has 4 and rank 1 (global rank 11) has 3; give every rank the "
        "same batch size (use_dynamic_bsz=False cuts batch size / (micro_batch_size_per_gpu * "
        "force_group_size) micro-batches)"
    )
    dynamic = analyse([5] * 8, 16)
    vectors = [encode(dynamic, 0), encode(static, 1, 4), encode(dynamic, 2)]
    _, error, rank = decode(combine(vectors), global_rank=global_of)
    assert rank is None and error is not None
    assert str(error.exception()).startswith(
        "the ranks of the DP group disagree on use_dynamic_bsz: rank 1 (global rank 11) cuts "
        "its batch statically (use_dynamic_bsz=False) but rank 0 (global rank 10) dynamically"
    )
    # An input error outranks the mode: the lowest rank at fault is named.
    failing = analyse([5, 20], 16)
    vectors[2] = encode(failing, 2)
    reports = [report(dynamic), report(static, 4), report(failing)]  # the vector asks for them
    _, error, rank = decode(combine(vectors), reports=reports, global_rank=global_of)
    assert rank == 2 and error is not None
    assert str(error.exception()).startswith(
        "rank 2 of the DP group (global rank 12): sample 1 has 20 tokens, which exceeds "
        "max_token_len=16"
    )


# ---------------------------------------------------------------------------------------
# Fixes from adversarial testing
# ---------------------------------------------------------------------------------------


def _non_tensor_batch(n: int) -> TensorDict:
    from tensordict import NonTensorData, NonTensorStack

    mask = torch.zeros(n, 8, dtype=torch.long)
    for row in range(n):
        mask[row, : 1 + (row * 5) % 8] = 1
    sub = TensorDict({"names": NonTensorStack(*[NonTensorData(f"n{i}") for i in range(n)]),
                      "score": torch.arange(n) * 10}, batch_size=[n])
    return TensorDict({"attention_mask": mask,
                       "uid": NonTensorStack(*[NonTensorData(f"u{i}") for i in range(n)]),
                       "tag": NonTensorData("run1"), "sub": sub}, batch_size=[n])


def _plain(value: Any) -> Any:
    """A non-tensor entry as plain Python data: the object of a scalar NonTensorData, the
    list of a NonTensorStack's rows."""
    from tensordict import NonTensorData, NonTensorStack

    if isinstance(value, NonTensorData):
        return value.data
    return value.tolist() if isinstance(value, NonTensorStack) else None


def test_restore_list_of_tensordicts_keeps_non_tensor_entries() -> None:
    batch = _non_tensor_batch(7)
    micro_batches, plan = rearrange_micro_batches(batch, max_token_len=10)
    assert len(plan) > 1 and sorted(i for part in plan for i in part) == list(range(7))
    restored = restore_dynamic_batch(micro_batches, plan)
    # The oracle: the input's own rows, in input order.
    assert _plain(restored.get("uid")) == [f"u{i}" for i in range(7)]
    assert _plain(restored.get(("sub", "names"))) == [f"n{i}" for i in range(7)]
    assert _plain(restored.get("tag")) == "run1"
    assert restored[("sub", "score")].tolist() == [10 * i for i in range(7)]
    assert torch.equal(restored["attention_mask"], batch["attention_mask"])
    # The concatenated form restores them too.
    joined = restore_dynamic_batch(torch.cat(micro_batches), plan)  # type: ignore[arg-type]
    assert _plain(joined.get("uid")) == [f"u{i}" for i in range(7)]


def _meta_jagged(lengths: list[int]) -> torch.Tensor:
    return torch.nested.nested_tensor(
        [torch.ones(k, device="meta") for k in lengths], layout=torch.jagged
    )


@pytest.mark.parametrize("key", ["extra", ("sub", "extra")])
def test_meta_jagged_entry_is_refused_before_cutting(masked_batch: Batch, key: Any) -> None:
    from tensordict import NonTensorData

    batch = masked_batch([3, 4, 5])
    batch.set(key, _meta_jagged([2, 3, 1]))
    name = key if isinstance(key, str) else ".".join(key)
    fragment = f"entry '{name}' is on the meta device"
    with pytest.raises(ValueError, match=fragment):
        rearrange_micro_batches(batch, 8)
    # The static path of prepare_micro_batches cuts the same way: the same check.
    batch["use_dynamic_bsz"] = NonTensorData(False)
    batch["micro_batch_size_per_gpu"] = NonTensorData(1)
    with pytest.raises(ValueError, match=fragment):
        prepare_micro_batches(batch)


def test_unreadable_jagged_offsets_are_an_error_naming_the_key(
    masked_batch: Batch, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = masked_batch([3, 4, 5])
    batch["extra"] = torch.nested.nested_tensor([torch.ones(k) for k in [2, 3, 1]], layout=torch.jagged)

    def refuse(self: torch.Tensor) -> Any:
        raise RuntimeError("device lost")

    monkeypatch.setattr(type(batch["extra"]), "offsets", refuse)  # the jagged tensor class
    with pytest.raises(ValueError, match="entry 'extra' could not be read") as info:
        rearrange_micro_batches(batch, 8)
    assert isinstance(info.value.__cause__, RuntimeError)


def test_long_and_nested_keys_are_named_whole() -> None:
    from seqlen_balancing.errors import EntryOnMeta

    long_key = ("a" * 30, "é" * 10)
    error = EntryOnMeta(long_key)  # type: ignore[arg-type]  # a nested key, as TensorDict gives it
    assert f"entry '{'a' * 30}.{'é' * 10}' is on the meta device" in error.message()
    assert "entry 'x' is on the meta device" in EntryOnMeta("x").message()


def test_calculate_workload_refuses_unreadable_and_reports_true_values() -> None:
    for meta in (torch.ones(3, device="meta"), torch.ones(3, dtype=torch.long, device="meta")):
        with pytest.raises(TypeError, match="seqlen_list cannot be read"):
            calculate_workload(meta)
    big = 2**63 + 5
    with pytest.raises(ValueError, match=f"holds a length of {big} tokens"):
        calculate_workload(torch.tensor([7, big, 2**63 + 1], dtype=torch.uint64))
    for lengths, value in (([2**70], 2**70), ([3, 2**64 + 1], 2**64 + 1)):
        with pytest.raises(ValueError, match=f"holds a length of {value} tokens; the workload overflows"):
            calculate_workload(lengths)
    with pytest.raises(ValueError, match=r"seqlen_list\[1\] is -1267650600228229401496703205376"):
        calculate_workload([4, -(2**100)])
    fits = torch.tensor([3, 2**31 + 7], dtype=torch.uint64)
    assert calculate_workload(fits).tolist() == [24576 * 3 + 9, 24576 * (2**31 + 7) + (2**31 + 7) ** 2]
    with pytest.raises(ValueError, match=f"holds a length of {2**70} tokens"):
        calculate_workload(2**70)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.uint16, torch.uint32, torch.uint64])
def test_unsigned_masks_count_non_zero_entries(dtype: torch.dtype) -> None:
    rows = [[1, 1, 1, 1, 1, 0], [0, 7, 7, 0, 0, 0], [1, 0, 1, 0, 1, 0], [0, 0, 0, 0, 0, 200]]
    mask = torch.tensor(rows, dtype=torch.int64).to(dtype)  # any non-zero value counts once
    lengths = [int((row != 0).sum()) for row in mask.to(torch.int64)]  # the oracle
    assert lengths == [5, 2, 3, 1]
    from seqlen_balancing import effective_lengths

    assert effective_lengths(TensorDict({"attention_mask": mask}, batch_size=[4])) == (None, lengths)
    _, plan = rearrange_micro_batches(TensorDict({"attention_mask": mask}, batch_size=[4]), 6)
    assert all(sum(lengths[i] for i in part) <= 6 for part in plan)
    assert len(plan) == 2


# ---------------------------------------------------------------------------------------
# Issue 20: nothing raises after the agreement, nothing escapes as the wrong type. The
# 2-rank versions of cases 1, 2, 3 and 6 are in distributed/test_agreement.py (the poison
# suite); every entry kind, in one process, in test_poisoned.py.
# ---------------------------------------------------------------------------------------


def test_issue20_case1_sparse_entries_are_cut_by_rows(masked_batch: Batch) -> None:
    batch = masked_batch([3, 4, 5, 2, 1, 6])
    dense = torch.arange(30.0).reshape(6, 5) % 4
    batch["coo"] = dense.to_sparse()
    batch["csr"] = dense.to_sparse_csr()
    micro_batches, plan = rearrange_micro_batches(batch, 6)
    assert len(plan) == 4
    for micro_batch, part in zip(micro_batches, plan, strict=True):
        assert micro_batch["coo"].layout == torch.sparse_coo
        assert micro_batch["csr"].layout == torch.sparse_csr
        assert torch.equal(micro_batch["coo"].to_dense(), dense[part])
        assert torch.equal(micro_batch["csr"].to_dense(), dense[part])
    restored = restore_dynamic_batch(micro_batches, plan)
    assert restored["csr"].layout == torch.sparse_csr
    assert torch.equal(restored["coo"].to_dense(), dense)


def test_issue20_case1_block_sparse_is_refused_naming_the_key(masked_batch: Batch) -> None:
    batch = masked_batch([3, 4, 5, 2])
    batch["blocks"] = torch.ones(4, 4).to_sparse_bsr((2, 2))
    with pytest.raises(TypeError, match="entry 'blocks' has a tensor layout whose rows cannot be picked"):
        rearrange_micro_batches(batch, 6)


def test_issue20_case2_lazy_stack_with_ragged_rows_is_cut_row_by_row() -> None:
    from tensordict import LazyStackedTensorDict

    rows = [
        TensorDict({"attention_mask": torch.ones(n, dtype=torch.long), "x": torch.arange(float(n))}, [])
        for n in (3, 5, 2, 4)
    ]
    batch = LazyStackedTensorDict.lazy_stack(rows, 0)
    micro_batches, plan = rearrange_micro_batches(batch, 7)
    assert sorted(sorted(part) for part in plan) == [[0, 3], [1, 2]]
    for micro_batch, part in zip(micro_batches, plan, strict=True):
        assert [row["x"].tolist() for row in micro_batch.tensordicts] == [rows[i]["x"].tolist() for i in part]
    given = [list(map(float, range(n))) for n in (3, 5, 2, 4)]
    restored = restore_dynamic_batch(micro_batches, plan)
    assert [row["x"].tolist() for row in restored.tensordicts] == given
    micro_batches[0].tensordicts[0]["x"].add_(1)  # copies: the input is not written
    assert [row["x"].tolist() for row in rows] == given


@pytest.mark.parametrize("payload", ["array", "tensor"])
def test_issue20_case3_restore_undoes_the_cut_of_non_tensor_data(masked_batch: Batch, payload: str) -> None:
    import numpy as np
    from tensordict import NonTensorData

    batch = masked_batch([3, 4, 5, 2, 1, 6])
    batch["meta"] = NonTensorData(np.array([1, 2]) if payload == "array" else torch.tensor([1, 2]))
    micro_batches, idx = rearrange_micro_batches(batch, 6)
    restored = restore_dynamic_batch(micro_batches, idx)
    assert list(restored["meta"]) == [1, 2]
    assert type(restored.get("meta").data) is type(batch.get("meta").data)
    assert torch.equal(restored["attention_mask"], batch["attention_mask"])


def test_issue20_case4_restore_raises_value_error_for_mismatched_outputs() -> None:
    first = torch.nested.nested_tensor([torch.ones(2, 3), torch.ones(3, 3)], layout=torch.jagged)
    wider = torch.nested.nested_tensor([torch.ones(2, 4)], layout=torch.jagged)
    with pytest.raises(ValueError, match=r"micro-batch 1: jagged output rows have the fixed dimensions \[4\] "
                                         r"but micro-batch 0's have \[3\]"):
        restore_dynamic_batch([first, wider], [[0, 1], [2]])
    with pytest.raises(ValueError, match="micro-batch 1: output is on meta but micro-batch 0's is on cpu"):
        restore_dynamic_batch([torch.ones(2), torch.ones(1, device="meta")], [[0, 1], [2]])
    on_meta = torch.nested.nested_tensor([torch.ones(2, 3)], layout=torch.jagged).to("meta")
    with pytest.raises(ValueError, match="micro-batch 1: output is on meta"):
        restore_dynamic_batch([first, on_meta], [[0, 1], [2]])


def _switch_calls() -> list[tuple[str, Callable[[Any], Any]]]:
    from seqlen_balancing import greedy_partition, plan_data_parallel

    return [
        ("equal_size", lambda flag: karmarkar_karp([1, 2, 3, 4], 2, flag)),
        ("equal_size", lambda flag: greedy_partition([1, 2, 3, 4], 2, flag)),
        ("equal_size", lambda flag: get_seqlen_balanced_partitions([1, 2, 3, 4], 2, flag)),
        ("use_dynamic_bsz_balance",
         lambda flag: plan_micro_batches([1, 2, 3], 5, use_dynamic_bsz_balance=flag)),
        ("same_micro_num_in_dp", lambda flag: plan_data_parallel([[1, 2]], 5, same_micro_num_in_dp=flag)),
        ("use_dynamic_bsz_balance",
         lambda flag: plan_data_parallel([[1, 2]], 5, use_dynamic_bsz_balance=flag)),
    ]


@pytest.mark.parametrize("flag", ["False", torch.tensor([True, False]), None, 2, 0.0],
                         ids=["str", "two_element_tensor", "none", "two", "float"])
@pytest.mark.parametrize("call", range(6), ids=lambda i: f"call{i}")
def test_issue20_case5_list_api_flags_are_checked_like_rearrange(call: int, flag: Any) -> None:
    name, run = _switch_calls()[call]
    with pytest.raises(TypeError, match=f"{name} must be a bool \\(or 0/1\\), got "):
        run(flag)


@pytest.mark.parametrize("flag", [True, False, 1, 0, torch.tensor(True)])
def test_issue20_case5_bools_and_0_1_are_switches(flag: Any) -> None:
    assert sorted(map(sorted, karmarkar_karp([4, 1, 3, 2], 2, flag))) == [[0, 1], [2, 3]]


def test_issue20_case5_ceildiv_takes_integers_only() -> None:
    from seqlen_balancing import ceildiv, roundup_divisible

    with pytest.raises(TypeError, match=r"ceildiv: b must be an integer, got tensor\(\[8, 9\]\)"):
        ceildiv(7, torch.tensor([8, 9]))
    with pytest.raises(TypeError, match="roundup_divisible: a must be an integer, got '7'"):
        roundup_divisible("7", 2)  # type: ignore[arg-type]
    assert ceildiv(7, torch.tensor(2)) == 4 and type(ceildiv(7, torch.tensor(2))) is int


def test_issue20_case6_dataproto_parts_are_checked_before_the_agreement() -> None:
    import numpy as np

    catalogue = CATALOGUE
    pairs = catalogue.proto([3, 4, 5])
    pairs.non_tensor_batch = [("uid", np.arange(3))]
    with pytest.raises(TypeError, match=r"DataProto-like.*\(non_tensor_batch is a list, not a dict\)"):
        catalogue.call(catalogue.dynamic(pairs))
    uncopyable = catalogue.proto([3, 4, 5])
    uncopyable.meta_info = {"lock": __import__("threading").Lock()}
    with pytest.raises(TypeError, match="meta_info cannot be deep-copied"):
        catalogue.call(catalogue.dynamic(uncopyable))


def test_issue20_case8_static_micro_batches_are_views_as_in_verl(masked_batch: Batch) -> None:
    from tensordict import NonTensorData

    batch = masked_batch([3, 4, 5, 2, 1, 6, 2, 2])
    batch["adv"] = torch.zeros(8)
    batch["use_dynamic_bsz"] = NonTensorData(False)
    batch["micro_batch_size_per_gpu"] = NonTensorData(4)
    micro_batches, indices = prepare_micro_batches(batch)
    assert indices is None and [len(mb) for mb in micro_batches] == [4, 4]
    micro_batches[0]["adv"].add_(1)
    assert batch["adv"].tolist() == [1, 1, 1, 1, 0, 0, 0, 0]


def test_issue20_restore_names_an_entry_of_mixed_kinds() -> None:
    from tensordict import NonTensorData

    first = TensorDict({"a": torch.zeros(2, 3), "x": torch.zeros(2)}, [2])
    second = TensorDict({"a": torch.ones(1, 3)}, [1])
    second["x"] = NonTensorData("text")
    with pytest.raises(ValueError, match="entry 'x' is a tensor or a TensorDict in some micro-batch outputs"):
        restore_dynamic_batch([first, second], [[0, 2], [1]])
    second["x"] = TensorDict({"y": torch.zeros(1)}, [1])
    with pytest.raises(ValueError, match="entry 'x' is a tensor or a TensorDict in some micro-batch outputs"):
        restore_dynamic_batch([first, second], [[0, 2], [1]])

"""rearrange_micro_batches / prepare_* / restore on TensorDicts: the core library cases."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict

from seqlen_balancing import (
    calculate_workload,
    get_reverse_idx,
    prepare_dynamic_batch,
    prepare_micro_batches,
    rearrange_micro_batches,
    restore_dynamic_batch,
)

Batch = Callable[..., TensorDict]


#: Needs torch and tensordict: selected out by `-m "not torch"` (see conftest.py).
pytestmark = pytest.mark.torch


def token_sums(lengths: list[int], plan: list[list[int]]) -> list[int]:
    return [sum(lengths[i] for i in part) for part in plan]


def check_plan(lengths: list[int], plan: list[list[int]], cap: int) -> None:
    assert sorted(i for part in plan for i in part) == list(range(len(lengths)))
    assert all(part for part in plan)
    assert all(part == sorted(part) for part in plan)
    assert max(token_sums(lengths, plan)) <= cap


# Case 1 and 2: the cap is a hard bound, the count grows past ceil(total / cap).
def test_eight_samples_of_seven_at_cap_eight(masked_batch: Batch) -> None:
    micro_batches, plan = rearrange_micro_batches(masked_batch([7] * 8), max_token_len=8)
    assert len(micro_batches) == 8
    check_plan([7] * 8, plan, 8)


def test_sixteen_long_samples_need_sixteen_micro_batches(masked_batch: Batch) -> None:
    lengths = [30720] * 16
    micro_batches, plan = rearrange_micro_batches(masked_batch(lengths), max_token_len=32768)
    assert len(plan) == 16
    assert [int(mb["attention_mask"].sum()) for mb in micro_batches] == [30720] * 16


# Case 3: effective lengths, never the padded width.
@pytest.mark.parametrize("left_pad", [False, True])
def test_padded_width_does_not_count(masked_batch: Batch, left_pad: bool) -> None:
    batch = masked_batch([1000, 2000, 3000], width=40960, left_pad=left_pad)
    _, plan = rearrange_micro_batches(batch, max_token_len=16384)
    assert plan == [[0, 1, 2]]


def test_jagged_lengths_are_row_lengths(jagged_batch: Batch) -> None:
    _, plan = rearrange_micro_batches(jagged_batch([1000, 2000, 3000]), max_token_len=16384)
    assert plan == [[0, 1, 2]]


def test_effective_length_over_cap_by_one_token(masked_batch: Batch) -> None:
    with pytest.raises(ValueError, match=r"sample 0 has 16385 tokens, which exceeds max_token_len=16384"):
        rearrange_micro_batches(masked_batch([16385], width=40960), max_token_len=16384)


# Case 4.
def test_single_sample_over_cap_names_length_and_cap(masked_batch: Batch) -> None:
    with pytest.raises(ValueError, match="exceeds max_token_len") as info:
        rearrange_micro_batches(masked_batch([21]), max_token_len=20)
    assert "21 tokens" in str(info.value) and "max_token_len=20" in str(info.value)


def test_sample_equal_to_cap_fits(masked_batch: Batch) -> None:
    assert rearrange_micro_batches(masked_batch([20]), max_token_len=20)[1] == [[0]]


def test_oversized_sample_in_the_middle_names_its_index(masked_batch: Batch) -> None:
    with pytest.raises(ValueError, match=r"sample 1 has 21 tokens, which exceeds max_token_len"):
        rearrange_micro_batches(masked_batch([5, 21, 3]), max_token_len=20)


# Case 5: forced groups.
GROUP_LENGTHS = [50, 60, 80, 90, 40, 45, 100, 110]


def test_forced_group_over_cap(masked_batch: Batch) -> None:
    with pytest.raises(ValueError, match="forced group exceeds max_token_len") as info:
        rearrange_micro_batches(masked_batch(GROUP_LENGTHS), 200, force_group_size=2)
    assert "210 tokens" in str(info.value) and "sample 6" in str(info.value)


def test_forced_groups_stay_together(masked_batch: Batch) -> None:
    _, plan = rearrange_micro_batches(masked_batch(GROUP_LENGTHS), 210, force_group_size=2)
    check_plan(GROUP_LENGTHS, plan, 210)
    for pair_start in range(0, 8, 2):
        owner = [part for part in plan if pair_start in part]
        assert pair_start + 1 in owner[0]


def test_batch_not_divisible_by_force_group_size(masked_batch: Batch) -> None:
    with pytest.raises(ValueError, match="batch size 6 is not divisible by force_group_size=4"):
        rearrange_micro_batches(masked_batch([1] * 6), 100, force_group_size=4)


# Case 6: int32 lengths and overflow-free workloads.
def test_int32_lengths_give_three_micro_batches() -> None:
    lengths = [39232, 15315, 39232, 15315]
    mask = torch.zeros(4, 40000, dtype=torch.int32)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    _, plan = rearrange_micro_batches(TensorDict({"attention_mask": mask}, [4]), 40000)
    assert len(plan) == 3
    assert sorted(token_sums(lengths, plan)) == [30630, 39232, 39232]


# Issue 9, case 3: a float tensor in, verl's float tensor out.
def test_calculate_workload_of_a_float_tensor_is_verls_float_tensor() -> None:
    lengths = torch.Tensor([5.0, 7.0])
    work = calculate_workload(lengths)
    assert work.dtype == torch.float32
    assert torch.equal(work, torch.tensor([24576.0 * 5 + 25, 24576.0 * 7 + 49]))
    big = torch.tensor([3000.0, 70001.0], dtype=torch.float32)
    # Computed in float32, as verl computes it (rounded where float32 must round).
    assert torch.equal(calculate_workload(big), 24576 * big + big**2)
    assert calculate_workload(np.array([5, 7])).tolist() == [122905, 172081]
    assert calculate_workload(np.float32(5.0)) == np.float32(122905.0)
    with pytest.raises(ValueError, match=r"seqlen_list\[1\] is 2.5, not a whole number"):
        calculate_workload(torch.tensor([1.0, 2.5]))


def test_calculate_workload_is_int64_without_overflow() -> None:
    big = torch.tensor([2**31 - 1, 46341, 7], dtype=torch.int32)
    work = calculate_workload(big)
    assert work.dtype == torch.int64
    expected = [24576 * s + s * s for s in (2**31 - 1, 46341, 7)]
    assert work.tolist() == expected


# Case 7: num_batches_divided_by rounds up, never down.
@pytest.mark.parametrize(
    ("lengths", "cap", "divisor", "expected"),
    [([100] * 8, 250, 3, 6), ([50] * 10, 110, 4, 8), ([7] * 8, 8, 4, 8)],
)
def test_count_rounds_up_to_divisor(
    masked_batch: Batch, lengths: list[int], cap: int, divisor: int, expected: int
) -> None:
    _, plan = rearrange_micro_batches(masked_batch(lengths), cap, num_batches_divided_by=divisor)
    assert len(plan) == expected
    check_plan(lengths, plan, cap)


@pytest.mark.parametrize(
    ("lengths", "cap", "divisor", "fragment"),
    [
        ([100] * 5, 110, 4, "8 micro-batches are needed but only 5 samples"),
        ([7] * 8, 8, 3, "9 micro-batches are needed but only 8 samples"),
    ],
)
def test_divisor_beyond_sample_count_is_an_error(
    masked_batch: Batch, lengths: list[int], cap: int, divisor: int, fragment: str
) -> None:
    with pytest.raises(ValueError, match=fragment):
        rearrange_micro_batches(masked_batch(lengths), cap, num_batches_divided_by=divisor)


# Case 8: min_num_micro_batch.
@pytest.mark.parametrize("minimum", [2, 3])
def test_min_num_micro_batch(masked_batch: Batch, minimum: int) -> None:
    _, plan = rearrange_micro_batches(masked_batch([10, 20, 30]), 1000, min_num_micro_batch=minimum)
    assert len(plan) == minimum
    check_plan([10, 20, 30], plan, 1000)


def test_min_num_micro_batch_above_samples(masked_batch: Batch) -> None:
    with pytest.raises(ValueError, match="min_num_micro_batch=4 asks for more micro-batches than the 3"):
        rearrange_micro_batches(masked_batch([10, 20, 30]), 1000, min_num_micro_batch=4)


# Case 10: zero lengths and empty batches.
def test_all_zero_lengths_make_one_micro_batch(masked_batch: Batch) -> None:
    assert rearrange_micro_batches(masked_batch([0, 0, 0]), 8)[1] == [[0, 1, 2]]


def test_batch_without_rows(masked_batch: Batch) -> None:
    with pytest.raises(ValueError, match="the batch has no samples"):
        rearrange_micro_batches(masked_batch([]), 8)


# Case 11: prepare_micro_batches reads its settings from the TensorDict.
def jagged_with_settings(jagged_batch: Batch, **settings: Any) -> TensorDict:
    batch = jagged_batch([3, 5, 2, 7])
    for key, value in settings.items():
        batch[key] = NonTensorData(value)
    return batch


def test_prepare_micro_batches_dynamic(jagged_batch: Batch) -> None:
    micro_batches, plan = prepare_micro_batches(
        jagged_with_settings(jagged_batch, max_token_len_per_gpu=8)
    )
    assert plan is not None and len(plan) == 3
    check_plan([3, 5, 2, 7], plan, 8)
    # Scalar settings survive unchanged; jagged rows are indexed row by row.
    for micro_batch, indices in zip(micro_batches, plan, strict=True):
        assert micro_batch["max_token_len_per_gpu"] == 8
        assert micro_batch["input_ids"].offsets().diff().tolist() == [[3, 5, 2, 7][i] for i in indices]


def test_prepare_micro_batches_budget_is_per_gpu_times_sp(jagged_batch: Batch) -> None:
    _, plain = prepare_micro_batches(jagged_with_settings(jagged_batch, max_token_len_per_gpu=8))
    _, with_sp = prepare_micro_batches(
        jagged_with_settings(jagged_batch, max_token_len_per_gpu=4, sp_size=2)
    )
    assert with_sp == plain


def test_prepare_micro_batches_large_budget(jagged_batch: Batch) -> None:
    micro_batches, plan = prepare_micro_batches(
        jagged_with_settings(jagged_batch, max_token_len_per_gpu=10000)
    )
    assert plan == [[0, 1, 2, 3]] and len(micro_batches) == 1


def test_prepare_micro_batches_static(jagged_batch: Batch) -> None:
    micro_batches, plan = prepare_micro_batches(
        jagged_with_settings(jagged_batch, use_dynamic_bsz=False, micro_batch_size_per_gpu=2)
    )
    assert plan is None
    assert [mb["input_ids"].offsets().diff().tolist() for mb in micro_batches] == [[3, 5], [2, 7]]


def test_prepare_micro_batches_static_too_few_samples(jagged_batch: Batch) -> None:
    batch = jagged_batch([4])
    batch["use_dynamic_bsz"] = NonTensorData(False)
    batch["micro_batch_size_per_gpu"] = NonTensorData(3)
    with pytest.raises(ValueError, match="batch size 1 is not a positive multiple"):
        prepare_micro_batches(batch)


def test_prepare_micro_batches_requires_budget(jagged_batch: Batch) -> None:
    with pytest.raises(ValueError, match="max_token_len_per_gpu"):
        prepare_micro_batches(jagged_batch([3, 4]))


PREFIX_TREE_REFUSED = (
    "the batch sets 'use_prefix_tree', which asks for verl's prefix-tree micro-batches; "
    "seqlen_balancing does not build them: switch use_prefix_tree off, or unset "
    "SEQLEN_BALANCING_VERL so that verl plans this batch itself"
)


def prefix_tree_flag(stored: str, value: Any) -> Any:
    """``use_prefix_tree`` as verl stores a setting (NonTensorData), one flag per row (a
    plain entry), or a stack of per-row NonTensorData (a lazy-stacked batch's setting)."""
    if stored == "non_tensor":
        return NonTensorData(value)
    if stored == "rows":
        return torch.full((4,), value)
    return NonTensorStack(*(NonTensorData(value) for _ in range(4)))


@pytest.mark.parametrize("stored", ["non_tensor", "rows", "stack"])
@pytest.mark.parametrize("dynamic", [True, False])
def test_prepare_micro_batches_refuses_verls_prefix_tree_mode(
    jagged_batch: Batch, stored: str, dynamic: bool
) -> None:
    """verl's prefix-tree change (PR #6689) reads ``use_prefix_tree`` first; a plan that
    ignores it would hand verl ordinary micro-batches where it asked for prefix trees."""
    settings: dict[str, Any] = {"max_token_len_per_gpu": 8} if dynamic else {
        "use_dynamic_bsz": False, "micro_batch_size_per_gpu": 2}
    for value in (True, 1):
        batch = jagged_with_settings(jagged_batch, **settings)
        batch["use_prefix_tree"] = prefix_tree_flag(stored, value)
        with pytest.raises(ValueError, match="use_prefix_tree") as raised:
            prepare_micro_batches(batch)
        assert str(raised.value) == PREFIX_TREE_REFUSED
    for value in (False, 0):  # off: planned as without it
        batch = jagged_with_settings(jagged_batch, **settings)
        batch["use_prefix_tree"] = prefix_tree_flag(stored, value)
        micro_batches, plan = prepare_micro_batches(batch)
        assert len(micro_batches) == (3 if dynamic else 2)
        assert plan is None or sorted(i for part in plan for i in part) == [0, 1, 2, 3]


# Rows come back bit for bit; non-tensor data is indexed per sample.
def test_concatenation_and_reverse_index_restore_input(masked_batch: Batch) -> None:
    lengths = [5, 9, 1, 7, 3, 8, 2, 6]
    batch = masked_batch(lengths)
    batch["uid"] = NonTensorStack(*[NonTensorData(f"u{i}") for i in range(8)])
    batch["step"] = NonTensorData(17)
    micro_batches, plan = rearrange_micro_batches(batch, max_token_len=12)
    check_plan(lengths, plan, 12)
    for micro_batch, indices in zip(micro_batches, plan, strict=True):
        assert micro_batch["step"] == 17
        assert list(micro_batch.get("uid").tolist()) == [f"u{i}" for i in indices]
    joined = torch.cat([mb["input_ids"] for mb in micro_batches])
    order = get_reverse_idx([i for part in plan for i in part])
    assert torch.equal(joined[order], batch["input_ids"])
    restored = restore_dynamic_batch(joined, plan)
    assert torch.equal(restored, batch["input_ids"])


def test_restore_jagged(jagged_batch: Batch) -> None:
    lengths = [3, 5, 2, 7, 4]
    batch = jagged_batch(lengths)
    micro_batches, plan = rearrange_micro_batches(batch, max_token_len=9)
    rows = [row for mb in micro_batches for row in mb["input_ids"].unbind()]
    joined = torch.nested.as_nested_tensor(rows, layout=torch.jagged)
    restored = restore_dynamic_batch(joined, plan)
    assert restored.is_nested
    for got, want in zip(restored.unbind(), batch["input_ids"].unbind(), strict=True):
        assert torch.equal(got, want)


def test_restore_rejects_incomplete_index_lists() -> None:
    with pytest.raises(ValueError, match="holds 2 indices but data has 3 rows"):
        restore_dynamic_batch(torch.arange(3), [[0], [2]])


# Ordering: lightest micro-batches at both ends, heaviest in the middle.
def test_balance_order_puts_light_micro_batches_at_the_ends(masked_batch: Batch) -> None:
    lengths = [10, 60, 30, 50, 20, 40]
    _, plan = rearrange_micro_batches(masked_batch(lengths), max_token_len=60, min_num_micro_batch=6)
    sums = token_sums(lengths, plan)
    # verl's rule: heaviest first, then even positions reversed followed by odd positions.
    assert sums == [20, 40, 60, 50, 30, 10]
    _, unordered = rearrange_micro_batches(
        masked_batch(lengths), 60, min_num_micro_batch=6, use_dynamic_bsz_balance=False
    )
    assert unordered == [[0], [1], [2], [3], [4], [5]]


def verl_order(plan: list[list[int]], lengths: list[int]) -> list[list[int]]:
    """A model of verl's order rule, from its description: sort by (workload, first
    index) descending; even positions reversed, then odd positions."""
    def key(part: list[int]) -> tuple[int, int]:
        return sum(24576 * lengths[i] + lengths[i] ** 2 for i in part), part[0]

    ranked = sorted(plan, key=key, reverse=True)
    return [ranked[p] for p in range(0, len(ranked), 2)][::-1] + [ranked[p] for p in range(1, len(ranked), 2)]


# Issue 9, case 5: verl's micro-batch order, exactly, for even and odd counts.
@pytest.mark.parametrize(
    ("lengths", "expected"),
    [
        ([60, 50, 40, 30], [[2], [0], [1], [3]]),
        ([10, 20, 30, 40], [[0, 3], [1, 2]]),
        ([60, 50, 40, 30, 35], [[3], [2], [0], [1], [4]]),
    ],
)
def test_micro_batch_order_is_verls(
    masked_batch: Batch, lengths: list[int], expected: list[list[int]]
) -> None:
    _, plan = rearrange_micro_batches(masked_batch(lengths), max_token_len=64)
    assert plan == expected
    assert plan == verl_order(plan, lengths)


@pytest.mark.parametrize("seed", range(20))
def test_micro_batch_order_matches_the_model(masked_batch: Batch, seed: int) -> None:
    rng = np.random.default_rng(seed)
    lengths = [int(x) for x in rng.integers(1, 64, size=int(rng.integers(2, 40)))]
    _, plan = rearrange_micro_batches(masked_batch(lengths), max_token_len=64)
    assert plan == verl_order(plan, lengths)


def test_forced_group_order_uses_group_workloads(masked_batch: Batch) -> None:
    lengths = [5, 5, 30, 30, 1, 1, 20, 20]
    _, plan = rearrange_micro_batches(masked_batch(lengths), max_token_len=60, force_group_size=2,
                                      min_num_micro_batch=4)
    assert plan == verl_order(plan, lengths) == [[0, 1], [2, 3], [6, 7], [4, 5]]


# Issue 9, case 9: micro-batches are copies, whatever the plan.
def test_one_micro_batch_is_a_copy(masked_batch: Batch) -> None:
    batch = masked_batch([3, 4])
    batch["adv"] = torch.tensor([0.5, -1.0])
    micro_batches, plan = rearrange_micro_batches(batch, max_token_len=100)
    assert plan == [[0, 1]]
    micro_batches[0]["adv"].add_(1)
    micro_batches[0]["input_ids"].zero_()
    assert batch["adv"].tolist() == [0.5, -1.0]
    assert batch["input_ids"].sum() > 0


def test_micro_batches_in_original_order_are_copies(masked_batch: Batch) -> None:
    batch = masked_batch([8, 1, 1])
    batch["adv"] = torch.tensor([1.0, 2.0, 3.0])
    micro_batches, plan = rearrange_micro_batches(batch, max_token_len=8, use_dynamic_bsz_balance=False)
    assert plan == [[0], [1, 2]]
    for micro_batch in micro_batches:
        micro_batch["adv"].add_(1)
    assert batch["adv"].tolist() == [1.0, 2.0, 3.0]


def test_jagged_and_static_micro_batches_are_copies(jagged_batch: Batch) -> None:
    batch = jagged_batch([3, 5])
    before = batch["input_ids"].values().clone()
    micro_batches, _ = rearrange_micro_batches(batch, max_token_len=100)
    micro_batches[0]["input_ids"].values().zero_()
    assert torch.equal(batch["input_ids"].values(), before)
    batch["use_dynamic_bsz"] = NonTensorData(False)
    batch["micro_batch_size_per_gpu"] = NonTensorData(2)
    static, indices = prepare_micro_batches(batch)
    assert indices is None
    static[0]["input_ids"].values().add_(1)
    assert torch.equal(batch["input_ids"].values(), before)


def jagged_rows(rows: list[torch.Tensor], ragged_dim: int) -> torch.Tensor:
    """Rows joined along ``ragged_dim - 1`` into a jagged tensor (verl's construction)."""
    values = torch.cat(rows, dim=ragged_dim - 1)
    sizes = [row.shape[ragged_dim - 1] for row in rows]
    offsets = torch.tensor([0, *np.cumsum(sizes).tolist()])
    return torch.nested.nested_tensor_from_jagged(values, offsets, jagged_dim=ragged_dim)


# Issue 9, case 8: multi-modal RoPE position_ids (ragged dim 2) keep their layout.
def test_rope_position_ids_keep_ragged_dim_two() -> None:
    ids = torch.nested.nested_tensor([torch.arange(4) + 10 * i for i in range(4)], layout=torch.jagged)
    position_ids = jagged_rows([torch.arange(12).reshape(3, 4) + 100 * i for i in range(4)], 2)
    assert position_ids.values().shape == (3, 16)
    batch = TensorDict({"input_ids": ids, "position_ids": position_ids}, [4])
    micro_batches, plan = rearrange_micro_batches(batch, max_token_len=8)
    assert len(micro_batches) == 2
    for micro_batch, part in zip(micro_batches, plan, strict=True):
        got = micro_batch["position_ids"]
        assert got.layout == torch.jagged and got._ragged_idx == 2
        assert tuple(got.values().shape) == (3, 8)
        assert got.offsets().tolist() == [0, 4, 8]
        assert got.offsets().tolist() == micro_batch["input_ids"].offsets().tolist()
        for row, i in zip(got.unbind(), part, strict=True):
            assert torch.equal(row, torch.arange(12).reshape(3, 4) + 100 * i)


@pytest.mark.parametrize("ragged_dim", [1, 2])
@pytest.mark.parametrize("channels", [1, 3, 4])
@pytest.mark.parametrize("lengths", [[4, 4, 4, 4], [3, 1, 6, 2, 5], [7], [2, 6, 6]])
def test_jagged_entries_keep_layout_dtype_and_rows(
    ragged_dim: int, channels: int, lengths: list[int]
) -> None:
    ids = torch.nested.nested_tensor(
        [torch.full((n,), i) for i, n in enumerate(lengths)], layout=torch.jagged
    )
    shape = (lambda n: (n, channels)) if ragged_dim == 1 else (lambda n: (channels, n))
    rows = [torch.randn(shape(n)).to(torch.bfloat16) for n in lengths]
    batch = TensorDict({"input_ids": ids, "extra": jagged_rows(rows, ragged_dim)}, [len(lengths)])
    micro_batches, plan = rearrange_micro_batches(batch, max_token_len=8)
    assert any(len(part) == 1 for part in plan) or len(plan) == 1 or lengths == [4, 4, 4, 4]
    for micro_batch, part in zip(micro_batches, plan, strict=True):
        got = micro_batch["extra"]
        assert got.layout == torch.jagged and got._ragged_idx == ragged_dim
        assert got.dtype == torch.bfloat16 and got.device == rows[0].device
        tokens = sum(lengths[i] for i in part)
        expected_values = (tokens, channels) if ragged_dim == 1 else (channels, tokens)
        assert tuple(got.values().shape) == expected_values  # only this micro-batch's tokens
        assert got.offsets().tolist() == micro_batch["input_ids"].offsets().tolist()
        assert all(torch.equal(a, rows[i]) for a, i in zip(got.unbind(), part, strict=True))
    # Round trip through restore, from the list of per-micro-batch outputs.
    restored = restore_dynamic_batch([mb["extra"] for mb in micro_batches], plan)
    assert restored._ragged_idx == ragged_dim
    assert all(torch.equal(a, b) for a, b in zip(restored.unbind(), rows, strict=True))


def test_jagged_micro_batches_behave_like_torch_built_tensors() -> None:
    """Each micro-batch's jagged entries work as ones built with torch's public
    ``nested_tensor_from_jagged``: same class, the row lengths' min and max recorded, one
    offsets tensor shared by the entries with the same row lengths (so that they can be
    combined), and padding gives the rows back."""
    lengths = [5, 2, 7, 1, 4, 6]
    ids = jagged_rows([torch.arange(n) + 100 * i for i, n in enumerate(lengths)], 1)
    rope_rows = [torch.arange(3 * n).reshape(3, n) + 100 * i for i, n in enumerate(lengths)]
    position_ids = jagged_rows(rope_rows, 2)
    batch = TensorDict({"input_ids": ids, "position_ids": position_ids}, [len(lengths)])
    micro_batches, plan = rearrange_micro_batches(batch, max_token_len=8)
    assert len(plan) == 4  # 25 tokens at 8 per micro-batch: 7+1, 6+2, 5, 4 (L2 = 4)
    public = type(torch.nested.nested_tensor_from_jagged(torch.zeros(2), torch.tensor([0, 2])))
    for micro_batch, part in zip(micro_batches, plan, strict=True):
        got, positions = micro_batch["input_ids"], micro_batch["position_ids"]
        assert type(got) is public and type(positions) is public
        assert got.offsets() is positions.offsets()
        assert got._min_seqlen == min(lengths[i] for i in part)
        assert got._max_seqlen == max(lengths[i] for i in part)
        width = max(lengths[i] for i in part)
        padded = torch.nested.to_padded_tensor(got, -1)
        for row, i in zip(padded.tolist(), part, strict=True):
            assert row == [100 * i + t for t in range(lengths[i])] + [-1] * (width - lengths[i])
        assert (got * 2).values().tolist() == [2 * (100 * i + t) for i in part for t in range(lengths[i])]


def test_jagged_entry_with_gradient_keeps_the_graph() -> None:
    lengths = [3, 5, 2, 4]
    ids = jagged_rows([torch.zeros(n, dtype=torch.long) for n in lengths], 1)
    values = torch.arange(14, dtype=torch.float32).requires_grad_()
    logits = torch.nested.nested_tensor_from_jagged(values, ids.offsets())
    batch = TensorDict({"input_ids": ids, "logits": logits}, [4])
    micro_batches, plan = rearrange_micro_batches(batch, max_token_len=7)
    assert len(plan) == 2
    loss = sum((mb["logits"].values() * (m + 1)).sum() for m, mb in enumerate(micro_batches))
    loss.backward()
    starts = [0, 3, 8, 10]
    expected = [0.0] * 14
    for m, part in enumerate(plan):
        for i in part:
            expected[starts[i] : starts[i] + lengths[i]] = [float(m + 1)] * lengths[i]
    assert values.grad is not None and values.grad.tolist() == expected


def test_restored_jagged_entries_with_equal_lengths_share_offsets() -> None:
    """A restored TensorDict's input_ids and RoPE position_ids (rows of equal lengths) get
    one offsets tensor, as verl builds them, so they can be combined after restoring."""
    lengths = [5, 2, 7, 1, 4, 6]
    ids = jagged_rows([torch.arange(n) + 100 * i for i, n in enumerate(lengths)], 1)
    rope_rows = [torch.arange(3 * n).reshape(3, n) + 100 * i for i, n in enumerate(lengths)]
    other = jagged_rows([torch.zeros(n + 1) for n in lengths], 1)
    batch = TensorDict({"input_ids": ids, "position_ids": jagged_rows(rope_rows, 2), "other": other}, [6])
    micro_batches, plan = rearrange_micro_batches(batch, max_token_len=8)
    assert len(plan) == 4
    from_list = restore_dynamic_batch(micro_batches, plan)
    # The concatenated form, built by hand (torch.cat of jagged TensorDicts needs a recent
    # tensordict): rows in micro-batch order.
    order = [i for part in plan for i in part]
    joined = TensorDict(
        {
            "input_ids": jagged_rows([torch.arange(lengths[i]) + 100 * i for i in order], 1),
            "position_ids": jagged_rows([rope_rows[i] for i in order], 2),
            "other": jagged_rows([torch.zeros(lengths[i] + 1) for i in order], 1),
        },
        [6],
    )
    for restored in (from_list, restore_dynamic_batch(joined, plan)):
        got_ids, got_positions = restored["input_ids"], restored["position_ids"]
        assert got_ids.offsets() is got_positions.offsets()
        assert restored["other"].offsets() is not got_ids.offsets()  # other lengths
        assert got_ids.offsets().tolist() == [0, 5, 7, 14, 15, 19, 25]
        summed = got_positions.select(1, 0) + got_ids
        expected = [2 * (100 * i) + t + t for i, n in enumerate(lengths) for t in range(n)]
        assert summed.values().tolist() == expected


def test_static_path_keeps_ragged_dim_two() -> None:
    lengths = [2, 3, 4, 5]
    ids = torch.nested.nested_tensor([torch.zeros(n, dtype=torch.long) for n in lengths], layout=torch.jagged)
    rows = [torch.arange(3 * n).reshape(3, n) for n in lengths]
    batch = TensorDict({"input_ids": ids, "position_ids": jagged_rows(rows, 2)}, [4])
    batch["use_dynamic_bsz"] = NonTensorData(False)
    batch["micro_batch_size_per_gpu"] = NonTensorData(1)
    micro_batches, _ = prepare_micro_batches(batch)
    assert [tuple(mb["position_ids"].values().shape) for mb in micro_batches] == [(3, n) for n in lengths]
    assert all(mb["position_ids"]._ragged_idx == 2 for mb in micro_batches)


# Restoring the list of per-micro-batch outputs.
def test_restore_list_of_dense_outputs() -> None:
    plan = [[1, 3], [0], [2]]
    outputs = [torch.tensor([[1.0, 1], [3, 3]]), torch.tensor([[0.0, 0]]), torch.tensor([[2.0, 2]])]
    assert restore_dynamic_batch(outputs, plan).tolist() == [[0, 0], [1, 1], [2, 2], [3, 3]]
    with pytest.raises(ValueError, match=r"micro-batch 1: output has 2 rows but batch_idx_list\[1\] holds 1"):
        restore_dynamic_batch([outputs[0], torch.zeros(2, 2), outputs[2]], plan)
    with pytest.raises(ValueError, match=r"micro-batch 2: output rows have shape \(3,\)"):
        restore_dynamic_batch([outputs[0], outputs[1], torch.zeros(1, 3)], plan)
    with pytest.raises(ValueError, match="data holds 2 micro-batch outputs but batch_idx_list has 3"):
        restore_dynamic_batch(outputs[:2], plan)


def test_restore_list_of_tensordicts(masked_batch: Batch) -> None:
    lengths = [5, 9, 1, 7, 3, 8, 2, 6]
    batch = masked_batch(lengths)
    batch["logp"] = torch.nested.nested_tensor([torch.randn(n) for n in lengths], layout=torch.jagged)
    micro_batches, plan = rearrange_micro_batches(batch, max_token_len=12)
    restored = restore_dynamic_batch(micro_batches, plan)
    assert isinstance(restored, TensorDict) and restored.batch_size == torch.Size([8])
    assert torch.equal(restored["input_ids"], batch["input_ids"])
    pairs = zip(restored["logp"].unbind(), batch["logp"].unbind(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
    swapped = [TensorDict({"x": torch.zeros(2)}, [2]), TensorDict({"x": torch.zeros(1)}, [1])]
    with pytest.raises(ValueError, match=r"micro-batch 0: output has 2 rows but batch_idx_list\[0\] holds 1"):
        restore_dynamic_batch(swapped, [[0], [1, 2]])


class DataProtoLike:
    """Minimal stand-in for verl's DataProto (batch, non_tensor_batch, meta_info)."""

    def __init__(self, batch: TensorDict, non_tensor_batch: dict[str, np.ndarray],
                 meta_info: dict[str, Any]) -> None:
        self.batch = batch
        self.non_tensor_batch = non_tensor_batch
        self.meta_info = meta_info

    @classmethod
    def from_dict(cls, tensors: dict[str, torch.Tensor], non_tensors: dict[str, np.ndarray],
                  meta_info: dict[str, Any]) -> DataProtoLike:
        size = next(iter(tensors.values())).shape[0]
        return cls(TensorDict(tensors, batch_size=[size]), non_tensors, meta_info)


def test_prepare_dynamic_batch_on_a_dataproto_like_object(masked_batch: Batch) -> None:
    lengths = [6, 2, 5, 3, 4]
    meta = {"temperature": 1.0, "nested": {"a": [1]}}
    data = DataProtoLike(masked_batch(lengths), {"uid": np.array(list("abcde"), dtype=object)}, meta)
    micro, plan = prepare_dynamic_batch(data, max_token_len=10)
    check_plan(lengths, plan, 10)
    assert all(type(mb) is DataProtoLike for mb in micro)
    for mb, indices in zip(micro, plan, strict=True):
        assert list(mb.non_tensor_batch["uid"]) == ["abcde"[i] for i in indices]
        assert mb.meta_info == meta and mb.meta_info is not meta
        assert mb.meta_info["nested"] is not meta["nested"]
        assert mb.batch["attention_mask"].sum(-1).tolist() == [lengths[i] for i in indices]


def test_prepare_dynamic_batch_rejects_non_dataproto(masked_batch: Batch) -> None:
    with pytest.raises(TypeError, match=r"data must be DataProto-like.*\(no 'batch'\)"):
        prepare_dynamic_batch(object(), max_token_len=10)
    short = DataProtoLike(masked_batch([1, 2, 3]), {"uid": np.array(["a", "b"])}, {})
    with pytest.raises(ValueError, match="a non_tensor_batch array has 2 rows but the batch has 3"):
        prepare_dynamic_batch(short, max_token_len=10)


def test_the_cut_runs_with_the_collector_paused(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from seqlen_balancing.batch import cut

    seen: list[bool] = []
    gathered = cut._gathered

    def watched(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return gathered(*args, **kwargs)

    monkeypatch.setattr(cut, "_gathered", watched)
    mask = torch.tensor([[1] * 6 + [0] * 2, [1] * 5 + [0] * 3, [1] * 3 + [0] * 5, [1] * 2 + [0] * 6])
    batch = TensorDict({"input_ids": torch.arange(32).view(4, 8), "attention_mask": mask}, batch_size=[4])
    gc.enable()
    micro_batches, indices = rearrange_micro_batches(batch, max_token_len=8)
    assert (seen, gc.isenabled()) == ([False], True)
    assert sorted(i for part in indices for i in part) == [0, 1, 2, 3] and len(micro_batches) == 2

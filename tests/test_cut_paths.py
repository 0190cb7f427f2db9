"""The cut's fast paths (issue 33 item 2) give the rows the rule spells out, bit for bit.

Mask counts through numpy (CPU) or torch (elsewhere), jagged rows joined by numpy, dense
rows gathered a chunk of micro-batches at a time: each checked against an oracle written
here from plain Python lists.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest
import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict

import seqlen_balancing.batch.cut as cut
from seqlen_balancing import prepare_dynamic_batch, rearrange_micro_batches, restore_dynamic_batch
from seqlen_balancing.batch.lengths import _mask_row_counts

pytestmark = pytest.mark.torch


def count_nonzero_rows(rows: list[list[float]]) -> list[int]:
    """The rule spelled out: a row's effective tokens are its entries that are not 0."""
    return [sum(1 for x in row if x != 0) for row in rows]


MASK_DTYPES = [
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.float32, torch.float64, torch.bfloat16,
]


@pytest.mark.parametrize("dtype", MASK_DTYPES, ids=str)
@pytest.mark.parametrize("width", [7, 1500])  # both sides of the row-by-row width
def test_mask_counts_match_the_rule(dtype: torch.dtype, width: int) -> None:
    rng = random.Random(width)
    choices = [0, 1] if dtype == torch.bool else [0, 0, 1, 2, -1]
    if dtype.is_floating_point:
        choices += [-0.0, float("nan"), 0.5]
    if dtype in (torch.uint8, torch.bool):
        choices = [c for c in choices if c in (0, 1, 2)]
    rows = [[rng.choice(choices) for _ in range(width)] for _ in range(9)]
    mask = torch.tensor(rows, dtype=dtype)
    expected = count_nonzero_rows(mask.tolist())
    assert _mask_row_counts(mask) == expected
    # a strided view (every other column) and a column slice count the same way
    assert _mask_row_counts(mask[:, ::2]) == count_nonzero_rows(mask[:, ::2].tolist())
    assert _mask_row_counts(mask[:, 3:]) == count_nonzero_rows(mask[:, 3:].tolist())


def test_mask_counts_of_views_numpy_cannot_hold() -> None:
    mask = torch.tensor([[0.0, 1.0, -2.0, 0.0], [0.0, 0.0, 0.0, 3.0]], requires_grad=True)
    assert _mask_row_counts(mask) == [2, 1]
    negative = torch._neg_view(torch.tensor([[0.0, 1.0, 1.0], [0.0, 0.0, 5.0]]))
    assert negative.is_neg()
    assert _mask_row_counts(negative) == [2, 1]
    assert _mask_row_counts(torch.zeros(3, 0, dtype=torch.bool)) == [0, 0, 0]


def jagged_batch(
    lengths: list[int], dtype: torch.dtype, hidden: int | None, start: int = 0
) -> tuple[TensorDict, list[torch.Tensor]]:
    """A batch whose jagged ``input_ids`` rows are distinct, and those rows as a list."""
    shape = (sum(lengths) + start,) if hidden is None else (sum(lengths) + start, hidden)
    values = torch.randn(shape, generator=torch.Generator().manual_seed(1)).mul(50).to(dtype)
    if dtype.is_floating_point:
        values.view(-1)[::97] = float("nan")
    offsets = torch.tensor([start, *(start + o for o in itertools.accumulate(lengths))])
    ids = torch.nested.nested_tensor_from_jagged(values, offsets)
    rows = [values[a:b].clone() for a, b in itertools.pairwise(offsets.tolist())]
    batch = TensorDict({"input_ids": ids, "tag": NonTensorStack(*map(str, range(len(lengths))))},
                       batch_size=[len(lengths)])
    return batch, rows


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.is_floating_point:
        ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return torch.equal(a.view(ints), b.view(ints))
    return torch.equal(a, b)


@pytest.mark.parametrize(
    ("dtype", "hidden", "start"),
    [(torch.int32, None, 0), (torch.bfloat16, None, 3), (torch.float32, 4, 0), (torch.int64, 2, 5)],
)
def test_jagged_rows_joined_on_the_host_are_the_rows(
    monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype, hidden: int | None, start: int
) -> None:
    joins: list[bool] = []
    real_join = cut._host_join

    def counted(*args: object) -> object:
        joined = real_join(*args)  # type: ignore[arg-type]
        joins.append(joined is not None)
        return joined

    monkeypatch.setattr(cut, "_host_join", counted)
    rng = random.Random(7)
    lengths = [rng.randint(1, 60) for _ in range(40)]
    batch, rows = jagged_batch(lengths, dtype, hidden, start)
    micro_batches, plan = rearrange_micro_batches(batch, 200)
    assert joins == [True]  # the host path cut it
    assert len(plan) > 2 and sorted(itertools.chain(*plan)) == list(range(40))
    assert any(part != sorted(part) or part[0] != 0 for part in plan)  # rows really move
    for micro_batch, part in zip(micro_batches, plan, strict=True):
        ids = micro_batch["input_ids"]
        assert ids.layout == torch.jagged and ids.dtype == dtype
        got = ids.unbind()
        assert len(got) == len(part)
        assert all(same_bits(g, rows[i]) for g, i in zip(got, part, strict=True))
        expected_offsets = [0, *itertools.accumulate(lengths[i] for i in part)]
        assert ids.offsets().tolist() == expected_offsets
        assert micro_batch["tag"] == [str(i) for i in part]
        ids.values().fill_(0)  # a copy: the input keeps its rows
    values, offsets = batch["input_ids"].values(), batch["input_ids"].offsets().tolist()
    kept = [values[a:b] for a, b in itertools.pairwise(offsets)]  # (unbind ignores offsets[0])
    assert all(same_bits(k, r) for k, r in zip(kept, rows, strict=True))


def dense_batch(n: int, width: int) -> TensorDict:
    gen = torch.Generator().manual_seed(n)
    return TensorDict(
        {
            "input_ids": torch.randint(0, 1000, (n, width), generator=gen),
            "attention_mask": torch.ones(n, width, dtype=torch.bool),
            "extra": TensorDict({"score": torch.randn(n, 3, generator=gen)}, batch_size=[n]),
            "tag": NonTensorStack(*map(str, range(n))),
        },
        batch_size=[n],
    )


@pytest.mark.parametrize("chunk_bytes", [1, 700, 1 << 30])
def test_dense_rows_gathered_in_chunks_are_the_rows(
    monkeypatch: pytest.MonkeyPatch, chunk_bytes: int
) -> None:
    monkeypatch.setattr(cut, "_CHUNK_BYTES", chunk_bytes)
    batch = dense_batch(30, 5)
    rng = random.Random(3)
    order = list(range(30))
    rng.shuffle(order)
    plan = [order[0:4], order[4:5], order[5:17], order[17:30]]
    micro_batches = cut._cut(batch, plan)
    ids = batch["input_ids"].tolist()
    scores = batch["extra", "score"].tolist()
    for micro_batch, part in zip(micro_batches, plan, strict=True):
        assert micro_batch.batch_size == torch.Size([len(part)])
        assert micro_batch["input_ids"].tolist() == [ids[i] for i in part]
        assert micro_batch["extra", "score"].tolist() == [scores[i] for i in part]
        assert micro_batch["tag"] == [str(i) for i in part]
        micro_batch["input_ids"].fill_(-1)
    assert batch["input_ids"].tolist() == ids  # copies, never views of the input


def test_chunks_take_what_fits() -> None:
    rng = random.Random(11)
    for _ in range(300):
        sizes = [rng.randint(1, 9) for _ in range(rng.randint(1, 12))]
        row_bytes = rng.choice([1, 100, 1 << 20, 3 << 20])
        runs = cut._chunks(sizes, row_bytes)
        assert [m for run in runs for m in run] == list(range(len(sizes)))  # consecutive runs
        counts = [len(run) for run in runs]
        assert sum(counts) == len(sizes) and all(c >= 1 for c in counts)
        start = 0
        for c, count in enumerate(counts):
            rows = sum(sizes[start : start + count])
            # within the budget unless one micro-batch alone is bigger
            assert count == 1 or rows * row_bytes <= cut._CHUNK_BYTES
            if c + 1 < len(counts):  # greedy: the next micro-batch would not have fitted
                assert (rows + sizes[start + count]) * row_bytes > cut._CHUNK_BYTES
            start += count


def test_dense_rows_of_plain_tensors_are_taken_by_index_select(monkeypatch: pytest.MonkeyPatch) -> None:
    # a batch of strided tensors only (the padded batch) is gathered by index_select, not
    # by tensordict's indexing: the same rows, copies, the batch's dimension name kept
    taken: list[int] = []
    real = torch.Tensor.index_select

    def counted(self: torch.Tensor, dim: int, index: torch.Tensor) -> torch.Tensor:
        taken.append(len(index))
        return real(self, dim, index)

    gen = torch.Generator().manual_seed(5)
    batch = TensorDict({"input_ids": torch.randint(0, 1000, (12, 7), generator=gen),
                        "attention_mask": torch.ones(12, 7, dtype=torch.bool)}, batch_size=[12],
                       names=["rows"])
    plan = [[3, 1], [0, 11, 5], [2, 4, 6, 7, 8, 9, 10]]
    monkeypatch.setattr(torch.Tensor, "index_select", counted)
    micro_batches = cut._cut(batch, plan)
    monkeypatch.undo()
    assert taken == [12, 12]  # one gather of every row per entry (one chunk)
    ids = batch["input_ids"].tolist()
    for micro_batch, part in zip(micro_batches, plan, strict=True):
        assert micro_batch.names == ["rows"] and micro_batch.batch_size == torch.Size([len(part)])
        assert micro_batch["input_ids"].tolist() == [ids[i] for i in part]
        micro_batch["input_ids"].fill_(-1)
    assert batch["input_ids"].tolist() == ids


def test_dense_rows_of_a_two_dim_batch_keep_their_second_dim() -> None:
    # a batch_size of two dims (rows, columns): the gathered micro-batches keep the second
    gen = torch.Generator().manual_seed(6)
    batch = TensorDict({"input_ids": torch.randint(0, 1000, (9, 4), generator=gen)}, batch_size=[9, 4])
    plan = [[8, 0], [1, 2, 3, 4, 5, 6, 7]]
    ids = batch["input_ids"].tolist()
    for micro_batch, part in zip(cut._cut(batch, plan), plan, strict=True):
        assert micro_batch.batch_size == torch.Size([len(part), 4])
        assert micro_batch["input_ids"].tolist() == [ids[i] for i in part]


def test_the_strided_gather_takes_its_index_on_each_entrys_device(monkeypatch: pytest.MonkeyPatch) -> None:
    # index_select refuses an index on another device (a CUDA entry, a CPU index: a raise
    # after the agreement); the gather copies the index to each entry's device. Here the
    # entries lie on "meta" beside a CPU one, and index_select is made as strict as CUDA's.
    real = torch.Tensor.index_select

    def strict(self: torch.Tensor, dim: int, index: torch.Tensor) -> torch.Tensor:
        if index.device != self.device:
            raise RuntimeError(f"index on {index.device}, tensor on {self.device}")
        return real(self, dim, index)

    batch = TensorDict({"input_ids": torch.empty(6, 3, device="meta"),
                        "attention_mask": torch.ones(6, 3, dtype=torch.bool)}, batch_size=[6])
    monkeypatch.setattr(torch.Tensor, "index_select", strict)
    picked, rest = cut._picked(batch, torch.tensor([4, 1, 5]), [3, 0], strided=True)
    monkeypatch.undo()
    assert rest.batch_size == torch.Size([0]) and rest["attention_mask"].shape == (0, 3)
    assert picked["input_ids"].device.type == "meta" and picked["input_ids"].shape == (3, 3)
    assert picked["attention_mask"].device.type == "cpu" and picked.batch_size == torch.Size([3])


# ------------------------------------------------------------------ issue 46 item 7: every dtype

#: dtypes a batch may hold; uint16/32/64 have no 1-D index_select kernel, float8 and the
#: sub-byte/bits dtypes none of torch's index kernels at all
ENTRY_DTYPES = [
    torch.uint16, torch.uint32, torch.uint64, torch.bool, torch.float16, torch.bfloat16,
    torch.complex64, torch.float8_e4m3fn, torch.int4, torch.bits16,
]
SIGNED = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


class Proto:
    """A minimal DataProto stand-in (verl's parts, no verl import)."""

    def __init__(self, batch: Any, non_tensor_batch: Any = None, meta_info: Any = None) -> None:
        self.batch, self.non_tensor_batch = batch, non_tensor_batch or {}
        self.meta_info = meta_info or {}

    @classmethod
    def from_dict(cls, tensors: Any, non_tensors: Any, meta_info: Any = None) -> Proto:
        size = len(next(iter(tensors.values())))
        return cls(TensorDict(tensors, batch_size=[size]), non_tensors, meta_info)


def entry_bits(dtype: torch.dtype, shape: tuple[int, ...], seed: int) -> tuple[torch.Tensor, list[Any]]:
    """A tensor of ``dtype`` built from random bit patterns, and those patterns as nested
    lists (the oracle: a row is picked when its patterns are)."""
    rng = random.Random(seed)
    bits = 8 * dtype.itemsize
    count = 1
    for size in shape:
        count *= size
    low, high = (0, 1) if dtype == torch.bool else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    flat = [rng.randint(low, high) for _ in range(count)]
    signed = torch.tensor(flat, dtype=SIGNED[dtype.itemsize]).reshape(shape)
    return signed.view(dtype), signed.tolist()


def bits_of(tensor: torch.Tensor) -> list[Any]:
    return tensor.view(SIGNED[tensor.dtype.itemsize]).tolist()


@pytest.mark.parametrize("dtype", ENTRY_DTYPES, ids=str)
@pytest.mark.parametrize("how", ["strided", "non_tensor", "nested", "padded", "dummies", "dataproto"])
def test_every_dtype_survives_the_cut_and_the_restore(dtype: torch.dtype, how: str) -> None:
    lengths = [5, 1, 7, 3, 2, 6, 4, 8]
    mask = torch.tensor([[1] * n + [0] * (8 - n) for n in lengths])
    one, one_bits = entry_bits(dtype, (8,), 1)
    two, two_bits = entry_bits(dtype, (8, 3), 2)
    wide, wide_bits = entry_bits(dtype, (8, 8), 3)  # the mask's width: cut with padded
    batch = TensorDict({"attention_mask": mask, "one": one, "two": two, "wide": wide,
                        "loss_mask": mask.clone()}, batch_size=[8])
    if how == "non_tensor":  # tensordict's own indexing path
        batch["setting"] = NonTensorData(3)
    if how == "nested":
        batch["sub"] = TensorDict({"one": entry_bits(dtype, (8,), 1)[0]}, batch_size=[8])
    keywords: dict[str, Any] = {"padded": how == "padded"}
    if how == "dummies":
        keywords |= {"dummy_micro_batches": True, "min_num_micro_batch": 9}
    if how == "dataproto":
        parts, idx = prepare_dynamic_batch(Proto(batch), 9)
        mbs = [part.batch for part in parts]
    else:
        mbs, idx = rearrange_micro_batches(batch, 9, **keywords)
    assert sorted(i for part in idx for i in part) == list(range(8))
    for mb, part in zip(mbs, idx, strict=True):
        rows = list(part) or [lengths.index(min(lengths))]  # a dummy copies the shortest row
        assert mb["one"].dtype == dtype and bits_of(mb["one"]) == [one_bits[i] for i in rows]
        assert bits_of(mb["two"]) == [two_bits[i] for i in rows]
        width = mb["wide"].shape[1]
        assert width == (max(lengths[i] for i in rows) if how == "padded" else 8)
        assert bits_of(mb["wide"]) == [wide_bits[i][:width] for i in rows]
        if how == "nested":
            assert bits_of(mb["sub", "one"]) == [one_bits[i] for i in rows]
    real = [(mb, part) for mb, part in zip(mbs, idx, strict=True) if part]
    restored = restore_dynamic_batch([mb for mb, _ in real], [part for _, part in real])
    assert bits_of(restored["one"]) == one_bits and bits_of(restored["two"]) == two_bits
    if how != "padded":  # padded: the pad columns come back as the pad value, below
        assert bits_of(restored["wide"]) == wide_bits
    else:
        pad = wide_bits[0][7]  # row 0 (5 tokens) pads column 7: the value written back
        kept = {i: max(lengths[j] for j in part) for part in idx for i in part}
        assert bits_of(restored["wide"]) == [row[: kept[i]] + [pad] * (8 - kept[i])
                                             for i, row in enumerate(wide_bits)]
    assert restored["one"].dtype == dtype


@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint64, torch.int4], ids=str)
def test_sparse_entries_of_any_dtype_keep_their_rows(dtype: torch.dtype) -> None:
    values, value_bits = entry_bits(dtype, (3,), 4)
    rows, columns = [0, 3, 6], [1, 2, 0]
    coo = torch.sparse_coo_tensor(torch.tensor([rows, columns]), values, (8, 3))
    csr = torch.sparse_compressed_tensor(torch.tensor([0, 1, 1, 1, 2, 2, 2, 3, 3]), torch.tensor(columns),
                                         values, (8, 3), layout=torch.sparse_csr)
    batch = TensorDict({"attention_mask": torch.ones(8, 4), "coo": coo, "csr": csr}, batch_size=[8])
    mbs, idx = rearrange_micro_batches(batch, 8)
    for mb, part in zip(mbs, idx, strict=True):
        held = [(part.index(r), c, b) for r, c, b in zip(rows, columns, value_bits, strict=True) if r in part]
        picked = mb["coo"]
        found = sorted(zip(picked._indices()[0].tolist(), picked._indices()[1].tolist(),
                           bits_of(picked._values()), strict=True))
        assert found == sorted(held)
        assert mb["csr"].layout == torch.sparse_csr and mb["csr"].dtype == dtype
        crow = mb["csr"].crow_indices().tolist()
        cols, csr_bits = mb["csr"].col_indices().tolist(), bits_of(mb["csr"].values())
        found_csr = sorted((r, c, b) for r in range(len(part)) for c, b in zip(
            cols[crow[r]:crow[r + 1]], csr_bits[crow[r]:crow[r + 1]], strict=True))
        assert found_csr == sorted(held)

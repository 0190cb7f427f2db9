"""Issue 20: every poisoned batch of ``distributed/_poisoned.py``, in one process.

Each batch either plans, and then the micro-batches put back in order by
``restore_dynamic_batch`` give the input bit for bit (every entry: dense, sparse, nested,
lazy stacks, non-tensor data) and the input is unchanged; or the call raises
``ValueError``/``TypeError`` (the catalogue's type and message) and the input is unchanged.
The same catalogue runs on 2 gloo ranks in ``distributed/test_agreement.py``.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tensordict import LazyStackedTensorDict, NonTensorData, NonTensorStack, TensorDictBase

from seqlen_balancing import restore_dynamic_batch

pytestmark = pytest.mark.torch


def _load_poisons() -> Any:
    """``distributed/_poisoned.py`` (and ``_malformed.py`` it imports), by their folder."""
    folder = str(Path(__file__).resolve().parent.parent / "distributed")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module("_poisoned")


P = _load_poisons()


# ---------------------------------------------------------------------------------------
# Bit-for-bit comparison of every entry kind
# ---------------------------------------------------------------------------------------


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    flat = tensor.detach().contiguous().reshape(-1)
    return flat.view(torch.uint8) if flat.numel() else flat


def assert_same_tensor(a: torch.Tensor, b: torch.Tensor, where: str) -> None:
    assert (type(a) is torch.Tensor or isinstance(a, torch.Tensor)), where
    assert (a.layout, a.dtype, a.device, a.is_nested) == (b.layout, b.dtype, b.device, b.is_nested), (
        f"{where}: {a.layout}/{a.dtype}/{a.device} vs {b.layout}/{b.dtype}/{b.device}")
    if a.is_nested and a.device.type == "meta":  # no offsets to read: compare the values' shape
        assert a.values().shape == b.values().shape, where
        return
    if a.is_nested:
        assert getattr(a, "_ragged_idx", 1) == getattr(b, "_ragged_idx", 1), where
        rows_a, rows_b = a.unbind(), b.unbind()
        assert len(rows_a) == len(rows_b), where
        for i, (x, y) in enumerate(zip(rows_a, rows_b, strict=True)):
            assert_same_tensor(x, y, f"{where}[{i}]")
        return
    assert a.shape == b.shape, f"{where}: shape {tuple(a.shape)} vs {tuple(b.shape)}"
    if a.device.type == "meta":
        return  # no data: layout, dtype and shape are all there is
    if a.layout != torch.strided:
        a, b = a.to_dense(), b.to_dense()
    assert torch.equal(_bits(a), _bits(b)), f"{where}: values differ"


def assert_same_object(a: Any, b: Any, where: str) -> None:
    if isinstance(a, torch.Tensor):
        assert_same_tensor(a, b, where)
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b), where
    else:
        assert type(a) is type(b) and a == b, f"{where}: {a!r} vs {b!r}"


def assert_same_td(a: Any, b: Any, where: str = "batch") -> None:
    """``a`` and ``b`` hold the same entries, bit for bit (lazy stacks row by row)."""
    assert a.batch_size == b.batch_size, f"{where}: batch size {a.batch_size} vs {b.batch_size}"
    if isinstance(a, NonTensorStack) or isinstance(b, NonTensorStack):
        rows_a, rows_b = a.tolist(), b.tolist()
        assert len(rows_a) == len(rows_b), where
        for i, (x, y) in enumerate(zip(rows_a, rows_b, strict=True)):
            assert_same_object(x, y, f"{where}[{i}]")
        return
    lazy_a, lazy_b = isinstance(a, LazyStackedTensorDict), isinstance(b, LazyStackedTensorDict)
    if lazy_a and lazy_b and a.stack_dim == b.stack_dim:
        for i, (x, y) in enumerate(zip(a.tensordicts, b.tensordicts, strict=True)):
            assert_same_td(x, y, f"{where}[{i}]")
        return
    if lazy_a or lazy_b:  # restored as one dense TensorDict (a DataProto's from_dict, or a
        a, b = a.contiguous(), b.contiguous()  # stack along dim 1): its entries have one shape
    assert sorted(a.keys(), key=str) == sorted(b.keys(), key=str), f"{where}: keys differ"
    for key in a.keys():
        x, y = a.get(key), b.get(key)
        if isinstance(x, NonTensorData):
            assert isinstance(y, NonTensorData), f"{where}.{key}"
            assert_same_object(x.data, y.data, f"{where}.{key}")
        elif isinstance(x, TensorDictBase):
            assert_same_td(x, y, f"{where}.{key}")
        else:
            assert_same_tensor(x, y, f"{where}.{key}")


def _snapshot(entry: Any) -> Any:
    """The call's data (the batch, or a DataProto's parts) built again: the builders are
    deterministic, so this is what the input held before the call."""
    data = entry[1][0]
    if isinstance(data, P.Proto):
        return data.batch, {k: v.copy() for k, v in dict(data.non_tensor_batch).items()}
    return data


def _assert_unchanged(entry: Any, snapshot: Any) -> None:
    data = entry[1][0]
    if isinstance(data, P.Proto):
        assert_same_td(data.batch, snapshot[0], "input batch")
        if isinstance(data.non_tensor_batch, dict):
            for key, value in snapshot[1].items():
                assert_same_object(data.non_tensor_batch[key], value, f"non_tensor_batch.{key}")
        return
    assert_same_td(data, snapshot, "input batch")


def _indices(result: tuple[Any, Any]) -> list[list[int]]:
    micro_batches, indices = result
    if indices is not None:
        return [[int(i) for i in part] for part in indices]
    sizes = [int(mb.batch_size[0]) for mb in micro_batches]  # the static path: chunks
    starts = [sum(sizes[:m]) for m in range(len(sizes))]
    return [list(range(start, start + size)) for start, size in zip(starts, sizes, strict=True)]


def test_the_catalogue_covers_every_entry_kind() -> None:
    names = [poison.name for poison in P.POISONS]
    assert len(names) == len(set(names)) >= 40
    for kind in ("sparse_coo", "sparse_csr", "lazy_stack_ragged_entry", "nested_strided",
                 "jagged_input_ids", "non_tensor_stack_objects", "meta_dense_entry",
                 "zero_size_dim", "non_contiguous_view", "non_tensor_data_array",
                 "proto_non_tensor_pairs", "proto_meta_info_not_copyable"):
        assert kind in names


@pytest.mark.parametrize("poison", P.POISONS, ids=lambda poison: poison.name)
def test_poisoned_batch_restores_bit_for_bit_or_is_refused_untouched(poison: Any) -> None:
    entry = poison.build()
    snapshot = _snapshot(poison.build())
    if poison.error is not None:
        with pytest.raises((TypeError, ValueError)) as info:
            P.call(entry)
        assert type(info.value).__name__ == poison.error
        assert poison.fragment in str(info.value)
        _assert_unchanged(entry, snapshot)
        return
    result = P.call(entry)
    indices = _indices(result)
    assert len(indices) == poison.count
    assert sorted(i for part in indices for i in part) == list(range(len(P.LENGTHS)))
    _assert_unchanged(entry, snapshot)
    parts = [getattr(part, "batch", part) for part in result[0]]
    assert_same_td(restore_dynamic_batch(parts, indices), snapshot[0] if isinstance(snapshot, tuple)
                   else snapshot, "restored batch")
    if isinstance(snapshot, tuple):  # a DataProto: its non-tensor arrays follow the rows
        for key, array in snapshot[1].items():
            joined = np.concatenate([part.non_tensor_batch[key] for part in result[0]])
            order = np.argsort([i for part in indices for i in part], kind="stable")
            assert np.array_equal(joined[order], array)

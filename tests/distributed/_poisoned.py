"""Poisoned batches: every entry kind TensorDict allows, and the cases of issue 20.

Each :class:`Poison` builds one rank's call (the poisoned batch) and its peer's call (a
valid batch of the same path), and says what the call must do: return ``count``
micro-batches, or raise ``error`` with ``fragment`` in the message. The rule it checks
(DESIGN, "Fail before the collective"): a batch either plans and cuts, or is refused
before the one collective, so that under agreement both ranks raise the same exception or
both return the same count.

Used by the 2-rank gloo suite ``poison`` (``_workers.py``: one process group for every
kind, each kind once with rank 0 poisoned and once with rank 1) and by the single-process
test ``tests/contracts/test_poisoned.py`` (the cut restores bit for bit, or the call raises
``ValueError``/``TypeError`` and leaves the input as it was). torch is imported lazily:
the worker imports this module before it joins the group.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from _malformed import Proto  # whoever imports this module puts its folder on sys.path

#: The cap every dynamic call uses; :data:`LENGTHS` need 4 micro-batches under it.
CAP = 8
LENGTHS = [5, 3, 7, 2, 6, 4]
#: Micro-batches of the static path: 6 rows in chunks of ``micro_batch_size_per_gpu=2``.
STATIC_COUNT = 3

#: Micro-batches of the valid peer's call, by path: under agreement both ranks get the larger.
PEER_COUNT = {"dynamic": 4, "proto": 4, "static": STATIC_COUNT}

#: (call name, positional args, keyword args); the caller adds ``dp_group``.
Call = tuple[str, tuple[Any, ...], dict[str, Any]]


@dataclass(frozen=True)
class Poison:
    name: str
    build: Callable[[], Call]
    count: int | None = 4  # micro-batches returned, or None when the call raises
    error: str | None = None  # "TypeError" or "ValueError"
    fragment: str = ""
    peer: str = "dynamic"  # the valid call of the other rank: "dynamic", "static", "proto"


# ---------------------------------------------------------------------------------------
# Building blocks
# ---------------------------------------------------------------------------------------


def masked(lens: list[int] | None = None, **extra: Any) -> Any:
    """A right-padded ``attention_mask`` batch of ``lens`` plus ``extra`` entries."""
    import torch
    from tensordict import TensorDict

    lens = LENGTHS if lens is None else lens
    mask = torch.zeros(len(lens), max([*lens, 1]) + 1, dtype=torch.long)
    for row, length in enumerate(lens):
        mask[row, :length] = 1
    batch = TensorDict({"attention_mask": mask, "sample_id": torch.arange(len(lens))},
                       batch_size=[len(lens)])
    for key, value in extra.items():
        batch[key] = value
    return batch


def rows(width: int = 5, dtype: Any = None) -> Any:
    """A ``(6, width)`` tensor with distinct values and zeros (sparse-friendly)."""
    import torch

    values = torch.arange(6 * width, dtype=torch.float32).reshape(6, width) % 7
    return values if dtype is None else values.to(dtype)


def jagged(lengths: list[int], trailing: tuple[int, ...] = (), device: str = "cpu") -> Any:
    import torch

    parts = [torch.arange(n * max(1, _prod(trailing)), dtype=torch.float32, device=device)
             .reshape(n, *trailing) for n in lengths]
    return torch.nested.nested_tensor(parts, layout=torch.jagged)


def _prod(values: tuple[int, ...]) -> int:
    out = 1
    for value in values:
        out *= value
    return out


def lazy_rows(ragged_mask: bool = False, ragged_entry: bool = True) -> Any:
    """A lazy stack (dim 0) of one TensorDict per sample."""
    import torch
    from tensordict import LazyStackedTensorDict, TensorDict

    tds = []
    for i, length in enumerate(LENGTHS):
        width = length if ragged_mask else 8
        mask = torch.zeros(width, dtype=torch.long)
        mask[:length] = 1
        extra = torch.arange(i + 1 if ragged_entry else 3, dtype=torch.float32)
        tds.append(TensorDict({"attention_mask": mask, "x": extra, "sample_id": torch.tensor(i)}, []))
    return LazyStackedTensorDict.lazy_stack(tds, 0)


def rearrange(batch: Any) -> Call:
    return "rearrange_micro_batches", (batch, CAP), {}


def static(batch: Any) -> Call:
    from tensordict import NonTensorData

    batch["use_dynamic_bsz"] = NonTensorData(False)
    batch["micro_batch_size_per_gpu"] = NonTensorData(2)
    return "prepare_micro_batches", (batch,), {}


def static_with(**settings: Any) -> Call:
    """The static path called with keyword settings (issue 25: the cost settings)."""
    name, args, _ = static(masked())
    return name, args, settings


def proto(non_tensor_batch: Any = None, meta_info: Any = None, **extra: Any) -> Call:
    import numpy as np

    if non_tensor_batch is None:
        non_tensor_batch = {"uid": np.array([f"u{i}" for i in range(len(LENGTHS))], dtype=object)}
    return "prepare_dynamic_batch", (Proto(masked(**extra), non_tensor_batch, meta_info), CAP), {}


def proto_of(batch: Any) -> Call:
    """``prepare_dynamic_batch`` of a DataProto around ``batch``."""
    import numpy as np

    return "prepare_dynamic_batch", (Proto(batch, {"uid": np.arange(len(LENGTHS))}), CAP), {}


def peer_call(poison: Poison) -> Call:
    """The valid call of the rank that is not poisoned."""
    if poison.peer == "static":
        return static(masked())
    if poison.peer == "proto":
        return proto()
    return rearrange(masked())


def prepare_dynamic(batch: Any) -> Call:
    """``prepare_micro_batches`` on its dynamic path, with the cap stored in the batch."""
    from tensordict import NonTensorData

    batch["max_token_len_per_gpu"] = NonTensorData(CAP)
    return "prepare_micro_batches", (batch,), {}


class _NoDeepCopy:
    def __deepcopy__(self, memo: Any) -> Any:
        raise TypeError("this object cannot be deep-copied")


# ---------------------------------------------------------------------------------------
# The poisoned batches
# ---------------------------------------------------------------------------------------


def _t() -> Any:
    import torch

    return torch


def _td() -> Any:
    import tensordict

    return tensordict


def _lazy_dim1() -> Any:
    torch, td = _t(), _td()
    parts = [td.TensorDict({"y": torch.zeros(6, k)}, [6]) for k in (1, 2)]
    return td.LazyStackedTensorDict.lazy_stack(parts, 1)


def _lazy_dim1_uniform() -> Any:
    torch, td = _t(), _td()
    parts = [td.TensorDict({"y": torch.full((6, 2), float(k))}, [6]) for k in (1, 2)]
    return td.LazyStackedTensorDict.lazy_stack(parts, 1)


def _non_tensor_stack(objects: list[Any]) -> Any:
    td = _td()
    return td.NonTensorStack(*(td.NonTensorData(obj) for obj in objects))


def _meta_mask() -> Any:
    torch, td = _t(), _td()
    return td.TensorDict({"attention_mask": torch.ones(6, 8, device="meta")}, batch_size=[6])


def _jagged_ids() -> Any:
    torch, td = _t(), _td()
    ids = torch.nested.nested_tensor([torch.arange(n) for n in LENGTHS], layout=torch.jagged)
    return td.TensorDict({"input_ids": ids, "sample_id": torch.arange(6)}, batch_size=[6])


def _jagged_with_holes() -> Any:
    torch = _t()
    values = torch.arange(60, dtype=torch.float32)
    offsets = torch.tensor([0, 10, 20, 30, 40, 50, 60])
    lengths = torch.tensor(LENGTHS)
    return torch.nested.nested_tensor_from_jagged(values, offsets, lengths=lengths)


def _jagged_ragged_dim2() -> Any:
    torch = _t()
    parts = [torch.arange(3 * n, dtype=torch.float32).reshape(3, n) for n in LENGTHS]
    values = torch.cat(parts, dim=1)
    offsets = torch.tensor([0, *__import__("itertools").accumulate(LENGTHS)])
    return torch.nested.nested_tensor_from_jagged(values, offsets, jagged_dim=2)


def _sparse_mask() -> Any:
    batch = masked()
    batch["attention_mask"] = batch["attention_mask"].to_sparse()
    return batch


POISONS: list[Poison] = [
    # issue 20, case 1: sparse entries, batch dimension first
    Poison("sparse_coo", lambda: rearrange(masked(sp=rows().to_sparse()))),
    Poison("sparse_coo_hybrid", lambda: rearrange(masked(sp=rows().reshape(6, 5, 1).to_sparse(1)))),
    Poison("sparse_csr", lambda: rearrange(masked(sp=rows().to_sparse_csr()))),
    Poison("sparse_csc", lambda: rearrange(masked(sp=rows().to_sparse_csc()))),
    Poison("sparse_bsr", lambda: rearrange(masked(sp=rows(4).to_sparse_bsr((2, 2)))), None,
           "TypeError", "entry 'sp' has a tensor layout whose rows cannot be picked"),
    Poison("sparse_csr_batched", lambda: rearrange(masked(sp=rows(6).reshape(6, 2, 3).to_sparse_csr())),
           None, "TypeError", "entry 'sp' has a tensor layout whose rows cannot be picked"),
    Poison("sparse_mask", lambda: rearrange(_sparse_mask()), None, "ValueError",
           "the effective lengths could not be read"),
    # issue 20, case 2: lazy stacks
    Poison("lazy_stack_ragged_entry", lambda: rearrange(lazy_rows())),
    Poison("lazy_stack_ragged_mask", lambda: rearrange(lazy_rows(ragged_mask=True))),
    Poison("lazy_stack_uniform", lambda: rearrange(lazy_rows(ragged_entry=False))),
    Poison("lazy_stack_as_entry", lambda: rearrange(masked(sub=lazy_rows()))),
    Poison("lazy_stack_dim1_ragged", lambda: rearrange(masked(sub=_lazy_dim1())), None, "TypeError",
           "entry 'sub' is a lazy stack along a dimension other than the batch dimension"),
    Poison("lazy_stack_dim1_uniform", lambda: rearrange(masked(sub=_lazy_dim1_uniform()))),
    # issue 20, case 3: NonTensorData holding an array or a tensor, and other non-tensors
    Poison("non_tensor_data_array",
           lambda: rearrange(masked(meta=_td().NonTensorData(__import__("numpy").array([1, 2]))))),
    Poison("non_tensor_data_tensor",
           lambda: rearrange(masked(meta=_td().NonTensorData(_t().tensor([1, 2]))))),
    Poison("non_tensor_data_dict", lambda: rearrange(masked(meta=_td().NonTensorData({"a": [1, 2]})))),
    Poison("non_tensor_data_none", lambda: rearrange(masked(meta=_td().NonTensorData(None)))),
    Poison("non_tensor_stack_objects",
           lambda: rearrange(masked(obj=_non_tensor_stack([{"turn": i, "s": "x" * i} for i in range(6)])))),
    Poison("non_tensor_stack_arrays",
           lambda: rearrange(masked(obj=_non_tensor_stack(
               [__import__("numpy").arange(i) for i in range(6)])))),
    Poison("non_tensor_stack_tensors",
           lambda: rearrange(masked(obj=_non_tensor_stack([_t().arange(i) for i in range(6)])))),
    # nested tensors
    Poison("nested_strided", lambda: rearrange(masked(ns=_t().nested.nested_tensor(
        [_t().ones(i + 1, 2) * i for i in range(6)])))),
    Poison("jagged_input_ids", lambda: rearrange(_jagged_ids())),
    Poison("jagged_with_holes", lambda: rearrange(masked(j=_jagged_with_holes()))),
    Poison("jagged_ragged_dim_2", lambda: rearrange(masked(j=_jagged_ragged_dim2()))),
    Poison("jagged_trailing_dims", lambda: rearrange(masked(j=jagged([2, 1, 3, 1, 2, 4], (3, 2))))),
    # the meta device
    Poison("meta_dense_entry", lambda: rearrange(masked(m=_t().zeros(6, 3, device="meta")))),
    Poison("meta_jagged_entry", lambda: rearrange(masked(j=jagged([1, 2, 3, 1, 2, 3], device="meta"))),
           None, "ValueError", "entry 'j' is on the meta device"),
    Poison("meta_mask", lambda: rearrange(_meta_mask()), None, "ValueError",
           "the effective lengths could not be read"),
    # shapes, strides, dtypes
    Poison("zero_size_dim", lambda: rearrange(masked(z=_t().zeros(6, 0, 3)))),
    Poison("zero_width_mask", lambda: rearrange(masked([0] * 6)), 1),
    Poison("non_contiguous_view", lambda: rearrange(masked(v=rows(12).t().contiguous().t()[:, ::2]))),
    Poison("transposed_mask", lambda: rearrange(masked(attention_mask=masked()["attention_mask"]
                                                       .t().contiguous().t()))),
    Poison("expanded_stride_0", lambda: rearrange(masked(e=_t().arange(3.0).expand(6, 3)))),
    Poison("channels_last", lambda: rearrange(masked(c=rows(24).reshape(6, 2, 3, 4)
                                                     .to(memory_format=_t().channels_last)))),
    Poison("complex_bool_uint8", lambda: rearrange(masked(c=rows().to(_t().complex64), b=rows() > 2,
                                                          u=rows(dtype=_t().uint8)))),
    Poison("requires_grad_leaf", lambda: rearrange(masked(g=rows().requires_grad_()))),
    Poison("nested_tensordict", lambda: rearrange(masked(sub=_td().TensorDict(
        {"a": rows(), "deeper": _td().TensorDict({"b": rows(2)}, [6])}, [6])))),
    Poison("memory_mapped_entry", lambda: rearrange(masked(mm=_td().MemoryMappedTensor.from_tensor(rows())))),
    Poison("batch_with_a_device", lambda: rearrange(masked().to("cpu"))),
    Poison("bfloat16_mask", lambda: rearrange(masked(attention_mask=masked()["attention_mask"]
                                                     .to(_t().bfloat16)))),
    Poison("empty_batch", lambda: rearrange(masked([])), None, "ValueError", "the batch has no samples"),
    # issue 20, case 6: DataProto parts
    Poison("proto_non_tensor_pairs",
           lambda: proto(non_tensor_batch=[("uid", __import__("numpy").arange(6))]), None, "TypeError",
           "data must be DataProto-like", peer="proto"),
    Poison("proto_meta_info_not_copyable", lambda: proto(meta_info={"x": _NoDeepCopy()}), None,
           "TypeError", "meta_info cannot be deep-copied", peer="proto"),
    Poison("proto_lazy_stack_ragged", lambda: proto_of(lazy_rows()), None, "TypeError",
           "entry 'x' of data.batch is a lazy stack whose rows differ in shape", peer="proto"),
    Poison("proto_lazy_stack_uniform", lambda: proto_of(lazy_rows(ragged_entry=False)), peer="proto"),
    Poison("proto_with_sparse_and_jagged",
           lambda: proto(sp=rows().to_sparse(), j=jagged([2, 1, 3, 1, 2, 4])), peer="proto"),
    # the static path (use_dynamic_bsz=False) with the same entry kinds
    Poison("static_sparse_coo", lambda: static(masked(sp=rows().to_sparse())), STATIC_COUNT,
           peer="static"),
    Poison("static_sparse_csr", lambda: static(masked(sp=rows().to_sparse_csr())), STATIC_COUNT,
           peer="static"),
    Poison("static_jagged", lambda: static(masked(j=_jagged_ragged_dim2())), STATIC_COUNT,
           peer="static"),
    Poison("static_lazy_stack_as_entry", lambda: static(masked(sub=lazy_rows())), STATIC_COUNT,
           peer="static"),
    Poison("static_lazy_stack", lambda: static(lazy_rows()), STATIC_COUNT, peer="static"),
    Poison("prepare_lazy_stack", lambda: prepare_dynamic(lazy_rows(ragged_mask=True))),
    Poison("static_sparse_bsr", lambda: static(masked(sp=rows(4).to_sparse_bsr((2, 2)))), None,
           "TypeError", "entry 'sp' has a tensor layout whose rows cannot be picked", peer="static"),
    # issue 25: a cost setting on the static path would change nothing (no cap there)
    Poison("static_with_pad_to_multiple_of", lambda: static_with(pad_to_multiple_of=8), None,
           "ValueError", "pad_to_multiple_of=8 applies to the dynamic path", peer="static"),
    Poison("static_with_costs", lambda: static_with(costs=[1] * 6), None,
           "ValueError", "costs applies to the dynamic path", peer="static"),
    Poison("static_with_the_defaults", lambda: static_with(pad_to_multiple_of=1, micro_batch_multiple_of=1),
           STATIC_COUNT, peer="static"),
]


def call(entry: Call, **extra: Any) -> Any:
    """Run one call (``extra``: e.g. ``dp_group``)."""
    import seqlen_balancing

    name, args, kwargs = entry
    return getattr(seqlen_balancing, name)(*args, **kwargs, **extra)

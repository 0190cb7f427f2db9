"""A catalogue of malformed inputs for the public entry points that take ``dp_group``.

Each :class:`Kind` builds, for one call, the arguments of the rank that gets the malformed
input (``faulty=True``) and of a rank with valid data (``faulty=False``), from a seeded
``random.Random`` so that the valid data varies between rounds. It also states what every
rank of a 2-rank DP group must raise (the exception type, a fragment of the message, and
whether the message names the faulty rank), and what the faulty input alone raises when
planned locally (``dp_group=None``): ``None`` when the input is only wrong next to its peer
(mixed modes, different static counts or divisors, too few samples for the agreed count).

Used by the 2-rank gloo fuzz test (``_workers.py`` suite ``fuzz``) and by the local test in
``tests/test_hardening.py``. Everything in issue 10's points 1-6 and the older hardening
cases is here; the catalogue holds :data:`KINDS`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

CAP = 64

#: (call name, positional args, keyword args); the caller adds ``dp_group``.
Call = tuple[str, tuple[Any, ...], dict[str, Any]]


@dataclass(frozen=True)
class Kind:
    name: str
    build: Callable[[bool, random.Random], Call]
    error: str  # "TypeError" or "ValueError"
    fragment: str
    names_faulty_rank: bool = True  # the message starts with "rank R of the DP group ..."
    local_error: str | None = "same"  # the faulty input planned alone: "same" or None (valid)
    # the faulty input planned alone when it differs from the group's (type, fragment): a
    # value only wrong alone that also differs from the peer's is a mismatch in the group
    alone: tuple[str, str] | None = None


# ---------------------------------------------------------------------------------------
# Building blocks (torch is imported lazily: the worker imports this before init)
# ---------------------------------------------------------------------------------------


def lengths(rng: random.Random, n: int | None = None, cap: int = CAP) -> list[int]:
    n = rng.randint(2, 9) if n is None else n
    return [rng.randint(0, cap) for _ in range(n)]


def masked(lens: list[int], extra: dict[str, Any] | None = None) -> Any:
    import torch
    from tensordict import TensorDict

    width = max([*lens, 1]) + 2
    mask = torch.zeros(len(lens), width, dtype=torch.long)
    for row, length in enumerate(lens):
        mask[row, :length] = 1
    batch = TensorDict({"attention_mask": mask, "sample_id": torch.arange(len(lens))},
                       batch_size=[len(lens)])
    for key, value in (extra or {}).items():
        batch[key] = value
    return batch


def settings(lens: list[int], **values: Any) -> Any:
    from tensordict import NonTensorData

    return masked(lens, {key: NonTensorData(value) for key, value in values.items()})


class Proto:
    """A minimal DataProto stand-in (no verl import)."""

    def __init__(self, batch: Any, non_tensor_batch: Any = None, meta_info: Any = None) -> None:
        self.batch = batch
        self.non_tensor_batch = {} if non_tensor_batch is None else non_tensor_batch
        self.meta_info = {} if meta_info is None else meta_info

    @classmethod
    def from_dict(cls, tensors: Any, non_tensors: Any, meta_info: Any = None) -> Proto:
        from tensordict import TensorDict

        size = len(next(iter(tensors.values())))
        return cls(TensorDict(tensors, batch_size=[size]), non_tensors, meta_info)


def proto(lens: list[int], non_tensor_batch: Any = None) -> Proto:
    import numpy as np

    if non_tensor_batch is None:
        non_tensor_batch = {"uid": np.array([f"u{i}" for i in range(len(lens))])}
    return Proto(masked(lens), non_tensor_batch)


def rearrange(batch: Any, cap: Any = CAP, **kwargs: Any) -> Call:
    return "rearrange_micro_batches", (batch, cap), kwargs


def prepare(batch: Any, **kwargs: Any) -> Call:
    return "prepare_micro_batches", (batch,), kwargs


def dynamic(data: Any, cap: Any = CAP, **kwargs: Any) -> Call:
    return "prepare_dynamic_batch", (data, cap), kwargs


def valid_rearrange(rng: random.Random) -> Call:
    return rearrange(masked(lengths(rng)))


def valid_static(rng: random.Random, rows: int = 8) -> Call:
    return prepare(settings(lengths(rng, rows), use_dynamic_bsz=False, micro_batch_size_per_gpu=2))


def valid_prepare(rng: random.Random) -> Call:
    return prepare(settings(lengths(rng), max_token_len_per_gpu=CAP))


Builder = Callable[[bool, random.Random], Call]


def _r(faulty_call: Callable[[random.Random], Call],
       valid_call: Callable[[random.Random], Call] = valid_rearrange) -> Builder:
    def build(faulty: bool, rng: random.Random) -> Call:
        return faulty_call(rng) if faulty else valid_call(rng)

    return build


def _meta_mask(rng: random.Random) -> Call:
    import torch
    from tensordict import TensorDict

    n = rng.randint(2, 6)
    return rearrange(TensorDict({"attention_mask": torch.ones(n, 4, device="meta")}, batch_size=[n]))


def _meta_jagged_entry(rng: random.Random) -> Call:
    import torch

    lens = lengths(rng)
    rows = [torch.ones(k + 1, device="meta") for k in lens]
    return rearrange(masked(lens, {"extra": torch.nested.nested_tensor(rows, layout=torch.jagged)}))


def _dense_ids_only(rng: random.Random) -> Call:
    import torch
    from tensordict import TensorDict

    n = rng.randint(2, 6)
    return rearrange(TensorDict({"input_ids": torch.ones(n, 5, dtype=torch.long)}, batch_size=[n]))


def _mask_3d(rng: random.Random) -> Call:
    import torch
    from tensordict import TensorDict

    n = rng.randint(2, 6)
    return rearrange(TensorDict({"attention_mask": torch.ones(n, 3, 2)}, batch_size=[n]))


def _mask_rows(rng: random.Random) -> Call:
    import torch
    from tensordict import TensorDict

    n = rng.randint(3, 6)
    batch = TensorDict({"x": torch.zeros(n)}, batch_size=[n])
    batch.set_non_tensor("attention_mask", torch.ones(n - 1, 4))
    return rearrange(batch)


def _no_batch_dim(rng: random.Random) -> Call:
    import torch
    from tensordict import TensorDict

    return rearrange(TensorDict({"attention_mask": torch.ones(3, 4)}, batch_size=[]))


def _jagged_over_cap(rng: random.Random) -> Call:
    import torch
    from tensordict import TensorDict

    rows = [torch.arange(n) for n in [3, CAP + 1 + rng.randint(0, 9), 2]]
    ids = torch.nested.nested_tensor(rows, layout=torch.jagged)
    return rearrange(TensorDict({"input_ids": ids}, batch_size=[3]))


def _over_cap(rng: random.Random) -> Call:
    lens = lengths(rng)
    lens[rng.randrange(len(lens))] = CAP + rng.randint(1, 100)
    return rearrange(masked(lens))


def _count_above_samples(faulty: bool, rng: random.Random) -> Call:
    # The peer needs at least 3 micro-batches (full samples); the faulty rank has 1 sample.
    return rearrange(masked([5] if faulty else [CAP] * rng.randint(3, 6)))


def _divisor_differs(faulty: bool, rng: random.Random) -> Call:
    return rearrange(masked(lengths(rng, 8)), num_batches_divided_by=2 if faulty else 1)


def _static(rows: int) -> Callable[[bool, random.Random], Call]:
    def build(faulty: bool, rng: random.Random) -> Call:
        return valid_static(rng, rows) if faulty else valid_static(rng)

    return build


def _mixed(faulty: bool, rng: random.Random) -> Call:
    return valid_static(rng) if faulty else prepare(settings(lengths(rng, 8), max_token_len_per_gpu=CAP))


def _not_array(rng: random.Random) -> Call:
    lens = lengths(rng)
    return dynamic(proto(lens, {"uid": [f"u{i}" for i in range(len(lens))]}))


def _array_rows(rng: random.Random) -> Call:
    import numpy as np

    lens = lengths(rng, rng.randint(3, 7))
    return dynamic(proto(lens, {"uid": np.arange(len(lens) - 1)}))


def _proto_batch_not_td(rng: random.Random) -> Call:
    return dynamic(Proto({"attention_mask": [1, 1]}))


def _valid_proto(rng: random.Random) -> Call:
    return dynamic(proto(lengths(rng)))


def _padded_over_cap(rng: random.Random) -> Call:
    # Issue 26: a group of 2 rows of up to CAP / 2 + 1 tokens fits summed (2 x CAP / 2 is
    # CAP only when both are short), but padded it is 2 rows x its widest row, over the cap.
    lens = [rng.randint(1, 8), CAP // 2 + rng.randint(1, 9), rng.randint(1, 8), rng.randint(1, 8)]
    return rearrange(masked(lens), padded=True, force_group_size=2)


def _padded_lazy_stack(rng: random.Random) -> Call:
    import torch
    from tensordict import LazyStackedTensorDict, TensorDict

    rows = [TensorDict({"attention_mask": torch.ones(4, dtype=torch.long)}, []) for _ in range(3)]
    return rearrange(LazyStackedTensorDict.lazy_stack(rows, 0), padded=True)


_H = 2**70

def _weighted(lens: list[int], key: str = "loss_mask") -> Any:
    """A masked batch with a loss-weight entry (what dummy micro-batches zero)."""
    batch = masked(lens)
    batch[key] = batch["attention_mask"].float()
    return batch


def _with_dummies(rng: random.Random, **kwargs: Any) -> Call:
    return rearrange(_weighted(lengths(rng)), dummy_micro_batches=True, **kwargs)


def _raising_workloads(found: list[int]) -> list[int]:
    raise RuntimeError("the caller's cost model failed")


def _fine_workloads(found: list[int]) -> list[int]:
    return [2 * n for n in found]


def _padded_peer(rng: random.Random) -> Call:
    return rearrange(masked([rng.randint(1, 8) for _ in range(4)]), padded=True, force_group_size=2)


def _prepare_dummies_peer(rng: random.Random) -> Call:
    batch = settings(lengths(rng), max_token_len_per_gpu=CAP, dummy_micro_batches=True)
    batch["loss_mask"] = batch["attention_mask"].float()
    return prepare(batch)


def _workloads_peer(rng: random.Random) -> Call:
    lens = lengths(rng)
    return rearrange(masked(lens), workloads=[1] * len(lens))


class _RaisingSequence:
    """A sequence of two costs whose iteration raises (a caller's lazy container)."""

    def __len__(self) -> int:
        return 2

    def __getitem__(self, index: int) -> int:
        return 1 // 0


Sequence.register(_RaisingSequence)


KINDS: list[Kind] = [
    # rearrange_micro_batches: the batch itself
    Kind("batch_none", _r(lambda rng: rearrange(None)), "TypeError",
         "batch must be a TensorDict with a batch dimension"),
    Kind("batch_plain_dict", _r(lambda rng: rearrange({"attention_mask": [[1, 1]]})), "TypeError",
         "batch must be a TensorDict with a batch dimension"),
    Kind("batch_without_batch_dim", _r(_no_batch_dim), "TypeError",
         "batch must be a TensorDict with a batch dimension"),
    Kind("no_length_source", _r(_dense_ids_only), "ValueError",
         "neither an 'attention_mask' nor jagged (nested) 'input_ids'"),
    Kind("mask_3d", _r(_mask_3d), "ValueError", "attention_mask must be 2-D"),
    Kind("mask_rows", _r(_mask_rows), "ValueError", "rows but the batch has"),
    Kind("mask_on_meta_device", _r(_meta_mask), "ValueError", "the effective lengths could not be read"),
    Kind("jagged_entry_on_meta_device", _r(_meta_jagged_entry), "ValueError",
         "entry 'extra' is on the meta device"),
    Kind("empty_batch", _r(lambda rng: rearrange(masked([]))), "ValueError", "the batch has no samples"),
    Kind("sample_over_cap", _r(_over_cap), "ValueError", f"exceeds max_token_len={CAP}"),
    Kind("jagged_sample_over_cap", _r(_jagged_over_cap), "ValueError", f"exceeds max_token_len={CAP}"),
    # rearrange_micro_batches: arguments
    Kind("cap_zero", _r(lambda rng: rearrange(masked(lengths(rng)), 0)), "ValueError",
         "max_token_len must be a positive integer (>= 1), got 0"),
    Kind("cap_float", _r(lambda rng: rearrange(masked(lengths(rng)), 64.0)), "TypeError",
         "max_token_len must be a positive integer, got a value that is not an integer"),
    Kind("cap_str", _r(lambda rng: rearrange(masked(lengths(rng)), "64")), "TypeError",
         "max_token_len must be a positive integer"),
    Kind("cap_beyond_int64", _r(lambda rng: rearrange(masked(lengths(rng)), -_H)), "ValueError",
         f"max_token_len must be a positive integer (>= 1), got {-_H}"),
    Kind("cap_two_element_tensor",
         _r(lambda rng: rearrange(masked(lengths(rng)), __import__("torch").tensor([64, 64]))),
         "TypeError", "max_token_len must be a positive integer"),
    Kind("force_group_not_dividing",
         _r(lambda rng: rearrange(masked(lengths(rng, 5, CAP // 2)), force_group_size=2),
            lambda rng: rearrange(masked(lengths(rng, 4, CAP // 2)), force_group_size=2)),
         "ValueError", "batch size 5 is not divisible by force_group_size=2"),
    Kind("forced_group_over_cap",
         _r(lambda rng: rearrange(masked([CAP, CAP, 1, 1]), force_group_size=2),
            lambda rng: rearrange(masked([1, 2, 3, 4]), force_group_size=2)),
         "ValueError", "forced group exceeds max_token_len"),
    Kind("min_num_above_samples", _r(lambda rng: rearrange(masked([1, 2]), min_num_micro_batch=3),
                                     lambda rng: rearrange(masked([1, 2, 3]), min_num_micro_batch=3)),
         "ValueError", "min_num_micro_batch=3 asks for more micro-batches than the 2"),
    Kind("min_num_zero", _r(lambda rng: rearrange(masked(lengths(rng)), min_num_micro_batch=0)),
         "ValueError", "min_num_micro_batch must be a positive integer (>= 1), got 0"),
    Kind("divisor_beyond_int64",
         _r(lambda rng: rearrange(masked(lengths(rng, 4)), num_batches_divided_by=2**63)),
         "ValueError", "the ranks passed different num_batches_divided_by: rank",
         names_faulty_rank=False,
         alone=("ValueError", f"rounded up to {2**63} for num_batches_divided_by")),
    Kind("divisor_bool", _r(lambda rng: rearrange(masked(lengths(rng)), num_batches_divided_by=True)),
         "TypeError", "num_batches_divided_by must be a positive integer"),
    Kind("same_micro_num_in_dp_not_bool",
         _r(lambda rng: rearrange(masked(lengths(rng)), same_micro_num_in_dp="yes")),
         "TypeError", "same_micro_num_in_dp must be a bool (or 0/1)"),
    Kind("balance_switch_not_bool",
         _r(lambda rng: rearrange(masked(lengths(rng)), use_dynamic_bsz_balance="no")),
         "TypeError", "use_dynamic_bsz_balance must be a bool (or 0/1)"),
    # only wrong next to the peer: agreed errors
    Kind("count_above_samples", _count_above_samples, "ValueError",
         "micro-batches are needed but only 1 samples/groups are available",
         local_error=None),
    Kind("divisor_differs", _divisor_differs, "ValueError",
         "the ranks passed different num_batches_divided_by: rank",
         names_faulty_rank=False, local_error=None),
    Kind("cap_differs", lambda faulty, rng: rearrange(masked(lengths(rng, 4, 8)), 16 if faulty else 8),
         "ValueError", "the ranks passed different max_token_len: rank",
         names_faulty_rank=False, local_error=None),
    Kind("option_differs",
         lambda faulty, rng: rearrange(masked(lengths(rng, 6)),
                                       max_samples_per_micro_batch=2 if faulty else None),
         "ValueError", "the ranks passed different max_samples_per_micro_batch: rank",
         names_faulty_rank=False, local_error=None),
    # prepare_micro_batches (settings in the TensorDict, static path, modes)
    Kind("prepare_none", _r(lambda rng: prepare(None), valid_prepare), "TypeError",
         "batch must be a TensorDict with a batch dimension"),
    Kind("prepare_missing_budget", _r(lambda rng: prepare(settings(lengths(rng))), valid_prepare),
         "ValueError", "the batch has no 'max_token_len_per_gpu' setting"),
    Kind("prepare_budget_float",
         _r(lambda rng: prepare(settings(lengths(rng), max_token_len_per_gpu=64.5)), valid_prepare),
         "TypeError", "max_token_len_per_gpu must be a positive integer"),
    Kind("prepare_sp_size_zero",
         _r(lambda rng: prepare(settings(lengths(rng), max_token_len_per_gpu=CAP, sp_size=0)),
            valid_prepare),
         "ValueError", "sp_size must be a positive integer (>= 1), got 0"),
    Kind("prepare_switch_str",
         _r(lambda rng: prepare(settings(lengths(rng), use_dynamic_bsz="False",
                                         max_token_len_per_gpu=CAP)), valid_prepare),
         "TypeError", "use_dynamic_bsz must be a bool (or 0/1)"),
    Kind("prepare_over_budget",
         _r(lambda rng: prepare(settings([1, CAP + 5], max_token_len_per_gpu=CAP)), valid_prepare),
         "ValueError", f"sample 1 has {CAP + 5} tokens, which exceeds max_token_len={CAP}"),
    Kind("static_not_divisible", _static(7), "ValueError",
         "batch size 7 is not a positive multiple of micro_batch_size_per_gpu * force_group_size = 2 * 1"),
    Kind("static_size_float",
         _r(lambda rng: prepare(settings(lengths(rng, 8), use_dynamic_bsz=False,
                                         micro_batch_size_per_gpu=2.0)),
            valid_static),
         "TypeError", "micro_batch_size_per_gpu must be a positive integer"),
    Kind("static_counts_differ", _static(6), "ValueError", "would run different numbers of static",
         names_faulty_rank=False, local_error=None),
    Kind("modes_differ", _mixed, "ValueError", "disagree on use_dynamic_bsz",
         names_faulty_rank=False, local_error=None),
    # prepare_dynamic_batch (DataProto-like)
    Kind("proto_none", _r(lambda rng: dynamic(None), _valid_proto), "TypeError",
         "data must be DataProto-like"),
    Kind("proto_batch_not_tensordict", _r(_proto_batch_not_td, _valid_proto), "TypeError",
         "batch must be a TensorDict with a batch dimension"),
    Kind("proto_non_tensor_list", _r(_not_array, _valid_proto), "TypeError",
         "every non_tensor_batch entry must be a NumPy array"),
    Kind("proto_non_tensor_rows", _r(_array_rows, _valid_proto), "ValueError",
         "a non_tensor_batch array has"),
    # issue 26: padded=True and max_samples_per_micro_batch
    Kind("padded_not_bool", _r(lambda rng: rearrange(masked(lengths(rng)), padded="yes")),
         "TypeError", "padded must be a bool"),
    Kind("padded_group_over_cap", _r(_padded_over_cap, _padded_peer), "ValueError",
         "padded=True holds it as 2 rows x"),
    Kind("padded_lazy_stack",
         _r(_padded_lazy_stack, lambda rng: rearrange(masked(lengths(rng)), padded=True)), "ValueError",
         "padded=True cuts every micro-batch to its width, but the batch is a lazy stack"),
    Kind("max_samples_zero",
         _r(lambda rng: rearrange(masked(lengths(rng)), max_samples_per_micro_batch=0)),
         "ValueError", "max_samples_per_micro_batch must be a positive integer (>= 1), got 0"),
    Kind("max_samples_below_group",
         _r(lambda rng: rearrange(masked(lengths(rng, 4)), force_group_size=2,
                                  max_samples_per_micro_batch=1)),
         "ValueError", "max_samples_per_micro_batch=1 is below force_group_size=2"),
    # issue 27: over_cap, dummy micro-batches and their loss weights, workloads
    Kind("over_cap_not_a_choice", _r(lambda rng: rearrange(masked(lengths(rng)), over_cap="drop")),
         "ValueError", "over_cap must be 'raise' or 'alone', got another string"),
    Kind("over_cap_not_a_str", _r(lambda rng: rearrange(masked(lengths(rng)), over_cap=None)),
         "TypeError", "over_cap must be 'raise' or 'alone', got a value that is not a string"),
    Kind("dummies_not_bool",
         _r(lambda rng: rearrange(_weighted(lengths(rng)), dummy_micro_batches="yes")),
         "TypeError", "dummy_micro_batches must be a bool (or 0/1)"),
    Kind("dummies_without_loss_weights",
         _r(lambda rng: rearrange(masked(lengths(rng)), dummy_micro_batches=True), _with_dummies),
         "ValueError", "the batch has neither 'loss_mask' nor 'response_mask'"),
    Kind("dummies_named_key_absent",
         _r(lambda rng: _with_dummies(rng, loss_weight_keys="weights"),
            lambda rng: rearrange(_weighted(lengths(rng), "weights"), dummy_micro_batches=True,
                                  loss_weight_keys="weights")),
         "ValueError", "loss-weight key 'weights' named for the dummy micro-batches is not in"),
    Kind("prepare_dummies_without_loss_weights",
         _r(lambda rng: prepare(settings(lengths(rng), max_token_len_per_gpu=CAP,
                                         dummy_micro_batches=True)), _prepare_dummies_peer),
         "ValueError", "the batch has neither 'loss_mask' nor 'response_mask'"),
    Kind("workloads_not_one_per_sample",
         _r(lambda rng: rearrange(masked(lengths(rng, 3)), workloads=[1, 2]), _workloads_peer),
         "ValueError", "workloads has 2 entries but the batch has 3 samples"),
    # issue 30, item 6: caller data read whole before the agreement, whatever it raises
    Kind("workloads_callable_raises",
         _r(lambda rng: rearrange(masked(lengths(rng)), workloads=_raising_workloads),
            lambda rng: rearrange(masked(lengths(rng)), workloads=_fine_workloads)),
         "ValueError", "reading workloads raised RuntimeError"),
    Kind("workloads_map_raises_while_iterated",
         _r(lambda rng: rearrange(masked(lengths(rng)), workloads=lambda lens: map({}.__getitem__, lens)),
            lambda rng: rearrange(masked(lengths(rng)), workloads=lambda lens: map(int, lens))),
         "ValueError", "reading workloads raised KeyError"),
    Kind("costs_a_mapping",
         _r(lambda rng: rearrange(masked([3, 5, 2, 4]), costs={0: 9, 1: 9, 2: 9, 3: 9}),
            lambda rng: rearrange(masked([3, 5, 2, 4]), costs=[3, 5, 2, 4])),
         "TypeError", "costs must be a sequence of whole numbers of tokens, one per sample (a list, a "
         "tuple, a 1-D tensor or array), got a value of type dict"),
    Kind("costs_iteration_raises",
         _r(lambda rng: rearrange(masked([3, 5]), costs=_RaisingSequence()),
            lambda rng: rearrange(masked([3, 5]), costs=[3, 5])),
         "ValueError", "reading costs raised ZeroDivisionError"),
]


def call(entry: Call, **extra: Any) -> Any:
    """Run one call of the catalogue (``extra``: e.g. ``dp_group``)."""
    import seqlen_balancing

    name, args, kwargs = entry
    return getattr(seqlen_balancing, name)(*args, **kwargs, **extra)

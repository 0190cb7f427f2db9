"""Issue 27 on the TensorDict and DataProto API: dummies (rows, zeroed loss weights, keys
checked first, restore), over_cap="alone" (plan and warning), workloads (list, tensor,
callable, batch entry), the settings prepare_micro_batches reads from the batch."""

from __future__ import annotations

import functools
import itertools
import logging
import random
import re
from typing import Any

import numpy as np
import pytest
import torch
from tensordict import NonTensorData, TensorDict

from seqlen_balancing import (
    get_reverse_idx,
    plan_micro_batches,
    prepare_dynamic_batch,
    prepare_micro_batches,
    rearrange_micro_batches,
    restore_dynamic_batch,
)
from seqlen_balancing.cost import transformer_workloads

pytestmark = pytest.mark.torch

LOGGER = "seqlen_balancing"


def padded(lengths: list[int], keys: tuple[str, ...] = ("loss_mask",), seed: int = 0) -> Any:
    """A right-padded batch: attention_mask, input_ids, a row number and the loss keys."""
    generator = torch.Generator().manual_seed(seed)
    n, width = len(lengths), max([*lengths, 1])
    mask = torch.zeros(n, width, dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    entries = {
        "attention_mask": mask,
        "input_ids": torch.randint(1, 50, (n, width), generator=generator) * mask,
        "row": torch.arange(n),
    }
    for key in keys:
        entries[key] = mask.float()
    return TensorDict(entries, batch_size=[n])


def test_dummy_is_the_shortest_row_with_zero_loss_weights() -> None:
    batch = padded([5, 2, 7], keys=("loss_mask", "response_mask"))
    micro_batches, idx = rearrange_micro_batches(batch, 100, num_batches_divided_by=4,
                                                 dummy_micro_batches=True)
    assert len(micro_batches) == 4 and idx[3] == [] and sorted(idx[:3]) == [[0], [1], [2]]
    dummy = micro_batches[3]
    assert dummy["row"].tolist() == [1]  # length 2, the shortest
    assert torch.equal(dummy["input_ids"], batch["input_ids"][1:2])
    assert torch.equal(dummy["attention_mask"], batch["attention_mask"][1:2])
    assert dummy["loss_mask"].abs().sum() == 0 and dummy["response_mask"].abs().sum() == 0
    assert batch["loss_mask"][1].sum() == 2  # the input is untouched
    for m, part in enumerate(idx[:3]):  # the real micro-batches keep their weights
        assert torch.equal(micro_batches[m]["loss_mask"], batch["loss_mask"][part])


def test_dummy_of_a_jagged_batch_and_a_named_key() -> None:
    rows = [torch.arange(1, n + 1) for n in (4, 1, 3)]
    ids = torch.nested.as_nested_tensor(rows, layout=torch.jagged)
    weights = torch.nested.as_nested_tensor([r.float() for r in rows], layout=torch.jagged)
    batch = TensorDict({"input_ids": ids, "w": weights}, batch_size=[3])
    micro_batches, idx = rearrange_micro_batches(batch, 100, min_num_micro_batch=5,
                                                 dummy_micro_batches=True, loss_weight_keys="w")
    assert idx[3:] == [[], []]
    for dummy in micro_batches[3:]:
        assert dummy["input_ids"].unbind()[0].tolist() == [1]
        assert dummy["w"].unbind()[0].tolist() == [0.0]


def test_dummy_of_forced_groups_copies_the_shortest_group() -> None:
    batch = padded([4, 4, 1, 2, 3, 3])
    micro_batches, idx = rearrange_micro_batches(batch, 100, force_group_size=2,
                                                 num_batches_divided_by=4,
                                                 dummy_micro_batches=True)
    assert idx[3] == [] and micro_batches[3]["row"].tolist() == [2, 3]
    assert micro_batches[3]["loss_mask"].sum() == 0


@pytest.mark.parametrize(
    ("keys", "named", "error", "fragment"),
    [
        (("loss_mask",), "weights", ValueError,
         "loss-weight key 'weights' named for the dummy micro-batches is not in the batch"),
        ((), None, ValueError, "the batch has neither 'loss_mask' nor 'response_mask'"),
        (("loss_mask",), 7, TypeError, "loss_weight_keys must be a key (a string) or a list"),
        (("loss_mask",), "meta", TypeError, "loss-weight entry 'meta' is not a tensor"),
    ],
)
def test_loss_weight_keys_are_checked_first(keys: tuple[str, ...], named: Any,
                                            error: type[Exception], fragment: str) -> None:
    batch = padded([3, 2], keys=keys)
    batch["meta"] = NonTensorData("x")
    with pytest.raises(error) as caught:
        rearrange_micro_batches(batch, 100, dummy_micro_batches=True, loss_weight_keys=named)
    assert fragment in str(caught.value)
    if isinstance(named, int):  # the option's type: one validation, with dummies or without
        with pytest.raises(TypeError, match="loss_weight_keys must be a key"):
            rearrange_micro_batches(batch, 100, loss_weight_keys=named)
        return
    # Without dummies nothing about the batch's loss weights is asked.
    assert len(rearrange_micro_batches(batch, 100, loss_weight_keys=named)[0]) == 1


def test_restore_drops_the_dummies_every_way() -> None:
    batch = padded([5, 2, 7])
    micro_batches, idx = rearrange_micro_batches(batch, 100, num_batches_divided_by=4,
                                                 dummy_micro_batches=True)
    outputs = [mb["input_ids"] * 10 for mb in micro_batches]
    want = batch["input_ids"] * 10
    assert torch.equal(restore_dynamic_batch(outputs, idx), want)
    assert torch.equal(restore_dynamic_batch(torch.cat(outputs), idx), want)
    flat = list(itertools.chain.from_iterable(idx))  # verl's own restore
    assert torch.equal(torch.cat(outputs)[torch.tensor(get_reverse_idx(flat))], want)
    tds = [mb.select("row", "input_ids") for mb in micro_batches]
    restored = restore_dynamic_batch(tds, idx)
    assert restored["row"].tolist() == [0, 1, 2]
    assert restore_dynamic_batch(torch.cat(tds), idx)["row"].tolist() == [0, 1, 2]
    jagged = torch.nested.as_nested_tensor(
        [row[: int(n)] for mb in micro_batches for row, n in
         zip(mb["input_ids"], mb["attention_mask"].sum(-1), strict=True)], layout=torch.jagged)
    back = restore_dynamic_batch(jagged, idx)
    assert [r.tolist() for r in back.unbind()] == [
        batch["input_ids"][i, :n].tolist() for i, n in enumerate([5, 2, 7])]
    with pytest.raises(ValueError, match=r"batch_idx_list\[0\] is empty but a later index list"):
        restore_dynamic_batch(torch.cat(outputs), [[], *idx[:3]])


def test_over_cap_alone_on_a_tensordict(caplog: pytest.LogCaptureFixture) -> None:
    batch = padded([5000, 100, 200])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        micro_batches, idx = rearrange_micro_batches(batch, 4096, over_cap="alone")
    assert idx == [[0], [1, 2]]
    assert int(micro_batches[0]["attention_mask"].sum()) == 5000
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [
        "sample 0 costs 5000 tokens, over max_token_len=4096: it runs alone in a micro-batch "
        "of its own (over_cap='alone'), the only micro-batch over the cap; it may run out of "
        "memory"
    ]
    with pytest.raises(ValueError, match="exceeds max_token_len=4096"):
        rearrange_micro_batches(batch, 4096)


@pytest.mark.parametrize("form", ["list", "tensor", "callable", "entry"])
def test_workloads_in_every_form_put_the_long_sample_alone(form: str) -> None:
    lengths = [4096] + [1024] * 8
    batch = padded(lengths, keys=())
    quadratic = [s * s for s in lengths]
    given: Any = {"list": quadratic, "tensor": torch.tensor(quadratic),
                  "callable": lambda found: [s * s for s in found], "entry": None}[form]
    if form == "entry":
        batch["workloads"] = torch.tensor(quadratic)
        batch["max_token_len_per_gpu"] = NonTensorData(16384)
        _, idx = prepare_micro_batches(batch, min_num_micro_batch=2)
    else:
        _, idx = rearrange_micro_batches(batch, 16384, min_num_micro_batch=2, workloads=given)
    assert sorted(idx) == [[0], [1, 2, 3, 4, 5, 6, 7, 8]]
    _, verl_idx = rearrange_micro_batches(batch.exclude("workloads"), 16384, min_num_micro_batch=2)
    assert sorted(len(part) for part in verl_idx) == [3, 6]


def test_prepare_micro_batches_reads_every_option_from_the_batch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    batch = padded([5000, 30, 20], keys=("weights",))
    batch["max_token_len_per_gpu"] = NonTensorData(4096)
    batch["over_cap"] = NonTensorData("alone")
    batch["dummy_micro_batches"] = NonTensorData(True)
    batch["loss_weight_keys"] = NonTensorData(["weights"])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        micro_batches, idx = prepare_micro_batches(batch, num_batches_divided_by=4)
    assert idx is not None and len(idx) == 4 and idx[3] == []
    assert micro_batches[3]["row"].tolist() == [2] and micro_batches[3]["weights"].sum() == 0
    assert len([r for r in caplog.records if r.name == LOGGER]) == 1
    # An argument wins over the batch's setting.
    with pytest.raises(ValueError, match="exceeds max_token_len=4096"):
        prepare_micro_batches(batch, over_cap="raise")


class Proto:
    def __init__(self, batch: Any, non_tensor_batch: dict[str, Any], meta_info: Any = None) -> None:
        self.batch, self.non_tensor_batch, self.meta_info = batch, non_tensor_batch, meta_info or {}

    @classmethod
    def from_dict(cls, tensors: dict[str, Any], non_tensors: dict[str, Any], meta_info: Any = None) -> Proto:
        size = len(next(iter(tensors.values())))
        return cls(TensorDict(tensors, batch_size=[size]), non_tensors, meta_info)


def test_prepare_dynamic_batch_dummies_carry_their_rows_non_tensors() -> None:
    data = Proto(padded([6, 3, 9], keys=("response_mask",)), {"uid": np.array(["a", "b", "c"])})
    parts, idx = prepare_dynamic_batch(data, 100, num_batches_divided_by=4, dummy_micro_batches=True)
    assert idx[3] == []
    assert list(parts[3].non_tensor_batch["uid"]) == ["b"]
    assert parts[3].batch["response_mask"].sum() == 0
    for part, rows in zip(parts[:3], idx[:3], strict=True):
        assert list(part.non_tensor_batch["uid"]) == ["abc"[i] for i in rows]


@pytest.mark.parametrize("seed", range(3))
def test_the_tensordict_plan_is_the_list_plan_with_the_rows_it_names(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(25):
        group = rng.choice([1, 2])
        lengths = [rng.randint(1, 40) for _ in range(rng.randint(1, 5) * group)]
        opts: dict[str, Any] = {
            "force_group_size": group,
            "num_batches_divided_by": rng.choice([None, 2, 4]),
            "min_num_micro_batch": rng.choice([None, 2, 7]),
            "pad_to_multiple_of": rng.choice([1, 8]),
            "over_cap": rng.choice(["raise", "alone"]),
            "dummy_micro_batches": True,
            "workloads": rng.choice([None, [rng.randint(0, 99) for _ in lengths]]),
        }
        cap = rng.randint(40, 90)
        try:
            want = plan_micro_batches(lengths, cap, **opts)
        except ValueError as error:
            with pytest.raises(ValueError, match="^" + re.escape(str(error))):
                rearrange_micro_batches(padded(lengths), cap, **opts)
            continue
        batch = padded(lengths)
        logging.getLogger(LOGGER).disabled = True
        try:
            micro_batches, idx = rearrange_micro_batches(batch, cap, **opts)
        finally:
            logging.getLogger(LOGGER).disabled = False
        assert idx == want
        for micro_batch, part in zip(micro_batches, idx, strict=True):
            if part:
                assert micro_batch["row"].tolist() == part
                assert torch.equal(micro_batch["loss_mask"], batch["loss_mask"][part])
            else:
                assert micro_batch["loss_mask"].sum() == 0 and len(micro_batch) == group


def test_helper_workloads_as_a_partial() -> None:
    batch = padded([300, 200, 100, 50])
    model = functools.partial(transformer_workloads, hidden_size=8192, num_layers=80)
    _, idx = rearrange_micro_batches(batch, 400, workloads=model)
    assert sorted(i for part in idx for i in part) == [0, 1, 2, 3]


def test_dummy_of_a_ragged_lazy_stack_is_zeroed_row_by_row() -> None:
    from tensordict import LazyStackedTensorDict

    rows = [TensorDict({"input_ids": torch.arange(n), "attention_mask": torch.ones(n, dtype=torch.long),
                        "loss_mask": torch.ones(n)}, []) for n in (4, 2, 3)]
    batch = LazyStackedTensorDict.lazy_stack(rows, 0)
    micro_batches, idx = rearrange_micro_batches(batch, 100, num_batches_divided_by=4,
                                                 dummy_micro_batches=True)
    assert idx[3] == []
    (dummy,) = micro_batches[3].tensordicts
    assert dummy["input_ids"].tolist() == [0, 1] and dummy["loss_mask"].tolist() == [0.0, 0.0]
    assert rows[1]["loss_mask"].tolist() == [1.0, 1.0]  # the input is untouched

"""Equal rows per micro-batch through verl 0.9.1's own engine code, switched (issue 32 item 1):
verl's ``prepare_micro_batches`` (the batch setting turns the option on) gives micro-batches
of one row count with filler rows, and verl's ``postprocess_batch_func`` (which joins the
micro-batches' per-token outputs and calls the ``restore_dynamic_batch`` the switch bound)
gives back exactly the real rows, in order."""

from __future__ import annotations

import pytest
import torch
from tensordict import NonTensorData, TensorDict

import seqlen_balancing.verl as switch

pytestmark = [pytest.mark.torch, pytest.mark.slow]  # with torch and verl only (tests/conftest.py)

LENGTHS = [10, 4, 6, 3, 3, 8, 9, 1]


def batch() -> TensorDict:
    rows = [torch.arange(n, dtype=torch.long) + 100 * i + 1 for i, n in enumerate(LENGTHS)]
    weights = [torch.ones(n) for n in LENGTHS]
    data = TensorDict({"input_ids": torch.nested.nested_tensor(rows, layout=torch.jagged),
                       "loss_mask": torch.nested.nested_tensor(weights, layout=torch.jagged)},
                      batch_size=[len(LENGTHS)])
    data["max_token_len_per_gpu"] = NonTensorData(20)
    data["equal_rows_per_micro_batch"] = NonTensorData(True)
    return data


def test_verls_engine_restores_the_real_rows_of_filled_micro_batches() -> None:
    import verl.workers.engine.utils as engine_utils

    data = batch()
    switch.apply()
    try:
        micro_batches, indices = engine_utils.prepare_micro_batches(data)
        assert {int(mb.batch_size[0]) for mb in micro_batches} == {3}  # one row count
        assert sum(part.filler for part in indices) == 1  # [10, 4] + a copy of the 1-token row
        for mb in micro_batches:
            assert int(mb["input_ids"].values().numel()) <= 20  # the filler row's token counted
        # each micro-batch's per-token output: its input_ids, as a model's log-probs would be
        outputs = [{"model_output": {"ids": mb["input_ids"]}} for mb in micro_batches]
        restored = engine_utils.postprocess_batch_func(outputs, indices, data)["model_output"]["ids"]
    finally:
        switch.revert()
    got = [row.tolist() for row in restored.unbind()]
    assert got == [row.tolist() for row in data["input_ids"].unbind()]

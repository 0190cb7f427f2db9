"""Issue 27 under the switch, on verl 0.9.1 itself: the options set in the environment reach
verl's own call sites (its engine's ``prepare_micro_batches``, its output restore
``postprocess_batch_func``, ``RayPPOTrainer._balance_batch``), and unset they change
nothing verl does."""

from __future__ import annotations

import importlib
import itertools
import logging
from types import ModuleType

import pytest
import torch
from tensordict import NonTensorData, TensorDict

import seqlen_balancing.verl as switch
from seqlen_balancing import get_seqlen_balanced_partitions
from seqlen_balancing.cost import transformer_workloads

pytestmark = [pytest.mark.torch, pytest.mark.slow]  # with torch and verl only (tests/conftest.py)

#: verl's own function, read before any test switches verl.
VERL_GET_REVERSE_IDX = importlib.import_module("verl.utils.seqlen_balancing").get_reverse_idx

ENV = {
    "SEQLEN_BALANCING_OVER_CAP": "alone",
    "SEQLEN_BALANCING_DUMMY_MICRO_BATCHES": "1",
    # attention-heavy (a narrow model): its partition differs from verl's formula's here
    "SEQLEN_BALANCING_WORKLOAD_MODEL": "hidden_size=64,num_layers=2",
}


def engine_batch(lengths: list[int], cap: int) -> TensorDict:
    """What verl's engines pass: jagged input_ids and loss_mask, the cap as a setting."""
    rows = [torch.arange(n, dtype=torch.long) + 100 * i for i, n in enumerate(lengths)]
    ids = torch.nested.as_nested_tensor(rows, layout=torch.jagged)
    mask = torch.nested.as_nested_tensor([torch.ones(n) for n in lengths], layout=torch.jagged)
    batch = TensorDict({"input_ids": ids, "loss_mask": mask}, batch_size=[len(lengths)])
    batch["max_token_len_per_gpu"] = NonTensorData(cap)
    return batch


@pytest.fixture
def switched(monkeypatch: pytest.MonkeyPatch) -> object:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    switch.apply()
    yield
    switch.revert()


def test_over_cap_and_dummies_through_verls_engine_and_its_restore(
    switched: object, verl_engine_utils_module: ModuleType, caplog: pytest.LogCaptureFixture,
) -> None:
    utils = verl_engine_utils_module
    with caplog.at_level(logging.WARNING, logger="seqlen_balancing"):
        _, over_idx = utils.prepare_micro_batches(engine_batch([5000, 100, 200], 4096))
    assert sorted(over_idx) == [[0], [1, 2]]
    assert any("sample 0 costs 5000 tokens" in r.getMessage() for r in caplog.records)
    batch = engine_batch([30, 10, 20], 1000)
    micro_batches, indices = utils.prepare_micro_batches(batch, num_batches_divided_by=4)
    assert len(micro_batches) == 4 and indices[3] == []
    assert micro_batches[3]["input_ids"].unbind()[0].tolist() == list(range(100, 110))
    assert float(micro_batches[3]["loss_mask"].values().sum()) == 0.0
    # verl's own restore of the outputs: nested rows joined in order, then its
    # restore_dynamic_batch (switched) with the index lists.
    outputs = [{"model_output": {"ids": mb["input_ids"] * 2}} for mb in micro_batches]
    restored = utils.postprocess_batch_func(outputs, indices, batch)["model_output"]["ids"]
    assert [r.tolist() for r in restored.unbind()] == [(r * 2).tolist() for r in batch["input_ids"].unbind()]
    # and the plain path: torch.cat of the outputs, then verl's own get_reverse_idx
    firsts = torch.cat([torch.stack([row[0] for row in mb["input_ids"].unbind()]) for mb in micro_batches])
    flat = list(itertools.chain.from_iterable(indices))
    order = torch.tensor(VERL_GET_REVERSE_IDX(flat), dtype=torch.long)
    assert firsts.tolist()[3] == 100  # the dummy's row: a copy of row 1, after the real ones
    assert firsts[order].tolist() == [0, 100, 200]


def test_the_workload_model_reaches_verls_dp_balancing(switched: object) -> None:
    from verl.protocol import DataProto
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    lengths = [259, 72, 145, 72, 387, 49, 317, 410, 129, 466, 273, 362]
    mask = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
    ids = torch.arange(len(lengths)).unsqueeze(1).expand(-1, max(lengths)).contiguous()
    batch = DataProto.from_dict({"attention_mask": mask, "input_ids": ids})
    trainer = object.__new__(RayPPOTrainer)  # _balance_batch reads only these two
    trainer.actor_rollout_wg = None
    trainer._get_dp_size = lambda worker_group, role: 2  # type: ignore[method-assign]
    trainer._balance_batch(batch, {})
    order = batch.batch["input_ids"][:, 0].tolist()
    model = transformer_workloads(lengths, hidden_size=64, num_layers=2)
    want = get_seqlen_balanced_partitions(model, k_partitions=2, equal_size=True)
    verls = get_seqlen_balanced_partitions(transformer_workloads(lengths, hidden_size=4096), 2, True)
    assert want != verls
    assert [sorted(order[:6]), sorted(order[6:])] == want


def test_unset_the_switch_keeps_verls_behaviour(verl_engine_utils_module: ModuleType) -> None:
    switch.apply()
    try:
        with pytest.raises(ValueError, match="exceeds max_token_len=4096"):
            verl_engine_utils_module.prepare_micro_batches(engine_batch([5000, 100, 200], 4096))
        with pytest.raises(ValueError, match="4 micro-batches are needed but only 3"):
            verl_engine_utils_module.prepare_micro_batches(engine_batch([30, 10, 20], 1000),
                                                           num_batches_divided_by=4)
    finally:
        switch.revert()


def test_the_docs_claims_about_verls_own_functions() -> None:
    """docs/keep-training.md: verl 0.9.1's own restore_dynamic_batch refuses the dummies'
    rows (the switch replaces it), and its masked_mean of a zero mask is 0, not 0/0."""
    import verl.utils.seqlen_balancing as verl_functions
    from verl.utils.torch_functional import masked_mean

    assert verl_functions.restore_dynamic_batch.__module__ == "verl.utils.seqlen_balancing"
    with pytest.raises(AssertionError, match=r"3 vs\. 4"):
        verl_functions.restore_dynamic_batch(torch.arange(4), [[0], [1, 2], []])
    assert float(masked_mean(torch.ones(5), torch.zeros(5))) == 0.0

"""SEQLEN_BALANCING_BALANCE_STEP on verl 0.9.1's own classes (in this process, switched and
reverted around each test).

- ``RayPPOTrainer._balance_batch`` with verl's real ``DataProto``: rank ``r``'s equal
  contiguous chunk holds, mini-batch by mini-batch, a part of that mini-batch, at the
  smallest count any equal split of it admits (brute force);
- the V1 ``PPOTrainer._balance_batch``: verl's own padding function is the one called (a
  stand-in for it here: the real one needs TransferQueue's store), then the plan;
- ``SFTTrainer._build_dataloader`` (verl's own code) builds a ``BalancedDistributedSampler``
  for the train set, with the config's batch per rank and cap, whose steps hold
  ``DistributedSampler``'s rows, and torch's sampler for the validation set; with a row
  over the cap and ``SEQLEN_BALANCING_OVER_CAP=alone`` too, that row planned alone;
- importing ``verl.trainer.sft_trainer_ray`` logs why the variable does not act there.

The real SFT job on 2 CPU ranks (docs/verl.md, "Balance the whole step") is run by hand.
"""

from __future__ import annotations

import itertools
import random
import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

import seqlen_balancing.verl as switch

pytestmark = [pytest.mark.torch, pytest.mark.slow]


def packs(sizes: list[int], count: int, cap: int) -> bool:
    """Brute force: ``sizes`` in ``count`` non-empty bins of at most ``cap`` tokens?"""
    for labels in itertools.product(range(count), repeat=len(sizes)):
        sums = [0] * count
        for size, label in zip(sizes, labels, strict=True):
            sums[label] += size
        if len(set(labels)) == count and max(sums) <= cap:
            return True
    return False


def fewest(sizes: list[int], cap: int) -> int:
    return next(k for k in range(1, len(sizes) + 1) if packs(sizes, k, cap))


def best_equal_split(sizes: list[int], cap: int) -> int:
    """Brute force over every split into 2 equal halves: the smallest slowest count."""
    n = len(sizes)
    best = n
    for half in itertools.combinations(range(n), n // 2):
        other = [i for i in range(n) if i not in half]
        best = min(best, max(fewest([sizes[i] for i in half], cap), fewest([sizes[i] for i in other], cap)))
    return best


@pytest.fixture
def balanced(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    import verl.trainer.ppo.ray_trainer  # noqa: F401  (imported before apply: patched by it)

    monkeypatch.setenv("SEQLEN_BALANCING_BALANCE_STEP", "1")
    switch.apply()
    try:
        yield
    finally:
        switch.revert()


def ppo_config() -> dict[str, Any]:
    actor = {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 500, "ppo_mini_batch_size": 2,
             "ulysses_sequence_parallel_size": 1}
    return {"actor_rollout_ref": {"actor": actor, "rollout": {"n": 2}}}


def test_ray_ppo_trainers_balance_batch_plans_each_mini_batch(balanced: None) -> None:
    from verl.protocol import DataProto
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    assert hasattr(RayPPOTrainer._balance_batch, "__wrapped__")
    rng = random.Random(11)
    lengths = [rng.randint(20, 480) for _ in range(8)]
    width = max(lengths)
    mask = torch.tensor([[1] * s + [0] * (width - s) for s in lengths])
    ids = torch.arange(8).unsqueeze(1).expand(-1, width).contiguous()
    batch = DataProto.from_dict({"attention_mask": mask, "input_ids": ids}, {"uid": np.arange(8)})
    trainer = object.__new__(RayPPOTrainer)
    trainer.config = ppo_config()
    trainer.actor_rollout_wg = None
    trainer._get_dp_size = lambda worker_group, role: 2  # type: ignore[method-assign]
    metrics: dict[str, float] = {}
    assert trainer._balance_batch(batch, metrics) is None  # in place, as verl's
    order = batch.batch["input_ids"][:, 0].tolist()
    assert sorted(order) == list(range(8))
    assert batch.non_tensor_batch["uid"].tolist() == order  # every field moved together
    chunks = [order[:4], order[4:]]  # verl's dispatch: equal contiguous chunks
    for j in range(2):  # the worker's mini-batch split: 2 samples per rank per mini-batch
        slices = [c[2 * j : 2 * j + 2] for c in chunks]
        assert set(slices[0]) | set(slices[1]) == set(range(4 * j, 4 * j + 4))
        best = best_equal_split(lengths[4 * j : 4 * j + 4], 500)
        assert max(fewest([lengths[i] for i in s], 500) for s in slices) == best
    sums = [sum(lengths[i] for i in c) for c in chunks]
    assert metrics["global_seqlen/balanced_min"] == min(sums)
    assert metrics["global_seqlen/balanced_max"] == max(sums)


class Tagged:
    def __init__(self, lengths: list[int]) -> None:
        self.tags = [{"seq_len": s, "id": i} for i, s in enumerate(lengths)]

    def __len__(self) -> int:
        return len(self.tags)

    def reorder(self, indices: list[int]) -> None:
        self.tags = [self.tags[i] for i in indices]


def test_the_v1_trainers_balance_batch_pads_with_verls_function(balanced: None,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import verl.trainer.ppo.v1.trainer_base as base

    assert hasattr(base.PPOTrainer._balance_batch, "__wrapped__")
    calls: list[tuple[int, int]] = []

    def upsample(batch: Tagged, multiple: int, eos: int) -> Tagged:
        calls.append((multiple, eos))
        batch.tags += [{"seq_len": 2, "id": "pad"} for _ in range(-len(batch) % multiple)]
        return batch

    from omegaconf import OmegaConf

    class Trainer(base.PPOTrainer):  # PPOTrainer is abstract; _balance_batch is inherited
        def on_sample_end(self) -> None: ...
        def on_step_end(self) -> None: ...

    monkeypatch.setattr(base, "upsample_batch_to_divisible_size", upsample)
    trainer = object.__new__(Trainer)
    trainer.config = OmegaConf.create({**ppo_config(), "trainer": {"critic_warmup": 0}})
    trainer.use_critic = False
    trainer.global_steps = 0
    trainer.actor_rollout_wg = types.SimpleNamespace(_dispatch_info={"actor": [0, 1]})
    trainer.tokenizer = types.SimpleNamespace(eos_token_id=5)
    batch = Tagged([450, 30, 260, 240, 120, 400])
    metrics: dict[str, float] = {}
    assert trainer._balance_batch(batch, metrics) is batch
    # verl's own _get_required_batch_multiple: lcm(dp 2, mini-batch 2 prompts x n 2) = 4
    assert calls == [(4, 5)] and len(batch) == 8
    chunks = [batch.tags[:4], batch.tags[4:]]
    padded = [450, 30, 260, 240, 120, 400, 2, 2]
    for j in range(2):
        slices = [[t["seq_len"] for t in c[2 * j : 2 * j + 2]] for c in chunks]
        assert max(fewest(s, 500) for s in slices) == best_equal_split(padded[4 * j : 4 * j + 4], 500)
    assert "global_seqlen/balanced_max" in metrics


def test_sft_trainers_build_dataloader_builds_the_balanced_sampler(balanced: None) -> None:
    import verl.trainer.sft_trainer as sft
    from omegaconf import OmegaConf
    from torch.utils.data import DistributedSampler

    from seqlen_balancing import BalancedDistributedSampler

    rng = random.Random(2)
    lengths = [rng.randint(10, 390) for _ in range(24)]
    train = [{"input_ids": torch.ones(s, dtype=torch.long)} for s in lengths]
    config = OmegaConf.create({
        "data": {"use_dynamic_bsz": True, "train_batch_size": 8, "max_token_len_per_gpu": 200,
                 "pad_mode": "no_padding", "num_workers": 0},
        "engine": {"ulysses_sequence_parallel_size": 2},
    })
    yielded = []
    for rank in range(2):
        trainer = object.__new__(sft.SFTTrainer)
        trainer.config = config
        trainer.train_dataset, trainer.val_dataset = train, train[:4]
        trainer.engine = types.SimpleNamespace(get_data_parallel_rank=lambda r=rank: r,
                                               get_data_parallel_size=lambda: 2)
        trainer._build_dataloader()  # verl's own code
        sampler = trainer.train_sampler
        assert isinstance(sampler, BalancedDistributedSampler)
        assert (sampler.batch_size, sampler.max_token_len, sampler.lengths) == (4, 400, lengths)
        assert type(trainer.val_sampler) is DistributedSampler
        assert trainer.train_dataloader.sampler is sampler
        sampler.set_epoch(0)
        yielded.append(list(sampler))
    plain = []
    for rank in range(2):
        torch_sampler = DistributedSampler(train, num_replicas=2, rank=rank, shuffle=True, drop_last=True)
        torch_sampler.set_epoch(0)
        plain.append(list(torch_sampler))
    for step in range(3):
        window = slice(4 * step, 4 * step + 4)
        assert sorted(yielded[0][window] + yielded[1][window]) == sorted(plain[0][window] + plain[1][window])


def test_sft_trainers_build_dataloader_plans_an_over_cap_row_alone(monkeypatch: pytest.MonkeyPatch,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    import logging

    import verl.trainer.sft_trainer as sft
    from omegaconf import OmegaConf

    from seqlen_balancing import BalancedDistributedSampler

    lengths = [120, 380, 60, 250, 900, 90, 300, 40, 200, 150, 330, 70, 260, 110, 30, 180]
    train = [{"input_ids": torch.ones(s, dtype=torch.long)} for s in lengths]
    config = OmegaConf.create({
        "data": {"use_dynamic_bsz": True, "train_batch_size": 8, "max_token_len_per_gpu": 400,
                 "pad_mode": "no_padding", "num_workers": 0},
        "engine": {"ulysses_sequence_parallel_size": 1},
    })
    monkeypatch.setenv("SEQLEN_BALANCING_BALANCE_STEP", "1")
    monkeypatch.setenv("SEQLEN_BALANCING_OVER_CAP", "alone")
    switch.apply()
    try:
        samplers = []
        with caplog.at_level(logging.WARNING, logger="seqlen_balancing.verl"):
            for rank in range(2):
                trainer = object.__new__(sft.SFTTrainer)
                trainer.config = config
                trainer.train_dataset, trainer.val_dataset = train, train[:4]
                trainer.engine = types.SimpleNamespace(get_data_parallel_rank=lambda r=rank: r,
                                                       get_data_parallel_size=lambda: 2)
                trainer._build_dataloader()  # verl's own code
                samplers.append(trainer.train_sampler)
    finally:
        switch.revert()
    assert not [r for r in caplog.records if "keeps DistributedSampler" in r.getMessage()]  # no fallback
    assert all(isinstance(s, BalancedDistributedSampler) for s in samplers)
    assert samplers[0].options.changed() == {"over_cap": "alone"}
    held = 0
    for step in range(samplers[0].steps):
        plan = samplers[0].step_plan(step)
        for mbs in plan.rank_micro_batches:
            for mb in mbs:
                if 4 in mb:
                    held += 1
                    assert mb == [4]  # the 900-token row alone
                else:
                    assert sum(lengths[i] for i in mb) <= 400
    assert held == 1  # row 4 is in one of the epoch's two steps


def test_importing_the_ray_sft_trainer_says_the_variable_does_not_act_there(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    import logging
    import sys

    monkeypatch.setenv("SEQLEN_BALANCING_BALANCE_STEP", "1")
    monkeypatch.delitem(sys.modules, "verl.trainer.sft_trainer_ray", raising=False)
    with caplog.at_level(logging.WARNING, logger="seqlen_balancing.verl"):
        switch.apply()
        try:
            import verl.trainer.sft_trainer_ray  # noqa: F401
        finally:
            switch.revert()
    why = "does not act in verl.trainer.sft_trainer_ray"
    said = [r.getMessage() for r in caplog.records if why in r.getMessage()]
    assert len(said) == 1 and "inside SFTTrainer.fit" in said[0]

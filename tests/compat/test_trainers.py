"""The command line's model of each trainer's dealing (``cli/trainers.py``) against verl 0.9.1.

verl's own code builds the rows: ``SFTTrainer._build_dataloader`` of ``verl.trainer.sft_trainer``
(one per DP rank) and of ``verl.trainer.sft_trainer_ray`` (the driver's), called on a
stand-in trainer object that holds only what the method reads (config, engine, dataset),
give the samplers and data loaders verl runs; their batch samplers say which dataset rows
each step holds on each rank, epoch after epoch (``set_epoch``). ``RayPPOTrainer._balance_batch``
of ``verl.trainer.ppo.ray_trainer`` reorders a ``DataProto`` as ``main_ppo`` does. The
balancing step of ``sft_trainer_ray``'s training loop (inside ``fit``, which cannot run here)
is restated from its code: verl's ``calculate_workload`` on a float ``torch.Tensor`` of the
lengths, verl's ``get_seqlen_balanced_partitions`` into equal parts, each part sorted by
workload and laid out lightest at both ends.
"""

from __future__ import annotations

import random
import warnings
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")
omegaconf = pytest.importorskip("omegaconf")

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import verl.trainer.sft_trainer as sft_trainer
    import verl.trainer.sft_trainer_ray as sft_trainer_ray
    from verl.protocol import DataProto
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.utils.seqlen_balancing import calculate_workload, get_seqlen_balanced_partitions

from seqlen_balancing.cli.trainers import (  # noqa: E402
    batch_multiple,
    deal,
    epoch_steps,
    steps_per_epoch,
    synthetic_rows,
)

pytestmark = [pytest.mark.torch, pytest.mark.slow]

EPOCHS = 3


def config(global_batch_size: int) -> Any:
    return omegaconf.OmegaConf.create({
        "data": {"train_batch_size": global_batch_size, "pad_mode": "no_padding", "num_workers": 0},
        "trainer": {"total_training_steps": None, "total_epochs": EPOCHS, "save_freq": -1,
                    "test_freq": -1},
    })


def verl_sft_trainer_rows(n: int, dp: int, global_batch_size: int) -> list[list[list[int]]]:
    """Per step, each rank's rows, from the loaders verl's sft_trainer builds on each rank."""
    per_rank = []
    for rank in range(dp):
        engine = SimpleNamespace(get_data_parallel_rank=lambda r=rank: r, get_data_parallel_size=lambda: dp)
        trainer = SimpleNamespace(config=config(global_batch_size), engine=engine,
                                  train_dataset=list(range(n)), val_dataset=None,
                                  optimizer_config=SimpleNamespace())
        sft_trainer.SFTTrainer._build_dataloader(trainer)
        batches = []
        for epoch in range(EPOCHS):
            trainer.train_sampler.set_epoch(epoch)
            batches += [list(b) for b in trainer.train_dataloader.batch_sampler]
        assert len(trainer.train_dataloader) == steps_per_epoch(n, dp, global_batch_size, "sft_trainer")
        per_rank.append(batches)
    return [[per_rank[r][s] for r in range(dp)] for s in range(len(per_rank[0]))]


def verl_sft_trainer_ray_rows(lengths: list[int], dp: int, global_batch_size: int) -> list[list[list[int]]]:
    trainer = SimpleNamespace(config=config(global_batch_size), train_dataset=list(range(len(lengths))),
                              val_dataset=None, optimizer_config=SimpleNamespace())
    sft_trainer_ray.SFTTrainer._build_dataloader(trainer)
    assert trainer.steps_per_epoch == steps_per_epoch(len(lengths), dp, global_batch_size, "sft_trainer_ray")
    steps = []
    for epoch in range(EPOCHS):
        trainer.train_sampler.set_epoch(epoch)
        for rows in trainer.train_dataloader.batch_sampler:
            loads = calculate_workload(torch.Tensor([lengths[i] for i in rows]))
            parts = get_seqlen_balanced_partitions(loads, k_partitions=dp, equal_size=True)
            ranks = []
            for part in parts:
                part = sorted(part, key=lambda x: (loads[x], x))
                ranks.append([rows[p] for p in part[::2] + part[1::2][::-1]])
            steps.append(ranks)
    return steps


@pytest.mark.parametrize(("n", "dp", "batch"), [(53, 2, 8), (61, 3, 12), (40, 4, 7)])
def test_sft_trainer_rows_per_rank_per_step(n: int, dp: int, batch: int) -> None:
    ours = [step.ranks for step in epoch_steps([1] * n, dp, batch, "sft_trainer", 0, EPOCHS, False)]
    assert ours == verl_sft_trainer_rows(n, dp, batch)


@pytest.mark.parametrize(("n", "dp", "batch"), [(53, 2, 8), (70, 3, 12)])
def test_sft_trainer_ray_rows_per_rank_per_step(n: int, dp: int, batch: int) -> None:
    rng = random.Random(n)
    lengths = [rng.randint(1, 3000) for _ in range(n)]  # distinct float32 workloads: no ties
    ours = [step.ranks for step in epoch_steps(lengths, dp, batch, "sft_trainer_ray", 0, EPOCHS, True)]
    assert ours == verl_sft_trainer_ray_rows(lengths, dp, batch)


@pytest.mark.parametrize("dp", [2, 4])
def test_main_ppo_balance_batch_then_dispatch(dp: int) -> None:
    rng = random.Random(dp)
    n = 8 * dp
    lengths = [rng.randint(1, 60) for _ in range(n)]
    mask = torch.zeros(n, 64, dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    batch = DataProto.from_dict(tensors={"attention_mask": mask, "row": torch.arange(n)})
    trainer = SimpleNamespace(_get_dp_size=lambda group, role: dp, actor_rollout_wg=None)
    RayPPOTrainer._balance_batch(trainer, batch, metrics={})
    order = batch.batch["row"].tolist()
    size = n // dp
    verl_ranks = [order[r * size : (r + 1) * size] for r in range(dp)]  # the dispatch's chunks
    assert deal(lengths, dp, "main_ppo_v0", True) == verl_ranks


class _Tagged:
    """A KVBatchMeta-like batch for verl's V1 ``_balance_batch``: tags and ``reorder``."""

    def __init__(self, lengths: list[int]) -> None:
        self.tags = [{"seq_len": s, "row": i} for i, s in enumerate(lengths)]

    def __len__(self) -> int:
        return len(self.tags)

    def reorder(self, indices: list[int]) -> None:
        self.tags = [self.tags[i] for i in indices]


@pytest.mark.parametrize("dp", [2, 4])
def test_main_ppo_is_the_v1_trainers_balance_then_dispatch(dp: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """verl 0.9.1's V1 ``PPOTrainer._balance_batch`` (its own code; the padding, which needs
    TransferQueue's store, stood in by adding rows of 128 tokens) against ``deal``."""
    import verl.trainer.ppo.v1.trainer_base as base
    from omegaconf import OmegaConf

    class Trainer(base.PPOTrainer):  # abstract in verl; _balance_batch is inherited
        def on_sample_end(self) -> None: ...
        def on_step_end(self) -> None: ...

    def pad(batch: _Tagged, multiple: int, eos: int) -> _Tagged:
        batch.tags += [{"seq_len": 128, "row": None} for _ in range(-len(batch) % multiple)]
        return batch

    monkeypatch.setattr(base, "upsample_batch_to_divisible_size", pad)
    trainer = object.__new__(Trainer)
    trainer.config = OmegaConf.create({"trainer": {"critic_warmup": 1}})  # no actor update yet:
    trainer.use_critic, trainer.global_steps = False, 0  # the batch multiple is dp alone
    trainer.actor_rollout_wg = SimpleNamespace(_dispatch_info={"actor": list(range(dp))})
    trainer.tokenizer = SimpleNamespace(eos_token_id=0)
    rng = random.Random(dp)
    lengths = [rng.randint(1, 3000) for _ in range(8 * dp - 1)]  # one short: one synthetic row
    batch = _Tagged(lengths)
    trainer._balance_batch(batch, metrics={})
    rows = [t["row"] if t["row"] is not None else len(lengths) for t in batch.tags]
    size = len(rows) // dp
    assert deal([*lengths, 128], dp, "main_ppo", True) == [rows[r * size : (r + 1) * size] for r in range(dp)]


@pytest.mark.parametrize(("dp", "actor", "critic", "n", "use_critic", "warmup"), [
    (8, 256, 256, 1, True, 0), (4, 6, 10, 1, True, 0), (4, 6, 10, 3, False, 0), (8, 12, 16, 2, True, 5),
    (2, 3, 5, 1, False, 5),
])
def test_main_ppo_pads_to_the_v1_trainers_required_batch_multiple(
    dp: int, actor: int, critic: int, n: int, use_critic: bool, warmup: int
) -> None:
    """verl 0.9.1's own ``PPOTrainer._get_required_batch_multiple`` (what ``_balance_batch``
    pads the batch to a multiple of) against ``batch_multiple`` given the mini-batch sizes
    that train at the step: the critic's where a critic trains, the actor's once past
    ``critic_warmup`` (``--mini-batch-size``, in rows: ``ppo_mini_batch_size x rollout.n``)."""
    import verl.trainer.ppo.v1.trainer_base as base
    from omegaconf import OmegaConf

    class Trainer(base.PPOTrainer):  # abstract in verl; the method is inherited
        def on_sample_end(self) -> None: ...
        def on_step_end(self) -> None: ...

    trainer = object.__new__(Trainer)
    trainer.config = OmegaConf.create({
        "trainer": {"critic_warmup": warmup},
        "critic": {"ppo_mini_batch_size": critic},
        "actor_rollout_ref": {"actor": {"ppo_mini_batch_size": actor}, "rollout": {"n": n}},
    })
    trainer.use_critic, trainer.global_steps = use_critic, 1
    sizes = ([critic * n] if use_critic else []) + ([actor * n] if warmup <= 1 else [])
    verl_multiple = trainer._get_required_batch_multiple(dp)
    assert batch_multiple(dp, sizes) == verl_multiple
    for rows in (1, dp * 7 + 1, verl_multiple, 3 * verl_multiple - 1):
        assert synthetic_rows(rows, dp, "main_ppo", sizes) == -rows % verl_multiple

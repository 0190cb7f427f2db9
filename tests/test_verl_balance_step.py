"""seqlen_balancing.verl.balance_step: the step balanced across verl's ranks, on stand-ins.

PPO's balance step on a DataProto-like and a KVBatchMeta-like stand-in (the order, verl's
dispatch chunks, the mini-batch split, the padding, the metrics, the fallbacks), the SFT
sampler hook on a stand-in trainer, the variable's spelling. The oracles are brute force
(the smallest count any equal split of a mini-batch admits) and the rules spelled out here
(contiguous chunks, ``DistributedSampler``'s rows). tests/compat/test_balance_step.py runs
the same on verl 0.9.1's own classes; tests/test_verl_switch.py's stand-in verl process
checks the install and revert.
"""

from __future__ import annotations

import itertools
import logging
import random
import sys
import types
from typing import Any

import pytest

from seqlen_balancing.options import PlanOptions, env_values
from seqlen_balancing.verl import balance_step
from seqlen_balancing.verl.balance_step import (
    ppo_order,
    ppo_settings,
    requested,
    row_tokens,
    sft_settings,
)

CAP = 1000


def packs(sizes: list[int], count: int, cap: int) -> bool:
    """Brute force: can ``sizes`` go into ``count`` non-empty bins of at most ``cap``?"""
    if count > len(sizes):
        return False
    for labels in itertools.product(range(count), repeat=len(sizes)):
        sums = [0] * count
        for size, label in zip(sizes, labels, strict=True):
            sums[label] += size
        if len(set(labels)) == count and max(sums) <= cap:
            return True
    return False


def fewest(sizes: list[int], cap: int) -> int:
    return next(k for k in range(1, len(sizes) + 1) if packs(sizes, k, cap))


def best_equal_split(sizes: list[int], dp: int, cap: int) -> int:
    """Brute force: the smallest count per rank any split into ``dp`` equal parts admits
    (each rank needs the same count: the slowest rank's)."""
    n = len(sizes)
    best = n
    for labels in itertools.product(range(dp), repeat=n):
        if any(labels.count(r) != n // dp for r in range(dp)) or labels[0] != 0:
            continue
        worst = max(fewest([s for s, lab in zip(sizes, labels, strict=True) if lab == r], cap)
                    for r in range(dp))
        best = min(best, worst)
    return best


# ----------------------------------------------------------------------------- the order


@pytest.mark.parametrize("seed", range(12))
def test_each_mini_batch_is_split_into_equal_parts_at_the_best_count(seed: int) -> None:
    rng = random.Random(seed)
    dp, mini = 2, 4
    lengths = [rng.randint(50, 700) for _ in range(8)]
    order, parts = ppo_order(lengths, dp, CAP, mini_batch_size=mini)
    assert sorted(order) == list(range(8))
    per_rank = len(lengths) // dp
    # verl's dispatch: rank r gets the r-th equal contiguous chunk of the reordered batch
    assert [order[r * per_rank : (r + 1) * per_rank] for r in range(dp)] == parts
    for j in range(len(lengths) // mini):
        members = set(range(j * mini, (j + 1) * mini))
        # the worker's mini-batch split: chunk j (of mini // dp) of each rank's part
        slices = [part[j * (mini // dp) : (j + 1) * (mini // dp)] for part in parts]
        assert set().union(*map(set, slices)) == members  # the mini-batch kept whole
        counts = [fewest([lengths[i] for i in s], CAP) for s in slices]
        assert max(counts) == best_equal_split([lengths[i] for i in sorted(members)], dp, CAP)


def test_without_a_dividing_mini_batch_the_whole_batch_is_one_step() -> None:
    lengths = [600, 500, 400, 300, 200, 100]
    for mini in (None, 4, 3):  # 4 does not divide 6; 3 is not a multiple of dp=2
        order, parts = ppo_order(lengths, 2, CAP, mini_batch_size=mini)
        assert sorted(order) == list(range(6))
        assert max(fewest([lengths[i] for i in p], CAP) for p in parts) == best_equal_split(lengths, 2, CAP)


def test_a_sample_over_the_cap_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="exceeds max_token_len"):
        ppo_order([1200, 10, 10, 10], 2, CAP)


# ----------------------------------------------------------------------------- config


def ppo_config(dynamic: bool = True, sp: int | None = 1, fsdp_sp: int | None = None) -> dict[str, Any]:
    actor: dict[str, Any] = {"use_dynamic_bsz": dynamic, "ppo_max_token_len_per_gpu": 500,
                             "ppo_mini_batch_size": 2, "ulysses_sequence_parallel_size": sp}
    if fsdp_sp is not None:
        actor["fsdp_config"] = {"ulysses_sequence_parallel_size": fsdp_sp}
    return {"actor_rollout_ref": {"actor": actor, "rollout": {"n": 2}}}


def test_ppo_settings_read_the_actors_cap_times_sp_and_the_mini_batch_in_samples() -> None:
    assert ppo_settings(ppo_config(sp=2)) == (1000, 4)
    assert ppo_settings(ppo_config(sp=None, fsdp_sp=4)) == (2000, 4)
    assert ppo_settings(ppo_config(dynamic=False)) is None
    with pytest.raises(ValueError, match=r"actor\.ppo_max_token_len_per_gpu must be a positive integer"):
        ppo_settings({"actor_rollout_ref": {"actor": {"use_dynamic_bsz": True}}})


def test_sft_settings_read_the_batch_per_rank_and_the_cap_times_sp() -> None:
    config = {"data": {"use_dynamic_bsz": True, "train_batch_size": 16, "max_token_len_per_gpu": 400},
              "engine": {"ulysses_sequence_parallel_size": 2}}
    assert sft_settings(config, 4) == {"batch_size": 4, "max_token_len": 800}
    config["data"]["use_dynamic_bsz"] = False
    assert sft_settings(config, 4) is None


def test_the_variable_is_a_switch_known_beside_the_main_one() -> None:
    assert requested({"SEQLEN_BALANCING_BALANCE_STEP": " On "}) is True
    assert requested({"SEQLEN_BALANCING_BALANCE_STEP": "off"}) is False
    assert env_values({"SEQLEN_BALANCING_BALANCE_STEP": "1", "SEQLEN_BALANCING_VERL": "1"}) == {}
    with pytest.raises(ValueError, match="SEQLEN_BALANCING_BALANCE_STEP='maybe' is not a switch value"):
        env_values({"SEQLEN_BALANCING_BALANCE_STEP": "maybe"})
    with pytest.raises(ValueError, match=r"did you mean SEQLEN_BALANCING_BALANCE_STEP\?"):
        env_values({"SEQLEN_BALANCING_BALANCE_STEPS": "1"})


@pytest.mark.torch
def test_row_tokens_count_the_mask_or_the_ids() -> None:
    import torch

    assert row_tokens({"input_ids": torch.arange(7)}) == 7
    mask = torch.tensor([1, 1, 1, 0, 0, 0, 0])
    assert row_tokens({"input_ids": torch.arange(7), "attention_mask": mask}) == 3
    with pytest.raises(TypeError, match="needs input_ids or attention_mask"):
        row_tokens({"messages": []})


# ----------------------------------------------------------------------------- PPO stand-ins


class Rows:
    """A DataProto-like batch: ``batch["attention_mask"]`` and ``reorder`` (in place)."""

    def __init__(self, lengths: list[int]) -> None:
        import torch

        width = max(lengths)
        self.ids = list(range(len(lengths)))
        self.batch = {"attention_mask": torch.tensor([[1] * s + [0] * (width - s) for s in lengths])}
        self.non_tensor_batch: dict[str, Any] = {}

    def reorder(self, indices: Any) -> None:
        order = [int(i) for i in indices]
        self.batch = {k: v[order] for k, v in self.batch.items()}
        self.ids = [self.ids[i] for i in order]


class Legacy:
    """Stands in for RayPPOTrainer: verl's own ``_balance_batch`` records that it ran."""

    ran = 0

    def __init__(self, config: dict[str, Any], dp: int) -> None:
        self.config, self.actor_rollout_wg, self.dp = config, object(), dp

    def _get_dp_size(self, worker_group: Any, role: str) -> int:
        assert worker_group is self.actor_rollout_wg and role == "actor"
        return self.dp

    def _balance_batch(self, batch: Any, metrics: Any, logging_prefix: str = "global_seqlen",
                       keep_minibatch: bool = False) -> None:
        Legacy.ran += 1


@pytest.fixture
def installed() -> Any:
    balance_step.disable()
    balance_step.enable(PlanOptions())
    yield
    balance_step.disable()


@pytest.mark.torch
def test_the_legacy_balance_step_reorders_for_dispatch_and_mini_batches(installed: None) -> None:
    rng = random.Random(5)
    lengths = [rng.randint(20, 480) for _ in range(16)]
    original = Legacy._balance_batch
    Legacy._balance_batch = balance_step._legacy_balance_batch(original)  # type: ignore[method-assign]
    try:
        batch, metrics = Rows(lengths), {}
        Legacy(ppo_config(), dp=2)._balance_batch(batch, metrics)
    finally:
        Legacy._balance_batch = original  # type: ignore[method-assign]
    assert Legacy.ran == 0
    chunks = [batch.ids[:8], batch.ids[8:]]  # rank 0 and rank 1 (equal contiguous chunks)
    for j in range(4):  # mini-batches of 2 prompts x n=2 = 4 samples: 2 per rank
        assert {*chunks[0][2 * j : 2 * j + 2], *chunks[1][2 * j : 2 * j + 2]} == set(range(4 * j, 4 * j + 4))
        slices = [[lengths[i] for i in c[2 * j : 2 * j + 2]] for c in chunks]
        best = best_equal_split(lengths[4 * j : 4 * j + 4], 2, 500)
        assert max(fewest(s, 500) for s in slices) == best
    sums = [sum(lengths[i] for i in c) for c in chunks]
    assert metrics["global_seqlen/balanced_max"] == max(sums)
    assert metrics["global_seqlen/balanced_min"] == min(sums)
    # the row contents moved with their ids
    assert batch.batch["attention_mask"].sum(-1).tolist() == [lengths[i] for i in batch.ids]


@pytest.mark.torch
@pytest.mark.parametrize("case", ["static", "over_cap", "prefix_grouper"])
def test_the_legacy_balance_step_falls_back_to_verls(installed: None, case: str,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    lengths = [100, 200, 300, 400] if case != "over_cap" else [100, 200, 300, 900]
    trainer = Legacy(ppo_config(dynamic=case != "static"), dp=2)
    batch = Rows(lengths)
    if case == "prefix_grouper":
        trainer.use_prefix_grouper = True  # type: ignore[attr-defined]
        batch.non_tensor_batch["uid"] = ["a", "a", "b", "b"]
    wrapped = balance_step._legacy_balance_batch(Legacy._balance_batch)
    before = Legacy.ran
    with caplog.at_level(logging.WARNING, logger="seqlen_balancing.verl"):
        wrapped(trainer, batch, {})
    assert Legacy.ran == before + 1 and batch.ids == [0, 1, 2, 3]
    warned = [r.getMessage() for r in caplog.records]
    if case == "over_cap":
        assert any("runs verl's own balance this step" in m and "exceeds max_token_len" in m for m in warned)
    else:
        assert not warned


class Tagged:
    """A KVBatchMeta-like batch: ``tags`` (with ``seq_len``) and ``reorder`` (in place)."""

    def __init__(self, lengths: list[int]) -> None:
        self.tags = [{"seq_len": s, "id": i} for i, s in enumerate(lengths)]

    def reorder(self, indices: list[int]) -> None:
        self.tags = [self.tags[i] for i in indices]


def v1_module() -> types.ModuleType:
    """A module that stands in for verl.trainer.ppo.v1.trainer_base: verl's padding
    function (rows of 2 tokens appended to a multiple) and PPOTrainer."""
    module = types.ModuleType("stand_in_trainer_base")
    code = '''
def upsample_batch_to_divisible_size(batch, batch_multiple, eos_token_id):
    missing = -len(batch.tags) % batch_multiple
    batch.tags += [{"seq_len": 2, "id": "pad", "is_padding": True} for _ in range(missing)]
    batch.padded_with = (batch_multiple, eos_token_id)
    return batch

class PPOTrainer:
    ran = 0
    def _get_required_batch_multiple(self, dp_size):
        return 4 * dp_size
    def _balance_batch(self, batch, metrics, logging_prefix="global_seqlen", keep_minibatch=False):
        PPOTrainer.ran += 1
        return batch
'''
    exec(compile(code, "stand_in_trainer_base", "exec"), vars(module))
    return module


@pytest.mark.torch
def test_the_v1_balance_step_pads_with_verls_function_then_plans(installed: None,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    module = v1_module()
    monkeypatch.setitem(sys.modules, module.__name__, module)
    cls = module.PPOTrainer
    cls._balance_batch = balance_step._v1_balance_batch(cls._balance_batch)
    trainer = cls()
    trainer.config = ppo_config()  # mini-batch 4 samples, cap 500
    queries: list[str] = []
    trainer.actor_rollout_wg = types.SimpleNamespace(
        _dispatch_info={}, _query_dispatch_info=lambda role: queries.append(role) or [0, 1, 0, 1])
    trainer.tokenizer = types.SimpleNamespace(eos_token_id=7)
    lengths = [450, 30, 260, 240, 120, 400]  # 6 samples: padded to 8 (multiple of 4 x dp 2)
    batch, metrics = Tagged(lengths), {}
    out = trainer._balance_batch(batch, metrics)
    assert out is batch and cls.ran == 0 and queries == ["actor"]
    assert trainer.actor_rollout_wg._dispatch_info == {"actor": [0, 1, 0, 1]}  # cached, as verl does
    assert batch.padded_with == (8, 7) and len(batch.tags) == 8
    ids = [t["id"] for t in batch.tags]
    padded = [*lengths, 2, 2]
    chunks = [ids[:4], ids[4:]]
    for j in range(2):
        members = {*chunks[0][2 * j : 2 * j + 2], *chunks[1][2 * j : 2 * j + 2]}
        expected = set(range(4 * j, min(4 * j + 4, 6))) | ({"pad"} if j == 1 else set())
        assert members == expected
        slices = [[t["seq_len"] for t in batch.tags[r * 4 + 2 * j : r * 4 + 2 * j + 2]] for r in range(2)]
        assert max(fewest(s, 500) for s in slices) == best_equal_split(padded[4 * j : 4 * j + 4], 2, 500)
    assert metrics["global_seqlen/balanced_max"] == max(
        sum(t["seq_len"] for t in batch.tags[:4]), sum(t["seq_len"] for t in batch.tags[4:]))


# ----------------------------------------------------------------------------- SFT stand-in


class SFT:
    """Stands in for verl's SFTTrainer: ``_build_dataloader`` asks the module's binding for
    two samplers, the train one and the validation one, as verl's does."""

    def __init__(self, config: dict[str, Any], train: Any, val: Any) -> None:
        self.config, self.train_dataset, self.val_dataset = config, train, val

    def _build_dataloader(self) -> None:
        binding = balance_step.sft_sampler
        self.train_sampler = binding(self.train_dataset, shuffle=True, num_replicas=2, rank=self.rank,
                                     drop_last=True)
        self.val_sampler = binding(self.val_dataset, shuffle=False, num_replicas=2, rank=self.rank,
                                   drop_last=True)


@pytest.mark.torch
def test_the_sft_train_sampler_is_balanced_on_the_same_rows_per_step(installed: None) -> None:
    import torch
    from torch.utils.data import DistributedSampler

    from seqlen_balancing import BalancedDistributedSampler

    rng = random.Random(3)
    lengths = [rng.randint(10, 390) for _ in range(20)]
    train = [{"input_ids": torch.ones(s, dtype=torch.long)} for s in lengths]
    val = [{"input_ids": torch.ones(5, dtype=torch.long)} for _ in range(6)]
    config = {"data": {"use_dynamic_bsz": True, "train_batch_size": 8, "max_token_len_per_gpu": 400}}
    build = balance_step._build_dataloader(SFT._build_dataloader)
    yielded = []
    for rank in range(2):
        trainer = SFT(config, train, val)
        trainer.rank = rank  # type: ignore[attr-defined]
        build(trainer)
        sampler = trainer.train_sampler  # type: ignore[attr-defined]
        assert isinstance(sampler, BalancedDistributedSampler)
        assert (sampler.batch_size, sampler.max_token_len, sampler.lengths) == (4, 400, lengths)
        assert type(trainer.val_sampler) is DistributedSampler  # type: ignore[attr-defined]
        sampler.set_epoch(1)
        yielded.append(list(sampler))
    for rank in range(2):
        plain = DistributedSampler(range(20), num_replicas=2, rank=rank, shuffle=True, drop_last=True)
        plain.set_epoch(1)
        yielded.append(list(plain))
    for step in range(len(yielded[0]) // 4):
        ours = sorted(yielded[0][step * 4 : step * 4 + 4] + yielded[1][step * 4 : step * 4 + 4])
        torch_rows = sorted(yielded[2][step * 4 : step * 4 + 4] + yielded[3][step * 4 : step * 4 + 4])
        assert ours == torch_rows  # the same global batch; only the ranks differ
    # outside _build_dataloader the binding is torch's sampler
    assert type(balance_step.sft_sampler(train, num_replicas=2, rank=0)) is DistributedSampler


def fewest_alone(sizes: list[int], cap: int) -> int:
    """Brute force with ``over_cap="alone"``: each size over ``cap`` takes a micro-batch of
    its own, the others the fewest bins of at most ``cap``."""
    rest = [s for s in sizes if s <= cap]
    return len(sizes) - len(rest) + (fewest(rest, cap) if rest else 0)


def dealt_count(rows: list[int], lengths: list[int], dp: int, cap: int) -> int:
    """``DistributedSampler``'s dealing of one step (rank r: positions r, r + dp, ...): the
    count the ranks agree on, the slowest rank's fewest (brute force, over-cap alone)."""
    return max(fewest_alone([lengths[i] for i in rows[r::dp]], cap) for r in range(dp))


OVER_CAP_LENGTHS = [120, 380, 60, 250, 900, 90, 300, 40, 200, 150, 330, 70, 260, 110, 30, 180]


def build_sft_samplers(config: dict[str, Any], lengths: list[int]) -> list[Any]:
    """Each of 2 ranks' train sampler, built by the wrapped stand-in trainer."""
    import torch

    train = [{"input_ids": torch.ones(s, dtype=torch.long)} for s in lengths]
    build = balance_step._build_dataloader(SFT._build_dataloader)
    samplers = []
    for rank in range(2):
        trainer = SFT(config, train, train[:4])
        trainer.rank = rank  # type: ignore[attr-defined]
        build(trainer)
        samplers.append(trainer.train_sampler)  # type: ignore[attr-defined]
    return samplers


@pytest.mark.torch
def test_over_cap_alone_from_the_environment_balances_a_step_holding_an_over_cap_row(
        caplog: pytest.LogCaptureFixture) -> None:
    from torch.utils.data import DistributedSampler

    from seqlen_balancing import BalancedDistributedSampler

    cap, lengths = 400, OVER_CAP_LENGTHS  # row 4 (900 tokens) is over the cap
    options = PlanOptions.from_env({"SEQLEN_BALANCING_OVER_CAP": "alone"})
    config = {"data": {"use_dynamic_bsz": True, "train_batch_size": 8, "max_token_len_per_gpu": cap}}
    balance_step.disable()
    balance_step.enable(options)
    try:
        with caplog.at_level(logging.INFO, logger="seqlen_balancing.verl"):
            samplers = build_sft_samplers(config, lengths)
    finally:
        balance_step.disable()
    # no fallback (another test's import of sft_trainer_ray may log its own line in this worker)
    assert not [r for r in caplog.records if "keeps DistributedSampler" in r.getMessage()]
    assert all(isinstance(s, BalancedDistributedSampler) for s in samplers)
    ours = dealt = 0
    for epoch in range(3):
        for sampler in samplers:
            sampler.set_epoch(epoch)
        yielded = [list(s) for s in samplers]
        plain = DistributedSampler(range(16), num_replicas=2, rank=0, shuffle=True, drop_last=True)
        plain.set_epoch(epoch)
        order = list(plain)  # rank 0's rows: the global order's even positions
        plain.rank = 1
        order = [i for pair in zip(order, list(plain), strict=True) for i in pair]
        for step in range(2):
            plan = samplers[0].step_plan(step)
            rows = order[step * 8 : step * 8 + 8]
            assert sorted(plan.rank_samples[0] + plan.rank_samples[1]) == sorted(rows)
            for rank in range(2):
                assert yielded[rank][step * 4 : step * 4 + 4] == plan.rank_samples[rank]
                assert len(plan.rank_micro_batches[rank]) == plan.count
                for mb in plan.rank_micro_batches[rank]:
                    if any(lengths[i] > cap for i in mb):
                        assert len(mb) == 1  # the over-cap row runs alone
                    else:
                        assert sum(lengths[i] for i in mb) <= cap
            # no better equal split exists (brute force), and never worse than the dealing
            best = min(max(fewest_alone([lengths[i] for i in half], cap),
                           fewest_alone([lengths[i] for i in rows if i not in half], cap))
                       for half in itertools.combinations(rows, 4))
            assert plan.count == best <= dealt_count(rows, lengths, 2, cap)
            ours += plan.count
            dealt += dealt_count(rows, lengths, 2, cap)
    assert (ours, dealt) == (14, 17)  # this data: 3 micro-batches per rank fewer over 3 epochs


@pytest.mark.parametrize("seed", range(40))
def test_plan_step_with_over_cap_alone_sets_each_over_cap_sample_apart_at_the_best_count(seed: int) -> None:
    from seqlen_balancing.global_batch.step import plan_step

    rng = random.Random(seed)
    cap = 400
    lengths = [rng.choice([rng.randint(10, cap), rng.randint(cap + 1, 900)]) for _ in range(8)]
    plan = plan_step(lengths, 2, cap, over_cap="alone")
    assert sorted(plan.rank_samples[0] + plan.rank_samples[1]) == list(range(8))
    assert [len(s) for s in plan.rank_samples] == [4, 4]
    for mbs in plan.rank_micro_batches:
        assert len(mbs) == plan.count
        for mb in mbs:
            assert len(mb) == 1 if any(lengths[i] > cap for i in mb) else sum(lengths[i] for i in mb) <= cap
    best = min(max(fewest_alone([lengths[i] for i in half], cap),
                   fewest_alone([lengths[i] for i in range(8) if i not in half], cap))
               for half in itertools.combinations(range(8), 4))
    assert plan.count == best


def test_the_switchs_planning_options_reach_the_planner() -> None:
    from seqlen_balancing.cost import WorkloadModel

    env = {"SEQLEN_BALANCING_OVER_CAP": "alone", "SEQLEN_BALANCING_PAD_TO_MULTIPLE_OF": "8",
           "SEQLEN_BALANCING_MICRO_BATCH_MULTIPLE_OF": "16",
           "SEQLEN_BALANCING_MAX_SAMPLES_PER_MICRO_BATCH": "3",
           "SEQLEN_BALANCING_MICRO_BATCH_FIXED_TOKENS": "400"}
    options = PlanOptions.from_env(env)
    expected = {"over_cap": "alone", "pad_to_multiple_of": 8, "micro_batch_multiple_of": 16,
                "max_samples_per_micro_batch": 3, "micro_batch_fixed_tokens": 400.0}
    assert balance_step._rule(options) == expected
    assert balance_step._rule(PlanOptions()) == {}
    model = WorkloadModel(hidden_size=64, num_layers=2)
    with_model = PlanOptions(workload_model=model)
    assert balance_step._rule(with_model) == {"workload_model": model}


@pytest.mark.torch
def test_the_balanced_sampler_takes_every_rule_the_switch_hands_it() -> None:
    from seqlen_balancing import BalancedDistributedSampler
    from seqlen_balancing.cost import WorkloadModel

    options = PlanOptions(over_cap="alone", max_samples_per_micro_batch=2, micro_batch_fixed_tokens=80.0,
                          workload_model=WorkloadModel(hidden_size=64, num_layers=2))
    lengths = OVER_CAP_LENGTHS
    sampler = BalancedDistributedSampler(range(16), num_replicas=2, rank=0, lengths=lengths, batch_size=8,
                                         max_token_len=400, **balance_step._rule(options))
    for step in range(sampler.steps):
        for mbs in sampler.step_plan(step).rank_micro_batches:
            for mb in mbs:
                assert len(mb) <= 2
                assert mb == [4] if 4 in mb else sum(lengths[i] for i in mb) <= 400


def test_ppo_order_with_over_cap_alone_plans_the_over_cap_sample_alone() -> None:
    lengths = [1200, 300, 200, 100, 450, 50, 250, 150]
    order, parts = ppo_order(lengths, 2, CAP, mini_batch_size=8, over_cap="alone")
    assert sorted(order) == list(range(8)) and [len(p) for p in parts] == [4, 4]
    counts = [fewest_alone([lengths[i] for i in p], CAP) for p in parts]
    assert max(counts) == min(max(fewest_alone([lengths[i] for i in half], CAP),
                                  fewest_alone([lengths[i] for i in range(8) if i not in half], CAP))
                              for half in itertools.combinations(range(8), 4))


@pytest.mark.torch
def test_over_cap_raise_keeps_torchs_sampler_naming_the_row(installed: None,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    from torch.utils.data import DistributedSampler

    config = {"data": {"use_dynamic_bsz": True, "train_batch_size": 8, "max_token_len_per_gpu": 400}}
    with caplog.at_level(logging.WARNING, logger="seqlen_balancing.verl"):
        samplers = build_sft_samplers(config, OVER_CAP_LENGTHS)
    assert all(type(s) is DistributedSampler for s in samplers)
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2 and all("keeps DistributedSampler" in m and "row 4 of the dataset (900 tokens"
                                    in m and "SEQLEN_BALANCING_OVER_CAP=alone" in m for m in warned)


@pytest.mark.torch
def test_the_sft_sampler_stays_torchs_on_the_static_path(installed: None) -> None:
    import torch
    from torch.utils.data import DistributedSampler

    train = [{"input_ids": torch.ones(5, dtype=torch.long)} for _ in range(4)]
    config = {"data": {"use_dynamic_bsz": False, "train_batch_size": 4, "max_token_len_per_gpu": 400}}
    trainer = SFT(config, train, train[:2])
    trainer.rank = 0  # type: ignore[attr-defined]
    balance_step._build_dataloader(SFT._build_dataloader)(trainer)
    assert type(trainer.train_sampler) is DistributedSampler  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------- install, revert


STAND_IN_TRAINERS = {
    "verl/trainer/sft_trainer.py": (
        "from torch.utils.data import DistributedSampler\n"
        "class SFTTrainer:\n"
        "    def _build_dataloader(self):\n"
        "        return DistributedSampler\n"
    ),
    "verl/trainer/sft_trainer_ray.py": "from torch.utils.data import DistributedSampler\n",
    "verl/trainer/ppo/__init__.py": "",
    "verl/trainer/ppo/ray_trainer.py": (
        "class RayPPOTrainer:\n"
        "    def _balance_batch(self, batch, metrics, logging_prefix='global_seqlen',\n"
        "                       keep_minibatch=False):\n"
        "        return 'verl'\n"
    ),
}

INSTALL_BODY = """
    import torch.utils.data
    from seqlen_balancing.verl import balance_step
    import verl.trainer.ppo.ray_trainer as early  # imported before apply(): patched by it
    switch.apply()
    import verl.trainer.sft_trainer as late  # imported after: patched on import
    import verl.trainer.sft_trainer_ray  # where the variable cannot act: a line says why
    def state():
        return {
            "sampler": late.DistributedSampler is balance_step.sft_sampler,
            "torch_sampler": late.DistributedSampler is torch.utils.data.DistributedSampler,
            "build": hasattr(late.SFTTrainer._build_dataloader, "__wrapped__"),
            "balance": hasattr(early.RayPPOTrainer._balance_batch, "__wrapped__"),
        }
    on = state()
    switch.revert()
    print(json.dumps({"on": on, "off": state(), "enabled": balance_step.is_enabled()}))
"""


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.parametrize("value", ["1", "0"])
def test_the_variable_patches_the_trainers_and_revert_restores_them(tmp_path: Any, value: str) -> None:
    from test_verl_switch import run, write_verl

    write_verl(tmp_path)
    for relative, text in STAND_IN_TRAINERS.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text, encoding="utf-8")
    result = run(tmp_path, INSTALL_BODY, env={"SEQLEN_BALANCING_BALANCE_STEP": value})
    verls = {"sampler": False, "torch_sampler": True, "build": False, "balance": False}
    ours = {"sampler": True, "torch_sampler": False, "build": True, "balance": True}
    assert result["off"] == verls and result["enabled"] is False
    stderr = str(result["stderr"])
    ray = "SEQLEN_BALANCING_BALANCE_STEP does not act in verl.trainer.sft_trainer_ray (process "
    if value == "0":
        assert result["on"] == verls
        assert "the step is balanced" not in stderr and ray not in stderr
        return
    assert result["on"] == ours
    assert APPLY_LINE in stderr
    assert stderr.count(ray) == 1  # once per process
    assert "splits it over the DP ranks inside SFTTrainer.fit" in stderr


#: What the switch's first line says with the variable on, in every switched process.
APPLY_LINE = ("; SEQLEN_BALANCING_BALANCE_STEP is on: the step is balanced across DP ranks only by a "
              "process that builds torchrun sft_trainer's train sampler or runs PPO's _balance_batch, "
              "each saying so when it does (never by a Ray worker: it does not choose its rows; "
              "sft_trainer_ray's driver says why it does not)")


#: ``torchrun -m verl.trainer.sft_trainer`` runs the file as ``__main__``, which no import
#: hook sees; this stand-in follows verl 0.9.1's order: the sampler bound before ``import
#: verl`` (where verl's plugin switches), ``auto_set_device`` after, the config given to it
#: in ``main``.
MAIN_SFT_TRAINER = """
import json
from torch.utils.data import DistributedSampler
import verl.utils.seqlen_balancing  # noqa: F401  (imports verl: the plugin switches)
from verl.utils.device import auto_set_device

class SFTTrainer:
    def __init__(self, config, rank):
        self.config, self.rank = config, rank
        self.train_dataset = [{"input_ids": [1] * n} for n in (50, 90, 30, 70, 20, 60, 80, 40)]
        self.val_dataset = self.train_dataset[:4]

    def _build_dataloader(self):
        self.train_sampler = DistributedSampler(self.train_dataset, shuffle=True, num_replicas=2,
                                                rank=self.rank, drop_last=True)
        self.val_sampler = DistributedSampler(self.val_dataset, shuffle=False, num_replicas=2,
                                              rank=self.rank, drop_last=True)

def main(config):
    auto_set_device(config)
    out = []
    for rank in range(2):
        trainer = SFTTrainer(config, rank)
        trainer._build_dataloader()
        sampler = trainer.train_sampler
        out.append([type(sampler).__name__, type(trainer.val_sampler).__name__,
                    getattr(sampler, "max_token_len", None), getattr(sampler, "batch_size", None),
                    list(sampler)])
    print(json.dumps(out))

if __name__ == "__main__":
    main({"data": {"use_dynamic_bsz": True, "train_batch_size": 8, "max_token_len_per_gpu": 100},
          "engine": {"ulysses_sequence_parallel_size": 1}})
"""


@pytest.mark.torch
@pytest.mark.slow
def test_the_sft_trainer_run_as_main_gets_the_balanced_sampler(tmp_path: Any) -> None:
    import json
    import os

    import preloaded
    from test_verl_switch import SRC, write_verl

    write_verl(tmp_path)
    files = {
        "verl/__init__.py": "__version__ = '0.9.1'\nimport seqlen_balancing.verl.plugin  # verl's plugins\n",
        "verl/utils/device.py": "def auto_set_device(config):\n    return None\n",
        "verl/trainer/sft_trainer.py": MAIN_SFT_TRAINER,
    }
    for relative, text in files.items():
        (tmp_path / relative).write_text(text, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEQLEN_BALANCING_")}
    env |= {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(SRC)]), "SEQLEN_BALANCING_VERL": "1",
            "SEQLEN_BALANCING_BALANCE_STEP": "1"}
    # as ``python -m``: runpy imports the package verl (the plugin switches) before the file runs
    code = ("import logging; logging.basicConfig(level=logging.INFO, format='%(message)s'); import runpy; "
            "runpy.run_module('verl.trainer.sft_trainer', run_name='__main__', alter_sys=True)")
    proc = preloaded.run([sys.executable, "-c", code], env=env, timeout=100)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [r[:4] for r in ranks] == [["BalancedDistributedSampler", "DistributedSampler", 100, 4]] * 2
    lengths = [50, 90, 30, 70, 20, 60, 80, 40]
    # one step of 8 rows, 440 tokens: 2 ranks x 3 micro-batches of at most 100 (the bound:
    # 440 / 100 rounds up to 5, so 3 per rank); each rank's rows fit 3 micro-batches
    assert sorted(ranks[0][4] + ranks[1][4]) == list(range(8))
    for rank in ranks:
        assert fewest([lengths[i] for i in rank[4]], 100) == 3
    # what docs/verl.md tells a user to look for in each rank's log
    assert proc.stderr.count("verl.trainer.sft_trainer's train sampler is BalancedDistributedSampler") == 2
    assert "max_token_len 100, plan options verl's defaults)" in proc.stderr
    assert APPLY_LINE in proc.stderr and "does not act" not in proc.stderr


@pytest.mark.torch
@pytest.mark.slow
def test_the_ray_sft_trainer_run_as_main_says_why_the_variable_does_not_act(tmp_path: Any) -> None:
    import os

    import preloaded
    from test_verl_switch import SRC, write_verl

    write_verl(tmp_path)
    files = {
        "verl/__init__.py": "__version__ = '0.9.1'\nimport seqlen_balancing.verl.plugin  # verl's plugins\n",
        "verl/trainer/sft_trainer_ray.py": "import verl.utils.seqlen_balancing  # noqa: F401\n",
    }
    for relative, text in files.items():
        (tmp_path / relative).write_text(text, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEQLEN_BALANCING_")}
    env |= {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(SRC)]), "SEQLEN_BALANCING_VERL": "1",
            "SEQLEN_BALANCING_BALANCE_STEP": "1"}
    code = ("import logging; logging.basicConfig(level=logging.INFO, format='%(message)s'); import runpy; "
            "runpy.run_module('verl.trainer.sft_trainer_ray', run_name='__main__', alter_sys=True)")
    proc = preloaded.run([sys.executable, "-c", code], env=env, timeout=100)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert APPLY_LINE in proc.stderr
    said = "SEQLEN_BALANCING_BALANCE_STEP does not act in verl.trainer.sft_trainer_ray"
    assert proc.stderr.count(said) == 1


@pytest.mark.torch
@pytest.mark.slow
def test_the_variable_alone_does_nothing_and_the_plugin_says_so(caplog: pytest.LogCaptureFixture,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from seqlen_balancing.verl.plugin import switch_from_environment

    with caplog.at_level(logging.WARNING, logger="seqlen_balancing.verl"):
        assert switch_from_environment({"SEQLEN_BALANCING_BALANCE_STEP": "1"}) is False
    warned = "SEQLEN_BALANCING_VERL is not on, so SEQLEN_BALANCING_BALANCE_STEP do nothing"
    assert any(warned in r.getMessage() for r in caplog.records)
    # its value is checked where it could act: with the switch on (nothing is replaced)
    monkeypatch.setenv("SEQLEN_BALANCING_VERL", "1")  # apply() reads the process's own
    monkeypatch.setenv("SEQLEN_BALANCING_BALANCE_STEP", "2")
    with pytest.raises(SystemExit, match="SEQLEN_BALANCING_BALANCE_STEP='2' is not a switch value"):
        switch_from_environment()
    assert not balance_step.is_enabled()

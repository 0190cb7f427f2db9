"""BalancedDistributedSampler against torch's own DistributedSampler, the oracle.

Each step's global batch (every rank's rows of that step together) must be the rows
``DistributedSampler`` gives the ranks at that step, for every seed, epoch, shuffle and
drop_last; only the assignment to ranks changes, as the global planner says (the
contract of plan_global_batch itself is tests/test_step.py's). Multi-process checks on
gloo ranks live in tests/distributed/test_sampler.py.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

from seqlen_balancing import BalancedDistributedSampler
from seqlen_balancing.data import load_champ_records

pytestmark = [pytest.mark.torch, pytest.mark.no_tensordict]

CHAMP = [r.response_tokens for r in load_champ_records()]


def steps_of(rows: list[int], batch_size: int) -> list[list[int]]:
    return [rows[s : s + batch_size] for s in range(0, len(rows), batch_size)]


def oracle_steps(n: int, replicas: int, batch_size: int, epoch: int, **kwargs: Any) -> list[Counter[int]]:
    """Each step's rows over all ranks, as DistributedSampler gives them."""
    per_rank = []
    for rank in range(replicas):
        sampler = DistributedSampler(range(n), num_replicas=replicas, rank=rank, **kwargs)
        sampler.set_epoch(epoch)
        per_rank.append(steps_of(list(sampler), batch_size))
    return [sum((Counter(rank[t]) for rank in per_rank), Counter()) for t in range(len(per_rank[0]))]


def balanced(n: int, replicas: int, batch_size: int, cap: int, lengths: list[int], **kwargs: Any
             ) -> list[BalancedDistributedSampler]:
    return [BalancedDistributedSampler(range(n), num_replicas=replicas, rank=r, lengths=lengths,
                                       batch_size=batch_size, max_token_len=cap, **kwargs)
            for r in range(replicas)]


@pytest.mark.parametrize(
    ("n", "replicas", "batch_size", "shuffle", "seed", "drop_last"),
    [
        (512, 4, 16, True, 0, False),
        (515, 4, 16, True, 3, False),  # padded by repeating the head of the order
        (515, 4, 16, True, 3, True),  # cut to a multiple of the replicas
        (300, 8, 8, False, 0, False),  # no shuffle; a short last step (300 / 8 = 37.5 rows)
        (7, 4, 2, True, 1, False),  # fewer rows than twice the replicas: padding repeats rows
    ],
)
def test_every_step_holds_distributed_samplers_rows(
    n: int, replicas: int, batch_size: int, shuffle: bool, seed: int, drop_last: bool
) -> None:
    lengths = [CHAMP[i] for i in range(n)]
    options = {"shuffle": shuffle, "seed": seed, "drop_last": drop_last}
    samplers = balanced(n, replicas, batch_size, 16384, lengths, **options)
    for epoch in (0, 1):
        expected = oracle_steps(n, replicas, batch_size, epoch, **options)
        for s in samplers:
            s.set_epoch(epoch)
        mine = [steps_of(list(s), batch_size) for s in samplers]
        theirs = len(DistributedSampler(range(n), replicas, 0, **options))
        assert [len(s) for s in samplers] == [theirs] * replicas
        assert all(len(m) == len(expected) for m in mine)
        for t, rows in enumerate(expected):
            assert sum((Counter(m[t]) for m in mine), Counter()) == rows, (epoch, t)
            assert {len(m[t]) for m in mine} == {sum(rows.values()) // replicas}


def test_the_ranks_run_the_same_count_under_the_cap_and_beat_the_dealing() -> None:
    n, replicas, batch_size, cap = 8 * 32 * 4, 8, 32, 8192
    lengths = random.Random(0).sample(CHAMP, n)
    samplers = balanced(n, replicas, batch_size, cap, lengths)
    dealt = [DistributedSampler(range(n), replicas, r) for r in range(replicas)]
    for step in range(samplers[0].steps):
        plan = samplers[0].step_plan(step)
        assert all(s.step_plan(step) == plan for s in samplers[1:])  # every rank plans alike
        assert {len(mbs) for mbs in plan.rank_micro_batches} == {plan.count}
        assert all(sum(lengths[i] for i in mb) <= cap for mbs in plan.rank_micro_batches for mb in mbs)
        # the slowest rank carries far less than DistributedSampler's slowest
        def load(rows: list[int]) -> int:
            return sum(24576 * lengths[i] + lengths[i] ** 2 for i in rows)

        heaviest = max(load(rows) for rows in plan.rank_samples)
        theirs = max(load(steps_of(list(d), batch_size)[step]) for d in dealt)
        assert heaviest < theirs


def test_a_data_loader_gets_each_ranks_plan_step_by_step() -> None:
    n, lengths = 96, random.Random(1).sample(CHAMP, 96)
    sampler = BalancedDistributedSampler(range(n), num_replicas=3, rank=1, lengths=lengths,
                                         batch_size=8, max_token_len=8192, seed=5)
    sampler.set_epoch(2)
    batches = [b.tolist() for b in DataLoader(range(n), batch_size=8, sampler=sampler)]
    assert batches == [sampler.step_plan(t).rank_samples[1] for t in range(sampler.steps)]
    # each batch is its micro-batches one after another
    plan = sampler.step_plan(0)
    assert batches[0] == [i for mb in plan.rank_micro_batches[1] for i in mb]


def test_resume_mid_epoch_continues_where_the_state_was_saved() -> None:
    n, lengths = 200, random.Random(2).sample(CHAMP, 200)
    first = BalancedDistributedSampler(range(n), num_replicas=2, rank=0, lengths=lengths,
                                       batch_size=10, max_token_len=8192)
    first.set_epoch(3)
    full = list(first)
    iterator = iter(first)
    seen = [next(iterator) for _ in range(37)]
    state = first.state_dict()
    assert state == {"epoch": 3, "yielded": 37}
    resumed = BalancedDistributedSampler(range(n), num_replicas=2, rank=0, lengths=lengths,
                                         batch_size=10, max_token_len=8192)
    resumed.load_state_dict(state)
    assert seen + list(resumed) == full
    # the next epoch starts from the beginning again
    resumed.set_epoch(3)
    assert list(resumed) == full


def test_the_state_must_hold_a_position_in_the_epoch() -> None:
    sampler = BalancedDistributedSampler(range(8), num_replicas=2, rank=0, lengths=[5] * 8,
                                         batch_size=2, max_token_len=10)
    with pytest.raises(ValueError, match=r"'yielded' in 0..4"):
        sampler.load_state_dict({"yielded": 5})
    with pytest.raises(ValueError, match="'yielded'"):
        sampler.load_state_dict({})


class Rows(torch.utils.data.Dataset[dict[str, Any]]):
    """A map-style dataset of rows with token ids and a length column."""

    def __init__(self, lengths: list[int]) -> None:
        self.sizes = lengths

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"input_ids": torch.arange(self.sizes[i]), "n_tokens": self.sizes[i]}


class Columns(torch.utils.data.Dataset[dict[str, Any]]):
    """A dataset that also gives whole columns, ``dataset[name]``; counts its row reads."""

    def __init__(self, columns: dict[str, list[int]]) -> None:
        self.columns = columns
        self.rows_read = 0

    def __len__(self) -> int:
        return len(next(iter(self.columns.values())))

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return self.columns[key]
        self.rows_read += 1
        return {name: values[key] for name, values in self.columns.items()}


def test_lengths_as_a_list_a_callable_or_a_column() -> None:
    lengths = random.Random(3).sample(CHAMP, 64)
    rows = Rows(lengths)

    def build(**kwargs: Any) -> list[int]:
        return list(BalancedDistributedSampler(rows, num_replicas=2, rank=0, batch_size=8,
                                               max_token_len=8192, **kwargs))

    expected = build(lengths=lengths)
    assert build(lengths=lambda i: lengths[i]) == expected
    assert build(lengths="n_tokens") == expected
    assert build(lengths="input_ids") == expected  # a sequence counts by its length
    # a dataset with whole columns (as Hugging Face datasets have) is read column-wise
    columns = Columns({"length": lengths})
    sampler = BalancedDistributedSampler(columns, num_replicas=2, rank=0, batch_size=8,
                                         max_token_len=8192, lengths="length")
    assert sampler.lengths == lengths and columns.rows_read == 0
    with pytest.raises(ValueError, match="row 0 has no column 'size'"):
        BalancedDistributedSampler(rows, num_replicas=2, rank=0, batch_size=8, max_token_len=8192,
                                   lengths="size")


def test_bad_lengths_and_options_are_refused_at_construction() -> None:
    def build(**kwargs: Any) -> BalancedDistributedSampler:
        arguments: dict[str, Any] = {"lengths": [100, 200, 300, 400], "batch_size": 2,
                                     "max_token_len": 1000, **kwargs}
        return BalancedDistributedSampler(range(4), num_replicas=2, rank=0, **arguments)

    with pytest.raises(ValueError, match="lengths has 3 values but the dataset has 4 rows"):
        build(lengths=[1, 2, 3])
    with pytest.raises(TypeError, match=r"lengths\[1\] must be an integer"):
        build(lengths=[1, 2.5, 3, 4])
    with pytest.raises(ValueError, match=r"lengths\[2\] is -3"):
        build(lengths=[1, 2, -3, 4])
    with pytest.raises(TypeError, match="lengths must be a sequence"):
        build(lengths={0: 1})
    over = r"row 3 of the dataset \(400 tokens, costing 448\) exceeds max_token_len=400"
    with pytest.raises(ValueError, match=over):
        build(max_token_len=400, pad_to_multiple_of=64)
    with pytest.raises(TypeError, match="unknown plan options force_group_size"):
        build(force_group_size=2)
    with pytest.raises(ValueError, match="batch_size"):
        build(batch_size=0)
    with pytest.raises(ValueError, match="Invalid rank"):
        BalancedDistributedSampler(range(4), num_replicas=2, rank=2, lengths=[1] * 4, batch_size=1,
                                   max_token_len=10)


def test_costs_and_plan_options_reach_the_planner() -> None:
    lengths = [100] * 16
    costs = [600] * 16
    sampler = BalancedDistributedSampler(range(16), num_replicas=2, rank=0, lengths=lengths, costs=costs,
                                         batch_size=8, max_token_len=1200, max_samples_per_micro_batch=2)
    plan = sampler.step_plan(0)
    assert plan.count == 4  # two samples of cost 600 per micro-batch
    limited = BalancedDistributedSampler(range(16), num_replicas=2, rank=0, lengths=lengths,
                                         batch_size=8, max_token_len=1200, max_samples_per_micro_batch=2)
    assert limited.step_plan(0).count == 4
    free = BalancedDistributedSampler(range(16), num_replicas=2, rank=0, lengths=lengths,
                                      batch_size=8, max_token_len=1200)
    assert free.step_plan(0).count == 1

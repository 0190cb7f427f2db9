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

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

from seqlen_balancing import BalancedDistributedSampler, PlanOptions
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
    with pytest.raises(TypeError, match="'max_sample_per_micro_batch' is not an option"):
        build(max_sample_per_micro_batch=2)
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


# ---------------------------------------------------------------------------------------
# a row's tokens, whatever shape holds them


EXAMPLE = [100, 900, 300, 700, 500, 500, 200, 800]


def real_tokens_per_micro_batch(sampler: BalancedDistributedSampler, real: list[int]) -> list[int]:
    """Oracle: every micro-batch of every step and rank, summed over the rows' real lengths."""
    return [sum(real[i] for i in mb) for t in range(sampler.steps)
            for mbs in sampler.step_plan(t).rank_micro_batches for mb in mbs]


@pytest.mark.parametrize(
    "row",
    [
        lambda n: torch.ones(1, n, dtype=torch.long),  # a tokenizer's return_tensors="pt", one text
        lambda n: [[7] * n],  # the same as nested lists
        lambda n: np.ones((1, n), dtype=np.int64),
        lambda n: np.ones(n, dtype=np.int64),
        lambda n: torch.ones(n, dtype=torch.long),
        lambda n: [torch.ones(n, dtype=torch.long)],  # one row, a list holding its tensor
        lambda n: torch.ones(1, 1, n, dtype=torch.long),
    ],
    ids=["tensor-1xL", "list-1xL", "numpy-1xL", "numpy-L", "tensor-L", "list-of-one-tensor", "tensor-1x1xL"],
)
def test_a_single_row_counts_its_tokens_whatever_shape_holds_it(row: Any) -> None:
    dataset = [{"input_ids": row(n)} for n in EXAMPLE]
    for rank in range(2):
        sampler = BalancedDistributedSampler(dataset, num_replicas=2, rank=rank, lengths="input_ids",
                                             batch_size=4, max_token_len=1000)
        assert sampler.lengths == EXAMPLE
        assert max(real_tokens_per_micro_batch(sampler, EXAMPLE)) <= 1000
    # the callable path reads the same way
    called = BalancedDistributedSampler(dataset, num_replicas=2, rank=0, batch_size=4, max_token_len=1000,
                                        lengths=lambda i: dataset[i]["input_ids"])
    assert called.lengths == EXAMPLE


def test_a_one_token_row_is_one_token_not_its_id() -> None:
    dataset = [{"input_ids": torch.tensor([4321])}, {"input_ids": np.array([[77]])},
               {"input_ids": torch.tensor(3)}, {"input_ids": np.int64(5)}]  # the last two are lengths
    sampler = BalancedDistributedSampler(dataset, num_replicas=2, rank=0, lengths="input_ids",
                                         batch_size=2, max_token_len=100)
    assert sampler.lengths == [1, 1, 3, 5]


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (torch.ones(2, 5, dtype=torch.long), r"row 3 .*shape \(2, 5\)"),
        (np.ones((3, 1), dtype=np.int64), r"row 3 .*shape \(3, 1\)"),
        ([[1, 2], [3, 4]], r"row 3 .*shape \(2, 2\)"),
        ([[[1, 2]], [[3, 4]]], r"row 3 .*shape \(2, 1, 2\)"),
        (torch.tensor(2.5), r"row 3 .*shape \(\)"),
        ({"input_ids": [1, 2, 3]}, r"row 3 .*dict"),
        ("a text, not its tokens", r"row 3 .*str"),
    ],
)
def test_a_row_of_another_shape_is_refused_by_its_index_and_shape(value: Any, fragment: str) -> None:
    dataset = [{"input_ids": [1, 2, 3]} for _ in range(3)] + [{"input_ids": value}]
    with pytest.raises(ValueError, match=fragment):
        BalancedDistributedSampler(dataset, num_replicas=2, rank=0, lengths="input_ids", batch_size=2,
                                   max_token_len=100)


# ---------------------------------------------------------------------------------------
# the last step: only the steps a data loader can yield are planned


@pytest.mark.parametrize("option", [{"num_batches_divided_by": 2}, {"min_num_micro_batch": 2}])
@pytest.mark.parametrize("sampler_drop_last", [True, False])
def test_a_loader_dropping_the_short_last_step_never_meets_its_plan(
    option: dict[str, int], sampler_drop_last: bool, caplog: pytest.LogCaptureFixture
) -> None:
    # 10 rows over 2 ranks: 5 per rank (10 divides by 2, so drop_last cuts nothing); batches
    # of 4: one full step of 4 per rank, then a short step of 1 per rank, which a loader
    # with drop_last=True drops and which cannot hold 2 micro-batches of 1 row anyway.
    n, replicas, batch = 10, 2, 4
    lengths = [100 * (i + 1) for i in range(n)]
    samplers = [BalancedDistributedSampler(range(n), num_replicas=replicas, rank=r, lengths=lengths,
                                           batch_size=batch, max_token_len=1000,
                                           drop_last=sampler_drop_last, **option)
                for r in range(replicas)]

    def torch_batches(epoch: int, drop_last: bool) -> list[list[list[int]]]:
        out = []
        for r in range(replicas):
            dealt = DistributedSampler(range(n), num_replicas=replicas, rank=r, drop_last=sampler_drop_last)
            dealt.set_epoch(epoch)
            out.append([b.tolist() for b in DataLoader(range(n), batch_size=batch, sampler=dealt,
                                                       drop_last=drop_last)])
        return out

    for epoch in range(2):
        ours = []
        for s in samplers:
            s.set_epoch(epoch)
            ours.append([b.tolist() for b in DataLoader(range(n), batch_size=batch, sampler=s,
                                                        drop_last=True)])
        theirs = torch_batches(epoch, drop_last=True)
        # 5 // 4 = 1 batch of 4 rows per rank, as torch's loader gives
        assert [len(b) for b in ours] == [len(b) for b in theirs] == [1, 1]
        assert all(len(b) == batch for rank in ours for b in rank)
        # the same step's rows over the ranks, each index once
        mine = [i for rank in ours for b in rank for i in b]
        assert sorted(mine) == sorted(i for rank in theirs for b in rank for i in b)
        assert len(set(mine)) == len(mine) == replicas * batch
        # a loader keeping the short step gets DistributedSampler's rows of it, 1 per rank
        kept = [[b.tolist() for b in DataLoader(range(n), batch_size=batch, sampler=s)] for s in samplers]
        assert [rank[1] for rank in kept] == [rank[1] for rank in torch_batches(epoch, drop_last=False)]
        assert [len(rank[1]) for rank in kept] == [1, 1]
    assert [len(s) for s in samplers] == [5, 5]  # DistributedSampler's len: 10 / 2
    warnings = [r for r in caplog.records if "short last step" in r.getMessage()]
    assert len(warnings) == replicas  # once per sampler, not once per epoch
    with pytest.raises(ValueError, match="needs 2 micro-batches per rank"):
        samplers[0].step_plan(1)  # the plan itself is not made up


def test_a_short_last_step_that_can_be_planned_is_still_yielded() -> None:
    # without the option the short step (1 row per rank) plans, and a loader keeping it gets it
    n, lengths = 10, [100 * (i + 1) for i in range(10)]
    sampler = BalancedDistributedSampler(range(n), num_replicas=2, rank=0, lengths=lengths,
                                         batch_size=4, max_token_len=1000)
    batches = [b.tolist() for b in DataLoader(range(n), batch_size=4, sampler=sampler)]
    assert [len(b) for b in batches] == [4, 1] and len(sampler) == 5 and sampler.steps == 2


def test_every_step_short_of_the_options_count_is_refused_at_construction() -> None:
    # batch_size 4 per rank cannot hold min_num_micro_batch=5 micro-batches: no step could plan
    with pytest.raises(ValueError, match=r"min_num_micro_batch=5.*batch_size=4"):
        BalancedDistributedSampler(range(16), num_replicas=2, rank=0, lengths=[10] * 16, batch_size=4,
                                   max_token_len=100, min_num_micro_batch=5)
    with pytest.raises(ValueError, match=r"force_group_size=3.*batch_size=4"):
        BalancedDistributedSampler(range(16), num_replicas=2, rank=0, lengths=[10] * 16, batch_size=4,
                                   max_token_len=100, force_group_size=3)


# ---------------------------------------------------------------------------------------
# options=


def test_options_give_the_same_plan_as_the_keywords_and_keywords_lie_over_them() -> None:
    n, lengths = 96, [min(s, 4096) for s in random.Random(7).sample(CHAMP, 96)]
    keywords: dict[str, Any] = {"max_samples_per_micro_batch": 3, "pad_to_multiple_of": 64,
                                "num_batches_divided_by": 2, "micro_batch_fixed_tokens": 800.0}

    def build(**kwargs: Any) -> BalancedDistributedSampler:
        return BalancedDistributedSampler(range(n), num_replicas=3, rank=1, lengths=lengths, batch_size=8,
                                          max_token_len=4096, **kwargs)

    by_keywords, by_options = build(**keywords), build(options=PlanOptions(**keywords))
    assert by_options.options == by_keywords.options == PlanOptions(**keywords)
    assert list(by_options) == list(by_keywords)
    plans = [by_keywords.step_plan(t) for t in range(by_keywords.steps)]
    assert [by_options.step_plan(t) for t in range(by_options.steps)] == plans
    assert all(len(mb) <= 3 for plan in plans for mbs in plan.rank_micro_batches for mb in mbs)
    assert all(plan.count % 2 == 0 for plan in plans)
    # a keyword lies over options=, as in plan_micro_batches
    over = build(options=PlanOptions(**keywords), max_samples_per_micro_batch=2)
    assert over.options.max_samples_per_micro_batch == 2 and over.options.pad_to_multiple_of == 64
    assert list(over) == list(build(**{**keywords, "max_samples_per_micro_batch": 2}))


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"options": {"padded": True}}, TypeError, "options must be a seqlen_balancing.PlanOptions"),
        ({"max_samples_per_micro_batch": 0}, ValueError, "max_samples_per_micro_batch must be a positive"),
        ({"padded": "yes"}, TypeError, "padded must be a bool"),
        ({"micro_batch_fixed_tokens": -1.0}, ValueError, "micro_batch_fixed_tokens must be a finite number"),
        ({"num_batches_divided_by": 0}, ValueError, "num_batches_divided_by must be a positive"),
        ({"use_dynamic_bsz_balance": None}, TypeError, "use_dynamic_bsz_balance must be a bool"),
        ({"force_group_size": 2, "max_samples_per_micro_batch": 1}, ValueError, "max_samples_per_micro"),
        ({"dummy_micro_batches": True}, ValueError, "dummy_micro_batches"),
        ({"equal_rows_per_micro_batch": True}, ValueError, "equal_rows_per_micro_batch"),
        ({"padded_rows": True}, TypeError, "'padded_rows' is not an option"),
    ],
)
def test_a_bad_option_is_refused_at_construction(kwargs: dict[str, Any], error: type[Exception],
                                                 fragment: str) -> None:
    with pytest.raises(error, match=fragment):
        BalancedDistributedSampler(range(16), num_replicas=2, rank=0, lengths=[10] * 16, batch_size=8,
                                   max_token_len=100, **kwargs)

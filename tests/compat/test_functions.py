"""The partition helpers against verl 0.9.1 on random inputs (500 each)."""

from __future__ import annotations

import random
from types import ModuleType

import numpy as np
import pytest
import torch

pytestmark = [pytest.mark.torch, pytest.mark.slow]  # with torch and verl only (tests/conftest.py)


def random_lengths(rng: random.Random, n: int) -> list[int]:
    # Mostly small values (many ties, which is where tie-breaks show) and some long ones.
    return [rng.choice([rng.randint(0, 9), rng.randint(0, 40_000)]) for _ in range(n)]


def test_ceildiv_and_roundup_divisible(random_inputs: int, verl: ModuleType, ours: ModuleType) -> None:
    rng = random.Random(0)
    for _ in range(random_inputs):
        a = rng.randint(-(10**12), 10**12)
        b = rng.choice([-1, 1]) * rng.randint(1, 10**6)
        assert ours.ceildiv(a, b) == verl.ceildiv(a, b)
        # verl's roundup_divisible is defined for a positive divisor (ours refuses others).
        assert ours.roundup_divisible(a, abs(b)) == verl.roundup_divisible(a, abs(b))


def test_calculate_workload(random_inputs: int, verl: ModuleType, ours: ModuleType) -> None:
    rng = np.random.default_rng(1)
    for trial in range(random_inputs):
        n = int(rng.integers(0, 50))
        dtype = [torch.int64, torch.float32, torch.float64, torch.int32][trial % 4]
        high = 30_000 if dtype == torch.int32 else 3_000_000  # int32: below verl's overflow
        lengths = torch.tensor(rng.integers(0, high, size=n)).to(dtype)
        got, want = ours.calculate_workload(lengths), verl.calculate_workload(lengths)
        assert torch.equal(got, want.to(got.dtype))
        # Floats come back as verl's floats, bit for bit; integers as int64 (verl: the input's).
        assert got.dtype == (dtype if dtype.is_floating_point else torch.int64)
    # Issue 9, case 3: what verl's SFT trainer passes.
    sft = torch.Tensor([5.0, 7.0])
    got, want = ours.calculate_workload(sft), verl.calculate_workload(sft)
    assert got.dtype == want.dtype == torch.float32 and torch.equal(got, want)


def test_get_reverse_idx(random_inputs: int, verl: ModuleType, ours: ModuleType) -> None:
    rng = random.Random(2)
    for trial in range(random_inputs):
        permutation = list(range(rng.randint(0, 60)))
        rng.shuffle(permutation)
        kind = trial % 3
        given = (
            permutation
            if kind == 0
            else torch.tensor(permutation, dtype=torch.long)
            if kind == 1
            else np.array(permutation, dtype=np.int64)
        )
        got, want = ours.get_reverse_idx(given), verl.get_reverse_idx(given)
        assert type(got) is type(want)
        if kind == 0:
            assert got == want
        elif kind == 1:
            assert got.dtype == want.dtype and torch.equal(got, want)
        else:
            assert got.dtype == want.dtype and np.array_equal(got, want)


def test_greedy_partition(random_inputs: int, verl: ModuleType, ours: ModuleType) -> None:
    rng = random.Random(3)
    for trial in range(random_inputs):
        n = rng.randint(0, 60)
        k = rng.randint(1, max(1, n) + 2)  # includes k > n (verl leaves partitions empty)
        equal_size = trial % 2 == 0
        if equal_size:
            n -= n % k
        values: object = random_lengths(rng, n)
        if trial % 5 == 4:
            values = torch.tensor(values, dtype=torch.float32)  # whole floats, as verl takes them
        assert ours.greedy_partition(values, k, equal_size) == verl.greedy_partition(values, k, equal_size)


def test_log_seqlen_unbalance(random_inputs: int, verl: ModuleType, ours: ModuleType) -> None:
    rng = random.Random(4)
    for _ in range(random_inputs):
        n = rng.randint(1, 60)
        k = rng.randint(1, n)
        lengths = random_lengths(rng, n)
        labels = [rng.randrange(k) for _ in range(n)]
        partitions = [[i for i in range(n) if labels[i] == p] for p in range(k)]
        if any(not part for part in partitions):
            partitions = [list(range(p, n, k)) for p in range(k)]
        got = ours.log_seqlen_unbalance(lengths, partitions, "global_seqlen")
        want = verl.log_seqlen_unbalance(lengths, partitions, "global_seqlen")
        assert got == want
        assert [type(v) for v in got.values()] == [type(v) for v in want.values()]


def spread(values: list[int], parts: list[list[int]]) -> int:
    sums = [sum(values[i] for i in part) for part in parts]
    return max(sums) - min(sums)


def test_karmarkar_karp_and_balanced_partitions_are_verls(
    random_inputs: int, verl: ModuleType, ours: ModuleType
) -> None:
    # Issue 19: the same partitions as verl, index list for index list (order of the
    # partitions and of the indices inside them included), ties everywhere.
    rng = random.Random(5)
    for trial in range(4 * random_inputs):
        n = rng.randint(1, 48)
        k = rng.randint(1, n)
        equal_size = trial % 2 == 0 and n % k == 0
        values: object = random_lengths(rng, n) if trial % 3 else [rng.randint(0, 3) for _ in range(n)]
        if trial % 7 == 6:
            values = torch.tensor(values, dtype=torch.float32)  # as verl's SFT trainer passes
        assert ours.karmarkar_karp(values, k, equal_size) == verl.karmarkar_karp(values, k, equal_size)
        got = ours.get_seqlen_balanced_partitions(values, k, equal_size)
        assert got == verl.get_seqlen_balanced_partitions(values, k, equal_size)
    # Issue 19, case 5 (verl's sums are [23, 22, 22]).
    case = [11, 10, 6, 3, 5, 10, 16, 6]
    assert ours.karmarkar_karp(case, 3, False) == verl.karmarkar_karp(case, 3, False)
    # A large case: 4,096 items into 256 partitions (verl takes seconds here).
    big = [rng.randint(0, 40_000) for _ in range(4096)]
    assert ours.karmarkar_karp(big, 256, False) == verl.karmarkar_karp(big, 256, False)


def test_float32_sums_past_2_to_the_24_partition_as_verls(
    random_inputs: int, verl: ModuleType, ours: ModuleType
) -> None:
    # Issue 46, item 3: verl keeps the sums of a float32 tensor's items in float32, which
    # rounds past 2**24; its SFT trainer balances calculate_workload(torch.Tensor(lengths)).
    rng = random.Random(46)
    rounding_decided = 0
    for trial in range(random_inputs):
        n, k = rng.randint(16, 96), rng.randint(2, 8)
        equal_size = trial % 2 == 0
        n -= n % k if equal_size else 0
        lengths = torch.Tensor([rng.randint(0, 32768) for _ in range(n)])
        values = verl.calculate_workload(lengths) if trial % 4 < 3 else lengths * 4096
        assert values.dtype == torch.float32 and values.double().sum() > 2**24
        given: object = values if trial % 3 else values.numpy()  # a tensor or a NumPy array
        kk = verl.karmarkar_karp(values, k, equal_size)
        assert ours.karmarkar_karp(given, k, equal_size) == kk, trial
        assert ours.get_seqlen_balanced_partitions(given, k, equal_size) == [sorted(p) for p in kk]
        assert ours.greedy_partition(given, k, equal_size) == verl.greedy_partition(values, k, equal_size)
        rounding_decided += ours.karmarkar_karp([int(v) for v in values.tolist()], k, equal_size) != kk
    assert rounding_decided >= 5  # inputs where exact sums give another partition
    sft = [3765, 30817, 14350, 9825, 28544, 25697, 7113, 20034, 14106, 13834, 10, 7534, 3612, 532,
           32621, 15886]  # issue 46's example
    values = verl.calculate_workload(torch.Tensor(sft))
    want = verl.get_seqlen_balanced_partitions(values, 2, True)
    assert ours.get_seqlen_balanced_partitions(ours.calculate_workload(torch.Tensor(sft)), 2, True) == want


def workload(s: int) -> int:
    return 24576 * s + s * s


# Issue 9, case 2.
def test_group_balanced_partitions_on_grpo_batches(verl: ModuleType, ours: ModuleType) -> None:
    for seed in range(100):
        rng = random.Random(seed)
        lengths = [max(1, int(rng.lognormvariate(6, 1))) for _ in range(64)]
        uids = [f"prompt-{g}" for g in range(16) for _ in range(4)]
        got = ours.get_group_balanced_partitions(lengths, uids, 4)
        want = verl.get_group_balanced_partitions(lengths, uids, 4)
        assert [len(part) for part in got] == [16] * 4
        loads = [workload(s) for s in lengths]
        assert spread(loads, got) <= spread(loads, want)

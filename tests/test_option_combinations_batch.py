"""The pairs issue 27 refused, through the TensorDict API: padded with dummies (a dummy cut
to its own width), padded with an over-cap row alone, the sample limit with an over-cap row
alone, and all of them at once. Each plan is checked against the rule spelled out here
(rows x the window each micro-batch keeps, the limit, the over-cap row alone), the exact
cover, the dummies' zero loss weights, and restore_dynamic_batch giving back the input."""

from __future__ import annotations

import random
from typing import Any

import pytest

pytestmark = pytest.mark.torch

torch = pytest.importorskip("torch")
tensordict = pytest.importorskip("tensordict")

from seqlen_balancing import rearrange_micro_batches, restore_dynamic_batch  # noqa: E402
from seqlen_balancing.batch import MicroBatchIndices  # noqa: E402
from test_padded_batch import layout, same, window  # noqa: E402


def with_loss_mask(batch: Any) -> Any:
    batch["loss_mask"] = batch["attention_mask"].float()
    return batch


def real_rows(spans: list[tuple[int, int]]) -> list[int]:
    return [hi - lo for lo, hi in spans]


def check(batch: Any, spans: list[tuple[int, int]], mbs: list[Any], idx: list[Any], cap: int, *,
          padded: bool, limit: int | None = None) -> None:
    """The rule spelled out on every micro-batch, the exact cover, dummies last and zeroed."""
    n, width = len(spans), int(batch["attention_mask"].shape[1])
    lengths = real_rows(spans)
    assert sorted(i for part in idx for i in part) == list(range(n))
    real = [m for m, part in enumerate(idx) if part]
    assert real == list(range(len(real)))  # dummies (empty lists) come last
    for m, (mb, part) in enumerate(zip(mbs, idx, strict=True)):
        if not part:  # a dummy: a copy of one real row, cut to its own window, weights zero
            assert mb.batch_size[0] >= 1 and float(mb["loss_mask"].abs().sum()) == 0.0
            if padded:
                rows = mb["uid"].tolist()
                assert isinstance(part, MicroBatchIndices)
                lo, hi = window(spans, rows, width)
                assert (part.start, part.stop) == (lo, hi)
                assert torch.equal(mb["input_ids"], batch["input_ids"][torch.tensor(rows)][:, lo:hi])
            continue
        rows = list(part)
        assert mb["uid"].tolist() == rows
        lo, hi = window(spans, rows, width) if padded else (0, width)
        cost = len(rows) * (hi - lo) if padded else sum(lengths[i] for i in rows)
        assert mb["input_ids"].shape[1] == hi - lo
        alone_over = len(rows) == 1 and cost > cap
        assert cost <= cap or alone_over, (m, rows, cost)
        assert limit is None or len(rows) <= limit or alone_over
        assert torch.equal(mb["loss_mask"], batch["loss_mask"][torch.tensor(rows)][:, lo:hi])
    # restore: the list of outputs gives back the input (the dummies' outputs dropped)
    assert same(restore_dynamic_batch(mbs, idx), batch)


def right_padded(lengths: list[int]) -> tuple[Any, list[tuple[int, int]]]:
    spans = [(0, s) for s in lengths]
    return with_loss_mask(layout(spans, max(lengths), extra=max(lengths) + 1)), spans


def test_padded_with_dummies_cuts_each_dummy_to_its_own_width() -> None:
    batch, spans = right_padded([30, 5, 40])
    mbs, idx = rearrange_micro_batches(batch, 100, padded=True, num_batches_divided_by=5,
                                       dummy_micro_batches=True)
    assert len(mbs) == 5 and [list(p) for p in idx[3:]] == [[], []]
    check(batch, spans, mbs, idx, 100, padded=True)
    # the dummy copies the cheapest row (5 tokens) and is 5 wide, not the batch's 40
    assert mbs[3]["uid"].tolist() == [1] and mbs[3]["input_ids"].shape == (1, 5)


def test_padded_with_an_over_cap_row_alone() -> None:
    batch, spans = right_padded([150, 40, 30, 20, 10])
    mbs, idx = rearrange_micro_batches(batch, 100, padded=True, over_cap="alone")
    check(batch, spans, mbs, idx, 100, padded=True)
    assert [list(part) for part in idx if 0 in part] == [[0]]
    # the rest: three rows of 40 wide cost 120 > 100, so at least two micro-batches (of
    # two rows each: 2 x 40 = 80, 2 x 30 = 60), and the sorted rule finds two
    assert len(idx) == 1 + 2


def test_the_sample_limit_with_an_over_cap_row_alone() -> None:
    batch, spans = right_padded([500, 10, 20, 30, 40, 50])
    mbs, idx = rearrange_micro_batches(batch, 200, max_samples_per_micro_batch=2, over_cap="alone")
    check(batch, spans, mbs, idx, 200, padded=False, limit=2)
    assert len(mbs) == 1 + 3  # 500 alone; five rows, two at most: 3


@pytest.mark.parametrize("seed", range(3))
def test_every_option_at_once_on_random_two_sided_layouts(seed: int) -> None:
    """Padded, two-sided rows, a sample limit, over-cap rows alone and dummies for a count
    above the rows, on random batches: the rule, the cover and the restore hold."""
    rng = random.Random(seed)
    for _ in range(10):
        n, prompt, response = rng.randint(1, 7), rng.randint(1, 12), rng.randint(1, 12)
        spans = [(prompt - rng.randint(1, prompt), prompt + rng.randint(0, response)) for _ in range(n)]
        batch = with_loss_mask(layout(spans, prompt + response, extra=prompt + response + 1))
        cap, limit = rng.randint(8, 40), rng.choice([None, 1, 2, 3])
        floor = rng.randint(1, n + 3)
        mbs, idx = rearrange_micro_batches(
            batch, cap, padded=True, max_samples_per_micro_batch=limit, over_cap="alone",
            min_num_micro_batch=floor, dummy_micro_batches=True,
        )
        assert len(mbs) >= floor
        check(batch, spans, mbs, idx, cap, padded=True, limit=limit)

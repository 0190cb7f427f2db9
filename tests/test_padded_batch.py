"""padded=True through the TensorDict API (issue 26): micro-batches cut to their width on
the side(s) the mask pads, restore_dynamic_batch back to the input's width, the sample
limit, the settings prepare_micro_batches reads, and the docs page's example."""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from oracles import oracle_count

pytestmark = pytest.mark.torch

torch = pytest.importorskip("torch")
tensordict = pytest.importorskip("tensordict")
NonTensorData = tensordict.NonTensorData
TensorDict = tensordict.TensorDict

from seqlen_balancing import (  # noqa: E402
    prepare_dynamic_batch,
    prepare_micro_batches,
    rearrange_micro_batches,
    restore_dynamic_batch,
)
from seqlen_balancing.batch import MicroBatchIndices  # noqa: E402

PAD_ID = 7


def layout(spans: list[tuple[int, int]], width: int, seed: int = 0, extra: int = 5) -> Any:
    """A batch whose row i holds real tokens in columns ``spans[i]``: a mask, input_ids
    (pad id 7 elsewhere), position_ids (0 elsewhere), a per-sample uid and an entry of
    another width (``extra`` columns, never cut)."""
    gen = torch.Generator().manual_seed(seed)
    n = len(spans)
    mask = torch.zeros(n, width, dtype=torch.long)
    for row, (lo, hi) in enumerate(spans):
        mask[row, lo:hi] = 1
    ids = torch.randint(100, 1000, (n, width), generator=gen)
    ids = torch.where(mask.bool(), ids, torch.full_like(ids, PAD_ID))
    positions = (mask.cumsum(1) - 1).clamp(min=0) * mask
    other = torch.randint(0, 9, (n, extra), generator=gen)
    return TensorDict({"attention_mask": mask, "input_ids": ids, "position_ids": positions,
                       "uid": torch.arange(n), "other": other}, batch_size=[n])


def same(a: Any, b: Any) -> bool:
    return sorted(a.keys()) == sorted(b.keys()) and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and bool((a[k] == b[k]).all())
        for k in a.keys()
    )


def window(spans: list[tuple[int, int]], rows: list[int], width: int, pad: int = 1) -> tuple[int, int]:
    """The columns a micro-batch of ``rows`` keeps, spelled out: the hull of its rows' real
    tokens, widened to a multiple of ``pad`` to the right, then to the left, within the
    batch; rows without a real token add nothing (none at all: no column, at the largest
    first real column of the batch)."""
    real = [i for i in range(len(spans)) if spans[i][1] > spans[i][0]]
    anchor = max((spans[i][0] for i in real), default=0)
    mine = [i for i in rows if i in real]
    lo = min((spans[i][0] for i in mine), default=anchor)
    hi = max((spans[i][1] for i in mine), default=anchor)
    wanted = min(width, -(-(hi - lo) // pad) * pad)
    right = min(wanted - (hi - lo), width - hi)
    return lo - (wanted - (hi - lo) - right), hi + right


def check_cut(batch: Any, spans: list[tuple[int, int]], mbs: list[Any], idx: list[Any], cap: int,
              pad: int = 1) -> None:
    width = int(batch["attention_mask"].shape[1])
    assert sorted(i for part in idx for i in part) == list(range(len(spans)))
    for mb, part in zip(mbs, idx, strict=True):
        assert isinstance(part, MicroBatchIndices) and isinstance(part, list)
        lo, hi = window(spans, list(part), width, pad)
        assert (part.start, part.stop, part.width) == (lo, hi, width)
        rows = torch.tensor(list(part))
        for key in ("attention_mask", "input_ids", "position_ids"):
            assert torch.equal(mb[key], batch[key][rows][:, lo:hi]), key
        assert torch.equal(mb["other"], batch["other"][rows])  # another width: not cut
        assert torch.equal(mb["uid"], batch["uid"][rows])
        assert len(part) * (hi - lo) <= cap  # the footprint the GPU holds


# ------------------------------------------------------------------------ the cases


def test_80_rows_of_200_tokens_in_a_9216_wide_batch() -> None:
    spans = [(0, 200)] * 80
    batch = layout(spans, 9_216)
    mbs, idx = rearrange_micro_batches(batch, 16_384, padded=True)
    assert len(mbs) == 1 and mbs[0]["input_ids"].shape == (80, 200)  # 16,000 positions
    check_cut(batch, spans, mbs, idx, 16_384)
    assert same(restore_dynamic_batch(mbs, idx), batch)
    mbs, idx = rearrange_micro_batches(batch, 8_000, padded=True)
    assert sorted(mb["input_ids"].shape for mb in mbs) == [(40, 200), (40, 200)]
    check_cut(batch, spans, mbs, idx, 8_000)
    assert same(restore_dynamic_batch(mbs, idx), batch)
    # Without padded, the one micro-batch keeps the batch's width: 80 x 9,216 positions.
    plain, plain_idx = rearrange_micro_batches(batch, 16_384)
    assert plain[0]["input_ids"].shape == (80, 9_216) and type(plain_idx[0]) is list


def test_left_padded_prompt_plus_right_padded_response_is_cut_on_both_sides() -> None:
    rng = random.Random(3)
    prompt_width, response_width = 12, 10
    prompts = [rng.randint(1, prompt_width) for _ in range(9)]
    responses = [rng.randint(0, response_width) for _ in range(9)]
    spans = [(prompt_width - p, prompt_width + r) for p, r in zip(prompts, responses, strict=True)]
    batch = layout(spans, prompt_width + response_width, extra=response_width + 1)
    cap = 60
    mbs, idx = rearrange_micro_batches(batch, cap, padded=True)
    check_cut(batch, spans, mbs, idx, cap)
    for part in idx:  # both sides cut: the widest prompt and the widest response
        assert part.start == prompt_width - max(prompts[i] for i in part)
        assert part.stop == prompt_width + max(responses[i] for i in part)
    assert any(part.start > 0 for part in idx) and any(part.stop < 22 for part in idx)
    assert same(restore_dynamic_batch(mbs, idx), batch)
    # Per-token outputs of each micro-batch's width come back at the batch's width.
    outputs = [mb["input_ids"].to(torch.float32) * 0.5 for mb in mbs]
    restored = restore_dynamic_batch(outputs, idx)
    assert restored.shape == (9, 22) and restored.dtype == torch.float32
    real = batch["attention_mask"].bool()
    assert torch.equal(restored[real], batch["input_ids"][real].to(torch.float32) * 0.5)
    for part in idx:
        for i in part:
            assert bool((restored[i, : part.start] == 0).all() and (restored[i, part.stop :] == 0).all())
    # An uncut entry whose width happens to be a micro-batch's width stays as it is.
    kept = {part.stop - part.start for part in idx}
    for width in kept:
        odd = layout(spans, prompt_width + response_width, extra=width)
        odd_mbs, odd_idx = rearrange_micro_batches(odd, cap, padded=True)
        assert same(restore_dynamic_batch(odd_mbs, odd_idx), odd)
    # Per-sample outputs (no width) are restored as before.
    per_sample = restore_dynamic_batch([mb["uid"] * 3 for mb in mbs], idx)
    assert per_sample.tolist() == [3 * i for i in range(9)]


def test_64_samples_of_100_tokens_at_most_16_per_micro_batch() -> None:
    batch = layout([(0, 100)] * 64, 120)
    mbs, idx = rearrange_micro_batches(batch, 16_384, max_samples_per_micro_batch=16)
    assert [len(mb) for mb in mbs] == [16] * 4 and all(type(part) is list for part in idx)
    assert all(mb["input_ids"].shape[1] == 120 for mb in mbs)  # not padded: not cut
    mbs, idx = rearrange_micro_batches(batch, 16_384, max_samples_per_micro_batch=16, padded=True)
    assert [tuple(mb["input_ids"].shape) for mb in mbs] == [(16, 100)] * 4


# ------------------------------------------------------------------------ issue 46 item 2


def verl_layout(prompts: list[int], responses: list[int], width: int = 8) -> Any:
    """verl's padded PPO batch, built by hand: prompts left-padded to ``width``, responses
    right-padded to ``width``; input_ids, attention_mask and position_ids ``2 * width``
    wide; responses, response_mask, old_log_probs and advantages ``width`` wide (the last
    ``width`` columns of input_ids), prompts ``width`` wide (the first). Pads: 0, except
    input_ids' pad id 7."""
    n = len(prompts)
    mask = torch.zeros(n, 2 * width, dtype=torch.long)
    for row, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        mask[row, width - p : width + r] = 1
    ids = torch.where(mask.bool(), torch.arange(n * 2 * width).view(n, -1) + 100, PAD_ID)
    noise = torch.randn(n, 2 * width, generator=torch.Generator().manual_seed(1))
    log_probs = torch.where(mask.bool(), noise, 0.0)
    return TensorDict({
        "input_ids": ids, "attention_mask": mask, "position_ids": (mask.cumsum(1) - 1).clamp(min=0) * mask,
        "prompts": ids[:, :width].clone(), "responses": ids[:, width:].clone(),
        "response_mask": mask[:, width:].clone(), "old_log_probs": log_probs[:, width:].clone(),
        "advantages": log_probs[:, width:].clone() * 3, "uid": torch.arange(n),
    }, batch_size=[n])


def test_verls_response_entries_are_cut_with_the_response_columns_of_input_ids() -> None:
    prompts, responses, width, cap = [3, 8, 2, 5, 4, 6], [6, 1, 3, 8, 2, 2], 8, 40
    batch = verl_layout(prompts, responses, width)
    mbs, idx = rearrange_micro_batches(batch, cap, padded=True)
    assert sorted(i for part in idx for i in part) == list(range(6))
    for mb, part in zip(mbs, idx, strict=True):
        rows = list(part)
        lo, hi = width - max(prompts[i] for i in rows), width + max(responses[i] for i in rows)
        assert len(rows) * (hi - lo) <= cap
        # the oracle, from the lengths alone: row i's token at column c is 100 + 16 i + c
        expect_ids = torch.tensor([[100 + 2 * width * i + c if width - prompts[i] <= c < width + responses[i]
                                    else PAD_ID for c in range(lo, hi)] for i in rows])
        expect_resp = torch.tensor([[100 + 2 * width * i + c if c < width + responses[i] else PAD_ID
                                     for c in range(width, hi)] for i in rows])
        expect_prompts = torch.tensor([[100 + 2 * width * i + c if c >= width - prompts[i] else PAD_ID
                                        for c in range(lo, width)] for i in rows])
        assert torch.equal(mb["input_ids"], expect_ids)
        assert torch.equal(mb["responses"], expect_resp)
        assert torch.equal(mb["prompts"], expect_prompts)
        response_width = mb["responses"].shape[1]
        assert response_width == hi - width
        assert torch.equal(mb["input_ids"][:, -response_width:], mb["responses"])  # verl's slice
        assert torch.equal(mb["input_ids"][:, : mb["prompts"].shape[1]], mb["prompts"])
        for key in ("response_mask", "old_log_probs", "advantages"):
            assert mb[key].shape == (len(rows), response_width), key
            assert torch.equal(mb[key], batch[key][rows][:, : hi - width]), key
        assert torch.equal(mb["response_mask"], mb["attention_mask"][:, -response_width:])
    assert any(mb["responses"].shape[1] < width for mb in mbs)  # some micro-batch is cut
    restored = restore_dynamic_batch(mbs, idx)
    assert same(restored, batch)
    # per-token outputs of the response width (verl's log-probs) come back at its width
    outputs = [mb["old_log_probs"] * 2 for mb in mbs]
    assert torch.equal(restore_dynamic_batch(outputs, idx), batch["old_log_probs"] * 2)
    # and outputs of the micro-batch's width, as before: 0 outside each one's window
    outputs = [mb["input_ids"] + 1 for mb in mbs]
    expected = torch.zeros(6, 2 * width, dtype=torch.long)
    for part in idx:
        lo, hi = width - max(prompts[i] for i in part), width + max(responses[i] for i in part)
        for i in part:
            expected[i, lo:hi] = batch["input_ids"][i, lo:hi] + 1
    assert torch.equal(restore_dynamic_batch(outputs, idx), expected)


def test_response_width_follows_response_mask_without_responses_and_other_widths_stay() -> None:
    prompts, responses = [2, 5, 1, 4], [1, 3, 2, 6]
    batch = verl_layout(prompts, responses, 6).exclude("responses", "prompts")
    batch["scores"] = torch.arange(4 * 5).view(4, 5)  # a width of its own: not a window
    mbs, idx = rearrange_micro_batches(batch, 20, padded=True)
    for mb, part in zip(mbs, idx, strict=True):
        hi = 6 + max(responses[i] for i in part)
        assert torch.equal(mb["response_mask"], mb["attention_mask"][:, -(hi - 6):])
        assert torch.equal(mb["scores"], batch["scores"][list(part)])
    assert same(restore_dynamic_batch(mbs, idx), batch)


# ------------------------------------------------------------------------ against an oracle


@pytest.mark.parametrize("seed", range(4))
def test_random_layouts_are_cut_to_the_oracles_windows_and_restored(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(12):
        n, width = rng.randint(1, 7), rng.randint(4, 30)
        side = rng.choice(["right", "left", "both"])
        spans = []
        for _ in range(n):
            length = rng.randint(0, width // 2 if side == "both" else width)
            if side == "right":
                spans.append((0, length))
            elif side == "left":
                spans.append((width - length, width))
            else:
                left = rng.randint(0, min(length, width // 2))
                spans.append((width // 2 - left, width // 2 + length - left))
        pad = rng.choice([1, 1, 4])
        cap = rng.randint(width, 4 * width)
        batch = layout(spans, width, seed, extra=width + 3)
        mbs, idx = rearrange_micro_batches(batch, cap, padded=True, pad_to_multiple_of=pad)
        check_cut(batch, spans, mbs, idx, cap, pad)
        for part in idx:  # each micro-batch within the plan's rows x aligned width
            real = [i for i in part if spans[i][1] > spans[i][0]]
            span = max((spans[i][1] for i in real), default=0) - min((spans[i][0] for i in real), default=0)
            assert len(part) * -(-span // pad) * pad <= cap
        if side != "both":  # one side: the fewest micro-batches, by brute force
            lengths = [hi - lo for lo, hi in spans]
            assert len(mbs) == oracle_count(lengths, cap, padded=True, pad=pad)
        assert same(restore_dynamic_batch(mbs, idx), batch)


def test_rows_that_end_before_the_shared_column_are_charged_their_own_span() -> None:
    """Right-padded rows beside a left-padded one share no column with it: a micro-batch of
    the short right-padded rows holds only their hull (3 wide), not the columns up to the
    left-padded row's first (7). The plan, the error and the cut all say 3."""
    spans = [(0, 3), (0, 2), (7, 10)]
    batch = layout(spans, 10, extra=4)
    mbs, idx = rearrange_micro_batches(batch, 6, padded=True)
    assert sorted(map(sorted, idx)) == [[0, 1], [2]]  # 2 rows x 3 = 6 and 1 x 3 = 3
    assert sorted(tuple(mb["input_ids"].shape) for mb in mbs) == [(1, 3), (2, 3)]
    check_cut(batch, spans, mbs, idx, 6)
    assert same(restore_dynamic_batch(mbs, idx), batch)
    # each row fits alone at a cap of its own span; only a row that does not is named
    with pytest.raises(ValueError, match=r"^sample 0 has 3 tokens; padded=True holds it as 1 row x 3 wide"):
        rearrange_micro_batches(layout([(0, 3), (6, 9)], 9), 2, padded=True)
    mbs, idx = rearrange_micro_batches(layout([(0, 3), (6, 9)], 9), 3, padded=True)
    assert sorted(map(sorted, idx)) == [[0], [1]]


# ------------------------------------------------------------------------ settings, other paths


def test_prepare_micro_batches_reads_padded_and_the_sample_limit_from_the_batch() -> None:
    batch = layout([(0, 20)] * 12, 50)
    batch["max_token_len_per_gpu"] = NonTensorData(1_000)
    batch["padded"] = NonTensorData(True)
    batch["max_samples_per_micro_batch"] = NonTensorData(5)
    mbs, idx = prepare_micro_batches(batch)
    assert sorted(len(mb) for mb in mbs) == [4, 4, 4] and all(len(part) == 4 for part in idx)
    assert all(mb["input_ids"].shape[1] == 20 for mb in mbs)
    mbs, _ = prepare_micro_batches(batch, max_samples_per_micro_batch=12, padded=False)
    assert [tuple(mb["input_ids"].shape) for mb in mbs] == [(12, 50)]  # the arguments win
    batch["padded"] = NonTensorData("yes")
    with pytest.raises(TypeError, match="padded must be a bool"):
        prepare_micro_batches(batch)


def test_prepare_dynamic_batch_cuts_the_tensors_and_keeps_the_arrays_per_sample() -> None:
    class Proto:
        def __init__(self, batch: Any, non_tensor_batch: Any, meta_info: Any = None) -> None:
            self.batch, self.non_tensor_batch, self.meta_info = batch, non_tensor_batch, meta_info or {}

        @classmethod
        def from_dict(cls, tensors: Any, non_tensors: Any, meta_info: Any = None) -> Proto:
            size = len(next(iter(tensors.values())))
            return cls(TensorDict(tensors, batch_size=[size]), non_tensors, meta_info)

    spans = [(0, 100), (0, 10), (0, 10), (0, 10), (0, 100)]
    batch = layout(spans, 300)
    parts, idx = prepare_dynamic_batch(Proto(batch, {"tag": np.arange(5) * 2}), 150, padded=True)
    assert sorted(p.batch["input_ids"].shape[1] * len(p.batch) for p in parts) == [30, 100, 100]
    for part, indices in zip(parts, idx, strict=True):
        assert part.non_tensor_batch["tag"].tolist() == [2 * i for i in indices]
    assert same(restore_dynamic_batch([p.batch for p in parts], idx), batch)


def test_jagged_rows_plan_on_rows_x_longest_and_are_not_cut() -> None:
    rows = [torch.arange(n) for n in (100, 10, 10, 10, 100)]
    batch = TensorDict({"input_ids": torch.nested.nested_tensor(rows, layout=torch.jagged)},
                       batch_size=[5])
    mbs, idx = rearrange_micro_batches(batch, 150, padded=True)
    assert sorted(sorted(part) for part in idx) == [[0], [1, 2, 3], [4]]
    for mb, part in zip(mbs, idx, strict=True):
        assert mb["input_ids"].offsets().diff().tolist() == [len(rows[i]) for i in part]
    assert all(type(part) is list for part in idx)


def test_nested_tensordicts_are_cut_unless_the_width_is_one_of_their_batch_dims() -> None:
    batch = layout([(0, 3), (0, 2), (0, 3), (0, 1)], 10)
    values = torch.where(batch["attention_mask"].bool(), torch.arange(40.0).view(4, 10), -1.0)
    batch["sub"] = TensorDict({"x": values}, batch_size=[4])  # pad value -1 in this entry
    batch["grid"] = TensorDict({"x": torch.arange(40.0).view(4, 10)}, batch_size=[4, 10])
    mbs, idx = rearrange_micro_batches(batch, 100, padded=True)
    assert len(mbs) == 1 and mbs[0]["sub", "x"].shape == (4, 3)
    assert mbs[0]["grid"].batch_size == (4, 10)  # a batch dimension: never cut
    assert same(restore_dynamic_batch(mbs, idx), batch)


def test_a_lazy_stack_cannot_be_cut_to_width() -> None:
    rows = [TensorDict({"attention_mask": torch.ones(4, dtype=torch.long)}, []) for _ in range(3)]
    batch = tensordict.LazyStackedTensorDict.lazy_stack(rows, 0)
    with pytest.raises(ValueError, match="padded=True cuts every micro-batch to its width, but the "
                                         "batch is a lazy stack"):
        rearrange_micro_batches(batch, 100, padded=True)
    assert len(rearrange_micro_batches(batch, 100)[0]) == 1


def test_an_over_cap_row_names_its_padded_cost() -> None:
    batch = layout([(0, 90), (0, 300)], 320)
    with pytest.raises(ValueError, match=r"sample 1 has 300 tokens; padded=True holds it as 1 row x "
                                         r"320 wide = 320 token positions"):
        rearrange_micro_batches(batch, 256, padded=True, pad_to_multiple_of=64)


def test_the_docs_page_example_runs() -> None:
    page = Path(__file__).resolve().parents[1] / "docs" / "padded.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL)
    assert blocks
    for block in blocks:
        exec(compile(block, str(page), "exec"), {})  # its asserts state the page's claims

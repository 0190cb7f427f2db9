"""Never worse than verl 0.9.1, on any batch: the differential of issue 19, run by
``test_never_worse_a.py`` and ``test_never_worse_b.py`` (three families and five, about half
the CPU each, so that pytest-xdist's two workers share it: one file runs on one worker).

verl's own ``rearrange_micro_batches`` (its whole planning; only its copy of rows into
micro-batches is stubbed out) and this library's plan (``plan_micro_batches``, and one batch
in 25 through ``rearrange_micro_batches``) run on 20,400 seeded batches from
eight families, with and without ``num_batches_divided_by``, ``min_num_micro_batch`` and
``force_group_size``. On every batch that verl plans:

* this library plans it too, with at most verl's number of micro-batches;
* at the same count, the workload spread (heaviest minus lightest micro-batch, verl's cost
  ``24576*s + s**2`` summed over its samples) is at most verl's;
* every micro-batch is within ``max_token_len`` (verl's too, which its retry loop ensures).

The summary (batches per family; verl fails, fewer, equal; at equal count, spread better
or equal) is printed to the terminal, and written to the file ``NEVER_WORSE_REPORT`` names
(CI prints it, since pytest-xdist keeps a worker's output; each file appends its
families). The batch sizes keep verl's retry loop fast.
"""

from __future__ import annotations

import itertools
import os
import random
from collections import Counter
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
import torch
from tensordict import TensorDict

from seqlen_balancing.data import load_champ_lengths

#: Batches per family; eight families make 20,400 (NEVER_WORSE_PER_FAMILY for a quick run).
PER_FAMILY = int(os.environ.get("NEVER_WORSE_PER_FAMILY", "2550"))


def workload(s: int) -> int:
    return 24576 * s + s * s


def _options(rng: random.Random, n_groups_hint: int) -> dict[str, Any]:
    """verl's optional arguments, drawn: a divisor, a floor, forced groups (or none)."""
    options: dict[str, Any] = {}
    if rng.random() < 0.3:
        options["num_batches_divided_by"] = rng.choice([2, 3, 4])
    if rng.random() < 0.2:
        options["min_num_micro_batch"] = rng.randint(1, max(1, n_groups_hint // 2))
    if rng.random() < 0.2:
        options["force_group_size"] = rng.choice([2, 4])
    return options


def _uniform(rng: random.Random, champ: list[int]) -> tuple[list[int], int]:
    cap = rng.choice([64, 100, 512, 1000, 4096])
    return [rng.randint(0, cap) for _ in range(rng.randint(1, 40))], cap


def _champ(scale: int) -> Callable[[random.Random, list[int]], tuple[list[int], int]]:
    def draw(rng: random.Random, champ: list[int]) -> tuple[list[int], int]:
        cap = rng.choice([4096, 8192, 16384, 32768])
        # A rollout longer than the cap is truncated at it, as a max-length rollout would be.
        return [min(cap, scale * rng.choice(champ)) for _ in range(rng.randint(4, 48))], cap

    return draw


def _grpo(rng: random.Random, champ: list[int]) -> tuple[list[int], int]:
    # Prompts x responses; a truncated response is prompt + max_response, so lengths repeat.
    max_response = rng.choice([512, 1024, 2048, 4096])
    group = rng.choice([2, 4, 8])
    lengths = []
    for _ in range(rng.randint(1, 48 // group)):
        prompt = min(champ[rng.randrange(len(champ))] // 4 + 16, 1024)
        for _ in range(group):
            response = max_response if rng.random() < 0.3 else rng.randint(1, max_response)
            lengths.append(prompt + response)
    cap = max(lengths) + rng.choice([0, 1, max(lengths) // 3, max(lengths)])
    return lengths, cap


def _near_half(rng: random.Random, champ: list[int]) -> tuple[list[int], int]:
    # Items just above and below a third and a half of the cap: the hard bin-packing region.
    cap = rng.choice([100, 1000, 4096])
    centres = [cap // 2, cap // 3, cap // 4 + 1]
    lengths = [
        max(0, min(cap, rng.choice(centres) + rng.randint(-3, 3) * max(1, cap // 200)))
        for _ in range(rng.randint(2, 40))
    ]
    return lengths, cap


def _bimodal(rng: random.Random, champ: list[int]) -> tuple[list[int], int]:
    cap = rng.choice([8192, 16384])
    n = rng.randint(2, 40)
    lengths = [rng.randint(100, 600) if rng.random() < 0.5 else rng.randint(6000, 9000) for _ in range(n)]
    return [min(cap, s) for s in lengths], cap


def _tiny_cap(rng: random.Random, champ: list[int]) -> tuple[list[int], int]:
    cap = rng.randint(2, 16)
    value = rng.randint(1, cap)
    lengths = [value if rng.random() < 0.8 else rng.randint(0, cap) for _ in range(rng.randint(1, 24))]
    return lengths, cap


FAMILIES: dict[str, Callable[[random.Random, list[int]], tuple[list[int], int]]] = {
    "uniform": _uniform,
    "CHAMP x1": _champ(1),
    "CHAMP x4": _champ(4),
    "CHAMP x10": _champ(10),
    "GRPO": _grpo,
    "near-half": _near_half,
    "bimodal": _bimodal,
    "tiny cap": _tiny_cap,
}


def _batch(lengths: list[int]) -> TensorDict:
    offsets = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int64)
    ids = torch.nested.nested_tensor_from_jagged(torch.empty(int(offsets[-1]), dtype=torch.int8), offsets)
    return TensorDict({"input_ids": ids, "row": torch.arange(len(lengths))}, batch_size=[len(lengths)])


def _verl_plan(verl: ModuleType, lengths: list[int], cap: int, options: dict[str, Any]) -> Any:
    """verl's own rearrange_micro_batches on a jagged batch of these lengths: its index
    lists, or the exception it raises."""
    try:
        _, indices = verl.rearrange_micro_batches(_batch(lengths), max_token_len=cap, **options)
    except (ValueError, AssertionError) as error:
        return error
    return [list(part) for part in indices]


def _our_plan(ours: ModuleType, lengths: list[int], cap: int, options: dict[str, Any], full: bool) -> Any:
    """This library's plan: rearrange_micro_batches on the same batch when ``full`` (its
    micro-batches checked against its index lists), else plan_micro_batches on the list
    (the same plan, without copying rows)."""
    try:
        if not full:
            return ours.plan_micro_batches(lengths, cap, **options)
        micro_batches, indices = ours.rearrange_micro_batches(_batch(lengths), cap, **options)
    except (ValueError, TypeError) as error:
        return error
    assert [mb["row"].tolist() for mb in micro_batches] == indices
    return indices


def _gap(lengths: list[int], parts: list[list[int]]) -> int:
    loads = [sum(workload(lengths[i]) for i in part) for part in parts]
    return max(loads) - min(loads)


def compare(verl: ModuleType, ours: ModuleType, names: list[str]) -> dict[str, Counter[str]]:
    """Plan ``PER_FAMILY`` seeded batches of each named family with verl and with this
    library, asserting the three promises on each; the tallies per family."""
    champ = load_champ_lengths()
    counts: dict[str, Counter[str]] = {}
    for name in names:
        rng = random.Random(19_000 + list(FAMILIES).index(name))
        counts[name] = tally = Counter()
        while tally["batches"] < PER_FAMILY:
            lengths, cap = FAMILIES[name](rng, champ)
            options = _options(rng, len(lengths))
            group = options.get("force_group_size", 1)
            lengths = lengths[: len(lengths) - len(lengths) % group] or [1] * group
            if sum(lengths) == 0:
                continue  # verl asks Karmarkar-Karp for 0 parts and fails; nothing to compare
            theirs = _verl_plan(verl, lengths, cap, options)
            # One batch in 25 through the whole TensorDict path, the rest planned on lists.
            mine = _our_plan(ours, lengths, cap, options, full=tally["batches"] % 25 == 0)
            tally["batches"] += 1
            where = f"{name}: lengths={lengths} cap={cap} options={options}"
            _judge(tally, lengths, cap, theirs, mine, where)
    return counts


def _judge(tally: Counter[str], lengths: list[int], cap: int, theirs: Any, mine: Any, where: str) -> None:
    """One batch: at most verl's count, at equal count at most verl's spread, both capped."""
    if isinstance(theirs, Exception):
        tally["verl fails"] += 1
        return
    assert not isinstance(mine, Exception), f"{where}: verl plans {len(theirs)}, we raise {mine!r}"
    for parts in (mine, theirs):
        assert max(sum(lengths[i] for i in part) for part in parts) <= cap, where
    assert len(mine) <= len(theirs), f"{where}: {len(mine)} > verl's {len(theirs)}"
    if len(mine) < len(theirs):
        tally["fewer"] += 1
        return
    tally["equal"] += 1
    ours_gap, verl_gap = _gap(lengths, mine), _gap(lengths, theirs)
    assert ours_gap <= verl_gap, f"{where}: spread {ours_gap} > verl's {verl_gap}"
    tally["spread better" if ours_gap < verl_gap else "spread equal"] += 1


def run_and_report(
    verl: ModuleType, ours: ModuleType, names: list[str], monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The differential on ``names``: its summary on the terminal and appended to the file
    ``NEVER_WORSE_REPORT`` names; it must bite (some batches fewer, some equal)."""
    # verl's planning runs whole; only its copy of the rows into micro-batches is skipped
    # (the plan does not depend on it, and it is most of verl's time on these batches).
    monkeypatch.setattr(verl.tu, "index_select_tensor_dict", lambda batch, indices: None)
    counts = compare(verl, ours, names)
    total = sum((tally for tally in counts.values()), Counter())
    lines = ["family        batches  verl fails  fewer  equal  spread better  spread equal"]
    for name, tally in [*counts.items(), ("these", total)]:
        lines.append(f"{name:<12} {tally['batches']:>8} {tally['verl fails']:>11} {tally['fewer']:>6} "
                     f"{tally['equal']:>6} {tally['spread better']:>14} {tally['spread equal']:>13}")
    with capsys.disabled():  # the summary shows on the terminal (not under pytest-xdist)
        print("\n" + "\n".join(lines))
    report = os.environ.get("NEVER_WORSE_REPORT")  # CI prints this file after the run
    if report:
        with open(report, "a", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
    assert total["batches"] == len(names) * PER_FAMILY
    # The comparison must bite: batches where the library is strictly fewer, and equal ones.
    assert total["fewer"] > 0 and total["equal"] > 0

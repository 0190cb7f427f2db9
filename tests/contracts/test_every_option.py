"""Every option at once, on 2, 3 and 4 real gloo ranks, judged by the rule spelled out here.

Each seeded round draws every field of :class:`~seqlen_balancing.PlanOptions` at once
(``force_group_size``, ``num_batches_divided_by``, ``min_num_micro_batch``,
``use_dynamic_bsz_balance``, ``pad_to_multiple_of``, ``micro_batch_multiple_of``,
``padded``, ``max_samples_per_micro_batch``, ``over_cap``, ``dummy_micro_batches``,
``loss_weight_keys``, ``workload_model``, ``equal_rows_per_micro_batch``,
``micro_batch_fixed_tokens``), the cap, ``costs``, ``workloads`` and ``group_ids`` (random,
non-contiguous ids of random sizes, instead of the force groups), a layout (dense right-,
left- or mixed-padded rows, verl's left-padded prompt plus right-padded response, or jagged
nested rows) and each rank's lengths. The ranks
(``_every_option_worker.py``, file rendezvous, one process start per world) call
``rearrange_micro_batches`` with ``dp_group`` set; this process also plans the same round
with the list API (:func:`~seqlen_balancing.plan_data_parallel`). Nothing of the library's
rule, bounds or agreement is used to judge: the rule is written out below.

**The rule** (DESIGN section 3, docs/padded.md). Sample ``i`` stands for ``c_i``: its given
cost, else its effective length. Summed: a micro-batch costs ``sum(ceil(c_i / p) * p)``
rounded up to ``b``; padded: ``rows x ceil(width / p) * p`` rounded up to ``b``, the width
being the hull of its rows' real columns (a dense mask without ``costs``), else the largest
``c_i``. ``p = pad_to_multiple_of``, ``b = micro_batch_multiple_of``. It fits when that is
at most the cap and it holds at most ``max_samples_per_micro_batch`` rows. Items are the
force groups, or the groups of equal ``group_ids``; one that does not fit alone (a group of
ids also when it holds more rows than the limit) is an error (``over_cap="raise"``) or runs
alone. A rank may have no samples: without dummies its error, with them every one of its
micro-batches a dummy.
With ``equal_rows_per_micro_batch`` a micro-batch holds its real rows and ``filler`` copies
of its filler row (a dummy: filler only), and the rule holds on all of them together; every
micro-batch of every rank holds the same rows (an empty rank's dummies too: copies of the
row its dummies copy), the filler rows' loss weights are zero, and the one refusal of its
own is the agreed "every micro-batch must hold" error.

**What every round must show.** Ranks asked to plan under different options (one rank is
given another value of one option, of the cap, or passes ``costs``/``workloads`` where the
others do not): every rank raises the same ``ValueError`` naming that option and the rank.
Else a fault the test planted or predicts (an item over the cap, a batch not divisible by
the group, ``costs`` of the wrong length, a bucket above the cap, a sample limit below the
group, ``workloads`` with a ``workload_model``): every rank raises the same error, naming
the lowest rank at fault, with that fault's words. Else a count above some rank's groups
without dummies (certain when the lower bound below is above them): the same count error on
every rank. Else every rank returns the same count ``K``; every real micro-batch is whole
groups, fits the rule (or is one over-cap item alone), dummies (empty index lists) come last
with every loss-weight entry zero, the index lists cover the rows exactly, the restore gives
the input back, ``K`` is a multiple of ``num_batches_divided_by``, at least the floor and
``ceil(sum / cap)`` (and rows / limit) of every rank, at most the fewest groups (without
dummies) or the most groups and the floor (with them, a short rank running each group alone).
"""

from __future__ import annotations

import importlib.util
import math
import random
import re
from pathlib import Path
from typing import Any

import pytest

from seqlen_balancing import PlanOptions, plan_data_parallel
from seqlen_balancing.cost import WorkloadModel

_HERE = Path(__file__).resolve().parent
_WORKER = _HERE / "_every_option_worker.py"


def _load_world() -> Any:
    spec = importlib.util.spec_from_file_location("_seqlen_balancing_world", _HERE.parent / "distributed"
                                                  / "_world.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_world = _load_world()
#: Seconds one world may take for all its rounds (spawn, torch import, rendezvous, rounds).
DEADLINE_S = 300
ROUNDS = {2: 20, 3: 14, 4: 12}
#: Each gloo world's seed: rounds that reach every outcome, plans of
#: groups of ids, of an empty rank and with equal rows among them, in every world.
GLOO_SEEDS = {2: 3332, 3: 3333, 4: 3338}  # one per world since equal_rows_per_micro_batch joined
#: Rounds per world size through the list API alone (in this process, no torch: cheap).
LIST_ROUNDS = 150
MODELS = ("hidden_size=64,num_layers=2", "hidden_size=96,num_layers=3")
#: What may differ between the ranks of a round (the options, the cap, the per-sample data).
MISMATCHED = (*PlanOptions.__dataclass_fields__.keys() - {"same_micro_num_in_dp"},
              "max_token_len", "costs", "workloads", "group_ids")
#: Words of each planted fault's message.
FAULT_WORDS = {
    "over": "exceeds max_token_len",
    "indivisible": "is not divisible by force_group_size",
    "costs_short": "entries but the batch has",
    "bucket": "is larger than max_token_len",
    "limit_below": "is below force_group_size",
    "model_and_workloads": "workloads and workload_model are both given",
    "min_above": "asks for more micro-batches than the",
    "group_limit": "more than max_samples_per_micro_batch",
    "empty": "the batch has no samples",
}
#: Words of the agreed refusal of equal rows (a rank that cannot take the group's rows).
ROWS_WORDS = "equal_rows_per_micro_batch: every micro-batch must hold"
FAULT_WORDS["rows"] = ROWS_WORDS


def ceil_to(x: int, m: int) -> int:
    return -(-x // m) * m


# -- drawing ---------------------------------------------------------------------------------------


def draw_options(rng: random.Random) -> dict[str, Any]:
    """One value of every option (JSON: keys as a list, a model as its text)."""
    group = rng.choice([1, 1, 1, 2, 3])
    # micro_batch_fixed_tokens from its own stream: the seeded rounds stay the ones the worlds'
    # coverage checks were written for
    words = rng.getstate()[1]  # the generator's next word, read without drawing it
    overhead = (0.0, 0.05, 0.2)[words[words[-1] % 624] % 3]
    heaviest = words[(words[-1] + 1) % 624] % 4 == 0  # a quarter of the rounds, same stream
    return {
        "force_group_size": group,
        "num_batches_divided_by": rng.choice([None, None, 1, 2, 3]),
        "min_num_micro_batch": rng.choice([None, None, 1, 2, 4, 6]),
        "use_dynamic_bsz_balance": rng.random() < 0.5,
        "pad_to_multiple_of": rng.choice([1, 1, 2, 4]),
        "micro_batch_multiple_of": rng.choice([1, 1, 2, 8]),
        "padded": rng.random() < 0.4,
        "max_samples_per_micro_batch": rng.choice([None, None, group, group + 1, 2 * group, 4 * group]),
        "over_cap": rng.choice(["raise", "raise", "alone"]),
        "dummy_micro_batches": rng.random() < 0.4,
        "loss_weight_keys": rng.choice([None, ["loss_mask"], ["loss_mask", "weight"], ["weight"]]),
        "workload_model": rng.choice([None, None, MODELS[0]]),
        "micro_batch_fixed_tokens": overhead,
        "equal_rows_per_micro_batch": rng.random() < 0.3,
        "heaviest_first": heaviest,
    }


def draw_spans(rng: random.Random, lengths: list[int], layout: str) -> tuple[list[list[int]], int]:
    """Each row's real columns ``[lo, hi)`` and the batch's width, for a dense layout."""
    extra = rng.randint(0, 2)
    if layout == "two_sided":  # verl's left-padded prompt, then the right-padded response
        prompt = rng.randint(1, 8)
        split = [rng.randint(0, min(s, prompt)) for s in lengths]
        width = prompt + max([s - a for s, a in zip(lengths, split, strict=True)] + [0]) + extra
        return [[prompt - a, prompt + s - a] for s, a in zip(lengths, split, strict=True)], width
    width = max([*lengths, 1]) + extra
    spans = []
    for row, s in enumerate(lengths):
        left = layout == "left" or (layout == "mixed" and row % 2)
        spans.append([width - s, width] if left else [0, s])
    return spans, width


def draw_lengths(rng: random.Random, groups: int, options: dict[str, Any], cap: int,
                 dense: bool) -> list[int]:
    group = options["force_group_size"]
    top = max(1, cap // group // (2 if options["padded"] else 1))
    low = 0 if dense else 1
    return [rng.choice([low, 1, rng.randint(1, max(1, top // 3)), rng.randint(1, top), top])
            for _ in range(groups * group)]


#: The faults planted, in turn, in every second round without a mismatch: each world starts
#: with a short rank (a count error; then the same with dummies), then the others, each world
#: going on where the last stopped, so that the three worlds plant every kind.
FAULTS = ("over", "min_above_dummies", "indivisible", "costs_short", "over_alone", "bucket",
          "limit_below", "model_and_workloads", "min_above", "empty_rank", "empty_rank_dummies")


def draw_round(rng: random.Random, world: int, mismatch: str | None, fault: str | None) -> dict[str, Any]:
    """One round: the shared options, each rank's data, the fault planted (or a mismatch)."""
    options, cap = draw_options(rng), rng.choice([16, 24, 32, 48, 100])
    layout = rng.choice(["right", "left", "mixed", "two_sided", "jagged"])
    has_costs, has_workloads = rng.random() < 0.3 or fault == "costs_short", rng.random() < 0.25
    has_ids = options["force_group_size"] == 1 and fault not in ("indivisible", "limit_below") \
        and rng.random() < 0.5
    if has_workloads:
        options["workload_model"] = None
    if has_ids:  # a limit that most groups of ids fit (a group over it is a fault of its own)
        options["max_samples_per_micro_batch"] = rng.choice([None, None, 2, 4, 6])
    if fault in ("indivisible", "limit_below") and options["force_group_size"] == 1:
        options["force_group_size"], options["max_samples_per_micro_batch"] = 2, None
    if fault in ("min_above", "min_above_dummies"):
        options["dummy_micro_batches"] = fault == "min_above_dummies"
    base = rng.randint(2, 7)
    ranks = []
    for _ in range(world):
        # with ids, lengths as for groups of two: a group of ids holds about two samples
        drawn = {**options, "force_group_size": 2} if has_ids else options
        lengths = draw_lengths(rng, max(1, base + rng.choice([0, 0, 1, -1])), drawn, cap,
                               layout != "jagged")
        ranks.append(_rank_spec(rng, cap, options, layout, lengths, has_costs, has_workloads))
        ranks[-1]["group_ids"] = draw_group_ids(rng, len(lengths)) if has_ids else None
    planted = _plant(rng, fault, ranks) if fault else None
    if mismatch is not None:
        _mismatch(rng, mismatch, ranks)
    via = "keywords" if fault == "limit_below" else rng.choice(["keywords", "options"])
    for spec in ranks:
        spec["via"] = via
    return {"ranks": ranks, "fault": planted, "mismatch": mismatch}


def draw_group_ids(rng: random.Random, n: int) -> list[int]:
    """Random ids, non-contiguous, of random sizes (JSON ints; the worker stores them as a
    tensor entry, a list of strings or a list)."""
    pool = rng.sample(range(100), rng.randint(max(1, n // 2), max(1, n)))
    return [rng.choice(pool) for _ in range(n)]


def _rank_spec(rng: random.Random, cap: int, options: dict[str, Any], layout: str, lengths: list[int],
               has_costs: bool, has_workloads: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"cap": cap, "options": dict(options), "layout": layout, "lengths": lengths}
    if layout != "jagged":
        spec["spans"], spec["width"] = draw_spans(rng, lengths, layout)
    spec["costs"] = [s + rng.randint(0, 4) for s in lengths] if has_costs else None
    spec["workloads"] = [rng.randint(0, 10**6) for _ in lengths] if has_workloads else None
    return spec


def _respan(rng: random.Random, spec: dict[str, Any]) -> None:
    if spec["layout"] != "jagged":
        spec["spans"], spec["width"] = draw_spans(rng, spec["lengths"], spec["layout"])


def _plant(rng: random.Random, fault: str, ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """Plant ``fault`` on one rank (or, for an option, on all); return what was planted."""
    at = rng.randrange(len(ranks))
    spec = ranks[at]
    group = spec["options"]["force_group_size"]
    if fault in ("over", "over_alone"):
        for s in ranks:
            s["options"]["over_cap"] = "raise" if fault == "over" else "alone"
        spec["lengths"][rng.randrange(len(spec["lengths"]))] = spec["cap"] + rng.randint(1, 9)
        if spec["costs"] is not None:
            spec["costs"] = [max(c, s) for c, s in zip(spec["costs"], spec["lengths"], strict=True)]
        _respan(rng, spec)
    elif fault == "indivisible" and group > 1:
        for key in ("lengths", "costs", "workloads"):
            if spec[key] is not None:
                spec[key] = spec[key][:-1]
        _respan(rng, spec)
    elif fault == "costs_short" and spec["costs"] is not None:
        spec["costs"] = spec["costs"][:-1]
    elif fault == "bucket":
        bucket = spec["cap"] + rng.choice([1, 8])
        for s in ranks:
            s["options"]["micro_batch_multiple_of"] = bucket
    elif fault == "limit_below" and group > 1:
        for s in ranks:
            s["options"]["max_samples_per_micro_batch"] = group - 1
    elif fault in ("short_rank", "short_rank_dummies"):  # one group here, three full ones next
        spec["lengths"] = spec["lengths"][:group]
        other = ranks[(at + 1) % len(ranks)]
        other["lengths"] = [other["cap"] // group] * (3 * group)
        for s in (spec, other):
            s["costs"] = None if s["costs"] is None else list(s["lengths"])
            s["workloads"] = None if s["workloads"] is None else [7] * len(s["lengths"])
            if s.get("group_ids") is not None:  # one group here, three there
                s["group_ids"] = [7] * len(s["lengths"]) if s is spec else list(range(len(s["lengths"])))
            _respan(rng, s)
        for s in ranks:
            s["options"].update(pad_to_multiple_of=1, micro_batch_multiple_of=1, over_cap="raise",
                                max_samples_per_micro_batch=None, min_num_micro_batch=None,
                                dummy_micro_batches=fault == "short_rank_dummies")
    elif fault in ("empty_rank", "empty_rank_dummies"):
        for key in ("lengths", "costs", "workloads", "group_ids"):
            if spec.get(key) is not None:
                spec[key] = []
        for s in ranks:
            s["options"]["dummy_micro_batches"] = fault == "empty_rank_dummies"
        _respan(rng, spec)
    elif fault == "model_and_workloads":
        for s in ranks:
            s["options"]["workload_model"] = MODELS[0]
            s["workloads"] = [rng.randint(0, 99) for _ in s["lengths"]]
    elif fault in ("min_above", "min_above_dummies"):
        floor = max(len(s["lengths"]) // group for s in ranks) + rng.randint(1, 3)
        for s in ranks:
            s["options"]["min_num_micro_batch"] = floor
    else:
        return {"kind": None}
    return {"kind": fault, "rank": at}


def _mismatch(rng: random.Random, name: str, ranks: list[dict[str, Any]]) -> None:
    """Give one rank another valid value of ``name`` than its peers (recorded in the spec)."""
    at = rng.randrange(len(ranks))
    spec = ranks[at]
    options = spec["options"]
    if name == "max_token_len":
        spec["cap"] = spec["cap"] * 2
    elif name == "group_ids":
        for s in ranks:
            s["group_ids"] = None
            s["options"]["force_group_size"] = 1
        spec["group_ids"] = draw_group_ids(rng, len(spec["lengths"]))
    elif name in ("costs", "workloads"):
        for s in ranks:
            s[name] = None
        if name == "workloads":
            for s in ranks:
                s["options"]["workload_model"] = None
        spec[name] = [s + 1 for s in spec["lengths"]]
    elif name == "force_group_size":
        for s in ranks:  # an even batch on that rank, no limit that a group of 2 could break
            s["options"]["max_samples_per_micro_batch"] = None
            s["group_ids"] = None
        if len(spec["lengths"]) % 2:
            _grow(spec)
        options[name] = 2 if options[name] == 1 else 1
        if len(spec["lengths"]) % options[name]:
            _grow(spec)
    else:
        if name == "workload_model":  # a rank with both would be an error of its own
            for s in ranks:
                s["workloads"] = None
        options[name] = _other_value(name, options)
    spec["mismatched"] = {"name": name, "rank": at}
    _respan(rng, spec)


def _grow(spec: dict[str, Any]) -> None:
    spec["lengths"].append(1)
    for key in ("costs", "workloads"):
        if spec[key] is not None:
            spec[key].append(1)


def _other_value(name: str, options: dict[str, Any]) -> Any:
    value, group = options[name], options["force_group_size"]
    if name in ("num_batches_divided_by", "min_num_micro_batch"):
        return (value or 1) + 1  # None reads as 1 for the floor: 2 differs from both
    if name == "pad_to_multiple_of":
        return value * 2
    if name == "micro_batch_multiple_of":
        return 2 if value == 1 else 1
    if name == "max_samples_per_micro_batch":
        return value + 1 if value else 2 * group
    if name == "over_cap":
        return "alone" if value == "raise" else "raise"
    if name == "loss_weight_keys":
        return ["loss_mask"] if value is None else None
    if name == "workload_model":
        return MODELS[1] if value == MODELS[0] else MODELS[0]
    if name == "micro_batch_fixed_tokens":
        return value + 0.5
    return not value  # the switches


# -- the rule, spelled out -------------------------------------------------------------------------


class Rank:
    """One rank's items and what a set of its rows costs under the stated rule."""

    def __init__(self, spec: dict[str, Any], list_api: bool = False) -> None:
        o = spec["options"]
        self.spec, self.cap, self.group = spec, spec["cap"], o["force_group_size"]
        self.p, self.b, self.limit = o["pad_to_multiple_of"], o["micro_batch_multiple_of"], \
            o["max_samples_per_micro_batch"]
        self.padded, self.alone = o["padded"], o["over_cap"] == "alone"
        lengths, costs = spec["lengths"], spec["costs"]
        self.n = len(lengths)
        self.c = list(costs) if costs is not None and len(costs) == self.n else list(lengths)
        if costs is None and spec["layout"] != "jagged" and not list_api:
            self.extent = [(lo, hi) if hi > lo else None for lo, hi in spec["spans"]]
        else:
            self.extent = [(0, c) if c > 0 else None for c in self.c]
        ids = spec.get("group_ids")
        self.named = ids is not None
        if self.named:  # the samples of each id, in the order of their first sample
            by_id: dict[Any, list[int]] = {}
            for i, g in enumerate(ids):
                by_id.setdefault(g, []).append(i)
            self.items = list(by_id.values())
        else:
            self.items = [list(range(g, g + self.group)) for g in range(0, self.n, self.group)] \
                if self.n % self.group == 0 else []

    def raw(self, rows: list[int]) -> int:
        """What a micro-batch of these rows holds (tokens or token positions), before b."""
        if self.padded:
            real = [self.extent[i] for i in rows if self.extent[i] is not None]
            width = max(hi for _, hi in real) - min(lo for lo, _ in real) if real else 0
            return len(rows) * ceil_to(width, self.p)
        return sum(ceil_to(self.c[i], self.p) for i in rows)

    def cost(self, rows: list[int]) -> int:
        """What a micro-batch of these rows costs: :meth:`raw` rounded up to b."""
        return ceil_to(self.raw(rows), self.b)

    def fits(self, rows: list[int]) -> bool:
        return self.cost(rows) <= self.cap and (self.limit is None or len(rows) <= self.limit)

    def filled_fits(self, rows: list[int], real: int) -> bool:
        """Equal rows: the micro-batch of ``rows`` (its ``real`` rows, then filler rows)
        fits. Padded: a filler row is as wide as the micro-batch, as the copy ``rows``
        names is; summed: a filler row is one token, ``ceil(1 / p) * p`` (with ``costs``,
        the cheapest sample's cost; never more than the cheapest sample)."""
        if self.padded:
            return self.fits(rows)
        cheapest = min(ceil_to(c, self.p) for c in self.c)
        one = cheapest if self.spec["costs"] is not None else min(ceil_to(1, self.p), cheapest)
        cost = ceil_to(self.raw(rows[:real]) + (len(rows) - real) * one, self.b)
        return cost <= self.cap and (self.limit is None or len(rows) <= self.limit)

    def over(self) -> list[int]:
        """The items that do not fit alone (a group of ids: also over the sample limit)."""
        limit = self.limit if self.named else None
        return [j for j, item in enumerate(self.items)
                if self.cost(item) > self.cap or (limit is not None and len(item) > limit)]

    def lower_bound(self) -> int:
        """Micro-batches this rank needs at least: each over-cap item alone (with
        ``over_cap="alone"``), the rest by ``ceil(sum of what each costs alone / usable cap)``
        and by rows over the limit."""
        over = set(self.over())
        rest = [item for j, item in enumerate(self.items) if j not in over]
        usable = self.cap // self.b * self.b
        total = sum(self.raw(item) for item in rest)  # a micro-batch holds its items' own
        bound = math.ceil(total / usable) if total else 0
        if self.limit is not None:
            bound = max(bound, math.ceil(sum(len(item) for item in rest) / self.limit))
        return len(over) + max(bound, 1 if rest else 0)

    def faults(self) -> set[str]:
        """The faults of this rank's batch and options, as the rule sees them."""
        o, found = self.spec["options"], set()
        if self.n == 0 and not o["dummy_micro_batches"]:
            found.add("empty")
        if self.n % self.group and not self.named:
            found.add("indivisible")
        if self.spec["costs"] is not None and len(self.spec["costs"]) != self.n:
            found.add("costs_short")
        if o["micro_batch_multiple_of"] > self.cap:
            found.add("bucket")
        if self.limit is not None and self.limit < self.group:
            found.add("limit_below")
        if self.spec["workloads"] is not None and o["workload_model"] is not None:
            found.add("model_and_workloads")
        if not self.alone and self.over():
            found.add("over")
            if self.named and self.limit is not None and any(len(item) > self.limit for item in self.items):
                found.add("group_limit")
        if not o["dummy_micro_batches"] and (o["min_num_micro_batch"] or 1) > len(self.items) and self.n:
            found.add("min_above")  # each rank checks its floor against its own groups
        if not found and o["equal_rows_per_micro_batch"] and self.n and self.rows_refused():
            found.add("rows")
        return found

    def rows_refused(self) -> bool:
        """equal_rows_per_micro_batch: no plan exists when the most rows an item holds, ``R``,
        are over the sample limit, or some item (but one running alone over the cap) cannot
        be topped up to ``R`` rows under the cap even alone (summed: with 1-token rows;
        padded: as wide as its own narrowest row). Every micro-batch holding it costs at
        least that."""
        rows = max(len(item) for item in self.items)
        if self.limit is not None and rows > self.limit:
            return True
        over = set(self.over()) if self.alone else set()
        for j, item in enumerate(self.items):
            if j in over:
                continue
            filler = min(item, key=lambda i: (ceil_to(self.c[i], self.p), i))
            if not self.filled_fits([*item, *[filler] * (rows - len(item))], len(item)):
                return True
        return False


def expected(round_: dict[str, Any], list_api: bool = False) -> dict[str, Any]:
    """The outcome every rank must reach, from the rule and each rank's own data."""
    specs = round_["ranks"]
    if round_["mismatch"] is not None:
        at = next(r for r, s in enumerate(specs) if "mismatched" in s)
        return {"kind": "mismatch", "name": round_["mismatch"], "rank": at}
    ranks = [Rank(spec, list_api) for spec in specs]
    faulty = [(r, rank.faults()) for r, rank in enumerate(ranks) if rank.faults()]
    if faulty:
        return {"kind": "rank_error", "rank": faulty[0][0], "words": [FAULT_WORDS[f] for f in faulty[0][1]]}
    o = specs[0]["options"]
    divisor, floor = o["num_batches_divided_by"] or 1, o["min_num_micro_batch"] or 1
    groups = [len(rank.items) for rank in ranks]
    low = ceil_to(max([floor, *(rank.lower_bound() for rank in ranks)]), divisor)
    high = ceil_to(max([floor, *groups]), divisor) if o["dummy_micro_batches"] else min(groups)
    return {"kind": "count", "low": low, "high": high, "fewest": groups.index(min(groups)),
            "groups": min(groups), "certain_error": low > high, "ranks": ranks}


# -- judging ---------------------------------------------------------------------------------------


def held_rows(plan: list[Any], filler: list[int], filler_row: list[int]) -> list[list[int]]:
    """The rows each micro-batch holds: its real rows, then its filler rows."""
    return [list(part) + [row] * extra for part, extra, row in zip(plan, filler, filler_row, strict=True)]


def check_plan(rank: Rank, plan: list[list[int]], count: int, record: dict[str, Any] | None) -> None:
    """One rank's plan against the rule: whole groups, the cap, the limit, over-cap items
    alone, dummies last and zeroed, an exact cover; with the TensorDict ``record``, its rows,
    widths and restore. With equal rows, the rule on the real and filler rows together."""
    o = rank.spec["options"]
    assert len(plan) == count
    source = record if record is not None else {
        "filler": [getattr(part, "filler", 0) for part in plan],
        "filler_row": [getattr(part, "filler_row", -1) for part in plan]}
    rows = held_rows(plan, source["filler"], source["filler_row"])
    if o["equal_rows_per_micro_batch"]:
        assert len({len(r) for r in rows}) == 1, rows  # one row count
        of_item = {i: tuple(item) for item in rank.items for i in item}
        over_items = {tuple(rank.items[j]) for j in rank.over()}
        for part, whole in zip(plan, rows, strict=True):
            if rank.n == 0:  # an empty rank's dummies: the group's rows, copies of its template's
                assert whole == [-1] * len(whole), whole
                continue
            mine = {of_item[i] for i in part}
            over_alone = rank.alone and len(mine) == 1 and mine <= over_items
            assert all(0 <= i < rank.n for i in whole)
            assert rank.filled_fits(whole, len(part)) or over_alone, (part, whole, rank.cap, rank.limit)
    else:
        assert not any(source["filler"])
    real = [part for part in plan if part]
    assert plan[: len(real)] == real, "dummies (empty index lists) come last"
    if o["heaviest_first"] and rank.spec["workloads"] is None and o["workload_model"] is None:
        # the heaviest first: verl's workload 24576 s + s**2 of the lengths, summed
        loads = [sum(24576 * rank.spec["lengths"][i] + rank.spec["lengths"][i] ** 2 for i in part)
                 for part in real]
        assert loads == sorted(loads, reverse=True), loads
    assert sorted(i for part in plan for i in part) == list(range(rank.n)), "an exact cover"
    assert o["dummy_micro_batches"] or len(real) == count
    if len(real) < count:  # a short rank runs each group alone, then dummies
        assert len(real) == len(rank.items)
    items = {i: tuple(item) for item in rank.items for i in item}
    over = {tuple(rank.items[j]) for j in rank.over()}
    for part in real:
        held = {items[i] for i in part}
        assert sorted(i for item in held for i in item) == part, (part, held)  # items whole
        over_alone = rank.alone and len(held) == 1 and held <= over
        assert rank.fits(part) or over_alone, (part, rank.cost(part), rank.cap, rank.limit)
    if record is None:
        return
    assert record["restored"] is True, record["restored"]
    keys = o["loss_weight_keys"] or ["loss_mask", "response_mask"]
    for part, uids, width, weights in zip(plan, record["uids"], record["widths"], record["weights"],
                                          strict=True):
        if not part:  # a dummy: at least one row, every loss-weight entry zero
            assert uids and all(weights[key] == 0 for key in keys if key in weights), weights
            continue
        assert uids == rows[plan.index(part)]  # the real rows, then the filler rows
        if o["equal_rows_per_micro_batch"]:
            zeroed = record["filler_weights"][plan.index(part)]
            assert all(zeroed[key] == 0 for key in keys if key in zeroed), zeroed
        if width is None:
            continue
        if not o["padded"]:
            assert width == rank.spec["width"], "only padded=True cuts to width"
            continue
        spans = [rank.spec["spans"][i] for i in part if rank.spec["spans"][i][1] > rank.spec["spans"][i][0]]
        hull = max(h for _, h in spans) - min(lo for lo, _ in spans) if spans else 0
        assert hull <= width, (part, width, hull)  # the real columns are kept
        if rank.spec["costs"] is None:  # and the cut is what the rule charged
            assert width <= ceil_to(hull, rank.p), (part, width, hull)


def check_count_error(message: str, want: dict[str, Any]) -> None:
    assert message.startswith(f"rank {want['fewest']} of the DP group"), message
    found = re.search(r"(\d+) micro-batches are needed but only (\d+) samples/groups", message)
    assert found is not None, message
    needed, groups = int(found.group(1)), int(found.group(2))
    assert groups == want["groups"] and needed > groups and needed >= want["low"], message


def judge_errors(got: list[dict[str, Any]], want: dict[str, Any], where: str) -> None:
    """Every rank raised the same, and it is the one predicted."""
    assert all("raised" in record for record in got), where
    assert len({(r["raised"], r["message"]) for r in got}) == 1, f"ranks differ: {where}"
    raised, message = got[0]["raised"], got[0]["message"]
    if want["kind"] == "mismatch":
        assert raised == "ValueError", where
        assert message.startswith(f"the ranks passed different {want['name']}: "), where
        assert f"rank {want['rank']} (global rank {want['rank']})" in message, where
    elif want["kind"] == "rows_error":
        assert raised == "ValueError" and ROWS_WORDS in message, where
        assert re.match(r"rank \d+ of the DP group", message), where
    elif want["kind"] == "rank_error":
        assert raised in ("ValueError", "TypeError"), where
        assert message.startswith(f"rank {want['rank']} of the DP group"), where
        assert any(words in message for words in want["words"]), where
    else:
        assert raised == "ValueError", where
        check_count_error(message, want)


def judge(round_: dict[str, Any], got: list[dict[str, Any]], want: dict[str, Any], where: str) -> str:
    """Judge one round's records; return the outcome's kind."""
    if want["kind"] != "count" or want["certain_error"] or "raised" in got[0]:
        if want["kind"] == "count" and _rows_refused(round_, got[0]):
            want = {**want, "kind": "rows_error"}
        elif want["kind"] == "count":  # a count above some rank's groups, never a plan
            assert not round_["ranks"][0]["options"]["dummy_micro_batches"], where
            want = {**want, "kind": "count_error"}
        judge_errors(got, want, where)
        return str(want["kind"])
    count = len(got[0]["plan"])
    divisor = round_["ranks"][0]["options"]["num_batches_divided_by"] or 1
    assert want["low"] <= count <= want["high"] and count % divisor == 0, where
    for rank, record in zip(want["ranks"], got, strict=True):
        assert "plan" in record, where
        check_plan(rank, record["plan"], count, record)
    check_one_row_count(round_, [held_rows(r["plan"], r["filler"], r["filler_row"]) for r in got], where)
    return "plan"


def check_one_row_count(round_: dict[str, Any], rows: list[list[list[int]]], where: str) -> None:
    """With equal rows, every micro-batch of every rank of the DP group holds the same rows."""
    if round_["ranks"][0]["options"]["equal_rows_per_micro_batch"]:
        assert len({len(held) for rank in rows for held in rank}) == 1, f"{where}: {rows}"


def _rows_refused(round_: dict[str, Any], record: dict[str, Any]) -> bool:
    """The outcome is equal rows' own agreed refusal (only with the option on)."""
    return bool(round_["ranks"][0]["options"]["equal_rows_per_micro_batch"]) and ROWS_WORDS in str(
        record.get("message", ""))


def list_api(round_: dict[str, Any]) -> tuple[str, Any]:
    """The same round through :func:`plan_data_parallel` (in this process)."""
    specs = round_["ranks"]
    options = dict(specs[0]["options"])
    if options["loss_weight_keys"] is not None:
        options["loss_weight_keys"] = tuple(options["loss_weight_keys"])
    if options["workload_model"] is not None:
        options["workload_model"] = WorkloadModel.parse(options["workload_model"])
    per_sample = {key: [s.get(key) for s in specs] for key in ("costs", "workloads", "group_ids")
                  if specs[0].get(key) is not None}
    try:
        return "plans", plan_data_parallel([s["lengths"] for s in specs], specs[0]["cap"],
                                           **options, **per_sample)
    except (TypeError, ValueError) as error:
        return "raised", error


def judge_list_api(round_: dict[str, Any], where: str) -> str:
    """Judge the round through the list API; return the outcome's kind."""
    want = expected(round_, list_api=True)
    kind, result = list_api(round_)
    if kind == "plans" and want["kind"] == "count" and not want["certain_error"]:
        count = len(result[0])
        divisor = round_["ranks"][0]["options"]["num_batches_divided_by"] or 1
        assert want["low"] <= count <= want["high"] and count % divisor == 0, where
        for rank, plan in zip(want["ranks"], result, strict=True):
            check_plan(rank, plan, count, None)
        check_one_row_count(round_, [held_rows(plan, [getattr(p, "filler", 0) for p in plan],
                                               [getattr(p, "filler_row", -1) for p in plan])
                                     for plan in result], where)
        return "plan"
    assert kind == "raised", f"list API: {where}"
    record = {"raised": type(result).__name__, "message": str(result)}
    if want["kind"] == "rank_error" and FAULT_WORDS["limit_below"] in want["words"]:
        # one PlanOptions for every rank: refused before any rank plans, naming none
        assert FAULT_WORDS["limit_below"] in record["message"], f"list API: {where}"
        return "rank_error"
    if want["kind"] == "count" and _rows_refused(round_, record):
        want = {**want, "kind": "rows_error"}
    elif want["kind"] == "count":
        assert not round_["ranks"][0]["options"]["dummy_micro_batches"], where
        want = {**want, "kind": "count_error"}
    judge_errors([record], want, f"list API: {where}")
    return str(want["kind"])


@pytest.mark.parametrize("world", sorted(ROUNDS))
def test_every_option_at_once_through_the_list_api(world: int) -> None:
    """Many more rounds than the gloo ranks play, through plan_data_parallel alone (one
    PlanOptions for every rank, so no mismatch), judged the same way."""
    rng = random.Random(4000 + world)
    faults = [None, None, None, "short_rank", "short_rank_dummies", *FAULTS]
    kinds = []
    for number in range(LIST_ROUNDS):
        round_ = draw_round(rng, world, None, rng.choice(faults))
        kinds.append(judge_list_api(round_, f"round {number}: {round_['ranks']}"))
    assert {"plan", "rank_error", "count_error"} <= set(kinds), kinds


@pytest.mark.distributed
@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.timeout(420)
@pytest.mark.parametrize("world", sorted(ROUNDS))
def test_every_option_at_once_on_gloo_ranks(world: int, tmp_path: Path) -> None:
    rng = random.Random(GLOO_SEEDS[world])
    names = sorted(MISMATCHED)[list(ROUNDS).index(world)::len(ROUNDS)]
    mismatches = dict(zip(rng.sample(range(ROUNDS[world]), len(names)), names, strict=True))
    start = sum((ROUNDS[w] - len(names) + 1) // 2 - 2 for w in sorted(ROUNDS) if w < world)
    faults = iter(["short_rank", "short_rank_dummies", "empty_rank_dummies",
                   *(FAULTS * 2)[start % len(FAULTS):]])
    clean = [number for number in range(ROUNDS[world]) if number not in mismatches]
    planted = {number: next(faults) for number in clean[::2]}
    rounds = [draw_round(rng, world, mismatches.get(number), planted.get(number))
              for number in range(ROUNDS[world])]
    sent = [{"ranks": round_["ranks"]} for round_ in rounds]
    records = _world.run_world(_WORKER, world, sent, tmp_path, DEADLINE_S)
    for rank_records in records:
        assert [r["round"] for r in rank_records] == list(range(len(rounds)))
    kinds = []
    for number, round_ in enumerate(rounds):
        got = [records[rank][number] for rank in range(world)]
        want = expected(round_)
        where = f"round {number} ({want['kind']}, {round_['fault']}): {round_['ranks']}\n-> {got}"
        kinds.append(judge(round_, got, want, where))
        if round_["mismatch"] is None:
            judge_list_api(round_, where)
    # The seeded rounds reach every outcome and every mismatch this world checks, and plans
    # of groups of ids and of a rank with no samples (its micro-batches all dummies).
    assert {"plan", "rank_error", "mismatch", "count_error"} <= set(kinds), kinds
    planned = [round_ for round_, kind in zip(rounds, kinds, strict=True) if kind == "plan"]
    assert any(s.get("group_ids") is not None for round_ in planned for s in round_["ranks"])
    assert any(not s["lengths"] for round_ in planned for s in round_["ranks"])
    assert any(round_["ranks"][0]["options"]["equal_rows_per_micro_batch"] for round_ in planned)
    assert sorted(round_["mismatch"] for round_ in rounds if round_["mismatch"]) == sorted(names)

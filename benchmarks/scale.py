"""How planning time and memory grow with the batch (issue 33). Prints one table.

Run: ``python benchmarks/scale.py`` (10^3 to 10^5 samples, 512 rows first for the tensor
rows, a few minutes on 2 cores); ``--full`` adds the 10^6 rows of the list API, the global
planner and the jagged rows (10^6 jagged rows hold ~6.6 GB of int32 tokens: the call and
its gather each copy them once, ~14 GB at the peak) and 10^4 padded rows; ``--quick``
stops at 10^4; ``--caps`` and ``--sizes`` choose the rows.

Lengths: lognormal, median 1,000 tokens (sigma 1), at least 1 and clipped to
``min(cap, 32768)`` (seed 0). Caps 16,384 and 65,536 tokens by default.

Rows (``api``):
  list     ``plan_micro_batches(lengths, cap)``
  global   ``plan_global_batch(lengths, 8, cap)`` (8 DP ranks, the whole step)
  jagged   ``rearrange_micro_batches`` on a TensorDict with jagged int32 ``input_ids``
  dense    the same on right-padded ``attention_mask`` (bool) and ``input_ids`` (int32);
           with ``--entries verl``, int64 ``input_ids``, ``attention_mask``,
           ``position_ids`` and ``loss_mask`` (verl's SFT batch: 32 bytes a token to gather
           where the default has 5, against a mask of 8 bytes where it has 1)
  proto    ``prepare_dynamic_batch`` on a DataProto-like object of those padded rows and a
           per-sample ``uid`` array (its floors build each micro-batch's DataProto alike)

Columns:
  count     micro-batches (list, jagged, dense) or their sum over the ranks (global)
  bound     ``lower_bound`` of the lengths (list rows; the count is optimal where equal)
  cpu s     process CPU time (all threads), the minimum of ``--repeat`` runs (default 3);
            on tensor rows the call, its gather and its planning run in turn in each round
            (each round starting one further along, so each follows each other as often),
            after two rounds untimed, and rows whose round takes under 20 ms run at least
            as many rounds as fill half a second (at most 60): a few-millisecond call moves
            by 10-20% with what the allocator and the caches hold, and the least of a few
            rounds may catch one side at its best and the other not
  us/smp    cpu s per sample, in microseconds
  peak MB   the process's peak resident memory during one call above what it held before
            (Linux VmHWM, reset through /proc/self/clear_refs; "-" where that is refused)
  gather s  tensor rows: the gather of the same micro-batches, timed the same way: the
            batch indexed by each micro-batch's rows (dense: ``batch[rows]``, which indexes
            every entry as ``tensor[rows]``, as verl 0.9.1's ``index_select_tensor_dict``
            does; an advanced indexing, ~2x an ``index_select`` of int32 rows on CPU) or, for
            jagged rows, one split of the values and per micro-batch a cat of its rows and
            a jagged tensor on them; ratio = cpu s / gather s (target: <= 1.3)
  isel x    tensor rows: cpu s over the strictest floor, one ``index_select`` per entry
            and micro-batch and a TensorDict of them (dense; jagged: the gather above)
  batch MB  tensor rows: the batch's tensors (jagged: values); the target for peak MB
            is at most this (the call adds at most one copy of the batch)
  cut x     tensor rows: (cpu s - the planning alone, ``plan_micro_batches`` on the same
            lengths) / gather s: what reading and cutting cost over the gather
  spread    the balance: ``(max - min) / mean`` of the micro-batches' verl workloads
            (``24576*s + s**2`` summed per micro-batch; ``seqlen_balancing.planning.balance.spread``),
            over every micro-batch of every rank for ``global``; lower is better
  step/fl   global rows: the modeled lock-step time over its floor (``plan_step``'s
            ``step_time / floor``, fixed costs included); 1.000 is the floor
  stages    the largest stages of one run under cProfile (cumulative time, as a share of
            the call; left out: the entry points (``ENTRIES``), the functions that only
            call stages (``WRAPPERS``) and those that spend 95% of their time in one
            library callee, which stands for them; nested stages overlap: lpt's share includes
            _lpt_plain's). Shares are of the profiled run, whose overhead falls on the
            functions making many small calls.

Tensor rows run torch on one intra-op thread (``--threads``): on a shared machine a gather
split over threads that wait for a core cost about 24x its single-thread CPU time (8 ms
became 199 ms for 512 dense rows under a load of 14), so the ratio measured the load.

Karmarkar-Karp, best fit and LPT run on their compiled twins where the package was built
with them (``seqlen_balancing.native``; the first line says which are in use);
``SEQLEN_BALANCING_PURE_PYTHON=1`` runs the Python code.

After the table, the growth exponent of each (api, cap): the slope of a least-squares fit
of log(cpu s) on log(samples); 1.0 is linear.
"""

from __future__ import annotations

import argparse
import cProfile
import math
import pstats
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

from seqlen_balancing import lower_bound, plan_micro_batches
from seqlen_balancing.global_batch.step import plan_global_batch, plan_step
from seqlen_balancing.planning.balance import spread
from seqlen_balancing.planning.partition import workload

CAPS = (16384, 65536)
# the calls measured and their dispatchers: ~100% of every run (left out of the stages column)
ENTRIES = frozenset({
    "plan_micro_batches", "plan_global_batch", "plan_step", "rearrange_micro_batches",
    "_rearrange_rows", "prepare_dynamic_batch",
})
#: a function spending this share of its time in one callee is shown as that callee
PASS_THROUGH = 0.95
# functions that only call the stages (left out of the stages column)
WRAPPERS = frozenset({
    "<genexpr>", "<lambda>", "<listcomp>", "_analyse", "_balanced_bins", "_count",
    "analyse", "balanced", "build_plan", "paused", "plan_at",
})


def lognormal(n: int, cap: int, seed: int = 0) -> list[int]:
    """``n`` lognormal lengths, median 1,000, clipped to ``[1, min(cap, 32768)]``."""
    rng = random.Random(seed)
    top = min(cap, 32768)
    return [max(1, min(top, int(rng.lognormvariate(math.log(1000), 1.0)))) for _ in range(n)]


#: Tensor rows: a round (the call and its floors) under this many seconds is short, and
#: short rows run rounds for :data:`SHORT_BUDGET` seconds, at most :data:`MOST_ROUNDS`.
SHORT_ROUND, SHORT_BUDGET, MOST_ROUNDS = 0.020, 0.5, 60


def cpu_min(call: Callable[[], object], repeat: int) -> float:
    """The least process CPU time of ``repeat`` calls, in seconds."""
    return cpu_mins([call], repeat)[0]


def cpu_mins(calls: Sequence[Callable[[], object]], repeat: int, warm: int = 0) -> list[float]:
    """The least process CPU time of each of ``calls`` over ``repeat`` rounds, in seconds;
    each round runs every call once, in turn, so that a call and its gather meet the same
    load (on a shared machine, minutes apart they do not); round ``r`` starts at call ``r``
    (modulo their number), so that each call follows each other as often (a gather right
    after another one reads a warm batch and writes where the last one freed: on 512 jagged
    rows the same gather timed in two places differed by 14%). With ``warm``, that many rounds
    run untimed first, and a round under :data:`SHORT_ROUND` seconds raises ``repeat`` to
    as many rounds as fill :data:`SHORT_BUDGET` seconds (at most :data:`MOST_ROUNDS`)."""
    best = [math.inf] * len(calls)
    for _ in range(warm):
        for call in calls:
            call()
    if warm:
        start = time.process_time()
        for call in calls:
            call()
        took = time.process_time() - start
        if took < SHORT_ROUND:
            repeat = max(repeat, min(MOST_ROUNDS, math.ceil(SHORT_BUDGET / max(took, 1e-6))))
    for r in range(repeat):
        for j in [*range(r % len(calls), len(calls)), *range(r % len(calls))]:
            start = time.process_time()
            calls[j]()
            best[j] = min(best[j], time.process_time() - start)
    return best


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1])
    raise OSError(field)


def peak_mb(call: Callable[[], object]) -> str:
    """Peak resident memory of one call above the resident memory before it, in MB."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")  # resets VmHWM to the current resident size
        before = _status_kb("VmRSS")
        call()
        return f"{max(0, _status_kb('VmHWM') - before) / 1024:.0f}"
    except OSError:
        return "-"


def stages(call: Callable[[], object], top: int = 4) -> str:
    """The ``top`` largest library functions by cumulative time under cProfile."""
    profile = cProfile.Profile()
    profile.runcall(call)
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    total = max((row[3] for row in stats.values()), default=0.0) or 1.0
    # the most time each function spends in one library callee: stats[callee][4][caller][3]
    in_one: dict[tuple[str, int, str], float] = {}
    for callee, row in stats.items():
        for caller, timing in row[4].items():
            if caller != callee and "seqlen_balancing" in callee[0]:
                in_one[caller] = max(in_one.get(caller, 0.0), timing[3])
    rows = [
        (row[3] / total, name)
        for func, row in stats.items()
        for path, _, name in (func,)
        if "seqlen_balancing" in path and name not in WRAPPERS | ENTRIES
        and in_one.get(func, 0.0) < PASS_THROUGH * row[3]
    ]
    rows.sort(reverse=True)
    return " ".join(f"{name} {share:.0%}" for share, name in rows[:top])


def exponent(points: Sequence[tuple[int, float]]) -> float:
    """Least-squares slope of log(time) on log(n)."""
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(max(t, 1e-9)) for _, t in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0


Thunk = Callable[[], object]


def balance(lengths: Sequence[int], micro_batches: Sequence[Sequence[int]]) -> str:
    """The workload spread of ``micro_batches`` (index lists into ``lengths``), as printed."""
    value = spread([sum(workload(lengths[i]) for i in mb) for mb in micro_batches])
    return f"{value:.3f}" if value >= 1e-3 or value == 0 else f"{value:.1e}"


class Proto:
    """A stand-in for verl's ``DataProto``: a TensorDict, per-sample numpy arrays, meta_info."""

    def __init__(self, batch: Any, non_tensor_batch: dict[str, Any], meta_info: dict[str, Any]) -> None:
        self.batch, self.non_tensor_batch, self.meta_info = batch, non_tensor_batch, meta_info

    @classmethod
    def from_dict(
        cls, tensors: dict[str, Any], non_tensors: dict[str, Any], meta_info: dict[str, Any]
    ) -> Proto:
        from tensordict import TensorDict

        size = next(iter(tensors.values())).shape[0]
        return cls(TensorDict(tensors, batch_size=[size]), non_tensors, meta_info)


#: The padded batch's entries (``--entries``): ``small`` the least a padded batch holds (the
#: gather smallest against the mask's count: the hardest case for the ratio), ``verl`` what
#: verl's SFT batch holds (int64 ``input_ids``, ``attention_mask``, ``position_ids``,
#: ``loss_mask``).
ENTRIES_OF = ("small", "verl")


def padded_entries(lengths: list[int], entries: str) -> dict[str, Any]:
    """The right-padded tensors of ``lengths`` for ``entries`` (:data:`ENTRIES_OF`)."""
    import torch

    mask = torch.arange(max(lengths)).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    if entries == "small":
        return {"attention_mask": mask, "input_ids": mask.to(torch.int32)}
    ones = mask.to(torch.int64)
    return {"input_ids": ones * 7, "attention_mask": ones, "position_ids": (ones.cumsum(1) - 1).clamp(min=0),
            "loss_mask": ones.clone()}


def proto_cases(
    lengths: list[int], cap: int, entries: str = "small"
) -> tuple[Thunk, Thunk, Thunk, list[list[int]], float]:
    """:func:`tensor_cases` for ``prepare_dynamic_batch`` on a DataProto of the padded rows
    and a per-sample ``uid`` array; its floors build each micro-batch's DataProto the same
    way from the gathered rows (verl's ``DataProto`` indexing: the batch's and each array's
    rows, and a copy of ``meta_info``)."""
    import copy

    import numpy as np
    from tensordict import TensorDict

    from seqlen_balancing import prepare_dynamic_batch

    # one batch for the call and its floors, so that each reads the same memory
    batch = TensorDict(padded_entries(lengths, entries), [len(lengths)])
    _, gather, strict, plan, megabytes = tensor_cases(lengths, cap, jagged=False, batch=batch)
    data = Proto(batch, {"uid": np.array([str(i) for i in range(len(lengths))], dtype=object)},
                 {"temperature": 1.0})

    def call() -> object:
        return prepare_dynamic_batch(data, cap)

    def wrapped(floor: Thunk) -> Thunk:
        def protos() -> object:
            out = []
            for rows, part in zip(plan, floor(), strict=True):  # type: ignore[call-overload]
                index = np.array(rows)
                non_tensors = {key: value[index] for key, value in data.non_tensor_batch.items()}
                out.append(Proto.from_dict(dict(part.items()), non_tensors, copy.deepcopy(data.meta_info)))
            return out
        return protos

    return call, wrapped(gather), wrapped(strict), plan, megabytes


def tensor_cases(
    lengths: list[int], cap: int, jagged: bool, entries: str = "small", batch: Any = None
) -> tuple[Thunk, Thunk, Thunk, list[list[int]], float]:
    """The call, its gather floor as verl gathers (dense), the strict floor (dense: an
    ``index_select`` per entry; jagged: the same gather), its plan and the batch's MB on a
    TensorDict of ``lengths`` (dense: ``batch`` where given, else built of ``entries``)."""
    import itertools

    import torch
    from tensordict import TensorDict

    from seqlen_balancing import rearrange_micro_batches

    n = len(lengths)
    if jagged:
        offsets = torch.tensor([0, *itertools.accumulate(lengths)])
        values = torch.zeros(int(offsets[-1]), dtype=torch.int32)
        ids = torch.nested.nested_tensor_from_jagged(values, offsets)
        batch = TensorDict({"input_ids": ids}, batch_size=[n])
    elif batch is None:
        batch = TensorDict(padded_entries(lengths, entries), [n])
    _, plan = rearrange_micro_batches(batch, cap)

    def call() -> object:
        return rearrange_micro_batches(batch, cap)

    def selected() -> object:  # dense: one index_select per entry, a TensorDict of them
        out = []
        for rows in plan:
            index = torch.tensor(rows)
            picked = {key: value.index_select(0, index) for key, value in batch.items()}
            out.append(TensorDict(picked, batch_size=[len(rows)]))
        return out

    def gather() -> object:
        if not jagged:
            return [batch[torch.tensor(rows)] for rows in plan]  # verl: tensor[indices]
        rows_of = torch.split(values, lengths)
        out = []
        for rows in plan:
            part = torch.cat([rows_of[i] for i in rows])
            offs = torch.tensor([0, *itertools.accumulate(lengths[i] for i in rows)])
            out.append(torch.nested.nested_tensor_from_jagged(part, offs))
        return out

    return call, gather, gather if jagged else selected, plan, batch_mb(batch)


def batch_mb(batch: object) -> float:
    """Megabytes of the batch's tensors (jagged: their values and offsets)."""
    import torch

    total = 0
    for leaf in batch.values(include_nested=True, leaves_only=True):  # type: ignore[attr-defined]
        if isinstance(leaf, torch.Tensor) and leaf.is_nested:
            leaf = leaf.values()
        if isinstance(leaf, torch.Tensor):
            total += leaf.numel() * leaf.element_size()
    return total / 2**20


def gather_nothing() -> object:
    """The floor of the rows that gather nothing (the list and global rows)."""
    return None


def row(api: str, n: int, cap: int, repeat: int, entries: str = "small") -> tuple[str, float]:
    """One line of the table and its CPU time."""
    lengths = lognormal(n, cap)
    gather: Callable[[], object] | None = None
    strict: Callable[[], object] = gather_nothing
    bound, size, step = "-", "-", "-"
    if api == "list":
        def call() -> object:
            return plan_micro_batches(lengths, cap)

        plan = plan_micro_batches(lengths, cap)
        bound = str(lower_bound(lengths, cap))
    elif api == "global":
        def call() -> object:
            return plan_global_batch(lengths, 8, cap)

        planned = plan_step(lengths, 8, cap)
        plan = [mb for rank in planned.rank_micro_batches for mb in rank]
        step = f"{planned.step_time / planned.floor:.3f}"
    else:
        cases = (proto_cases(lengths, cap, entries) if api == "proto"
                 else tensor_cases(lengths, cap, api == "jagged", entries))
        call, gather, strict, plan, megabytes = cases
        size = f"{megabytes:.0f}"
    count = len(plan)
    floor: float | None = None
    ratio, cut_ratio, strict_ratio = "-", "-", "-"
    if gather is None:
        seconds = cpu_min(call, repeat)
    else:
        seconds, floor, least, planning = cpu_mins(
            [call, gather, strict, lambda: plan_micro_batches(lengths, cap)], repeat, warm=2)
        ratio, cut_ratio = f"{seconds / floor:.2f}", f"{max(0.0, seconds - planning) / floor:.2f}"
        strict_ratio = f"{seconds / least:.2f}"
    text = (
        f"{api:<7}{cap:>7}{n:>9}{count:>8}{bound:>8}{seconds:>9.3f}{1e6 * seconds / n:>8.2f}"
        f"{peak_mb(call):>8}{size:>9}{'-' if floor is None else f'{floor:.3f}':>9}{ratio:>7}"
        f"{cut_ratio:>7}{strict_ratio:>7}{balance(lengths, plan):>8}{step:>8}  {stages(call)}"
    )
    return text, seconds


def sizes_for(api: str, full: bool, quick: bool) -> list[int]:
    """The sample counts a row kind is measured at (tensors: what memory allows; one DP
    rank's 512 padded or jagged rows first)."""
    top = {"list": 5, "global": 5, "jagged": 5, "dense": 3, "proto": 3}[api] + full
    if quick:
        top = min(top, 4)
    return ([512] if api in ("jagged", "dense", "proto") else []) + [10**e for e in range(3, top + 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="add 10^6 samples")
    parser.add_argument("--quick", action="store_true", help="stop at 10^4 samples")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--apis", default="list,global,jagged,dense,proto")
    parser.add_argument("--sizes", default="", help="sample counts, e.g. 1000,1000000")
    parser.add_argument("--caps", default=",".join(map(str, CAPS)),
                        help="caps in tokens, e.g. 4096,8192,16384,32768,65536")
    parser.add_argument("--entries", choices=ENTRIES_OF, default="small",
                        help="the padded rows' entries (dense, proto): small (a bool mask and "
                        "int32 ids) or verl (four int64 entries, as verl's SFT batch)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch's intra-op threads for the tensor rows (default 1)")
    args = parser.parse_args()
    if any(api in args.apis for api in ("jagged", "dense", "proto")):
        import torch

        torch.set_num_threads(args.threads)
        import seqlen_balancing.batch.lengths  # noqa: F401 (the mask's count: its twin listed)
    from seqlen_balancing import native

    twins = [name.split(".")[-1] for name, used in native.in_use().items() if used]
    print(f"compiled twins in use: {', '.join(sorted(twins)) or 'none (the Python code)'}")
    print(
        f"{'api':<7}{'cap':>7}{'samples':>9}{'count':>8}{'bound':>8}{'cpu s':>9}{'us/smp':>8}"
        f"{'peak MB':>8}{'batch MB':>9}{'gather s':>9}{'ratio':>7}{'cut x':>7}{'isel x':>7}{'spread':>8}"
        f"{'step/fl':>8}  stages"
    )
    fits = []
    for api in args.apis.split(","):
        for cap in (int(v) for v in args.caps.split(",") if v):
            points = []
            chosen = [int(v) for v in args.sizes.split(",") if v]
            for n in chosen or sizes_for(api, args.full, args.quick):
                text, seconds = row(api, n, cap, args.repeat, args.entries)
                print(text, flush=True)
                points.append((n, seconds))
            if len(points) > 1:
                fits.append(f"{api} cap {cap}: time ~ n^{exponent(points):.2f}")
    print("growth exponents: " + "; ".join(fits))


if __name__ == "__main__":
    main()

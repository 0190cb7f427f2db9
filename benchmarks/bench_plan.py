"""Micro-batch counts, balance and planning time on real token lengths. Prints tables.

Run: ``python benchmarks/bench_plan.py`` (about 5 minutes; ``--quick`` for a smaller run).

Lengths are the bundled CHAMP conversations (Qwen3 tokenizer), drawn with a fixed seed.
"xN" multiplies every length by N to mimic long chain-of-thought rollouts; a scaled length
above the cap is clipped to the cap, as a rollout truncated at its maximum length would be.

Columns:
  L2        Martello-Toth lower bound on the number of micro-batches
  ours      this library's count; BFD: plain best-fit decreasing; retry: verl 0.9.1's rule
            (Karmarkar-Karp from ceil(total/cap) upwards, one count at a time, until it fits)
  largest   tokens in the fullest micro-batch (never above the cap)
  spread    workload spread (max-min)/mean of our plan; KK: plain Karmarkar-Karp at the same
            count when that plan fits the cap ("-" when it does not)
  bound     lower_bound (the best of L2, the matching, reduction and Fekete-Schepers bounds);
            "*" after our count: it meets the bound, so it is optimal
  plan ms   plan_micro_batches on a list; call ms: rearrange_micro_batches on a TensorDict
            with jagged input_ids (verl's remove-padding layout), tensor indexing included;
            padded ms: the same with a right-padded (n, max length) attention_mask and
            input_ids ("-" above 40M elements); read+gather ms: on that padded batch, the
            least any call can do: read the lengths (attention_mask.sum(-1) to a list) and
            gather every row once (one index-select of the batch in plan order); ratio:
            padded ms / read+gather ms
  j r+g ms  the same floor for the jagged batch: its offsets read to the host and its token
            values gathered once in plan order (a split and one cat) into one jagged tensor;
            j ratio: call ms / j r+g ms (the call builds one jagged tensor per micro-batch)

The alignment table (issue 21) plans the CHAMP cases with ``pad_to_multiple_of`` 1 (verl's
rule), 8, 16 and 32 (Megatron's per-sequence THD alignment: tp, or tp*cp*2): aligned is the
tokens the GPU holds once every sequence is padded; bound and ours are in those aligned
tokens; today over: micro-batches of the unaligned plan whose aligned total exceeds the cap
(the risk a plan that ignores alignment carries; see benchmarks/alignment_risk.py).

Times are the best of ``--repeat`` runs (default 5; 1 with ``--quick``), each case's
call and its read+gather floor measured in the same run, alternately.
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time
from collections.abc import Callable, Sequence

import torch
from tensordict import TensorDict

from seqlen_balancing import (
    best_fit_decreasing,
    l2_lower_bound,
    lower_bound,
    plan_data_parallel,
    plan_micro_batches,
    rearrange_micro_batches,
)
from seqlen_balancing.data import load_champ_lengths
from seqlen_balancing.planning.balance import spread
from seqlen_balancing.planning.partition import karmarkar_karp, workload
from seqlen_balancing.planning.verl_rule import verl_counts


def draw(n: int, scale: int, cap: int, seed: int, replace: bool = False) -> list[int]:
    lengths = load_champ_lengths()
    rng = random.Random(seed)
    picked = rng.choices(lengths, k=n) if replace else rng.sample(lengths, n)
    return [min(cap, x * scale) for x in picked]


def bimodal(n: int, seed: int) -> list[int]:
    """Half the samples 100-600 tokens, half 6,000-9,000 (short prompts next to long
    rollouts), shuffled: at cap 16,384, L2 is loose and the large-item matching bound tight."""
    rng = random.Random(seed)
    lengths = [rng.randint(100, 600) for _ in range(n // 2)]
    lengths += [rng.randint(6000, 9000) for _ in range(n - n // 2)]
    rng.shuffle(lengths)
    return lengths


def retry_count(lengths: Sequence[int], cap: int) -> int:
    """verl 0.9.1's strict-cap rule: KK from ceil(total/cap) upwards until every part fits."""
    return verl_counts([lengths], cap, max_tries=1 << 30).counts[0]  # seqlen_balancing.planning.verl_rule


def timed_rounds(functions: list[Callable[[], object]], repeat: int) -> list[float]:
    """Best time in ms of each function over ``repeat`` rounds, each round running all of
    them one after another, so that every column sees the same machine load."""
    best = [float("inf")] * len(functions)
    for _ in range(repeat):
        for j, function in enumerate(functions):
            start = time.perf_counter()
            function()
            best[j] = min(best[j], time.perf_counter() - start)
    return [b * 1000 for b in best]


def read_and_gather(batch: TensorDict, order: torch.Tensor) -> tuple[list[int], TensorDict]:
    """The floor of any rearrangement: the lengths read to the host, every row gathered once."""
    lengths = batch["attention_mask"].sum(-1).tolist()
    return lengths, batch[order]


def jagged_read_and_gather(batch: TensorDict, order: list[int]) -> torch.Tensor:
    """The floor for jagged ``input_ids``: the offsets read to the host, the token values
    gathered once in plan order (a split and one cat), one jagged tensor built on them."""
    ids = batch["input_ids"]
    offsets = ids.offsets().tolist()
    sizes = [b - a for a, b in itertools.pairwise(offsets)]
    rows = torch.split(ids.values(), sizes)
    values = torch.cat([rows[i] for i in order])
    new_offsets = torch.tensor([0, *itertools.accumulate(sizes[i] for i in order)])
    return torch.nested.nested_tensor_from_jagged(values, new_offsets)


def jagged_batch(lengths: Sequence[int]) -> TensorDict:
    """A batch as verl's remove-padding path holds it: jagged ``input_ids`` (int32)."""
    offsets = torch.tensor([0, *torch.tensor(list(lengths)).cumsum(0).tolist()])
    values = torch.zeros(int(offsets[-1]), dtype=torch.int32)
    ids = torch.nested.nested_tensor_from_jagged(values, offsets)
    return TensorDict({"input_ids": ids}, batch_size=[len(lengths)])


def padded_batch(lengths: Sequence[int]) -> TensorDict:
    """The same batch right-padded: attention_mask (bool) and input_ids (int32), (n, width)."""
    mask = torch.arange(max(lengths)).unsqueeze(0) < torch.tensor(list(lengths)).unsqueeze(1)
    return TensorDict({"attention_mask": mask, "input_ids": mask.to(torch.int32)}, [len(lengths)])


def case_row(name: str, lengths: list[int], cap: int, repeat: int, with_retry: bool) -> str:
    l2 = l2_lower_bound(lengths, cap)
    bound = lower_bound(lengths, cap)
    plan = plan_micro_batches(lengths, cap)
    tokens = [sum(lengths[i] for i in part) for part in plan]
    work = [workload(s) for s in lengths]
    loads = [sum(work[i] for i in part) for part in plan]
    kk = karmarkar_karp(work, len(plan), equal_size=False)
    kk_fits = max(sum(lengths[i] for i in p) for p in kk) <= cap
    kk_spread = f"{spread([sum(work[i] for i in p) for p in kk]):.4f}" if kk_fits else "-"
    [plan_ms] = timed_rounds([lambda: plan_micro_batches(lengths, cap)], repeat)
    batch = jagged_batch(lengths)
    plan_order = [i for part in plan for i in part]
    call_ms, jagged_floor_ms = timed_rounds(
        [
            lambda: rearrange_micro_batches(batch, cap),
            lambda: jagged_read_and_gather(batch, plan_order),
        ],
        repeat,
    )
    padded_ms = floor_ms = ratio = "-"
    if len(lengths) * max(lengths) <= 40_000_000:  # skip padded copies above ~200 MB
        padded = padded_batch(lengths)
        order = torch.tensor(plan_order)
        padded_time, floor_time = timed_rounds(
            [
                lambda: rearrange_micro_batches(padded, cap),
                lambda: read_and_gather(padded, order),
            ],
            repeat,
        )
        padded_ms, floor_ms = f"{padded_time:.1f}", f"{floor_time:.1f}"
        ratio = f"{padded_time / floor_time:.2f}"
    retry = str(retry_count(lengths, cap)) if with_retry else "n/a"
    bfd = len(best_fit_decreasing(lengths, cap))
    ours = f"{len(plan)}{'*' if len(plan) == bound else ' '}"
    return (
        f"{name:<18}{len(lengths):>6}{cap:>7}{l2:>6}{bound:>6}{ours:>7}{bfd:>6}{retry:>7}"
        f"{max(tokens):>9}{spread(loads):>9.4f}{kk_spread:>9}{plan_ms:>9.1f}{call_ms:>9.1f}"
        f"{jagged_floor_ms:>9.1f}{call_ms / jagged_floor_ms:>8.2f}{padded_ms:>10}{floor_ms:>8}{ratio:>7}"
    )


ALIGNMENTS = (1, 8, 16, 32)


def alignment_rows(quick: bool, repeat: int) -> list[str]:
    """The CHAMP cases planned under each per-sequence alignment (issue 21)."""
    rows = []
    cases = [c for c in bench_cases(quick) if c[0].startswith("CHAMP")]
    for name, lengths, cap, _ in cases:
        today = plan_micro_batches(lengths, cap)
        for pad in ALIGNMENTS:
            costs = [-(-n // pad) * pad for n in lengths]
            bound = lower_bound(lengths, cap, pad_to_multiple_of=pad)
            plan = plan_micro_batches(lengths, cap, pad_to_multiple_of=pad)
            def aligned_plan(lengths: list[int] = lengths, cap: int = cap, pad: int = pad) -> object:
                return plan_micro_batches(lengths, cap, pad_to_multiple_of=pad)

            [plan_ms] = timed_rounds([aligned_plan], repeat)
            over = sum(sum(costs[i] for i in part) > cap for part in today)
            largest = max(sum(costs[i] for i in part) for part in plan)
            ours = f"{len(plan)}{'*' if len(plan) == bound else ' '}"
            rows.append(
                f"{name:<12}{len(lengths):>6}{cap:>7}{pad:>5}{sum(lengths):>10}{sum(costs):>10}"
                f"{bound:>7}{ours:>7}{largest:>9}{over:>7}/{len(today):<5}{plan_ms:>9.1f}"
            )
    return rows


def rate_rows(trials: int) -> list[str]:
    settings = [
        ("x1", 1, 256, 16384), ("x1", 1, 1024, 16384), ("x4", 4, 2048, 24576),
        ("x10", 10, 256, 32768), ("x10", 10, 512, 65536), ("x10", 10, 256, 16384),
    ]
    rows = []
    for label, scale, n, cap in settings:
        at_bound = bfd_at_bound = above_one = proven = gap = 0
        times = []
        for seed in range(trials):
            lengths = draw(n, scale, cap, seed)
            bound = l2_lower_bound(lengths, cap)
            start = time.perf_counter()
            count = len(plan_micro_batches(lengths, cap))
            times.append((time.perf_counter() - start) * 1000)
            at_bound += count == bound
            above_one += count > bound + 1
            bfd_at_bound += len(best_fit_decreasing(lengths, cap)) == bound
            best = lower_bound(lengths, cap)
            proven += count == best
            gap += count - best
        rows.append(
            f"{label + ' n=' + str(n):<14}{cap:>7}{100 * bfd_at_bound / trials:>9.0f}%"
            f"{100 * at_bound / trials:>9.0f}%{100 * proven / trials:>9.0f}%{gap:>6}"
            f"{above_one:>9}{statistics.mean(times):>10.1f}{max(times):>10.1f}"
        )
    return rows


def scaling_rows(sizes: Sequence[int], cap: int) -> list[str]:
    rows = []
    for n in sizes:
        lengths = draw(n, 1, cap, seed=7, replace=True)
        batch = jagged_batch(lengths)
        plan_ms, call_ms = timed_rounds(
            [
                lambda lengths=lengths: plan_micro_batches(lengths, cap),
                lambda batch=batch: rearrange_micro_batches(batch, cap),
            ],
            5,
        )
        count = len(plan_micro_batches(lengths, cap))
        rows.append(
            f"{n:>7}{count:>8}{plan_ms:>11.1f}{call_ms:>11.1f}{1000 * call_ms / n:>13.2f}"
        )
    return rows


def bench_cases(quick: bool) -> list[tuple[str, list[int], int, bool]]:
    """The cases of the first table: (name, lengths, cap, whether to run verl's retry rule,
    which takes seconds to minutes on the large ones, so ``--quick`` skips it there)."""
    return [
        ("CHAMP x1", draw(256, 1, 16384, 0), 16384, True),
        ("CHAMP x1", draw(1024, 1, 16384, 0), 16384, True),
        ("CHAMP x4", draw(2048, 4, 24576, 0), 24576, True),
        ("CHAMP x10", draw(256, 10, 32768, 0), 32768, True),
        ("CHAMP x10", draw(512, 10, 65536, 0), 65536, True),
        ("CHAMP x10", draw(256, 10, 32768, 0), 65536, True),
        ("CHAMP x10", draw(512, 10, 32768, 0), 32768, True),
        ("bimodal", bimodal(1024, 0), 16384, not quick),
        ("[7]*8", [7] * 8, 8, True),
        ("[7]*512", [7] * 512, 8, not quick),
        ("SFT 16,384 CHAMP", draw(16384, 1, 32768, 0, replace=True), 32768, not quick),
    ]


def dp_rows(quick: bool, repeat: int) -> list[str]:
    """Planning with a DP group (``plan_data_parallel``: every rank's analysis, the one
    agreement and every rank's plan, in one process): CPU ms per rank, the best of
    ``repeat`` runs over 5 steps (3 with ``--quick``), each step's ranks drawn from CHAMP."""
    cases = [(8, 64, 16384, 1), (8, 256, 16384, 1), (8, 1024, 16384, 1), (4, 2048, 24576, 4),
             (8, 256, 32768, 10)]
    rows = []
    for dp, n, cap, scale in cases:
        rng = random.Random(0)
        steps = [[[min(cap, scale * rng.choice(load_champ_lengths())) for _ in range(n)] for _ in range(dp)]
                 for _ in range(3 if quick else 5)]
        best = min(_cpu(lambda steps=steps, cap=cap: [plan_data_parallel(s, cap) for s in steps])
                   for _ in range(repeat))
        counts = sum(len(plan_data_parallel(step, cap)[0]) for step in steps)
        rows.append(f"{f'CHAMP x{scale}':<12}{dp:>6}{n:>7}{cap:>7}{counts:>8}"
                    f"{best / len(steps) / dp * 1000:>14.2f}")
    return rows


def _cpu(call: Callable[[], object]) -> float:
    start = time.process_time()
    call()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer trials and sizes")
    parser.add_argument("--repeat", type=int, default=None, help="best of N runs (default 5)")
    args = parser.parse_args()
    repeat = args.repeat or (1 if args.quick else 5)

    print(f"Cases (seed 0), times best of {repeat}; * = count meets lower_bound (optimal)")
    print(
        f"{'case':<18}{'n':>6}{'cap':>7}{'L2':>6}{'bound':>6}{'ours':>7}{'BFD':>6}{'retry':>7}"
        f"{'largest':>9}{'spread':>9}{'KK':>9}{'plan ms':>9}{'call ms':>9}{'j r+g ms':>9}{'j ratio':>8}"
        f"{'padded ms':>10}"
        f"{'r+g ms':>8}{'ratio':>7}"
    )
    for name, lengths, cap, with_retry in bench_cases(args.quick):
        print(case_row(name, lengths, cap, repeat, with_retry), flush=True)

    print("\nWith a DP group (plan_data_parallel): CPU ms per rank")
    print(f"{'case':<12}{'ranks':>6}{'n':>7}{'cap':>7}{'counts':>8}{'ms per rank':>14}")
    for row in dp_rows(args.quick, repeat):
        print(row, flush=True)

    print("\nAlignment (issue 21): the cap on aligned tokens; * = count meets lower_bound")
    print(
        f"{'case':<12}{'n':>6}{'cap':>7}{'pad':>5}{'tokens':>10}{'aligned':>10}{'bound':>7}{'ours':>7}"
        f"{'largest':>9}{'today over':>13}{'plan ms':>9}"
    )
    for row in alignment_rows(args.quick, repeat):
        print(row, flush=True)

    trials = 20 if args.quick else 100
    print(f"\nRate at the L2 bound and proven optimal over {trials} random batches (seeds 0..{trials - 1})")
    print(
        f"{'setting':<14}{'cap':>7}{'BFD@L2':>10}{'ours@L2':>10}{'proven':>10}{'gap':>6}"
        f"{'>L2+1':>9}{'mean ms':>10}{'max ms':>10}"
    )
    for row in rate_rows(trials):
        print(row, flush=True)

    sizes = [1024, 2048, 4096, 16384] if args.quick else [1024, 2048, 4096, 16384, 65536]
    print("\nGrowth: rearrange_micro_batches on jagged input_ids, CHAMP x1, cap 16384")
    print(f"{'n':>7}{'count':>8}{'plan ms':>11}{'call ms':>11}{'us/sample':>13}")
    for row in scaling_rows(sizes, 16384):
        print(row, flush=True)


if __name__ == "__main__":
    main()

"""The count search's work at scale on real lengths (issue 45, item 6). Prints one table.

Run: ``python setup.py build_ext --inplace`` first (the compiled twins, as CI builds them),
then ``PYTHONPATH=src python benchmarks/champ_scale.py`` (about a minute on one core);
``--sizes`` and ``--caps`` choose the rows, ``--repeat`` the runs per row.

Lengths: the bundled CHAMP conversations (Qwen3 tokenizer), drawn with replacement
(``random.Random(seed).choices``, seed 0) and clipped to the cap.

Columns:
  n         samples
  cap       ``max_token_len`` in tokens
  us/smp    ``plan_micro_batches(lengths, cap)``: process CPU time per sample in
            microseconds, the least of ``--repeat`` runs (default 3; 1 at 10^6)
  search    ``analyse(lengths, cap)`` alone (the count search and its bounds, no balancing),
            CPU us per sample, timed once; the rest of us/smp is mostly the balancing
  count     micro-batches planned
  bound     ``lower_bound(lengths, cap)``: every bound of ``bounds.best_lower_bound``
            (not timed); no plan has fewer micro-batches
  gap       count - bound: where the count search stopped above the bound
  said      the bound the plan's analysis reported and its name (``analyse``: above
            2**16 samples the count search evaluates only the cheap bounds)
  BFD       plain best-fit decreasing's count, for reference
  verl      verl 0.9.1's count (Karmarkar-Karp from ceil(total / cap) up until it fits;
            ``seqlen_balancing.planning.verl_rule``), only with ``--verl`` (slow: minutes at 10^5)

The machine's load (``/proc/loadavg``) is printed before and after, and which compiled
twins were in use: without them best fit and the balancing run in Python.
"""

from __future__ import annotations

import argparse
import random
import time

from seqlen_balancing import best_fit_decreasing, lower_bound, native, plan_micro_batches
from seqlen_balancing.data import load_champ_lengths
from seqlen_balancing.planning.planner import analyse
from seqlen_balancing.planning.verl_rule import verl_counts


def draw(n: int, cap: int, seed: int) -> list[int]:
    """``n`` CHAMP lengths drawn with replacement, clipped to ``cap``."""
    return [min(cap, s) for s in random.Random(seed).choices(load_champ_lengths(), k=n)]


def cpu_seconds(lengths: list[int], cap: int, repeat: int) -> tuple[float, int]:
    """The least CPU time of ``repeat`` plans and the count planned."""
    best, count = float("inf"), 0
    for _ in range(repeat):
        start = time.process_time()
        count = len(plan_micro_batches(lengths, cap))
        best = min(best, time.process_time() - start)
    return best, count


def load() -> str:
    with open("/proc/loadavg") as f:
        return f.read().strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**4, 10**5, 10**6])
    parser.add_argument("--caps", type=int, nargs="+", default=[8192, 16384])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--verl", action="store_true", help="add verl 0.9.1's count (slow)")
    args = parser.parse_args()
    print(f"loadavg before: {load()}")
    print(f"compiled twins in use: {native.in_use()}")
    header = (f"{'n':>9} {'cap':>6} {'us/smp':>7} {'count':>7} {'bound':>7} {'gap':>4} {'search':>6} "
              f"{'said':>16} {'BFD':>7}")
    print(header + (f" {'verl':>7}" if args.verl else ""))
    for n in args.sizes:
        for cap in args.caps:
            lengths = draw(n, cap, args.seed)
            seconds, count = cpu_seconds(lengths, cap, 1 if n >= 10**6 else args.repeat)
            bound = lower_bound(lengths, cap)
            start = time.process_time()
            said = analyse(lengths, cap)
            search = time.process_time() - start
            reported = f"{said.lower_bound} {said.bound_name}"
            row = (f"{n:>9} {cap:>6} {seconds / n * 1e6:>7.2f} {count:>7} {bound:>7} {count - bound:>4} "
                   f"{search / n * 1e6:>6.2f} {reported:>16} {len(best_fit_decreasing(lengths, cap)):>7}")
            if args.verl:
                row += f" {verl_counts([lengths], cap, max_tries=1 << 30).counts[0]:>7}"
            print(row, flush=True)
    print(f"loadavg after: {load()}")


if __name__ == "__main__":
    main()

"""Time of ``planner.analyse`` on the adversarial inputs of ``tests/test_packing.py``.

The test checks each input's count; this script checks the speed target it once checked
with a wall-clock limit in the test (2 s each on the 2-core CI machine, idle), which a
loaded machine failed at 2.3 s. Prints one row per input: its size, the count, the best
of ``--repeat`` runs (default 3) and whether that is within the target.

Run: ``python benchmarks/adversarial.py [--repeat 3] [--target 2.0]`` (about 10-30 s).
"""

from __future__ import annotations

import argparse
import time

from seqlen_balancing.planning.planner import analyse

#: (name, sizes, cap, the count tests/test_packing.py expects)
CASES = [
    ("512 x 7 at cap 8", [7] * 512, 8, 512),
    ("65,536 x 7 at cap 8", [7] * 65536, 8, 65536),
    ("65,536 zeros at cap 5", [0] * 65536, 5, 1),
    ("65,536 x 5,000 at cap 16,384", [5000] * 65536, 16384, 21846),
    ("32,768 x (3, 5) at cap 8", [3, 5] * 32768, 8, 32768),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per input; the best counts")
    parser.add_argument("--target", type=float, default=2.0, help="seconds per input")
    args = parser.parse_args()
    print(f"planner.analyse, best of {args.repeat} runs; target {args.target:.1f} s per input")
    print(f"{'input':<30} {'n':>7} {'count':>7} {'expected':>9} {'seconds':>8}  within")
    slow = 0
    for name, sizes, cap, expected in CASES:
        best = float("inf")
        for _ in range(args.repeat):
            start = time.perf_counter()
            count = analyse(sizes, cap).min_count
            best = min(best, time.perf_counter() - start)
        within = best <= args.target
        slow += not within
        mark = "yes" if within else "NO"
        print(f"{name:<30} {len(sizes):>7} {count:>7} {expected:>9} {best:>8.3f}  {mark}")
    print(f"{len(CASES) - slow} of {len(CASES)} inputs within {args.target:.1f} s")


if __name__ == "__main__":
    main()

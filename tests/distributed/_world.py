"""A world of gloo ranks playing rounds: the test side starts and judges, the worker side plays.

Shared by ``test_oracle.py`` / ``_oracle_worker.py`` and ``test_options.py`` /
``_options_worker.py``. A worker is run as a script, one process per rank::

    python WORKER ROUNDS_JSON RANK WORLD_SIZE INIT_METHOD OUT_DIR

and calls :func:`play_rounds` with its own ``play(spec, group)``: for each round it appends
one JSON line to ``OUT_DIR/rank{RANK}.jsonl`` (flushed and synced at once), then a fence
(``all_gather_object`` of the round number), so a rank that skipped or repeated a
collective shows up as a desync rather than a shifted result. :func:`run_world` starts the
ranks (file rendezvous, loopback only) as forks of a server that imported torch once
(tests/preloaded.py), kills any left at the deadline, and returns every rank's records; a
rank that did not exit 0 fails the test with its output's tail.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any


def run_world(worker: Path, world: int, rounds: list[dict[str, Any]], directory: Path,
              deadline_s: float) -> list[list[dict[str, Any]]]:
    """Start the ranks, wait for them (killing any left at the deadline), read their records."""
    import preloaded  # the test side only: a worker imports this module for play_rounds

    (directory / "rounds.json").write_text(json.dumps(rounds), encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if not key.startswith("SEQLEN_BALANCING_")}
    env |= {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "GLOO_SOCKET_IFNAME": "lo"}
    init_method = "file://" + str(directory / "rendezvous")
    processes = []
    start = time.monotonic()
    try:
        for rank in range(world):
            argv = [sys.executable, str(worker), str(directory / "rounds.json"), str(rank), str(world),
                    init_method, str(directory)]
            output = directory / f"rank{rank}.out"
            processes.append(preloaded.popen(argv, output=output, env=env, cwd=directory))
        for process in processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(deadline_s - (time.monotonic() - start), 0.1))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
    records = []
    for rank in range(world):
        path = directory / f"rank{rank}.jsonl"
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        records.append([json.loads(line) for line in lines])
        tail = (directory / f"rank{rank}.out").read_text(errors="replace")[-3000:]
        assert processes[rank].returncode == 0, (
            f"rank {rank} ended with {processes[rank].returncode} after {len(lines)} records "
            f"({time.monotonic() - start:.0f}s): {records[rank][-1:]}\n{tail}"
        )
    return records


def play_rounds(argv: list[str], play: Callable[[dict[str, Any], Any], dict[str, Any]],
                pg_timeout_s: float = 60) -> int:
    """The worker's main: join the gloo world, play this rank's part of every round, fence."""
    rounds_path, rank, world_size, init_method, out_dir = (
        Path(argv[0]), int(argv[1]), int(argv[2]), argv[3], Path(argv[4]),
    )
    import torch.distributed as dist

    rounds = json.loads(rounds_path.read_text(encoding="utf-8"))
    with (out_dir / f"rank{rank}.jsonl").open("a", encoding="utf-8") as out:

        def write(record: dict[str, Any]) -> None:
            out.write(json.dumps(record) + "\n")
            out.flush()
            os.fsync(out.fileno())

        try:
            dist.init_process_group(
                "gloo", init_method=init_method, rank=rank, world_size=world_size,
                timeout=datetime.timedelta(seconds=pg_timeout_s),
            )
            try:
                for number, round_ in enumerate(rounds):
                    write({"round": number, **play(round_["ranks"][rank], dist.group.WORLD)})
                    seen: list[Any] = [None] * world_size
                    dist.all_gather_object(seen, number)
                    if seen != [number] * world_size:
                        write({"round": "__desync__", "seen": seen})
                        return 3
            finally:
                dist.destroy_process_group()
        except BaseException:
            write({"round": "__harness_error__", "traceback": traceback.format_exc()})
            return 2
    return 0


def exit_now(code: int) -> None:
    """End the worker: every record is fsynced and the group destroyed; skip interpreter
    teardown, where a gloo worker thread still alive can abort the process (SIGABRT,
    "terminate called without an active exception") after the work is done."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

"""BalancedDistributedSampler on real gloo ranks (2 and 4 processes, file rendezvous).

Every step's rows over all ranks are DistributedSampler's (same seed, same epochs), the
ranks agree on every step's count without a collective, and one training step of a tiny
float64 model has the same loss and gradient with either sampler when the loss is
normalised over the global batch's tokens (verl 0.9.1's SFT trainer). The workers are
``_sampler_worker.py``, started as forks of a server that imported torch once
(tests/preloaded.py); a rank that does not finish within the deadline fails the test.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import preloaded

pytestmark = [pytest.mark.distributed, pytest.mark.no_tensordict, pytest.mark.slow, pytest.mark.timeout(240)]

WORKER = Path(__file__).resolve().parent / "_sampler_worker.py"
DEADLINE_S = 150


def run(scenario: str, world: int, directory: Path) -> list[dict[str, Any]]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "PYTHONUNBUFFERED": "1"}
    init = "file://" + str(directory / "rendezvous")
    processes: list[preloaded.Started] = []
    for rank in range(world):
        argv = [sys.executable, str(WORKER), scenario, str(rank), str(world), init, str(directory)]
        output = directory / f"rank{rank}.out"
        processes.append(preloaded.popen(argv, output=output, env=env, cwd=directory))
    try:
        for process in processes:
            process.wait(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{scenario} on {world} ranks hung past {DEADLINE_S}s", pytrace=False)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
    results = []
    for rank, process in enumerate(processes):
        log = (directory / f"rank{rank}.out").read_text(encoding="utf-8", errors="replace")
        assert process.returncode == 0, f"rank {rank} failed:\n{log[-3000:]}"
        results.append(json.loads((directory / f"rank{rank}.json").read_text(encoding="utf-8")))
    return results


@pytest.mark.parametrize("world", [2, 4])
def test_every_step_holds_distributed_samplers_rows_on_real_ranks(world: int, tmp_path: Path) -> None:
    results = run("steps", world, tmp_path)
    assert [r["rank"] for r in results] == list(range(world))
    assert {r["num_replicas"] for r in results} == {world}
    batch = 6
    for epoch in range(2):
        ours = results[0]["epochs"][epoch]["ours"]
        theirs = results[0]["epochs"][epoch]["theirs"]
        counts = results[0]["epochs"][epoch]["counts"]
        assert all(r["epochs"][epoch]["ours"] == ours for r in results)  # the gathers agree
        assert len({tuple(c) for c in counts}) == 1, "the ranks planned different counts"
        steps = len(theirs[0]) // batch + (len(theirs[0]) % batch > 0)
        for t in range(steps):
            rows_ours = sum((Counter(rank[t * batch : (t + 1) * batch]) for rank in ours), Counter())
            rows_theirs = sum((Counter(rank[t * batch : (t + 1) * batch]) for rank in theirs), Counter())
            assert rows_ours == rows_theirs, (epoch, t)
        assert [len(rank) for rank in ours] == [len(rank) for rank in theirs]
    # the assignment did change: some rank holds other rows than DistributedSampler gives it
    assert results[0]["epochs"][0]["ours"] != results[0]["epochs"][0]["theirs"]


def test_a_global_batch_loss_and_its_gradient_do_not_change(tmp_path: Path) -> None:
    results = run("loss", 2, tmp_path)
    for r in results:
        balanced_loss, balanced_grad = r["balanced"]
        dealt_loss, dealt_grad = r["dealt"]
        assert balanced_loss == pytest.approx(dealt_loss, rel=1e-12, abs=0)
        assert balanced_grad == pytest.approx(dealt_grad, rel=1e-10, abs=1e-15)
        assert any(g != 0 for g in balanced_grad)
    # the same global batch, dealt differently
    mine = sorted(results[0]["mine"] + results[1]["mine"])
    dealt = sorted(results[0]["dealt_rows"] + results[1]["dealt_rows"])
    assert mine == dealt
    assert sorted(results[0]["mine"]) != sorted(results[0]["dealt_rows"])

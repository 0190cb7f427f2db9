"""Running a check script of tests/compat in a process of its own (the verl switch's
scenarios: ``_switch_scan.py``, ``_fsdp_engine_check.py``, ``_ray_switch_check.py``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import preloaded

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment without the switch's variables, plus ``extra``."""
    env = {
        k: v for k, v in os.environ.items()
        if k not in ("SEQLEN_BALANCING_VERL", "VERL_USE_EXTERNAL_MODULES", "VERL_USE_EXTERNAL_PLUGINS")
    }
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), *filter(None, [env.get("PYTHONPATH")])])
    return env | {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"} | extra


def run_script(script: str, *args: str, timeout: float, **env: str) -> dict[str, object]:
    """Run a check in its own session; on timeout its whole process group is killed (a Ray
    cluster or a gloo peer it started must not outlive the test)."""
    with subprocess.Popen(
        [sys.executable, str(HERE / script), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=child_env(**env), start_new_session=True,
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
            pytest.fail(f"{script} ran past {timeout} s:\n{(stdout + stderr)[-5000:]}")
    return _report(proc.returncode, stdout, stderr)


def run_forked(script: str, *args: str, timeout: float, **env: str) -> dict[str, object]:
    """Run a check that starts no process of its own as a fork of tests/preloaded.py's
    server: torch and tensordict already imported (5 s of CPU saved per run), verl and this
    library imported by the script, as in a new interpreter."""
    try:
        proc = preloaded.run([sys.executable, str(HERE / script), *args], env=child_env(**env),
                             timeout=timeout)
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"{script} ran past {timeout} s:\n{(str(error.output) + str(error.stderr))[-5000:]}")
    return _report(proc.returncode, proc.stdout, proc.stderr)


def _report(returncode: int, stdout: str, stderr: str) -> dict[str, object]:
    """The check's JSON report (its last line on stdout), with its stderr."""
    assert returncode == 0, (stdout + stderr)[-5000:]
    result: dict[str, object] = json.loads(stdout.strip().splitlines()[-1])
    result["stderr"] = stderr
    return result

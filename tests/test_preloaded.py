"""tests/preloaded.py against the oracle it stands in for: a new interpreter (subprocess).

The same command lines run both ways must see the same argv, working directory,
environment, ``sys.path``, ``__main__`` and standard streams, and end with the same exit
code and output; only torch and tensordict are already imported in the preloaded one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import preloaded

pytestmark = [pytest.mark.torch, pytest.mark.slow, pytest.mark.timeout(180)]

PROBE = textwrap.dedent(
    """
    import json, os, sys
    print(json.dumps({
        "argv": sys.argv, "cwd": os.getcwd(), "name": __name__,
        "file": globals().get("__file__"), "path": sys.path,
        "given": os.environ.get("PRELOADED_GIVEN"), "parent": os.environ.get("PRELOADED_PARENT"),
        "stand_in": __import__("stand_in").WHERE,
        "test_process_modules": sorted(m for m in ("preloaded", "pytest", "seqlen_balancing")
                                       if m in sys.modules),
        "torch": "torch" in sys.modules,
    }))
    print("to stderr", file=sys.stderr)
    raise SystemExit(int(sys.argv[-1]))
    """
)


def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The command's environment: PYTHONPATH names a folder whose module shadows nothing
    else; a variable set only in this process must not reach the command."""
    (tmp_path / "shadow").mkdir()
    (tmp_path / "shadow" / "stand_in.py").write_text("WHERE = 'shadow'\n", encoding="utf-8")
    monkeypatch.setenv("PRELOADED_PARENT", "only in the test process")
    env = {k: v for k, v in os.environ.items() if k != "PRELOADED_PARENT"}
    return env | {"PYTHONPATH": str(tmp_path / "shadow"), "PRELOADED_GIVEN": "given"}


def _both(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], ...]:
    real = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=120, check=False)
    fork = preloaded.run(argv, env=env, cwd=cwd, timeout=120)
    return real, fork


@pytest.mark.parametrize("form", ["-c", "script"])
def test_a_command_sees_what_a_new_interpreter_sees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    env = _env(tmp_path, monkeypatch)
    (tmp_path / "probe.py").write_text(PROBE, encoding="utf-8")
    command = ["-c", PROBE] if form == "-c" else [str(tmp_path / "probe.py")]
    real, fork = _both([sys.executable, *command, "arg", "7"], env, tmp_path)
    assert (fork.returncode, fork.stderr) == (real.returncode, real.stderr) == (7, "to stderr\n")
    seen, expected = json.loads(fork.stdout), json.loads(real.stdout)
    assert seen.pop("torch") is True and expected.pop("torch") is False  # the one difference
    assert seen == expected
    assert seen["given"] == "given" and seen["parent"] is None and seen["stand_in"] == "shadow"
    assert seen["test_process_modules"] == [] and seen["name"] == "__main__"
    assert seen["argv"][-2:] == ["arg", "7"]


@pytest.mark.parametrize(
    ("code", "returncode", "stderr_tail"),
    [
        ("pass", 0, ""),
        ("import sys; sys.exit(None)", 0, ""),
        ("import sys; sys.exit('stopped here')", 1, "stopped here\n"),
        ("raise ValueError('bad value')", 1, "ValueError: bad value\n"),
        ("import os; os._exit(5)", 5, ""),
    ],
)
def test_exit_codes_and_errors_are_pythons(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str, returncode: int, stderr_tail: str
) -> None:
    real, fork = _both([sys.executable, "-c", code], _env(tmp_path, monkeypatch), tmp_path)
    assert fork.returncode == real.returncode == returncode
    assert fork.stderr.endswith(stderr_tail) and real.stderr.endswith(stderr_tail)
    if "Error" in stderr_tail:  # the traceback Python prints, without the fork's own frame
        assert fork.stderr.splitlines()[1:] == real.stderr.splitlines()[1:]
        assert "preloaded.py" not in fork.stderr


def test_popen_merges_the_streams_in_order_and_kill_is_sigkill(tmp_path: Path) -> None:
    output = tmp_path / "out"
    code = "import sys, time; print('one'); print('two', file=sys.stderr); print('three'); time.sleep(120)"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    started = preloaded.popen([sys.executable, "-c", code], output=output, env=env, cwd=tmp_path)
    with pytest.raises(subprocess.TimeoutExpired):
        started.wait(timeout=3)
    assert started.poll() is None and started.returncode is None
    assert output.read_text().splitlines() == ["one", "two", "three"]
    started.kill()
    assert started.wait(timeout=30) == -9 and started.returncode == -9


def test_run_kills_at_the_timeout_and_keeps_the_output(tmp_path: Path) -> None:
    code = "import time; print('started', flush=True); time.sleep(120)"
    with pytest.raises(subprocess.TimeoutExpired) as caught:
        preloaded.run([sys.executable, "-c", code], timeout=3, cwd=tmp_path)
    assert caught.value.output == "started\n" and caught.value.timeout == 3


@pytest.mark.parametrize(
    "argv",
    [
        ["python3", "-c", "pass"], [sys.executable, "-u", "script.py"], [sys.executable, "-c"],
        [sys.executable],
    ],
)
def test_other_command_lines_are_refused(argv: list[str]) -> None:
    with pytest.raises(ValueError, match="preloaded"):
        preloaded.run(argv, timeout=10)

"""``--lengths`` read once, whole and bounded (issue 25, cases 2 and 3), as a user's shell
runs the command: a process substitution, an ``os.pipe`` as ``/dev/fd/N``, a FIFO whose
writer comes late, ``/dev/zero`` under a memory limit, a file over the bound."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
CLI = [sys.executable, "-m", "seqlen_balancing"]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}

# each test runs the command line in a process of its own
pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX pipes, FIFOs and /dev/fd"), pytest.mark.slow,
]


def plan_json(path_arg: str, **popen: object) -> dict[str, object]:
    proc = subprocess.run(
        [*CLI, "plan", "--lengths", path_arg, "--dp-size", "1", "--max-token-len", "4096", "--json"],
        capture_output=True, text=True, timeout=60, check=False, env=ENV, **popen,  # type: ignore[call-overload]
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    return lines[0]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash for <(...)")
@pytest.mark.parametrize("rows", [10_000, 4])
def test_a_process_substitution_gives_every_row(rows: int) -> None:
    # Issue 25 case 2: 10,000 rows planned 8,976 (the Parquet check read ahead, then the
    # path was opened again); 4 rows "held no lengths".
    command = " ".join(CLI) + (
        f" plan --lengths <(seq 1 {rows} | sed 's/.*/7/') --dp-size 1 --max-token-len 4096 --json"
    )
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60,
                          check=False, env=ENV)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["n_lengths"] == rows and result["batch_size"] == rows
    ranks = result["ranks"]
    assert ranks[0]["tokens"] == 7 * rows


def test_an_os_pipe_as_dev_fd_gives_every_row() -> None:
    read, write = os.pipe()
    payload = "".join(f"{i % 50}\n" for i in range(10_000)).encode()

    def writer() -> None:
        with os.fdopen(write, "wb") as out:
            out.write(payload)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        result = plan_json(f"/dev/fd/{read}", pass_fds=(read,))
    finally:
        os.close(read)
        thread.join(timeout=30)
    assert result["n_lengths"] == 10_000
    assert result["ranks"][0]["tokens"] == sum(i % 50 for i in range(10_000))  # type: ignore[index]


def test_a_fifo_with_a_late_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "lengths.fifo"
    os.mkfifo(fifo)
    proc = subprocess.Popen(
        [*CLI, "plan", "--lengths", str(fifo), "--dp-size", "2", "--max-token-len", "4096", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
    )
    try:
        time.sleep(1.0)  # the reader is waiting for a writer; it must not hang after it
        assert proc.poll() is None
        with fifo.open("w", encoding="utf-8") as out:
            for i in range(3000):
                out.write(f"{100 + i % 7}\n")
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    result = json.loads(stdout)
    assert result["n_lengths"] == 3000
    assert sum(rank["tokens"] for rank in result["ranks"]) == sum(100 + i % 7 for i in range(3000))


def _limit_memory() -> None:  # runs in the child, before exec
    limit = 600 << 20  # address space: far less than the 1,024 MiB bound
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_dev_zero_under_a_memory_limit_is_one_line_and_exit_2() -> None:
    # Issue 25 case 3: memory grew until the kernel killed the process, or a MemoryError
    # traceback (exit 1) under a limit. The default bound (1,024 MiB) is above this limit:
    proc = subprocess.run([*CLI, "plan", "--lengths", "/dev/zero"], capture_output=True, text=True,
                          timeout=120, check=False, env=ENV, preexec_fn=_limit_memory)
    line = one_line_error(proc)
    assert "/dev/zero: out of memory after reading" in line
    assert "the input bound is 1024 MiB, --max-input-mb N" in line
    # a bound below the limit: refused at the bound, naming it and the flag
    proc = subprocess.run([*CLI, "plan", "--lengths", "/dev/zero", "--max-input-mb", "8"],
                          capture_output=True, text=True, timeout=120, check=False, env=ENV,
                          preexec_fn=_limit_memory)
    line = one_line_error(proc)
    assert line.endswith(
        "/dev/zero holds more than the input bound of 8 MiB; raise it with --max-input-mb N if "
        "the input is meant to be that large"
    )


def test_a_regular_file_over_the_bound_is_refused_from_its_size(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    big.write_bytes(b"7\n" * 1000 + b"\n" * ((1 << 20) - 1000))  # 1 MiB and 1,000 bytes
    proc = subprocess.run([*CLI, "sweep", "--lengths", str(big), "--max-input-mb", "1"],
                          capture_output=True, text=True, timeout=60, check=False, env=ENV)
    assert f"{big} holds more than the input bound of 1 MiB" in one_line_error(proc)
    # the flag raises the bound: every row is planned
    proc = subprocess.run(
        [*CLI, "plan", "--lengths", str(big), "--max-input-mb", "2", "--dp-size", "1", "--json"],
        capture_output=True, text=True, timeout=60, check=False, env=ENV,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["n_lengths"] == 1000

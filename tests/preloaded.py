"""New Python processes that start with torch and tensordict already imported.

Tests that start interpreters of their own (the gloo ranks of ``tests/distributed/``, the
verl switch's scenarios in ``tests/test_verl_switch.py``) spent most of their time importing
torch and tensordict, once in every process: 3-7 s of CPU each, most of CI's time.
:func:`popen` and :func:`run` start the same command lines (``python SCRIPT ARGS`` or
``python -c CODE``) as forks of one server per test process that has imported those two
packages and nothing of this project (``multiprocessing``'s forkserver, preloaded).

Each fork is a process of its own, as ``subprocess`` starts one: its argv, environment,
working directory, ``sys.path`` (``PYTHONPATH`` first, as Python builds it), ``__main__`` and
standard streams are the command line's, and this library, verl (or a stand-in) and
everything else are imported by the command itself. What differs from a new interpreter:
torch and tensordict (and what they import) are in ``sys.modules`` from the start, imported
with ``OMP_NUM_THREADS=1``. Use it only where the outcome cannot depend on that; a test
about importing torch starts real interpreters (``tests/test_torch_free.py``).
"""

from __future__ import annotations

import atexit
import builtins
import io
import json
import multiprocessing
import multiprocessing.forkserver
import os
import subprocess
import sys
import tempfile
import traceback
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: What the server imports before it forks.
PRELOAD = ("torch", "tensordict")
#: The server's environment while it imports them (torch reads these once, at import).
SERVER_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

_state: dict[str, Any] = {}


def _context() -> Any:
    """The forkserver context, its server started once per test process."""
    if "context" not in _state:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(list(PRELOAD))
        saved = {key: os.environ.get(key) for key in SERVER_ENV}
        os.environ.update(SERVER_ENV)
        try:
            multiprocessing.forkserver.ensure_running()
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        # sys.path of a new interpreter without PYTHONPATH: each command's PYTHONPATH goes first
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        probe = subprocess.run(
            [sys.executable, "-c", "import json, sys; print(json.dumps(sys.path))"],
            capture_output=True, text=True, check=True, env=env,
        )
        _state["base_path"] = json.loads(probe.stdout)[1:]
        _state["context"] = context
    return _state["context"]


def _exit_code(error: SystemExit) -> int:
    """What Python exits with for ``raise SystemExit(code)`` (a message is printed)."""
    if error.code is None:
        return 0
    if isinstance(error.code, int):
        return error.code
    print(error.code, file=sys.stderr)
    return 1


def _streams(stdout: str, stderr: str | None, unbuffered: bool) -> None:
    """Point file descriptors 0-2 and sys.std* at /dev/null and the given files."""
    out = os.open(stdout, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    err = out if stderr is None else os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    for source, target in ((null, 0), (out, 1), (err, 2)):
        os.dup2(source, target)
    for fd in {out, err, null}:
        os.close(fd)
    sys.stdin = sys.__stdin__ = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(
        io.FileIO(1, "w", closefd=False) if unbuffered else open(1, "wb", closefd=False),  # noqa: SIM115
        encoding="utf-8", errors="backslashreplace", write_through=unbuffered,
    )
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
        write_through=True,
    )


def _child(
    argv: list[str], env: dict[str, str], cwd: str, stdout: str, stderr: str | None, base: list[str]
) -> None:
    """Run in the fork: become ``argv`` (``python -c CODE ...`` or ``python SCRIPT ...``)."""
    _streams(stdout, stderr, unbuffered=bool(env.get("PYTHONUNBUFFERED")))
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.modules.pop(__name__, None)  # imported to unpickle this function; not the command's
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    if argv[1] == "-c":
        sys.argv = ["-c", *argv[3:]]
        sys.path[:] = ["", *extra, *base]
        source, filename = argv[2], "<string>"
    else:
        script = os.path.abspath(argv[1])
        sys.argv = argv[1:]
        sys.path[:] = [os.path.dirname(os.path.realpath(script)), *extra, *base]
        main.__dict__["__file__"] = script
        source, filename = Path(script).read_text(encoding="utf-8"), script
    try:
        exec(compile(source, filename, "exec"), main.__dict__)
        code = 0
    except SystemExit as error:
        code = _exit_code(error)
    except BaseException as error:  # printed as Python prints it, without this frame
        traceback.print_exception(type(error), error, error.__traceback__.tb_next)
        code = 1
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class Started:
    """A started command, with the part of ``subprocess.Popen``'s interface the tests use."""

    def __init__(self, args: Sequence[str], process: Any) -> None:
        self.args = list(args)
        self._process = process
        self.pid: int = process.pid

    @property
    def returncode(self) -> int | None:
        """The exit code, ``-N`` for signal N, or None while it runs."""
        code: int | None = self._process.exitcode
        return code

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        code = self.returncode
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def kill(self) -> None:
        if self.returncode is None:
            self._process.kill()


def _check(argv: Sequence[str]) -> None:
    if len(argv) < 2 or argv[0] != sys.executable or (argv[1] == "-c" and len(argv) < 3):
        raise ValueError(f"preloaded runs `{sys.executable} -c CODE ...` or `... SCRIPT ...`, not {argv}")
    if argv[1].startswith("-") and argv[1] != "-c":
        raise ValueError(f"preloaded does not take interpreter options ({argv[1]!r})")


def popen(
    argv: Sequence[str], *, output: Path, env: Mapping[str, str], cwd: Path | str,
    stderr: Path | None = None,
) -> Started:
    """Start ``argv`` with stdout (and stderr, unless ``stderr`` names a file) written to
    ``output``, stdin empty; as ``subprocess.Popen(argv, stdout=..., stderr=STDOUT, env=env,
    cwd=cwd)`` would."""
    _check(argv)
    context = _context()
    process = context.Process(
        target=_child,
        args=(list(argv), dict(env), str(cwd), str(output), None if stderr is None else str(stderr),
              _state["base_path"]),
        name=f"preloaded:{Path(argv[1]).name}",
    )
    process.start()
    return Started(argv, process)


def run(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path | str | None = None,
    timeout: float,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
    env=env, cwd=cwd)``, started preloaded; a command still running at ``timeout`` is killed
    and ``subprocess.TimeoutExpired`` raised with what it printed."""
    with tempfile.TemporaryDirectory(prefix="preloaded-") as directory:
        out, err = Path(directory) / "stdout", Path(directory) / "stderr"
        started = popen(argv, output=out, stderr=err, env=os.environ if env is None else env,
                        cwd=os.getcwd() if cwd is None else cwd)
        try:
            code = started.wait(timeout)
        except subprocess.TimeoutExpired:
            started.kill()
            started.wait(10)
            raise subprocess.TimeoutExpired(
                list(argv), timeout, output=out.read_text(errors="replace"),
                stderr=err.read_text(errors="replace"),
            ) from None
        return subprocess.CompletedProcess(
            list(argv), code, out.read_text(errors="replace"), err.read_text(errors="replace")
        )

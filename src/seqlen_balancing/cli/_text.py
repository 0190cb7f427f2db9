"""Small text helpers shared by the command-line modules: the error type and formatting."""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Sequence
from typing import Any

PROG = "seqlen-balancing"

_INTEGER = re.compile(r"[+-]?\d+")


class CliError(Exception):
    """A failure reported as one line on stderr with exit code ``code``."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def refuse(rules: list[tuple[Any, str]]) -> None:
    """Raise (CliError, exit 2) the message of the first rule whose condition holds."""
    for refused, message in rules:
        if refused:
            raise CliError(message)


def missing_extra(what: str, module: str, extra: str) -> CliError:
    """The one-line error (exit 2) for an optional dependency that is not installed."""
    return CliError(f"{what} needs {module}, which is not installed: pip install 'seqlen-balancing[{extra}]'")


def reason_of(exc: BaseException) -> str:
    """Why an operation failed: an OS error's ``strerror`` where it has one, else its text."""
    return getattr(exc, "strerror", None) or str(exc)


def short(text: str, limit: int = 40, quote: bool = True) -> str:
    """``text`` (quoted by ``repr`` unless ``quote`` is False), cut for one-line messages."""
    cut = text if len(text) <= limit else text[: limit - 3] + "..."
    return repr(cut) if quote else cut


def int_text(text: str) -> int | None:
    """The integer ``text`` spells (at most 18 digits, surrounding blanks allowed), else None."""
    text = text.strip()
    if len(text) > 19 or not _INTEGER.fullmatch(text):
        return None
    return int(text)


def plural(count: int, noun: str) -> str:
    """``"1 micro-batch"``, ``"2 micro-batches"``, ``"3 drawn samples"``, ``"2 epochs"``."""
    if count == 1:
        return f"{count} {noun}"
    # a hard "ch" (epoch) takes s
    sibilant = noun.endswith(("ch", "sh", "s", "x")) and not noun.endswith("epoch")
    return f"{count} {noun}{'es' if sibilant else 's'}"


def pct(value: float) -> str:
    """A fraction as a percentage with one decimal: ``0.9712 -> "97.1%"``."""
    return f"{100 * value:.1f}%"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Right-aligned columns two spaces apart, the headers first."""
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)


class Progress:
    """A tqdm bar on stderr when ``show`` and tqdm is installed; without tqdm, given
    ``plain`` (a format of ``done``, ``total`` and ``percent``), a stderr line at each tenth
    of the work; else nothing."""

    def __init__(self, total: int, show: bool, unit: str, desc: str | None = None,
                 plain: str | None = None) -> None:
        self.total, self.done, self.shown, self.plain = total, 0, -1, plain if show else None
        self.bar: Any = None
        if show:
            try:
                tqdm: Any = importlib.import_module("tqdm")
            except ImportError:
                return
            self.bar = tqdm.tqdm(total=total, unit=unit, file=sys.stderr, dynamic_ncols=True, desc=desc)

    def update(self, done: int = 1) -> None:
        self.done += done
        if self.bar is not None:
            self.bar.update(done)
        elif self.plain is not None and self.done * 10 // self.total > self.shown:
            self.shown = self.done * 10 // self.total
            print(self.plain.format(done=self.done, total=self.total, percent=self.shown * 10),
                  file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

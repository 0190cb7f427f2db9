"""Small text helpers shared by the command-line modules: the error type and formatting."""

from __future__ import annotations

import re

PROG = "seqlen-balancing"

_INTEGER = re.compile(r"[+-]?\d+")


class CliError(Exception):
    """A failure reported as one line on stderr with exit code ``code``."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def missing_extra(what: str, module: str, extra: str) -> CliError:
    """The one-line error (exit 2) for an optional dependency that is not installed."""
    return CliError(f"{what} needs {module}, which is not installed: pip install 'seqlen-balancing[{extra}]'")


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

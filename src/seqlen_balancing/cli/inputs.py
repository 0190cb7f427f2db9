"""Reading the input: lengths files, JSON (Lines) and Parquet datasets, and saving lengths.

Every source (a regular file, a pipe, a FIFO, ``/dev/fd/N``, ``-`` for stdin) is opened
once and read once, whole, by :func:`read_source`, up to the input bound
(:data:`DEFAULT_MAX_INPUT_MB` MiB; ``--max-input-mb`` raises it): a source that holds more,
or that exhausts memory first, is a one-line error naming it, the bound and the flag. The
format is told from the bytes read (``PAR1``: Parquet), never by opening the path again,
so a process substitution or a FIFO gives every row.

Formats of ``--lengths FILE``:

* one integer per line (blank lines skipped), or a JSON list of integers;
* JSON Lines, or a JSON list of objects, with ``--field NAME`` (the key holding the length);
* Parquet (detected by the ``PAR1`` magic bytes or a ``.parquet``/``.pq`` name; needs
  pyarrow, extra ``data``; from stdin and pipes too) with ``--field NAME``, an integer column;
* any of the record formats with ``--tokenizer`` and a text field: the tokens are counted
  by :mod:`seqlen_balancing.cli.tokens`.

Every bad row is a one-line :class:`~seqlen_balancing.cli._text.CliError` (exit 2) naming
the file, the row (``line N`` for text and JSON Lines, 1-based; ``row N`` for Parquet and
``list index N`` for JSON lists, 0-based) and the field.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from seqlen_balancing.cli._text import CliError, int_text, missing_extra, reason_of, short

__all__ = ["DEFAULT_MAX_INPUT_MB", "Loaded", "Source", "parse_lengths", "read_source", "save_lengths"]

ROWS_PER_BATCH = 1024  # rows read (and tokenized) at a time

#: The input bound: MiB read from one ``--lengths`` source at most (``--max-input-mb``).
DEFAULT_MAX_INPUT_MB = 1024

_CHUNK = 1 << 20  # bytes per read
Records = Iterator[list[tuple[str, Any]]]  # batches of (where, value)


@dataclass(frozen=True)
class Loaded:
    """The input lengths and where they came from."""

    lengths: list[int]  # tokens per row, in file order, before --scale
    source: str  # "champ", the --lengths path, or "-"
    name: str  # for messages: "the bundled data", the path or "<stdin>"
    counted: str | None = None  # how --tokenizer counted, for the header
    prefixes: list[int] | None = None  # --prefix-lengths: tokens each row shares with its group


@dataclass(frozen=True)
class Source:
    """One ``--lengths`` source, read whole: its bytes and how to name it."""

    path: str  # as given ("-": stdin)
    name: str  # for messages: the path or "<stdin>"
    data: bytes

    @property
    def parquet(self) -> bool:
        """Parquet by its magic bytes, or by a ``.parquet``/``.pq`` name."""
        return self.data[:4] == b"PAR1" or self.path.lower().endswith((".parquet", ".pq"))

    def text(self) -> str:
        """The bytes as UTF-8 text (a byte-order mark dropped by the parsers)."""
        try:
            return self.data.decode("utf-8")
        except UnicodeDecodeError as exc:
            where = "stdin" if self.path == "-" else f"lengths file {self.path!r}"
            raise CliError(f"cannot read {where}: {exc}") from None


def _too_large(name: str, max_mb: int) -> CliError:
    return CliError(
        f"{name} holds more than the input bound of {max_mb} MiB; raise it with "
        f"--max-input-mb N if the input is meant to be that large"
    )


def _read_bounded(handle: Any, name: str, max_mb: int) -> bytes:
    """Everything ``handle`` holds, in chunks, refusing more than ``max_mb`` MiB."""
    limit = max_mb * (1 << 20)
    try:
        info = os.fstat(handle.fileno())
    except (OSError, AttributeError, ValueError):  # a stream without a descriptor (tests)
        info = None
    if info is not None and stat.S_ISREG(info.st_mode) and info.st_size > limit:
        raise _too_large(name, max_mb)  # told from its size, nothing read
    buffer = bytearray()
    try:
        while len(buffer) <= limit:
            chunk = handle.read(min(_CHUNK, limit + 1 - len(buffer)))
            if not chunk:
                return bytes(buffer)
            buffer += chunk
    except MemoryError:
        size = len(buffer)
        del buffer
        raise CliError(
            f"{name}: out of memory after reading {size:,} bytes (the input bound is {max_mb} "
            "MiB, --max-input-mb N); pass a smaller input or lower --max-input-mb"
        ) from None
    raise _too_large(name, max_mb)


def read_source(path: str, max_mb: int = DEFAULT_MAX_INPUT_MB, what: str = "lengths file") -> Source:
    """Open ``path`` (``-``: stdin) once and read it once, whole, within the input bound.

    Works alike on regular files, pipes, FIFOs (it waits for the writer, once),
    ``/dev/fd/N`` from a process substitution, and stdin: nothing is opened twice. ``what``
    names the file in messages.

    Raises:
        CliError: (exit 2) the source cannot be opened or read, holds more than ``max_mb``
            MiB (naming the source, the bound and ``--max-input-mb``), or memory runs out
            while it is read (the same, with the bytes read).
    """
    if path == "-":
        try:  # a text stream without bytes (stdin replaced by a StringIO) as UTF-8
            stream = getattr(sys.stdin, "buffer", None) or io.BytesIO(sys.stdin.read().encode("utf-8"))
            return Source(path, "<stdin>", _read_bounded(stream, "<stdin>", max_mb))
        except (OSError, UnicodeDecodeError) as exc:
            raise CliError(f"cannot read stdin: {exc}") from None
    try:
        with open(path, "rb") as handle:
            return Source(path, path, _read_bounded(handle, path, max_mb))
    except OSError as exc:
        raise CliError(f"cannot read {what} {path!r}: {reason_of(exc)}") from None


def check_length(value: Any, where: str) -> int:
    """``value`` as a length, or a CliError naming ``where`` and what is wrong."""
    if isinstance(value, str):
        number = int_text(value)
        if number is None:
            raise CliError(f"{where}: {short(value.strip())} is not an integer length (up to 18 digits)")
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        raise CliError(
            f"{where}: {short(json.dumps(value, default=str), quote=False)} is not an integer length"
        )
    if number < 0:
        raise CliError(f"{where}: length {number} is negative; lengths must be >= 0")
    return number


def _field_of(item: Any, field: str, where: str) -> Any:
    if not isinstance(item, dict):
        raise CliError(f"{where}: expected a JSON object with key {field!r}")
    if field not in item:
        raise CliError(f"{where}: no key {field!r} (keys: {short(', '.join(map(str, item)), 80, False)})")
    return item[field]


def _json_list(text: str, source: str, what: str) -> list[Any]:
    """The JSON list ``text`` holds (``what``: the message's name of it)."""
    try:
        items = json.loads(text)
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        raise CliError(f"{source}: not valid JSON ({short(str(exc), 80)})") from None
    if not isinstance(items, list):
        raise CliError(f"{source}: expected {what}")
    return items


def _json_records(text: str, source: str, field: str) -> list[tuple[str, Any]]:
    """``(where, item[field])`` for a JSON list of objects or JSON Lines."""
    text = text.removeprefix("\ufeff")
    out: list[tuple[str, Any]] = []
    if text.lstrip().startswith("["):
        for index, item in enumerate(_json_list(text, source, "a JSON list")):
            where = f"{source}, list index {index}, field {field!r}"
            out.append((where, _field_of(item, field, where)))
        return out
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{source}, line {lineno}, field {field!r}"
        try:
            item = json.loads(line)
        except (json.JSONDecodeError, RecursionError, ValueError):
            raise CliError(f"{where}: not a JSON object") from None
        out.append((where, _field_of(item, field, where)))
    return out


def parse_lengths(text: str, source: str, field: str | None = None,
                  records_hint: str = "pass --field NAME (the length key)") -> list[int]:
    """Parse lengths: one integer per line, a JSON list, or JSON Lines with ``field``
    (without it, JSON Lines is refused with ``records_hint``).

    Raises:
        CliError: (exit 2) naming the line (or list index) of the first bad entry, or
            saying the input holds no lengths.
    """
    text = text.removeprefix("\ufeff")  # a UTF-8 byte-order mark is not part of the data
    stripped = text.lstrip()
    if field is not None:
        lengths = [check_length(value, where) for where, value in _json_records(text, source, field)]
    elif stripped.startswith("["):
        lengths = [check_length(item, f"{source}, list index {i}")
                   for i, item in enumerate(_json_list(text, source, "a JSON list of lengths"))]
    elif stripped.startswith("{"):
        raise CliError(f"{source} looks like JSON Lines; {records_hint}")
    else:
        lengths = [check_length(line, f"{source}, line {lineno}")
                   for lineno, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if not lengths:
        raise CliError(f"{source} holds no lengths")
    return lengths


def parquet_records(source: Source, field: str, rows_per_batch: int = ROWS_PER_BATCH) -> tuple[int, Records]:
    """The row count of a Parquet source and its ``field`` column in batches of (where, value),
    read from the bytes already in memory.

    Raises:
        CliError: (exit 2) pyarrow is missing (naming the ``data`` extra), the file cannot
            be read as Parquet, or it has no column ``field``.
    """
    path = source.name
    try:
        arrow: Any = importlib.import_module("pyarrow")
        parquet: Any = importlib.import_module("pyarrow.parquet")
    except ImportError:
        raise missing_extra("reading Parquet", "pyarrow", "data") from None
    try:
        handle = parquet.ParquetFile(arrow.BufferReader(source.data))
    except (OSError, ValueError, TypeError) as exc:  # pyarrow's errors derive from these
        raise CliError(f"cannot read Parquet file {path!r}: {short(reason_of(exc), 120, False)}") from None
    names = list(handle.schema_arrow.names)
    if field not in names:
        raise CliError(f"{path}: no column {field!r} (columns: {short(', '.join(names), 80, False)})")

    def batches() -> Records:
        row = 0
        try:
            for batch in handle.iter_batches(batch_size=rows_per_batch, columns=[field]):
                values = batch.column(0).to_pylist()
                yield [(f"{path}, row {row + i}, field {field!r}", v) for i, v in enumerate(values)]
                row += len(values)
        except (OSError, ValueError, TypeError) as exc:
            raise CliError(
                f"cannot read Parquet file {path!r} after row {row}: {short(str(exc), 120, False)}"
            ) from None

    return int(handle.metadata.num_rows), batches()


def records(source: Source, field: str) -> tuple[int, Records]:
    """Rows of ``field`` from a Parquet, JSON Lines or JSON source, in batches."""
    if source.parquet:
        return parquet_records(source, field)
    rows = _json_records(source.text(), source.name, field)
    return len(rows), iter([rows[at : at + ROWS_PER_BATCH] for at in range(0, len(rows), ROWS_PER_BATCH)])


def save_lengths(path: str, lengths: list[int]) -> None:
    """Write one length per line to ``path`` (readable again with ``--lengths``)."""
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("".join(f"{n}\n" for n in lengths))
    except OSError as exc:
        raise CliError(f"cannot write --save-lengths file {path!r}: {reason_of(exc)}") from None

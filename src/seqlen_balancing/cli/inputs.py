"""Reading the input: lengths files, JSON (Lines) and Parquet datasets, and saving lengths.

Formats of ``--lengths FILE`` (``-``: stdin, text formats only):

* one integer per line (blank lines skipped), or a JSON list of integers;
* JSON Lines, or a JSON list of objects, with ``--field NAME`` (the key holding the length);
* Parquet (detected by the ``PAR1`` magic bytes or a ``.parquet``/``.pq`` name; needs
  pyarrow, extra ``data``) with ``--field NAME``, an integer column;
* any of the record formats with ``--tokenizer`` and a text field: the tokens are counted
  by :mod:`seqlen_balancing.cli.tokens`.

Every bad row is a one-line :class:`~seqlen_balancing.cli._text.CliError` (exit 2) naming
the file, the row (``line N`` for text and JSON Lines, 1-based; ``row N`` for Parquet and
``list index N`` for JSON lists, 0-based) and the field.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from seqlen_balancing.cli._text import CliError, int_text, missing_extra, short

__all__ = ["Loaded", "parse_lengths", "save_lengths"]

ROWS_PER_BATCH = 1024  # rows read (and tokenized) at a time
Records = Iterator[list[tuple[str, Any]]]  # batches of (where, value)


@dataclass(frozen=True)
class Loaded:
    """The input lengths and where they came from."""

    lengths: list[int]  # tokens per row, in file order, before --scale
    source: str  # "champ", the --lengths path, or "-"
    name: str  # for messages: "the bundled data", the path or "<stdin>"
    counted: str | None = None  # how --tokenizer counted, for the header


def read_text(path: str) -> tuple[str, str]:
    """The text at ``path`` (``-``: stdin) and the name to use in messages."""
    if path == "-":
        try:
            text = sys.stdin.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise CliError(f"cannot read stdin: {exc}") from None
        if text.startswith("PAR1"):  # Parquet's magic bytes: the reader needs a seekable file
            raise CliError("Parquet cannot be read from stdin: pass the file's path to --lengths")
        return text, "<stdin>"
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read(), path
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise CliError(f"cannot read lengths file {path!r}: {reason}") from None


def check_length(value: Any, where: str) -> int:
    """``value`` as a length, or a CliError naming ``where`` and what is wrong."""
    if isinstance(value, str):
        parsed = int_text(value)
        if parsed is None:
            raise CliError(f"{where}: {short(value.strip())} is not an integer length (up to 18 digits)")
        number = parsed
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


def _json_records(text: str, source: str, field: str) -> list[tuple[str, Any]]:
    """``(where, item[field])`` for a JSON list of objects or JSON Lines."""
    text = text.removeprefix("\ufeff")
    out: list[tuple[str, Any]] = []
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except (json.JSONDecodeError, RecursionError, ValueError) as exc:
            raise CliError(f"{source}: not valid JSON ({short(str(exc), 80)})") from None
        if not isinstance(items, list):
            raise CliError(f"{source}: expected a JSON list")
        for index, item in enumerate(items):
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


def parse_lengths(text: str, source: str, field: str | None = None) -> list[int]:
    """Parse lengths: one integer per line, a JSON list, or JSON Lines with ``field``.

    Raises:
        CliError: (exit 2) naming the line (or list index) of the first bad entry, or
            saying the input holds no lengths.
    """
    text = text.removeprefix("\ufeff")  # a UTF-8 byte-order mark is not part of the data
    stripped = text.lstrip()
    lengths: list[int] = []
    if field is not None:
        lengths = [check_length(value, where) for where, value in _json_records(text, source, field)]
    elif stripped.startswith("["):
        try:
            items = json.loads(text)
        except (json.JSONDecodeError, RecursionError, ValueError) as exc:
            raise CliError(f"{source}: not valid JSON ({short(str(exc), 80)})") from None
        if not isinstance(items, list):
            raise CliError(f"{source}: expected a JSON list of lengths")
        lengths = [check_length(item, f"{source}, list index {i}") for i, item in enumerate(items)]
    elif stripped.startswith("{"):
        raise CliError(f"{source} looks like JSON Lines; pass --field NAME (the length key)")
    else:
        for lineno, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                lengths.append(check_length(line, f"{source}, line {lineno}"))
    if not lengths:
        raise CliError(f"{source} holds no lengths")
    return lengths


def is_parquet(path: str) -> bool:
    """True for a ``.parquet``/``.pq`` name or a file that starts with Parquet's ``PAR1``."""
    if path == "-":
        return False
    if path.lower().endswith((".parquet", ".pq")):
        return True
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == b"PAR1"
    except OSError:
        return False  # read_text reports it


def parquet_records(path: str, field: str, rows_per_batch: int = ROWS_PER_BATCH) -> tuple[int, Records]:
    """The row count of a Parquet file and its ``field`` column in batches of (where, value).

    Raises:
        CliError: (exit 2) pyarrow is missing (naming the ``data`` extra), the file cannot
            be read as Parquet, or it has no column ``field``.
    """
    try:
        parquet: Any = importlib.import_module("pyarrow.parquet")
    except ImportError:
        raise missing_extra("reading Parquet", "pyarrow", "data") from None
    try:
        handle = parquet.ParquetFile(path)
    except (OSError, ValueError, TypeError) as exc:  # pyarrow's errors derive from these
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise CliError(f"cannot read Parquet file {path!r}: {short(reason, 120, False)}") from None
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


def records(path: str, field: str) -> tuple[int, Records]:
    """Rows of ``field`` from a Parquet, JSON Lines or JSON file, in batches."""
    if is_parquet(path):
        return parquet_records(path, field)
    text, name = read_text(path)
    rows = _json_records(text, name, field)

    def batches() -> Records:
        for start in range(0, len(rows), ROWS_PER_BATCH):
            yield rows[start : start + ROWS_PER_BATCH]

    return len(rows), batches()


def save_lengths(path: str, lengths: list[int]) -> None:
    """Write one length per line to ``path`` (readable again with ``--lengths``)."""
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("".join(f"{n}\n" for n in lengths))
    except OSError as exc:
        raise CliError(f"cannot write --save-lengths file {path!r}: {exc.strerror or exc}") from None

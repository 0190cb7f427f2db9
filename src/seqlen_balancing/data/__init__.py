"""Bundled real sequence-length data.

The package ships one data file, ``champ_qwen3_lengths.tsv.gz``: the Qwen3
token lengths of the 19,440 model conversations recorded in the CHAMP
competition-math dataset (270 problems x 72 responses). It gives benchmarks and
tests a realistic, heavy-tailed length distribution without any download. See
``README.md`` next to this module for provenance, licence and the exact way the
lengths were computed.

The loaders use only the standard library and read the file once per process;
every call returns new lists, so callers may mutate what they get.

Example:
    >>> from seqlen_balancing.data import load_champ_lengths, load_champ_problem_ids
    >>> lengths = load_champ_lengths()
    >>> len(lengths), len(set(load_champ_problem_ids()))
    (19440, 270)
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

__all__ = [
    "CHAMP_LENGTHS_FILE",
    "CHAMP_NUM_PROBLEMS",
    "CHAMP_RESPONSES_PER_PROBLEM",
    "ChampRecord",
    "load_champ_lengths",
    "load_champ_problem_ids",
    "load_champ_records",
]

CHAMP_LENGTHS_FILE = "champ_qwen3_lengths.tsv.gz"
"""File name of the bundled CHAMP length table inside this package."""

CHAMP_NUM_PROBLEMS = 270
"""Number of distinct problems in the CHAMP length table."""

CHAMP_RESPONSES_PER_PROBLEM = 72
"""Number of recorded conversations (rows) per CHAMP problem."""

_HEADER = ("problem_id", "response_index", "prompt_tokens", "response_tokens", "total_tokens")


@dataclass(frozen=True)
class ChampRecord:
    """Token lengths of one CHAMP conversation under the Qwen3 chat template.

    Attributes:
        problem_id: CHAMP problem identifier, e.g. ``"P_Combinatorics_1"``.
        response_index: Position (0-71) of the conversation among the problem's
            72 recorded conversations, in dataset order.
        prompt_tokens: Tokens of the rendered prefix the model received before
            generating, ending with the ``<|im_start|>assistant\\n`` header.
        response_tokens: Tokens of the rest of the conversation.
        total_tokens: Tokens of the whole rendered conversation; always
            ``prompt_tokens + response_tokens``.

    Example:
        >>> record = load_champ_records()[0]
        >>> record.problem_id, record.response_index
        ('P_Combinatorics_1', 0)
        >>> record.total_tokens == record.prompt_tokens + record.response_tokens
        True
    """

    problem_id: str
    response_index: int
    prompt_tokens: int
    response_tokens: int
    total_tokens: int


def _parse(text: str) -> tuple[ChampRecord, ...]:
    """Parse the TSV text of the bundled file into records.

    Args:
        text: The decompressed file content: a header line, then one
            tab-separated row per conversation.

    Returns:
        The records in file order.

    Raises:
        ValueError: If the header is not the expected one, a row does not have
            five fields, a count is not a positive integer, or a row's total is
            not the sum of its prompt and response counts.
    """
    lines = text.splitlines()
    if not lines or tuple(lines[0].split("\t")) != _HEADER:
        raise ValueError(f"{CHAMP_LENGTHS_FILE}: unexpected header {lines[:1]!r}")
    records: list[ChampRecord] = []
    for lineno, line in enumerate(lines[1:], start=2):
        fields = line.split("\t")
        if len(fields) != len(_HEADER):
            raise ValueError(f"{CHAMP_LENGTHS_FILE}:{lineno}: expected 5 fields, got {line!r}")
        try:
            index, prompt, response, total = (int(f) for f in fields[1:])
        except ValueError as exc:
            raise ValueError(f"{CHAMP_LENGTHS_FILE}:{lineno}: non-integer count") from exc
        if index < 0 or prompt <= 0 or response <= 0 or total != prompt + response:
            raise ValueError(f"{CHAMP_LENGTHS_FILE}:{lineno}: inconsistent counts {line!r}")
        records.append(ChampRecord(fields[0], index, prompt, response, total))
    return tuple(records)


@lru_cache(maxsize=1)
def _records() -> tuple[ChampRecord, ...]:
    """Read and parse the bundled file once; the immutable result is cached."""
    raw = resources.files(__name__).joinpath(CHAMP_LENGTHS_FILE).read_bytes()
    return _parse(gzip.decompress(raw).decode("utf-8"))


def load_champ_records() -> list[ChampRecord]:
    """Return every row of the bundled CHAMP length table.

    Rows are in a stable order: problems in CHAMP dataset order, then each
    problem's 72 conversations in dataset order, so the rows of one problem are
    contiguous and can serve as a GRPO-style group.

    Returns:
        A new list of 19,440 :class:`ChampRecord` objects (the records
        themselves are frozen and shared between calls).

    Raises:
        FileNotFoundError: If the data file is missing from the installation.
        ValueError: If the data file is malformed.

    Example:
        >>> records = load_champ_records()
        >>> len(records)
        19440
        >>> [r.response_index for r in records[:3]]
        [0, 1, 2]
    """
    return list(_records())


def load_champ_lengths() -> list[int]:
    """Return the total token length of every CHAMP conversation.

    Returns:
        A new list of 19,440 positive ints (``total_tokens``), in file order.

    Raises:
        FileNotFoundError: If the data file is missing from the installation.
        ValueError: If the data file is malformed.

    Example:
        >>> lengths = load_champ_lengths()
        >>> len(lengths)
        19440
        >>> min(lengths) > 0
        True
    """
    return [r.total_tokens for r in _records()]


def load_champ_problem_ids() -> list[str]:
    """Return the problem id of every row, aligned with :func:`load_champ_lengths`.

    Equal ids are contiguous (72 per problem), which makes it easy to group the
    lengths the way GRPO-style training groups the responses to one prompt.

    Returns:
        A new list of 19,440 problem ids, in file order.

    Raises:
        FileNotFoundError: If the data file is missing from the installation.
        ValueError: If the data file is malformed.

    Example:
        >>> ids = load_champ_problem_ids()
        >>> ids[0], ids[71], ids[72]
        ('P_Combinatorics_1', 'P_Combinatorics_1', 'P_Combinatorics_2')
    """
    return [r.problem_id for r in _records()]

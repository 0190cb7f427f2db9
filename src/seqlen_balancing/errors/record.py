"""The error record: a named, frozen type per kind of error, its values and its registry.

A record carries the facts of one error as named fields and builds its message from them
alone, so that a DP rank that learns only the record's integers (through the one collective)
raises the same exception, with the same text, as the rank at fault. The integers are
derived from the fields, one coding per field type:

* ``int``: the value itself, any ``0..MAX_ERROR_VALUE - 1``; anything else is stored as
  :data:`~seqlen_balancing.errors.OUT_OF_RANGE` (the message says "out of range", never a
  clipped number);
* :data:`~seqlen_balancing.errors.NonPositive` (an ``int`` that is 0 or below: a value below
  1, a negative length): its negation, under the same range rule;
* ``int | None``: ``value + 1``, 0 for ``None`` (a global rank that is not known);
* ``bool``: 0 or 1; an ``IntEnum``: its value;
* ``str``: a TensorDict key (nested keys joined by ``.``), as 4 values of 9 UTF-8 bytes each,
  shortened to 33 bytes plus ``...`` when longer than 36.

A record holds its fields as a peer would decode them (normalised on construction), so
``type(r).from_values(r.values()) == r`` for every record ``r`` without a ``detail``.

:data:`~seqlen_balancing.errors.RECORDS` assigns the codes, densely ``1..N`` in registration
order (the order of the modules in ``errors/__init__.py``, then of the classes in each), and
refuses a record whose values would not fit the agreement's
:data:`~seqlen_balancing.errors.N_ERROR_VALUES` slots.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Annotated, Any, ClassVar, Protocol, TypeVar

__all__ = [
    "CODINGS",
    "MAX_ERROR_VALUE",
    "N_ERROR_VALUES",
    "OUT_OF_RANGE",
    "RECORDS",
    "Argument",
    "Coding",
    "NonPositive",
    "Peers",
    "PlanError",
    "Registry",
    "record",
]

#: Most integers one record carries (the width of the error in the agreement, in values).
N_ERROR_VALUES = 9

#: Largest integer an error value may hold (76 bits: two 38-bit halves in the agreement).
MAX_ERROR_VALUE = (1 << 76) - 1

#: The value stored for an integer outside ``0..MAX_ERROR_VALUE - 1``: "out of range".
OUT_OF_RANGE = MAX_ERROR_VALUE


class _Negated:
    """Marker of :data:`NonPositive` fields (carried negated)."""

    def __repr__(self) -> str:
        return "negated"


#: An ``int`` field whose value is 0 or negative (carried as its negation).
NonPositive = Annotated[int, _Negated()]


@dataclass(frozen=True)
class Coding:
    """How one field type becomes error values: ``width`` ints, ``encode`` and ``decode``."""

    width: int
    encode: Callable[[Any], tuple[int, ...]]
    decode: Callable[[Sequence[int]], Any]


def _carried(value: int) -> int:
    """``value`` as carried: itself in ``0..MAX_ERROR_VALUE - 1``, else OUT_OF_RANGE."""
    return value if 0 <= value < MAX_ERROR_VALUE else OUT_OF_RANGE


def _negated(value: int) -> tuple[int]:
    return (OUT_OF_RANGE if value == OUT_OF_RANGE else _carried(-value),)


def _optional(value: int | None) -> tuple[int]:
    if value is None:
        return (0,)
    return (_carried(value + 1) if 0 <= value < OUT_OF_RANGE else OUT_OF_RANGE,)


def _from_optional(values: Sequence[int]) -> int | None:
    if values[0] == 0:
        return None
    return OUT_OF_RANGE if values[0] == OUT_OF_RANGE else values[0] - 1


#: Bytes of an entry's key carried in an error (4 values of 9 bytes each, 72 bits).
_KEY_CHUNK = 9
_KEY_BYTES = 4 * _KEY_CHUNK


def _key(key: str | tuple[str, ...]) -> tuple[int, ...]:
    """A TensorDict key as 4 error values: its UTF-8 bytes, shortened to 33 bytes plus
    ``...`` when longer than 36, so that every rank names the same entry."""
    text = key if isinstance(key, str) else ".".join(str(part) for part in key)
    raw = text.encode("utf-8", errors="replace")
    if len(raw) > _KEY_BYTES:
        raw = raw[: _KEY_BYTES - 3] + b"..."
    raw = raw.ljust(_KEY_BYTES, b"\0")
    return tuple(int.from_bytes(raw[i : i + _KEY_CHUNK], "big") for i in range(0, _KEY_BYTES, _KEY_CHUNK))


def _key_text(values: Sequence[int]) -> str:
    """The key :func:`_key` encoded (a multi-byte character cut short is dropped)."""
    raw = b"".join(v.to_bytes(_KEY_CHUNK, "big") if 0 <= v < 1 << 72 else b"" for v in values)
    return raw.rstrip(b"\0").decode("utf-8", errors="ignore")


#: The codings of the field types a record may use (IntEnum subclasses: :func:`_enum`).
CODINGS: dict[str, Coding] = {
    "int": Coding(1, lambda v: (_carried(v),), lambda c: c[0]),
    "negated": Coding(1, _negated, lambda c: OUT_OF_RANGE if c[0] == OUT_OF_RANGE else -c[0]),
    "optional": Coding(1, _optional, _from_optional),
    "bool": Coding(1, lambda v: (int(bool(v)),), lambda c: bool(c[0])),
    "key": Coding(4, _key, _key_text),
}


def _enum(kind: type[IntEnum]) -> Coding:
    return Coding(1, lambda v: (int(v),), lambda c: kind(c[0]))


def _coding_of(hint: Any) -> Coding | None:
    """The coding of a field annotated ``hint``, or ``None`` for a type no coding serves."""
    if typing.get_origin(hint) is Annotated:
        marks = hint.__metadata__
        return CODINGS["negated"] if any(isinstance(m, _Negated) for m in marks) else None
    if hint is bool:
        return CODINGS["bool"]
    if hint is int:
        return CODINGS["int"]
    if hint is str:
        return CODINGS["key"]
    if isinstance(hint, type) and issubclass(hint, IntEnum):
        return _enum(hint)
    optional = typing.get_origin(hint) in (typing.Union, types.UnionType)
    if optional and set(typing.get_args(hint)) == {int, type(None)}:
        return CODINGS["optional"]
    return None


class Peers(Protocol):
    """What the reduced vector tells every rank about its DP group, so that an error can
    speak for the whole group (:meth:`PlanError.agreed`)."""

    def costliest(self, own: int) -> int:
        """The costliest sample or forced group of the group, in tokens of cost, given the
        error's own (:data:`OUT_OF_RANGE` when it is not known)."""

    def global_rank(self, rank: int) -> int | None:
        """The global rank of DP group rank ``rank``, or ``None`` when not known."""


class Argument(IntEnum):
    """Which scalar argument (or batch setting) an error is about; its name, lower-cased,
    is the parameter's."""

    MAX_TOKEN_LEN = 0
    FORCE_GROUP_SIZE = 1
    MIN_NUM_MICRO_BATCH = 2
    NUM_BATCHES_DIVIDED_BY = 3
    NUM_MICRO_BATCHES = 4
    MAX_TOKEN_LEN_PER_GPU = 5
    SP_SIZE = 6
    USE_DYNAMIC_BSZ = 7
    MICRO_BATCH_SIZE_PER_GPU = 8
    SAME_MICRO_NUM_IN_DP = 9
    USE_DYNAMIC_BSZ_BALANCE = 10
    PAD_TO_MULTIPLE_OF = 11
    MICRO_BATCH_MULTIPLE_OF = 12
    COSTS = 13
    MAX_SAMPLES_PER_MICRO_BATCH = 14
    PADDED = 15
    DUMMY_MICRO_BATCHES = 16
    OVER_CAP = 17
    LOSS_WEIGHT_KEYS = 18
    WORKLOAD_MODEL = 19
    WORKLOADS = 20
    OPTIONS = 21
    GROUP_IDS = 22
    DUMMY_TEMPLATE = 23
    MICRO_BATCH_OVERHEAD = 24
    EQUAL_ROWS_PER_MICRO_BATCH = 25

    @property
    def parameter(self) -> str:
        """The name as the caller spells it."""
        return self.name.lower()


#: The fields every record has, set by the caller or the agreement, never carried.
_BASE_FIELDS = ("detail", "rank", "global_rank")


@dataclass(frozen=True)
class PlanError:
    """A reason a rank cannot plan: one record type per kind of error, with named fields.

    Subclasses declare their fields (see the module docstring for the types allowed), their
    :attr:`exception_type` and :meth:`text`; :data:`RECORDS` registers them and gives each
    its :attr:`code`. ``message`` and ``exception`` depend on nothing else, so every rank
    that holds the same record raises the same exception.

    Message format (what a test oracle can rebuild): :meth:`text`, then ``" (detail)"``
    when ``detail`` is set (local calls only: the agreement does not carry it), prefixed
    with ``"rank R of the DP group (global rank G): "`` when the DP group rank ``R`` and
    global rank ``G`` at fault are known, or ``"rank R of the DP group: "`` when only ``R``
    is (:func:`~seqlen_balancing.plan_data_parallel`).
    """

    #: The record's number in the agreement (1..N), assigned by :data:`RECORDS`.
    code: ClassVar[int] = 0
    #: The exception raised for it: ``TypeError`` for a wrong type, else ``ValueError``.
    exception_type: ClassVar[type[Exception]] = ValueError
    #: The record's fields and their codings, in order, set by :data:`RECORDS`.
    codings: ClassVar[tuple[tuple[str, Coding], ...]] = ()

    #: Extra local detail (e.g. the repr of a wrong-typed value). Not sent in the
    #: agreement, so the collective path leaves it empty on every rank.
    detail: str = field(default="", kw_only=True)
    #: DP group rank at fault (named in the message), or ``None``.
    rank: int | None = field(default=None, kw_only=True)
    #: Global rank of that process, or ``None`` when unknown.
    global_rank: int | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        # Hold each field as a peer decodes it, so local and agreed messages are identical.
        for name, coding in type(self).codings:
            object.__setattr__(self, name, coding.decode(coding.encode(getattr(self, name))))

    def text(self) -> str:
        """The message body, from the fields alone."""
        raise NotImplementedError(type(self).__name__)

    def values(self) -> tuple[int, ...]:
        """The integers the agreement carries, derived from the fields in order (at most
        :data:`N_ERROR_VALUES`, each in ``0..MAX_ERROR_VALUE``)."""
        return tuple(v for name, coding in type(self).codings for v in coding.encode(getattr(self, name)))

    @classmethod
    def from_values(cls: type[_E], values: Sequence[int]) -> _E:
        """The record whose :meth:`values` are ``values`` (extra trailing values, the
        agreement's zero padding, are ignored)."""
        fields: dict[str, Any] = {}
        at = 0
        for name, coding in cls.codings:
            fields[name] = coding.decode(values[at : at + coding.width])
            at += coding.width
        return cls(**fields)

    def agreed(self, peers: Peers) -> PlanError:
        """This error as every rank of the DP group states it, once the group's facts are
        known (e.g. advice on the cap that suits every rank). Default: unchanged."""
        del peers
        return self

    def message(self, rank: int | None = None) -> str:
        """Human-readable message; the DP rank at fault (``rank``, else ``self.rank``) and
        its global rank (``self.global_rank``) are named when known."""
        text = self.text()
        if self.detail:
            text = f"{text} ({self.detail})"
        if rank is None:
            rank = self.rank
        if rank is None:
            return text
        if self.global_rank is None:
            return f"rank {rank} of the DP group: {text}"
        return f"rank {rank} of the DP group (global rank {self.global_rank}): {text}"

    def exception(self, rank: int | None = None) -> Exception:
        """The exception to raise: :attr:`exception_type` with :meth:`message`."""
        return self.exception_type(self.message(rank))


_E = TypeVar("_E", bound=PlanError)


class Registry:
    """The record types, numbered densely from 1 in the order they are added.

    Args:
        width: most values a record may carry (:data:`N_ERROR_VALUES` for :data:`RECORDS`).

    Example:
        >>> RECORDS.record(1).__name__
        'NotAnInteger'
    """

    def __init__(self, width: int) -> None:
        self.width = width
        self._records: list[type[PlanError]] = []

    def add(self, cls: type[_E]) -> type[_E]:
        """Register the frozen dataclass ``cls``: check its fields, give it the next code.

        Raises:
            TypeError: ``cls`` is not a frozen dataclass subclassing :class:`PlanError`
                with its own :meth:`~PlanError.text`, is registered already, or has a field
                of a type no coding serves.
            ValueError: its fields need more than ``width`` values.
        """
        name = cls.__name__
        params = getattr(cls, "__dataclass_params__", None)
        if not issubclass(cls, PlanError) or params is None or not params.frozen:
            raise TypeError(f"{name}: a record is a frozen dataclass subclassing PlanError")
        if "code" in vars(cls) or cls in self._records:
            raise TypeError(f"{name} is registered already (code {cls.code})")
        if cls.text is PlanError.text:
            raise TypeError(f"{name} has no text(): a record builds its own message")
        hints = typing.get_type_hints(cls, include_extras=True)
        codings: list[tuple[str, Coding]] = []
        for f in dataclasses.fields(cls):
            if f.name in _BASE_FIELDS:
                continue
            coding = _coding_of(hints[f.name])
            if coding is None:
                raise TypeError(
                    f"{name}.{f.name}: a record's field is an int, NonPositive, int | None, "
                    f"bool, IntEnum or str (a key), got {hints[f.name]!r}"
                )
            codings.append((f.name, coding))
        needed = sum(coding.width for _, coding in codings)
        if needed > self.width:
            raise ValueError(
                f"{name} needs {needed} error values but the agreement carries {self.width} "
                "(N_ERROR_VALUES); carry fewer fields, or widen the agreement's error slot"
            )
        cls.codings = tuple(codings)
        cls.code = len(self._records) + 1
        self._records.append(cls)
        return cls

    def record(self, code: int) -> type[PlanError]:
        """The record type numbered ``code``.

        Raises:
            ValueError: no record has that code.
        """
        if not 1 <= code <= len(self._records):
            raise ValueError(f"no error record has code {code} (codes are 1..{len(self._records)})")
        return self._records[code - 1]

    def __iter__(self) -> Iterator[type[PlanError]]:
        return iter(tuple(self._records))

    def __len__(self) -> int:
        return len(self._records)


#: Every error record of the library, numbered 1..N (the code in the agreement's key).
RECORDS = Registry(N_ERROR_VALUES)

#: Class decorator: register a record (above ``@dataclass(frozen=True)``) in :data:`RECORDS`.
record = RECORDS.add


def shown(value: int) -> str:
    """An integer as given, or "out of range" for :data:`OUT_OF_RANGE`."""
    return "out of range" if value == OUT_OF_RANGE else str(value)


def rank_words(rank: int, global_rank: int | None) -> str:
    """``rank R`` or ``rank R (global rank G)`` when the global rank is known."""
    if global_rank is not None:
        return f"rank {rank} (global rank {shown(global_rank)})"
    return f"rank {rank}"


def round_up(value: int, multiple: int) -> int:
    """``value`` rounded up to ``multiple`` (unchanged for OUT_OF_RANGE or ``multiple <= 1``)."""
    return value if value == OUT_OF_RANGE or multiple <= 1 else -(-value // multiple) * multiple


def at_least(value: int) -> str:
    """``to at least N``, or the words for a value beyond what the agreement carries."""
    if value == OUT_OF_RANGE:
        return "beyond 2**62 tokens"
    return f"to at least {value}"

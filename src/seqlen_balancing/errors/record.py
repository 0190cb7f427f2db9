"""The error record: a named, frozen type per kind of error that builds its own message.

A record carries the facts of one error as named fields and builds its message from them
alone. With a DP group, the record itself travels to every rank (the agreement's second
exchange, made only when some rank failed), so every rank raises the same exception, with
the same text, as the rank at fault.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Protocol

__all__ = [
    "OUT_OF_RANGE",
    "Peers",
    "PlanError",
]

#: The value an error states for the one number the agreement cannot learn exactly: the
#: group's costliest sample or group (its ``largest`` slot), when it lies beyond ``2**62``
#: tokens; the advice then says "beyond 2**62 tokens".
OUT_OF_RANGE = (1 << 76) - 1


class Peers(Protocol):
    """What the reduced vector tells every rank about its DP group, so that an error can
    speak for the whole group (:meth:`PlanError.agreed`)."""

    def costliest(self, own: int) -> int:
        """The costliest sample or forced group of the group, in tokens of cost, given the
        error's own (:data:`OUT_OF_RANGE` when it is not known)."""

    def global_rank(self, rank: int) -> int | None:
        """The global rank of DP group rank ``rank``, or ``None`` when not known."""


@dataclass(frozen=True)
class PlanError:
    """A reason a rank cannot plan: one record type per kind of error, with named fields.

    Subclasses declare their fields, their :attr:`exception_type` and :attr:`fixed_text`
    (a template of their fields) or, where the words depend on the values, :meth:`text`.
    ``message`` and ``exception`` depend on nothing else, so every rank that holds the same
    record (the agreement sends it to every rank) raises the same exception.

    Message format (what a test oracle can rebuild): :meth:`text`, then ``" (detail)"``
    when ``detail`` is set (local calls only: the agreement does not carry it), prefixed
    with ``"rank R of the DP group (global rank G): "`` when the DP group rank ``R`` and
    global rank ``G`` at fault are known, or ``"rank R of the DP group: "`` when only ``R``
    is (:func:`~seqlen_balancing.plan_data_parallel`).
    """

    #: The exception raised for it: ``TypeError`` for a wrong type, else ``ValueError``.
    exception_type: ClassVar[type[Exception]] = ValueError
    #: The message, each ``{field}`` (or ``{field!r}``) replaced by that field's value as an
    #: f-string shows it; records whose words depend on the values build theirs in ``text()``.
    fixed_text: ClassVar[str] = ""

    #: Extra local detail (e.g. the repr of a wrong-typed value). Not sent in the
    #: agreement, so the collective path leaves it empty on every rank.
    detail: str = field(default="", kw_only=True)
    #: DP group rank at fault (named in the message), or ``None``.
    rank: int | None = field(default=None, kw_only=True)
    #: Global rank of that process, or ``None`` when unknown.
    global_rank: int | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        key = getattr(self, "key", None)
        if isinstance(key, tuple):  # a nested TensorDict key, named as its dotted path
            object.__setattr__(self, "key", ".".join(str(part) for part in key))

    def text(self) -> str:
        """The message body, from the fields alone (:attr:`fixed_text` filled by default)."""
        return self.fixed_text.format_map(vars(self))

    def agreed(self, peers: Peers) -> PlanError:
        """This error as every rank of the DP group states it, once the group's facts are
        known (e.g. advice on the cap that suits every rank). Default: unchanged."""
        return self

    def message(self, rank: int | None = None) -> str:
        """Human-readable message; the DP rank at fault (``rank``, else ``self.rank``) and
        its global rank (``self.global_rank``) are named when known."""
        text = f"{self.text()} ({self.detail})" if self.detail else self.text()
        rank = self.rank if rank is None else rank
        if rank is None:
            return text
        where = "" if self.global_rank is None else f" (global rank {self.global_rank})"
        return f"rank {rank} of the DP group{where}: {text}"

    def exception(self, rank: int | None = None) -> Exception:
        """The exception to raise: :attr:`exception_type` with :meth:`message`."""
        return self.exception_type(self.message(rank))


def rank_words(rank: int, global_rank: int | None) -> str:
    """``rank R`` or ``rank R (global rank G)`` when the global rank is known."""
    return f"rank {rank}" if global_rank is None else f"rank {rank} (global rank {global_rank})"


def round_up(value: int, multiple: int) -> int:
    """``value`` rounded up to ``multiple`` (:data:`OUT_OF_RANGE` unchanged)."""
    return value if value == OUT_OF_RANGE else -(-value // multiple) * multiple


def at_least(value: int) -> str:
    """``to at least N``, or the words for a value beyond what the agreement carries."""
    return "beyond 2**62 tokens" if value == OUT_OF_RANGE else f"to at least {value}"

"""Charts of a plan (extra ``plot``, matplotlib).

Charts (extra ``plot``, matplotlib): tokens per micro-batch (``plan --plot``) and count
per rank and mean fill against the cap (``sweep --plot``). Uses ``matplotlib.figure.Figure``
directly: no pyplot, no display needed."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqlen_balancing.cli._text import CliError, missing_extra, pct, reason_of

if TYPE_CHECKING:
    from seqlen_balancing.cli.results import StepResult

__all__ = ["check_plot_path", "figure_class_for", "save_plan_plot", "save_sweep_plot"]


def check_plot_path(path: str) -> None:
    """Fail before reading or planning when ``path`` cannot take the plot: a directory, a
    folder that does not exist or cannot be written, or a file that cannot be written.
    The path is opened for writing once to be sure (root passes every permission check, and
    ``/proc`` or a read-only mount refuse only then): an existing file is opened without
    truncation, a new one is created and removed at once. Nothing else is written.

    Raises:
        CliError: (exit 2) naming the path and what to change.
    """
    where = Path(path)
    folder = where.parent
    reason = None
    if where.is_dir():
        reason = "it is a directory; name a file such as plot.png"
    elif not folder.is_dir():
        reason = f"folder {str(folder)!r} does not exist"
    elif where.exists() and not os.access(where, os.W_OK):
        reason = "the file is not writable"
    elif not where.exists() and not os.access(folder, os.W_OK):
        reason = f"folder {str(folder)!r} is not writable"
    else:
        existed = where.exists()
        try:
            open(where, "ab").close()  # opened for appending and closed: it can be written
        except OSError as exc:
            reason = reason_of(exc)
        else:
            if not existed:
                where.unlink()
    if reason is not None:
        raise CliError(f"cannot write plot {path!r}: {reason}")


def figure_class_for(path: str) -> Callable[..., Any]:
    """matplotlib's Figure class, after checking, before anything is read or planned, that
    the plot can be written at ``path`` (:func:`check_plot_path`) in an image format
    matplotlib knows.

    Raises:
        CliError: (exit 2) matplotlib is missing (naming the ``plot`` extra), or the path or
            its format cannot take the plot (naming the formats matplotlib knows).
    """
    check_plot_path(path)
    try:
        module: Any = importlib.import_module("matplotlib.figure")
    except ImportError:
        raise missing_extra("--plot", "matplotlib", "plot") from None
    figure_class: Callable[..., Any] = module.Figure
    suffix = Path(path).suffix.lstrip(".").lower()
    formats = figure_class().canvas.get_supported_filetypes()
    if suffix and suffix not in formats:
        raise CliError(
            f"cannot write plot {path!r}: unknown image format {suffix!r} (use one of "
            f"{', '.join(sorted(formats))})"
        )
    return figure_class


def _save(fig: Any, path: str) -> None:
    try:
        fig.savefig(path)
    except (OSError, ValueError) as exc:  # ValueError: an unknown image format
        raise CliError(f"cannot write plot {path!r}: {reason_of(exc)}") from None


def save_plan_plot(figure_class: Callable[..., Any], result: StepResult, path: str) -> None:
    """Bars of tokens per micro-batch (aligned tokens with an alignment option), rank by
    rank, with the cap as a horizontal line."""
    bars = result.total_micro_batches + len(result.ranks)  # and a gap after each rank
    fig = figure_class(figsize=(min(max(7.0, 0.12 * bars), 30.0), 4.5), layout="constrained")
    ax = fig.subplots()
    x, centres = 0, []
    for r in result.ranks:
        # With alignment, what each micro-batch holds on the GPU: the figure the cap bounds.
        heights = r.micro_batch_costs if result.aligned else r.micro_batch_tokens
        xs = list(range(x, x + len(heights)))
        ax.bar(xs, heights, width=0.85, color=("tab:blue", "tab:orange")[r.rank % 2])
        centres.append((xs[0] + xs[-1]) / 2 if xs else x)
        x += len(xs) + 1
    cap = result.max_token_len
    ax.axhline(cap, color="tab:red", linestyle="--")
    ax.set_ylim(0, cap * 1.08)
    step = max(1, len(result.ranks) // 16)
    ax.set_xticks(centres[::step], [f"rank {r.rank}" for r in result.ranks][::step])
    ax.set_ylabel("aligned tokens per micro-batch" if result.aligned else "tokens per micro-batch")
    ax.set_title(
        f"{result.total_micro_batches} micro-batches on {len(result.ranks)} ranks, "
        f"mean fill {pct(result.mean_fill)}\n(dashed line: cap = {cap} tokens)"
    )
    _save(fig, path)


def save_sweep_plot(
    figure_class: Callable[..., Any], outcomes: Sequence[StepResult | tuple[int, str]], path: str
) -> None:
    """Micro-batches per rank (and verl's, when compared) and mean fill against the cap; a cap
    that cannot be planned stays on the axis, marked with a red cross at zero."""
    results = [o for o in outcomes if not isinstance(o, tuple)]
    failed = [o[0] for o in outcomes if isinstance(o, tuple)]
    fig = figure_class(figsize=(8.0, 4.5), layout="constrained")
    ax = fig.subplots()
    caps = [r.max_token_len for r in results]
    ax.plot(
        caps, [max(r.counts) for r in results], "o-", color="tab:blue", label="micro-batches per rank (max)"
    )
    if any(min(r.counts) != max(r.counts) for r in results):
        ax.plot(
            caps,
            [min(r.counts) for r in results],
            "o:",
            color="tab:blue",
            label="micro-batches per rank (min)",
        )
    verl = [(r.max_token_len, max(r.verl.counts)) for r in results if r.verl and r.verl.counts]
    if verl:
        ax.plot(*zip(*verl, strict=True), "s--", color="tab:orange", label="verl 0.9.1 per rank (max)")
    if failed:
        ax.plot(failed, [0] * len(failed), "x", color="tab:red", markersize=10, clip_on=False,
                label="cannot be planned")
    every = sorted(caps + failed)
    ax.set_xscale("log", base=2)
    ax.set_xticks(every, [str(c) for c in every])
    ax.minorticks_off()
    ax.set_xlabel("cap: tokens per micro-batch")
    ax.set_ylabel("micro-batches per rank")
    ax.set_ylim(bottom=0)
    fill = ax.twinx()
    fill.plot(caps, [100 * r.mean_fill for r in results], "^-", color="tab:green", label="mean fill")
    fill.set_ylabel("mean fill (%)")
    fill.set_ylim(0, 105)
    handles, labels = ax.get_legend_handles_labels()
    more, more_labels = fill.get_legend_handles_labels()
    ax.legend(handles + more, labels + more_labels, loc="center right")
    ax.set_title("micro-batches per rank and mean fill against the cap")
    _save(fig, path)

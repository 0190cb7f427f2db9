"""The lengths of a run: the bundled data, a lengths file or dataset, or tokens counted.

The one place that chooses among the readers of :mod:`.inputs` and the token counting of
:mod:`.tokens` (which itself reads its rows through :mod:`.inputs`), so neither imports the
other's caller.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from seqlen_balancing.cli._text import CliError
from seqlen_balancing.cli.inputs import (
    Loaded,
    check_length,
    parquet_records,
    parse_lengths,
    read_source,
    save_lengths,
)
from seqlen_balancing.planning.prefix import shared_prefix_costs

__all__ = ["load_lengths", "load_prefixes"]


def load_lengths(args: argparse.Namespace) -> Loaded:
    """The lengths ``args`` name: the bundled data, a file, or tokens counted in a dataset."""
    if args.lengths is None:
        from seqlen_balancing.data import load_champ_lengths

        return Loaded(load_champ_lengths(), "champ", "the bundled data")
    source = read_source(args.lengths, args.max_input_mb)  # once, whole
    if args.tokenizer is not None:
        from seqlen_balancing.cli.tokens import count_dataset

        lengths, how = count_dataset(args, source)
        loaded = Loaded(lengths, args.lengths, source.name, how)
    elif source.parquet:
        if args.field is None:
            raise CliError(
                f"{source.name} is Parquet: pass --field NAME (a column of token counts), or "
                "--tokenizer with --messages-field, --text-field or --prompt-field"
            )
        loaded = Loaded([check_length(v, where) for batch in parquet_records(source, args.field)[1]
                         for where, v in batch],
                        args.lengths, source.name)
    else:
        loaded = Loaded(parse_lengths(source.text(), source.name, args.field), args.lengths, source.name)
    if not loaded.lengths:
        raise CliError(f"{loaded.name} holds no rows")
    if args.save_lengths is not None:
        save_lengths(args.save_lengths, loaded.lengths)
    path = getattr(args, "prefix_lengths", None)  # plan and sweep
    return loaded if path is None else replace(loaded, prefixes=load_prefixes(
        path, loaded, args.max_input_mb, args.options.force_group_size))


def load_prefixes(path: str, loaded: Loaded, max_mb: int, group: int = 1) -> list[int]:
    """``--prefix-lengths FILE``: one prefix length per row of ``loaded`` (one integer per
    line, or a JSON list; read whole, within the input bound), checked on the whole file as
    the planner checks a batch (:func:`~seqlen_balancing.planning.prefix.shared_prefix_costs`):
    one per row, each at most its row's length, equal within each group of ``group``
    consecutive rows (``--force-group-size``).

    Raises:
        CliError: (exit 2) naming the file and the first bad entry: a file that cannot be
            read as numbers (Parquet, JSON Lines), or the planner's refusal (its message,
            rows and groups counted from 0).
    """
    source = read_source(path, max_mb, "--prefix-lengths file")
    name = f"--prefix-lengths {source.name}"
    hint = "write one prefix length per line (e.g. jq .prompt_len)"
    if source.parquet:
        raise CliError(f"{name} is Parquet, which --prefix-lengths does not read; {hint}")
    prefixes = parse_lengths(source.text(), name, records_hint=hint)
    error = shared_prefix_costs(loaded.lengths, [i // group for i in range(len(loaded.lengths))], prefixes,
                                None).error
    if error is not None:
        groups = f", groups of --force-group-size {group}" if group > 1 else ""
        raise CliError(f"{name} beside {loaded.name} (rows counted from 0{groups}): {error.exception()}")
    return prefixes

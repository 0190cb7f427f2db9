"""The lengths of a run: the bundled data, a lengths file or dataset, or tokens counted.

The one place that chooses among the readers of :mod:`.inputs` and the token counting of
:mod:`.tokens` (which itself reads its rows through :mod:`.inputs`), so neither imports the
other's caller.
"""

from __future__ import annotations

import argparse

from seqlen_balancing.cli._text import CliError
from seqlen_balancing.cli.inputs import (
    Loaded,
    check_length,
    is_parquet,
    parquet_records,
    parse_lengths,
    read_text,
    save_lengths,
)

__all__ = ["load_lengths"]


def load_lengths(args: argparse.Namespace) -> Loaded:
    """The lengths ``args`` name: the bundled data, a file, or tokens counted in a dataset."""
    if args.lengths is None:
        from seqlen_balancing.data import load_champ_lengths

        return Loaded(load_champ_lengths(), "champ", "the bundled data")
    path: str = args.lengths
    if args.tokenizer is not None:
        from seqlen_balancing.cli.tokens import count_dataset

        lengths, how = count_dataset(args)
        loaded = Loaded(lengths, path, path, how)
    elif is_parquet(path):
        if args.field is None:
            raise CliError(
                f"{path} is Parquet: pass --field NAME (a column of token counts), or --tokenizer "
                "with --messages-field, --text-field or --prompt-field"
            )
        _, batches = parquet_records(path, args.field)
        lengths = [check_length(v, where) for batch in batches for where, v in batch]
        loaded = Loaded(lengths, path, path)
    else:
        text, name = read_text(path)
        loaded = Loaded(parse_lengths(text, name, args.field), path, name)
    if not loaded.lengths:
        raise CliError(f"{loaded.name} holds no rows")
    if args.save_lengths is not None:
        save_lengths(args.save_lengths, loaded.lengths)
    return loaded

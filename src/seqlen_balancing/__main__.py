"""``python -m seqlen_balancing``: the ``seqlen-balancing`` command line (see :mod:`.cli`)."""

from seqlen_balancing.cli import main

if __name__ == "__main__":
    raise SystemExit(main())

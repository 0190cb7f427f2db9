"""seqlen-balancing: strict-cap micro-batch planning for variable-length LLM batches."""

__version__ = "0.1.0"

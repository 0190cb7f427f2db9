"""Tokens counted per second by ``seqlen-balancing plan --tokenizer`` on a Parquet file of chat
conversations. Prints a table.

Run: ``python benchmarks/bench_tokenize.py`` (needs the extras: ``pip install -e '.[data,tokenize]'``;
about a minute). ``--rows N`` changes the file size (default 100,000).

Nothing is downloaded: the script writes, in a temporary directory (or ``--workdir``),

* a Parquet file of ``N`` synthetic conversations (``messages``: 2-8 turns of user /
  assistant text, 5-400 words per turn, drawn with a fixed seed from a 5,000-word vocabulary);
* a byte-level BPE tokenizer (vocabulary 16,000) trained with the ``tokenizers`` library on
  2,000 of those conversations, saved as a Hugging Face tokenizer directory with a ChatML
  chat template (``<|im_start|>role ... <|im_end|>``, the layout Qwen models use).

It then times the command line on that file, in a fresh process: every row rendered with
the chat template and encoded (``--messages-field messages``), the whole file dealt to 8
DP ranks and planned at 16,384 tokens (``--truncate`` clips the few longer rows).
``--in-process`` also times the counting step alone
(:func:`seqlen_balancing.cli.tokens.count_dataset`).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def conversations(n: int, seed: int = 0) -> list[list[dict[str, str]]]:
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 10))) for _ in range(5000)]
    out = []
    for _ in range(n):
        turns = []
        for t in range(rng.choice([2, 2, 4, 4, 6, 8])):
            words = rng.choices(vocab, k=rng.randint(5, 400))
            turns.append({"role": "user" if t % 2 == 0 else "assistant", "content": " ".join(words) + "."})
        out.append(turns)
    return out


def build(workdir: Path, rows: int) -> tuple[Path, Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    data = conversations(rows)
    parquet = workdir / "conversations.parquet"
    pq.write_table(pa.table({"messages": data}), parquet)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    specials = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
    trainer = trainers.BpeTrainer(vocab_size=16000, special_tokens=specials)
    tokenizer.train_from_iterator((m["content"] for c in data[:2000] for m in c), trainer)
    directory = workdir / "tokenizer"
    directory.mkdir(exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": CHATML, "eos_token": specials[1]}
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return parquet, directory


def _children_cpu() -> float:
    """CPU seconds (user + system, all threads) of finished child processes."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000, help="conversations in the file")
    parser.add_argument("--workdir", type=Path, help="where to write the files (default: a temp dir)")
    parser.add_argument(
        "--in-process", action="store_true", help="also time count_dataset alone, in this process"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        parquet, directory = build(workdir, args.rows)
        print(f"built {args.rows:,} conversations and a BPE tokenizer in {time.perf_counter() - start:.1f} s")
        lengths_file = workdir / "lengths.txt"
        command = [
            sys.executable, "-m", "seqlen_balancing", "plan", "--lengths", str(parquet),
            "--tokenizer", str(directory), "--messages-field", "messages", "--dp-size", "8",
            "--max-token-len", "16384", "--truncate", "--save-lengths", str(lengths_file),
        ]  # fmt: skip
        print("$ seqlen-balancing " + " ".join(command[3:]).replace(str(workdir), "DIR"))
        header = (
            f"{'what':<28}{'rows':>9}{'tokens':>12}{'wall s':>8}{'rows/s':>8}{'tokens/s':>11}"
            f"{'CPU s':>8}{'tokens/CPU s':>14}"
        )
        print("\n" + header, flush=True)
        start, cpu = time.perf_counter(), _children_cpu()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        seconds, cpu = time.perf_counter() - start, _children_cpu() - cpu
        lengths = [int(x) for x in lengths_file.read_text().split()]
        tokens = sum(lengths)

        def row(what: str, seconds: float, cpu: float) -> None:
            print(
                f"{what:<28}{len(lengths):>9,}{tokens:>12,}{seconds:>8.1f}"
                f"{len(lengths) / seconds:>8,.0f}{tokens / seconds:>11,.0f}{cpu:>8.1f}{tokens / cpu:>14,.0f}",
                flush=True,
            )

        row("CLI plan, whole command", seconds, cpu)
        if args.in_process:
            from seqlen_balancing.cli.arguments import build_parser
            from seqlen_balancing.cli.tokens import count_dataset

            parsed = build_parser().parse_args(command[command.index("plan") :])
            start, cpu = time.perf_counter(), time.process_time()
            counted, _ = count_dataset(parsed)
            row("count_dataset (in-process)", time.perf_counter() - start, time.process_time() - cpu)
            assert counted == lengths  # the two runs must agree
        print(f"\nmean {tokens / len(lengths):,.0f} tokens per conversation, longest {max(lengths):,}")


if __name__ == "__main__":
    main()

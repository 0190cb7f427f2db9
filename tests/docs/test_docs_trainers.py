"""docs/trainers.md: every ``$ seqlen-balancing ...`` block prints what the page shows.

The page is written for a reader; this test keeps its examples true: each command is run
in-process and its output (stdout, then stderr) must equal the lines under it, byte for byte.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from seqlen_balancing.cli import main

pytestmark = [pytest.mark.torch, pytest.mark.no_tensordict]  # the epoch example replays torch's sampler

PAGE = Path(__file__).resolve().parents[2] / "docs" / "trainers.md"
BLOCK = r"```\n\$ (seqlen-balancing [^\n]*)\n(.*?)```"  # a command and the lines it prints


def examples() -> list[tuple[str, str]]:
    text = PAGE.read_text(encoding="utf-8")
    return [(command, output) for command, output in re.findall(BLOCK, text, re.S)]


def test_the_page_has_its_examples() -> None:
    commands = [command for command, _ in examples()]
    assert len(commands) == 2
    assert commands[0].startswith("seqlen-balancing epoch --trainer sft_trainer")
    assert "--lengths /dev/zero" in commands[1]


@pytest.mark.parametrize(("command", "shown"), examples(), ids=["epoch", "dev-zero"])
def test_each_example_prints_what_the_page_shows(
    command: str, shown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(shlex.split(command)[1:])
    out, err = capsys.readouterr()
    assert out + err == shown
    assert code == (2 if "/dev/zero" in command else 0)

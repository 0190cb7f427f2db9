"""The docs as tests: every docstring example, and every code block of the README and docs/.

- Docstring examples run with doctest (networkx-style runnable examples).
- Code blocks (docs/development.md, "Code blocks are tests", says the rules): every
  ```python block runs, the blocks of a page in order, in one namespace, in a fresh
  temporary directory; every ```console / ```bash block whose first command starts with
  ``seqlen-balancing`` runs through ``seqlen_balancing.cli.main``, and where the page shows
  the output it must match (``...`` matches any text). ``<!-- docs-test: skip (reason) -->``
  right above a block keeps it from running.
- The front page's shape (issue 24): README at most 250 lines, "Use it in verl" within its
  first 80 lines and at most 15 long; relative links resolve; the API page lists exactly the
  public names; the CLI page names every option.
"""

from __future__ import annotations

import contextlib
import doctest
import importlib
import io
import pkgutil
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

import seqlen_balancing

MODULES = sorted(
    {"seqlen_balancing"}
    | {
        info.name
        for info in pkgutil.walk_packages(seqlen_balancing.__path__, "seqlen_balancing.")
        # importing these is what they do (run the CLI; switch verl), not a library module
        if info.name not in ("seqlen_balancing.__main__", "seqlen_balancing.verl.enable")
    }
)


def _needs_torch(name: str, seen: frozenset[str] = frozenset()) -> bool:
    """A module whose source or docstring examples import torch or tensordict, itself or
    through a module of the package it imports (read, not imported: ``batch/__init__.py``
    re-exports from modules that import torch)."""
    # the file, found without importing a parent package (which may import torch)
    base = Path(seqlen_balancing.__file__).parent.joinpath(*name.split(".")[1:])
    path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    source = path.read_text(encoding="utf-8") if path.is_file() else ""
    if re.search(r"^(import|from) (torch|tensordict)\b", source, re.MULTILINE):
        return True
    if re.search(r"^\s*>>> (import|from) (torch|tensordict)\b", source, re.MULTILINE):
        return True  # a docstring example uses torch (partition.get_reverse_idx on a tensor)
    inner = set(re.findall(r"^from (seqlen_balancing(?:\.\w+)*) import", source, re.MULTILINE))
    inner |= set(re.findall(r"^import (seqlen_balancing(?:\.\w+)*)", source, re.MULTILINE))
    return any(_needs_torch(other, seen | {name}) for other in sorted(inner - seen - {name}))


@pytest.mark.parametrize(
    "name",
    [pytest.param(name, marks=pytest.mark.torch) if _needs_torch(name) else name for name in MODULES],
)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, verbose=False, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} doctest(s) failed in {name}"


@pytest.mark.torch  # reads every public name, the TensorDict ones included
def test_every_public_name_is_documented_with_raises_or_example() -> None:
    for name in seqlen_balancing.__all__:
        if name.startswith("__"):
            continue
        doc = getattr(seqlen_balancing, name).__doc__ or ""
        assert "Returns" in doc or "Example" in doc, f"{name} lacks Returns/Example docs"


# ---- code blocks of the README and the docs pages ------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
#: The pages whose code blocks run: the README and the site's own pages (docs/mutation/ holds
#: records of mutmut runs, whose blocks are commands for mutmut, not examples).
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SKIP = re.compile(r"^<!-- docs-test: skip \((?P<reason>[^)]*)\) -->$")
OPEN = re.compile(r"^(?P<indent>\s*)```(?P<lang>\S*)\s*$")
#: A python block that needs torch makes its page's test a torch test.
USES_TORCH = re.compile(r"^\s*(import|from) (torch|tensordict)\b", re.MULTILINE)
PROG = "seqlen-balancing"


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page: its language, text (dedented), line and skip reason."""

    lang: str
    text: str
    line: int
    skip: str | None


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown page, in order (fences may be indented, as in lists)."""
    found = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opened = OPEN.match(lines[i])
        if not opened:
            i += 1
            continue
        indent, start = len(opened["indent"]), i
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][indent:])
            i += 1
        before = next((lines[j].strip() for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        skip = SKIP.match(before)
        found.append(Block(opened["lang"], "\n".join(body) + "\n", start + 1, skip and skip["reason"]))
        i += 1
    return found


@dataclass(frozen=True)
class Command:
    """A shell command of a console/bash block and the output the page shows for it."""

    argv: list[str]
    shown: list[str]


def commands(block: Block) -> list[Command]:
    """``$ `` lines of a console block (their output follows them), or every line of a bash
    block (no output shown); ``\\`` continues a line, ``#`` starts a comment."""
    result: list[Command] = []
    pending = ""
    for raw in block.text.splitlines():
        if block.lang == "console" and not pending and not raw.startswith("$ "):
            if result:
                result[-1].shown.append(raw.rstrip())
            continue
        line = raw[2:] if block.lang == "console" and not pending else raw
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        argv = shlex.split(pending, comments=True)
        pending = ""
        if argv:
            result.append(Command(argv, []))
    return result


def runs(block: Block) -> bool:
    """Does the test run this block? (python, or a console/bash block of seqlen-balancing)"""
    if block.skip is not None:
        return False
    if block.lang == "python":
        return True
    if block.lang in ("console", "bash"):
        first = commands(block)
        return bool(first) and first[0].argv[0] == PROG
    return False


def matches(shown: str, actual: str) -> bool:
    """A shown output line against the actual one: equal, ``...`` matching any text."""
    pattern = ".*".join(re.escape(part) for part in shown.split("..."))
    return re.fullmatch(pattern, actual) is not None


def run_command(command: Command) -> tuple[int, list[str]]:
    """Run one ``seqlen-balancing`` command in this process; its exit code and output lines."""
    from seqlen_balancing.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(command.argv[1:])
    return code, [line.rstrip() for line in (out.getvalue() + err.getvalue()).splitlines()]


def check_command(page: Path, block: Block, command: Command) -> None:
    where = f"{page.name}:{block.line}: {shlex.join(command.argv)}"
    assert command.argv[0] == PROG, f"{where}: a block that runs holds only {PROG} commands"
    code, actual = run_command(command)
    shown = [line for line in command.shown if line]
    failing = any("error:" in line for line in shown)
    assert (code != 0) is failing, f"{where}: exit code {code}\n" + "\n".join(actual)
    if not shown:
        return
    actual = [line for line in actual if line]  # blank lines are not compared, on either side
    assert len(actual) == len(shown) and all(map(matches, shown, actual)), (
        f"{where}: the output differs from the page's\n--- page\n" + "\n".join(shown)
        + "\n--- now\n" + "\n".join(actual)
    )


def _page_param(page: Path) -> object:
    needs_torch = any(
        USES_TORCH.search(block.text) for block in blocks(page) if block.lang == "python" and runs(block)
    )
    name = str(page.relative_to(ROOT))
    return pytest.param(page, id=name, marks=[pytest.mark.torch] if needs_torch else [])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("page", [_page_param(page) for page in PAGES])
def test_code_blocks_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    for block in filter(runs, blocks(page)):
        if block.lang == "python":
            code = compile(block.text, f"{page.name}:{block.line}", "exec")
            exec(code, namespace)  # the page's own example, as a reader runs it
        else:
            for command in commands(block):
                check_command(page, block, command)


def test_every_page_runs_something_or_says_why_not() -> None:
    """Skips are explicit and rare; a skip without a reason, or a block that would run
    nothing because of a typo in its marker, fails here."""
    skips = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        markers = len(re.findall(r"^\s*<!-- docs-test:", text, re.MULTILINE))
        assert markers == sum(b.skip is not None for b in blocks(page)), (
            f"{page.name}: a docs-test marker is not the line right above a block, or malformed"
        )
        skips += [(page.name, b.line, b.skip) for b in blocks(page) if b.skip is not None]
    assert all(reason for _, _, reason in skips), skips
    assert len(skips) <= 3, f"use skips sparingly: {skips}"
    readme = blocks(ROOT / "README.md")
    expected = ["console", "console", "console", "python", "python", "python"]
    assert [b.lang for b in readme if runs(b)] == expected


def test_the_output_check_fails_on_a_changed_line() -> None:
    """The comparison can fail: a shown table with one digit changed does not match."""
    block = Block("console", "$ seqlen-balancing plan --lengths x.txt\n", 1, None)
    (command,) = commands(block)
    assert command.argv == [PROG, "plan", "--lengths", "x.txt"]
    assert matches("  0   16 ... 99.8%", "  0   16 ms 1.2 99.8%")
    assert not matches("  0   16 ... 99.8%", "  0   17 ms 1.2 99.8%")
    continued = commands(Block("bash", "seqlen-balancing plan \\\n    --dp-size 2  # two\n", 1, None))
    assert [c.argv for c in continued] == [[PROG, "plan", "--dp-size", "2"]]


# ---- the front page and the site ------------------------------------------------------------


def test_readme_is_a_front_page() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250
    headings = [i for i, line in enumerate(lines) if line.startswith("## ")]
    verl = lines.index("## Use it in verl")
    assert verl < 80
    end = min(i for i in headings if i > verl)
    assert len([line for line in lines[verl:end]]) - 1 <= 15  # the section, its last blank aside
    order = [lines[i] for i in headings]
    assert order[:4] == ["## Install and run", "## Use it in verl",
                         "## Choose `max_token_len_per_gpu` before the GPUs", "## In Python"]
    assert any("seqlen-balancing plan --trainer" in line for line in lines)  # names the trainer


#: A size of the agreement's vector stated in prose ("27 int64 values", "a 26-value int64
#: vector"), as a number or as the docs' substitution.
VECTOR_CLAIM = re.compile(r"(\d+|\{\{ vector_size \}\})(?:-value| int64 values)")


def test_the_vector_size_in_the_pages_comes_from_the_code() -> None:
    """The README states the size (GitHub renders no substitution): it must be VECTOR_SIZE.
    The docs pages take it from docs/conf.py's substitution, itself VECTOR_SIZE."""
    import runpy

    from seqlen_balancing.agreement import VECTOR_SIZE

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert VECTOR_CLAIM.findall(readme) == [str(VECTOR_SIZE)]
    conf = runpy.run_path(str(ROOT / "docs" / "conf.py"))
    assert conf["myst_substitutions"]["vector_size"] == str(VECTOR_SIZE)
    assert "substitution" in conf["myst_enable_extensions"]
    stated = {page.name: VECTOR_CLAIM.findall(page.read_text(encoding="utf-8"))
              for page in sorted((ROOT / "docs").glob("*.md"))}
    assert {name: claims for name, claims in stated.items() if claims} == {
        "distributed.md": ["{{ vector_size }}"], "step-time.md": ["{{ vector_size }}"],
    }


LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    """Links to files and headings of this repository point somewhere (no network)."""
    for match in LINK.finditer(page.read_text(encoding="utf-8")):
        target = match["target"]
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        assert file.exists(), f"{page.name}: {target} does not exist"
        if anchor and file.suffix == ".md":
            slugs = {
                re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
                for heading in re.findall(r"^#+ (.*)$", file.read_text(encoding="utf-8"), re.MULTILINE)
            }
            assert anchor in slugs, f"{page.name}: no heading #{anchor} in {path or page.name}"


def test_the_api_page_documents_exactly_the_public_names() -> None:
    import seqlen_balancing.verl

    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    directive = r"^\.\. auto(?:function|class|data):: (seqlen_balancing\.\S+)$"
    listed = set(re.findall(directive, text, re.MULTILINE))
    top = {name.removeprefix("seqlen_balancing.") for name in listed if name.count(".") == 1}
    prefix = "seqlen_balancing.verl."
    verl = {name.removeprefix(prefix) for name in listed if name.startswith(prefix) and name.count(".") == 2}
    assert top == {name for name in seqlen_balancing.__all__ if not name.startswith("__")}
    assert verl == set(seqlen_balancing.verl.__all__)


def test_the_cli_page_names_every_option() -> None:
    from seqlen_balancing.cli.arguments import build_parser

    # epoch, --trainer and the input bound (issue 25) are on docs/trainers.md
    text = "".join((ROOT / "docs" / name).read_text(encoding="utf-8") for name in ("cli.md", "trainers.md"))
    parser = build_parser()
    (subcommands,) = [a for a in parser._actions if a.choices and isinstance(a.choices, dict)]
    assert sorted(subcommands.choices) == ["epoch", "plan", "sweep"]
    for name, sub in subcommands.choices.items():
        assert f"## `{name}`" in text
        for action in sub._actions:
            for option in action.option_strings:
                assert f"`{option}" in text, f"docs/cli.md does not name {name} {option}"

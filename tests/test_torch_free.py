"""The planning core and the command line run without torch, and the torch mark is honest.

CI runs ``-m "not torch and not slow"`` on Python 3.10 and 3.13 in a virtual environment without torch
(``.ci/run``). These tests make the same promise checkable in the default run: the core
and the CLI import and plan with torch made unimportable, and every test module that
uses torch carries the ``torch`` mark (so that run never imports it).
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def _load_conftest() -> object:
    # The rule under test lives in conftest.py (tests/ is not a package: load it by path).
    spec = importlib.util.spec_from_file_location("_seqlen_balancing_conftest", TESTS / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_CONFTEST = _load_conftest()
TORCH_MARKS: frozenset[str] = _CONFTEST.TORCH_MARKS  # type: ignore[attr-defined]
TORCH_FIXTURES: frozenset[str] = _CONFTEST.TORCH_FIXTURES  # type: ignore[attr-defined]
module_marks = _CONFTEST.module_marks  # type: ignore[attr-defined]

#: Made unimportable in the subprocesses below: a meta path finder that refuses them.
BLOCK_TORCH = (
    "import sys\n"
    "class _NoTorch:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] in ('torch', 'tensordict'):\n"
    "            raise ModuleNotFoundError(f'No module named {name!r} (blocked by the test)')\n"
    "        return None\n"
    "sys.meta_path.insert(0, _NoTorch())\n"
)

#: Names the package loads from seqlen_balancing.batch on first use (they need torch).
LAZY_TORCH_NAMES = frozenset({
    "BalancedDistributedSampler", "calculate_workload", "effective_lengths", "prepare_dynamic_batch",
    "prepare_micro_batches", "rearrange_micro_batches", "restore_dynamic_batch",
})
TORCH_MODULES = ("torch", "tensordict", "seqlen_balancing.batch", "seqlen_balancing.agreement.collective",
                 "seqlen_balancing.global_batch.sampler")


def _run(code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCK_TORCH + code], capture_output=True, text=True,
        timeout=timeout, check=False, cwd=ROOT,
    )


@pytest.mark.slow
def test_core_and_cli_import_and_plan_without_torch() -> None:
    code = (
        "import pkgutil, seqlen_balancing\n"
        "names = ['seqlen_balancing.' + m.name for m in pkgutil.walk_packages("
        "seqlen_balancing.__path__) if m.name.split('.')[0] not in ('batch', 'distributed', 'sampler')]\n"
        "import importlib\n"
        "for name in names: importlib.import_module(name)\n"
        "from seqlen_balancing import plan_micro_batches, plan_data_parallel, plan_global_batch\n"
        # verl's order: by (workload, first index) descending [3, 2, 1, 0], then the even
        # positions reversed [1, 3] and the odd ones [2, 0]
        "assert plan_micro_batches([7, 7, 7, 7], 8) == [[1], [3], [2], [0]]\n"
        "assert [len(p) for p in plan_data_parallel([[95] * 5, [20] * 5], 100)] == [5, 5]\n"
        "assert [len(m) for m in plan_global_batch([95] * 5 + [20] * 5, 2, 100)[1]] == [4, 4]\n"
        "from seqlen_balancing.cli import main\n"
        "assert main(['plan', '--dp-size', '2', '--batch-size', '16']) == 0\n"
        "try:\n"
        "    from seqlen_balancing import rearrange_micro_batches\n"
        "except ModuleNotFoundError as error:\n"
        "    assert 'torch' in str(error), error\n"
        "else:\n"
        "    raise SystemExit('rearrange_micro_batches imported without torch')\n"
        "assert not any(m.split('.')[0] in ('torch', 'tensordict') for m in sys.modules)\n"
        "print('planned', len(names), 'modules')\n"
    )
    proc = _run(code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "micro-batches" in proc.stdout and "planned" in proc.stdout


@pytest.mark.slow
def test_not_torch_collection_never_imports_torch() -> None:
    """``-m "not torch"`` collects every unmarked module with torch unimportable, and
    imports no module marked torch (a module marked torch but imported would fail here)."""
    code = (
        "import pytest\n"
        f"rc = pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', '-m', "
        f"'not torch and not fuzz', {str(TESTS)!r}])\n"
        "assert not any(m.split('.')[0] in ('torch', 'tensordict') for m in sys.modules), "
        "sorted(m for m in sys.modules if m.startswith(('torch', 'tensordict')))[:5]\n"
        "raise SystemExit(int(rc))\n"
    )
    proc = _run(code)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    collected = {line.split("::")[0] for line in proc.stdout.splitlines() if "::" in line}
    for path in sorted(TESTS.rglob("test_*.py")):
        relative = str(path.relative_to(ROOT))
        if module_marks(path) & TORCH_MARKS:
            assert not any(c.endswith(relative.removeprefix("tests/")) for c in collected), relative


@pytest.mark.slow
@pytest.mark.parametrize(
    ("markexpr", "entered"),
    [("not torch", False), ("not slow", False), ("torch", True), ("", True), ("fuzz or not slow", True)],
)
def test_a_folder_whose_modules_are_all_deselected_is_not_entered(
    tmp_path: Path, markexpr: str, entered: bool
) -> None:
    """Where verl is installed, ``tests/compat/conftest.py`` imports it (and so torch): the
    folder must not be entered by a run that deselects all its modules (issue 30 item 7).
    A fuzz test runs only where the expression names fuzz."""
    (tmp_path / "conftest.py").write_text((TESTS / "conftest.py").read_text(encoding="utf-8"))
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nmarkers = ["torch: t", "slow: s", "distributed: d", "fuzz: f", '
        '"extras: e"]\naddopts = "--strict-markers -p no:cacheprovider"\n', encoding="utf-8"
    )
    folder = tmp_path / "needs_torch"
    folder.mkdir()
    (folder / "conftest.py").write_text("raise ImportError('the folder was entered')\n")
    (folder / "test_a.py").write_text(
        "import pytest\npytestmark = [pytest.mark.torch, pytest.mark.slow]\ndef test_a(): pass\n"
    )
    (folder / "test_b.py").write_text(
        "import pytest\npytestmark = [pytest.mark.distributed, pytest.mark.slow]\ndef test_b(): pass\n"
    )
    (tmp_path / "test_plain.py").write_text("def test_plain(): pass\n")
    (tmp_path / "test_opt_in.py").write_text("import pytest\n@pytest.mark.fuzz\ndef test_fuzz(): pass\n")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", markexpr, str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
    )
    assert ("the folder was entered" in proc.stdout) is entered, proc.stdout[-3000:]
    assert (proc.returncode != 0) is entered, proc.stdout[-3000:]
    assert ("test_opt_in.py::test_fuzz" in proc.stdout) is ("fuzz" in markexpr), proc.stdout[-3000:]


def _decorator_marks(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> set[str]:
    marks: set[str] = set()
    for decorator in node.decorator_list:
        for sub in ast.walk(decorator):
            if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Attribute) \
                    and sub.value.attr == "mark":
                marks.add(sub.attr)
    return marks


def _torch_uses(tree: ast.Module) -> list[str]:
    """Torch imports at module level or in a test, and torch-fixture uses, that no torch
    mark covers."""
    found: list[str] = []

    def visit(node: ast.AST, covered: bool) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            covered = covered or bool(_decorator_marks(node) & TORCH_MARKS)
            # A helper may import torch when called: only tests call it, and an unmarked
            # test that does fails in CI's run without torch.
            covered = covered or not node.name.startswith(("test_", "Test"))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not covered:
                used = {a.arg for a in node.args.args} & TORCH_FIXTURES
                found.extend(f"line {node.lineno}: fixture {u}" for u in sorted(used))
        if not covered and isinstance(node, ast.Import):
            found.extend(
                f"line {node.lineno}: import {a.name}" for a in node.names
                if a.name.startswith(TORCH_MODULES)
            )
        if not covered and isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith(TORCH_MODULES):
                found.append(f"line {node.lineno}: from {node.module} import ...")
            if node.module == "seqlen_balancing":
                lazy = sorted({a.name for a in node.names} & LAZY_TORCH_NAMES)
                found.extend(f"line {node.lineno}: from seqlen_balancing import {n}" for n in lazy)
        for child in ast.iter_child_nodes(node):
            visit(child, covered)

    visit(tree, False)
    return found


@pytest.mark.parametrize(
    "path", sorted(TESTS.rglob("test_*.py")), ids=lambda p: str(p.relative_to(TESTS))
)
def test_every_use_of_torch_is_marked(path: Path) -> None:
    if module_marks(path) & TORCH_MARKS:
        return  # the whole module is selected out by -m "not torch"
    unmarked = _torch_uses(ast.parse(path.read_text(encoding="utf-8")))
    assert not unmarked, (
        f"{path.name} uses torch outside a torch mark ({unmarked}); add "
        "`pytestmark = pytest.mark.torch` to the module or @pytest.mark.torch to the test"
    )


def test_the_guard_sees_what_it_must() -> None:
    """The AST rule itself: each kind of torch use is found, and a mark covers it."""
    source = (
        "import torch\n"
        "from tensordict import TensorDict\n"
        "from seqlen_balancing import plan_micro_batches, rearrange_micro_batches\n"
        "def test_a(masked_batch): import seqlen_balancing.batch\n"
        "@pytest.mark.torch\n"
        "def test_b(jagged_batch): import torch\n"
        "def helper(): import torch\n"
    )
    found = _torch_uses(ast.parse(source))
    assert [f.split(":")[0] for f in found] == ["line 1", "line 2", "line 3", "line 4", "line 4"]
    assert "fixture masked_batch" in found[3] and "import seqlen_balancing.batch" in found[4]


#: What a module marked ``no_tensordict`` must not touch: the TensorDict API of the library,
#: the batch fixtures, tensordict itself (also named in a string, as a script it runs would).
TENSORDICT_NAMES = frozenset({
    "NonTensorData", "NonTensorStack", "TensorDict", "prepare_dynamic_batch", "prepare_micro_batches",
    "rearrange_micro_batches", "restore_dynamic_batch", *TORCH_FIXTURES,
})


def _tensordict_uses(tree: ast.Module) -> list[str]:
    """Where a module reaches tensordict: imports, names, strings that name it."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""]
            found.extend(f"line {node.lineno}: {a.name}" for a in node.names if a.name in TENSORDICT_NAMES)
        else:
            modules = []
        found.extend(f"line {node.lineno}: import {m}" for m in modules
                     if m.startswith(("tensordict", "seqlen_balancing.batch")))
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) \
            else node.arg if isinstance(node, ast.arg) else None
        if name in TENSORDICT_NAMES:
            found.append(f"line {node.lineno}: {name}")
        text = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ""
        if "tensordict" in text.lower():
            found.append(f"line {node.lineno}: a string naming tensordict")
    return found


@pytest.mark.parametrize(
    "path", [p for p in sorted(TESTS.rglob("test_*.py")) if "no_tensordict" in module_marks(p)],
    ids=lambda p: str(p.relative_to(TESTS)),
)
def test_modules_marked_no_tensordict_never_reach_it(path: Path) -> None:
    # CI runs them in main only (its td083 and verl lanes select `torch and not no_tensordict`)
    uses = _tensordict_uses(ast.parse(path.read_text(encoding="utf-8")))
    assert not uses, f"{path.name} is marked no_tensordict but reaches tensordict ({uses}): drop the mark"


def test_the_tensordict_guard_sees_what_it_must() -> None:
    source = (
        "import tensordict.nn\n"
        "from seqlen_balancing import plan_micro_batches, rearrange_micro_batches\n"
        "def test_a(masked_batch): pass\n"
        "CODE = 'from TensorDict import x'\n"
        "out = seqlen_balancing.prepare_micro_batches(batch)\n"
        "from seqlen_balancing.batch.cut import cut\n"
        "import torch\n"
    )
    found = _tensordict_uses(ast.parse(source))
    assert sorted(found) == sorted([
        "line 1: import tensordict.nn", "line 2: rearrange_micro_batches", "line 3: masked_batch",
        "line 4: a string naming tensordict", "line 5: prepare_micro_batches",
        "line 6: import seqlen_balancing.batch.cut",
    ])
    marked = [p.name for p in TESTS.rglob("test_*.py") if "no_tensordict" in module_marks(p)]
    assert "test_sampler.py" in marked  # the guard has modules to check

"""Run by test_switch.py in a process of its own (a fork of tests/preloaded.py's server,
where torch and tensordict are imported and verl and this library are not): import verl and
the modules that bind the 13 names, then report who holds which function (one JSON line on
stdout).

argv[1] is the mode: ``plugin`` (the test set SEQLEN_BALANCING_VERL=1), ``off`` (no
variable), ``external`` (VERL_USE_EXTERNAL_MODULES=seqlen_balancing.verl.enable, plugins
off). The bindings expected are read from verl's source with ast, not listed by hand.
"""

from __future__ import annotations

import ast
import importlib
import json
import sys
import time
import warnings
from pathlib import Path

DEFINING = {
    "verl.utils.seqlen_balancing": (
        "calculate_workload", "karmarkar_karp", "greedy_partition", "get_seqlen_balanced_partitions",
        "log_seqlen_unbalance", "ceildiv", "roundup_divisible", "rearrange_micro_batches",
        "get_reverse_idx", "prepare_dynamic_batch", "restore_dynamic_batch",
        "get_group_balanced_partitions",
    ),
    "verl.workers.engine.utils": ("prepare_micro_batches",),
}
#: The modules of issue 18 that bind the names at import (verl 0.9.1).
BINDERS = [
    "verl.trainer.ppo.ray_trainer",
    "verl.trainer.ppo.v1.trainer_base",
    "verl.trainer.sft_trainer_ray",
    "verl.workers.engine.utils",
    "verl.workers.engine.fsdp.transformer_impl",
    "verl.workers.engine.megatron.transformer_impl",
    "verl.workers.engine.automodel.transformer_impl",
    "verl.workers.engine.veomni.transformer_impl",
    "verl.workers.engine.torchtitan.transformer_impl",
]


def module_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements run on import: the body, and inside if/try blocks (not functions, classes)."""
    found = []
    for node in body:
        found.append(node)
        for field in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(node, field, None)
            if isinstance(node, (ast.If, ast.Try)) and inner:
                found += module_level([n for n in inner if isinstance(n, ast.stmt)] + [
                    s for h in inner if isinstance(h, ast.ExceptHandler) for s in h.body])
    return found


def expected_bindings(root: Path, module: str) -> dict[str, str]:
    """{attribute: original name} that ``module`` binds at import, read from its source."""
    path = root.joinpath(*module.split(".")[1:]).with_suffix(".py")
    package = module.split(".")[:-1]
    bound = {}
    for node in module_level(ast.parse(path.read_text(encoding="utf-8")).body):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = package[: len(package) - node.level + 1] if node.level else []
        source = ".".join([*base, *(node.module.split(".") if node.module else [])])
        for alias in node.names:
            if alias.name in DEFINING.get(source, ()):
                bound[alias.asname or alias.name] = alias.name
    if module in DEFINING:
        bound |= {name: name for name in DEFINING[module]}
    return bound


def main() -> None:
    mode = sys.argv[1]
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import verl
        import_verl_s = time.perf_counter() - start
        imported, skipped = [], {}
        for name in BINDERS:
            try:
                importlib.import_module(name)
                imported.append(name)
            except ImportError as error:  # engines whose packages are not installed
                skipped[name] = repr(error)
    import seqlen_balancing

    root = Path(verl.__path__[0])
    ours = {name: getattr(seqlen_balancing, name) for names in DEFINING.values() for name in names}
    mine = {id(f) for f in ours.values()}

    def holders() -> dict[str, dict[str, str]]:
        table: dict[str, dict[str, str]] = {}
        for module in ["verl.utils.seqlen_balancing", *imported]:
            values = vars(sys.modules[module])
            table[module] = {
                attribute: "ours" if values[attribute] is ours[original]
                else "verl" if getattr(values[attribute], "__module__", "") == (
                    "verl.workers.engine.utils" if original == "prepare_micro_batches"
                    else "verl.utils.seqlen_balancing") else repr(values[attribute])
                for attribute, original in sorted(expected_bindings(root, module).items())
            }
        return table

    def anywhere() -> list[str]:
        """Attributes of any loaded verl module that hold one of the library's 13 functions."""
        return sorted(
            f"{name}.{attribute}" for name, module in list(sys.modules.items())
            if name.startswith("verl") and module is not None
            for attribute, value in list(vars(module).items()) if id(value) in mine
        )

    # the engines that cannot import here bind the names the same way (module-level from-imports,
    # which the hook switches on import where their packages are installed): counted from source
    not_imported = {module: sorted(expected_bindings(root, module)) for module in skipped}
    report = {"mode": mode, "import_verl_s": import_verl_s, "skipped": skipped, "holders": holders(),
              "not_imported": not_imported,
              "anywhere": anywhere(), "verl": verl.__version__}
    if mode != "off":
        import seqlen_balancing.verl as switch

        report["replacements"] = switch.replacements()
        report["restored"] = switch.revert()
        report["after_revert"] = holders()
        report["anywhere_after_revert"] = anywhere()
    print(json.dumps(report))


if __name__ == "__main__":
    main()

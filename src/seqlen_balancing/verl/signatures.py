"""Is verl's signature a prefix of this library's? Read from the function, or from source.

The switch (:mod:`seqlen_balancing.verl.switch`) checks every function it replaces before
it replaces any. A verl module that is not imported yet is read from its source file with
:mod:`ast` (importing it inside verl's own ``__init__`` would be slow or impossible), a
loaded one with :func:`inspect.signature`. Both give the same list of
``(name, kind, default)``; annotations are left out (this library's are wider, and strings
under ``from __future__ import annotations``). Standard library only.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["Parameter", "from_function", "from_source", "prefix_problem", "render"]

#: (name, kind, default); default is ``inspect.Parameter.empty`` when there is none.
Parameter = tuple[str, inspect._ParameterKind, Any]

_EMPTY = inspect.Parameter.empty


class _Expression(str):
    """A default written as an expression that is not a literal (compares unequal to values)."""

    def __repr__(self) -> str:
        return str(self)


def from_function(function: Callable[..., Any]) -> list[Parameter]:
    """The parameters of ``function``: name, kind and default, in order.

    Example:
        >>> from_function(lambda a, b=1, *, c=None: 0)[1:]
        [('b', <_ParameterKind.POSITIONAL_OR_KEYWORD: 1>, 1), ('c', <_ParameterKind.KEYWORD_ONLY: 3>, None)]
    """
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def _default(node: ast.expr | None) -> Any:
    if node is None:
        return _EMPTY
    try:
        return ast.literal_eval(node)
    except ValueError:
        return _Expression(ast.unparse(node))


def from_source(path: Path, name: str) -> list[Parameter] | None:
    """The parameters of the module-level function ``name`` defined in the file ``path``.

    Reads the file without executing it. The last definition wins, as it would on import.

    Args:
        path: a Python source file.
        name: the function's name.

    Returns:
        Its parameters as :func:`from_function` gives them, or ``None`` when the file does
        not define ``name`` at module level.

    Raises:
        OSError: the file cannot be read. SyntaxError: it is not Python.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = [node for node in tree.body
             if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name]
    if not found:
        return None
    args, kinds = found[-1].args, inspect.Parameter
    positional: list[tuple[ast.arg, inspect._ParameterKind]] = [
        (a, kinds.POSITIONAL_ONLY) for a in args.posonlyargs]
    positional += [(a, kinds.POSITIONAL_OR_KEYWORD) for a in args.args]
    # the defaults belong to the last positional parameters
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    params: list[Parameter] = [(a.arg, kind, _default(d))
                               for (a, kind), d in zip(positional, defaults, strict=True)]
    params += [(a.arg, kinds.VAR_POSITIONAL, _EMPTY) for a in [args.vararg] if a is not None]
    params += [(a.arg, kinds.KEYWORD_ONLY, _default(d))
               for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)]
    params += [(a.arg, kinds.VAR_KEYWORD, _EMPTY) for a in [args.kwarg] if a is not None]
    return params


def render(params: list[Parameter]) -> str:
    """``(a, b=1, *, c=None)``: the parameters as a signature reads, without annotations."""
    return str(
        inspect.Signature([inspect.Parameter(name, kind, default=default) for name, kind, default in params])
    )


def _describe(param: Parameter) -> str:
    text = render([param]).strip("()*/, ")
    kind = param[1]
    plain = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.VAR_POSITIONAL,
             inspect.Parameter.VAR_KEYWORD)
    return text if kind in plain else f"{text} ({kind.description})"


def _same_default(a: Any, b: Any) -> bool:
    return a is b or (type(a) is type(b) and bool(a == b))


def prefix_problem(verl: list[Parameter], ours: list[Parameter]) -> str | None:
    """Why a call written for ``verl``'s parameters could behave differently with ``ours``.

    ``verl`` must be a prefix of ``ours`` (same names, kinds and defaults, in order), and
    every parameter ``ours`` adds must be keyword-only with a default, or a trailing
    ``**kwargs`` (the library's options, :class:`~seqlen_balancing.options.OptionKeywords`),
    so that no call verl makes can bind to it.

    Returns:
        ``None`` when it is safe, else one sentence saying what differs.

    Example:
        >>> a = from_function(lambda x, k=1: 0)
        >>> prefix_problem(a, from_function(lambda x, k=1, *, pad=1: 0)) is None
        True
        >>> prefix_problem(a, from_function(lambda x, k=1, *, pad=1, **options: 0)) is None
        True
        >>> prefix_problem(a, from_function(lambda x, k=2: 0))
        'parameter 2: verl has k=1, the library has k=2'
    """
    for position, (theirs, mine) in enumerate(zip(verl, ours, strict=False), start=1):
        if theirs[:2] != mine[:2] or not _same_default(theirs[2], mine[2]):
            return (
                f"parameter {position}: verl has {_describe(theirs)}, the library has {_describe(mine)}"
            )
    if len(ours) < len(verl):
        return f"verl has {len(verl)} parameters, the library {len(ours)}"
    # **option_keywords (a signature's last parameter): only a keyword call can reach it
    loose = next((name for name, kind, default in ours[len(verl):]
                  if kind is not inspect.Parameter.VAR_KEYWORD and (
                      kind is not inspect.Parameter.KEYWORD_ONLY or default is _EMPTY)), None)
    return None if loose is None else (
        f"the library's extra parameter {loose!r} is not keyword-only with a default")

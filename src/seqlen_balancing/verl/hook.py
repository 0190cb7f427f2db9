"""A post-import hook: run a callback on a module right after its code has executed.

:mod:`seqlen_balancing.verl` needs to act on verl modules that are imported after the
switch is turned on (inside verl's own ``__init__``, before verl's engines and trainers
exist). A meta path finder placed first in :data:`sys.meta_path` asks the finders behind
it for the module's spec and wraps its loader; the wrapped loader executes the module as
usual, then calls the callback with the module, before the importer gets the module back.
So a module that says ``from verl.workers.engine.utils import prepare_micro_batches`` gets
whatever the callback left in ``verl.workers.engine.utils``, from its first line on.

The same idea as ``wrapt.register_post_import_hook`` (and ddtrace's and OpenTelemetry's
patching), written here so that the package keeps no dependency beyond torch and
tensordict. Only modules whose names start with one of the given prefixes are touched;
every other import goes on as if the finder were not there. :func:`put_back` undoes one
replacement the callback made, for the switch and the balance step alike. Standard library only.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

__all__ = ["PostImportFinder", "put_back"]


class _CallbackLoader(importlib.abc.Loader):
    """Executes a module with the loader it would have had, then runs the callback."""

    def __init__(self, loader: importlib.abc.Loader, callback: Callable[[ModuleType], None]) -> None:
        self._loader = loader
        self._callback = callback

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # Give the module its own loader back first: code that reads __loader__ or
        # __spec__.loader (inspect.getsource, importlib.resources) sees the usual one.
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        self._callback(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, is_package, ...
        return getattr(self._loader, name)


class PostImportFinder(importlib.abc.MetaPathFinder):
    """Calls ``callback(module)`` after each module named ``prefix`` or ``prefix.*`` executes.

    Install with :meth:`install` (first in :data:`sys.meta_path`), remove with
    :meth:`uninstall`. A module already in :data:`sys.modules` is not seen again: the caller
    handles those itself. The callback runs under the import lock of the module, once per
    import; an exception it raises fails that import.

    Args:
        prefixes: top-level package names, e.g. ``("verl",)``.
        callback: called with each matching module, after its code ran.

    Example:
        >>> seen = []
        >>> finder = PostImportFinder(("json",), lambda module: seen.append(module.__name__))
        >>> finder.install()
        >>> finder.uninstall()
        >>> seen
        []
    """

    def __init__(self, prefixes: Sequence[str], callback: Callable[[ModuleType], None]) -> None:
        self._prefixes = tuple(prefixes)
        self._callback = callback
        self._busy = threading.local()

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        """The spec the other finders give, with a loader that runs the callback after.

        Complexity: one pass over :data:`sys.meta_path` for matching names; O(1) otherwise.
        """
        if getattr(self._busy, "active", False) or \
                not any(fullname == p or fullname.startswith(p + ".") for p in self._prefixes):
            return None
        self._busy.active = True  # a finder behind us that imports must not come back here
        try:
            spec = next((found for finder in list(sys.meta_path)
                         if finder is not self and hasattr(finder, "find_spec")
                         and (found := finder.find_spec(fullname, path, target)) is not None), None)
        finally:
            self._busy.active = False
        # namespace packages and old-style loaders are imported untouched
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _CallbackLoader(spec.loader, self._callback)
        return spec

    def install(self) -> None:
        """Put the finder first in :data:`sys.meta_path` (no-op if it is there)."""
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def uninstall(self) -> None:
        """Take the finder out of :data:`sys.meta_path` (no-op if it is not there)."""
        while self in sys.meta_path:
            sys.meta_path.remove(self)


def put_back(holder: Any, name: str, original: Any, replacement: Any) -> bool:
    """Give ``holder.name`` (a module's or a class's own attribute) ``original`` back where it
    still holds ``replacement``; False where it is gone or someone else changed it since."""
    if holder is None or vars(holder).get(name) is not replacement:
        return False
    setattr(holder, name, original)
    return True

"""Run a callback right after a named module is first imported (a post-import hook).

The CPU plugin is imported at ``import verl`` in every process. Importing verl's rollout modules
there just to register the ``hf`` backend would cost about a second per process (they pull in the
worker configs), and patching ``verl.utils.distributed`` eagerly would import Ray's and torch's
distributed stacks early. Instead the plugin asks to be called when those modules are imported by
verl itself, and pays nothing in processes that never import them.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from types import ModuleType
from typing import Callable, Optional, Sequence

ModuleCallback = Callable[[ModuleType], None]


class _CallbackLoader(importlib.abc.Loader):
    """Wraps a module's real loader and calls the callbacks after the module has executed."""

    def __init__(self, loader: importlib.abc.Loader, callbacks: list[ModuleCallback]) -> None:
        self._loader = loader
        self._callbacks = callbacks

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[ModuleType]:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        # Keep the real loader visible to tools that inspect it (linecache, importlib.resources).
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        for callback in self._callbacks:
            callback(module)

    def __getattr__(self, name: str):
        return getattr(self._loader, name)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """A meta-path finder that only answers for hooked names, by asking the other finders first."""

    def __init__(self) -> None:
        self.callbacks: dict[str, list[ModuleCallback]] = {}
        self._searching = threading.local()

    def find_spec(self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None):
        callbacks = self.callbacks.get(fullname)
        if not callbacks or getattr(self._searching, "name", None) == fullname:
            return None
        self._searching.name = fullname
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            self._searching.name = None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        # One-shot: once the module exists, later imports hit sys.modules and never come here.
        del self.callbacks[fullname]
        spec.loader = _CallbackLoader(spec.loader, callbacks)
        return spec


_FINDER = _PostImportFinder()
_LOCK = threading.Lock()


def when_imported(module_name: str, callback: ModuleCallback) -> None:
    """Call ``callback(module)`` once ``module_name`` is imported; at once if it already is."""
    with _LOCK:
        module = sys.modules.get(module_name)
        if module is None:
            _FINDER.callbacks.setdefault(module_name, []).append(callback)
            if _FINDER not in sys.meta_path:
                sys.meta_path.insert(0, _FINDER)
            return
    callback(module)


def pending_hooks() -> list[str]:
    """Module names whose callbacks have not run yet (for diagnostics and tests)."""
    return sorted(_FINDER.callbacks)

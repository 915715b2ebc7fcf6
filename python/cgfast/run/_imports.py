"""Call a function right after a module is first imported, without importing it."""

from __future__ import annotations

import importlib.abc
import sys
from typing import Any, Callable, Dict, Optional, Sequence

Callback = Callable[[Any], None]


class AfterImport(importlib.abc.MetaPathFinder):
    """A finder on ``sys.meta_path`` that finds nothing itself: for a watched module it
    asks the finders after it and wraps the found loader's ``exec_module`` so that the
    callback runs once the module's code has run. It takes itself off ``sys.meta_path``
    when nothing is left to watch."""

    def __init__(self) -> None:
        self._callbacks: Dict[str, Callback] = {}

    def when_imported(self, name: str, callback: Callback) -> None:
        """``callback(module)`` after ``name`` is imported (now, if it is already)."""
        module = sys.modules.get(name)
        if module is not None:
            callback(module)
            return
        self._callbacks[name] = callback
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def find_spec(self, fullname: str, path: Optional[Sequence[str]], target: Any = None) -> Any:
        callback = self._callbacks.pop(fullname, None)
        if callback is None:
            return None
        if not self._callbacks and self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = _find_with_others(self, fullname, path, target)
        loader = getattr(spec, "loader", None)
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec

        def exec_then_call(module: Any) -> None:
            exec_module(module)
            callback(module)

        loader.exec_module = exec_then_call  # type: ignore[union-attr]  # this module's loader alone
        return spec


def _find_with_others(finder: AfterImport, fullname: str, path: Any, target: Any) -> Any:
    for other in sys.meta_path:
        if other is finder or not hasattr(other, "find_spec"):
            continue
        spec = other.find_spec(fullname, path, target)
        if spec is not None:
            return spec
    return None

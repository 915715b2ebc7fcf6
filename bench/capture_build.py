"""What the capture benches reach inside ``cgfast.capture``, in this build's layout or in
the layout before the capture runtime object (builds up to main 4f141a8), so that
``--against`` (``side_by_side.py``) can time such a build beside this one.

``state``: the object owning the capture state (``use_backend``, ``recorder``, the
capture count); ``patch_class`` / ``unpatch_class`` / ``class_is_patched``; ``KEYS_ATTR``
and ``GraphKeys``: what a recorded graph object carries.
"""

from __future__ import annotations

try:
    from cgfast.capture._graphs import KEYS_ATTR, GraphKeys
    from cgfast.capture._patches import patch_class, unpatch_class
    from cgfast.capture._runtime import runtime as state

    def class_is_patched(cls: type) -> bool:
        return any(patch.group is cls for patch in state.installed)

except ImportError:  # a build from before the runtime object
    from cgfast.capture._graphs import _KEYS_ATTR as KEYS_ATTR  # type: ignore[attr-defined,no-redef]
    from cgfast.capture._graphs import GraphKeys, patch_class, unpatch_class  # type: ignore[attr-defined,no-redef]
    from cgfast.capture._state import state  # type: ignore[import-not-found,no-redef]

    def class_is_patched(cls: type) -> bool:
        return "_cgfast_original_methods" in cls.__dict__


__all__ = ["KEYS_ATTR", "GraphKeys", "class_is_patched", "patch_class", "state", "unpatch_class"]

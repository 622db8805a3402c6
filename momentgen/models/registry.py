"""The registry of model kinds: configuration ``kind`` → its `ModelKind` (one line per kind)."""

from ..core.errors import WordError
from .direct import DIRECT
from .symmetric import SYMMETRIC
from .tied import TIED
from .untied import UNTIED

__all__ = ["KINDS", "get"]

#: The registry: configuration ``kind`` → its `ModelKind`.
KINDS = {kind.name: kind for kind in (TIED, UNTIED, DIRECT, SYMMETRIC)}


def get(name):
    """The `ModelKind` registered as ``name`` (a `WordError` naming the choices otherwise)."""
    if name not in KINDS:
        raise WordError(f"unknown model {name!r}: choose one of {', '.join(KINDS)}")
    return KINDS[name]

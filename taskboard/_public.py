"""How the thin public modules present what they re-export."""

from __future__ import annotations

from typing import Any

__all__ = ["show_public_paths"]


def show_public_paths(namespace: dict[str, Any]) -> None:
    """Give each name in ``namespace``'s ``__all__`` that a private module of the package
    defines the package's own path, so that tracebacks, reprs and docs show
    ``taskboard.TakenError``, not ``taskboard._errors.TakenError``."""
    package = namespace["__name__"]
    for name in namespace["__all__"]:
        defined = namespace[name]
        if getattr(defined, "__module__", "").startswith(f"{package}._"):
            defined.__module__ = package

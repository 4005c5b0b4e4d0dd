"""Names that are not plain imports: the MCP adapter's, whose modules need the `mcp` extra
and say so when it is missing, and the old names of renamed classes, kept for a while
behind a `DeprecationWarning`."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

__all__ = ["MCP_EXTRA", "mcp_missing", "renamed"]

MCP_EXTRA = "pip install 'mcp-connect[mcp]'"
# The distributions of the `mcp` extra, by the top-level module they install.
_MCP_MODULES = ("mcp", "mcp_types")


def mcp_missing(what: str, error: ModuleNotFoundError) -> NoReturn:
    """Re-raises an import of the MCP SDK that failed as an `ImportError` naming the extra;
    any other missing module as it is."""
    missing = (error.name or "").partition(".")[0]
    if missing not in _MCP_MODULES:
        raise error
    raise ImportError(
        f"{what} needs the MCP SDK ({missing!r} is not installed): {MCP_EXTRA}", name=error.name
    ) from error


def renamed(
    module: str,
    old_to_new: Mapping[str, str],
    namespace: Mapping[str, Any],
    otherwise: Callable[[str], Any] | None = None,
) -> Callable[[str], Any]:
    """A module `__getattr__` that answers each old name with the object of its new name
    (the same object, so `isinstance` and `except` keep working) and a warning, and any
    other name with `otherwise` (an AttributeError without it)."""

    def __getattr__(name: str) -> Any:
        new = old_to_new.get(name)
        if new is None:
            if otherwise is not None:
                return otherwise(name)
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(
            f"{module}.{name} is now {module}.{new}; the old name will be removed in a later release",
            DeprecationWarning,
            stacklevel=2,
        )
        return namespace[new]

    return __getattr__

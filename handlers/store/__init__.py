"""The store: open_store(url) picks the backend from the URL; the caller awaits store.open()."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from .base import DEFAULT_TIMEOUT, Store

if TYPE_CHECKING:
    from .postgres import PostgresStore
    from .sqlite import SQLiteStore

__all__ = ["PostgresStore", "SQLiteStore", "Store", "open_store"]


def __getattr__(name: str) -> Any:
    """The backends are imported when first named, so that a command on SQLite never loads asyncpg."""
    if name == "PostgresStore":
        from .postgres import PostgresStore

        return PostgresStore
    if name == "SQLiteStore":
        from .sqlite import SQLiteStore

        return SQLiteStore
    raise AttributeError(name)

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")  # two characters at least: "C:\x.db" is a path


def open_store(url: str, timeout: float = DEFAULT_TIMEOUT) -> Store:
    """sqlite:///relative.db, sqlite:////absolute.db or a plain path -> SQLite; postgresql:// or postgres://
    -> PostgreSQL; any other scheme -> ValueError (naming the scheme only, never the rest of the URL).
    `timeout`: seconds one store call may wait on the database before it raises StoreUnavailable."""
    match = _SCHEME.match(url)
    if match is None:
        from .sqlite import SQLiteStore

        return SQLiteStore(url, timeout=timeout)
    scheme = match[1].lower()
    if scheme in ("postgresql", "postgres"):
        from .postgres import PostgresStore

        return PostgresStore(url, timeout=timeout)
    if scheme == "sqlite" and url.startswith("sqlite:///") and len(url) > len("sqlite:///"):
        from .sqlite import SQLiteStore

        return SQLiteStore(url[len("sqlite:///") :], timeout=timeout)
    if scheme == "sqlite":
        raise ValueError("a SQLite store URL reads sqlite:///relative/path.db or sqlite:////absolute/path.db")
    raise ValueError(f"unsupported store URL scheme {scheme!r}: use sqlite:///path.db or postgresql://…")

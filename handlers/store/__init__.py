"""The store: open_store(url) picks the backend from the URL; the caller awaits store.open()."""

from __future__ import annotations

import re

from .base import DEFAULT_TIMEOUT, Store
from .postgres import PostgresStore
from .sqlite import SQLiteStore

__all__ = ["PostgresStore", "SQLiteStore", "Store", "open_store"]

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")  # two characters at least: "C:\x.db" is a path


def open_store(url: str, timeout: float = DEFAULT_TIMEOUT) -> Store:
    """sqlite:///relative.db, sqlite:////absolute.db or a plain path -> SQLite; postgresql:// or postgres://
    -> PostgreSQL; any other scheme -> ValueError (naming the scheme only, never the rest of the URL).
    `timeout`: seconds one store call may wait on the database before it raises StoreUnavailable."""
    match = _SCHEME.match(url)
    if match is None:
        return SQLiteStore(url, timeout=timeout)
    scheme = match[1].lower()
    if scheme in ("postgresql", "postgres"):
        return PostgresStore(url, timeout=timeout)
    if scheme == "sqlite" and url.startswith("sqlite:///") and len(url) > len("sqlite:///"):
        return SQLiteStore(url[len("sqlite:///") :], timeout=timeout)
    if scheme == "sqlite":
        raise ValueError("a SQLite store URL reads sqlite:///relative/path.db or sqlite:////absolute/path.db")
    raise ValueError(f"unsupported store URL scheme {scheme!r}: use sqlite:///path.db or postgresql://…")

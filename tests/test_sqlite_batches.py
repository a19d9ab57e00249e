"""Rows of one INSERT go to SQLite as one statement of as many VALUES rows (handlers/store/sqlite.py
`_Conn.executemany`), as many statements as SQLite's limit of marks needs: each row must be stored exactly as the
row-by-row statement stores it."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from handlers.store import SQLiteStore
from handlers.store.sqlcore import Conn
from handlers.store.sqlite import _many_rows, _row_picks

_TABLE = "(id TEXT PRIMARY KEY, t TEXT, i INTEGER, n NUMERIC, r REAL, a)"  # every affinity, and none
_COLS = ("id", "t", "i", "n", "r", "a")
_UPSERT = ("INSERT INTO {table} (id, t, i, n, r, a) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO UPDATE SET "
           "t = excluded.t, i = excluded.i, n = excluded.n, r = excluded.r, a = excluded.a")
_AWKWARD_TEXT = ["", "x'y\"z\\", "ünï🙂\u2028", "00123", "1e5", " 12", "12.50", "-0", "\n\t", '{"a": [1, 2]}', "[1]",
                 "null", "true", "NaN"]
_INTEGERS = [0, -1, 1, 2**63 - 1, -(2**63), True, False]


@pytest.fixture(name="store")
async def fixture_store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    store = SQLiteStore(str(tmp_path / "s.db"))
    await store.open()
    for table in ("batched", "single"):
        await store._transaction(lambda tx, table=table: tx.execute(f"CREATE TABLE {table} {_TABLE}"))
    yield store
    await store.close()


def _rows() -> list[tuple[Any, ...]]:
    """Every awkward value in every column (a Decimal and a datetime as the store binds them: exact text)."""
    values: list[Any] = [None, *_AWKWARD_TEXT, *_INTEGERS, Decimal("0.000123"), datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)]
    return [(f"row{i}", v, v, v, v, v) for i, v in enumerate(values)]


async def _stored(store: SQLiteStore, table: str) -> list[tuple[Any, ...]]:
    cols = ", ".join(f"{c}, typeof({c})" for c in _COLS)
    async with store._read() as conn:
        return [tuple(r) for r in await conn.fetch(f"SELECT {cols} FROM {table} ORDER BY id")]


async def _statements(store: SQLiteStore, rows: list[tuple[Any, ...]], table: str) -> list[str]:
    """The statements SQLite ran to insert `rows` in one executemany."""
    ran: list[str] = []
    assert store._writer is not None
    await store._writer.set_trace_callback(ran.append)
    try:
        await store._transaction(lambda tx: tx.executemany(_UPSERT.format(table=table), rows))
    finally:
        await store._writer.set_trace_callback(None)
    return [s for s in ran if s.startswith("INSERT")]


async def _one_by_one(store: SQLiteStore, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    async def each(tx: Conn) -> None:
        for row in rows:
            await tx.execute(_UPSERT.format(table="single"), *row)

    await store._transaction(each)
    return await _stored(store, "single")


async def test_a_batch_is_one_statement_and_stores_each_value_as_a_row_alone_does(store: SQLiteStore) -> None:
    rows = _rows()
    assert len(await _statements(store, rows, "batched")) == 1
    batched = await _stored(store, "batched")
    assert batched == await _one_by_one(store, rows) and len(batched) == len(rows)
    assert batched[1][:4] == ("row1", "text", "", "text")  # not NULL: the empty text stays text


async def test_the_last_of_two_rows_with_one_key_wins_as_row_by_row(store: SQLiteStore) -> None:
    rows = [("same", "first", 1, 1, 1, 1), ("other", "x", 2, 2, 2, 2), ("same", "last", 3, 3, 3, 3)]
    assert len(await _statements(store, rows, "batched")) == 1
    async with store._read() as conn:
        assert tuple(await conn.fetchrow("SELECT t, i FROM batched WHERE id = 'same'")) == ("last", 3)


@pytest.mark.parametrize("odd", [1.5, "nul\x00inside", b"bytes"], ids=["float", "nul", "bytes"])
async def test_values_of_every_type_go_in_the_one_statement(store: SQLiteStore, odd: Any) -> None:
    rows = [("a", "x", 1, 1, 1, 1), ("b", odd, 2, odd, odd, odd)]
    assert len(await _statements(store, rows, "batched")) == 1
    batched = await _stored(store, "batched")
    assert batched == await _one_by_one(store, rows) and batched[1][-2:] == (odd, type(odd).__name__.replace(
        "str", "text").replace("bytes", "blob").replace("float", "real"))


async def test_a_batch_past_sqlites_limit_of_marks_is_split(store: SQLiteStore) -> None:
    """At most 14 marks a statement: two rows of six columns each, so 24 rows are 12 statements."""
    assert store._writer is not None
    writer = store._writer
    await writer._execute(writer._conn.setlimit, sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 14)
    rows = _rows()
    statements = await _statements(store, rows, "batched")
    assert len(rows) == 24 and len(statements) == 12 and all(s.count("), (") == 1 for s in statements)
    assert await _stored(store, "batched") == await _one_by_one(store, rows)


@pytest.mark.parametrize("big", [2**63, 2**64, -(2**63) - 1])
async def test_an_integer_sqlite_cannot_hold_fails_as_it_did(store: SQLiteStore, big: int) -> None:
    with pytest.raises(OverflowError):
        await store._transaction(lambda tx: tx.executemany(_UPSERT.format(table="batched"),
                                                           [("a", "x", 1, 1, 1, 1), ("b", "y", big, 2, 2, 2)]))
    assert await _stored(store, "batched") == []


async def test_one_row_and_other_statements_are_run_as_given(store: SQLiteStore) -> None:
    assert len(await _statements(store, [("a", "x", 1, 1, 1, 1)], "batched")) == 1
    ran: list[str] = []
    assert store._writer is not None
    await store._writer.set_trace_callback(ran.append)
    await store._transaction(lambda tx: tx.executemany("UPDATE batched SET t = $2 WHERE id = $1", [("a", "y"), ("b", "z")]))
    await store._writer.set_trace_callback(None)
    assert [s for s in ran if s.startswith("UPDATE")] == ["UPDATE batched SET t = 'y' WHERE id = 'a'",
                                                          "UPDATE batched SET t = 'z' WHERE id = 'b'"]


def test_the_shapes_that_are_batched() -> None:
    assert _row_picks("INSERT INTO t (a, b) VALUES ($1, $2)") == (0, 1)
    assert _many_rows("INSERT INTO t (a, b) VALUES ($1, $2)", 3) == "INSERT INTO t (a, b) VALUES (?, ?), (?, ?), (?, ?)"
    reordered = "INSERT INTO t (a, b) VALUES ($2, $1) ON CONFLICT (a) DO NOTHING"
    assert _row_picks(reordered) == (1, 0)
    assert _many_rows(reordered, 2) == "INSERT INTO t (a, b) VALUES (?, ?), (?, ?) ON CONFLICT (a) DO NOTHING"
    upsert_by_mark = "INSERT INTO t (a) VALUES ($1) ON CONFLICT (a) DO UPDATE SET a = $1"
    for other in ("INSERT INTO t (a, b) VALUES ($1, 'x')", upsert_by_mark, "UPDATE t SET a = $1",
                  "INSERT INTO t (a) SELECT a FROM u"):
        assert _row_picks(other) is None, other

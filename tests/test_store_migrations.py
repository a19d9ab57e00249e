"""The store's decision records, its schema migrations under concurrent opens, and the store URLs it opens (fixtures
in tests/store_support.py)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal as D
from typing import Any

import pytest

from handlers.metering import money
from handlers.store import PostgresStore, SQLiteStore, Store, migrations, open_store
from handlers.store.base import DecisionQuery, Limits
from handlers.store.sqlbase import SQLStore
from tests.store_support import (
    NOW,
    V1_ROWS,
    Backend,
    fixture_backend,  # noqa: F401  (a fixture)
    fixture_store,  # noqa: F401  (a fixture)
)

# decision records


async def test_a_nul_from_a_caller_finds_nothing_and_never_breaks_a_write(store: Store) -> None:
    """PostgreSQL's text and jsonb refuse NUL; a caller can still send one in a path or a model name."""
    ws = await store.create_workspace("w")
    for lookup in (store.get_workspace("ws_\x00"), store.get_key("key_\x00"), store.get_decision("\x00"),
                   store.key_by_secret("sk-sw-\x00"), store.list_keys("ws_\x00"), store.revoke_key("\x00")):
        assert not await lookup
    record = {"id": "dec_nul", "created_at": NOW.isoformat(), "workspace_id": ws.id, "requested_model": "m\x00",
              "attempts": [{"error": "upstream said \x00"}], "note": "a \\u0000 that is text"}
    await store.save_decisions([record, {"id": "dec_ok", "created_at": NOW.isoformat()}])
    saved = await store.get_decision("dec_nul")
    assert saved is not None and saved["requested_model"] == "m\ufffd"
    assert saved["attempts"] == [{"error": "upstream said \ufffd"}] and saved["note"] == "a \\u0000 that is text"
    assert await store.get_decision("dec_ok") is not None


async def test_decisions_round_trip_and_prune(store: Store) -> None:
    old = {"id": "dec_old", "created_at": "2020-01-01T00:00:00+00:00", "workspace_id": "ws_1", "key_id": "key_1"}
    new = {
        "id": "dec_new",
        "created_at": NOW.isoformat(),
        "workspace_id": None,
        "key_id": "key_2",
        "candidates": [{"model": "m", "price": "0.0001", "ok": True, "score": 0.5}],
        "text": "naïve ✓",
    }
    await store.save_decisions([old, new])
    await store.save_decisions([])
    assert await store.get_decision("dec_old") == old
    assert await store.get_decision("dec_new") == new
    assert await store.get_decision("dec_missing") is None
    await store.save_decisions([old | {"note": "again"}])
    assert await store.get_decision("dec_old") == old | {"note": "again"}
    assert await store.prune_decisions(datetime(2021, 1, 1, tzinfo=UTC)) == 1
    assert await store.get_decision("dec_old") is None and await store.get_decision("dec_new") == new
    with pytest.raises(ValueError):
        await store.save_decisions([{"id": "no_time"}])


def _decision(n: int, minutes: int, **fields: Any) -> dict[str, Any]:
    at = datetime(2025, 3, 1, 12, 0, tzinfo=UTC) + timedelta(minutes=minutes)
    return {"id": f"dec_{n:02d}", "created_at": at.isoformat(), "workspace_id": "ws_1", "key_id": "key_1",
            "model": "m1", "outcome": "ok"} | fields


async def test_decisions_are_listed_newest_first_filtered_and_paged(store: Store) -> None:
    at = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
    records = [
        _decision(1, 0), _decision(2, 1, key_id="key_2"), _decision(3, 2, model=None, requested_model="asked"),
        _decision(4, 3, outcome="upstream_error", model=None), _decision(5, 4, workspace_id="ws_2", key_id="key_9"),
        _decision(6, 4), _decision(7, 4),  # the same instant: ordered by id
        _decision(8, 5, outcome=None),
    ]
    await store.save_decisions(records)

    async def ids(**where: Any) -> list[str]:
        return [r["id"] for r in await store.list_decisions(DecisionQuery(**where))]

    assert await ids(workspace_id="ws_1") == ["dec_08", "dec_07", "dec_06", "dec_04", "dec_03", "dec_02", "dec_01"]
    assert await ids() == ["dec_08", "dec_07", "dec_06", "dec_05", "dec_04", "dec_03", "dec_02", "dec_01"]
    assert await ids(workspace_id="ws_1", key_id="key_2") == ["dec_02"]
    assert await ids(model="asked") == ["dec_03"]  # no model answered: the one asked for, as usage counts it
    assert await ids(model="m1", workspace_id="ws_1") == ["dec_08", "dec_07", "dec_06", "dec_02", "dec_01"]
    assert await ids(outcome="upstream_error") == ["dec_04"]
    assert await ids(outcome="error") == ["dec_08", "dec_04"]  # every outcome but ok, as usage counts errors
    assert await ids(outcome="ok", workspace_id="ws_1", start=at + timedelta(minutes=1),
                     end=at + timedelta(minutes=4)) == ["dec_03", "dec_02"]
    page = await store.list_decisions(DecisionQuery(workspace_id="ws_1", limit=2))
    assert [r["id"] for r in page] == ["dec_08", "dec_07"] and page[0] == records[-1]
    last = page[-1]
    assert await ids(workspace_id="ws_1", limit=3, before=(datetime.fromisoformat(last["created_at"]), last["id"])) == [
        "dec_06", "dec_04", "dec_03"]
    assert await ids(workspace_id="ws_\x00", model="m\x00", key_id="\x00", outcome="\x00") == []


async def test_a_migration_lists_the_records_it_found_by_model_and_outcome(backend: Backend) -> None:
    """Records written before the list existed get their model and outcome columns from their JSON."""
    old = backend.new_store()
    await old.open(target=5)
    rows = [_decision(1, 0), _decision(2, 1, model="", requested_model="asked", outcome="upstream_error")]
    for row in rows:
        text = json.dumps(row).replace("'", "''")
        await backend.query("INSERT INTO decisions (id, created_at, workspace_id, key_id, record) VALUES "
                            f"('{row['id']}', '{row['created_at']}', 'ws_1', 'key_1', '{text}')")
    await old.close()
    new = backend.new_store()
    await new.open()
    try:
        assert new.migrated == ALL[5:]
        found = await new.list_decisions(DecisionQuery(workspace_id="ws_1", model="asked", outcome="error"))
        assert found == [rows[1]]
        assert [r["id"] for r in await new.list_decisions(DecisionQuery(model="m1", outcome="ok"))] == ["dec_01"]
    finally:
        await new.close()


# migrations and connections

ALL = tuple(m.version for m in migrations.load("sqlite"))  # every schema version, 1, 2, 3 ...


async def _open_together(stores: list[SQLStore]) -> None:
    failed = [r for r in await asyncio.gather(*(s.open() for s in stores), return_exceptions=True) if r is not None]
    assert not failed




async def test_migrations_upgrade_and_keep_rows(backend: Backend) -> None:
    first = backend.new_store()
    await first.open(target=1)
    await first.close()
    assert first.migrated == (1,)
    for statement in V1_ROWS:
        await backend.query(statement)
    stores = [backend.new_store() for _ in range(3)]
    try:
        await _open_together(stores)  # three workers starting at once
        every = [m.version for m in migrations.load(backend.kind)]
        assert sorted(s.migrated for s in stores) == [(), (), tuple(every[1:])]
        versions = await backend.query("SELECT version FROM schema_version ORDER BY version")
        assert [r[0] for r in versions] == every
        ws = await stores[0].get_workspace("ws_00000000000000aa")
        assert ws is not None and ws.credit == D("7.25") and ws.created_at == datetime(2024, 1, 1, tzinfo=UTC)
        key = await stores[1].key_by_secret("sk-sw-old")
        assert key is not None and key.scopes == ("inference",) and key.limits == Limits()
        await stores[2].finish(await stores[2].reserve(key.id, D("0.25"), NOW, money.hold), D("0.25"), money.finish)
        assert (await stores[0].get_workspace(ws.id)).credit == D("7.00")  # type: ignore[union-attr]
    finally:
        for s in stores:
            await s.close()


async def test_fresh_databases_migrate_once_under_concurrent_opens(backend: Backend) -> None:
    stores = [backend.new_store() for _ in range(3)]
    try:
        await _open_together(stores)
        assert sorted(s.migrated for s in stores) == [(), (), tuple(m.version for m in migrations.load(backend.kind))]
        await stores[0].ping()
    finally:
        for s in stores:
            await s.close()
    with pytest.raises(RuntimeError):
        await stores[0].ping()


def test_open_store_urls(tmp_path: Any) -> None:
    cases = {
        "sqlite:///data/specway.db": "data/specway.db",
        "sqlite:////var/lib/specway.db": "/var/lib/specway.db",
        "specway.db": "specway.db",
        str(tmp_path / "x.db"): str(tmp_path / "x.db"),
    }
    for url, path in cases.items():
        opened = open_store(url)
        assert isinstance(opened, SQLiteStore) and opened.path == path, url
    for url in ("postgresql://u:pw@db/specway", "postgres://u@db/specway"):
        opened = open_store(url)
        assert isinstance(opened, PostgresStore) and opened.url == url
    with pytest.raises(ValueError, match="'mysql'") as error:
        open_store("mysql://admin:hunter2@db/specway")
    assert "hunter2" not in str(error.value)
    with pytest.raises(ValueError):
        open_store("sqlite://relative.db")


async def test_a_store_waits_as_long_as_the_config_says(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Opened without a timeout, a store takes the config's default; the CLI's takes the configured one."""
    from generated.config import StoreSettings
    from handlers.cli.actions import with_store

    assert open_store(str(tmp_path / "d.db")).timeout == StoreSettings().timeout_seconds
    monkeypatch.delenv("SPECWAY_CONFIG", raising=False)
    path = tmp_path / "specway.yaml"
    path.write_text(f"store: {{url: 'sqlite:///{tmp_path / 'c.db'}', timeout_seconds: 0.75}}\n")

    async def timeout(store: Store, _: Any) -> float:
        return store.timeout

    assert await with_store(str(path), timeout) == 0.75

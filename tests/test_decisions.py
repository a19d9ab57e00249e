"""The decision recorder: batched writes that one refused record cannot hold back, and that a store outage keeps."""

from __future__ import annotations

from pathlib import Path

import pytest

from handlers.observability.decisions import Recorder
from handlers.store import SQLiteStore
from tests.store_support import NOW


def record(decision_id: str) -> dict[str, str]:
    return {"id": decision_id, "created_at": NOW.isoformat()}


async def test_a_refused_record_is_dropped_and_the_rest_written(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "s.db"))
    await store.open()
    recorder = Recorder(store)
    recorder.add(record("a"))
    recorder.add({"id": "refused"})  # no created_at: the store refuses it
    recorder.add(record("b"))
    await recorder.flush()
    assert await store.get_decision("a") == record("a") and await store.get_decision("b") == record("b")
    assert await recorder.get("refused") is None
    await store.close()


async def test_everything_stays_pending_while_the_store_is_away(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "s.db"))
    recorder = Recorder(store)  # the store is not open: every write fails
    recorder.add(record("a"))
    recorder.add(record("b"))
    with pytest.raises(RuntimeError):
        await recorder.flush()
    assert await recorder.get("a") == record("a")
    await store.open()
    await recorder.flush()
    assert await store.get_decision("a") == record("a") and await store.get_decision("b") == record("b")
    await store.close()

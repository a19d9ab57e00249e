"""Decision records, written off the hot path in batches and flushed at shutdown (nothing is lost)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from handlers.periodic import Periodic
from handlers.store.base import Store

_FLUSH_EVERY = 0.25  # seconds
_PRUNE_EVERY = 3600.0
_BATCH = 200


class Recorder:
    def __init__(self, store: Store, retention_days: float = 30) -> None:
        self._store = store
        self._retention = timedelta(days=retention_days)
        self._pending: dict[str, dict[str, Any]] = {}
        self._writer = Periodic(self.flush, _FLUSH_EVERY, "write decision records")
        self._pruner = Periodic(self.prune, _PRUNE_EVERY, "prune old decision records")

    def add(self, record: dict[str, Any]) -> None:
        self._pending[record["id"]] = record
        if len(self._pending) >= _BATCH:
            self._writer.wake()

    async def get(self, decision_id: str) -> dict[str, Any] | None:
        """A record, whether still pending here or already in the store."""
        return self._pending.get(decision_id) or await self._store.get_decision(decision_id)

    def start(self) -> None:
        self._writer.start()
        self._pruner.start()

    async def stop(self) -> None:
        await self._pruner.stop()
        await self._writer.stop()

    async def flush(self) -> None:
        while self._pending:
            batch = dict(list(self._pending.items())[:_BATCH])
            await self._store.save_decisions(list(batch.values()))
            for k in batch:
                self._pending.pop(k, None)

    async def prune(self) -> int:
        return await self._store.prune_decisions(datetime.now(UTC) - self._retention)

"""Decision records, written off the hot path in batches and flushed at shutdown (nothing is lost)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from handlers.store.base import Store

log = logging.getLogger("specway.decisions")
_FLUSH_EVERY = 0.25  # seconds
_BATCH = 200


class Recorder:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._pending: dict[str, dict[str, Any]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def add(self, record: dict[str, Any]) -> None:
        self._pending[record["id"]] = record
        if len(self._pending) >= _BATCH:
            self._wake.set()

    async def get(self, decision_id: str) -> dict[str, Any] | None:
        """A record, whether still pending here or already in the store."""
        return self._pending.get(decision_id) or await self._store.get_decision(decision_id)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.flush()

    async def flush(self) -> None:
        while self._pending:
            batch = dict(list(self._pending.items())[:_BATCH])
            await self._store.save_decisions(list(batch.values()))
            for k in batch:
                self._pending.pop(k, None)

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), _FLUSH_EVERY)
            self._wake.clear()
            try:
                await self.flush()
            except Exception:  # the store may be briefly away; records stay pending and are retried
                log.exception("could not write decision records; will retry")

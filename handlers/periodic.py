"""A background writer: runs `job` every `every` seconds (or sooner when woken), and once more at stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger("specway")


class Periodic:
    def __init__(self, job: Callable[[], Awaitable[object]], every: float, what: str) -> None:
        self._job = job
        self._every = every
        self._what = what
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    def wake(self) -> None:
        self._wake.set()

    async def stop(self) -> None:
        """The last run happens here, after the loop is gone, so nothing written before stop is lost."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._job()

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._every)
            self._wake.clear()
            try:
                await self._job()
            except Exception:  # the store may be briefly away; what is pending stays pending and is retried
                log.exception("could not %s; will retry", self._what)

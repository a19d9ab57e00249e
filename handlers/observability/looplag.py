"""The event loop's lag: a task that sleeps a short while, again and again, and observes how late it woke up. A
request arriving meanwhile waited as long, so the histogram is the tail that work holding the loop adds."""

from __future__ import annotations

import asyncio
import contextlib

from handlers.observability.metrics import LOOP_LAG

EVERY = 0.05  # seconds between looks: cheap (20 wake-ups a second), fine enough for stalls that matter


class LoopLag:
    def __init__(self, every: float = EVERY) -> None:
        self._every = every
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._watch())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time()
            await asyncio.sleep(self._every)
            LOOP_LAG.observe(max(0.0, loop.time() - asked - self._every))

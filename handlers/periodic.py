"""A background writer: runs `job` every `every` seconds (or sooner when woken), and once more at stop; and
`in_slices`, for the writer's work on a big batch without holding the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

log = logging.getLogger("specway")
_SLICE = 0.0001  # seconds of a writer's work on the loop before requests get their turn, at least
_SHARE = 0.1  # and at most this share of the loop's time while it is busy
_T, _R = TypeVar("_T"), TypeVar("_R")


async def in_slices(fn: Callable[[_T], _R], items: Iterable[_T]) -> list[_R]:
    """`fn` of every item, letting the loop run other tasks between slices: a flush of thousands of records then
    delays a request by one slice, not by the whole batch. A slice is a tenth of a millisecond, or a tenth of the
    time the loop took to come back to it, whichever is longer: under load a turn of the loop is tens of
    milliseconds, and in slices of half a millisecond the writer's work on a lease's records (its requests waiting
    for nothing, but the next charge and the records of a SIGKILL's window waiting for it) took a second or two;
    at one connection a request waits for a slice at each of its turns (half a millisecond slices: a p99 0.3 ms
    longer, bench/README.md "Garbage")."""
    done: list[_R] = []
    until = time.perf_counter() + _SLICE
    for item in items:
        done.append(fn(item))
        if time.perf_counter() > until:
            left = time.perf_counter()
            await asyncio.sleep(0)
            back = time.perf_counter()
            until = back + max(_SLICE, (back - left) * _SHARE)
    return done


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

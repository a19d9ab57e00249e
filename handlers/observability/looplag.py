"""The event loop's lag: a task that sleeps a short while, again and again, and observes how late it woke up. A
request arriving meanwhile waited as long, so the histogram is the tail that work holding the loop adds.

And the largest such work, kept off the loop: a full garbage collection walks every object the process holds, and
what startup made (the spec, the generated models, the catalog: ~150,000 objects) lives as long as the process;
walking them took 0.1 s of CPU on a 2-core machine, once every few thousand requests, while every request waited. Frozen
after startup (gc.freeze), a collection sees only what requests made.

And less often: a request's objects die with it, but a young-generation collection (Python's default: every 700
objects more allocated than freed) ran every few requests at 32 connections and found the objects of every request
in flight alive; it moved them to the older generations, whose collections walked them again. 5-6 % of a request's
CPU went to the collector, under 0.5 % with a threshold of 10,000 (bench/README.md, "Garbage")."""

from __future__ import annotations

import asyncio
import contextlib
import gc

from handlers.observability.metrics import LOOP_LAG

EVERY = 0.05  # seconds between looks: cheap (20 wake-ups a second), fine enough for stalls that matter
THRESHOLDS = (10_000, 10, 10)  # the collector's, while a gateway runs (young, middle, old)
_DEFAULT_THRESHOLDS = gc.get_threshold()


def freeze_startup() -> None:
    """Out of the collector's sight: what is alive now, the garbage collected first (not to keep it forever). Again
    after a configuration is swapped in, so that the old one's cycles are collected and the new one is frozen (one
    full pass on the loop then: 0.1-0.2 s)."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)


def thaw() -> None:
    """At stop: collectable again, as often as Python's default (a test process starts and stops many gateways)."""
    gc.unfreeze()
    gc.set_threshold(*_DEFAULT_THRESHOLDS)


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

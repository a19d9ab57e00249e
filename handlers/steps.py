"""An awaitable's first step, taken now: whether its result is in hand without waiting, and if not, the rest of it
to await later, as the task would have awaited it from the start.

A stream's reads are mostly of what is already buffered. Knowing that a read did not wait lets the relay write
what came together in one write (handlers/serving/runs.py) and arm an upstream's deadline only around the reads
that do wait (`within`): bench/README.md, "A stream's events in runs".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Generator
from typing import Any, Generic, TypeVar

log = logging.getLogger("specway")
_T = TypeVar("_T")


class Started(Generic[_T]):
    """`awaitable` stepped once, now: `done` when its result (`value`) came without waiting. Otherwise it waits on
    what it handed back, and awaiting this resumes it where it stopped. What the first step raises, this raises."""

    __slots__ = ("_steps", "_waits_on", "done", "value")

    def __init__(self, awaitable: Awaitable[_T]) -> None:
        self._steps = awaitable.__await__()
        try:
            self._waits_on = self._steps.send(None)
        except StopIteration as ready:
            self.done, self.value = True, ready.value
        else:
            self.done = False

    def __await__(self) -> Generator[Any, None, _T]:
        if self.done:
            return self.value
        steps, waits_on = self._steps, self._waits_on
        while True:
            try:
                sent = yield waits_on  # the task waits on it, then resumes the step with what it got
            except BaseException as exc:  # noqa: BLE001 - what the task throws in (a cancellation) goes to the step
                try:
                    waits_on = steps.throw(exc)
                except StopIteration as done:
                    return done.value  # type: ignore[no-any-return]
            else:
                try:
                    waits_on = steps.send(sent)
                except StopIteration as done:
                    return done.value  # type: ignore[no-any-return]

    async def abandon(self) -> None:
        """End a step nobody will await: GeneratorExit goes in where it waits, and the finally and `async with`
        blocks on its way out run (closing an upstream's answer may itself wait). What they raise is logged: whoever
        abandons it is on its way out already."""
        if self.done:
            return
        try:
            self._waits_on = self._steps.throw(GeneratorExit)
            await self
        except (GeneratorExit, StopIteration, StopAsyncIteration):
            pass
        except Exception:
            log.debug("error while ending an abandoned step", exc_info=True)


async def within(deadline: float, awaitable: Awaitable[_T]) -> _T:
    """`awaitable` by the loop's time `deadline` (TimeoutError after it), with a timer only when it has to wait: a
    timer costs 3.6 µs, and most reads (a stream's buffered events, a body that came with its head) do not wait."""
    step = Started(awaitable)
    if step.done:
        return step.value
    async with asyncio.timeout_at(deadline):
        return await step

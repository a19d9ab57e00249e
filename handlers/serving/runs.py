"""A stream's items in runs: those that were in hand together, so that they go to the caller in one write.

An upstream's stream often arrives several events to a chunk (a fast model, a proxy that buffers, the end of a
stream: the last text, the finish and the usage come together). Written one by one, each event cost its own pass
through the ASGI send chain and its own socket write; a run is written at once. Nothing waits for a run to fill:
a run ends where taking the next item would have to wait for the upstream, and goes out before that wait
(handlers/steps.py; bench/README.md, "A stream's events in runs").
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TypeVar

from handlers.steps import Started

_T = TypeVar("_T")


async def runs(items: AsyncIterator[_T]) -> AsyncIterator[list[_T]]:
    """`items` in runs, each as many as were in hand at once (at least one). What was in hand when `items` fails
    is yielded before the failure is raised. Close it (contextlib.aclosing) when its consumer stops early: a step
    that was waiting is then ended with GeneratorExit, so that `items` is not left running."""
    run: list[_T] = []
    while True:
        try:
            step = Started(items.__anext__())
        except StopAsyncIteration:
            break
        except BaseException:
            if run:
                yield run  # what was read before the failure reaches the caller first
            raise
        if step.done:
            run.append(step.value)
            continue
        if run:
            try:
                yield run
            except BaseException:
                await step.abandon()
                raise
            run = []
        try:
            run.append(await step)
        except StopAsyncIteration:
            break
    if run:
        yield run

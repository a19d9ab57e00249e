"""Server-sent events as upstreams send them: lines split as the SSE spec says, events with their names, and size
limits counted in the one loop every chunk goes through."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import NamedTuple

import httpx

from handlers.inference.upstreams.base import Sizes


class SseEvent(NamedTuple):
    event: str  # "message" when the server named none
    data: str


class Unreadable(Exception):
    """A streamed answer the transport cannot read: the upstream's failure, never the caller's."""


class TooLarge(Unreadable):
    """An answer or an event past its size limit (Sizes)."""


def answer_too_large(limit: int) -> TooLarge:
    return TooLarge(f"sent an answer larger than its limit of {limit} bytes (max_answer_bytes)")


_EOL = re.compile(rb"\r\n|\r|\n")
_SIZES = Sizes()  # frozen: one default serves every call


def _event_too_large(limit: int) -> TooLarge:
    return TooLarge(f"sent a stream event larger than its limit of {limit} bytes (max_event_bytes)")


async def _lines(chunks: AsyncIterator[bytes], sizes: Sizes) -> AsyncIterator[str]:
    """Lines split on CRLF, LF or CR only (httpx's aiter_lines also splits on U+2028 and friends, legal in JSON).

    Linear in the stream's size: a chunk with no line end is only set aside, and the pieces of a line are joined
    once, when its end arrives (re-splitting a growing buffer on every chunk made a long event quadratic). A line
    longer than `sizes.event`, or more than `sizes.answer` bytes in all, is TooLarge (counted here, in the one
    loop every chunk goes through).
    """
    pending: list[bytes] = []  # the pieces of the line not ended yet
    waiting = seen = 0  # their bytes; all the bytes so far
    async for chunk in chunks:
        seen += len(chunk)
        if seen > sizes.answer:
            raise answer_too_large(sizes.answer)
        if b"\n" not in chunk and b"\r" not in chunk and not (pending and pending[-1].endswith(b"\r")):
            pending.append(chunk)
            waiting += len(chunk)
            if waiting > sizes.event:
                raise _event_too_large(sizes.event)
            continue
        pending.append(chunk)
        data = b"".join(pending)
        end = len(data) - 1 if data.endswith(b"\r") else len(data)  # a CR may be half of a CRLF
        *lines, rest = _EOL.split(data[:end])
        pending = [rest + data[end:]]
        waiting = len(pending[0])
        for line in lines:
            yield line.decode("utf-8", "replace")
    # Whatever is left had no line end: an unfinished event, which SSE discards.


async def iter_sse(response: httpx.Response, sizes: Sizes = _SIZES) -> AsyncIterator[SseEvent]:
    """Server-sent events from a streaming response: `event:` names, multi-line data, comments, CRLF. An event or
    the whole answer past `sizes` is TooLarge."""
    event, data, size = "", [], 0
    async for line in _lines(response.aiter_bytes(), sizes):
        if not line:
            if data:
                yield SseEvent(event or "message", "\n".join(data))
            event, data, size = "", [], 0
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)
            size += len(value)
            if size > sizes.event:
                raise _event_too_large(sizes.event)
        # A comment has an empty field name; id and retry mean nothing to a one-shot request.

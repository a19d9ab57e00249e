"""AWS's binary event-stream framing (application/vnd.amazon.eventstream), as Bedrock's ConverseStream sends it:
decoded by botocore's own parser, which checks each message's prelude and message CRC32, never by hand.

Each message comes out as the SSE formats' events do (SseEvent): its event type (`:event-type`), or for an
exception its type (`:exception-type`), and its JSON payload as text. Size limits are counted here, in the one loop
every chunk goes through, as for SSE.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import httpx
import orjson

from handlers.inference.upstreams.base import Sizes
from handlers.inference.upstreams.sse import SseEvent, TooLarge, Unreadable, answer_too_large

if TYPE_CHECKING:  # botocore is imported with the first stream a bedrock upstream answers
    from botocore.eventstream import EventStreamMessage

_ERROR_EVENT = "internalServerException"  # an `error` message (a code and a message in headers, no payload)


async def iter_eventstream(response: httpx.Response, sizes: Sizes) -> AsyncIterator[SseEvent]:
    """The messages of an event-stream answer. A message whose checksums do not match, or that cannot be parsed,
    is Unreadable; one larger than `sizes.event`, or more than `sizes.answer` bytes in all, is TooLarge. Bytes left
    at the end are an unfinished message, which the reader sees as a stream cut before its end."""
    from botocore.eventstream import EventStreamBuffer, ParserError

    buffer = EventStreamBuffer()
    seen = pending = 0  # all the bytes so far; those of the message not parsed yet
    async for chunk in response.aiter_bytes():
        seen += len(chunk)
        if seen > sizes.answer:
            raise answer_too_large(sizes.answer)
        buffer.add_data(chunk)
        pending += len(chunk)
        try:
            messages = list(buffer)
        except ParserError as exc:
            raise Unreadable(f"sent an event-stream message that does not check out ({exc})") from None
        for message in messages:
            pending -= message.prelude.total_length
            if message.prelude.total_length > sizes.event:
                raise _event_too_large(sizes.event)
            yield event_of(message)
        if pending > sizes.event:
            raise _event_too_large(sizes.event)


def _event_too_large(limit: int) -> TooLarge:
    return TooLarge(f"sent a stream event larger than its limit of {limit} bytes (max_event_bytes)")


def event_of(message: EventStreamMessage) -> SseEvent:
    headers = message.headers
    kind = headers.get(":message-type")
    data = message.payload.decode("utf-8", "replace")
    if kind == "exception":
        return SseEvent(str(headers.get(":exception-type") or _ERROR_EVENT), data)
    if kind == "error":
        said = f"{headers.get(':error-code') or 'error'}: {headers.get(':error-message') or ''}".strip(": ")
        return SseEvent(_ERROR_EVENT, orjson.dumps({"message": said}).decode())
    return SseEvent(str(headers.get(":event-type") or ""), data)

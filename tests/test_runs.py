"""A stream's items in runs (handlers/serving/runs.py): what is in hand together comes together, nothing waits for a
run to fill, a failure comes after what was read before it, and a consumer that leaves ends the step it left."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import threading
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from handlers.serving.runs import runs
from tests.conftest import serve


async def _source(gate: asyncio.Event, seen: list[str]) -> AsyncIterator[str]:
    """a and b at once, then c once the gate opens, then d and e at once."""
    try:
        yield "a"
        yield "b"
        await gate.wait()
        yield "c"
        await asyncio.sleep(0)  # a turn of the loop: d is no longer in hand
        yield "d"
        yield "e"
    except BaseException as exc:
        seen.append(type(exc).__name__)
        raise
    finally:
        seen.append("finally")


async def test_what_is_in_hand_together_comes_in_one_run_and_nothing_waits_for_a_run_to_fill() -> None:
    gate, seen = asyncio.Event(), []
    got: list[list[str]] = []
    async with contextlib.aclosing(runs(_source(gate, seen))) as batches:
        async for run in batches:
            got.append(run)
            if run == ["a", "b"]:
                assert not gate.is_set()  # a and b came while c was still to come
                asyncio.get_running_loop().call_later(0.01, gate.set)
    assert got == [["a", "b"], ["c"], ["d", "e"]]
    assert seen == ["finally"]


async def test_an_iterator_that_never_waits_is_one_run() -> None:
    async def at_once() -> AsyncIterator[int]:
        for i in range(5):
            yield i

    assert [run async for run in runs(at_once())] == [[0, 1, 2, 3, 4]]


async def test_a_failure_comes_after_what_was_read_before_it() -> None:
    async def failing() -> AsyncIterator[str]:
        yield "a"
        await asyncio.sleep(0)
        yield "b"
        yield "c"
        raise ValueError("upstream broke")

    batches = runs(failing())
    assert await anext(batches) == ["a"]
    assert await anext(batches) == ["b", "c"]
    with pytest.raises(ValueError, match="upstream broke"):
        await anext(batches)


async def test_a_consumer_that_leaves_ends_the_waiting_step_and_the_source_can_be_closed() -> None:
    gate, seen = asyncio.Event(), []
    source = _source(gate, seen)
    async with contextlib.aclosing(runs(source)) as batches:
        assert await anext(batches) == ["a", "b"]  # the step for c is started and waits on the gate
    assert seen == ["GeneratorExit", "finally"]  # ended where it waited, its finally run
    await source.aclose()  # not left running: closing it again is a no-op, not "already running"


async def test_a_cancelled_consumer_cancels_the_waiting_step() -> None:
    gate, seen = asyncio.Event(), []
    started = asyncio.Event()

    async def consume() -> None:
        async with contextlib.aclosing(runs(_source(gate, seen))) as batches:
            async for _ in batches:
                started.set()

    task = asyncio.create_task(consume())
    await started.wait()
    await asyncio.sleep(0.01)  # the consumer now waits in the step for c
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["CancelledError", "finally"]


# Through a live gateway: an upstream that sends a whole stream in one write, read by the caller frame by frame.

_WORDS = ("one", " two", " three", " four", " five", " six", " seven", " eight", " nine", " ten")


def _upstream_stream() -> bytes:
    def chunk(delta: dict[str, Any], finish: str | None = None, usage: dict[str, int] | None = None) -> bytes:
        body: dict[str, Any] = {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1,
                                "model": "fast-up", "choices": [] if usage else
                                [{"index": 0, "delta": delta, "finish_reason": finish}]}
        if usage:
            body["usage"] = usage
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": w}) for w in _WORDS]
    events += [chunk({}, "stop"), chunk({}, usage={"prompt_tokens": 5, "completion_tokens": 10, "total_tokens": 15})]
    body = b"".join(events) + b"data: [DONE]\n\n"
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(body)) + body


@contextlib.contextmanager
def _one_write_upstream() -> Iterator[str]:
    """An OpenAI-compatible upstream that writes each streamed answer whole, in one write."""
    loop = asyncio.new_event_loop()
    answer = _upstream_stream()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(re.search(rb"(?i)content-length: *(\d+)", head)[1])  # type: ignore[index]
                await reader.readexactly(length)
                writer.write(answer)
                await writer.drain()

    server = loop.run_until_complete(asyncio.start_server(handle, "127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


def _frames(url: str, key: str, body: dict[str, Any]) -> list[bytes]:
    """The chunked frames of a streamed answer as the gateway wrote them (one per ASGI body message)."""
    parts = urllib.parse.urlsplit(url)
    payload = json.dumps(body).encode()
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer %s\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (key.encode(), len(payload),
                                                                                          payload))
        data = b""
        while not data.endswith(b"\r\n0\r\n\r\n"):
            more = sock.recv(65536)
            assert more, data
            data += more
    head, _, rest = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in head.lower(), head
    frames = []
    while True:
        size, _, rest = rest.partition(b"\r\n")
        if int(size, 16) == 0:
            return frames
        frames.append(rest[:int(size, 16)])
        rest = rest[int(size, 16) + 2:]


def test_a_stream_that_arrives_in_one_write_goes_out_in_few(tmp_path: Path) -> None:
    with _one_write_upstream() as base:
        config = {"upstreams": {"fast": {"kind": "openai", "base_url": base}},
                  "models": [{"id": "acme/fast", "upstream": "fast", "name": "fast-up"}]}
        with serve(config, tmp_path) as g:
            frames = _frames(g.url, g.key, {"model": "acme/fast", "messages": [{"role": "user", "content": "hi"}],
                                            "stream": True, "stream_options": {"include_usage": True}})
    events = [e for e in b"".join(frames).split(b"\n\n") if e]
    chunks = [json.loads(e.removeprefix(b"data: ")) for e in events[:-1]]
    assert events[-1] == b"data: [DONE]"
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == "".join(_WORDS)
    assert chunks[-1]["usage"]["completion_tokens"] == 10
    # The first event with the head, the rest of what came together in one write, the end: not one write an event.
    assert len(frames) <= 4 < len(events), [len(f) for f in frames]

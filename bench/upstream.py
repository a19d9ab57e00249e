"""A fast fake OpenAI-compatible upstream for load tests: raw asyncio HTTP/1.1 with keep-alive, no framework.

    python -m bench.upstream --port 18000
    python -m bench.upstream --port 18000 --stream-chunks 20 --chunk-delay 1.5   # slow streams

POST .../chat/completions answers a fixed ~1 KB chat.completion, or, when the body has "stream": true, an SSE stream
(chunked transfer encoding) of 10 chat.completion.chunk events, a usage chunk with no choices, and `data: [DONE]`;
for the model `bench-paced` the stream's events come one every 20 ms (the first 20 ms after the head), as a real
upstream's tokens do, so that the time to the first event can be told from the rest.
Every answer is built once at import, so a request costs one header parse, one JSON parse and one write.
With --chunk-delay, a stream is instead --stream-chunks content events, one every --chunk-delay seconds (timers on
the loop, no task per stream), then the usage chunk and `data: [DONE]`: a slow model, for holding many streams open.
GET /health answers 200 (readiness); GET .../models lists the one model. Not product code.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from asyncio import TimerHandle
from dataclasses import dataclass
from typing import Any

try:
    import orjson

    _loads: Any = orjson.loads
except ImportError:  # pragma: no cover - the project venv has orjson
    _loads = json.loads

MODEL = "bench-model"
PACED_MODEL = "bench-paced"  # streams one event every GAP seconds
GAP = 0.020
CREATED = 1_764_000_000
_MAX_HEAD = 64 * 1024
_MAX_BODY = 16 * 1024 * 1024
WORDS = ("Specway", " relays", " this", " answer", " from", " a", " fake", " upstream", " built", " for speed.")
USAGE = {"prompt_tokens": 250, "completion_tokens": 180, "total_tokens": 430}


def _json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def completion_body() -> bytes:
    text = "".join(WORDS) + " " + "The quick brown fox jumps over the lazy dog. " * 14
    return _json({
        "id": "chatcmpl-bench0000000000000000000000",
        "object": "chat.completion",
        "created": CREATED,
        "model": MODEL,
        "system_fingerprint": "fp_bench",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text.strip(), "refusal": None},
            "logprobs": None,
            "finish_reason": "stop",
        }],
        "usage": USAGE,
    })


def _chunk(delta: dict[str, Any], finish: str | None, usage: dict[str, int] | None = None) -> dict[str, Any]:
    choices = [] if usage else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
    body: dict[str, Any] = {"id": "chatcmpl-bench0000000000000000000000", "object": "chat.completion.chunk",
                            "created": CREATED, "model": MODEL, "system_fingerprint": "fp_bench", "choices": choices}
    if usage:
        body["usage"] = usage
    return body


def stream_events(chunks: int = len(WORDS)) -> list[bytes]:
    """The SSE events of one streamed answer: `chunks` content chunks (role first, finish last), usage, [DONE]."""
    events = []
    for i in range(chunks):
        word = WORDS[i % len(WORDS)]
        delta = {"role": "assistant", "content": word} if i == 0 else {"content": word}
        events.append(_chunk(delta, "stop" if i == chunks - 1 else None))
    events.append(_chunk({}, None, usage=USAGE))
    return [b"data: " + _json(e) + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]


def _response(status: str, ctype: str, body: bytes, close: bool) -> bytes:
    conn = b"close" if close else b"keep-alive"
    return (b"HTTP/1.1 " + status.encode() + b"\r\nServer: bench-upstream\r\nContent-Type: " + ctype.encode()
            + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\nConnection: " + conn + b"\r\n\r\n" + body)


def _stream_parts(close: bool, chunks: int = len(WORDS)) -> tuple[bytes, list[bytes]]:
    """The head of a streamed answer, and its chunked frames (the last one ends the body)."""
    conn = b"close" if close else b"keep-alive"
    head = (b"HTTP/1.1 200 OK\r\nServer: bench-upstream\r\nContent-Type: text/event-stream\r\n"
            b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\nConnection: " + conn + b"\r\n\r\n")
    frames = [b"%x\r\n%s\r\n" % (len(e), e) for e in stream_events(chunks)]
    frames[-1] += b"0\r\n\r\n"
    return head, frames


def _stream_response(close: bool) -> bytes:
    head, frames = _stream_parts(close)
    return head + b"".join(frames)


# A paced stream's writes: the head at once, then each event GAP seconds after the one before
PACED = tuple([head, *frames] for head, frames in (_stream_parts(False), _stream_parts(True)))


_MODELS = _json({"object": "list", "data": [{"id": MODEL, "object": "model", "created": CREATED, "owned_by": "bench"}]})
_ERROR = _json({"error": {"message": "not valid JSON", "type": "invalid_request_error", "code": None, "param": None}})
# (keep-alive, close) variants of every answer, built once.
ANSWERS = {
    "complete": (_response("200 OK", "application/json", completion_body(), False),
                 _response("200 OK", "application/json", completion_body(), True)),
    "stream": (_stream_response(False), _stream_response(True)),
    "models": (_response("200 OK", "application/json", _MODELS, False),
               _response("200 OK", "application/json", _MODELS, True)),
    "health": (_response("200 OK", "text/plain", b"ok", False), _response("200 OK", "text/plain", b"ok", True)),
    "bad": (_response("400 Bad Request", "application/json", _ERROR, False),
            _response("400 Bad Request", "application/json", _ERROR, True)),
    "missing": (_response("404 Not Found", "text/plain", b"not found", False),
                _response("404 Not Found", "text/plain", b"not found", True)),
}


def _answer(method: str, path: str, body: bytes) -> str:
    path = path.split("?", 1)[0]
    if method == "POST" and path.endswith("/chat/completions"):
        try:
            doc = _loads(body)
        except ValueError:
            return "bad"
        if not isinstance(doc, dict) or doc.get("stream") is not True:
            return "complete"
        return "paced" if doc.get("model") == PACED_MODEL else "stream"
    if method == "GET" and path.endswith("/models"):
        return "models"
    if method == "GET" and path in ("/health", "/"):
        return "health"
    return "missing"


def _dechunk(buf: bytearray, start: int) -> tuple[bytes, int] | None:
    """A chunked body that starts at `start`: (body, end offset), or None while incomplete."""
    out, pos = bytearray(), start
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        size = int(bytes(buf[pos:eol]).split(b";", 1)[0], 16)
        if size == 0:
            end = buf.find(b"\r\n\r\n", eol)  # no trailers expected; skip any
            return (bytes(out), end + 4) if end >= 0 else None
        if len(buf) < eol + 2 + size + 2:
            return None
        out += buf[eol + 2:eol + 2 + size]
        pos = eol + 2 + size + 2


def _writes(head: bytes, frames: list[bytes]) -> list[bytes]:
    """A stream's writes: the head goes with the first event."""
    return [head + frames[0], *frames[1:]]


@dataclass(frozen=True)
class SlowStreams:
    """A stream's content events and the seconds between two of them."""

    chunks: int
    delay: float

    def parts(self) -> tuple[list[bytes], list[bytes]]:
        """The (keep-alive, close) writes of one slow stream."""
        return _writes(*_stream_parts(False, self.chunks)), _writes(*_stream_parts(True, self.chunks))


class HttpConnection(asyncio.Protocol):
    """One client connection: parse pipelined HTTP/1.1 requests from a buffer and answer each with one write (or,
    for a slow stream, one write per event on a timer, the requests behind it waiting in the buffer)."""

    def __init__(self, slow: SlowStreams | None = None) -> None:
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.slow_parts = slow.parts() if slow else None
        self.slow_parts_gap = slow.delay if slow else 0.0
        self.streaming: TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self._drain()

    def _drain(self) -> None:
        try:
            while self.transport is not None and self.streaming is None and self._one():
                pass
        except ValueError:  # a Content-Length or chunk size that is not a number
            self._fail()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.streaming is not None:
            self.streaming.cancel()
            self.streaming = None

    def _one(self) -> bool:
        """Answer one complete request from the buffer; False when more bytes are needed."""
        head_end = self.buf.find(b"\r\n\r\n")
        if head_end < 0:
            if len(self.buf) > _MAX_HEAD:
                self._fail()
            return False
        lines = bytes(self.buf[:head_end]).decode("latin-1").split("\r\n")
        try:
            method, target, version = lines[0].split(" ", 2)
        except ValueError:
            self._fail()
            return False
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip().lower()
        start = head_end + 4
        if "chunked" in headers.get("transfer-encoding", ""):
            got = _dechunk(self.buf, start)
            if got is None:
                return False
            body, end = got
        else:
            length = int(headers.get("content-length") or 0)
            if length > _MAX_BODY:
                self._fail()
                return False
            if len(self.buf) < start + length:
                return False
            end = start + length
            body = bytes(self.buf[start:end])
        del self.buf[:end]
        conn = headers.get("connection", "")
        close = conn == "close" or (version == "HTTP/1.0" and conn != "keep-alive")
        assert self.transport is not None
        answer = _answer(method, target, body)
        if answer == "stream" and self.slow_parts is not None:
            self._write_timed(self.slow_parts[close], 0, self.slow_parts_gap, close)
            return False
        if answer == "paced":
            self._write_timed(PACED[close], 0, GAP, close)
            return False
        self.transport.write(ANSWERS[answer][close])
        if close:
            self.transport.close()
            self.transport = None
            return False
        return True

    def _write_timed(self, parts: list[bytes], i: int, gap: float, close: bool) -> None:
        """A stream's writes, one every `gap` seconds on a timer; requests behind it wait in the buffer."""
        self.streaming = None
        if self.transport is None:
            return
        self.transport.write(parts[i])
        if i + 1 < len(parts):
            self.streaming = asyncio.get_running_loop().call_later(gap, self._write_timed, parts, i + 1, gap, close)
        elif close:
            self.transport.close()
            self.transport = None
        else:
            self._drain()  # a request that came in behind the stream

    def _fail(self) -> None:
        if self.transport is not None:
            self.transport.write(_response("400 Bad Request", "text/plain", b"bad request", True))
            self.transport.close()
            self.transport = None


async def serve(host: str, port: int, slow: SlowStreams | None = None) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: HttpConnection(slow), host, port, backlog=4096, reuse_address=True)
    bound = server.sockets[0].getsockname()[1]
    print(f"bench-upstream listening on http://{host}:{bound}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.upstream", description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=18000, help="0 picks a free port (printed on stdout)")
    p.add_argument("--stream-chunks", type=int, default=len(WORDS), help="content events of a slow stream")
    p.add_argument("--chunk-delay", type=float, default=0.0,
                   help="seconds between a stream's events; 0 (default) writes a stream at once")
    args = p.parse_args(argv)
    slow = SlowStreams(args.stream_chunks, args.chunk_delay) if args.chunk_delay > 0 else None
    try:
        import uvloop

        factory: Any = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - the project venv has uvloop (uvicorn[standard])
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(serve(args.host, args.port, slow))
    return 0


if __name__ == "__main__":
    sys.exit(main())

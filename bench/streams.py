"""Many streaming requests at once on raw asyncio sockets: one connection per request (`Connection: close`), the
answer read to the end and kept, with the times it was sent, began and ended. Used by bench/scale.py."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field


@dataclass
class Answer:
    """One request's fate: its times (perf_counter seconds), status and headers, or the error it met."""

    started: float = 0.0  # connect began
    sent: float = 0.0  # request written
    first: float = 0.0  # first byte of the answer
    ended: float = 0.0  # connection closed by the gateway, or the error
    raw: bytearray = field(default_factory=bytearray)
    error: str | None = None  # connect | reset | timeout | incomplete

    @property
    def status(self) -> int | None:
        line = bytes(self.raw[:self.raw.find(b"\r\n")])
        parts = line.split(b" ", 2)
        return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else None

    def head_and_body(self) -> tuple[dict[str, str], bytes]:
        end = self.raw.find(b"\r\n\r\n")
        if end < 0:
            return {}, b""
        headers = {}
        for line in bytes(self.raw[:end]).decode("latin-1").split("\r\n")[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        body = bytes(self.raw[end + 4:])
        return headers, dechunk(body) if "chunked" in headers.get("transfer-encoding", "").lower() else body


def dechunk(body: bytes) -> bytes:
    """A chunked body's content; what follows a missing or torn frame is dropped (the stream did not end)."""
    out, pos = bytearray(), 0
    while True:
        eol = body.find(b"\r\n", pos)
        if eol < 0:
            return bytes(out)
        try:
            size = int(body[pos:eol].split(b";", 1)[0], 16)
        except ValueError:
            return bytes(out)
        if size == 0 or len(body) < eol + 2 + size:
            return bytes(out)
        out += body[eol + 2:eol + 2 + size]
        pos = eol + 2 + size + 2


class _Reader(asyncio.Protocol):
    def __init__(self, answer: Answer, begun: asyncio.Future[None], done: asyncio.Future[None]) -> None:
        self.answer = answer
        self.begun, self.done = begun, done

    def data_received(self, data: bytes) -> None:
        if not self.answer.raw:
            self.answer.first = time.perf_counter()
            _settle(self.begun)
        self.answer.raw += data

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.answer.ended = time.perf_counter()
        if exc is not None and self.answer.error is None:
            self.answer.error = "reset"
        _settle(self.begun)
        _settle(self.done)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def http_request(host: str, port: int, path: str, body: bytes, headers: dict[str, str]) -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", "Content-Type: application/json",
             f"Content-Length: {len(body)}", "Connection: close", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def one(host: str, port: int, request: bytes, arriving: asyncio.Semaphore, timeout: float,
              answer: Answer) -> Answer:
    """Send `request` on a new connection and read until the gateway closes it (or `timeout` from the start).
    `arriving` bounds the requests between connecting and the answer's first byte: clients that come faster than
    the gateway takes them would overflow its listen backlog, and the kernel resets what it drops."""
    loop = asyncio.get_running_loop()
    begun: asyncio.Future[None] = loop.create_future()
    done: asyncio.Future[None] = loop.create_future()
    answer.started = time.perf_counter()
    try:
        async with arriving:
            try:
                transport, _ = await asyncio.wait_for(
                    loop.create_connection(lambda: _Reader(answer, begun, done), host, port), timeout)
            except (OSError, TimeoutError):
                answer.error, answer.ended = "connect", time.perf_counter()
                return answer
            answer.sent = time.perf_counter()
            transport.write(request)
            await asyncio.wait_for(asyncio.shield(begun), _left(answer, timeout))
        await asyncio.wait_for(asyncio.shield(done), _left(answer, timeout))
    except TimeoutError:
        answer.error, answer.ended = "timeout", time.perf_counter()
        transport.abort()
    return answer


def _left(answer: Answer, timeout: float) -> float:
    return max(0.1, timeout - (time.perf_counter() - answer.started))

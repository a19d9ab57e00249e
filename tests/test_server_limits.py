"""The server's limits, with raw sockets against `specway serve`: header size (431), header and body time (408),
idle keep-alive, connections per worker (503). Every answer is our error shape and ends the connection."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import free_port, proc_kib, spawn, stop

HANG = 15.0  # a generous bound for anything configured to take about a second


@dataclass
class Gateway:
    port: int
    key: str
    pid: int
    log: Path


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: Any
    closed: bool | None = None  # the server ended the connection after it (None: not looked at)


def _start(tmp_path: Path, name: str, server: dict[str, Any]) -> Iterator[Gateway]:
    where = tmp_path / name
    where.mkdir()
    config = where / "specway.yaml"
    config.write_text(yaml.safe_dump({"server": {"log_level": "info", **server},
                                      "store": {"url": f"sqlite:///{where / 's.db'}"}}))
    port = free_port()
    proc, key = spawn(config, port, where / "serve.log")
    try:
        yield Gateway(port, key, proc.pid, where / "serve.log")
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def tight(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """Every limit small, so that each shows within a second or a few kilobytes."""
    yield from _start(tmp_path_factory.mktemp("limits"), "tight", {
        "header_limit_bytes": 4096, "header_timeout_seconds": 1, "body_timeout_seconds": 1, "keepalive_seconds": 1,
        "max_connections": 1000})


@pytest.fixture(scope="module")
def default(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    yield from _start(tmp_path_factory.mktemp("limits"), "default", {})


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=HANG)
    sock.settimeout(HANG)
    return sock


def _read_answer(sock: socket.socket, then_closed: bool = False) -> Answer:
    """One response; with `then_closed`, also whether the server then ended the connection (within HANG)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the connection closed without an answer: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "the connection closed inside the body"
        rest += chunk
    closed = None
    if then_closed:
        try:
            closed = rest[length:] == b"" and sock.recv(1) == b""
        except TimeoutError:
            closed = False
    return Answer(int(lines[0].split()[1]), headers, json.loads(rest[:length]) if length else None, closed)


def _request(path: str = "/healthz", method: str = "GET", headers: dict[str, str] | None = None,
             body: bytes = b"") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: gateway", *(f"{k}: {v}" for k, v in (headers or {}).items())]
    if body and "Content-Length" not in (headers or {}):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _assert_error(answer: Answer, status: int, code: str) -> None:
    assert answer.status == status, answer
    assert answer.headers["content-type"] == "application/json"
    assert answer.body["type"] == "error" and answer.body["error"]["code"] == code, answer.body
    assert set(answer.body["error"]) == {"type", "code", "message", "param"}
    assert answer.closed, "the connection must be closed after a refusal (read with then_closed=True)"


# header size


def test_headers_over_the_limit_get_431_and_under_it_are_served(tight: Gateway) -> None:
    with _connect(tight.port) as sock:
        sock.sendall(_request(headers={"X-Big": "a" * 3000}))
        assert _read_answer(sock).status == 200
    with _connect(tight.port) as sock:
        sock.sendall(_request(headers={"X-Big": "a" * 5000}))  # one write: the headers complete in one read
        _assert_error(_read_answer(sock, then_closed=True), 431, "headers_too_large")
    with _connect(tight.port) as sock:  # many small headers count together
        sock.sendall(_request(headers={f"X-H{i}": "b" * 90 for i in range(50)}))
        _assert_error(_read_answer(sock, then_closed=True), 431, "headers_too_large")


def test_an_unfinished_header_over_the_limit_gets_431_before_it_ends(tight: Gateway) -> None:
    with _connect(tight.port) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gateway\r\nX-Endless: " + b"c" * 8192)  # no end of headers
        _assert_error(_read_answer(sock, then_closed=True), 431, "headers_too_large")


def test_the_default_refuses_a_one_megabyte_header(default: Gateway) -> None:
    with _connect(default.port) as sock:
        sock.sendall(_request(headers={"X-Big": "d" * 40_000}))  # over the default 32 KiB
        _assert_error(_read_answer(sock, then_closed=True), 431, "headers_too_large")
    with _connect(default.port) as sock:
        try:
            sock.sendall(_request(headers={"X-Big": "d" * 1_000_000}))
        except OSError:
            pass  # the server may stop reading first; what it answered is still there to read
        _assert_error(_read_answer(sock, then_closed=True), 431, "headers_too_large")


def test_a_hundred_megabyte_header_does_not_grow_the_worker(default: Gateway) -> None:
    before = proc_kib(default.pid, "VmHWM")
    piece = b"e" * (1 << 20)
    sent = 0
    with _connect(default.port) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gateway\r\nX-Huge: ")
        deadline = time.monotonic() + HANG
        try:
            while sent < 100 << 20 and time.monotonic() < deadline:
                sock.sendall(piece)
                sent += len(piece)
        except OSError:
            pass  # refused and closed: the point
    grown_mb = (proc_kib(default.pid, "VmHWM") - before) / 1024
    assert grown_mb < 30, f"the worker's peak memory grew by {grown_mb:.0f} MB for a {sent >> 20} MB header"
    with _connect(default.port) as sock:  # and it still serves
        sock.sendall(_request())
        assert _read_answer(sock).status == 200


def test_pipelined_requests_are_each_answered(tight: Gateway) -> None:
    with _connect(tight.port) as sock, sock.makefile("rb") as answers:  # one buffer: both answers may come at once
        sock.sendall(_request() + _request(headers={"X-Second": "yes"}))
        statuses = []
        for _ in range(2):
            statuses.append(int(answers.readline().split()[1]))
            length = 0
            while (line := answers.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                length = int(value) if name.strip().lower() == "content-length" else length
            assert json.loads(answers.read(length))["status"] == "ok"
        assert statuses == [200, 200]


def test_a_request_that_is_not_http_gets_400_in_our_shape(tight: Gateway) -> None:
    with _connect(tight.port) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nBad Header Name: x\r\n\r\n")
        _assert_error(_read_answer(sock, then_closed=True), 400, "invalid_http")


# time


async def _slowloris(port: int, tail: bytes) -> Answer:
    """Headers one byte at a time, a byte every 0.3 s, never finished; the answer that ends it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def trickle() -> None:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: gateway\r\n")
        for byte in tail:
            await asyncio.sleep(0.3)
            writer.write(bytes([byte]))
            await writer.drain()

    dripping = asyncio.ensure_future(trickle())
    try:
        raw = await asyncio.wait_for(reader.read(), HANG)  # until the server closes
    finally:
        dripping.cancel()
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:])
    return Answer(int(head.split()[1]), {k.lower(): v for k, v in headers.items()}, json.loads(body), closed=True)


def test_slowloris_connections_get_408_and_are_closed(tight: Gateway) -> None:
    async def run() -> list[Answer]:
        return await asyncio.gather(*(_slowloris(tight.port, b"X-Slow: " + b"s" * 200) for _ in range(300)))

    started = time.monotonic()
    answers = asyncio.run(run())
    for answer in answers:
        _assert_error(answer, 408, "header_timeout")
    assert time.monotonic() - started < HANG
    with _connect(tight.port) as sock:
        sock.sendall(_request())
        assert _read_answer(sock).status == 200


def test_a_connection_that_sends_nothing_gets_408(tight: Gateway) -> None:
    with _connect(tight.port) as sock:
        _assert_error(_read_answer(sock, then_closed=True), 408, "header_timeout")


def test_a_content_length_that_promises_more_than_is_sent_gets_408(tight: Gateway) -> None:
    headers = {"Authorization": f"Bearer {tight.key}", "Content-Type": "application/json", "Content-Length": "1000"}
    with _connect(tight.port) as sock:
        sock.sendall(_request("/v1/chat/completions", "POST", headers, b'{"model": "specway/echo"'))
        _assert_error(_read_answer(sock, then_closed=True), 408, "body_timeout")


def test_a_body_that_trickles_past_the_timeout_gets_408(tight: Gateway) -> None:
    body = json.dumps({"model": "specway/echo", "messages": [{"role": "user", "content": "hi " * 40}]}).encode()
    headers = {"Authorization": f"Bearer {tight.key}", "Content-Type": "application/json",
               "Content-Length": str(len(body))}
    stop_dripping = threading.Event()

    def drip(sock: socket.socket) -> None:  # a byte every 0.1 s: the whole body would take about 15 s
        for byte in body:
            if stop_dripping.wait(0.1):
                return
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                return

    with _connect(tight.port) as sock:
        sock.sendall(_request("/v1/chat/completions", "POST", headers))
        dripping = threading.Thread(target=drip, args=(sock,))
        dripping.start()
        try:
            _assert_error(_read_answer(sock, then_closed=True), 408, "body_timeout")
        finally:
            stop_dripping.set()
            dripping.join()


def test_a_body_that_arrives_in_time_is_served(tight: Gateway) -> None:
    body = json.dumps({"model": "specway/echo", "messages": [{"role": "user", "content": "hi"}]}).encode()
    headers = {"Authorization": f"Bearer {tight.key}", "Content-Type": "application/json"}
    with _connect(tight.port) as sock:
        sock.sendall(_request("/v1/chat/completions", "POST", headers, body))
        answer = _read_answer(sock)
        assert answer.status == 200, answer
        sock.sendall(_request())  # the same connection carries the next request
        assert _read_answer(sock).status == 200


def test_an_idle_keepalive_connection_is_closed(tight: Gateway) -> None:
    with _connect(tight.port) as sock:
        sock.sendall(_request())
        assert _read_answer(sock).status == 200
        started = time.monotonic()
        assert sock.recv(1) == b""  # the server closes it: keepalive_seconds is 1
        assert time.monotonic() - started < HANG


# connections


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    yield from _start(tmp_path_factory.mktemp("limits"), "capped", {"max_connections": 20,
                                                                    "header_timeout_seconds": 60})


def test_connections_over_the_limit_get_503_and_a_freed_slot_serves_again(capped: Gateway) -> None:
    held = [_connect(capped.port) for _ in range(60)]
    try:
        time.sleep(0.5)  # every connection accepted before any request
        for sock in held:
            sock.sendall(_request())
        answers = [_read_answer(sock) for sock in held]
        for sock, answer in zip(held, answers, strict=True):
            if answer.status != 200:
                answer.closed = sock.recv(1) == b""
        served = [a for a in answers if a.status == 200]
        refused = [a for a in answers if a.status != 200]
        assert len(served) == 20 and len(refused) == 40
        for answer in refused:
            _assert_error(answer, 503, "overloaded")
            assert answer.headers["retry-after"] == "1" and answer.body["error"]["type"] == "overloaded_error"
        for sock, answer in zip(held, answers, strict=True):  # a served connection carries another request
            if answer.status == 200:
                sock.sendall(_request())
                assert _read_answer(sock).status == 200
        over = _connect(capped.port)
        over.sendall(_request())
        _assert_error(_read_answer(over, then_closed=True), 503, "overloaded")
        over.close()
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + HANG
    while True:  # the server sees the closes shortly
        with _connect(capped.port) as sock:
            sock.sendall(_request())
            if _read_answer(sock).status == 200:
                break
        assert time.monotonic() < deadline, "no slot came free after every connection closed"
        time.sleep(0.1)


def test_refusals_are_logged_and_counted(tight: Gateway) -> None:
    with _connect(tight.port) as sock:
        sock.sendall(_request(headers={"X-Big": "a" * 5000}))
        _assert_error(_read_answer(sock, then_closed=True), 431, "headers_too_large")
    with _connect(tight.port) as sock:
        _assert_error(_read_answer(sock, then_closed=True), 408, "header_timeout")
    lines = [json.loads(line) for line in tight.log.read_text().splitlines() if line.startswith("{")]
    said = [(line.get("route"), line.get("status"), line.get("error")) for line in lines
            if line.get("logger") == "specway.requests"]
    assert ("/healthz", 431, "headers_too_large") in said and ("unmatched", 408, "header_timeout") in said
    with _connect(tight.port) as sock:
        sock.sendall(_request("/metrics"))
        answer = _read_text(sock)
    labels = ('route="/healthz"', 'method="GET"', 'status="431"')
    assert any(line.startswith("specway_requests_total{") and all(label in line for label in labels)
               for line in answer.splitlines()), answer


def _read_text(sock: socket.socket) -> str:
    """A whole response as text, its body sent with Content-Length or chunked."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, rest = data.partition(b"\r\n\r\n")
    if b"content-length:" in head.lower():
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        while len(rest) < length:
            rest += sock.recv(65536)
        return rest.decode()
    while not rest.endswith(b"0\r\n\r\n"):
        rest += sock.recv(65536)
    return rest.decode()

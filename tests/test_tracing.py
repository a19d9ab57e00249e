"""OpenTelemetry tracing, checked on the wire: a served gateway exports to a real OTLP/HTTP receiver started here (POST
/v1/traces, protobuf decoded with opentelemetry-proto), and the fake upstream records the traceparent it was sent.

One server span per request (continuing a caller's traceparent), one client span per upstream attempt under it with
the GenAI attributes; streams keep their spans open until they end or their caller leaves; a fallback shows the
failed attempt; nothing is exported with tracing off, and no key, Authorization value, prompt or answer is ever in
the exported bytes."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

import httpx
import pytest
import yaml
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as otlp
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from handlers import config as config_mod
from handlers.gateway import Gateway
from tests.conftest import Live, free_port, serve, spawn, stop
from tests.fake_upstream import FakeUpstream

SERVER, CLIENT = 2, 3  # Span.SpanKind
UNSET, ERROR = 0, 2  # Status.StatusCode
UPSTREAM_KEY = "sk-upstream-SECRET-7f3a9c"
COLLECTOR_TOKEN = "collector-SECRET-41d2"
PROMPT = "zebra-prompt-canary"
ANSWER = "heron-answer-canary"


class Receiver:
    """A real OTLP/HTTP trace receiver: keeps each export's raw bytes and headers, and every span, flattened."""

    def __init__(self, port: int = 0) -> None:
        self.bodies: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        self.spans: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                receiver.take(body, {k.lower(): v for k, v in self.headers.items()})
                answer = otlp.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def take(self, body: bytes, headers: dict[str, str]) -> None:
        request = otlp.ExportTraceServiceRequest.FromString(body)
        spans = []
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    spans.append({"name": s.name, "kind": s.kind, "trace_id": s.trace_id.hex(),
                                  "span_id": s.span_id.hex(), "parent": s.parent_span_id.hex(),
                                  "trace_state": s.trace_state, "start": s.start_time_unix_nano,
                                  "end": s.end_time_unix_nano, "status": s.status.code,
                                  "message": s.status.message, "attributes": _attributes(s.attributes),
                                  "resource": resource})
        with self._lock:
            self.bodies.append(body)
            self.headers.append(headers)
            self.spans.extend(spans)

    def of_trace(self, trace_id: str) -> list[dict[str, Any]]:
        with self._lock:
            return [s for s in self.spans if s["trace_id"] == trace_id]

    def wire(self) -> bytes:
        return b"".join(self.bodies)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _value(v: AnyValue) -> Any:
    which = v.WhichOneof("value")
    if which == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, which) if which else None


def _attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as f:
        yield f


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


def _config(fake: FakeUpstream, collector: str) -> dict[str, Any]:
    keyed = {"api_key_env": "SPECWAY_TEST_UPSTREAM_KEY"}
    return {
        "upstreams": {"first": {"kind": "openai", "base_url": fake.url, **keyed},
                      "claude": {"kind": "anthropic", "base_url": fake.anthropic_url, **keyed},
                      "second": {"kind": "openai", "base_url": fake.url, **keyed}},
        "models": [{"id": "acme/gpt", "upstream": "first", "name": "gpt-up"},
                   {"id": "acme/claude", "upstream": "claude", "name": "claude-up"},
                   {"id": "acme/backup", "upstream": "second", "name": "backup-up"},
                   {"id": "acme/embed", "upstream": "first", "name": "embed-up", "embeddings": True}],
        "policies": {"default": {"default_model": "acme/gpt", "fallbacks": {"acme/gpt": ["acme/backup"]}}},
        "telemetry": {"otlp_endpoint": collector, "service_name": "specway-test", "export_interval_seconds": 0.05,
                      "headers_env": "SPECWAY_TEST_COLLECTOR_HEADERS",
                      "resource_attributes": {"deployment.environment.name": "test"}},
    }


@pytest.fixture(scope="module")
def gw(fake: FakeUpstream, receiver: Receiver, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    mp = pytest.MonkeyPatch()
    mp.setenv("SPECWAY_TEST_UPSTREAM_KEY", UPSTREAM_KEY)
    mp.setenv("SPECWAY_TEST_COLLECTOR_HEADERS", f"authorization=Bearer%20{COLLECTOR_TOKEN}")
    try:
        with serve(_config(fake, receiver.url), tmp_path_factory.mktemp("tracing")) as g:
            yield g
    finally:
        mp.undo()


@pytest.fixture(autouse=True)
def fresh(fake: FakeUpstream) -> None:
    fake.reset()


def caller_context() -> tuple[str, str, dict[str, str]]:
    """A caller's trace id, span id, and the headers that carry them."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return trace_id, span_id, {"traceparent": f"00-{trace_id}-{span_id}-01", "tracestate": "vendor=abc"}


def chat(gw: Live, model: str, stream: bool, headers: dict[str, str]) -> httpx.Response:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    r = httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers={**gw.headers, **headers}, timeout=30)
    assert r.status_code == 200, r.text
    return r


def finished_trace(gw: Live, receiver: Receiver, trace_id: str) -> list[dict[str, Any]]:
    """Every span of a trace, once its server span (the last to end) has arrived and the rest is flushed."""
    deadline = time.monotonic() + 15
    while not any(s["kind"] == SERVER for s in receiver.of_trace(trace_id)):
        assert time.monotonic() < deadline, f"no server span for trace {trace_id}"
        time.sleep(0.02)
    assert gw.gateway.tracing is not None
    assert gw.gateway.tracing.provider.force_flush(10_000)
    return receiver.of_trace(trace_id)


def split(spans: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    servers = [s for s in spans if s["kind"] == SERVER]
    assert len(servers) == 1, servers
    return servers[0], sorted((s for s in spans if s["kind"] == CLIENT), key=lambda s: s["start"])


def assert_upstream_parent(received: Any, trace_id: str, client: dict[str, Any]) -> None:
    """The upstream's request carried a traceparent of this trace whose parent is the attempt's client span."""
    version, sent_trace, parent, flags = received.headers["traceparent"].split("-")
    assert (version, sent_trace, parent) == ("00", trace_id, client["span_id"])
    assert int(flags, 16) & 1  # sampled (0x02, a random trace id, is W3C Trace Context level 2)


def assert_nothing_secret(receiver: Receiver) -> None:
    wire = receiver.wire()
    assert wire
    for secret in (UPSTREAM_KEY, COLLECTOR_TOKEN, PROMPT, ANSWER, "Bearer", "x-api-key"):
        assert secret.encode() not in wire, secret


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(("model", "system", "upstream_model"),
                         [("acme/gpt", "openai", "gpt-up"), ("acme/claude", "anthropic", "claude-up")])
def test_one_server_span_and_one_client_span(gw: Live, receiver: Receiver, fake: FakeUpstream, stream: bool,
                                             model: str, system: str, upstream_model: str) -> None:
    fake.script(text=ANSWER, usage=(11, 7, 0))
    trace_id, caller_span, headers = caller_context()
    r = chat(gw, model, stream, headers)
    assert ANSWER in r.text
    server, clients = split(finished_trace(gw, receiver, trace_id))

    # The caller's trace goes on: the server span is the child of the caller's span, tracestate kept.
    assert server["parent"] == caller_span and server["trace_state"] == "vendor=abc"
    assert server["name"] == "POST /v1/chat/completions" and server["status"] == UNSET
    attributes = server["attributes"]
    assert attributes["http.request.method"] == "POST" and attributes["http.route"] == "/v1/chat/completions"
    assert attributes["http.response.status_code"] == 200
    assert attributes["specway.request_id"] == r.headers["x-request-id"]
    assert attributes["specway.decision_id"] == r.headers["x-specway-decision-id"]
    assert server["resource"]["service.name"] == "specway-test"
    assert server["resource"]["deployment.environment.name"] == "test"

    (client,) = clients
    assert client["parent"] == server["span_id"] and client["status"] == UNSET
    assert client["name"] == f"chat {upstream_model}"
    assert client["attributes"] == {
        "gen_ai.operation.name": "chat", "gen_ai.system": system, "gen_ai.provider.name": system,
        "gen_ai.request.model": upstream_model, "specway.model": model, "specway.upstream.kind": system,
        "specway.upstream": {"acme/gpt": "first", "acme/claude": "claude"}[model],
        "specway.decision_id": r.headers["x-specway-decision-id"],
        # a stream's usage arrives with its last event: the span was still open then
        "gen_ai.usage.input_tokens": 11, "gen_ai.usage.output_tokens": 7, "gen_ai.usage.cache_read.input_tokens": 0,
        **({"gen_ai.usage.cache_creation.input_tokens": 0} if system == "anthropic" else {}),
        "gen_ai.response.finish_reasons": ["stop"],
        **({} if stream else {"gen_ai.response.model": upstream_model}),
    }
    assert server["start"] <= client["start"] and client["end"] <= server["end"]

    (received,) = fake.requests
    assert_upstream_parent(received, trace_id, client)
    assert received.headers["tracestate"] == "vendor=abc"
    assert_nothing_secret(receiver)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_fallback_shows_the_failed_attempt(gw: Live, receiver: Receiver, fake: FakeUpstream, stream: bool) -> None:
    fake.script(status=500, error="first is down")
    fake.script(text=ANSWER)
    trace_id, _, headers = caller_context()
    r = chat(gw, "acme/gpt", stream, headers)
    assert r.headers["x-specway-model"] == "acme/backup"
    server, clients = split(finished_trace(gw, receiver, trace_id))
    assert server["attributes"]["specway.model"] == "acme/backup"

    failed, answered = clients
    assert failed["parent"] == answered["parent"] == server["span_id"]
    assert failed["status"] == ERROR and "first is down" in failed["message"]
    assert failed["attributes"]["error.type"] == "500"
    assert failed["attributes"]["http.response.status_code"] == 500
    assert failed["attributes"]["specway.upstream"] == "first"
    assert "gen_ai.usage.input_tokens" not in failed["attributes"]
    assert answered["status"] == UNSET and "error.type" not in answered["attributes"]
    assert answered["attributes"]["specway.upstream"] == "second"
    assert answered["attributes"]["gen_ai.request.model"] == "backup-up"
    assert failed["end"] <= answered["start"]

    first, second = fake.requests
    assert_upstream_parent(first, trace_id, failed)
    assert_upstream_parent(second, trace_id, answered)
    assert_nothing_secret(receiver)


def test_a_stream_left_by_its_caller_ends_its_spans(gw: Live, receiver: Receiver, fake: FakeUpstream) -> None:
    fake.script(text=" ".join(["word"] * 200), chunk_delay=0.05)
    trace_id, _, headers = caller_context()
    body = {"model": "acme/gpt", "messages": [{"role": "user", "content": PROMPT}], "stream": True}
    with httpx.stream("POST", f"{gw.url}/v1/chat/completions", json=body, headers={**gw.headers, **headers},
                      timeout=30) as r:
        assert r.status_code == 200
        next(r.iter_bytes())  # the first chunk, then away
    server, (client,) = split(finished_trace(gw, receiver, trace_id))
    assert client["attributes"]["specway.cancelled"] is True
    assert client["status"] == UNSET and client["parent"] == server["span_id"]
    assert "gen_ai.usage.output_tokens" not in client["attributes"]  # the stream never reached its usage
    deadline = time.monotonic() + 10
    while fake.disconnects != 1:  # the upstream's stream was closed too
        assert time.monotonic() < deadline, "the upstream's stream was left open"
        time.sleep(0.02)


def test_embeddings_and_requests_without_a_caller_trace(gw: Live, receiver: Receiver, fake: FakeUpstream) -> None:
    request_id = f"tracing-{secrets.token_hex(6)}"
    r = httpx.post(f"{gw.url}/v1/embeddings", json={"model": "acme/embed", "input": "one two three"},
                   headers={**gw.headers, "x-request-id": request_id}, timeout=30)
    assert r.status_code == 200, r.text
    (received,) = fake.requests
    trace_id = received.headers["traceparent"].split("-")[1]  # a new trace, begun by the gateway
    server, (client,) = split(finished_trace(gw, receiver, trace_id))
    assert server["parent"] == "" and server["attributes"]["specway.request_id"] == request_id
    assert server["attributes"]["http.route"] == "/v1/embeddings"
    assert client["name"] == "embeddings embed-up"
    assert client["attributes"]["gen_ai.operation.name"] == "embeddings"
    assert client["attributes"]["gen_ai.usage.input_tokens"] == 3
    assert_upstream_parent(received, trace_id, client)


def test_a_count_is_its_own_operation(gw: Live, receiver: Receiver, fake: FakeUpstream) -> None:
    trace_id, _, headers = caller_context()
    body = {"model": "acme/claude", "max_tokens": 10, "messages": [{"role": "user", "content": PROMPT}]}
    r = httpx.post(f"{gw.url}/v1/messages/count_tokens", json=body, headers={**gw.headers, **headers}, timeout=30)
    assert r.status_code == 200, r.text
    server, (client,) = split(finished_trace(gw, receiver, trace_id))
    assert server["attributes"]["http.route"] == "/v1/messages/count_tokens"
    assert client["name"] == "count_tokens claude-up" and client["parent"] == server["span_id"]
    assert client["attributes"]["gen_ai.operation.name"] == "count_tokens"
    assert client["attributes"]["gen_ai.system"] == "anthropic"
    (received,) = fake.requests
    assert received.path == "/v1/messages/count_tokens"
    assert_upstream_parent(received, trace_id, client)
    assert_nothing_secret(receiver)


def test_a_request_that_calls_no_upstream_has_only_its_server_span(gw: Live, receiver: Receiver) -> None:
    trace_id, caller_span, headers = caller_context()
    r = httpx.get(f"{gw.url}/v1/models/acme%2Fnope", headers={**gw.headers, **headers}, timeout=10)
    assert r.status_code == 404
    server, clients = split(finished_trace(gw, receiver, trace_id))
    assert clients == [] and server["parent"] == caller_span
    assert server["attributes"]["http.response.status_code"] == 404 and server["status"] == UNSET
    assert "specway.decision_id" not in server["attributes"]
    assert_nothing_secret(receiver)


def test_the_collector_gets_the_configured_headers(gw: Live, receiver: Receiver) -> None:
    trace_id, _, headers = caller_context()
    httpx.get(f"{gw.url}/healthz", headers=headers, timeout=10)
    finished_trace(gw, receiver, trace_id)
    assert receiver.headers and all(h["authorization"] == f"Bearer {COLLECTOR_TOKEN}" for h in receiver.headers)
    assert all(h["content-type"] == "application/x-protobuf" for h in receiver.headers)


def test_a_caller_trace_decides_its_sampling(receiver: Receiver, fake: FakeUpstream, tmp_path: Path) -> None:
    """sample_ratio 0: a request without a traceparent is not traced (its upstream still gets the trace, unsampled);
    a caller's sampled traceparent is."""
    config = _config(fake, receiver.url)
    config["telemetry"] = {**config["telemetry"], "sample_ratio": 0, "headers_env": None}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECWAY_TEST_UPSTREAM_KEY", UPSTREAM_KEY)
        with serve(config, tmp_path) as g:
            chat(g, "acme/gpt", False, {})
            _, unsampled_trace, _, flags = fake.requests[-1].headers["traceparent"].split("-")
            assert not int(flags, 16) & 1
            trace_id, _, headers = caller_context()
            chat(g, "acme/gpt", False, headers)
            _, (client,) = split(finished_trace(g, receiver, trace_id))
            assert_upstream_parent(fake.requests[-1], trace_id, client)
    assert receiver.of_trace(unsampled_trace) == []


def test_a_missing_collector_headers_variable_stops_the_start(receiver: Receiver, fake: FakeUpstream,
                                                             tmp_path: Path) -> None:
    config = _config(fake, receiver.url)
    config["store"] = {"url": f"sqlite:///{tmp_path / 'specway.db'}"}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECWAY_TEST_UPSTREAM_KEY", UPSTREAM_KEY)
        mp.delenv("SPECWAY_TEST_COLLECTOR_HEADERS", raising=False)
        gateway = Gateway(config_mod.parse(config, "test"))
        with pytest.raises(config_mod.ConfigError, match="telemetry.headers_env: the environment variable "
                                              "SPECWAY_TEST_COLLECTOR_HEADERS is not set"):
            asyncio.run(gateway.start())
        assert gateway.tracing is None


def test_tracing_without_the_otel_extra_is_a_config_error() -> None:
    """Where OpenTelemetry's SDK is not installed (here: its import refused), asking for tracing stops the start with
    a word on what to install."""
    probe = ("import importlib.abc, sys\n"
             "class NoSdk(importlib.abc.MetaPathFinder):\n"
             "    def find_spec(self, name, path=None, target=None):\n"
             "        if name.startswith(('opentelemetry.sdk', 'opentelemetry.exporter')):\n"
             "            raise ModuleNotFoundError(name, name=name)\n"
             "sys.meta_path.insert(0, NoSdk())\n"
             "from handlers import config\n"
             "from handlers.edge.app import create_app\n"
             "try:\n"
             "    create_app(config.parse({'telemetry': {'otlp_endpoint': 'http://127.0.0.1:9'}}, 't'))\n"
             "except config.ConfigError as exc:\n"
             "    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.startswith("telemetry.otlp_endpoint is set, but OpenTelemetry is not installed: install the "
                                 "otel extra (pip install 'specway[otel]')"), out.stdout + out.stderr


def test_nothing_is_traced_or_loaded_when_telemetry_is_off(receiver: Receiver, fake: FakeUpstream,
                                                           tmp_path: Path) -> None:
    """`specway serve` without otlp_endpoint, the SDK's own environment pointing at the receiver: no span leaves,
    not even at shutdown, and no traceparent reaches the upstream; in-process, OpenTelemetry's tracing SDK and our
    tracing modules are never imported."""
    config = {k: v for k, v in _config(fake, receiver.url).items() if k != "telemetry"}
    config["telemetry"] = {"service_name": "off"}
    config["store"] = {"url": f"sqlite:///{tmp_path / 'specway.db'}"}
    path = tmp_path / "specway.yaml"
    path.write_text(yaml.safe_dump(config))
    before = len(receiver.bodies)
    env = {"SPECWAY_TEST_UPSTREAM_KEY": UPSTREAM_KEY, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
           "OTEL_TRACES_EXPORTER": "otlp", "OTEL_SERVICE_NAME": "off"}
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        port = free_port()
        proc, key = spawn(path, port, tmp_path / "serve.log")
        try:
            trace_id, _, headers = caller_context()
            r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions",
                           json={"model": "acme/gpt", "messages": [{"role": "user", "content": PROMPT}]},
                           headers={"Authorization": f"Bearer {key}", **headers}, timeout=30)
            assert r.status_code == 200, r.text
        finally:
            stop(proc)
    assert proc.returncode in (0, -signal.SIGTERM)  # a graceful stop (uvicorn re-raises SIGTERM), not a kill
    assert "traceparent" not in fake.requests[-1].headers and "tracestate" not in fake.requests[-1].headers
    assert len(receiver.bodies) == before and receiver.of_trace(trace_id) == []

    probe = ("import sys, yaml; from handlers import config; from handlers.edge.app import create_app; "
             "from handlers.edge.middleware import Edge; "
             f"app = create_app(config.parse(yaml.safe_load(open({str(path)!r})), 't')); "
             "loaded = sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk.trace', "
             "'opentelemetry.exporter', 'handlers.observability.tracing', 'handlers.observability.upstream_spans'))); "
             "print(type(app) is Edge, loaded)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                         env={**os.environ, **env}, check=True).stdout.strip()
    assert out == "True []"


def test_a_collector_away_is_logged_once_and_fails_no_request(fake: FakeUpstream, tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()  # nothing listens there yet
    config = _config(fake, f"http://127.0.0.1:{port}")
    config["telemetry"] = {**config["telemetry"], "headers_env": None, "timeout_seconds": 0.5}
    caplog.set_level(logging.WARNING, logger="specway.tracing")

    def said(words: str) -> int:
        return sum(words in r.getMessage() for r in caplog.records if r.name == "specway.tracing")

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECWAY_TEST_UPSTREAM_KEY", UPSTREAM_KEY)
        with serve(config, tmp_path) as g:
            assert g.gateway.tracing is not None
            for _ in range(3):  # each batch fails: the requests are answered all the same
                chat(g, "acme/gpt", False, {})
                g.gateway.tracing.provider.force_flush(10_000)  # exports in this thread: the batch has failed
            assert said("does not take spans") == 1 and said("takes spans again") == 0
            with Receiver(port) as receiver:
                trace_id, _, headers = caller_context()
                chat(g, "acme/gpt", False, headers)
                finished_trace(g, receiver, trace_id)
                assert said("takes spans again") == 1 and said("does not take spans") == 1


def test_spans_are_flushed_when_specway_serve_stops(receiver: Receiver, fake: FakeUpstream, tmp_path: Path) -> None:
    """`specway serve --workers 2` (each worker its own exporter, made after the fork), spans sent once a minute: the
    request's spans leave at SIGTERM."""
    config = _config(fake, receiver.url)
    config["telemetry"] = {**config["telemetry"], "export_interval_seconds": 60, "headers_env": None}
    config["store"] = {"url": f"sqlite:///{tmp_path / 'specway.db'}"}
    path = tmp_path / "specway.yaml"
    path.write_text(yaml.safe_dump(config))
    trace_id, caller_span, headers = caller_context()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECWAY_TEST_UPSTREAM_KEY", UPSTREAM_KEY)
        port = free_port()
        proc, key = spawn(path, port, tmp_path / "serve.log", "--workers", "2")
        try:
            r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions",
                           json={"model": "acme/gpt", "messages": [{"role": "user", "content": PROMPT}]},
                           headers={"Authorization": f"Bearer {key}", **headers}, timeout=30)
            assert r.status_code == 200, r.text
            assert receiver.of_trace(trace_id) == []  # not sent yet: the next batch is a minute away
        finally:
            stop(proc)
    server, (client,) = split(receiver.of_trace(trace_id))
    assert server["parent"] == caller_span and client["parent"] == server["span_id"]
    assert_upstream_parent(fake.requests[-1], trace_id, client)
    assert_nothing_secret(receiver)

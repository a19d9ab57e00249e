"""A real HTTP server that speaks OpenAI Chat Completions, OpenAI Responses and Anthropic Messages, for tests. Not
product code.

    with FakeUpstream() as fake:
        fake.script(text="Hi", usage=(10, 2, 0))
        OpenAIUpstream("t", base_url=fake.url)             # POST {url}/chat/completions
        ResponsesUpstream("t", base_url=fake.url)          # POST {url}/responses
        AnthropicUpstream("t", base_url=fake.anthropic_url)  # POST {anthropic_url}/v1/messages
        BedrockUpstream("t", region=..., credentials=..., base_url=fake.bedrock_url)  # POST /model/{id}/converse
        GeminiUpstream("t", base_url=fake.google_url, api_key=GEMINI_KEY)  # POST /v1beta/models/{m}:generateContent
        VertexUpstream("t", project=..., location=..., tokens=..., base_url=fake.google_url)  # fake.issuer signs in
        fake.requests[-1].body                              # what the gateway sent

        gate = fake.hold()   # from now on each request waits, once recorded in fake.requests, until gate.set()
        fake.responder = lambda dialect, body: Reply(...)  # decides the answer when no Reply is queued

Each request takes the next scripted Reply, else the responder's Reply for it (tests/agent_provider.py answers as a
model would), else the default "Hello from fake" answer. The wire shapes follow the
real services: role in the first chat chunk, a usage chunk with no choices, `data: [DONE]`; Anthropic's named
events including ping; the Responses object and its typed, numbered events (response.completed last).

A Reply's `reasoning` shows in each dialect's own way: chat's `reasoning_content` (on the message; streamed in
`delta.reasoning_content` before the text, as DeepSeek and vLLM send it), an Anthropic thinking block with its
`signature` before the text (streamed as thinking_delta pieces and one signature_delta), a Responses reasoning item.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import re
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import parse_qsl, unquote

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from tests import fake_azure, fake_bedrock, fake_gemini
from tests.fake_bedrock import AwsKey, BadSignature, Signed
from tests.fake_dialects import ERRORS, STREAMS, WHOLE, Reply, Usage, default_usage, messages_error

if TYPE_CHECKING:
    from pytest import MonkeyPatch

AWS_KEY = AwsKey("AKIDFAKEBEDROCK00001", "fake/secret+key/for/sigv4/only0000000001")
GEMINI_KEY = "AIzaSyFAKE-gemini-upstream-key-000000001"  # the Gemini API key its paths take by default


def aws_environment(mp: MonkeyPatch, folder: Path) -> None:
    """botocore's credential chain with only AWS_KEY in it (no config files, no instance metadata)."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ROLE_ARN",
                 "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                 "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        mp.delenv(name, raising=False)
    mp.setenv("AWS_CONFIG_FILE", str(folder / "config"))
    mp.setenv("AWS_SHARED_CREDENTIALS_FILE", str(folder / "credentials"))
    mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
    mp.setenv("AWS_ACCESS_KEY_ID", AWS_KEY.access_key)
    mp.setenv("AWS_SECRET_ACCESS_KEY", AWS_KEY.secret)

__all__ = ["AWS_KEY", "GEMINI_KEY", "FakeUpstream", "Received", "Reply", "Usage", "aws_environment", "count_words", "fake_vector"]

@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Any  # parsed JSON, or None when it was not JSON
    peer: str = ""  # the client's host:port, to tell connections apart
    query: dict[str, str] = field(default_factory=dict)


class FakeUpstream:
    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[Received] = []
        self.disconnects = 0  # streams whose client went away before the end
        self.gate: threading.Event | None = None  # see hold()
        self.responder: Callable[[str, Any], Reply] | None = None  # (dialect, body) -> the answer, when none is queued
        self.port = 0
        self.azure_keys: set[str] = set()  # the api-key values its Azure paths take (tests/fake_azure.py)
        self.azure_tokens: set[str] = set()  # and the Entra ID bearer tokens
        self.aws_keys: dict[str, AwsKey] = {AWS_KEY.access_key: AWS_KEY}  # the keys a Bedrock request may sign with
        self.signed: list[Signed] = []  # what each Bedrock request's good signature said
        self.bad_signatures: list[str] = []  # the AWS error type of each request refused for its signature
        self.stream_exception = "modelStreamErrorException"  # a ConverseStream's mid-stream error (fail_after)
        self.gemini_keys: set[str] = {GEMINI_KEY}  # the x-goog-api-key values its Gemini API paths take
        self.issuer: fake_gemini.TokenIssuer | None = None  # Vertex AI's sign-in (tests/fake_gemini.py); None: none
        azure = functools.partial(Route, endpoint=self._azure, methods=["POST"])
        routes = [
            azure("/openai/v1/chat/completions"), azure("/openai/v1/responses"), azure("/openai/v1/embeddings"),
            azure("/openai/deployments/{deployment}/chat/completions"), azure("/openai/responses"),
            azure("/openai/deployments/{deployment}/embeddings"),
            Route("/model/{rest:path}", self._bedrock, methods=["POST"]),
            Route("/v1beta/models/{rest:path}", self._gemini, methods=["POST"]),
            Route("/v1/projects/{rest:path}", self._vertex, methods=["POST"]),
            Route("/token", self._token, methods=["POST"]),
            Route("/v1/chat/completions", functools.partial(self._answer, dialect="chat"), methods=["POST"]),
            Route("/v1/messages", functools.partial(self._answer, dialect="messages"), methods=["POST"]),
            Route("/v1/responses", functools.partial(self._answer, dialect="responses"), methods=["POST"]),
            Route("/v1/messages/count_tokens", self._count_tokens, methods=["POST"]),
            Route("/v1/embeddings", self._embeddings, methods=["POST"]),
        ]
        self._server = uvicorn.Server(
            uvicorn.Config(
                Starlette(routes=routes),
                host="127.0.0.1",
                port=0,
                log_level="critical",  # a cut stream is an "error" to uvicorn, and on purpose here
                lifespan="off",
                timeout_graceful_shutdown=1,
            )
        )
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def azure_url(self) -> str:
        """Like an Azure OpenAI resource's endpoint, https://RESOURCE.openai.azure.com."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def bedrock_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def google_url(self) -> str:
        """Like https://generativelanguage.googleapis.com and https://LOCATION-aiplatform.googleapis.com."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def token_uri(self) -> str:
        return f"http://127.0.0.1:{self.port}/token"

    def script(self, reply: Reply | None = None, **fields: Any) -> None:
        """Queue one reply: a Reply, or Reply's fields as keywords."""
        self.replies.append(reply or Reply(**fields))

    def reset(self) -> None:
        self.replies.clear()
        self.requests.clear()
        self.signed.clear()
        self.bad_signatures.clear()
        self.stream_exception = "modelStreamErrorException"
        self.disconnects = 0
        self.responder = None
        self.release()

    def hold(self) -> threading.Event:
        """A barrier the test controls: from now on every request, once recorded in `requests`, waits until the
        returned event is set (or release() or reset() is called) before it is answered."""
        self.gate = threading.Event()
        return self.gate

    def release(self) -> None:
        """Let every held request go on, and hold no more."""
        if self.gate is not None:
            self.gate.set()
        self.gate = None

    async def _pass_gate(self) -> None:
        gate = self.gate
        while gate is not None and not gate.is_set():
            await asyncio.sleep(0.01)

    def start(self) -> Self:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the fake upstream did not start")
            time.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _receive(self, request: Request, dialect: str = "", raw: bytes | None = None, path: str | None = None
                       ) -> tuple[Any, Reply]:
        """Record the request (its body parsed, or None when not JSON), wait at the gate, take the next Reply (or
        the responder's for the request)."""
        raw = await request.body() if raw is None else raw
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        peer = f"{request.client.host}:{request.client.port}" if request.client else ""
        self.requests.append(Received(path or request.url.path, dict(request.headers), body, peer,
                                      dict(request.query_params)))
        await self._pass_gate()
        if self.replies:
            reply = self.replies.popleft()
        elif self.responder is not None and dialect:
            reply = self.responder(dialect, body)
        else:
            reply = Reply()
        await asyncio.sleep(reply.delay)
        return body, reply

    async def _answer(self, request: Request, dialect: str) -> Any:
        body, reply = await self._receive(request, dialect)
        return self._reply(dialect, body, reply)

    async def _azure(self, request: Request) -> Any:
        """Azure OpenAI's paths: its credentials and api-version checked, its dialects annotated as Azure does."""
        dialect = "responses" if request.url.path.endswith("/responses") else "chat"
        body, reply = await self._receive(request, "" if request.url.path.endswith("/embeddings") else dialect)
        if (refused := fake_azure.refused(request, self.azure_keys, self.azure_tokens)) is not None:
            return refused
        if request.url.path.endswith("/embeddings"):
            return self._vectors(body, reply)
        if reply.status >= 400:
            return JSONResponse(fake_azure.error(reply), reply.status, headers=reply.headers)
        return self._reply(dialect, body, reply, request.path_params.get("deployment"), azure=True)

    def _reply(self, dialect: str, body: Any, reply: Reply, deployment: str | None = None, azure: bool = False
               ) -> Any:
        if reply.status >= 400:
            return JSONResponse(ERRORS[dialect](reply), reply.status, headers=reply.headers)
        body = body or {}
        model = reply.model or deployment or body.get("model") or "fake-model"
        usage = reply.usage or default_usage(body, reply)
        if not body.get("stream"):
            if reply.malformed:
                return Response(b'{"id": "broken', media_type="application/json", headers=reply.headers)
            if reply.body is not None:
                return JSONResponse(reply.body, headers=reply.headers)
            whole = WHOLE[dialect](reply, model, usage)
            return JSONResponse(fake_azure.annotated(dialect, whole, reply) if azure else whole, headers=reply.headers)
        stream_options = body.get("stream_options") or {}
        include_usage = dialect in ("messages", "responses") or bool(stream_options.get("include_usage"))
        chunks = STREAMS[dialect](reply, model, usage if include_usage else None)
        return _Stream(fake_azure.annotated_stream(dialect, chunks, reply) if azure else chunks, reply, self)

    async def _bedrock(self, request: Request) -> Any:
        """POST /model/{modelId}/converse or /converse-stream, signed with one of `aws_keys` (else a 403 in AWS's
        words); the raw path is the one signed, its model id percent-encoded."""
        raw, path = await request.body(), request.scope["raw_path"].decode()
        query = request.scope.get("query_string", b"").decode()
        try:
            signed = fake_bedrock.check_signature("POST", path + (f"?{query}" if query else ""),
                                                  dict(request.headers), raw, self.aws_keys)
        except BadSignature as bad:
            self.bad_signatures.append(bad.error_type)
            body, headers = fake_bedrock.error(403, bad.message, bad.error_type)
            return JSONResponse(body, 403, headers=headers)
        self.signed.append(signed)
        body, reply = await self._receive(request, "converse", raw=raw, path=path)
        if reply.status >= 400:
            answer, headers = fake_bedrock.reply_error(reply)
            return JSONResponse(answer, reply.status, headers=headers)
        usage = reply.usage or default_usage(body or {}, reply)
        if not path.endswith("/converse-stream"):
            if reply.malformed:
                return Response(b'{"output": {', media_type="application/json", headers=reply.headers)
            return JSONResponse(reply.body or fake_bedrock.whole(reply, usage), headers=reply.headers)
        return _Stream(fake_bedrock.stream(reply, usage, self.stream_exception), reply, self, fake_bedrock.EVENT_STREAM)

    async def _gemini(self, request: Request) -> Any:
        """The Gemini API's POST /v1beta/models/{model}:{action}, with one of `gemini_keys` in x-goog-api-key (else
        Google's 400 for a bad key)."""
        model, _, action = unquote(request.url.path.removeprefix("/v1beta/models/")).rpartition(":")
        body, reply = await self._receive(request, "gemini")
        if request.headers.get("x-goog-api-key") not in self.gemini_keys:
            refused = {"error": {"code": 400, "message": "API key not valid. Please pass a valid API key.",
                                 "status": "INVALID_ARGUMENT", "details": [
                                     {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
                                      "domain": "googleapis.com"}]}}
            return JSONResponse(refused, 400)
        return self._google(body or {}, reply, model, action)

    async def _vertex(self, request: Request) -> Any:
        """Vertex AI's POST /v1/projects/P/locations/L/publishers/{google,anthropic}/models/{model}:{action}, with an
        access token `issuer` issued and that has not expired (else Google's 401). Claude's actions answer Anthropic
        Messages (rawPredict, streamRawPredict) and its count (count-tokens:rawPredict)."""
        path = unquote(request.url.path)
        publisher, _, rest = path.partition("/publishers/")[2].partition("/models/")
        model, _, action = rest.rpartition(":")
        dialect = "messages" if publisher == "anthropic" else "gemini"
        body, reply = await self._receive(request, "" if model == "count-tokens" else dialect)
        if self.issuer is None or not self.issuer.valid(request.headers.get("authorization", "")):
            return JSONResponse(fake_gemini.unauthenticated(), 401)
        if publisher == "google":
            return self._google(body or {}, reply, model, action)
        if model == "count-tokens":
            return JSONResponse({"input_tokens": reply.usage[0] if reply.usage else count_words(body or {})})
        return self._reply("messages", body, reply, deployment=model)

    def _google(self, body: dict[str, Any], reply: Reply, model: str, action: str) -> Any:
        if reply.status >= 400:
            return JSONResponse(fake_gemini.error(reply), reply.status, headers=reply.headers)
        if action == "countTokens":
            return JSONResponse(fake_gemini.count(body, reply), headers=reply.headers)
        usage = reply.usage or fake_gemini.default_usage(body, reply)
        model = reply.model or model
        if action.startswith("streamGenerateContent"):
            return _Stream(fake_gemini.stream(reply, model, usage), reply, self)
        if reply.malformed:
            return Response(b'{"candidates": [', media_type="application/json", headers=reply.headers)
        return JSONResponse(reply.body or fake_gemini.whole(reply, model, usage), headers=reply.headers)

    async def _token(self, request: Request) -> Any:
        """Google's OAuth 2.0 token endpoint, for the service account of `issuer`."""
        form = dict(parse_qsl((await request.body()).decode()))
        if self.issuer is None:
            return JSONResponse({"error": "invalid_client"}, 401)
        status, answer = self.issuer.exchange(form)
        return JSONResponse(answer, status)

    async def _count_tokens(self, request: Request) -> Any:
        """Anthropic's POST /v1/messages/count_tokens: a scripted Reply's usage[0], else the words of the system,
        messages and tools; a Reply with an error status answers Anthropic's error body."""
        body, reply = await self._receive(request)
        if reply.status >= 400:
            return JSONResponse(messages_error(reply), reply.status, headers=reply.headers)
        counted = reply.usage[0] if reply.usage else count_words(body or {})
        return JSONResponse({"input_tokens": counted}, headers=reply.headers)

    async def _embeddings(self, request: Request) -> Any:
        """OpenAI's POST /v1/embeddings: fake_vector() of each input (base64 of little-endian float32 when asked), a
        scripted Reply's usage[0] as prompt_tokens, else the inputs' words or token ids; errors as chat's."""
        body, reply = await self._receive(request)
        return self._vectors(body, reply)

    def _vectors(self, body: Any, reply: Reply) -> Any:
        if reply.status >= 400:
            return JSONResponse(ERRORS["chat"](reply), reply.status, headers=reply.headers)
        if reply.malformed:
            return Response(b'{"object": "list', media_type="application/json", headers=reply.headers)
        if reply.body is not None:
            return JSONResponse(reply.body, headers=reply.headers)
        body = body or {}
        given = body.get("input")
        inputs = [given] if isinstance(given, str) or (given and isinstance(given[0], int)) else given or []
        data = []
        for i, item in enumerate(inputs):
            vector = fake_vector(item, body.get("dimensions") or 4)
            encoded = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            data.append({"object": "embedding", "index": i,
                         "embedding": encoded if body.get("encoding_format") == "base64" else vector})
        counted = reply.usage[0] if reply.usage else sum(
            len(item) if isinstance(item, list) else len(item.split()) for item in inputs)
        return JSONResponse({"object": "list", "data": data, "model": reply.model or body.get("model"),
                             "usage": {"prompt_tokens": counted, "total_tokens": counted}}, headers=reply.headers)


def fake_vector(item: str | list[int], dimensions: int) -> list[float]:
    """The fake's embedding of one input: eighths (exact in float32) from its length."""
    return [(len(item) + j) / 8 for j in range(dimensions)]


def count_words(body: dict[str, Any]) -> int:
    """The fake's token count of a Messages body: the words of its system, messages and tools."""
    counted = {name: body.get(name) for name in ("system", "messages", "tools")}
    return len(re.findall(r"\w+", orjson.dumps(counted).decode()))


class _Stream:
    """An SSE answer sent chunk by chunk, that notices a client going away and can break off on purpose."""

    def __init__(self, chunks: list[bytes], reply: Reply, fake: FakeUpstream,
                 media_type: str = "text/event-stream") -> None:
        error = chunks.pop()  # each dialect puts its mid-stream error event last
        if reply.malformed:
            chunks.insert(1, _corrupt(chunks[1]) if media_type == fake_bedrock.EVENT_STREAM else b"data: {not json\n\n")
        if reply.fail_after is not None:
            chunks = [*chunks[: reply.fail_after], error]
        elif reply.cut_after is not None:
            chunks = chunks[: reply.cut_after]
        self.chunks, self.reply, self.fake, self.media_type = chunks, reply, fake, media_type

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"content-type", self.media_type.encode()), (b"cache-control", b"no-cache")]
        headers += [(k.lower().encode(), v.encode()) for k, v in self.reply.headers.items()]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        sender = asyncio.ensure_future(self._send(send))
        watcher = asyncio.ensure_future(_disconnect(receive))
        await asyncio.wait([sender, watcher], return_when=asyncio.FIRST_COMPLETED)
        if not sender.done():
            self.fake.disconnects += 1
        sender.cancel()
        watcher.cancel()

    async def _send(self, send: Send) -> None:
        for i, chunk in enumerate(self.chunks):
            if i:
                await asyncio.sleep(self.reply.chunk_delay)
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        if self.reply.cut_after is None or self.reply.fail_after is not None:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        # else: return mid-body; uvicorn then closes the connection without the chunked terminator


def _corrupt(frame: bytes) -> bytes:
    """An event-stream frame with one payload byte changed: its message CRC no longer matches."""
    at = len(frame) - 5
    return frame[:at] + bytes([frame[at] ^ 0xFF]) + frame[at + 1 :]


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass

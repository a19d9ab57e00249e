"""Shared by the upstream tests (tests/test_upstreams_*.py): a real HTTP fake (tests/fake_upstream.py) per module, a
builder for upstreams pointed at it, and the requests they are sent."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

from handlers.inference.canonical import (
    Event,
    Message,
    Request,
    Result,
    Text,
    Tool,
    ToolCall,
    ToolResult,
    Unknown,
    fold,
)
from handlers.inference.upstreams import AnthropicUpstream, OpenAIUpstream, Upstream, UpstreamError
from tests.fake_upstream import FakeUpstream

KEY = "sk-test-SECRET-0123456789"
HELLO = Request(format="chat", messages=[Message("user", [Text("Hello there")])])
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
KINDS = ["openai", "anthropic"]
Build = Callable[..., Upstream]


# Each fixture is fixture_<name>, registered as <name>: a test module imports it, and its tests ask for <name>.


@pytest.fixture(scope="module", name="server")
def fixture_server() -> Iterator[FakeUpstream]:
    with FakeUpstream() as fake:
        yield fake


@pytest.fixture(name="fake")
def fixture_fake(server: FakeUpstream) -> FakeUpstream:
    server.reset()
    return server


@pytest.fixture(name="build")
async def fixture_build(fake: FakeUpstream) -> AsyncIterator[Build]:
    made: list[Upstream] = []

    def make(kind: str, *, server: FakeUpstream = fake, **options: Any) -> Upstream:
        options.setdefault("api_key", KEY)
        if kind == "openai":
            upstream: Upstream = OpenAIUpstream(kind, base_url=options.pop("base_url", server.url), **options)
        else:
            upstream = AnthropicUpstream(kind, base_url=options.pop("base_url", server.anthropic_url), **options)
        made.append(upstream)
        return upstream

    yield make
    for upstream in made:
        await upstream.aclose()


async def events(upstream: Upstream, request: Request = HELLO, model: str = "m") -> list[Event]:
    return [event async for event in upstream.stream(request, model)]


async def answer(upstream: Upstream, streaming: bool, request: Request = HELLO) -> Result:
    return fold(await events(upstream, request)) if streaming else await upstream.complete(request, "m")


async def failure(call: Awaitable[Any]) -> UpstreamError:
    with pytest.raises(UpstreamError) as caught:
        await call
    return caught.value


def conversation(format: str, **fields: Any) -> Request:
    """A conversation with every block kind: text, a tool call, its result, and unmodelled parts."""
    messages = [
        Message("user", [Text("Weather in Paris?"), Unknown({"type": "image_url", "image_url": {"url": "u"}}, "chat")]),
        Message("assistant", [Text("Checking."), ToolCall("call_1", "get_weather", '{"city": "Paris"}')]),
        Message("tool", [ToolResult("call_1", "18C and sunny")]),
        Message("user", [Text("Thanks!"), Unknown({"type": "document", "source": {"data": "d"}}, "messages")]),
    ]
    tools = [
        Tool("get_weather", "Current weather", WEATHER, {"type": "function", "function": {"name": "raw"}}, "chat"),
        Tool("lookup", None, {}, {"name": "raw_lookup", "input_schema": WEATHER}, "messages"),
    ]
    return Request(format=format, messages=messages, system="Be brief.", tools=tools, **fields)  # type: ignore[arg-type]

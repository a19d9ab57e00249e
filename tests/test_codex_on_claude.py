"""Codex on a Claude model: a Responses caller that keeps its reasoning (include reasoning.encrypted_content, store
false) gets Claude's signed thinking as reasoning items whose encrypted_content carries the signature, and sends them
back in its next turns; Anthropic then gets the signed thinking block back, byte for byte, before its tool_use, and
the tool loop keeps thinking. The token goes to no other provider (left out, and said so), a corrupt one is a 400
naming it, and OpenAI's own encrypted content is never touched.

Through the official openai SDK, against a real gateway and the fake upstream; every answer and stream event also
validates against OpenAI's published schemas (tests/test_openai_schemas.py).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from handlers.inference.canonical import (
    Answer,
    Request,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallStart,
)
from handlers.inference.formats.messages.stream import StreamRenderer as MessagesStream
from handlers.inference.formats.reasoning import CARRIED
from handlers.inference.formats.responses.stream import StreamRenderer
from tests.conftest import Live, serve
from tests.fake_upstream import FakeUpstream
from tests.test_openai_schemas import EVENT, RESPONSE, problems

PROMPT = "The weather in Paris, then in Lyon?"
SIGNATURES = {"A": "EqQBCkYIBxgCKkB+c2lnQQ==", "B": "ErUBCkYIBxgCKkD/c2lnQg=="}
TOOLS: Any = [{"type": "function", "name": "get_weather", "description": "The weather in a city.",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}, "strict": False}]
BUDGET = 24576  # the policy's thinking budget for effort high (the configuration's default)
NOT_SIGNED_BY_OPENAI = ("1 thinking block signed by anthropic: a responses upstream takes back only reasoning items "
                        "it encrypted itself")


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as f:
        yield f


@pytest.fixture(scope="module")
def live(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    config = {
        "upstreams": {"an": {"kind": "anthropic", "base_url": fake.anthropic_url},
                      "rs": {"kind": "responses", "base_url": fake.url}},
        "models": [{"id": "acme/an", "upstream": "an", "name": "claude-up", "reasoning": True},
                   {"id": "acme/rs", "upstream": "rs", "name": "resp-up", "reasoning": True}],
        "policies": {"default": {"default_model": "acme/an"}},
        "default_policy": "default",
        "cooldown": {"seconds": 0},
    }
    with serve(config, tmp_path_factory.mktemp("codex")) as g:
        yield g


@pytest.fixture(autouse=True)
def _fresh(fake: FakeUpstream) -> None:
    fake.reset()


def _client(live: Live) -> openai.OpenAI:
    return openai.OpenAI(base_url=live.url + "/v1", api_key=live.key, max_retries=0, timeout=10,
                         http_client=openai.DefaultHttpxClient(trust_env=False))


def _record(live: Live, decision: str) -> dict[str, Any]:
    r = httpx.get(f"{live.url}/v1/route/explain/{decision}", headers=live.headers, timeout=10)
    assert r.status_code == 200, r.text
    return dict(r.json())


class Codex:
    """Codex's side of a tool loop: the whole conversation in every request, each answer's output items appended as
    the SDK parsed them, then the tool's output."""

    def __init__(self, live: Live, stream: bool, model: str = "acme/an") -> None:
        self.client, self.stream, self.model = _client(live), stream, model
        self.history: list[Any] = [{"role": "user", "content": PROMPT}]
        self.decisions: list[str] = []

    def turn(self, call_id: str | None) -> Any:
        args: dict[str, Any] = {"model": self.model, "instructions": "You are a coding agent.", "input": self.history,
                                "tools": TOOLS, "reasoning": {"effort": "high", "summary": "auto"},
                                "include": ["reasoning.encrypted_content"], "store": False,
                                "parallel_tool_calls": False}
        answer = self._streamed(args) if self.stream else self._whole(args)
        self.history.extend(item.model_dump(exclude_none=True) for item in answer.output)
        if call_id is not None:
            self.history.append({"type": "function_call_output", "call_id": call_id, "output": "18C"})
        return answer

    def _whole(self, args: dict[str, Any]) -> Any:
        raw = self.client.responses.with_raw_response.create(**args)
        assert not (found := problems(RESPONSE, raw.http_response.json(), "response")), "\n".join(found)
        self.decisions.append(raw.headers["x-specway-decision-id"])
        return raw.parse()

    def _streamed(self, args: dict[str, Any]) -> Any:
        raw = self.client.responses.with_raw_response.create(**args, stream=True)
        self.decisions.append(raw.headers["x-specway-decision-id"])
        events = list(raw.parse())
        found = [p for n, e in enumerate(events) for p in problems(EVENT, e.to_dict(), f"event {n} ({e.type})")]
        assert not found, "\n".join(found)
        done = {e.item.id: e.item for e in events if e.type == "response.output_item.done"}
        completed = events[-1]
        assert completed.type == "response.completed"
        assert [done[item.id] for item in completed.response.output] == completed.response.output
        return completed.response


REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}


def _script_call(fake: FakeUpstream, turn: str, *blocks: dict[str, Any]) -> None:
    """Claude's answer of a tool-loop turn: its signed thinking (then `blocks`), then its call."""
    fake.script(text="", reasoning=[f"Think {turn}: the user wants the weather."], signature=SIGNATURES[turn],
                blocks=list(blocks),
                tool_calls=[{"id": f"toolu_{turn}", "name": "get_weather", "arguments": '{"city": "Paris"}'}])


def _signed(turn: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": f"Think {turn}: the user wants the weather.",
            "signature": SIGNATURES[turn]}


def _call(turn: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{turn}", "name": "get_weather", "input": {"city": "Paris"}}


def _result(turn: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{turn}", "content": "18C"}]}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_codex_keeps_claudes_signed_thinking_across_a_tool_loop(live: Live, fake: FakeUpstream, stream: bool) -> None:
    codex = Codex(live, stream)
    _script_call(fake, "A", REDACTED)
    first = codex.turn("toolu_A")
    reasoning, redacted, call = first.output
    assert (reasoning.type, redacted.type, call.type, call.call_id) == ("reasoning", "reasoning", "function_call",
                                                                        "toolu_A")
    assert [part.text for part in reasoning.summary] == ["Think A: the user wants the weather."]
    assert redacted.summary == []  # nothing to show: Anthropic's reasoning the caller may not read
    assert reasoning.encrypted_content.startswith(CARRIED) and redacted.encrypted_content.startswith(CARRIED)
    assert SIGNATURES["A"] not in reasoning.encrypted_content  # opaque to the caller, not the signature as it is

    _script_call(fake, "B")
    codex.turn("toolu_B")
    sent = fake.requests[-1].body
    assert sent["messages"] == [{"role": "user", "content": [{"type": "text", "text": PROMPT}]},
                                {"role": "assistant", "content": [_signed("A"), REDACTED, _call("A")]}, _result("A")]
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": BUDGET}  # the tool loop keeps thinking

    fake.script(text="Sunny in both.")
    last = codex.turn(None)
    assert last.output_text == "Sunny in both."
    sent = fake.requests[-1].body
    assert sent["messages"][1:] == [{"role": "assistant", "content": [_signed("A"), REDACTED, _call("A")]},
                                    _result("A"),
                                    {"role": "assistant", "content": [_signed("B"), _call("B")]}, _result("B")]
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": BUDGET}
    assert [_record(live, d)["left_out"] for d in codex.decisions] == [[], [], []]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_without_include_the_thinking_is_only_its_summary(live: Live, fake: FakeUpstream, stream: bool) -> None:
    """A caller that did not ask for encrypted content gets what it asked for: the summary, no token."""
    _script_call(fake, "A")
    client = _client(live)
    args: dict[str, Any] = {"model": "acme/an", "input": "Weather?", "tools": TOOLS, "reasoning": {"effort": "high"}}
    if stream:
        items = [e.item for e in client.responses.create(**args, stream=True) if e.type == "response.output_item.done"]
    else:
        items = client.responses.create(**args).output
    assert items[0].type == "reasoning" and items[0].encrypted_content is None


def test_claudes_thinking_never_reaches_another_provider(live: Live, fake: FakeUpstream) -> None:
    """Turn 1 on Claude, turn 2 on an OpenAI Responses model: the item carrying Claude's thinking is not forwarded
    (OpenAI could not read it and would refuse the request), and the record says what was left out."""
    codex = Codex(live, stream=False)
    _script_call(fake, "A")
    codex.turn("toolu_A")
    codex.model = "acme/rs"
    fake.script(text="Sunny.")
    codex.turn(None)
    sent = json.dumps(fake.requests[-1].body)
    assert CARRIED not in sent and SIGNATURES["A"] not in sent
    assert [item.get("type") for item in fake.requests[-1].body["input"]] == [None, "function_call",
                                                                              "function_call_output"]
    assert _record(live, codex.decisions[-1])["left_out"] == [NOT_SIGNED_BY_OPENAI]


def test_openai_reasoning_passes_through_untouched(live: Live, fake: FakeUpstream) -> None:
    codex = Codex(live, stream=False, model="acme/rs")
    fake.script(text="", reasoning=["Think."], tool_calls=[{"id": "call_1", "name": "get_weather", "arguments": "{}"}])
    first = codex.turn("call_1")
    assert first.output[0].encrypted_content == "gAAAA-fake"
    fake.script(text="Sunny.")
    codex.turn(None)
    assert fake.requests[-1].body["input"][1] == codex.history[1]  # OpenAI's own item, as it came


@pytest.mark.parametrize("token", [CARRIED + "not base64 json!", CARRIED + base64.urlsafe_b64encode(b'{"x": 1}').decode(),
                                   CARRIED + base64.urlsafe_b64encode(b'{"s": ""}').decode()],
                         ids=["garbage", "wrong-shape", "empty-signature"])
def test_a_corrupt_token_is_a_400_naming_it(live: Live, fake: FakeUpstream, token: str) -> None:
    item = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Hm."}],
            "encrypted_content": token}
    with pytest.raises(openai.BadRequestError) as caught:
        _client(live).responses.create(model="acme/an", input=[{"role": "user", "content": "Hi"}, item])
    error = caught.value.body
    assert isinstance(error, dict) and error["param"] == "input.1.encrypted_content", error
    assert fake.requests == []


# --- the stream renderer: one reasoning item per Anthropic block, redacted ones too -------------------------------


def test_each_anthropic_thinking_block_is_a_reasoning_item_of_its_own() -> None:
    request = Request(format="responses", messages=[], body={"include": ["reasoning.encrypted_content"]})
    renderer = StreamRenderer(Answer("d1", "acme/an", 0), request)
    events = [ThinkingDelta("", format="messages"), ThinkingDelta("First.", format="messages"),
              ThinkingDelta(signature="sig-1", format="messages"), ThinkingDelta(redacted="R3d", format="messages"),
              ThinkingDelta("", format="messages"), ThinkingDelta("Second.", format="messages"),
              ThinkingDelta(signature="sig-2", format="messages"),
              ToolCallStart(0, "toolu_1", "get_weather"), ToolCallDelta(0, "{}")]
    frames = renderer.start() + b"".join(renderer.event(ev) for ev in events) + renderer.finish()
    done = [json.loads(line[6:]) for line in frames.decode().splitlines() if line.startswith("data: ")]
    output = done[-1]["response"]["output"]
    assert [item["type"] for item in output] == ["reasoning", "reasoning", "reasoning", "function_call"]
    assert [item["summary"] for item in output[:3]] == [[{"type": "summary_text", "text": "First."}], [],
                                                         [{"type": "summary_text", "text": "Second."}]]
    tokens = [item["encrypted_content"] for item in output[:3]]
    assert all(token.startswith(CARRIED) for token in tokens) and len(set(tokens)) == 3
    assert not [p for n, e in enumerate(done) for p in problems(EVENT, e, f"event {n}")]


def test_a_messages_stream_keeps_consecutive_signed_blocks_apart() -> None:
    """Two thinking blocks in a row (each signed) stay two blocks with their own signatures for a Messages caller
    too: a signature ends its block."""
    renderer = MessagesStream(Answer("d1", "acme/an", 0), Request(format="messages", messages=[]))
    events = [ThinkingDelta("", format="messages"), ThinkingDelta("One.", format="messages"),
              ThinkingDelta(signature="sig-1", format="messages"), ThinkingDelta("", format="messages"),
              ThinkingDelta("Two.", format="messages"), ThinkingDelta(signature="sig-2", format="messages")]
    frames = renderer.start() + b"".join(renderer.event(ev) for ev in events) + renderer.finish()
    data = [json.loads(line[6:]) for line in frames.decode().splitlines() if line.startswith("data: ")]
    starts = [e["index"] for e in data if e["type"] == "content_block_start"]
    signatures = [(e["index"], e["delta"]["signature"]) for e in data
                  if e["type"] == "content_block_delta" and e["delta"]["type"] == "signature_delta"]
    assert starts == [0, 1] and signatures == [(0, "sig-1"), (1, "sig-2")]

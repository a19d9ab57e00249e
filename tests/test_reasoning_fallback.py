"""Reasoning state when a conversation moves between providers: Anthropic's signed and redacted thinking and OpenAI's
encrypted reasoning go back only to the provider that made them, in place and byte for byte; when a fallback (or a
policy) sends the conversation to another provider they are left out, the same way every time, and the decision
record's left_out says what was left out. Never a 400 from an upstream for a foreign or unsigned block.

Through the official SDKs, against a real gateway and the fake upstream of every kind.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from handlers.inference.canonical import Message, Request, Text, Thinking, ToolCall, ToolResult
from handlers.inference.formats import reasoning
from handlers.inference.formats.base import Traits
from tests.conformance_support import BEDROCK_MODEL, BEDROCK_REGION, FREE, aws_environment
from tests.conftest import Live, serve
from tests.fake_upstream import FakeUpstream

SIGNATURE = "EqQBCkYIBxgCKkB+c2ln/w=="
SIGNED = {"type": "thinking", "thinking": "The user asks about Paris.", "signature": SIGNATURE}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}
UNSIGNED = {"type": "thinking", "thinking": "Another provider's reasoning.", "signature": ""}
CALL = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
TOOLS = [{"name": "get_weather", "description": "The weather.",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
THINKING = {"type": "enabled", "budget_tokens": 1024}
ENCRYPTED = "gAAAA-encrypted-by-openai"
NO_THINKING = ("thinking, for this turn: the tool loop's last assistant turn has no thinking block anthropic signed, "
               "and anthropic refuses thinking there without one")
NO_THINKING_ON_BEDROCK = ("thinking, for this turn: the tool loop's last assistant turn has no thinking block claude on "
                          "bedrock signed, and claude on bedrock refuses thinking there without one")
WHY = {"openai": "a chat completions upstream takes back only reasoning text it showed itself",
       "responses": "a responses upstream takes back only reasoning items it encrypted itself",
       "bedrock": "a bedrock upstream takes back only reasoning it gave itself"}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as f:
        yield f


@pytest.fixture(scope="module")
def live(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """acme/an falls back to acme/<kind>-after for each other kind (policy "to-<kind>"); acme/rs to acme/an."""
    config = {
        "upstreams": {"an": {"kind": "anthropic", "base_url": fake.anthropic_url},
                      "oa": {"kind": "openai", "base_url": fake.url},
                      "rs": {"kind": "responses", "base_url": fake.url},
                      "bd": {"kind": "bedrock", "region": BEDROCK_REGION, "base_url": fake.bedrock_url}},
        "models": [{"id": "acme/an", "upstream": "an", "name": "claude-up", "reasoning": True},
                   {"id": "acme/oa", "upstream": "oa", "name": "gpt-up", "reasoning": True},
                   {"id": "acme/rs", "upstream": "rs", "name": "resp-up", "reasoning": True},
                   {"id": "acme/bd", "upstream": "bd", "name": BEDROCK_MODEL, "price": FREE}],
        "policies": {"default": {"default_model": "acme/an",
                                 "fallbacks": {"acme/rs": ["acme/an"], "acme/oa": ["acme/an"]}},
                     "to-openai": {"default_model": "acme/an", "fallbacks": {"acme/an": ["acme/oa"]}},
                     "to-responses": {"default_model": "acme/an", "fallbacks": {"acme/an": ["acme/rs"]}},
                     "to-bedrock": {"default_model": "acme/an", "fallbacks": {"acme/an": ["acme/bd"]}}},
        "default_policy": "default",
        "cooldown": {"seconds": 0},
    }
    with pytest.MonkeyPatch.context() as mp:
        aws_environment(mp, tmp_path_factory.mktemp("aws"))
        with serve(config, tmp_path_factory.mktemp("reasoning")) as g:
            yield g


@pytest.fixture(autouse=True)
def _fresh(fake: FakeUpstream) -> None:
    fake.reset()


def _anthropic(live: Live, key: str | None = None) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=live.url, api_key=key or live.key, max_retries=0, timeout=10,
                               http_client=anthropic.DefaultHttpxClient(trust_env=False))


def _openai(live: Live) -> openai.OpenAI:
    return openai.OpenAI(base_url=live.url + "/v1", api_key=live.key, max_retries=0, timeout=10,
                         http_client=openai.DefaultHttpxClient(trust_env=False))


def _record(live: Live, decision: str) -> dict[str, Any]:
    r = httpx.get(f"{live.url}/v1/route/explain/{decision}", headers={"Authorization": f"Bearer {live.key}"},
                  timeout=10)
    assert r.status_code == 200, r.text
    return dict(r.json())


def _tool_loop(*thinking: dict[str, Any]) -> list[dict[str, Any]]:
    """Claude Code's second request of a tool loop: the assistant's thinking before its tool_use, then the result."""
    return [{"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": [*thinking, CALL]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"}]}]


def _message(live: Live, stream: bool, messages: list[dict[str, Any]], key: str | None = None) -> tuple[str, str]:
    """(the answer's text, its decision id), whole or streamed."""
    args: dict[str, Any] = {"model": "acme/an", "max_tokens": 2048, "messages": messages, "tools": TOOLS,
                            "thinking": THINKING}
    client = _anthropic(live, key)
    if stream:
        with client.messages.with_streaming_response.create(**args, stream=True) as raw:
            decision = raw.headers["x-specway-decision-id"]
            events = [json.loads(line[5:]) for line in raw.iter_lines() if line.startswith("data:")]
        text = "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta")
        return text, decision
    raw_whole = client.messages.with_raw_response.create(**args)
    answer = raw_whole.parse()
    return "".join(b.text for b in answer.content if b.type == "text"), raw_whole.headers["x-specway-decision-id"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_anthropic_thinking_goes_back_to_anthropic_signed_and_in_place(live: Live, fake: FakeUpstream,
                                                                       stream: bool) -> None:
    text, decision = _message(live, stream, _tool_loop(SIGNED, REDACTED))
    assert text == "Hello from fake"
    sent = fake.requests[-1].body
    assert sent["messages"][1]["content"] == [SIGNED, REDACTED, CALL]  # byte for byte, before the tool_use
    assert sent["thinking"] == THINKING
    assert _record(live, decision)["left_out"] == []


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("kind", ["openai", "responses", "bedrock"])
def test_a_fallback_to_another_provider_leaves_anthropic_thinking_out_visibly(live: Live, fake: FakeUpstream,
                                                                              kind: str, stream: bool) -> None:
    key = live.create_key(policy=f"to-{kind}")
    fake.script(status=503, error="overloaded")
    text, decision = _message(live, stream, _tool_loop(SIGNED, dict(SIGNED, signature=SIGNATURE + "2"), REDACTED), key)
    assert text == "Hello from fake"
    first, second = fake.requests
    assert first.body["messages"][1]["content"][:3] == [SIGNED, dict(SIGNED, signature=SIGNATURE + "2"), REDACTED]
    sent = json.dumps(second.body)
    assert SIGNATURE not in sent and SIGNED["thinking"] not in sent and REDACTED["data"] not in sent
    record = _record(live, decision)
    upstream = {"openai": "oa", "responses": "rs", "bedrock": "bd"}[kind]
    assert [a["upstream"] for a in record["attempts"]] == ["an", upstream]
    claude = [NO_THINKING_ON_BEDROCK] if kind == "bedrock" else []
    assert record["left_out"] == [f"2 thinking blocks signed by anthropic: {WHY[kind]}",
                                  f"1 redacted thinking block from anthropic: {WHY[kind]}", *claude]
    if kind == "bedrock":  # Claude on Bedrock: no reasoning of Anthropic's API, and no thinking in that tool loop
        assert "reasoningContent" not in sent and "thinking" not in sent


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_unsigned_thinking_never_reaches_anthropic(live: Live, fake: FakeUpstream, stream: bool) -> None:
    """The thinking this gateway gave another provider's reasoning (an empty signature) comes back: Anthropic would
    refuse it, and thinking in a tool loop whose last assistant turn has no signed block; both are left out."""
    text, decision = _message(live, stream, _tool_loop(UNSIGNED))
    assert text == "Hello from fake"
    sent = fake.requests[-1].body
    assert sent["messages"][1]["content"] == [CALL]
    assert "thinking" not in sent
    assert _record(live, decision)["left_out"] == [
        "1 thinking block without a signature: an anthropic upstream takes back only thinking it signed itself",
        NO_THINKING,
    ]


REASONED = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Think."}],
            "encrypted_content": ENCRYPTED}
FOREIGN = {"type": "reasoning", "id": "rs_gw_0", "summary": [{"type": "summary_text", "text": "Claude thought."}]}


def _responses_input(*reasoning_items: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": "Weather?"}, *reasoning_items,
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "18C"}]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_responses_reasoning_without_encrypted_content_never_reaches_openai(live: Live, fake: FakeUpstream,
                                                                            stream: bool) -> None:
    """With store false OpenAI answers 404 "Item with id 'rs_...' not found" for a reasoning item it cannot read: the
    items this gateway made of another provider's reasoning are left out; OpenAI's own go back as they came."""
    given = _responses_input(REASONED, FOREIGN)
    args: dict[str, Any] = {"model": "acme/rs", "input": given, "max_output_tokens": 100}
    client = _openai(live)
    if stream:
        with client.responses.with_streaming_response.create(**args, stream=True) as raw:
            decision = raw.headers["x-specway-decision-id"]
            raw.read()
    else:
        decision = client.responses.with_raw_response.create(**args).headers["x-specway-decision-id"]
    sent = fake.requests[-1].body["input"]
    assert sent == [item for item in given if item is not FOREIGN]
    assert _record(live, decision)["left_out"] == [
        ("1 reasoning item without encrypted content: a responses upstream takes back only reasoning items it "
         "encrypted itself")]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_fallback_to_anthropic_leaves_openai_reasoning_out_visibly(live: Live, fake: FakeUpstream,
                                                                     stream: bool) -> None:
    fake.script(status=503, error="overloaded")
    args: dict[str, Any] = {"model": "acme/rs", "input": _responses_input(REASONED),
                            "reasoning": {"effort": "high"}, "max_output_tokens": 100}
    client = _openai(live)
    if stream:
        with client.responses.with_streaming_response.create(**args, stream=True) as raw:
            decision = raw.headers["x-specway-decision-id"]
            raw.read()
    else:
        decision = client.responses.with_raw_response.create(**args).headers["x-specway-decision-id"]
    first, second = fake.requests
    assert first.body["input"][1] == REASONED
    assert ENCRYPTED not in json.dumps(second.body) and "Think." not in json.dumps(second.body)
    assert "thinking" not in second.body  # a tool loop whose last turn has no signed thinking runs without it
    assert _record(live, decision)["left_out"] == [
        "1 reasoning item encrypted by openai: an anthropic upstream takes back only thinking it signed itself",
        NO_THINKING]


# --- the rule, for every target -----------------------------------------------------------------------------------

BLOCKS = {
    "signed": Thinking("a", signature="sig", format="messages"),
    "redacted": Thinking("", redacted="data", format="messages"),
    "unsigned": Thinking("b"),
    "encrypted": Thinking("c", encrypted="enc", id="rs_1", format="responses"),
    "summary only": Thinking("d", id="rs_2", format="responses"),
    "chat": Thinking("e", format="chat"),
    "bedrock signed": Thinking("f", signature="c2ln", format="converse"),  # Claude's, on Bedrock
    "bedrock redacted": Thinking("", redacted="cmVk", format="converse"),
    "bedrock text": Thinking("g", format="converse"),  # a model that signs nothing (DeepSeek-R1 on Bedrock)
}
REASONS = Traits(reasoning=True)
TAKES = {"messages": {"signed", "redacted"}, "responses": {"encrypted"}, "chat": {"chat"},
         "converse": {"bedrock signed", "bedrock redacted", "bedrock text"}}


@pytest.mark.parametrize("target", ["messages", "responses", "chat", "converse"])
def test_every_target_takes_back_only_its_own_and_says_what_it_did_not(target: Any) -> None:
    kept = {name for name, block in BLOCKS.items() if reasoning.goes_back(block, target)}
    assert kept == TAKES[target]
    conversation = [Message("user", [Text("hi")]),
                    Message("assistant", [*BLOCKS.values(), ToolCall("c1", "f", "{}")]),
                    Message("tool", [ToolResult("c1", "ok")])]
    said = reasoning.left_out(Request(format="chat", messages=conversation, thinking=True), target, REASONS)
    assert len([s for s in said if not s.startswith("thinking, for this turn")]) == len(BLOCKS) - len(TAKES[target])
    assert any(s.startswith("thinking, for this turn") for s in said) is False  # a signed block is in that turn
    empty = Request(format="chat", messages=[Message("assistant", [Thinking("")])])
    assert reasoning.left_out(empty, target, REASONS) == []


# --- a whole conversation that visits another provider and comes back ----------------------------------------------


def _tool_call_reply(fake: FakeUpstream, thought: str, signature: str = "sig-fake", **fail: Any) -> None:
    if fail:
        fake.script(**fail)
    fake.script(text="", reasoning=[thought], signature=signature,
                tool_calls=[{"id": f"call_{thought[-1]}", "name": "get_weather", "arguments": '{"city":"Paris"}'}])


def test_a_codex_conversation_keeps_openai_reasoning_across_a_detour_to_anthropic(live: Live,
                                                                                  fake: FakeUpstream) -> None:
    """Turn 1 on OpenAI (encrypted reasoning), turn 2 falls back to Anthropic (whose reasoning the caller gets
    without encrypted content), turn 3 on OpenAI again: it gets its own reasoning back as it made it, never the
    item it could not read (which would be a 404), and the record says what was left out."""
    client = _openai(live)
    tools: Any = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": False}]
    history: list[Any] = [{"role": "user", "content": "Weather in Paris, then in Lyon?"}]

    def turn(call_id: str) -> Any:
        r = client.responses.create(model="acme/rs", input=history, tools=tools, reasoning={"effort": "high"})
        history.extend(item.model_dump(exclude_none=True) for item in r.output)
        history.append({"type": "function_call_output", "call_id": call_id, "output": "18C"})
        return r

    _tool_call_reply(fake, "Think A")
    first = turn("call_A")
    assert [i.type for i in first.output] == ["reasoning", "function_call"] and first.output[0].encrypted_content
    _tool_call_reply(fake, "Think B", status=503, error="overloaded")
    second = turn("call_B")
    assert second.output[0].type == "reasoning" and second.output[0].encrypted_content is None
    assert "gAAAA-fake" not in json.dumps(fake.requests[-1].body)  # Anthropic got none of OpenAI's reasoning
    fake.script(text="Sunny in both.")
    raw = client.responses.with_raw_response.create(model="acme/rs", input=history, tools=tools)
    sent = [item for item in fake.requests[-1].body["input"] if item.get("type") == "reasoning"]
    assert sent == [history[1]]  # turn 1's item, byte for byte; not turn 2's
    assert _record(live, raw.headers["x-specway-decision-id"])["left_out"] == [
        ("1 reasoning item without encrypted content: a responses upstream takes back only reasoning items it "
         "encrypted itself")]


def test_a_claude_code_conversation_keeps_anthropic_thinking_across_a_detour_to_openai(live: Live,
                                                                                       fake: FakeUpstream) -> None:
    """Turn 1 on Anthropic (signed thinking before its tool_use), turn 2 falls back to OpenAI (whose reasoning the
    caller gets with an empty signature), turn 3 on Anthropic: turn 1's thinking goes back signed and in place, turn
    2's never does, and that turn's tool loop runs without thinking (Anthropic would refuse it)."""
    detour = live.create_key(policy="to-openai")
    history: list[Any] = [{"role": "user", "content": "Weather in Paris, then in Lyon?"}]

    def turn(call_id: str, key: str | None = None) -> Any:
        answer = _anthropic(live, key).messages.create(model="acme/an", max_tokens=2048, messages=history,
                                                        tools=TOOLS, thinking=THINKING)  # type: ignore[arg-type]
        history.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in answer.content]})
        history.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id,
                                                     "content": "18C"}]})
        return answer

    _tool_call_reply(fake, "Think A", signature=SIGNATURE)
    first = turn("call_A")
    assert (first.content[0].type, getattr(first.content[0], "signature", None)) == ("thinking", SIGNATURE)
    _tool_call_reply(fake, "Think B", status=503, error="overloaded")
    second = turn("call_B", detour)
    assert (second.content[0].type, getattr(second.content[0], "signature", None)) == ("thinking", "")
    assert SIGNATURE not in json.dumps(fake.requests[-1].body)
    fake.script(text="Sunny in both.")
    raw = _anthropic(live).messages.with_raw_response.create(model="acme/an", max_tokens=2048, messages=history,
                                                             tools=TOOLS, thinking=THINKING)  # type: ignore[arg-type]
    sent = fake.requests[-1].body
    assert sent["messages"][1]["content"] == history[1]["content"]  # signed, before its tool_use, byte for byte
    assert [b["type"] for b in sent["messages"][3]["content"]] == ["tool_use"]
    assert "thinking" not in sent
    assert len(_record(live, raw.headers["x-specway-decision-id"])["left_out"]) == 2


def test_bedrock_reasoning_is_named_as_bedrocks_and_claude_on_bedrock_needs_its_own_signed_turn() -> None:
    """Reasoning Bedrock gave goes back only to a bedrock upstream, and is named as Bedrock's where it is left out;
    Claude on Bedrock, like Anthropic, gets no thinking in a tool loop whose last assistant turn it did not sign
    (Anthropic's own signature is not Bedrock's: the gateway cannot tell one account's from another's)."""
    ANTHROPIC_TAKES = "an anthropic upstream takes back only thinking it signed itself"
    def loop(*thinking: Thinking) -> Request:
        return Request(format="messages", thinking=True, messages=[
            Message("user", [Text("hi")]), Message("assistant", [*thinking, ToolCall("c1", "f", "{}")]),
            Message("tool", [ToolResult("c1", "ok")])])

    mine = loop(BLOCKS["bedrock signed"], BLOCKS["bedrock redacted"])
    assert reasoning.thinking_allowed(mine.messages, "converse")
    assert not reasoning.thinking_allowed(mine.messages)  # Anthropic's API did not sign them
    assert reasoning.left_out(mine, "converse", REASONS) == []
    assert reasoning.left_out(mine, "messages", REASONS) == [
        f"1 reasoning block signed by claude on bedrock: {ANTHROPIC_TAKES}",
        f"1 redacted reasoning block from bedrock: {ANTHROPIC_TAKES}", NO_THINKING]
    theirs = loop(BLOCKS["signed"])
    assert not reasoning.thinking_allowed(theirs.messages, "converse")
    assert reasoning.left_out(theirs, "converse", REASONS) == [
        f"1 thinking block signed by anthropic: {WHY['bedrock']}", NO_THINKING_ON_BEDROCK]
    assert reasoning.left_out(loop(BLOCKS["bedrock text"]), "chat", REASONS) == [
        f"1 reasoning text of a bedrock upstream: {WHY['openai']}"]

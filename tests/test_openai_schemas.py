"""Every Responses answer and stream event the gateway sends validates against OpenAI's published schemas (pinned in
tests/openai_spec/), whichever upstream kind served it: text, function and custom tool calls, reasoning, structured
output, refusals, web search. And the Responses stream reader knows every event type OpenAI's spec lists."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import openai
import pytest

from handlers.inference.formats.responses import reader
from handlers.observability import metrics
from tests.conftest import Live, serve
from tests.fake_upstream import FakeUpstream

PINNED = json.loads((Path(__file__).parent / "openai_spec" / "responses.json").read_text())
SCHEMAS = PINNED["components"]["schemas"]
KINDS = ("openai", "anthropic", "responses")
MODEL = {"openai": "acme/oa", "anthropic": "acme/an", "responses": "acme/rs"}
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
PATCH = {"type": "custom", "name": "apply_patch", "description": "Apply a patch."}
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
        "additionalProperties": False}
STRUCTURED = {"format": {"type": "json_schema", "name": "city", "schema": CITY, "strict": True}}


def validator(name: str) -> jsonschema.Draft202012Validator:
    """A validator of the pinned schema `name`, its $refs resolved in the pinned document."""
    return jsonschema.Draft202012Validator({**PINNED, "$ref": f"#/components/schemas/{name}"})


RESPONSE = validator("Response")
EVENT = validator("ResponseStreamEvent")
EVENT_TYPES = {
    (schema["properties"]["type"].get("enum") or [None])[0]: name
    for name in (alt["$ref"].rsplit("/", 1)[-1] for alt in SCHEMAS["ResponseStreamEvent"]["anyOf"])
    for schema in [SCHEMAS[name]]
}


def problems(check: jsonschema.Draft202012Validator, value: Any, what: str) -> list[str]:
    """Every way `value` fails the schema, each with its path; for an event, against its own type's schema first
    (the union's errors only say that no member matched)."""
    if check is EVENT and value.get("type") in EVENT_TYPES:
        check = validator(EVENT_TYPES[value["type"]])
    return [f"{what} at {'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message[:300]}"
            for e in sorted(check.iter_errors(value), key=lambda e: list(map(str, e.absolute_path)))]


# --- the gateway, with one upstream of each kind on the fake ---------------------------------------------------------


@pytest.fixture(scope="module", name="fake")
def fixture_fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as f:
        yield f


@pytest.fixture(scope="module", name="live")
def fixture_live(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    timeouts = {"connect": 2, "read": 5, "total": 10}
    config = {
        "upstreams": {
            "oa": {"kind": "openai", "base_url": fake.url, "timeouts": timeouts},
            "an": {"kind": "anthropic", "base_url": fake.anthropic_url, "timeouts": timeouts},
            "rs": {"kind": "responses", "base_url": fake.url, "timeouts": timeouts},
        },
        "models": [
            {"id": "acme/oa", "upstream": "oa", "name": "gpt-up", "reasoning": True},
            {"id": "acme/an", "upstream": "an", "name": "claude-up", "reasoning": True},
            {"id": "acme/rs", "upstream": "rs", "name": "resp-up", "reasoning": True},
        ],
        "policies": {"default": {"default_model": "acme/oa"}},
        "default_policy": "default",
        "cooldown": {"seconds": 0},
    }
    with serve(config, tmp_path_factory.mktemp("schemas")) as g:
        yield g


@pytest.fixture(autouse=True, name="_fresh")
def fixture_fresh(fake: FakeUpstream) -> None:
    fake.reset()


def whole(live: Live, body: dict[str, Any]) -> dict[str, Any]:
    """POST /v1/responses; the answer, which must be a 200 that validates as a Response."""
    got = httpx.post(f"{live.url}/v1/responses", json=body, headers=live.headers, timeout=10)
    assert got.status_code == 200, got.text
    answer = got.json()
    assert not (found := problems(RESPONSE, answer, "response")), "\n".join(found)
    return answer


def streamed(live: Live, body: dict[str, Any]) -> list[dict[str, Any]]:
    """POST /v1/responses with stream true; its events, each of which must validate as a ResponseStreamEvent whose
    type matches its SSE event name, numbered in order."""
    events: list[dict[str, Any]] = []
    with httpx.stream("POST", f"{live.url}/v1/responses", json={**body, "stream": True}, headers=live.headers,
                      timeout=10) as got:
        assert got.status_code == 200, got.read()
        name = None
        for line in got.iter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                event = json.loads(line.removeprefix("data: "))
                assert event["type"] == name
                events.append(event)
    found = [p for n, e in enumerate(events) for p in problems(EVENT, e, f"event {n} ({e.get('type')})")]
    assert not found, "\n".join(found)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events


def answers(live: Live, body: dict[str, Any], fake: FakeUpstream, **reply: Any) -> list[dict[str, Any]]:
    """The whole answer and the streamed response.completed's response, for one scripted reply each."""
    fake.script(**reply)
    answer = whole(live, body)
    fake.script(**reply)
    events = streamed(live, body)
    assert events[-1]["type"] == "response.completed"
    return [answer, events[-1]["response"]]


def kinds_of(items: list[dict[str, Any]]) -> list[str]:
    return [item["type"] for item in items]


# --- the answers and events, upstream by upstream ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_text(live: Live, fake: FakeUpstream, kind: str) -> None:
    body = {"model": MODEL[kind], "input": "Say hello.", "instructions": "Be brief.", "temperature": 0.5}
    for answer in answers(live, body, fake, text="Hello there."):
        assert answer["output_text"] == "Hello there." and kinds_of(answer["output"]) == ["message"]
        assert answer["text"] == {"format": {"type": "text"}}
        assert (answer["instructions"], answer["temperature"]) == ("Be brief.", 0.5)


@pytest.mark.parametrize("kind", KINDS)
def test_the_request_echoed(live: Live, fake: FakeUpstream, kind: str) -> None:
    body = {"model": MODEL[kind], "input": "Hi.", "metadata": {"ticket": "T-1"}, "truncation": "disabled",
            "reasoning": {"effort": "low", "summary": "concise"}, "safety_identifier": "u-7", "store": False}
    for answer in answers(live, body, fake, text="Hello."):
        assert answer["metadata"] == {"ticket": "T-1"} and answer["truncation"] == "disabled"
        assert answer["reasoning"] == {"effort": "low", "summary": "concise"} and answer["safety_identifier"] == "u-7"


@pytest.mark.parametrize("kind", KINDS)
def test_function_call_and_the_tools_echoed(live: Live, fake: FakeUpstream, kind: str) -> None:
    body = {"model": MODEL[kind], "input": "Weather in Paris?", "tools": [WEATHER]}
    call = {"id": "call_w1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
    for answer in answers(live, body, fake, text="", tool_calls=[call]):
        assert kinds_of(answer["output"]) == ["function_call"]  # no empty message beside the call
        assert json.loads(answer["output"][0]["arguments"]) == {"city": "Paris"}
        assert answer["tools"] == [{**WEATHER, "strict": None}]  # strict not said: null, as the schema requires it


@pytest.mark.parametrize("kind", KINDS)
def test_custom_tool_call(live: Live, fake: FakeUpstream, kind: str) -> None:
    body = {"model": MODEL[kind], "input": "Fix the bug.", "tools": [PATCH]}
    patch = "*** Begin Patch\n*** Update File: a.py\n-x\n+y\n*** End Patch"
    for answer in answers(live, body, fake, text="", tool_calls=[{"id": "call_p", "name": "apply_patch",
                                                                   "input": patch}]):
        assert kinds_of(answer["output"]) == ["custom_tool_call"]
        item = answer["output"][0]
        assert (item["call_id"], item["name"], item["input"]) == ("call_p", "apply_patch", patch)
        assert answer["tools"] == [PATCH]


@pytest.mark.parametrize("kind", KINDS)
def test_reasoning(live: Live, fake: FakeUpstream, kind: str) -> None:
    body = {"model": MODEL[kind], "input": "Think, then answer.", "reasoning": {"effort": "high", "summary": "auto"},
            "include": ["reasoning.encrypted_content"]}
    for answer in answers(live, body, fake, text="42.", reasoning=["First a thought.", "Then another."]):
        assert kinds_of(answer["output"]) == ["reasoning", "message"]
        thought = answer["output"][0]
        assert "First a thought." in thought["summary"][0]["text"]
        if kind == "responses":
            assert thought["encrypted_content"] == "gAAAA-fake"


def test_reasoning_without_a_summary_keeps_its_encrypted_content(live: Live, fake: FakeUpstream) -> None:
    body = {"model": MODEL["responses"], "input": "Think.", "reasoning": {"effort": "high"},
            "include": ["reasoning.encrypted_content"]}
    for answer in answers(live, body, fake, text="Done.", reasoning=[]):
        assert answer["output"][0] == {"id": "rs_fake", "type": "reasoning", "summary": [],
                                       "encrypted_content": "gAAAA-fake"}


@pytest.mark.parametrize("kind", KINDS)
def test_structured_output_echoes_text_format(live: Live, fake: FakeUpstream, kind: str) -> None:
    body = {"model": MODEL[kind], "input": "A city, as JSON.", "text": STRUCTURED}
    for answer in answers(live, body, fake, text='{"city": "Paris"}'):
        assert answer["text"]["format"] == STRUCTURED["format"]  # what LangChain reads to parse the output
        assert json.loads(answer["output_text"]) == {"city": "Paris"}


NAMESPACE = {"type": "namespace", "name": "repo", "description": "The repository.",
             "tools": [{"type": "function", "name": "read", "parameters": {"type": "object", "properties": {}}},
                       {"type": "custom", "name": "patch"}]}


@pytest.mark.parametrize("kind", KINDS)
def test_a_namespace_and_a_hosted_tool_echoed(live: Live, fake: FakeUpstream, kind: str) -> None:
    body = {"model": MODEL[kind], "input": "Read it.", "tools": [NAMESPACE, {"type": "web_search"}],
            "tool_choice": "auto", "parallel_tool_calls": False}
    for answer in answers(live, body, fake, text="Done."):
        member = {**NAMESPACE["tools"][0], "strict": None}
        assert answer["tools"] == [{**NAMESPACE, "tools": [member, NAMESPACE["tools"][1]]}, {"type": "web_search"}]
        assert (answer["tool_choice"], answer["parallel_tool_calls"]) == ("auto", False)


LIMITED = {"openai": "length", "anthropic": "max_tokens", "responses": "max_output_tokens"}


@pytest.mark.parametrize("kind", KINDS)
def test_an_incomplete_answer(live: Live, fake: FakeUpstream, kind: str) -> None:
    body = {"model": MODEL[kind], "input": "Go on and on.", "max_output_tokens": 16}
    for answer in answers(live, body, fake, text="On and", finish=LIMITED[kind]):
        assert (answer["status"], answer["incomplete_details"]) == ("incomplete", {"reason": "max_output_tokens"})
        assert answer["max_output_tokens"] == 16


@pytest.mark.parametrize("kind", KINDS)
def test_a_stream_that_fails_midway_ends_with_an_error_event(live: Live, fake: FakeUpstream, kind: str) -> None:
    after = 6 if kind == "responses" else 4  # past the first piece of text: too late to fall back
    fake.script(text="One two three four five six seven.", fail_after=after, error="upstream fell over")
    events = streamed(live, {"model": MODEL[kind], "input": "Count."})
    assert "response.output_text.delta" in [e["type"] for e in events]
    assert events[-1]["type"] == "error" and events[-1]["code"]


@pytest.mark.parametrize("kind", ["openai", "responses"])  # Anthropic has no refusal in words
def test_a_refusal_is_a_refusal(live: Live, fake: FakeUpstream, kind: str) -> None:
    body = {"model": MODEL[kind], "input": "Something bad."}
    for answer in answers(live, body, fake, text="", refusal="I can't help with that."):
        assert answer["output"][0]["content"] == [{"type": "refusal", "refusal": "I can't help with that."}]
        assert answer["output_text"] == ""


@pytest.mark.parametrize("kind", ["openai", "responses"])
def test_the_stream_of_a_refusal(live: Live, fake: FakeUpstream, kind: str) -> None:
    fake.script(text="", refusal="I can't help with that.")
    events = streamed(live, {"model": MODEL[kind], "input": "Something bad."})
    kinds = [e["type"] for e in events]
    assert "response.refusal.delta" in kinds and "response.refusal.done" in kinds
    assert "response.output_text.delta" not in kinds


SEARCH = {"id": "ws_1", "type": "web_search_call", "status": "completed",
          "action": {"type": "search", "query": "weather paris"}}
CITATION = {"type": "url_citation", "url": "https://example.com/paris", "title": "Paris", "start_index": 0,
            "end_index": 5}


def test_web_search_from_a_responses_upstream_is_relayed(live: Live, fake: FakeUpstream) -> None:
    body = {"model": MODEL["responses"], "input": "Weather in Paris?", "tools": [{"type": "web_search"}]}
    for answer in answers(live, body, fake, text="Sunny.", items=[SEARCH], annotations=[CITATION]):
        assert answer["output"][0] == SEARCH
        assert answer["output"][1]["content"][0]["annotations"] == [CITATION]


def test_a_web_search_streams_as_it_goes(live: Live, fake: FakeUpstream) -> None:
    """A Responses caller sees the search open, progress and end, at the output index it has in this answer."""
    fake.script(text="Sunny.", reasoning=["Search first."], items=[SEARCH])
    events = streamed(live, {"model": MODEL["responses"], "input": "Weather in Paris?", "tools": [{"type": "web_search"}],
                             "reasoning": {"effort": "low", "summary": "auto"}})
    mine = [(e["type"], e.get("output_index")) for e in events
            if e.get("item_id") == "ws_1" or e.get("item", {}).get("id") == "ws_1"]
    assert mine == [("response.output_item.added", 1), ("response.web_search_call.in_progress", 1),
                    ("response.web_search_call.searching", 1), ("response.web_search_call.completed", 1),
                    ("response.output_item.done", 1)]
    assert events[-1]["response"]["output"][1] == SEARCH


def test_the_sdk_accumulates_what_the_stream_relays(live: Live, fake: FakeUpstream) -> None:
    """The openai SDK builds its final response from the events alone (it checks that each refers to an item and a
    part it has): a built-in tool's item, text with an annotation, a refusal, a custom tool call."""
    fake.script(text="Sunny.", items=[SEARCH], annotations=[CITATION], refusal="No more.",
                tool_calls=[{"id": "call_p", "name": "apply_patch", "input": "*** Begin Patch"}])
    client = openai.OpenAI(base_url=f"{live.url}/v1", api_key=live.key, max_retries=0, timeout=10)
    with client.responses.stream(model=MODEL["responses"], input="Weather?",
                                 tools=[{"type": "web_search"}, PATCH]) as events:  # type: ignore[list-item]
        final = events.get_final_response()
    search, said, patch = final.output
    assert search.type == "web_search_call" and search.id == "ws_1"
    assert said.type == "message" and [part.type for part in said.content] == ["output_text", "refusal"]
    assert said.content[0].annotations[0].url == CITATION["url"]  # type: ignore[union-attr]
    assert patch.type == "custom_tool_call" and patch.input == "*** Begin Patch"


@pytest.mark.parametrize("stream", [False, True])
def test_an_item_another_format_has_no_place_for_is_left_out_visibly(live: Live, fake: FakeUpstream,
                                                                     stream: bool) -> None:
    """A Messages caller's web search, served by a responses upstream: the answer's text arrives, and the
    web_search_call item it has no block for is named in the decision record and counted, not dropped unseen."""
    before = unread("item", "web_search_call")
    fake.script(text="Sunny.", items=[SEARCH])
    body = {"model": MODEL["responses"], "max_tokens": 100, "stream": stream,
            "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "tools": [{"type": "web_search_20250305", "name": "web_search"}]}
    got = httpx.post(f"{live.url}/v1/messages", json=body, headers=live.headers, timeout=10)
    assert got.status_code == 200, got.text
    assert "Sunny." in (got.text if stream else got.json()["content"][0]["text"])
    assert fake.requests[-1].body["tools"] == [{"type": "web_search"}]
    record = httpx.get(f"{live.url}/v1/route/explain/{got.headers['x-specway-decision-id']}", headers=live.headers)
    assert any("web_search_call" in said for said in record.json()["left_out"]), record.text
    assert unread("item", "web_search_call") == before + 1


def unread(what: str, kind: str) -> float:
    return metrics.UNREAD.labels("responses", what, kind)._value.get()  # type: ignore[attr-defined]


def test_an_event_type_the_reader_does_not_know_is_counted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    before = unread("event", "response.brand_new.delta")
    events = reader.UpstreamReader().read("response.brand_new.delta", '{"type": "response.brand_new.delta"}')
    assert events == [] and unread("event", "response.brand_new.delta") == before + 1
    assert "response.brand_new.delta" in caplog.text
    assert reader.UpstreamReader().read("", '{"type": "response.in_progress"}') == []  # ignored on purpose: not counted
    assert unread("event", "response.in_progress") == 0
    message = {"type": "message", "id": "m", "content": [{"type": "output_hologram", "data": "..."}]}
    parts = unread("part", "message part output_hologram")
    assert reader.upstream_result({"status": "completed", "output": [message]}).content == []
    assert unread("part", "message part output_hologram") == parts + 1 and "output_hologram" in caplog.text


# --- a client that reads the echo: LangChain's structured output over the Responses API ----------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_langchain_structured_output_streamed(live: Live, fake: FakeUpstream, kind: str) -> None:
    """ChatOpenAI parses structured output from the text.format the final response.completed echoes; without it,
    "Structured Output response does not have a 'parsed' field"."""
    from langchain_openai import ChatOpenAI
    from pydantic import BaseModel

    class City(BaseModel):
        city: str

    fake.script(text='{"city": "Paris"}')
    llm = ChatOpenAI(model=MODEL[kind], base_url=f"{live.url}/v1", api_key=live.key, use_responses_api=True,
                     streaming=True, max_retries=0, timeout=10)  # type: ignore[call-arg]
    assert llm.with_structured_output(City, method="json_schema").invoke("A city, as JSON.") == City(city="Paris")
    sent = fake.requests[-1].body
    assert sent["stream"] is True


# --- the reader knows every event type of the spec --------------------------------------------------------------------


def test_the_reader_knows_every_event_type_of_the_spec() -> None:
    """Each event type OpenAI lists is read into canonical events or ignored for a reason the reader's table says; a
    type the reader does not know is one this test names (and the reader counts at run time)."""
    known = set(reader.HANDLED) | set(reader.IGNORED)
    assert not (missing := sorted(set(EVENT_TYPES) - known)), f"event types the reader does not know: {missing}"
    assert not set(reader.HANDLED) & set(reader.IGNORED)
    assert all(reason.strip() for reason in reader.IGNORED.values())

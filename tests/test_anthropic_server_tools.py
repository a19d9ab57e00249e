"""An Anthropic upstream's server tool blocks (a web search's call and its results) and its text citations: a
Messages caller gets them as they came, whole and streamed; a caller of another format gets the rest of the answer,
web citations as url_citation annotations (Responses), and what its format has no place for left out visibly (named
in the decision record's left_out, counted in specway_upstream_unread), never silently. And OpenAI's annotations the
other way: a Messages or Chat caller of a responses upstream gets the text, the annotations left out visibly.

Through the official SDKs, against a real gateway and the fake upstream.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from handlers.observability import metrics
from tests.conftest import Live, serve
from tests.fake_upstream import FakeUpstream
from tests.test_openai_schemas import EVENT, RESPONSE, problems

URL = "https://meteo.example/paris"
CALL = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "weather in Paris"}}
RESULT = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
          "content": [{"type": "web_search_result", "url": URL, "title": "Paris weather",
                       "encrypted_content": "EqgfCioIARgBIiQ3", "page_age": "May 1, 2026"}]}
WEB = {"type": "web_search_result_location", "url": URL, "title": "Paris weather", "encrypted_index": "Eo8BCioIAhgB",
       "cited_text": "Sunny, 18C."}
DOC = {"type": "char_location", "cited_text": "Paris is in France.", "document_index": 0, "document_title": "Atlas",
       "start_char_index": 0, "end_char_index": 19}
TEXTS = ["Let me search. ", "It is sunny in Paris.", " It is in France.", " Enjoy!"]
BLOCKS = [{"type": "text", "text": TEXTS[0]}, CALL, RESULT,
          {"type": "text", "text": TEXTS[1], "citations": [WEB]},
          {"type": "text", "text": TEXTS[2], "citations": [DOC]},
          {"type": "text", "text": TEXTS[3]}]
SEARCH_TOOL: Any = [{"type": "web_search_20250305", "name": "web_search", "max_uses": 1}]
ITEMS_LEFT_OUT = {fmt: [f"answer item server_tool_use: the {fmt} format has no place for messages's own",
                        f"answer item web_search_tool_result: the {fmt} format has no place for messages's own"]
                  for fmt in ("responses", "chat")}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as f:
        yield f


@pytest.fixture(scope="module")
def live(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    config = {"upstreams": {"an": {"kind": "anthropic", "base_url": fake.anthropic_url},
                            "rs": {"kind": "responses", "base_url": fake.url}},
              "models": [{"id": "acme/an", "upstream": "an", "name": "claude-up"},
                         {"id": "acme/rs", "upstream": "rs", "name": "resp-up"}],
              "policies": {"default": {"default_model": "acme/an"}}, "default_policy": "default"}
    with serve(config, tmp_path_factory.mktemp("server-tools")) as g:
        yield g


@pytest.fixture(autouse=True)
def _fresh(fake: FakeUpstream) -> None:
    fake.reset()
    fake.script(text="", blocks=BLOCKS, native_usage={"server_tool_use": {"web_search_requests": 1}})


def _record(live: Live, decision: str) -> dict[str, Any]:
    r = httpx.get(f"{live.url}/v1/route/explain/{decision}", headers=live.headers, timeout=10)
    assert r.status_code == 200, r.text
    return dict(r.json())


def _unread(what: str, kind: str) -> float:
    return metrics.UNREAD.labels("messages", what, kind)._value.get()  # type: ignore[attr-defined]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_messages_caller_gets_server_tool_blocks_and_citations_as_they_came(live: Live, fake: FakeUpstream,
                                                                             stream: bool) -> None:
    client = anthropic.Anthropic(base_url=live.url, api_key=live.key, max_retries=0, timeout=10,
                                 http_client=anthropic.DefaultHttpxClient(trust_env=False))
    args: dict[str, Any] = {"model": "acme/an", "max_tokens": 512, "tools": SEARCH_TOOL,
                            "messages": [{"role": "user", "content": "Weather in Paris?"}]}
    if stream:
        with client.messages.stream(**args) as events:
            answer, decision = events.get_final_message(), events.response.headers["x-specway-decision-id"]
    else:
        raw_whole = client.messages.with_raw_response.create(**args)
        answer, decision = raw_whole.parse(), raw_whole.headers["x-specway-decision-id"]
    assert [block.to_dict() for block in answer.content] == BLOCKS
    assert answer.usage.server_tool_use is not None and answer.usage.server_tool_use.web_search_requests == 1
    assert fake.requests[-1].body["tools"] == SEARCH_TOOL
    assert _record(live, decision)["left_out"] == []


def _responses(live: Live, stream: bool) -> tuple[dict[str, Any], str]:
    """The Response a Responses caller got (response.completed's when streamed), valid by OpenAI's schemas, and its
    decision id."""
    client = openai.OpenAI(base_url=live.url + "/v1", api_key=live.key, max_retries=0, timeout=10,
                           http_client=openai.DefaultHttpxClient(trust_env=False))
    args: dict[str, Any] = {"model": "acme/an", "input": "Weather in Paris?", "tools": [{"type": "web_search"}]}
    if not stream:
        raw = client.responses.with_raw_response.create(**args)
        body = raw.http_response.json()
        assert not (found := problems(RESPONSE, body, "response")), "\n".join(found)
        return body, raw.headers["x-specway-decision-id"]
    raw_stream = client.responses.with_raw_response.create(**args, stream=True)
    events = [e.to_dict() for e in raw_stream.parse()]
    assert not (found := [p for n, e in enumerate(events) for p in problems(EVENT, e, f"event {n}")]), found
    annotations = [e["annotation"] for e in events if e["type"] == "response.output_text.annotation.added"]
    assert annotations == events[-1]["response"]["output"][0]["content"][0]["annotations"]
    return events[-1]["response"], raw_stream.headers["x-specway-decision-id"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_responses_caller_gets_web_citations_as_url_citations_and_the_rest_left_out_visibly(
        live: Live, fake: FakeUpstream, stream: bool) -> None:
    before = (_unread("item", "server_tool_use"), _unread("citation", "char_location"))
    answer, decision = _responses(live, stream)
    [message] = answer["output"]
    [part] = message["content"]
    assert part["text"] == answer["output_text"] == "".join(TEXTS)
    start = len(TEXTS[0])
    assert part["annotations"] == [{"type": "url_citation", "start_index": start, "end_index": start + len(TEXTS[1]),
                                    "url": URL, "title": "Paris weather"}]
    assert part["text"][start:start + len(TEXTS[1])] == "It is sunny in Paris."
    assert _record(live, decision)["left_out"] == [
        *ITEMS_LEFT_OUT["responses"],
        ("1 citation (char_location): a responses answer cites only web pages (url_citation), and this citation "
         "has no URL")]
    assert (_unread("item", "server_tool_use"), _unread("citation", "char_location")) == (before[0] + 1,
                                                                                         before[1] + 1)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_chat_caller_gets_the_text_and_the_rest_left_out_visibly(live: Live, fake: FakeUpstream,
                                                                   stream: bool) -> None:
    client = openai.OpenAI(base_url=live.url + "/v1", api_key=live.key, max_retries=0, timeout=10,
                           http_client=openai.DefaultHttpxClient(trust_env=False))
    args: dict[str, Any] = {"model": "acme/an", "messages": [{"role": "user", "content": "Weather in Paris?"}]}
    if stream:
        raw = client.chat.completions.with_raw_response.create(**args, stream=True)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in raw.parse() if chunk.choices)
    else:
        raw = client.chat.completions.with_raw_response.create(**args)
        text = raw.parse().choices[0].message.content or ""
    assert text == "".join(TEXTS)
    why = "a chat completions answer has no place for anthropic's citations"
    assert _record(live, raw.headers["x-specway-decision-id"])["left_out"] == [
        *ITEMS_LEFT_OUT["chat"], f"1 citation (char_location): {why}",
        f"1 citation (web_search_result_location): {why}"]


ANNOTATION = {"type": "url_citation", "start_index": 0, "end_index": 5, "url": URL, "title": "Paris weather"}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("fmt", ["messages", "chat"])
def test_openai_annotations_are_left_out_visibly_for_another_format(live: Live, fake: FakeUpstream, fmt: str,
                                                                    stream: bool) -> None:
    fake.reset()
    fake.script(text="Sunny in Paris.", annotations=[ANNOTATION])
    before = metrics.UNREAD.labels("responses", "citation", "url_citation")._value.get()  # type: ignore[attr-defined]
    body: dict[str, Any] = {"model": "acme/rs", "messages": [{"role": "user", "content": "Weather?"}],
                            "max_tokens": 100, "stream": stream}
    path = {"messages": "/v1/messages", "chat": "/v1/chat/completions"}[fmt]
    got = httpx.post(live.url + path, json=body, headers=live.headers, timeout=10)
    assert got.status_code == 200, got.text
    assert "Paris." in got.text  # streamed word by word
    why = {"messages": "a messages answer has no place for openai's annotations",
           "chat": "a chat completions answer has no place for openai responses' annotations"}[fmt]
    assert _record(live, got.headers["x-specway-decision-id"])["left_out"] == [f"1 annotation (url_citation): {why}"]
    after = metrics.UNREAD.labels("responses", "citation", "url_citation")._value.get()  # type: ignore[attr-defined]
    assert after == before + 1

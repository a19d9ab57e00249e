"""Refusals both ways. A part an upstream cannot carry is refused by the path it has in the caller's own request
(input.0.content.1.file_url), not by the canonical block's name, for every caller format and the upstream formats that
refuse it. A model's refusal in words reaches each caller in its format's place for it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from handlers.errors import ApiError
from handlers.inference.canonical import Finish, FinishReason, Result, Text, TextDelta, Usage
from handlers.inference.formats import chat, messages, responses
from handlers.inference.formats.base import Traits, UpstreamOptions
from tests.formats_support import parse, render
from tests.test_formats_streams import events_of, stream

UPSTREAMS = {"chat": chat, "messages": messages, "responses": responses}
PDF = "https://x/a.pdf"


def _user(fmt: str, *parts: dict[str, Any]) -> dict[str, Any]:
    text = {"type": "input_text" if fmt == "responses" else "text", "text": "Read this."}
    turn = {"role": "user", "content": [text, *parts]}
    return {"input": [turn]} if fmt == "responses" else {"messages": [turn], "max_tokens": 64}


CASES = [
    ("responses", _user("responses", {"type": "input_file", "file_url": PDF}), "chat", "input.0.content.1.file_url"),
    ("responses", _user("responses", {"type": "input_image", "file_id": "file_1"}), "chat",
     "input.0.content.1.file_id"),
    ("responses", _user("responses", {"type": "input_audio", "input_audio": {}}), "chat", "input.0.content.1"),
    ("responses", _user("responses", {"type": "input_audio", "input_audio": {}}), "messages", "input.0.content.1"),
    ("messages", _user("messages", {"type": "document", "source": {"type": "url", "url": PDF}}), "chat",
     "messages.0.content.1.source.url"),
    ("messages", _user("messages", {"type": "document", "source": {"type": "file", "file_id": "f"}}), "chat",
     "messages.0.content.1.source.file_id"),
    ("messages", _user("messages", {"type": "image", "source": {"type": "file", "file_id": "f"}}), "responses",
     "messages.0.content.1.source.file_id"),
    ("messages", _user("messages", {"type": "search_result", "source": "s", "title": "t", "content": []}),
     "responses", "messages.0.content.1"),
    ("chat", _user("chat", {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}), "messages",
     "messages.0.content.1"),
    ("chat", _user("chat", {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}), "responses",
     "messages.0.content.1"),
]  # fmt: skip


@pytest.mark.parametrize(("fmt", "body", "upstream", "param"), CASES)
def test_a_refused_part_is_named_by_its_path_in_the_callers_request(fmt: str, body: dict[str, Any], upstream: str,
                                                                     param: str) -> None:
    request = parse(fmt, body)
    with pytest.raises(ApiError) as caught:
        UPSTREAMS[upstream].upstream_body(request, "m", UpstreamOptions(), Traits())
    assert (caught.value.status, caught.value.code, caught.value.param) == (400, "unsupported_parameter", param)
    assert param in caught.value.message


# --- the model's refusal in words: chat's refusal field, Responses' refusal part ------------------------------------

REFUSED = Result([Text("I can't help with that.", refusal=True)], FinishReason.STOP, Usage())


def test_a_refusal_reaches_a_chat_caller_in_the_refusal_field() -> None:
    message = render("chat", REFUSED)["choices"][0]["message"]
    assert (message["content"], message["refusal"]) == (None, "I can't help with that.")
    deltas = [c["choices"][0]["delta"] for c in events_of(stream("chat", [TextDelta("No.", refusal=True),
                                                                          Finish(FinishReason.STOP)])) if c["choices"]]
    assert {"refusal": "No."} in deltas and not any(d.get("content") for d in deltas)


def test_a_refusal_reaches_a_messages_caller_as_text() -> None:
    assert render("messages", REFUSED)["content"] == [{"type": "text", "text": "I can't help with that."}]


def test_a_refusal_read_from_chat_is_a_refusal() -> None:
    answer = {"choices": [{"index": 0, "finish_reason": "stop",
                           "message": {"role": "assistant", "content": None, "refusal": "No."}}]}
    assert chat.upstream_result(answer).content == [Text("No.", refusal=True)]
    reader = chat.UpstreamReader()
    chunk = {"choices": [{"index": 0, "delta": {"refusal": "No."}, "finish_reason": None}]}
    assert reader.read("", json.dumps(chunk)) == [TextDelta("No.", refusal=True)]

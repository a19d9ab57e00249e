"""A part an upstream cannot carry is refused by the path it has in the caller's own request (input.0.content.1.file_url),
not by the canonical block's name, for every caller format and the upstream formats that refuse it."""

from __future__ import annotations

from typing import Any

import pytest

from handlers.errors import ApiError
from handlers.inference.formats import chat, messages, responses
from handlers.inference.formats.base import Traits, UpstreamOptions
from tests.formats_support import parse

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

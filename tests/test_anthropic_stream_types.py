"""The Messages reader drops nothing unseen: every stream event type, content block type, delta type and citation
type Anthropic's SDK defines (its GA and beta types, as installed) is read, relayed as an item, or ignored on purpose
with its reason; a type it does not know is counted (specway_upstream_unread) and logged, and a block of an unknown
type still reaches a Messages caller whole."""

from __future__ import annotations

import types
from typing import Annotated, Any, Union, get_args, get_origin

import anthropic.types as sdk
import orjson
import pytest
from anthropic.types import beta

from handlers.inference.canonical import ItemDone, ItemProgress, ItemStart, TextDelta, TextEnd, Unknown
from handlers.inference.formats.messages import reader
from handlers.inference.formats.messages.reader import DELTAS, HANDLED, IGNORED, ITEMS, MODELLED, UpstreamReader
from handlers.observability import metrics


def type_words(union: Any) -> set[str]:
    """The `type` literals of every member of one of the SDK's unions."""
    found: set[str] = set()

    def walk(member: Any) -> None:
        if get_origin(member) is Annotated:
            walk(get_args(member)[0])
        elif get_origin(member) in (Union, types.UnionType):
            for arg in get_args(member):
                walk(arg)
        elif (field := getattr(member, "model_fields", {}).get("type")) is not None:
            found.update(get_args(field.annotation))

    walk(union)
    assert found, f"no member of {union} has a type literal: the SDK changed shape"
    return found


# ping and error are events the API sends that the SDK reads without a type of its union.
EVENT_TYPES = type_words(sdk.RawMessageStreamEvent) | type_words(beta.BetaRawMessageStreamEvent) | {"ping", "error"}
BLOCK_TYPES = type_words(sdk.ContentBlock) | type_words(beta.BetaContentBlock)
DELTA_TYPES = type_words(sdk.RawContentBlockDelta) | type_words(beta.BetaRawContentBlockDelta)


def test_every_event_type_is_read_or_ignored_with_a_reason() -> None:
    assert sorted(EVENT_TYPES - HANDLED.keys() - IGNORED.keys()) == []
    assert not HANDLED.keys() & IGNORED.keys()
    assert all(isinstance(why, str) and len(why) > 20 for why in IGNORED.values())


def test_every_content_block_type_is_modelled_or_relayed_as_an_item_with_what_it_is() -> None:
    assert sorted(BLOCK_TYPES - MODELLED - ITEMS.keys()) == []
    assert not MODELLED & ITEMS.keys()
    assert all(isinstance(what, str) and len(what) > 20 for what in ITEMS.values())


def test_every_delta_type_is_read() -> None:
    assert sorted(DELTA_TYPES - DELTAS.keys()) == []


def unread(what: str, kind: str) -> float:
    return metrics.UNREAD.labels("messages", what, kind)._value.get()  # type: ignore[attr-defined]


def read(*frames: dict[str, Any]) -> list[Any]:
    r = UpstreamReader()
    return [ev for frame in frames for ev in r.read(str(frame["type"]), orjson.dumps(frame).decode())]


def test_a_known_event_type_is_never_counted_as_unknown() -> None:
    read({"type": "ping"}, {"type": "message_stop"})
    assert unread("event", "ping") == 0 and unread("event", "message_stop") == 0


def test_an_unknown_event_type_is_counted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    before = unread("event", "message_hologram")
    assert read({"type": "message_hologram", "data": 1}) == []
    assert unread("event", "message_hologram") == before + 1 and "message_hologram" in caplog.text


HOLOGRAM = {"type": "hologram_tool_result", "tool_use_id": "srvtoolu_1", "content": [{"type": "beam"}]}


def test_a_block_of_an_unknown_type_is_an_item_and_counted() -> None:
    before = unread("block", "hologram_tool_result")
    got = read({"type": "content_block_start", "index": 0, "content_block": HOLOGRAM},
               {"type": "content_block_delta", "index": 0, "delta": {"type": "beam_delta", "beam": "x"}},
               {"type": "content_block_stop", "index": 0})
    assert got == [ItemStart(Unknown(HOLOGRAM, "messages")),
                   ItemProgress({"type": "content_block_delta", "delta": {"type": "beam_delta", "beam": "x"}},
                                "messages"),
                   ItemDone(Unknown(HOLOGRAM, "messages"))]
    assert unread("block", "hologram_tool_result") == before + 1
    whole = reader.upstream_result({"content": [HOLOGRAM], "stop_reason": "end_turn", "usage": {}})
    assert whole.content == [Unknown(HOLOGRAM, "messages")]
    assert unread("block", "hologram_tool_result") == before + 2


def test_an_unknown_delta_in_a_text_block_is_relayed_and_counted() -> None:
    before = unread("delta", "sparkle_delta")
    got = read({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
               {"type": "content_block_delta", "index": 0, "delta": {"type": "sparkle_delta", "sparkle": 1}},
               {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}})
    assert got == [ItemProgress({"type": "content_block_delta", "delta": {"type": "sparkle_delta", "sparkle": 1}},
                                "messages"), TextDelta("Hi")]
    assert unread("delta", "sparkle_delta") == before + 1


def test_a_server_tool_item_and_cited_text_read_in_order() -> None:
    call = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
    cite = {"type": "web_search_result_location", "url": "https://a.example", "title": "A", "cited_text": "a"}
    got = read({"type": "content_block_start", "index": 0, "content_block": call},
               {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta",
                                                                     "partial_json": '{"query": '}},
               {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": '"x"}'}},
               {"type": "content_block_stop", "index": 0},
               {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": "",
                                                                             "citations": []}},
               {"type": "content_block_delta", "index": 1, "delta": {"type": "citations_delta", "citation": cite}},
               {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Cited."}},
               {"type": "content_block_stop", "index": 1})
    assert got[0] == ItemStart(Unknown(call, "messages"))
    assert got[3] == ItemDone(Unknown({**call, "input": {"query": "x"}}, "messages"))
    assert got[4:] == [TextDelta("", citation=cite), TextDelta("Cited."), TextEnd()]

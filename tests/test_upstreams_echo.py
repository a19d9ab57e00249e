"""The echo upstream: answers the last user message, whole or word by word."""

from __future__ import annotations

from typing import Any

from handlers.inference.canonical import (
    Finish,
    FinishReason,
    Message,
    Request,
    Result,
    Text,
    TextDelta,
    Usage,
    UsageReport,
    fold,
)
from handlers.inference.upstreams import EchoUpstream
from tests.upstream_support import events


def echo_request(**fields: Any) -> Request:
    messages = [
        Message("user", [Text("first question")]),
        Message("assistant", [Text("an answer")]),
        Message("user", [Text("say   it back")]),
    ]
    return Request(format="chat", messages=messages, system="be kind", **fields)


async def test_echo_answers_the_last_user_message() -> None:
    result = await EchoUpstream("echo").complete(echo_request(), "echo-1")
    assert result == Result([Text("Echo: say it back")], FinishReason.STOP, Usage(9, 4, 0), "echo-1")


async def test_echo_truncates_to_max_tokens() -> None:
    result = await EchoUpstream("echo").complete(echo_request(max_tokens=2), "echo-1")
    assert (result.text(), result.finish_reason, result.usage.output_tokens) == ("Echo: say", FinishReason.LENGTH, 2)


async def test_echo_streams_word_by_word_and_agrees_with_complete() -> None:
    echo = EchoUpstream("echo")
    got = await events(echo, echo_request())
    assert got == [
        TextDelta("Echo: "),
        TextDelta("say "),
        TextDelta("it "),
        TextDelta("back"),
        Finish(FinishReason.STOP),
        UsageReport(Usage(9, 4, 0)),
    ]
    whole = await echo.complete(echo_request(), "m")
    assert fold(got).content == whole.content and fold(got).usage == whole.usage
    assert got == await events(echo, echo_request()) and whole == await echo.complete(echo_request(), "m")


async def test_echo_counts_at_least_one_input_token() -> None:
    result = await EchoUpstream("echo").complete(Request(format="chat", messages=[]), "m")
    assert (result.text(), result.usage.input_tokens) == ("Echo:", 1)

"""Conformance, the refusal block: what a caller's format has that the upstream's cannot carry is a 400
unsupported_parameter naming the field, never a 200 without it; inert values and advisory fields are not refused.
Every inbound format through its official SDK, whole and streamed (tests/test_conformance.py has the rest)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conformance_support import (
    KINDS,
    MODEL,
    Clients,
    cell,
    fixture_clients,  # noqa: F401  (a fixture)
    fixture_fake,  # noqa: F401  (a fixture)
    fixture_fresh,  # noqa: F401  (a fixture)
    fixture_live,  # noqa: F401  (a fixture)
    refusal,
    send,
)
from tests.fake_upstream import FakeUpstream
from tests.test_conformance import PROMPT, TOOLS, ask

REFUSED = [  # caller format, upstream kind, what the caller adds, the field the 400 must name
    ("chat", "anthropic", {"logit_bias": {"50256": -100}}, "logit_bias"),
    ("chat", "anthropic", {"n": 2}, "n"),
    ("chat", "responses", {"logit_bias": {"50256": -100}}, "logit_bias"),
    ("chat", "responses", {"n": 2}, "n"),
    ("chat", "echo", {"logit_bias": {"50256": -100}}, "logit_bias"),
    ("chat", "echo", {"n": 2}, "n"),
    ("messages", "openai", {"extra_body": {"top_k": 5}}, "top_k"),
    ("messages", "responses", {"extra_body": {"top_k": 5}}, "top_k"),
    ("messages", "echo", {"extra_body": {"top_k": 5}}, "top_k"),
    ("chat", "azure-responses", {"logit_bias": {"50256": -100}}, "logit_bias"),
    ("chat", "azure-responses", {"n": 2}, "n"),
    ("messages", "azure-chat", {"extra_body": {"top_k": 5}}, "top_k"),
    ("messages", "azure-responses", {"extra_body": {"top_k": 5}}, "top_k"),
    ("chat", "bedrock", {"logit_bias": {"50256": -100}}, "logit_bias"),
    ("chat", "bedrock", {"n": 2}, "n"),
    ("chat", "bedrock", {"tools": TOOLS["chat"], "parallel_tool_calls": False}, "parallel_tool_calls"),
    ("chat", "gemini", {"logit_bias": {"50256": -100}}, "logit_bias"),
    ("chat", "gemini", {"n": 2}, "n"),
    ("chat", "vertex", {"tools": TOOLS["chat"], "parallel_tool_calls": False}, "parallel_tool_calls"),
    ("messages", "gemini", {"tools": TOOLS["messages"], "tool_choice": {"type": "auto",
                                                                       "disable_parallel_tool_use": True}},
     "tool_choice.disable_parallel_tool_use"),
    *[("responses", kind, {"previous_response_id": "resp_0123456789abcdef"}, "previous_response_id")
      for kind in KINDS],
    *[("responses", kind, {"store": True}, "store") for kind in KINDS],
]
ACCEPTED = [  # inert values and advisory fields: another kind may leave them out, so they are not refused
    ("chat", "anthropic", {"n": 1, "frequency_penalty": 0, "user": "u-1", "logprobs": False}),
    ("chat", "responses", {"n": 1, "presence_penalty": 0, "user": "u-1"}),
    ("messages", "openai", {"metadata": {"user_id": "u-1"}}),
    ("responses", "anthropic", {"store": False, "user": "u-1"}),
    ("responses", "echo", {"store": False}),
    ("chat", "azure-responses", {"n": 1, "presence_penalty": 0, "user": "u-1"}),
    ("messages", "azure-chat", {"metadata": {"user_id": "u-1"}}),
    ("chat", "bedrock", {"n": 1, "frequency_penalty": 0, "user": "u-1", "seed": 7}),
    ("messages", "bedrock", {"metadata": {"user_id": "u-1"}, "extra_body": {"top_k": 5}}),  # Claude takes top_k
    ("messages", "gemini", {"metadata": {"user_id": "u-1"}, "extra_body": {"top_k": 5}}),  # as topK
    ("chat", "vertex", {"n": 1, "frequency_penalty": 0.5, "user": "u-1", "seed": 7}),  # as frequencyPenalty
]


def _params(rows: list[tuple[Any, ...]], label: Any) -> list[Any]:
    return [cell(*row, stream=stream, label=label(i, row)) for i, row in enumerate(rows) for stream in (False, True)]


@pytest.mark.parametrize(("fmt", "kind", "extra", "field", "stream"), _params(REFUSED, lambda i, row: row[-1]))
def test_untranslatable_fields_are_refused_by_name(clients: Clients, fake: FakeUpstream, fmt: str, kind: str,
                                                   extra: dict[str, Any], field: str, stream: bool) -> None:
    error = refusal(clients, fmt, stream, ask(fmt, MODEL[kind], **extra))
    assert error["code"] == "unsupported_parameter", error
    assert error["param"] == field and field in error["message"], error
    assert fake.requests == [], "a refused request never reaches the upstream"


@pytest.mark.parametrize(("fmt", "kind", "extra", "stream"), _params(ACCEPTED, lambda i, row: f"{i}"))
def test_inert_and_advisory_fields_are_not_refused(clients: Clients, fake: FakeUpstream, fmt: str, kind: str,
                                                   extra: dict[str, Any], stream: bool) -> None:
    got = send(clients, fmt, stream, ask(fmt, MODEL[kind], **extra))
    assert got.text == (f"Echo: {PROMPT}" if kind == "echo" else "Hello from fake")

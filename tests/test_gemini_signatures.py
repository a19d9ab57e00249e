"""Gemini's thought signatures, thinking and cached tokens through callers of other formats: a Responses caller that keeps its reasoning
(include reasoning.encrypted_content, store false: Codex) gets the signature of Gemini's function call as a reasoning
item's encrypted_content, sends it back, and Gemini gets it again on that call; a Chat Completions caller has no
place for it, and Gemini 3 then gets the value Google documents for a turn it did not make. Gemini's thoughts
and cache reads are reported and priced apart (the answer's usage, explain, GET /v1/usage). Through the official
openai SDK against a real gateway and the fake upstream.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import openai
import pytest

from handlers.inference.formats.reasoning import CARRIED
from tests.conftest import Live, serve
from tests.fake_upstream import GEMINI_KEY, FakeUpstream

TOOLS: Any = [{"type": "function", "name": "get_weather", "description": "The weather in a city.",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}, "strict": False}]
SIGNATURE = "CsUBAdHtim9fake+gemini/signature=="
PRICE = {"input": "0.30", "output": "2.50", "cached_input": "0.03"}  # per million tokens


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as f:
        yield f


@pytest.fixture(scope="module")
def live(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    config = {
        "upstreams": {"gm": {"kind": "gemini", "base_url": fake.google_url, "api_key_env": "SPECWAY_SIG_GEMINI"}},
        "models": [{"id": "acme/g3", "upstream": "gm", "name": "gemini-3-pro-preview", "reasoning": True,
                    "price": {"input": 0, "output": 0}},
                   {"id": "acme/g25", "upstream": "gm", "name": "gemini-2.5-flash", "reasoning": True,
                    "price": PRICE}],
        "policies": {"default": {"default_model": "acme/g3"}},
        "default_policy": "default",
    }
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECWAY_SIG_GEMINI", GEMINI_KEY)
        with serve(config, tmp_path_factory.mktemp("gemini-signatures")) as g:
            g.run(g.gateway.store.add_credit(g.workspace_id, Decimal(100)))
            yield g


@pytest.fixture
def client(live: Live, fake: FakeUpstream) -> openai.OpenAI:
    fake.reset()
    return openai.OpenAI(base_url=live.url + "/v1", api_key=live.key, max_retries=0,
                         http_client=openai.DefaultHttpxClient(trust_env=False))


def _call_reply(fake: FakeUpstream) -> None:
    fake.script(text="", reasoning=["Weather first."], signature=SIGNATURE,
                tool_calls=[{"id": "fc-1", "name": "get_weather", "arguments": '{"city": "Paris"}'}])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_responses_caller_keeps_geminis_signature_and_sends_it_back(client: openai.OpenAI, fake: FakeUpstream,
                                                                       stream: bool) -> None:
    _call_reply(fake)
    args: dict[str, Any] = {"model": "acme/g3", "input": "Weather in Paris?", "tools": TOOLS, "store": False,
                            "include": ["reasoning.encrypted_content"], "reasoning": {"effort": "high"}}
    if stream:
        events = list(client.responses.create(**args, stream=True))
        first = events[-1].response
    else:
        first = client.responses.create(**args)
    carried = [i for i in first.output if i.type == "reasoning" and i.encrypted_content]
    assert len(carried) == 1 and carried[0].encrypted_content.startswith(CARRIED)
    assert SIGNATURE not in carried[0].encrypted_content  # the gateway's token, not the signature as it came
    call = next(i for i in first.output if i.type == "function_call")

    fake.script(text="18C and sunny.")
    history = [{"role": "user", "content": "Weather in Paris?"},
               *[item.model_dump(exclude_none=True) for item in first.output],
               {"type": "function_call_output", "call_id": call.call_id, "output": "18C"}]
    second = client.responses.create(**{**args, "input": history})
    assert second.output_text == "18C and sunny."
    model_turn = fake.requests[-1].body["contents"][1]
    assert model_turn["role"] == "model"
    calls = [p for p in model_turn["parts"] if "functionCall" in p]
    assert [(p["functionCall"]["name"], p.get("thoughtSignature")) for p in calls] == [("get_weather", SIGNATURE)]


def test_a_chat_caller_has_no_place_for_it_and_gemini_3_gets_googles_documented_value(
        client: openai.OpenAI, fake: FakeUpstream) -> None:
    _call_reply(fake)
    chat_tools = [{"type": "function", "function": {k: v for k, v in TOOLS[0].items() if k not in ("type", "strict")}}]
    first = client.chat.completions.create(model="acme/g3", messages=[{"role": "user", "content": "Weather?"}],
                                           tools=chat_tools)
    message = first.choices[0].message
    assert message.tool_calls and first.choices[0].finish_reason == "tool_calls"
    assert getattr(message, "reasoning_content", None) == "Weather first."
    fake.script(text="Sunny.")
    client.chat.completions.create(model="acme/g3", tools=chat_tools, messages=[
        {"role": "user", "content": "Weather?"}, message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": json.dumps({"temp": 18})}])
    parts = fake.requests[-1].body["contents"][1]["parts"]
    assert [p.get("thoughtSignature") for p in parts if "functionCall" in p] == ["skip_thought_signature_validator"]


def test_thinking_and_cached_tokens_are_reported_and_priced_apart(client: openai.OpenAI, fake: FakeUpstream,
                                                                   live: Live) -> None:
    thoughts = "Clear skies are likely over Paris today."
    fake.script(text="Sunny.", reasoning=[thoughts], usage=(1000, 40, 600))
    answer = client.chat.completions.with_raw_response.create(
        model="acme/g25", reasoning_effort="low", messages=[{"role": "user", "content": "Weather?"}])
    usage = answer.parse().usage
    thought_tokens = len(thoughts.split())
    assert (usage.prompt_tokens, usage.completion_tokens) == (1000, 40 + thought_tokens)
    assert usage.prompt_tokens_details.cached_tokens == 600
    assert usage.completion_tokens_details.reasoning_tokens == thought_tokens
    decision = answer.headers["x-specway-decision-id"]
    auth = {"Authorization": f"Bearer {live.key}"}
    record = httpx.get(f"{live.url}/v1/route/explain/{decision}", headers=auth).json()
    assert record["usage"] == {"input_tokens": 1000, "output_tokens": 40 + thought_tokens,
                               "cached_input_tokens": 600, "cache_write_tokens": None,
                               "reasoning_tokens": thought_tokens}
    million = Decimal(1_000_000)
    cost = (400 * Decimal(PRICE["input"]) + 600 * Decimal(PRICE["cached_input"])
            + (40 + thought_tokens) * Decimal(PRICE["output"])) / million  # thoughts are output, at its price
    assert Decimal(record["cost"]) == cost
    rows = httpx.get(f"{live.url}/v1/usage", params={"group_by": "model"}, headers=auth).json()["data"]
    row = next(r for r in rows if r["model"] == "acme/g25")
    assert (row["reasoning_tokens"], row["cached_input_tokens"], row["output_tokens"]) == (
        thought_tokens, 600, 40 + thought_tokens)

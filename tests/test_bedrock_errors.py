"""Bedrock's failures as each caller's SDK sees them, through the gateway (the conformance gateway and fake, with
botocore signing for real): throttling is a 429 upstream_rate_limited with Retry-After, a validation error a 400 that
names the field, access denied and a signature the fake refuses a 502 upstream_auth_failed, an exception event in a
started stream the caller format's error event."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from tests.conformance_support import (
    FORMATS,
    MODEL,
    Clients,
    fixture_clients,  # noqa: F401  (a fixture)
    fixture_fake,  # noqa: F401  (a fixture)
    fixture_fresh,  # noqa: F401  (a fixture)
    fixture_live,  # noqa: F401  (a fixture)
    send,
)
from tests.fake_bedrock import AwsKey
from tests.fake_upstream import AWS_KEY, FakeUpstream

SDK: dict[str, Any] = {"chat": openai, "responses": openai, "messages": anthropic}
CELLS = [pytest.param(fmt, stream, id=f"{fmt}-{'stream' if stream else 'whole'}") for fmt in FORMATS
         for stream in (False, True)]


def ask(fmt: str) -> dict[str, Any]:
    if fmt == "responses":
        return {"model": MODEL["bedrock"], "input": "Hello", "max_output_tokens": 20}
    return {"model": MODEL["bedrock"], "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 20}


def raised(clients: Clients, fmt: str, stream: bool, error: type[Exception]) -> Any:
    with pytest.raises(error) as info:
        send(clients, fmt, stream, ask(fmt))
    body = info.value.body  # type: ignore[attr-defined]
    return info.value, body["error"] if isinstance(body, dict) and isinstance(body.get("error"), dict) else body


@pytest.mark.parametrize(("fmt", "stream"), CELLS)
def test_throttling_is_rate_limited_with_a_retry_after(clients: Clients, fake: FakeUpstream, fmt: str,
                                                     stream: bool) -> None:
    fake.script(status=429, error="Too many requests, please wait before trying again.")
    exc, error = raised(clients, fmt, stream, SDK[fmt].APIStatusError)
    assert (exc.status_code, error["code"]) == (429, "upstream_rate_limited")
    assert exc.response.headers["retry-after"] == "1"


@pytest.mark.parametrize(("fmt", "stream"), CELLS)
def test_a_validation_error_is_a_400_naming_the_field(clients: Clients, fake: FakeUpstream, fmt: str,
                                                      stream: bool) -> None:
    said = "1 validation error detected: Value at 'inferenceConfig.maxTokens' failed to satisfy constraint"
    fake.script(status=400, error=said)
    _, error = raised(clients, fmt, stream, SDK[fmt].BadRequestError)
    assert error["code"] == "upstream_rejected_request"
    assert "ValidationException" in error["message"] and "inferenceConfig.maxTokens" in error["message"]


@pytest.mark.parametrize(("fmt", "stream"), CELLS)
def test_access_denied_is_an_upstream_auth_failure(clients: Clients, fake: FakeUpstream, fmt: str,
                                                   stream: bool) -> None:
    fake.script(status=403, error="You don't have access to the model with the specified model ID.")
    exc, error = raised(clients, fmt, stream, SDK[fmt].APIStatusError)
    assert (exc.status_code, error["code"]) == (502, "upstream_auth_failed")


@pytest.fixture(name="wrong_secret")
def fixture_wrong_secret(fake: FakeUpstream) -> Iterator[None]:
    """The fake knows the gateway's access key with another secret: every signature is wrong."""
    fake.aws_keys[AWS_KEY.access_key] = AwsKey(AWS_KEY.access_key, "not/the/secret/the/gateway/signs/with/00")
    yield
    fake.aws_keys[AWS_KEY.access_key] = AWS_KEY


@pytest.mark.usefixtures("wrong_secret")
@pytest.mark.parametrize(("fmt", "stream"), CELLS)
def test_a_refused_signature_is_an_upstream_auth_failure(clients: Clients, fake: FakeUpstream, fmt: str,
                                                         stream: bool) -> None:
    exc, error = raised(clients, fmt, stream, SDK[fmt].APIStatusError)
    assert (exc.status_code, error["code"]) == (502, "upstream_auth_failed")
    assert fake.bad_signatures == ["InvalidSignatureException"] and fake.requests == []
    assert AWS_KEY.secret not in str(error)


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_exception_event_in_a_started_stream_reaches_the_caller(clients: Clients, fake: FakeUpstream,
                                                                   fmt: str) -> None:
    fake.stream_exception = "throttlingException"
    fake.script(text="one two three four five six", fail_after=4, error="Too many tokens.")
    with pytest.raises(SDK[fmt].APIError) as info:
        send(clients, fmt, True, ask(fmt))
    body: Any = info.value.body
    error = body["error"] if isinstance(body, dict) and isinstance(body.get("error"), dict) else body
    assert error["code"] == "upstream_rate_limited", error

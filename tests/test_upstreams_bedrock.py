"""The Bedrock upstream against the fake, with botocore for real: every request's SigV4 signature is computed again
by the fake from the known secret (a wrong one is refused), credentials come from botocore's chain (environment,
a shared profile, a credential process it refreshes), and ConverseStream answers in AWS's binary framing."""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from generated.config import UpstreamSettings
from handlers import config as config_mod
from handlers.config import ConfigError
from handlers.inference.canonical import (
    Finish,
    FinishReason,
    Message,
    Request,
    Text,
    TextDelta,
    Thinking,
    ThinkingDelta,
    ToolCall,
    ToolCallStart,
    Usage,
    UsageReport,
    fold,
)
from handlers.inference.upstreams.base import Sizes
from handlers.inference.upstreams.bedrock import AwsCredentials, BedrockUpstream
from handlers.inference.upstreams.eventstream import iter_eventstream
from handlers.inference.upstreams.sse import SseEvent, TooLarge
from tests import fake_bedrock
from tests.fake_bedrock import AwsKey
from tests.fake_upstream import AWS_KEY, FakeUpstream, aws_environment
from tests.upstream_support import failure, fixture_fake, fixture_server  # noqa: F401  (fixtures)

REGION = "eu-west-3"
PROFILE_ID = "eu.anthropic.claude-sonnet-4-5-20250929-v1:0"  # an inference profile, with a colon to encode
ARN = f"arn:aws:bedrock:{REGION}:123456789012:inference-profile/{PROFILE_ID}"
HELLO = Request(format="chat", messages=[Message("user", [Text("Hello there")])], system="Be brief.")
Build = Callable[..., BedrockUpstream]


@pytest.fixture(name="aws")
def fixture_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """botocore's chain with nothing of this machine in it: no config files, no instance metadata, the fake's key in
    the environment. Returns a folder for config files a test writes."""
    aws_environment(monkeypatch, tmp_path)
    return tmp_path


@pytest.fixture(name="build")
async def fixture_build(fake: FakeUpstream, aws: Path) -> AsyncIterator[Build]:
    made: list[BedrockUpstream] = []

    def make(**settings: Any) -> BedrockUpstream:
        fields = {"kind": "bedrock", "region": REGION, "base_url": fake.bedrock_url, **settings}
        upstream = BedrockUpstream.from_settings("bed", UpstreamSettings(**fields))
        made.append(upstream)
        return upstream

    yield make
    for upstream in made:
        await upstream.aclose()


async def events(upstream: BedrockUpstream, request: Request = HELLO, model: str = PROFILE_ID) -> list[Any]:
    return [event async for event in upstream.stream(request, model)]


# --- signing ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", [PROFILE_ID, ARN], ids=["inference-profile", "arn"])
async def test_a_whole_answer_is_signed_and_read(fake: FakeUpstream, build: Build, model: str) -> None:
    fake.script(text="Bonjour!", usage=(20, 3, 5, 7))
    result = await build().complete(HELLO, model)
    sent = fake.requests[0]
    encoded = model.replace("/", "%2F")  # a colon is a path segment's own character; it is signed as sent
    assert sent.path == f"/model/{encoded}/converse"
    assert fake.signed[0].access_key == AWS_KEY.access_key
    assert (fake.signed[0].region, fake.signed[0].service) == (REGION, "bedrock")
    assert {"host", "x-amz-date", "content-type"} <= set(fake.signed[0].headers)
    assert sent.body == {"messages": [{"role": "user", "content": [{"text": "Hello there"}]}],
                         "system": [{"text": "Be brief."}]}
    assert result.text() == "Bonjour!" and result.finish_reason is FinishReason.STOP
    assert result.usage == Usage(input_tokens=32, output_tokens=3, cached_input_tokens=5, cache_write_tokens=7)


@pytest.mark.parametrize(("key", "refused"), [
    (AwsKey(AWS_KEY.access_key, "the/wrong/secret"), "InvalidSignatureException"),
    (AwsKey("AKIDSOMEONEELSE00000", AWS_KEY.secret), "UnrecognizedClientException"),
], ids=["wrong-secret", "unknown-key"])
async def test_a_wrong_signature_is_refused_as_upstream_auth(fake: FakeUpstream, build: Build, aws: Path,
                                                             monkeypatch: pytest.MonkeyPatch, key: AwsKey,
                                                             refused: str) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key.secret)
    upstream = build()
    for call in (upstream.complete(HELLO, PROFILE_ID), events(upstream)):
        err = await failure(call)
        assert err.status == 403 and not err.caller_fault and err.falls_back
        assert err.message == f"upstream bed rejected the gateway's credentials ({refused})"
        assert key.secret not in err.message
    assert fake.bad_signatures == [refused, refused] and fake.requests == []


async def test_temporary_credentials_send_their_session_token(fake: FakeUpstream, build: Build,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    temporary = AwsKey("ASIAFAKETEMPORARY001", "temporary/secret/000000000000000000000", "IQoJb3JpZ2luX2VjEFAKE//token")
    fake.aws_keys[temporary.access_key] = temporary
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", temporary.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", temporary.secret)
    monkeypatch.setenv("AWS_SESSION_TOKEN", temporary.token or "")
    await build().complete(HELLO, PROFILE_ID)
    assert "x-amz-security-token" in fake.signed[0].headers
    assert fake.requests[0].headers["x-amz-security-token"] == temporary.token


async def test_a_shared_profile_signs_with_its_own_key(fake: FakeUpstream, build: Build, aws: Path) -> None:
    team = AwsKey("AKIDFAKETEAMPROFILE1", "team/profile/secret/0000000000000000000")
    fake.aws_keys[team.access_key] = team
    (aws / "credentials").write_text(f"[team]\naws_access_key_id = {team.access_key}\n"
                                     f"aws_secret_access_key = {team.secret}\n")
    await build(profile="team").complete(HELLO, PROFILE_ID)
    assert [s.access_key for s in fake.signed] == [team.access_key]


CREDENTIAL_PROCESS = """\
import datetime, json, pathlib, sys
counter = pathlib.Path(sys.argv[1])
n = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(n))
expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=2)
print(json.dumps({"Version": 1, "AccessKeyId": f"ASIAFAKEPROCESS{n:05d}", "SecretAccessKey": f"process/secret/{n}",
                  "SessionToken": f"token-{n}", "Expiration": expires.isoformat()}))
"""


async def test_credentials_are_refreshed_as_botocore_refreshes_them(fake: FakeUpstream, build: Build,
                                                                    aws: Path) -> None:
    """A credential process whose credentials expire within botocore's mandatory refresh window: botocore runs it
    again before each signing, and each request is signed with the newest key."""
    for n in range(1, 10):
        key = AwsKey(f"ASIAFAKEPROCESS{n:05d}", f"process/secret/{n}", f"token-{n}")
        fake.aws_keys[key.access_key] = key
    script, counter = aws / "process.py", aws / "runs"
    script.write_text(CREDENTIAL_PROCESS)
    (aws / "config").write_text(f"[profile rotating]\ncredential_process = {sys.executable} {script} {counter}\n")
    upstream = build(profile="rotating")
    await upstream.complete(HELLO, PROFILE_ID)
    await upstream.complete(HELLO, PROFILE_ID)
    keys = [s.access_key for s in fake.signed]
    assert len(set(keys)) == 2 and keys == sorted(keys)  # a fresh key each time, never an older one
    assert keys[-1] == f"ASIAFAKEPROCESS{int(counter.read_text()):05d}"


async def test_no_credentials_is_an_upstream_auth_failure(fake: FakeUpstream, build: Build,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    err = await failure(build().complete(HELLO, PROFILE_ID))
    assert err.status == 401 and "no usable AWS credentials" in err.message and fake.requests == []


async def test_credentials_are_never_logged(fake: FakeUpstream, build: Build, monkeypatch: pytest.MonkeyPatch,
                                            caplog: pytest.LogCaptureFixture) -> None:
    temporary = AwsKey("ASIAFAKETEMPORARY002", "never/logged/secret/00000000000000000", "never-logged-token")
    fake.aws_keys[temporary.access_key] = temporary
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", temporary.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", temporary.secret)
    monkeypatch.setenv("AWS_SESSION_TOKEN", temporary.token or "")
    with caplog.at_level(logging.DEBUG):
        upstream = build()
        await upstream.complete(HELLO, PROFILE_ID)
        await events(upstream)
    assert len(fake.signed) == 2
    assert temporary.secret not in caplog.text and "never-logged-token" not in caplog.text


# --- the event stream -------------------------------------------------------------------------------------------------


async def test_a_stream_is_read_from_its_binary_frames(fake: FakeUpstream, build: Build) -> None:
    fake.script(text="It is sunny.", reasoning=["The sky is clear."], signature="c2lnbmF0dXJl",
                tool_calls=[{"id": "tooluse_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}],
                usage=(20, 9, 4, 0))
    got = await events(build())
    assert fake.requests[0].path == "/model/eu.anthropic.claude-sonnet-4-5-20250929-v1:0/converse-stream"
    assert got[0] == ThinkingDelta("The ", format="converse")
    assert ToolCallStart(0, "tooluse_1", "get_weather") in got
    assert got[-2:] == [Finish(FinishReason.TOOL_CALLS), UsageReport(Usage(24, 9, 4, 0))]
    result = fold(got)
    assert result.content == [Thinking("The sky is clear.", signature="c2lnbmF0dXJl", format="converse"),
                              Text("It is sunny."), ToolCall("tooluse_1", "get_weather", '{"city": "Paris"}')]
    assert "".join(e.text for e in got if isinstance(e, TextDelta)) == "It is sunny."


async def test_an_exception_event_mid_stream_is_the_upstreams_error(fake: FakeUpstream, build: Build) -> None:
    fake.stream_exception = "throttlingException"
    fake.script(fail_after=2, error="Too many tokens, please wait.")  # streams, then throttles
    err = await failure(events(build()))
    assert (err.status, err.message, err.retry_after) == (429, "Too many tokens, please wait.", 1.0) and err.retryable
    fake.stream_exception = "validationException"
    fake.script(fail_after=3, error="The model returned a malformed tool use.")
    assert (await failure(events(build()))).caller_fault


async def test_a_frame_whose_checksum_fails_is_a_protocol_error(fake: FakeUpstream, build: Build) -> None:
    fake.script(malformed=True)
    err = await failure(events(build()))
    assert err.kind == "protocol" and "does not check out" in err.message


async def test_a_stream_cut_before_metadata_is_a_protocol_error(fake: FakeUpstream, build: Build) -> None:
    fake.script(cut_after=3)
    err = await failure(events(build()))
    assert err.kind == "protocol" and err.message == "upstream bed sent an incomplete or malformed response"


# --- errors -----------------------------------------------------------------------------------------------------------


async def test_throttling_is_a_429_with_a_retry_after(fake: FakeUpstream, build: Build) -> None:
    fake.script(status=429, error="Too many requests, please wait before trying again.")
    fake.script(status=429, headers={"retry-after": "7"})
    upstream = build()
    err = await failure(upstream.complete(HELLO, PROFILE_ID))
    assert (err.status, err.retry_after, err.retryable) == (429, 1.0, True)
    assert "ThrottlingException: Too many requests" in err.message
    assert (await failure(events(upstream))).retry_after == 7.0


async def test_a_validation_error_is_the_callers_and_names_the_field(fake: FakeUpstream, build: Build) -> None:
    said = "1 validation error detected: Value '0' at 'inferenceConfig.maxTokens' failed to satisfy constraint"
    fake.script(status=400, error=said)
    err = await failure(build().complete(HELLO, PROFILE_ID))
    assert err.caller_fault and err.status == 400
    assert err.message == f"upstream bed: ValidationException: {said}"


async def test_access_denied_is_an_upstream_auth_failure(fake: FakeUpstream, build: Build) -> None:
    fake.script(status=403, error="You don't have access to the model with the specified model ID.")
    err = await failure(build().complete(HELLO, PROFILE_ID))
    assert err.status == 403 and not err.caller_fault
    assert err.message == "upstream bed rejected the gateway's credentials (AccessDeniedException)"


def test_the_endpoint_is_the_regions_unless_base_url_says(aws: Path) -> None:
    made = BedrockUpstream("b", region="ap-south-1", credentials=AwsCredentials.of(None))
    assert str(made._client.base_url).rstrip("/") == "https://bedrock-runtime.ap-south-1.amazonaws.com"
    assert made.path_for("amazon.nova-pro-v1:0", True) == "/model/amazon.nova-pro-v1:0/converse-stream"



# --- configuration ----------------------------------------------------------------------------------------------------


def _config(**upstream: Any) -> dict[str, Any]:
    return {"upstreams": {"bd": upstream}, "models": [{"id": "acme/bd", "upstream": "bd", "name": PROFILE_ID}]}


@pytest.mark.parametrize(("upstream", "problem"), [
    ({"kind": "bedrock"}, "upstreams.bd.region: required for kind bedrock"),
    ({"kind": "bedrock", "region": REGION, "api_key_env": "AWS_KEY"},
     "upstreams.bd.api_key_env: kind bedrock signs with AWS credentials, not a key"),
    ({"kind": "openai", "base_url": "http://x/v1", "region": REGION}, "upstreams.bd.region: only kind bedrock takes it"),
    ({"kind": "anthropic", "base_url": "http://x", "profile": "team"}, "upstreams.bd.profile: only kind bedrock takes it"),
], ids=["no-region", "api-key", "region-elsewhere", "profile-elsewhere"])
def test_the_configuration_says_what_bedrock_needs(upstream: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_mod.parse(_config(**upstream), "test config")
    assert f"test config: {problem}" in str(info.value)


def test_a_bedrock_upstream_needs_no_base_url(aws: Path) -> None:
    parsed = config_mod.parse(_config(kind="bedrock", region=REGION, profile="team"), "test config")
    assert (parsed.upstreams["bd"].region, parsed.upstreams["bd"].profile) == (REGION, "team")


# --- the framing, alone -------------------------------------------------------------------------------------------


SIZES = Sizes()


class _Chunks(httpx.AsyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


async def frames(chunks: list[bytes], sizes: Sizes = SIZES) -> list[SseEvent]:
    response = httpx.Response(200, stream=_Chunks(chunks))
    return [event async for event in iter_eventstream(response, sizes)]


async def test_frames_split_anywhere_decode_the_same() -> None:
    data = b"".join([fake_bedrock.event("messageStart", {"role": "assistant"}),
                     fake_bedrock.exception("throttlingException", "Slow down.")])
    whole = await frames([data])
    assert await frames([data[i:i + 1] for i in range(len(data))]) == whole
    assert [e.event for e in whole] == ["messageStart", "throttlingException"]
    assert whole[1].data == '{"message":"Slow down."}'


async def test_an_error_message_is_an_internal_server_exception() -> None:
    error = fake_bedrock.frame({":message-type": "error", ":error-code": "InternalFailure",
                                ":error-message": "Something broke."}, b"")
    assert await frames([error]) == [SseEvent("internalServerException", '{"message":"InternalFailure: Something broke."}')]


async def test_frames_past_their_limits_are_too_large() -> None:
    big = fake_bedrock.event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "x" * 5000}})
    with pytest.raises(TooLarge, match="max_event_bytes"):
        await frames([big], Sizes(answer=10**6, event=2048))
    with pytest.raises(TooLarge, match="max_event_bytes"):
        await frames([big[:3000]], Sizes(answer=10**6, event=2048))  # not even whole yet
    with pytest.raises(TooLarge, match="max_answer_bytes"):
        await frames([big] * 3, Sizes(answer=12000, event=8192))

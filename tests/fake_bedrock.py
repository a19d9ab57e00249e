"""What the fake upstream answers as Amazon Bedrock's Converse API, for tests. Not product code.

A request is checked as AWS checks it: its SigV4 signature is computed again with botocore from the secret of the
access key it names (and its session token, when the key has one), over the method, the raw path, the signed headers
and the body as received; a wrong or missing one is a 403 in AWS's words. Answers are ConverseResponse JSON, or
ConverseStream's events in AWS's binary event-stream framing, encoded here with the documented layout (prelude:
total length, headers length, prelude CRC32; headers; payload; message CRC32): the gateway decodes them with
botocore's parser, so a frame written wrong here fails there.
"""

from __future__ import annotations

import hmac
import re
import struct
import zlib
from dataclasses import dataclass
from typing import Any

import orjson
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.fake_dialects import Reply, Usage, _arg_pieces, _calls, _pieces, _thought

EVENT_STREAM = "application/vnd.amazon.eventstream"
_AUTH = re.compile(r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
                   r"SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})$")
_ERROR_TYPES = {400: "ValidationException", 403: "AccessDeniedException", 404: "ResourceNotFoundException",
                429: "ThrottlingException", 500: "InternalServerException", 503: "ServiceUnavailableException"}


@dataclass(frozen=True)
class AwsKey:
    access_key: str
    secret: str
    token: str | None = None


@dataclass
class Signed:
    """What a checked signature said: its key, region and service, and the headers it signed."""

    access_key: str
    region: str
    service: str
    headers: list[str]


class BadSignature(Exception):
    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message


def check_signature(method: str, raw_path: str, headers: dict[str, str], body: bytes, keys: dict[str, AwsKey]
                    ) -> Signed:
    """The request's SigV4 signature, computed again from the known secret; BadSignature when it does not match."""
    found = _AUTH.match(headers.get("authorization", ""))
    if found is None:
        raise BadSignature("IncompleteSignatureException", "Authorization header requires a SigV4 signature.")
    access, day, region, service, signed, signature = found.groups()
    key = keys.get(access)
    if key is None or (key.token is not None and headers.get("x-amz-security-token") != key.token):
        raise BadSignature("UnrecognizedClientException", "The security token included in the request is invalid.")
    stamp = headers.get("x-amz-date", "")
    names = signed.split(";")
    if not stamp.startswith(day) or "host" not in names or "x-amz-date" not in names:
        raise BadSignature("IncompleteSignatureException", "The signature does not cover host and x-amz-date.")
    request = AWSRequest(method=method, url=f"http://{headers['host']}{raw_path}", data=body,
                         headers={name: headers.get(name, "") for name in names})
    request.context["timestamp"] = stamp
    signer = SigV4Auth(Credentials(key.access_key, key.secret, key.token), service, region)
    expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
    if not hmac.compare_digest(expected, signature):
        raise BadSignature("InvalidSignatureException", "The request signature we calculated does not match the "
                           "signature you provided. Check your AWS Secret Access Key and signing method.")
    return Signed(access, region, service, names)


def error(status: int, message: str, error_type: str | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """An error answer's body and headers, as Bedrock's REST-JSON protocol sends them."""
    kind = error_type or _ERROR_TYPES.get(status, "InternalServerException")
    return {"message": message}, {"x-amzn-errortype": f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"}


def reply_error(reply: Reply) -> tuple[dict[str, Any], dict[str, str]]:
    body, headers = error(reply.status, reply.error or f"fake error {reply.status}")
    return body, {**headers, **reply.headers}


# --- whole answers ------------------------------------------------------------------------------------------------


def usage_of(usage: Usage) -> dict[str, Any]:
    """Converse's usage: inputTokens leaves out cache reads and writes; totalTokens counts them all."""
    tokens, output, cached = usage[:3]
    written = usage[3] if len(usage) > 3 else 0
    return {"inputTokens": tokens, "outputTokens": output, "totalTokens": tokens + output + cached + written,
            "cacheReadInputTokens": cached, "cacheWriteInputTokens": written}


def _stop(reply: Reply) -> str:
    return reply.finish or ("tool_use" if reply.tool_calls else "end_turn")


def content(reply: Reply) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if (thought := _thought(reply)) is not None:
        blocks.append({"reasoningContent": {"reasoningText": {"text": thought, "signature": reply.signature}}})
    if reply.text:
        blocks.append({"text": reply.text})
    for call_id, name, arguments in _calls(reply, "tooluse_fake"):
        blocks.append({"toolUse": {"toolUseId": call_id, "name": name, "input": orjson.loads(arguments)}})
    return blocks


def whole(reply: Reply, usage: Usage) -> dict[str, Any]:
    return {"output": {"message": {"role": "assistant", "content": content(reply)}}, "stopReason": _stop(reply),
            "usage": usage_of(usage), "metrics": {"latencyMs": 12}}


# --- the event stream ---------------------------------------------------------------------------------------------


def frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message; every header a string (value type 7)."""
    encoded = b"".join(bytes([len(name)]) + name.encode() + b"\x07" + struct.pack(">H", len(value.encode()))
                       + value.encode() for name, value in headers.items())
    prelude = struct.pack(">II", 12 + len(encoded) + len(payload) + 4, len(encoded))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + encoded + payload
    return message + struct.pack(">I", zlib.crc32(message))


def event(kind: str, payload: dict[str, Any]) -> bytes:
    headers = {":event-type": kind, ":content-type": "application/json", ":message-type": "event"}
    return frame(headers, orjson.dumps({**payload, "p": "abcdefgh"}))  # Bedrock pads events with "p"


def exception(kind: str, message: str) -> bytes:
    headers = {":exception-type": kind, ":content-type": "application/json", ":message-type": "exception"}
    return frame(headers, orjson.dumps({"message": message}))


def stream(reply: Reply, usage: Usage, failure: str = "modelStreamErrorException") -> list[bytes]:
    """ConverseStream's events for `reply`, one frame each, and last an exception frame of type `failure` (the
    fake's mid-stream error, used only when the reply fails after some frames)."""
    out = [event("messageStart", {"role": "assistant"})]
    index = 0
    if (thought := _thought(reply)) is not None:
        out += [_delta(index, {"reasoningContent": {"text": piece}}) for piece in _pieces(thought)]
        if reply.signature:
            out.append(_delta(index, {"reasoningContent": {"signature": reply.signature}}))
        out.append(event("contentBlockStop", {"contentBlockIndex": index}))
        index += 1
    if reply.text:
        out += [_delta(index, {"text": piece}) for piece in _pieces(reply.text)]
        out.append(event("contentBlockStop", {"contentBlockIndex": index}))
        index += 1
    for call_id, name, arguments in _calls(reply, "tooluse_fake"):
        start = {"toolUse": {"toolUseId": call_id, "name": name}}
        out.append(event("contentBlockStart", {"contentBlockIndex": index, "start": start}))
        out += [_delta(index, {"toolUse": {"input": piece}}) for piece in _arg_pieces(arguments)]
        out.append(event("contentBlockStop", {"contentBlockIndex": index}))
        index += 1
    out.append(event("messageStop", {"stopReason": _stop(reply)}))
    out.append(event("metadata", {"usage": usage_of(usage), "metrics": {"latencyMs": 12}}))
    return [*out, exception(failure, reply.error or "fake mid-stream error")]


def _delta(index: int, delta: dict[str, Any]) -> bytes:
    return event("contentBlockDelta", {"contentBlockIndex": index, "delta": delta})

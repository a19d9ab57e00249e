"""What the fake upstream answers as Google's generateContent API (the Gemini API's and Vertex AI's), and how it signs
Vertex AI callers in, for tests. Not product code.

Answers are GenerateContentResponse JSON, or its chunks as server-sent events (alt=sse: `data:` lines only, no
terminator; the last chunk carries finishReason and the whole usage). A Reply's `reasoning` is thought-summary
parts (`thought: true`); its `signature`, the thoughtSignature of the first function call (else of the last part).

Vertex AI's sign-in is Google's OAuth 2.0 service-account flow, checked as Google checks it: the token endpoint
(POST /token, the service-account file's token_uri) takes a JWT bearer assertion, verifies its RS256 signature with
the account's public key, its issuer, audience (Google's token endpoint), scope and lifetime, and issues a short-lived access
token; the Vertex paths take only a token it issued that has not expired.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.auth import jwt

from tests.fake_dialects import Reply, Usage, _calls, _pieces, _thought

SCOPE = "https://www.googleapis.com/auth/cloud-platform"
# The audience of a service account's assertion: Google's token endpoint, wherever the key file's token_uri sends it
# (as google-auth signs it and Google checks it).
AUDIENCE = "https://oauth2.googleapis.com/token"
_JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
_STATUS_WORDS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


# --- answers --------------------------------------------------------------------------------------------------------


def default_usage(body: dict[str, Any], reply: Reply) -> Usage:
    prompt = len(re.findall(r"\w+", orjson.dumps([body.get("contents"), body.get("systemInstruction")]).decode()))
    return prompt, len(reply.text.split()) + 12 * len(reply.tool_calls), 0


def usage_metadata(usage: Usage, reply: Reply) -> dict[str, Any]:
    prompt, candidates, cached = usage[:3]
    thoughts = sum(len(part.split()) for part in reply.reasoning or [])
    return {"promptTokenCount": prompt, "candidatesTokenCount": candidates, "totalTokenCount": prompt + candidates
            + thoughts, **({"cachedContentTokenCount": cached} if cached else {}),
            **({"thoughtsTokenCount": thoughts} if thoughts else {})}


def parts(reply: Reply) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if (thought := _thought(reply)) is not None:
        out.append({"text": thought, "thought": True})
    if reply.text:
        out.append({"text": reply.text})
    for n, (call_id, name, arguments) in enumerate(_calls(reply, "")):
        call = {"name": name, "args": orjson.loads(arguments), **({"id": call_id} if reply.tool_calls[n].get("id")
                                                                 else {})}
        out.append({"functionCall": call})
    if reply.reasoning is not None and reply.signature and out:
        calls = [part for part in out if "functionCall" in part]
        (calls[0] if calls else out[-1])["thoughtSignature"] = reply.signature
    return out


def _finish(reply: Reply) -> str:
    return reply.finish or "STOP"


def whole(reply: Reply, model: str, usage: Usage) -> dict[str, Any]:
    return {"candidates": [{"content": {"role": "model", "parts": parts(reply)}, "finishReason": _finish(reply),
                            "index": 0}],
            "usageMetadata": usage_metadata(usage, reply), "modelVersion": model, "responseId": "fake-response"}


def stream(reply: Reply, model: str, usage: Usage) -> list[bytes]:
    """The chunks: thought pieces, text pieces, each function call whole, then the finishing chunk; the mid-stream
    error event last (for fail_after)."""
    head = {"modelVersion": model, "responseId": "fake-response"}
    partial = {"promptTokenCount": usage[0], "totalTokenCount": usage[0]}

    def chunk(part: dict[str, Any] | None, finish: str | None = None) -> bytes:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": [part] if part else []}, "index": 0}
        if finish:
            candidate["finishReason"] = finish
        meta = usage_metadata(usage, reply) if finish else partial
        return b"data: " + orjson.dumps({"candidates": [candidate], "usageMetadata": meta, **head}) + b"\r\n\r\n"

    whole_parts = parts(reply)
    out: list[bytes] = []
    for part in whole_parts:
        if "text" in part:
            pieces = _pieces(part["text"]) or [""]
            for i, piece in enumerate(pieces):
                signed = {"thoughtSignature": part["thoughtSignature"]} if "thoughtSignature" in part and \
                    i == len(pieces) - 1 else {}
                out.append(chunk({"text": piece, **({"thought": True} if part.get("thought") else {}), **signed}))
        else:
            out.append(chunk(part))
    out.append(chunk(None, _finish(reply)))
    return [*out, b"data: " + orjson.dumps(error(reply)) + b"\r\n\r\n"]


def error(reply: Reply) -> dict[str, Any]:
    status = reply.status if reply.status >= 400 else 500
    return {"error": {"code": status, "message": reply.error or f"fake error {status}",
                      "status": _STATUS_WORDS.get(status, "INTERNAL")}}


def count(body: dict[str, Any], reply: Reply) -> dict[str, Any]:
    """:countTokens: a scripted Reply's usage[0], else the words of what it was given."""
    given = body.get("generateContentRequest") or body
    counted = reply.usage[0] if reply.usage else default_usage(given, reply)[0]
    return {"totalTokens": counted}


# --- Google sign-in -------------------------------------------------------------------------------------------------


@dataclass
class ServiceAccount:
    """A service account with a fresh RSA key: its key file (as Google's console writes one) points at a token
    endpoint."""

    email: str
    private_pem: str
    public_pem: str

    @classmethod
    def new(cls, email: str = "specway-tests@fake-project.iam.gserviceaccount.com") -> ServiceAccount:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()).decode()
        public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo).decode()
        return cls(email, private, public)

    def key_file(self, folder: Path, token_uri: str) -> Path:
        path = folder / "service-account.json"
        path.write_text(json.dumps({
            "type": "service_account", "project_id": "fake-project", "private_key_id": "fake-key-1",
            "private_key": self.private_pem, "client_email": self.email, "client_id": "1234567890",
            "auth_uri": "https://accounts.google.com/o/oauth2/auth", "token_uri": token_uri,
        }))
        return path


@dataclass
class TokenIssuer:
    """The token endpoint and the tokens it issued (token -> expiry, seconds since the epoch)."""

    account: ServiceAccount
    lifetime: float = 3600.0  # expires_in of each token issued
    issued: dict[str, float] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)  # why each refused assertion was refused

    def exchange(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """POST /token's form (grant_type, assertion) -> (status, JSON answer)."""
        if form.get("grant_type") != _JWT_BEARER:
            return self._refuse("unsupported_grant_type", f"grant_type {form.get('grant_type')!r}")
        try:
            claims = jwt.decode(form.get("assertion", ""), certs=self.account.public_pem, audience=AUDIENCE)
        except ValueError as exc:
            return self._refuse("invalid_grant", f"assertion: {exc}")
        if claims.get("iss") != self.account.email:
            return self._refuse("invalid_grant", f"issuer {claims.get('iss')!r}")
        if SCOPE not in str(claims.get("scope", "")).split():
            return self._refuse("invalid_scope", f"scope {claims.get('scope')!r}")
        token = "ya29.fake-" + secrets.token_urlsafe(24)
        self.issued[token] = time.time() + self.lifetime
        return 200, {"access_token": token, "expires_in": self.lifetime, "token_type": "Bearer"}

    def _refuse(self, code: str, why: str) -> tuple[int, dict[str, Any]]:
        self.refused.append(why)
        return 400, {"error": code, "error_description": why}

    def valid(self, authorization: str) -> bool:
        token = authorization.removeprefix("Bearer ") if authorization.startswith("Bearer ") else ""
        expires = self.issued.get(token)
        return expires is not None and time.time() < expires


def unauthenticated() -> dict[str, Any]:
    return {"error": {"code": 401, "message": "Request had invalid authentication credentials. Expected OAuth 2 "
                      "access token, login cookie or other valid authentication credential.",
                      "status": "UNAUTHENTICATED"}}

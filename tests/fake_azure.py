"""What the fake upstream adds to be Azure OpenAI: its paths and api-version, its `api-key` (or an Entra ID bearer),
the content-filter annotations of its answers and its content-filter refusal. Not product code.

The fake answers Azure's paths (FakeUpstream.azure_url is the resource's endpoint):

    /openai/v1/chat/completions, /openai/v1/responses, /openai/v1/embeddings          the v1 API, model in the body
    /openai/deployments/{deployment}/chat/completions?api-version=..., .../embeddings  the dated API
    /openai/responses?api-version=...                                                 (its Responses, model in the body)

A request whose `api-key` is not one of FakeUpstream.azure_keys (nor its bearer one of azure_tokens) gets Azure's 401;
the dated paths without api-version get Azure's 404. Answers are the Chat Completions and Responses dialects with
Azure's annotations: prompt_filter_results (a first stream chunk of its own, with no choices, id or model) and each
choice's content_filter_results. A Reply with `filtered` (a category: violence, hate ...) and status 400 is a prompt
the filter refuses; with finish "content_filter", a completion it cut, with that category marked filtered.
"""

from __future__ import annotations

import asyncio
import types
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse

from tests.fake_dialects import ERRORS, Reply

CATEGORIES = ("hate", "self_harm", "sexual", "violence")
DATED = ("/openai/deployments/", "/openai/responses")  # the paths of the dated API, which need api-version


def results(filtered: str | None = None) -> dict[str, Any]:
    """A content_filter_results object: every category safe, except `filtered` (medium, filtered)."""
    return {c: {"filtered": c == filtered, "severity": "medium" if c == filtered else "safe"} for c in CATEGORIES}


def refused(request: Request, keys: set[str], tokens: set[str]) -> JSONResponse | None:
    """Azure's 401 for a missing or wrong credential, its 404 for a dated path without api-version; else None."""
    bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
    if request.headers.get("api-key") not in keys and bearer not in tokens:
        message = ("Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid "
                   "key for an active subscription and use a correct regional API endpoint for your resource.")
        return JSONResponse({"error": {"code": "401", "message": message}}, 401)
    if request.url.path.startswith(DATED) and not request.query_params.get("api-version"):
        return JSONResponse({"error": {"code": "404", "message": "Resource not found"}}, 404)
    return None


def error(reply: Reply) -> dict[str, Any]:
    """Azure's error body: the content filter's refusal of the prompt, or OpenAI's shape with Azure's code."""
    if reply.filtered is None:
        body = ERRORS["chat"](reply)
        body["error"]["code"] = str(reply.status)
        return body
    message = ("The response was filtered due to the prompt triggering Azure OpenAI's content management policy. "
               "Please modify your prompt and retry.")
    inner = {"code": "ResponsibleAIPolicyViolation", "content_filter_result": {
        **results(reply.filtered), "jailbreak": {"filtered": False, "detected": False}}}
    return {"error": {"message": message, "type": None, "param": "prompt", "code": "content_filter", "status": 400,
                      "innererror": inner}}


def _prompt_results() -> list[dict[str, Any]]:
    return [{"prompt_index": 0, "content_filter_results": {**results(), "jailbreak": {"filtered": False,
                                                                                     "detected": False}}}]


def _cut(reply: Reply) -> str | None:
    """The category a completion cut by the filter was filtered for."""
    return (reply.filtered or "violence") if reply.finish == "content_filter" else None


def annotated(dialect: str, payload: dict[str, Any], reply: Reply) -> dict[str, Any]:
    """A whole answer with Azure's annotations."""
    if dialect == "chat":
        for choice in payload.get("choices") or []:
            choice["content_filter_results"] = results(_cut(reply))
        return {"prompt_filter_results": _prompt_results(), **payload}
    return {**payload, "content_filters": [{"blocked": False, "source_type": "prompt",
                                            "content_filter_results": results()}]}


def annotated_stream(dialect: str, chunks: list[bytes], reply: Reply) -> list[bytes]:
    """A stream with Azure's annotations: chat's first chunk of prompt_filter_results and each choice's
    content_filter_results (the role chunk's empty); Responses' content_filters on the response of its last event."""
    if dialect != "chat":
        return [_rewritten(chunk, lambda e: _responses_event(e, reply)) for chunk in chunks]
    head = {"choices": [], "created": 0, "id": "", "model": "", "object": "", "prompt_filter_results": _prompt_results()}
    return [b"data: " + orjson.dumps(head) + b"\n\n", *(_rewritten(c, lambda e: _chat_chunk(e, reply)) for c in chunks)]


def _chat_chunk(chunk: dict[str, Any], reply: Reply) -> dict[str, Any]:
    for choice in chunk.get("choices") or []:
        first = choice.get("delta", {}).get("role") is not None
        choice["content_filter_results"] = {} if first else results(_cut(reply) if choice.get("finish_reason") else None)
    return chunk


def _responses_event(event: dict[str, Any], reply: Reply) -> dict[str, Any]:
    if event.get("type") in ("response.completed", "response.incomplete"):
        event["response"] = annotated("responses", event["response"], reply)
    return event


def _rewritten(chunk: bytes, change: Any) -> bytes:
    """An SSE chunk with its JSON data changed (the [DONE] line and anything not JSON as it was)."""
    head, sep, data = chunk.partition(b"data: ")
    try:
        payload = orjson.loads(data)
    except orjson.JSONDecodeError:
        return chunk
    return head + sep + orjson.dumps(change(payload)) + b"\n\n"


class FakeCredential:
    """azure-identity's async credential as the upstream uses it: get_token(scope), close()."""

    def __init__(self, *tokens: tuple[str, float], fail: bool = False, secret: str = "") -> None:
        self.tokens, self.fail, self.secret = list(tokens), fail, secret  # a failure's message quotes `secret`
        self.scopes: list[tuple[str, ...]] = []
        self.closed = False

    async def get_token(self, *scopes: str) -> Any:
        self.scopes.append(scopes)
        await asyncio.sleep(0)  # let concurrent callers pile up behind the renewal
        if self.fail or not self.tokens:
            raise RuntimeError(f"ClientSecretCredential: AADSTS7000215 invalid client secret {self.secret}")
        token, expires = self.tokens.pop(0)
        return types.SimpleNamespace(token=token, expires_on=expires)

    async def close(self) -> None:
        self.closed = True

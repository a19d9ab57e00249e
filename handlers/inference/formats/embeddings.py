"""OpenAI Embeddings, as callers send it and as openai upstreams answer it. The shape is the same both ways, so the
caller's body goes upstream with only the model's name rewritten, and the vectors come back unchanged (floats, or
base64 when asked): no canonical form in between, as there is nothing to translate."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from generated.models import EmbeddingsRequest
from handlers.inference import tokens
from handlers.inference.canonical import Usage
from handlers.inference.formats.base import UpstreamFault, UpstreamOptions
from handlers.inference.formats.common import known_fields

FORMAT = "embeddings"  # the decision record's and the metrics' name for the endpoint

Input = str | list[str] | list[int] | list[list[int]]


@dataclass(slots=True)
class Embed:
    """One embeddings request."""

    model: str  # as the caller named it: a model id or an alias
    input: Input
    body: dict[str, Any]  # the caller's body as sent, fields set to null left out


@dataclass(slots=True)
class Vectors:
    """An upstream's answer: its embeddings as it sent them, and its count of the input (None: not reported)."""

    data: list[dict[str, Any]]
    usage: Usage | None


def parse(body: EmbeddingsRequest) -> Embed:
    sent = body.model_dump(mode="json", exclude_unset=True)
    return Embed(body.model, sent["input"], {key: value for key, value in sent.items() if value is not None})


def inputs(req: Embed) -> list[str | list[int]]:
    """Each input apart: one text, or one list of token ids, per embedding asked for."""
    given = req.input
    if isinstance(given, str) or isinstance(given[0], int):
        return [given]  # a list of token ids is one input
    return list(given)


def input_tokens(req: Embed) -> tuple[int, int]:
    """The estimated tokens of all inputs together and of the longest one. Token ids count as they are; a text
    takes the gateway's estimate (handlers/inference/tokens.py)."""
    counts = [len(item) if isinstance(item, list) else tokens.text_tokens(item) for item in inputs(req)]
    return sum(counts), max(counts)


def upstream_body(req: Embed, model: str, options: UpstreamOptions) -> dict[str, Any]:
    """The caller's body for an openai upstream: the fields the spec declares (every field with passthrough), with
    the upstream's own model name."""
    if options.passthrough:
        body = dict(req.body)
    else:
        known = known_fields(EmbeddingsRequest)
        body = {key: value for key, value in req.body.items() if key in known}
    body["model"] = model
    return body


def upstream_result(payload: dict[str, Any], expected: int) -> Vectors:
    """The upstream's answer: one embedding (a list of numbers, or a base64 string) with its index per input."""
    if isinstance(payload.get("error"), dict):
        raise UpstreamFault(payload=payload)
    data = payload.get("data")
    if not isinstance(data, list) or not all(_is_embedding(item) for item in data):
        raise UpstreamFault(what="sent an embeddings answer that cannot be read")
    if len(data) != expected:
        raise UpstreamFault(what=f"sent {len(data)} embeddings for {expected} inputs")
    for item in data:
        item.setdefault("object", "embedding")
    usage = payload.get("usage")
    prompt = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    counted = type(prompt) is int and prompt >= 0
    return Vectors(data, Usage(input_tokens=prompt, output_tokens=0) if counted else None)


def _is_embedding(item: Any) -> bool:
    return (isinstance(item, dict) and type(item.get("index")) is int
            and isinstance(item.get("embedding"), list | str))


def render(vectors: Vectors, model: str, usage: Usage) -> dict[str, Any]:
    """OpenAI's list of embeddings, naming `model`, with the input tokens charged."""
    charged = usage.input_tokens or 0
    return {"object": "list", "data": vectors.data, "model": model,
            "usage": {"prompt_tokens": charged, "total_tokens": charged}}

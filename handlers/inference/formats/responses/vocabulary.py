"""The words of OpenAI Responses that both directions share: statuses, usage counts, what ends a stream, and how its
request fields travel to another format (read from the spec's marks)."""

from __future__ import annotations

from typing import Any

from generated.models import Reasoning, ResponsesRequest, ResponsesTextConfig
from handlers.inference.canonical import FinishReason, Usage
from handlers.inference.formats import fields
from handlers.inference.formats.base import Vocabulary
from handlers.inference.formats.common import count, opt_int

# The objects whose fields are read one by one ("reasoning.summary", "text.verbosity").
NESTED = {"reasoning": Reasoning, "text": ResponsesTextConfig}
VOCABULARY = Vocabulary(
    name="responses",
    kind="responses",
    id_prefix="resp_",
    output_field="text.format",
    stop_field="stop",
    fields=fields.rules(ResponsesRequest, NESTED),
    session_field="prompt_cache_key",
)
KIND = VOCABULARY.kind
# Going to another format, these may be left out: they identify, bill, cache or shape what only OpenAI adds to an
# answer, or are translated already. With their inert values the others ask for nothing; any other extra field
# (prompt, moderation, context_management, a text.format only OpenAI knows, verbosity low ...) is refused by name.
ADVISORY = VOCABULARY.fields.advisory
INERT = VOCABULARY.fields.inert

STREAM_FIELDS: dict[str, Any] = {"stream": True}  # usage always comes with response.completed
STREAM_END = "response.completed"
ENCRYPTED = "reasoning.encrypted_content"

# Finish reason -> (status, incomplete_details).
STATUSES: dict[FinishReason, tuple[str, dict[str, str] | None]] = {
    FinishReason.STOP: ("completed", None),
    FinishReason.STOP_SEQUENCE: ("completed", None),
    FinishReason.LENGTH: ("incomplete", {"reason": "max_output_tokens"}),
    FinishReason.TOOL_CALLS: ("completed", None),
    FinishReason.CONTENT_FILTER: ("incomplete", {"reason": "content_filter"}),
    FinishReason.UNKNOWN: ("completed", None),
}
# An incomplete response's reason, read back.
INCOMPLETE = {"max_output_tokens": FinishReason.LENGTH, "content_filter": FinishReason.CONTENT_FILTER}


def render_usage(value: Usage) -> dict[str, Any]:
    return {
        "input_tokens": count(value.input_tokens),
        "input_tokens_details": {
            "cached_tokens": count(value.cached_input_tokens),
            "cache_write_tokens": count(value.cache_write_tokens),
        },
        "output_tokens": count(value.output_tokens),
        "output_tokens_details": {"reasoning_tokens": count(value.reasoning_tokens)},
        "total_tokens": count(value.total_tokens),
    }


def read_usage(raw: Any) -> Usage:
    raw = raw if isinstance(raw, dict) else {}
    given = raw.get("input_tokens_details") or {}
    out = raw.get("output_tokens_details") if isinstance(raw.get("output_tokens_details"), dict) else {}
    return Usage(
        input_tokens=opt_int(raw.get("input_tokens")),
        output_tokens=opt_int(raw.get("output_tokens")),
        cached_input_tokens=opt_int(given.get("cached_tokens")),
        cache_write_tokens=opt_int(given.get("cache_write_tokens")),
        reasoning_tokens=opt_int(out.get("reasoning_tokens")),
    )

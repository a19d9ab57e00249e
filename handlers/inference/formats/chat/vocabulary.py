"""The words of Chat Completions that both directions share: finish reasons, usage counts, what ends a stream, and
how its request fields travel to another format (read from the spec's marks)."""

from __future__ import annotations

from typing import Any

from generated.models import ChatCompletionRequest
from handlers.inference.canonical import FinishReason, Usage
from handlers.inference.formats import fields
from handlers.inference.formats.base import Vocabulary
from handlers.inference.formats.common import count, opt_int, present

VOCABULARY = Vocabulary(
    name="chat",
    kind="openai",
    id_prefix="chatcmpl-",
    output_field="response_format",
    stop_field="stop",
    fields=fields.rules(ChatCompletionRequest),
    session_field="prompt_cache_key",
)
ADVISORY = VOCABULARY.fields.advisory
INERT = VOCABULARY.fields.inert

STREAM_FIELDS: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}}
STREAM_END = "[DONE]"

_PLAIN = (FinishReason.STOP, FinishReason.LENGTH, FinishReason.TOOL_CALLS, FinishReason.CONTENT_FILTER)
FINISH_REASONS = {
    FinishReason.STOP: "stop",
    FinishReason.STOP_SEQUENCE: "stop",
    FinishReason.LENGTH: "length",
    FinishReason.TOOL_CALLS: "tool_calls",
    FinishReason.CONTENT_FILTER: "content_filter",
    FinishReason.UNKNOWN: "stop",
}
# The same words read back; "function_call" is the legacy word for tool calls.
FINISH_READ = {word: reason for reason, word in FINISH_REASONS.items() if reason in _PLAIN} | {
    "function_call": FinishReason.TOOL_CALLS
}
THINKING_GAP = "\n\n"  # between two thinking blocks, which chat's one reasoning_content has to join


def usage(value: Usage) -> dict[str, Any]:
    """prompt_tokens counts every prompt token, cache reads (cached_tokens) and writes (cache_write_tokens, when an
    upstream reported them) included."""
    details = {
        "cached_tokens": count(value.cached_input_tokens),
        **present(cache_write_tokens=value.cache_write_tokens),
    }
    return {
        "prompt_tokens": count(value.input_tokens),
        "completion_tokens": count(value.output_tokens),
        "total_tokens": count(value.total_tokens),
        "prompt_tokens_details": details,
        **({"completion_tokens_details": {"reasoning_tokens": value.reasoning_tokens}}
           if value.reasoning_tokens is not None else {}),
    }


def read_usage(raw: Any) -> Usage:
    """An upstream's usage: cache reads from prompt_tokens_details.cached_tokens (OpenAI), or DeepSeek's
    prompt_cache_hit_tokens; cache writes from prompt_tokens_details.cache_write_tokens; reasoning from
    completion_tokens_details.reasoning_tokens."""
    raw = raw if isinstance(raw, dict) else {}
    details = raw.get("prompt_tokens_details")
    details = details if isinstance(details, dict) else {}
    cached = details.get("cached_tokens")
    completion = raw.get("completion_tokens_details")
    completion = completion if isinstance(completion, dict) else {}
    return Usage(
        input_tokens=opt_int(raw.get("prompt_tokens")),
        output_tokens=opt_int(raw.get("completion_tokens")),
        cached_input_tokens=opt_int(cached if cached is not None else raw.get("prompt_cache_hit_tokens")),
        cache_write_tokens=opt_int(details.get("cache_write_tokens")),
        reasoning_tokens=opt_int(completion.get("reasoning_tokens")),
    )

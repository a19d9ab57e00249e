"""Chat Completions as callers get it: the canonical answer as a chat.completion, and the words both ways."""

from __future__ import annotations

from typing import Any

from handlers.inference.canonical import Answer, Block, FinishReason, Request, Result, Thinking, ToolCall, Usage
from handlers.inference.formats.common import count, opt_int, present

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


def render(result: Result, answer: Answer, request: Request) -> dict[str, Any]:
    calls = [call(block) for block in result.content if isinstance(block, ToolCall)]
    text = result.text()
    message: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None, "refusal": None}
    reasoning = reasoning_text(result.content)
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = calls
    choice = {"index": 0, "message": message, "finish_reason": FINISH_REASONS[result.finish_reason], "logprobs": None}
    return {
        "id": f"chatcmpl-{answer.decision_id}",
        "object": "chat.completion",
        "created": answer.created,
        "model": answer.model,
        "choices": [choice],
        "usage": usage(result.usage),
    }


def reasoning_text(content: list[Block]) -> str:
    """The reasoning an answer showed, whichever provider's: chat has only its text (signatures and encrypted
    reasoning have no place in it)."""
    return THINKING_GAP.join(block.text for block in content if isinstance(block, Thinking) and block.text)


def call(block: ToolCall) -> dict[str, Any]:
    return {"id": block.id, "type": "function", "function": {"name": block.name, "arguments": block.arguments}}


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
    }


def read_usage(raw: Any) -> Usage:
    """An upstream's usage: cache reads from prompt_tokens_details.cached_tokens (OpenAI), or DeepSeek's
    prompt_cache_hit_tokens; cache writes from prompt_tokens_details.cache_write_tokens."""
    raw = raw if isinstance(raw, dict) else {}
    details = raw.get("prompt_tokens_details")
    details = details if isinstance(details, dict) else {}
    cached = details.get("cached_tokens")
    return Usage(
        input_tokens=opt_int(raw.get("prompt_tokens")),
        output_tokens=opt_int(raw.get("completion_tokens")),
        cached_input_tokens=opt_int(cached if cached is not None else raw.get("prompt_cache_hit_tokens")),
        cache_write_tokens=opt_int(details.get("cache_write_tokens")),
    )

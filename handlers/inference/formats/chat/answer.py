"""Chat Completions as callers get it whole: the canonical answer as a chat.completion."""

from __future__ import annotations

from typing import Any

from handlers.inference.canonical import Answer, Block, Request, Result, Text, Thinking, ToolCall
from handlers.inference.formats.chat.vocabulary import FINISH_REASONS, THINKING_GAP, VOCABULARY, usage


def render(result: Result, answer: Answer, request: Request) -> dict[str, Any]:
    calls = [call(block) for block in result.content if isinstance(block, ToolCall)]
    text = "".join(block.text for block in result.content if isinstance(block, Text) and not block.refusal)
    refusal = "".join(block.text for block in result.content if isinstance(block, Text) and block.refusal) or None
    content = text if text or not (calls or refusal) else None
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": refusal}
    reasoning = reasoning_text(result.content)
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = calls
    choice = {"index": 0, "message": message, "finish_reason": FINISH_REASONS[result.finish_reason], "logprobs": None}
    return {
        "id": VOCABULARY.id_prefix + answer.decision_id,
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
    if block.custom:
        return {"id": block.id, "type": "custom", "custom": {"name": block.name, "input": block.arguments}}
    return {"id": block.id, "type": "function", "function": {"name": block.name, "arguments": block.arguments}}

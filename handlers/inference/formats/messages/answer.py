"""The answer as a Messages caller gets it whole: a message."""

from __future__ import annotations

from typing import Any

from handlers.inference.canonical import (
    Answer,
    Block,
    FinishReason,
    Request,
    Result,
    Text,
    Thinking,
    ToolCall,
    Unknown,
)
from handlers.inference.formats.common import tool_input
from handlers.inference.formats.messages.vocabulary import (
    STOP_REASONS,
    VOCABULARY,
    text_block,
    thinking_block,
    tool_use_block,
    usage,
)


def render(result: Result, answer: Answer, request: Request) -> dict[str, Any]:
    content = [block for b in result.content if (block := _block(b)) is not None] or [text_block("")]
    return {
        **head(answer),
        "content": content,
        **stop(result.finish_reason, result.stop_sequence),
        "usage": usage(result.usage),
    }


def stop(reason: FinishReason, sequence: str | None) -> dict[str, Any]:
    """stop_reason, and stop_sequence: the sequence matched (null when the upstream did not say which)."""
    return {
        "stop_reason": STOP_REASONS[reason],
        "stop_sequence": sequence if reason is FinishReason.STOP_SEQUENCE else None,
    }


def head(answer: Answer) -> dict[str, Any]:
    return {"id": VOCABULARY.id_prefix + answer.decision_id, "type": "message", "role": "assistant",
            "model": answer.model}


def _block(block: Block) -> dict[str, Any] | None:
    """Text, tool calls and reasoning (whichever provider reasoned); blocks of Anthropic's own (server tools, their
    results) as they came. An answer holds nothing else."""
    if isinstance(block, Text):
        cited = {"citations": block.citations} if block.citations else {}
        return text_block(block.text) | cited if block.text or cited else None
    if isinstance(block, ToolCall):
        return tool_use_block(block.id, block.name, tool_input(block.arguments))
    if isinstance(block, Thinking):
        return thinking_block(block)
    if isinstance(block, Unknown) and block.format == "messages":
        return block.data
    return None

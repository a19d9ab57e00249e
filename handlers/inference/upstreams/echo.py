"""The built-in upstream: answers without a network, so the gateway works with no configuration.

A "token" here is a whitespace-separated word. Same request, same answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from handlers.inference.canonical import (
    Block,
    Event,
    Finish,
    FinishReason,
    Request,
    Result,
    Text,
    TextDelta,
    ToolCall,
    ToolResult,
    Usage,
    UsageReport,
)
from handlers.inference.formats.base import Traits
from handlers.inference.upstreams.base import PLAIN, Upstream


class EchoUpstream(Upstream):
    kind = "echo"

    async def complete(self, request: Request, model: str, traits: Traits = PLAIN) -> Result:
        words, reason = _answer(request)
        text = " ".join(words)
        return Result(
            content=[Text(text)] if text else [],
            finish_reason=reason,
            usage=_usage(request, words),
            upstream_model=model,
        )

    async def stream(self, request: Request, model: str, traits: Traits = PLAIN) -> AsyncIterator[Event]:
        words, reason = _answer(request)
        for i, word in enumerate(words):
            yield TextDelta(word if i == len(words) - 1 else word + " ")
        yield Finish(reason)
        yield UsageReport(_usage(request, words))


def _answer(request: Request) -> tuple[list[str], FinishReason]:
    last_user = next((m.text() for m in reversed(request.messages) if m.role == "user"), "")
    words = ("Echo: " + last_user).split()
    if request.max_tokens is not None and len(words) > request.max_tokens:
        return words[: max(request.max_tokens, 0)], FinishReason.LENGTH
    return words, FinishReason.STOP


def _usage(request: Request, words: list[str]) -> Usage:
    texts = [request.system or ""] + [_block_text(b) for m in request.messages for b in m.content]
    prompt = sum(len(text.split()) for text in texts)
    return Usage(input_tokens=max(prompt, 1), output_tokens=len(words), cached_input_tokens=0)


def _block_text(block: Block) -> str:
    if isinstance(block, Text):
        return block.text
    if isinstance(block, ToolCall):
        return f"{block.name} {block.arguments}"
    if isinstance(block, ToolResult):
        return block.content
    return ""

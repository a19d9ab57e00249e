"""The built-in upstream: answers without a network, so the gateway works with no configuration.

A "token" here is a whitespace-separated word. Same request, same answer. It sees images and documents (it names
them: "[image]", "[document]") and has no way to answer in a JSON schema, so structured output is refused.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from generated.config import UpstreamSettings
from handlers.errors import unsupported
from handlers.inference.canonical import (
    Block,
    Document,
    Event,
    Finish,
    FinishReason,
    Image,
    Request,
    Result,
    Text,
    TextDelta,
    ToolCall,
    ToolResult,
    Usage,
    UsageReport,
)
from handlers.inference.formats.base import FORMATS, Traits
from handlers.inference.formats.common import refuse_untranslatable
from handlers.inference.upstreams.base import PLAIN, Upstream


class EchoUpstream(Upstream):
    kind = "echo"
    system = "echo"

    @classmethod
    def from_settings(cls, name: str, settings: UpstreamSettings) -> EchoUpstream:
        return cls(name)

    async def complete(self, request: Request, model: str, traits: Traits = PLAIN) -> Result:
        _refuse_what_it_cannot_do(request)
        words, reason = _answer(request)
        text = " ".join(words)
        return Result(
            content=[Text(text)] if text else [],
            finish_reason=reason,
            usage=_usage(request, words),
            upstream_model=model,
        )

    async def stream(self, request: Request, model: str, traits: Traits = PLAIN) -> AsyncIterator[Event]:
        _refuse_what_it_cannot_do(request)
        words, reason = _answer(request)
        for i, word in enumerate(words):
            yield TextDelta(word if i == len(words) - 1 else word + " ")
        yield Finish(reason)
        yield UsageReport(_usage(request, words))


def _refuse_what_it_cannot_do(request: Request) -> None:
    refuse_untranslatable(request, "echo")
    if request.output is not None:
        raise unsupported(FORMATS[request.format].VOCABULARY.output_field, "echo", "it answers in plain text")


def _answer(request: Request) -> tuple[list[str], FinishReason]:
    last_user = next((_words(m.content) for m in reversed(request.messages) if m.role == "user"), "")
    words = ("Echo: " + last_user).split()
    if request.max_tokens is not None and len(words) > request.max_tokens:
        return words[: max(request.max_tokens, 0)], FinishReason.LENGTH
    return words, FinishReason.STOP


def _usage(request: Request, words: list[str]) -> Usage:
    texts = [request.system or ""] + [_block_text(b) for m in request.messages for b in m.content]
    prompt = sum(len(text.split()) for text in texts)
    return Usage(input_tokens=max(prompt, 1), output_tokens=len(words), cached_input_tokens=0)


def _words(blocks: list[Block]) -> str:
    return " ".join(text for block in blocks if (text := _seen(block)))


def _seen(block: Block) -> str:
    """What echo says back of a user's block: its text, or the name of what it is."""
    if isinstance(block, Image):
        return "[image]"
    if isinstance(block, Document):
        return "[document]"
    return block.text if isinstance(block, Text) else ""


def _block_text(block: Block) -> str:
    if isinstance(block, Text | Image | Document):
        return _seen(block)
    if isinstance(block, ToolCall):
        return f"{block.name} {block.arguments}"
    if isinstance(block, ToolResult):
        return block.content
    return ""

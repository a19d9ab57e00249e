"""The answer as a Gemini caller gets it whole: a GenerateContentResponse with one candidate, whose responseId is the
decision id."""

from __future__ import annotations

from typing import Any

from handlers.inference.canonical import Answer, Block, Request, Result, Text, Thinking, ToolCall, Unknown
from handlers.inference.formats.common import tool_input
from handlers.inference.formats.gemini.vocabulary import (
    FINISH_REASONS,
    call_part,
    candidate,
    pick,
    signed,
    text_part,
    thought_part,
    usage,
)


def render(result: Result, answer: Answer, request: Request) -> dict[str, Any]:
    parts = Parts(shows_thoughts(request))
    for block in result.content:
        parts.add(block)
    return {
        "candidates": [candidate(parts.done(), FINISH_REASONS[result.finish_reason])],
        "usageMetadata": usage(result.usage),
        **head(answer),
    }


def head(answer: Answer) -> dict[str, Any]:
    return {"modelVersion": answer.model, "responseId": answer.decision_id}


def shows_thoughts(request: Request) -> bool:
    """Gemini shows reasoning as thought parts only when the caller asked (thinkingConfig.includeThoughts)."""
    config = pick(pick(request.body, "generationConfig"), "thinkingConfig")
    return pick(config, "includeThoughts") is True


class Parts:
    """An answer's blocks as parts. Gemini's thought signature goes on the part it came with (a signature-only
    Thinking block is followed by that part's block); another provider's reasoning shows as thought text only, its
    seal going back to nobody but it."""

    def __init__(self, thoughts: bool) -> None:
        self.thoughts = thoughts
        self.parts: list[dict[str, Any]] = []
        self.signature: str | None = None  # Gemini's, waiting for the part it belongs to

    def add(self, block: Block) -> dict[str, Any] | None:
        """The part `block` becomes (kept in `parts`), or None when it becomes none (yet)."""
        part = self._part(block)
        if part is None:
            return None
        part, self.signature = signed(part, self.signature), None
        self.parts.append(part)
        return part

    def done(self) -> list[dict[str, Any]]:
        if self.signature:  # a signature with nothing after it: on an empty text part, as Gemini sends it
            self.parts.append(signed(text_part(""), self.signature))
            self.signature = None
        return self.parts

    def _part(self, block: Block) -> dict[str, Any] | None:
        if isinstance(block, Thinking):
            return self._thought(block)
        if isinstance(block, Text):
            return text_part(block.text) if block.text else None
        if isinstance(block, ToolCall):
            return call_part(block.id, block.name, tool_input(block.arguments))
        if isinstance(block, Unknown) and block.format == "gemini":
            return block.data
        return None  # another format's own item: the relay reports it as left out

    def _thought(self, block: Thinking) -> dict[str, Any] | None:
        own = block.format == "gemini" and bool(block.signature)
        if own and not block.text:
            self.signature = (self.signature or "") + (block.signature or "")
            return None
        if not (self.thoughts and block.text):
            if own:
                self.signature = block.signature
            return None
        return signed(thought_part(block.text), block.signature if own else None)

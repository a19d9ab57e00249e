"""Reasoning on its way to an upstream: it goes back only to the provider that made it, in the state that provider
can check. Anthropic takes a thinking block only with its signature (or its redacted data), and refuses an unsigned
one; OpenAI Responses takes a reasoning item only with its encrypted content (with store false an item without it
is "not found"); a Chat Completions server takes back the reasoning text it showed (reasoning_content).

Every renderer asks `goes_back` for every block, so what an upstream is sent and what the decision record says it
was not sent (`left_out`) are the same rule. A reasoning block with nothing in it is no loss and is not said.
"""

from __future__ import annotations

from collections import Counter

from handlers.inference.canonical import Format, Message, Request, Thinking, ToolCall
from handlers.inference.formats.base import Traits

_TIERS = frozenset({"low", "medium", "high"})  # the effort tiers Anthropic gets a thinking budget for


def goes_back(block: Thinking, target: Format) -> bool:
    """Whether an upstream speaking `target` is sent `block`."""
    if target == "messages":
        return block.format == "messages" and bool(block.signature or block.redacted)
    if target == "responses":
        return block.format == "responses" and bool(block.encrypted)
    return block.format == "chat" and bool(block.text)


def thinking_allowed(conversation: list[Message]) -> bool:
    """Anthropic refuses thinking in the middle of a tool loop whose last assistant turn has no thinking block it
    signed (another provider's reasoning never has one): that turn runs without thinking, as the upstream would
    otherwise refuse it."""
    for message in reversed(conversation):
        if message.role == "tool":
            continue
        if message.role != "assistant" or not any(isinstance(b, ToolCall) for b in message.content):
            return True
        return any(isinstance(b, Thinking) and goes_back(b, "messages") for b in message.content)
    return True


def left_out(request: Request, target: Format, traits: Traits) -> list[str]:
    """The reasoning of `request`'s conversation an upstream speaking `target` (a model with `traits`) is not sent,
    counted by what it is ("3 thinking blocks signed by anthropic ..."), for the decision record; and thinking, for
    a turn Anthropic refuses it in."""
    seen: Counter[tuple[str, str]] = Counter()
    for message in request.messages:
        for block in message.content:
            if isinstance(block, Thinking) and not goes_back(block, target) and _shows(block):
                seen[_what(block)] += 1
    said = [f"{n} {what[n != 1]}: {_WHY[target]}" for what, n in seen.items()]
    if target == "messages" and _asks_thinking(request, traits) and not thinking_allowed(request.messages):
        said.append("thinking, for this turn: the tool loop's last assistant turn has no thinking block anthropic "
                    "signed, and anthropic refuses thinking there without one")
    return said


def _asks_thinking(request: Request, traits: Traits) -> bool:
    """Whether the request asks a reasoning model for thinking: in Anthropic's words, or with an effort tier."""
    if not traits.reasoning or request.thinking is False:
        return False
    return bool(request.thinking or request.thinking_budget) or request.effort in _TIERS


def _shows(block: Thinking) -> bool:
    return bool(block.text or block.signature or block.redacted or block.encrypted)


def _what(block: Thinking) -> tuple[str, str]:
    """The block's kind, singular and plural."""
    if block.redacted:
        return "redacted thinking block from anthropic", "redacted thinking blocks from anthropic"
    if block.signature:
        return "thinking block signed by anthropic", "thinking blocks signed by anthropic"
    if block.encrypted:
        return "reasoning item encrypted by openai", "reasoning items encrypted by openai"
    if block.format == "responses":
        return "reasoning item without encrypted content", "reasoning items without encrypted content"
    if block.format == "chat":
        return "reasoning text of a chat completions upstream", "reasoning texts of a chat completions upstream"
    return "thinking block without a signature", "thinking blocks without a signature"


_WHY: dict[Format, str] = {
    "messages": "an anthropic upstream takes back only thinking it signed itself",
    "responses": "a responses upstream takes back only reasoning items it encrypted itself",
    "chat": "a chat completions upstream takes back only reasoning text it showed itself",
}

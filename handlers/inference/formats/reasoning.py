"""Reasoning on its way to an upstream: it goes back only to the provider that made it, in the state that provider
can check. Anthropic takes a thinking block only with its signature (or its redacted data), and refuses an unsigned
one; OpenAI Responses takes a reasoning item only with its encrypted content (with store false an item without it
is "not found"); a Chat Completions server takes back the reasoning text it showed (reasoning_content); Bedrock's
Converse takes back the reasoning it gave (Claude's with its signature, or its redacted content).

Every renderer asks `goes_back` for every block, so what an upstream is sent and what the decision record says it
was not sent (`left_out`) are the same rule. A reasoning block with nothing in it is no loss and is not said.
"""

from __future__ import annotations

import base64
import binascii
from collections import Counter

import orjson

from handlers.errors import bad_request
from handlers.inference.canonical import Dialect, Message, Request, Thinking, ToolCall
from handlers.inference.formats.base import Traits

_TIERS = frozenset({"low", "medium", "high"})  # the effort tiers Anthropic gets a thinking budget for


def goes_back(block: Thinking, target: Dialect) -> bool:
    """Whether an upstream speaking `target` is sent `block`."""
    if target == "messages":
        return block.format == "messages" and bool(block.signature or block.redacted)
    if target == "responses":
        return block.format == "responses" and bool(block.encrypted)
    if target == "converse":  # a model that signs nothing (not Claude) gives its text alone, and takes it back
        return block.format == "converse" and bool(block.signature or block.redacted or block.text)
    if target == "gemini":  # thought summaries and the signatures of the parts they came on
        return block.format == "gemini" and bool(block.signature or block.text)
    return block.format == "chat" and bool(block.text)


# The formats that speak to Claude, which refuses thinking in a tool loop it did not sign the last turn of.
_CLAUDE: dict[Dialect, str] = {"messages": "anthropic", "converse": "claude on bedrock"}


def thinking_allowed(conversation: list[Message], target: Dialect = "messages") -> bool:
    """Claude (Anthropic's API, or Bedrock's Converse: `target`) refuses thinking in the middle of a tool loop whose
    last assistant turn has no thinking block it signed (another provider's reasoning never has one): that turn runs
    without thinking, as the upstream would otherwise refuse it."""
    for message in reversed(conversation):
        if message.role == "tool":
            continue
        if message.role != "assistant" or not any(isinstance(b, ToolCall) for b in message.content):
            return True
        return any(isinstance(b, Thinking) and goes_back(b, target) for b in message.content)
    return True


def left_out(request: Request, target: Dialect, traits: Traits) -> list[str]:
    """The reasoning of `request`'s conversation an upstream speaking `target` (a model with `traits`) is not sent,
    counted by what it is ("3 thinking blocks signed by anthropic ..."), for the decision record; and thinking, for
    a turn Anthropic refuses it in."""
    seen: Counter[tuple[str, str]] = Counter()
    for message in request.messages:
        for block in message.content:
            if isinstance(block, Thinking) and not goes_back(block, target) and _shows(block):
                seen[_what(block)] += 1
    said = [f"{n} {what[n != 1]}: {_WHY[target]}" for what, n in seen.items()]
    if target in _CLAUDE and _asks_thinking(request, traits) and not thinking_allowed(request.messages, target):
        said.append(f"thinking, for this turn: the tool loop's last assistant turn has no thinking block "
                    f"{_CLAUDE[target]} signed, and {_CLAUDE[target]} refuses thinking there without one")
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
    if block.format == "gemini":
        if block.signature:
            return "thought signature from gemini", "thought signatures from gemini"
        return "thought summary from gemini", "thought summaries from gemini"
    if block.format == "converse":
        if block.redacted:
            return "redacted reasoning block from bedrock", "redacted reasoning blocks from bedrock"
        if block.signature:
            return "reasoning block signed by claude on bedrock", "reasoning blocks signed by claude on bedrock"
        return "reasoning text of a bedrock upstream", "reasoning texts of a bedrock upstream"
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


_WHY: dict[Dialect, str] = {
    "messages": "an anthropic upstream takes back only thinking it signed itself",
    "responses": "a responses upstream takes back only reasoning items it encrypted itself",
    "chat": "a chat completions upstream takes back only reasoning text it showed itself",
    "converse": "a bedrock upstream takes back only reasoning it gave itself",
    "gemini": "a gemini upstream takes back only thoughts it gave itself",
}


# --- Anthropic's thinking and Gemini's signatures through a Responses caller -----------------------------------------
# A Responses caller (Codex) keeps reasoning only as reasoning items, whose one opaque field is encrypted_content.
# Anthropic's thinking travels in it as a token of the gateway's own: this prefix, then base64url (unpadded) of
# {"s": signature} or {"r": redacted data}; Gemini's thought signature as {"g": signature}. The thinking text is the
# item's summary, so the token stays small. It is not sealed: the provider checks its signature itself, so a forged
# token gains nothing a caller could not send in the provider's own format, and a key to seal it would have to be
# shared by every replica and rotated.
CARRIED = "specway.v1."


def carry(block: Thinking) -> str | None:
    """The token a Responses caller keeps for Anthropic's signed or redacted thinking, or Gemini's thought
    signature; None for any other."""
    if block.format == "gemini" and block.signature:
        state = {"g": block.signature}
    elif block.format == "messages" and (block.signature or block.redacted):
        state = {"r": block.redacted} if block.redacted else {"s": block.signature}
    else:
        return None
    return CARRIED + base64.urlsafe_b64encode(orjson.dumps(state)).decode().rstrip("=")


def carried(token: str | None) -> bool:
    return token is not None and token.startswith(CARRIED)


def restore(token: str, text: str, param: str) -> Thinking:
    """Anthropic's thinking (or Gemini's signature) again, from a token `carry` made and the item's summary `text`; a token that is not one
    is a 400 naming `param`."""
    body = token[len(CARRIED):]
    try:
        state = orjson.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (binascii.Error, ValueError):
        state = None
    if isinstance(state, dict) and len(state) == 1:
        if isinstance(state.get("s"), str) and state["s"]:
            return Thinking(text, signature=state["s"], format="messages")
        if isinstance(state.get("r"), str) and state["r"]:
            return Thinking("", redacted=state["r"], format="messages")
        if isinstance(state.get("g"), str) and state["g"]:
            return Thinking(text, signature=state["g"], format="gemini")
    raise bad_request(f"{param} is not an encrypted_content this gateway gave: send the reasoning item back as it "
                      "came, or leave it out", param)

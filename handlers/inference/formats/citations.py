"""Anthropic's citations of an answer's text, on their way to a caller of another format. Anthropic cites a text
block as a whole: a Messages caller gets the citations as they came; a Responses caller gets those that point at a web
page (web search results) as url_citation annotations spanning their block's text; the rest, and every citation for
a Chat Completions caller, have no place in the caller's answer and are left out, by type in the decision record's
`left_out` (serving/relay.py says it, as of the answer items it leaves out)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from handlers.inference.canonical import Format

OF: Format = "messages"  # the format whose citations these are


def url_citation(citation: dict[str, Any], start: int, end: int) -> dict[str, Any] | None:
    """OpenAI's url_citation annotation of the text from `start` to `end`, for a citation with a URL; else None."""
    url = citation.get("url")
    if not isinstance(url, str) or not url:
        return None
    title = citation.get("title")
    return {"type": "url_citation", "start_index": start, "end_index": end, "url": url,
            "title": title if isinstance(title, str) else ""}


def carried(citation: dict[str, Any], caller: Format) -> bool:
    """Whether a caller of `caller`'s format gets `citation` in its answer."""
    if caller == "messages":
        return True
    return caller == "responses" and url_citation(citation, 0, 0) is not None


def kind(citation: dict[str, Any]) -> str:
    value = citation.get("type")
    return value[:64] if isinstance(value, str) and value else "unknown"


def left_out(counts: Counter[str], caller: Format) -> list[str]:
    """What the decision record says of the citations a caller's answer had no place for, counted by type."""
    why = _WHY.get(caller, "its format has no place for anthropic's citations")
    return [f"{n} citation{'s' if n != 1 else ''} ({what}): {why}" for what, n in sorted(counts.items())]


_WHY: dict[Format, str] = {
    "responses": "a responses answer cites only web pages (url_citation), and this citation has no URL",
    "chat": "a chat completions answer has no place for anthropic's citations",
}

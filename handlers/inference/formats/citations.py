"""The citations of an answer's text, on their way to a caller of another format.

Anthropic cites a text block as a whole: a Messages caller gets the citations as they came; a Responses caller gets
those that point at a web page (web search results) as url_citation annotations spanning their block's text; the
rest, and every citation for a Chat Completions caller, have no place in the caller's answer. OpenAI Responses'
annotations reach a Responses caller only. What a caller's answer has no place for is left out by type in the
decision record's `left_out` and counted (serving/relay.py says it, as of the answer items it leaves out).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from handlers.inference.canonical import Format, Text, TextDelta

Whose = tuple[Format, str]  # the format whose citation it is, and its type


def url_citation(citation: dict[str, Any], start: int, end: int) -> dict[str, Any] | None:
    """OpenAI's url_citation annotation of the text from `start` to `end`, for a citation with a URL; else None."""
    url = citation.get("url")
    if not isinstance(url, str) or not url:
        return None
    title = citation.get("title")
    return {"type": "url_citation", "start_index": start, "end_index": end, "url": url,
            "title": title if isinstance(title, str) else ""}


def uncarried(text: Text | TextDelta, caller: Format) -> Iterator[Whose]:
    """The citations of `text` (a whole answer's, or a streamed piece's) a caller of `caller`'s format does not get."""
    cited = text.citations or [] if isinstance(text, Text) else [text.citation] if text.citation else []
    noted = text.annotations or [] if isinstance(text, Text) else [text.annotation] if text.annotation else []
    for citation in cited:
        if caller != "messages" and (caller != "responses" or url_citation(citation, 0, 0) is None):
            yield "messages", _kind(citation)
    if caller != "responses":
        yield from (("responses", _kind(note)) for note in noted)


def left_out(counts: Counter[Whose], caller: Format) -> list[str]:
    """What the decision record says of the citations a caller's answer had no place for, counted by type."""
    said = []
    for (whose, kind), n in sorted(counts.items()):
        word = ("citation", "citations") if whose == "messages" else ("annotation", "annotations")
        said.append(f"{n} {word[n != 1]} ({kind}): {_WHY.get((whose, caller), _ELSE)}")
    return said


def _kind(citation: Any) -> str:
    value = citation.get("type") if isinstance(citation, dict) else None
    return value[:64] if isinstance(value, str) and value else "unknown"


_ELSE = "the caller's format has no place for it"
_WHY: dict[tuple[Format, Format], str] = {
    ("messages", "responses"): "a responses answer cites only web pages (url_citation), and this citation has no URL",
    ("messages", "chat"): "a chat completions answer has no place for anthropic's citations",
    ("responses", "messages"): "a messages answer has no place for openai's annotations",
    ("responses", "chat"): "a chat completions answer has no place for openai responses' annotations",
}

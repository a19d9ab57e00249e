"""OpenAI Responses streams for callers: typed events with a sequence number, response.completed last."""

from __future__ import annotations

from typing import Any

from handlers.errors import ApiError
from handlers.inference.canonical import (
    Answer,
    Dialect,
    ItemDone,
    ItemProgress,
    ItemStart,
    Request,
    TextDelta,
    TextEnd,
    Thinking,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallStart,
)
from handlers.inference.formats.citations import url_citation
from handlers.inference.formats.common import StreamState, sse
from handlers.inference.formats.reasoning import carry
from handlers.inference.formats.responses.answer import (
    ANSWERING,
    call,
    keeps_thinking,
    message,
    message_id,
    part,
    reasoning,
    reasoning_id,
    refusal_part,
    response,
    summary,
)

_DELTAS = {"output_text": "response.output_text.delta", "refusal": "response.refusal.delta"}


class StreamRenderer(StreamState):
    """One output item is open at a time: a reasoning item, a message (its parts, output_text or refusal, one at a
    time) or a function call, each added, filled and done in turn; an item of a responses upstream we do not model
    is added and done whole; response.completed comes last, with the output as a whole answer would have it."""

    def __init__(self, answer: Answer, request: Request) -> None:
        super().__init__()
        self._answer = answer
        self._request = request
        self._seq = 0
        self._output: list[dict[str, Any]] = []  # every item added, updated in place until it is done
        self._open: dict[str, Any] | None = None  # the open item, always the last of _output
        self._pieces: list[str] = []  # the open message part's text, or the open reasoning item's summary
        self._part: str | None = None  # the open message part's type (output_text, refusal), None when none is
        self._annotations: list[dict[str, Any]] = []  # the open output_text part's
        self._citing: list[tuple[dict[str, Any], int]] = []  # Anthropic's web citations of the text block streaming
        self._calls: dict[int, tuple[int, dict[str, Any]]] = {}  # canonical index -> (output index, item)
        self._thought: str | None = None  # the open reasoning item's id when OpenAI made it (it may come back)
        self._signed = ""  # the open reasoning item's Anthropic signature so far, or Gemini's thought signature
        self._signer: Dialect = "messages"  # whose it is
        self._keep = keeps_thinking(request)  # Anthropic's thinking comes with the token that takes it back
        self._relayed: dict[str, int] = {}  # the upstream's items we do not model, by id -> their output index

    def start(self) -> bytes:
        created = {"response": response(self._answer, [], None, None, self._request)}
        return self._frame("response.created", created) + self._frame("response.in_progress", created)

    def finish(self) -> bytes:
        out = self._close()
        if not any(item["type"] in ANSWERING for item in self._output):  # an empty message, so output_text is ""
            out += self._open_message() + self._open_part("output_text") + self._close()
        done = response(self._answer, self._output, self.reason, self.usage, self._request)
        return out + self._frame("response.completed", {"response": done})

    def error(self, err: ApiError) -> bytes:
        # The flat fields are the Responses error event; the nested "error" object is what makes the SDK raise.
        body = {"code": err.code, "message": err.message, "param": err.param, "error": err.body()["error"]}
        return self._frame("error", body)

    def on_text(self, ev: TextDelta) -> bytes:
        if ev.citation is not None:
            return self._cite(ev.citation)
        if not ev.text and ev.annotation is None:
            return b""
        kind = "refusal" if ev.refusal else "output_text"
        out = b""
        if self._open is None or self._open["type"] != "message":
            out = self._close() + self._open_message()
        if self._part != kind:
            out += self._close_part() + self._open_part(kind)
        if ev.annotation is not None:
            return out + self._annotate(ev.annotation)
        self._pieces.append(ev.text)
        at = {**self._at(), "content_index": self._index()}
        return out + self._frame(_DELTAS[kind], at | ({"logprobs": []} if kind == "output_text" else {}) |
                                 {"delta": ev.text})

    def _cite(self, citation: dict[str, Any]) -> bytes:
        """An Anthropic citation of the text block that follows: a web page's becomes a url_citation annotation of
        that text when it ends (the relay reports the others as left out)."""
        if url_citation(citation, 0, 0) is None:
            return b""
        out = b""
        if self._open is None or self._open["type"] != "message":
            out = self._close() + self._open_message()
        if self._part != "output_text":
            out += self._close_part() + self._open_part("output_text")
        self._citing.append((citation, len("".join(self._pieces))))
        return out

    def on_text_end(self, ev: TextEnd) -> bytes:
        if not self._citing or self._part != "output_text":
            return b""
        end, citing, self._citing = len("".join(self._pieces)), self._citing, []
        return b"".join(self._annotate(url_citation(c, start, end) or {}) for c, start in citing)

    def _annotate(self, annotation: dict[str, Any]) -> bytes:
        self._annotations.append(annotation)
        at = {**self._at(), "content_index": self._index(), "annotation_index": len(self._annotations) - 1}
        return self._frame("response.output_text.annotation.added", {**at, "annotation": annotation})

    def on_item_start(self, ev: ItemStart) -> bytes:
        """A responses upstream's item we do not model (web_search_call ...) opens; its events and its done follow
        (another format's item is left out: the relay reports it)."""
        if ev.block.format != "responses":
            return b""
        out = self._close()
        item = self._add(dict(ev.block.data))
        self._open = None  # never the open item: its own events fill it
        self._relayed[str(item.get("id"))] = index = len(self._output) - 1
        return out + self._frame("response.output_item.added", {"output_index": index, "item": item})

    def on_item_progress(self, ev: ItemProgress) -> bytes:
        index = self._relayed.get(str(ev.data.get("item_id"))) if ev.format == "responses" else None
        if index is None:  # an event of an item that never opened here: its done brings it whole
            return b""
        fields = {k: v for k, v in ev.data.items() if k != "type"}
        return self._frame(str(ev.data.get("type")), {**fields, "output_index": index})

    def on_item(self, ev: ItemDone) -> bytes:
        if ev.block.format != "responses":
            return b""
        index = self._relayed.get(str(ev.block.data.get("id")))
        out = b""
        if index is None:  # done without its added: added and done at once
            out = self.on_item_start(ItemStart(ev.block))
            index = len(self._output) - 1
        self._output[index] = ev.block.data
        return out + self._frame("response.output_item.done", {"output_index": index, "item": ev.block.data})

    def on_thinking(self, ev: ThinkingDelta) -> bytes:
        """Thinking is a reasoning item whose summary streams; OpenAI's own (format "responses") keeps its id and
        encrypted content, which the caller sends back in input. A new id starts a new item, and so does Anthropic's
        thinking after a signature (which ends its block) or redacted (a block of its own)."""
        if ev.redacted is not None:
            return self._redacted(ev)
        if not ev.text and ev.format == "gemini" and not self._keep:
            return b""  # Gemini's signature alone, for a caller who keeps no reasoning: nothing to show
        out = b""
        own = ev.id if ev.format == "responses" else None
        if (self._open is None or self._open["type"] != "reasoning" or (own is not None and own != self._thought)
                or (self._signed and ev.signature is None)):
            out = self._close() + self._open_reasoning(own)
        assert self._open is not None
        if ev.encrypted is not None and self._thought is not None:
            self._open["encrypted_content"] = ev.encrypted
        if ev.signature and ev.format in ("messages", "gemini"):
            self._signed += ev.signature
            self._signer = ev.format
        if not ev.text:
            return out
        if not self._pieces:
            out += self._frame("response.reasoning_summary_part.added", {**self._at(), **_summary_at(summary(""))})
        self._pieces.append(ev.text)
        return out + self._frame("response.reasoning_summary_text.delta", {**self._at(), **_summary_at(delta=ev.text)})

    def _redacted(self, ev: ThinkingDelta) -> bytes:
        """Anthropic's redacted thinking: an item with no summary, for a caller who can send it back."""
        token = carry(Thinking("", redacted=ev.redacted, format=ev.format)) if self._keep else None
        if token is None:
            return b""
        out = self._close() + self._open_reasoning(None)
        assert self._open is not None
        self._open["encrypted_content"] = token
        return out + self._close()

    def on_call_start(self, ev: ToolCallStart) -> bytes:
        out = self._close()
        item = self._add(call(f"fc_{self._answer.decision_id}_{len(self._calls)}", ev, "", "in_progress"))
        self._calls[ev.index] = (len(self._output) - 1, item)
        return out + self._frame("response.output_item.added", {"output_index": len(self._output) - 1, "item": item})

    def on_call_delta(self, ev: ToolCallDelta) -> bytes:
        entry = self._calls.get(ev.index)
        if entry is None or not ev.arguments:
            return b""
        index, item = entry
        custom = item["type"] == "custom_tool_call"
        item["input" if custom else "arguments"] += ev.arguments
        kind = "response.custom_tool_call_input.delta" if custom else "response.function_call_arguments.delta"
        return self._frame(kind, {"item_id": item["id"], "output_index": index, "delta": ev.arguments})

    def _open_message(self) -> bytes:
        item = self._add({**message(message_id(self._answer, self._output), "", "in_progress"), "content": []})
        return self._frame("response.output_item.added", {"output_index": len(self._output) - 1, "item": item})

    def _open_part(self, kind: str) -> bytes:
        self._part, self._pieces, self._annotations, self._citing = kind, [], [], []
        empty = part("") if kind == "output_text" else refusal_part("")
        return self._frame("response.content_part.added", {**self._at(), "content_index": self._index(), "part": empty})

    def _close_part(self) -> bytes:
        """The open message part done: its whole text (or refusal), then the part itself, now in the item."""
        if self._part is None:
            return b""
        out = self.on_text_end(TextEnd())  # citations whose block did not say it ended
        assert self._open is not None
        at, text = {**self._at(), "content_index": self._index()}, "".join(self._pieces)
        if self._part == "refusal":
            done, out = refusal_part(text), out + self._frame("response.refusal.done", {**at, "refusal": text})
        else:
            done = part(text, self._annotations)
            out += self._frame("response.output_text.done", {**at, "text": text, "logprobs": []})
        self._open["content"].append(done)
        self._part, self._pieces = None, []
        return out + self._frame("response.content_part.done", {**at, "part": done})

    def _index(self) -> int:
        """The open message part's content index: the parts done before it."""
        assert self._open is not None
        return len(self._open["content"])

    def _open_reasoning(self, own: str | None) -> bytes:
        n = sum(1 for item in self._output if item["type"] == "reasoning")
        item = self._add(reasoning(own or reasoning_id(self._answer, n), "", None))
        self._thought = own
        return self._frame("response.output_item.added", {"output_index": len(self._output) - 1, "item": item})

    def _add(self, item: dict[str, Any]) -> dict[str, Any]:
        self._output.append(item)
        self._open = item
        self._pieces = []
        return item

    def _close(self) -> bytes:
        if self._open is None:
            return b""
        at, item = self._at(), self._open
        out = getattr(self, f"_done_{item['type']}")(at, item, "".join(self._pieces))
        self._open = None
        return out + self._frame("response.output_item.done", {"output_index": at["output_index"], "item": item})

    def _done_message(self, at: dict[str, Any], item: dict[str, Any], text: str) -> bytes:
        item["status"] = "completed"
        return self._close_part()

    def _done_function_call(self, at: dict[str, Any], item: dict[str, Any], text: str) -> bytes:
        item["status"] = "completed"
        return self._frame("response.function_call_arguments.done",
                           {**at, "arguments": item["arguments"], "name": item["name"]})  # fmt: skip

    def _done_custom_tool_call(self, at: dict[str, Any], item: dict[str, Any], text: str) -> bytes:
        item["status"] = "completed"
        return self._frame("response.custom_tool_call_input.done", {**at, "input": item["input"]})

    def _done_reasoning(self, at: dict[str, Any], item: dict[str, Any], text: str) -> bytes:
        signed, self._thought, self._signed = self._signed, None, ""
        token = carry(Thinking(text, signature=signed, format=self._signer)) if self._keep and signed else None
        if token is not None:
            item["encrypted_content"] = token
        if not text:
            return b""
        item["summary"] = [summary(text)]
        out = self._frame("response.reasoning_summary_text.done", {**at, **_summary_at(text=text)})
        return out + self._frame("response.reasoning_summary_part.done", {**at, **_summary_at(summary(text))})

    def _at(self) -> dict[str, Any]:
        """Where the open item is: its id and output index."""
        assert self._open is not None
        return {"item_id": self._open["id"], "output_index": len(self._output) - 1}

    def _frame(self, kind: str, data: dict[str, Any]) -> bytes:
        frame = sse({"type": kind, **data, "sequence_number": self._seq}, kind)
        self._seq += 1
        return frame


def _summary_at(summary_part: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    """The fields of a summary event: the one summary part every reasoning item here has, and the event's own."""
    return {"summary_index": 0, **({"part": summary_part} if summary_part is not None else {}), **fields}

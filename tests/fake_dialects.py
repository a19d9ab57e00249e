"""What the fake upstream answers, in each dialect's wire shapes: OpenAI Chat Completions, Anthropic Messages and
OpenAI Responses, whole, streamed and as errors, from one scripted Reply. Not product code."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

# (input, output, cached): prompt_tokens / cached_tokens, or input_tokens / cache_read; Anthropic takes an optional
# fourth member, cache writes (cache_creation_input_tokens, else 0).
Usage = tuple[int, int, int] | tuple[int, int, int, int]


@dataclass
class Reply:
    """One scripted answer. Fields left alone give the default answer."""

    text: str = "Hello from fake"
    # {"name", "arguments": JSON text, "id"?}; with "input" (free-form text) instead of arguments, a custom tool's
    # call: a custom_tool_call in the Responses dialect, a function call of {"input": ...} in the others; or
    # "type": "custom": a custom tool's call whose input is "arguments", as text (chat and Responses; Anthropic has
    # none); Responses only: "namespace".
    tool_calls: list[dict[str, str]] = field(default_factory=list)
    finish: str | None = None  # the provider's own word; default stop / end_turn, or tool_calls / tool_use
    usage: Usage | None = None  # default: counted from the words
    status: int = 200
    error: str | None = None  # the message of an error body, or of the mid-stream error event (fail_after)
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before answering
    chunk_delay: float = 0.0  # seconds between stream chunks
    malformed: bool = False  # a body (or, streaming, a second chunk) that is not JSON
    body: dict[str, Any] | None = None  # a whole answer: this JSON object instead of the dialect's own
    cut_after: int | None = None  # streaming: close the connection after this many chunks, with no terminator
    fail_after: int | None = None  # streaming: after this many chunks send the provider's error event and end
    model: str | None = None  # default: the model asked for
    # Responses: a reasoning item with these summary parts (and encrypted content). Chat: reasoning_content, the parts
    # joined by a blank line. Anthropic: one thinking block of the parts so joined, signed with `signature`.
    reasoning: list[str] | None = None
    signature: str = "sig-fake"  # Anthropic: the thinking block's signature (no signature_delta when empty)
    refusal: str | None = None  # Responses: a refusal part after the text (streamed as refusal deltas); chat: refusal
    # Responses only: output items before the message as they are (web_search_call ...), streamed as added, their
    # progress events (response.<type>.in_progress, .searching or .generating ..., .completed) and done
    items: list[dict[str, Any]] = field(default_factory=list)
    annotations: list[dict[str, Any]] = field(default_factory=list)  # Responses: the output text's (url_citation ...)
    # Anthropic only: content blocks after the thinking and before the text, as they are (server_tool_use,
    # web_search_tool_result, text with citations ...); streamed as Anthropic does: a block with an input starts
    # empty and gets it in input_json_delta pieces, a text block's citations come as citations_delta before its text,
    # any other block starts whole
    blocks: list[dict[str, Any]] = field(default_factory=list)
    # Anthropic: usage fields of its own (service_tier, server_tool_use ...), in the whole answer's usage and
    # message_start's; server_tool_use also in message_delta's.
    native_usage: dict[str, Any] = field(default_factory=dict)
    # Azure (tests/fake_azure.py): the content filter's category; with status 400 it refuses the prompt, with finish
    # "content_filter" it cut the completion
    filtered: str | None = None



def default_usage(body: dict[str, Any], reply: Reply) -> Usage:
    prompt = len(re.findall(r"\w+", orjson.dumps(body.get("messages") or body.get("input") or []).decode()))
    return prompt, len(reply.text.split()) + 12 * len(reply.tool_calls), 0


def _pieces(text: str) -> list[str]:
    """Word-sized pieces ("Hello ", "from ", "fake"), as models stream."""
    return re.findall(r"\S+\s*|\s+", text)


def _thought(reply: Reply) -> str | None:
    """The reasoning as one text (chat's reasoning_content, an Anthropic thinking block), or None when unset."""
    return None if reply.reasoning is None else "\n\n".join(reply.reasoning)


def _arg_pieces(arguments: str) -> list[str]:
    return [arguments[i : i + 8] for i in range(0, len(arguments), 8)]


def _calls(reply: Reply, prefix: str) -> list[tuple[str, str, str]]:
    """(id, name, arguments); a custom tool's call as the function of one `input` the gateway offers it as."""
    return [(c.get("id") or f"{prefix}{i}", c["name"], _arguments(c)) for i, c in enumerate(reply.tool_calls)]


def _arguments(call: dict[str, str]) -> str:
    return orjson.dumps({"input": call["input"]}).decode() if "input" in call else call.get("arguments") or "{}"


def _sse(payload: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + orjson.dumps(payload) + b"\n\n"


def _error_type(status: int) -> str:
    return _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


_ERROR_TYPES = {401: "authentication_error", 403: "permission_error", 404: "not_found_error", 429: "rate_limit_error"}
_ERROR_TYPES |= {529: "overloaded_error"}


# --- OpenAI Chat Completions --------------------------------------------------------------------------------------


def _chat_usage(usage: Usage, reply: Reply) -> dict[str, Any]:
    prompt, completion, cached = usage[:3]
    reasoning = sum(len(part.split()) for part in reply.reasoning or [])
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": reasoning, "audio_tokens": 0},
    }


def _chat_call(reply: Reply, index: int, call_id: str, name: str, arguments: str) -> dict[str, Any]:
    if reply.tool_calls[index].get("type") == "custom":
        return {"id": call_id, "type": "custom", "custom": {"name": name, "input": arguments}}
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _chat_whole(reply: Reply, model: str, usage: Usage) -> dict[str, Any]:
    calls = [_chat_call(reply, n, *call) for n, call in enumerate(_calls(reply, "call_"))]
    message = {
        "role": "assistant",
        "content": reply.text or None,
        **({"reasoning_content": thought} if (thought := _thought(reply)) is not None else {}),
        "refusal": reply.refusal,
        **({"tool_calls": calls} if calls else {}),
    }
    finish = reply.finish or ("tool_calls" if calls else "stop")
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": _chat_usage(usage, reply),
        "system_fingerprint": "fp_fake",
    }


def _chat_stream(reply: Reply, model: str, usage: Usage | None) -> list[bytes]:
    head = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
    head |= {"system_fingerprint": "fp_fake", **({"usage": None} if usage else {})}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": "" if reply.text else None, "refusal": None})]
    out += [chunk({"reasoning_content": piece}) for piece in _pieces(_thought(reply) or "")]
    out += [chunk({"content": piece}) for piece in _pieces(reply.text)]
    out += [chunk({"refusal": piece}) for piece in _pieces(reply.refusal or "")]
    for index, (call_id, name, arguments) in enumerate(_calls(reply, "call_")):
        start = {"index": index, **_chat_call(reply, index, call_id, name, "")}
        out.append(chunk({"tool_calls": [start]}))
        field_, key = ("custom", "input") if start["type"] == "custom" else ("function", "arguments")
        out += [chunk({"tool_calls": [{"index": index, field_: {key: p}}]}) for p in _arg_pieces(arguments)]
    out.append(chunk({}, reply.finish or ("tool_calls" if reply.tool_calls else "stop")))
    if usage:
        out.append({**head, "choices": [], "usage": _chat_usage(usage, reply)})
    return [_sse(c) for c in out] + [b"data: [DONE]\n\n", _sse(_chat_error(reply))]


def _chat_error(reply: Reply) -> dict[str, Any]:
    error_type = "server_error" if reply.status == 200 else _error_type(reply.status)
    message = reply.error or f"fake error {reply.status}"
    return {"error": {"message": message, "type": error_type, "param": None, "code": None}}


# --- Anthropic Messages -------------------------------------------------------------------------------------------


def _messages_usage(usage: Usage, reply: Reply, output: int | None = None) -> dict[str, Any]:
    tokens, completion, cached = usage[:3]
    return {
        "input_tokens": tokens,
        "cache_creation_input_tokens": usage[3] if len(usage) > 3 else 0,
        "cache_read_input_tokens": cached,
        "output_tokens": completion if output is None else output,
        **reply.native_usage,
    }


def _messages_blocks(reply: Reply) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if (thought := _thought(reply)) is not None:
        blocks.append({"type": "thinking", "thinking": thought, "signature": reply.signature})
    blocks += reply.blocks
    if reply.text:
        blocks.append({"type": "text", "text": reply.text})
    for call_id, name, arguments in _calls(reply, "toolu_fake"):
        blocks.append({"type": "tool_use", "id": call_id, "name": name, "input": orjson.loads(arguments)})
    return blocks


def _messages_whole(reply: Reply, model: str, usage: Usage) -> dict[str, Any]:
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _messages_blocks(reply),
        "stop_reason": reply.finish or ("tool_use" if reply.tool_calls else "end_turn"),
        "stop_sequence": None,
        "usage": _messages_usage(usage, reply),
    }


def _messages_stream(reply: Reply, model: str, usage: Usage | None) -> list[bytes]:
    usage = usage or (0, 0, 0)
    whole = _messages_whole(reply, model, usage)
    message = {**whole, "content": [], "stop_reason": None, "usage": _messages_usage(usage, reply, output=1)}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": message}]
    for index, block in enumerate(whole["content"]):
        deltas = _block_deltas(block)
        start = {**block, **_empty_start(block)}  # as it opens: nothing in it yet
        events.append({"type": "content_block_start", "index": index, "content_block": start})
        events += [{"type": "content_block_delta", "index": index, "delta": delta} for delta in deltas]
        events.append({"type": "content_block_stop", "index": index})
    events.insert(min(2, len(events)), {"type": "ping"})
    delta = {"stop_reason": whole["stop_reason"], "stop_sequence": None}
    tools_used = {k: v for k, v in reply.native_usage.items() if k == "server_tool_use"}
    events.append({"type": "message_delta", "delta": delta, "usage": {"output_tokens": usage[1], **tools_used}})
    events.append({"type": "message_stop"})
    return [_sse(e, e["type"]) for e in events] + [_sse(messages_error(reply), "error")]


_EMPTY_START: dict[str, dict[str, Any]] = {"text": {"text": ""}, "thinking": {"thinking": "", "signature": ""}}


def _empty_start(block: dict[str, Any]) -> dict[str, Any]:
    if block["type"] == "text":
        return {"text": "", **({"citations": []} if "citations" in block else {})}
    return _EMPTY_START.get(block["type"], {"input": {}} if "input" in block else {})


def _block_deltas(block: dict[str, Any]) -> list[dict[str, Any]]:
    if block["type"] == "text":
        cited = [{"type": "citations_delta", "citation": citation} for citation in block.get("citations") or []]
        return cited + [{"type": "text_delta", "text": piece} for piece in _pieces(block["text"])]
    if block["type"] == "thinking":  # the thinking in pieces, then the whole signature just before the block stops
        deltas = [{"type": "thinking_delta", "thinking": piece} for piece in _pieces(block["thinking"])]
        return deltas + ([{"type": "signature_delta", "signature": block["signature"]}] if block["signature"] else [])
    if "input" not in block:
        return []
    arguments = orjson.dumps(block["input"]).decode()
    return [{"type": "input_json_delta", "partial_json": p} for p in ["", *_arg_pieces(arguments)]]


def messages_error(reply: Reply) -> dict[str, Any]:
    error_type = "overloaded_error" if reply.status == 200 else _error_type(reply.status)
    message = reply.error or f"fake error {reply.status}"
    return {"type": "error", "error": {"type": error_type, "message": message}, "request_id": "req_fake"}


# --- OpenAI Responses -----------------------------------------------------------------------------------------------


def _responses_usage(usage: Usage, reply: Reply) -> dict[str, Any]:
    tokens, completion, cached = usage[:3]
    return {
        "input_tokens": tokens,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": usage[3] if len(usage) > 3 else 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": sum(len(part.split()) for part in reply.reasoning or [])},
        "total_tokens": tokens + completion,
    }


def _responses_items(reply: Reply) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if reply.reasoning is not None:
        summary = [{"type": "summary_text", "text": text} for text in reply.reasoning]
        items.append({"id": "rs_fake", "type": "reasoning", "summary": summary, "encrypted_content": "gAAAA-fake"})
    items += reply.items
    parts: list[dict[str, Any]] = []
    if reply.text:
        parts.append({"type": "output_text", "text": reply.text, "annotations": reply.annotations, "logprobs": []})
    if reply.refusal is not None:
        parts.append({"type": "refusal", "refusal": reply.refusal})
    if parts:
        items.append({"id": "msg_fake", "type": "message", "status": "completed", "role": "assistant", "content": parts})
    for i, (call_id, name, arguments) in enumerate(_calls(reply, "call_")):
        given = reply.tool_calls[i]
        custom = "input" in given or given.get("type") == "custom"
        call = {"id": f"{'ctc' if custom else 'fc'}_fake{i}", "type": "custom_tool_call" if custom else "function_call",
                "status": "completed", "call_id": call_id, "name": name}
        call |= {"namespace": given["namespace"]} if given.get("namespace") else {}
        text = given.get("input", given.get("arguments", "")) if custom else arguments
        items.append({**call, "input" if custom else "arguments": text})
    return items


def _responses_whole(reply: Reply, model: str, usage: Usage) -> dict[str, Any]:
    """A Response object. `finish` is an incomplete_details reason (max_output_tokens, content_filter); none (or
    "completed") is a completed response."""
    done = reply.finish in (None, "completed")
    return {
        "id": "resp_fake", "object": "response", "created_at": int(time.time()), "model": model,
        "status": "completed" if done else "incomplete", "background": False, "error": None,
        "incomplete_details": None if done else {"reason": reply.finish},
        "instructions": None, "max_output_tokens": None, "metadata": {}, "output": _responses_items(reply),
        "parallel_tool_calls": True, "previous_response_id": None, "reasoning": {"effort": None, "summary": None},
        "store": False, "temperature": 1.0, "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": "auto", "tools": [], "top_p": 1.0, "truncation": "disabled",
        "usage": _responses_usage(usage, reply),
    }  # fmt: skip


def _responses_stream(reply: Reply, model: str, usage: Usage | None) -> list[bytes]:
    whole = _responses_whole(reply, model, usage or (0, 0, 0))
    start = {**whole, "status": "in_progress", "incomplete_details": None, "output": [], "usage": None}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": start},
        {"type": "response.in_progress", "response": start},
    ]
    for index, item in enumerate(whole["output"]):
        events += _responses_item_events(index, item)
    events.append({"type": f"response.{whole['status']}", "response": whole})
    events = [{**event, "sequence_number": n} for n, event in enumerate(events)]
    failed = {**start, "status": "failed", "error": {"code": "server_error", "message": reply.error or "fake error"}}
    events.append({"type": "response.failed", "response": failed, "sequence_number": len(events)})
    return [_sse(event, event["type"]) for event in events]


def _responses_item_events(index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
    """An output item's events: added (empty), its deltas and their done events, then done (whole)."""
    at = {"item_id": item["id"], "output_index": index}
    added = {**item, **_ADDED.get(item["type"], {})}
    events = [{"type": "response.output_item.added", "output_index": index, "item": added}]
    events += _ITEM_EVENTS.get(item["type"], _progress)(at, item)
    return [*events, {"type": "response.output_item.done", "output_index": index, "item": item}]


_ADDED: dict[str, dict[str, Any]] = {  # what an item is as it opens: nothing in it yet
    "reasoning": {"summary": []},
    "message": {"status": "in_progress", "content": []},
    "function_call": {"status": "in_progress", "arguments": ""},
    "custom_tool_call": {"status": "in_progress", "input": ""},
    "web_search_call": {"status": "in_progress"},
}


def _reasoning_events(at: dict[str, Any], item: dict[str, Any]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for n, part in enumerate(item["summary"]):
        summary = {**at, "summary_index": n}
        events.append({"type": "response.reasoning_summary_part.added", **summary, "part": {**part, "text": ""}})
        events += [{"type": "response.reasoning_summary_text.delta", **summary, "delta": piece}
                   for piece in _pieces(part["text"])]  # fmt: skip
        events.append({"type": "response.reasoning_summary_text.done", **summary, "text": part["text"]})
        events.append({"type": "response.reasoning_summary_part.done", **summary, "part": part})
    return events


def _message_events(at: dict[str, Any], item: dict[str, Any]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for n, part in enumerate(item["content"]):
        where = {**at, "content_index": n}
        if part["type"] == "refusal":
            events.append({"type": "response.content_part.added", **where, "part": {**part, "refusal": ""}})
            events += [{"type": "response.refusal.delta", **where, "delta": piece}
                       for piece in _pieces(part["refusal"])]  # fmt: skip
            events.append({"type": "response.refusal.done", **where, "refusal": part["refusal"]})
        else:
            events.append({"type": "response.content_part.added", **where,
                           "part": {**part, "text": "", "annotations": []}})  # fmt: skip
            events += [{"type": "response.output_text.delta", **where, "delta": piece, "logprobs": []}
                       for piece in _pieces(part["text"])]  # fmt: skip
            events += [{"type": "response.output_text.annotation.added", **where, "annotation_index": i,
                        "annotation": annotation} for i, annotation in enumerate(part["annotations"])]  # fmt: skip
            events.append({"type": "response.output_text.done", **where, "text": part["text"], "logprobs": []})
        events.append({"type": "response.content_part.done", **where, "part": part})
    return events


def _call_events(at: dict[str, Any], item: dict[str, Any]) -> list[dict[str, Any]]:
    if item["type"] == "custom_tool_call":
        events = [{"type": "response.custom_tool_call_input.delta", **at, "delta": piece}
                  for piece in _arg_pieces(item["input"])]  # fmt: skip
        return [*events, {"type": "response.custom_tool_call_input.done", **at, "input": item["input"]}]
    events = [{"type": "response.function_call_arguments.delta", **at, "delta": piece}
              for piece in _arg_pieces(item["arguments"])]  # fmt: skip
    return [*events, {"type": "response.function_call_arguments.done", **at, "arguments": item["arguments"],
                      "name": item["name"]}]  # fmt: skip


def _progress(at: dict[str, Any], item: dict[str, Any]) -> list[dict[str, Any]]:
    """A built-in tool's call: response.<type>.in_progress, its working event, .completed."""
    working = {"web_search_call": "searching", "file_search_call": "searching", "image_generation_call": "generating",
               "code_interpreter_call": "interpreting"}.get(item["type"])  # fmt: skip
    steps = ["in_progress", *([working] if working else []), "completed"]
    return [{"type": f"response.{item['type']}.{step}", **at} for step in steps]


_ITEM_EVENTS: dict[str, Callable[[dict[str, Any], dict[str, Any]], list[dict[str, Any]]]] = {
    "reasoning": _reasoning_events,
    "message": _message_events,
    "function_call": _call_events,
    "custom_tool_call": _call_events,
}


WHOLE: dict[str, Callable[[Reply, str, Usage], dict[str, Any]]] = {
    "chat": _chat_whole,
    "messages": _messages_whole,
    "responses": _responses_whole,
}
STREAMS: dict[str, Callable[[Reply, str, Usage | None], list[bytes]]] = {
    "chat": _chat_stream,
    "messages": _messages_stream,
    "responses": _responses_stream,
}
ERRORS: dict[str, Callable[[Reply], dict[str, Any]]] = {
    "chat": _chat_error,
    "messages": messages_error,
    "responses": _chat_error,  # OpenAI's one error body
}

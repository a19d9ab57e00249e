"""OpenAI Responses answers for callers: the Response object, and the output items the stream shares with it."""

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
    ToolCallStart,
    Unknown,
    Usage,
)
from handlers.inference.formats.citations import url_citation
from handlers.inference.formats.reasoning import carry
from handlers.inference.formats.responses.vocabulary import ENCRYPTED, STATUSES, VOCABULARY, render_usage


def render(result: Result, answer: Answer, request: Request) -> dict[str, Any]:
    """The response object, echoing the request's settings as OpenAI does (instructions, temperature, tools...).

    Output items follow the content's order: reasoning, then the text (one message per run of text and refusals),
    function calls, and the items of a responses upstream we do not model, as it sent them. Without text or calls the
    output is one empty message, so output_text is ""."""
    output: list[dict[str, Any]] = []
    last: Block | None = None  # the last block that made or extended an item
    keep = keeps_thinking(request)
    for block in result.content:
        if isinstance(block, Text) and isinstance(last, Text):
            add_text(output[-1]["content"], block)
        elif (item := _item(block, answer, output, keep)) is not None:
            output.append(item)
        else:
            continue
        last = block
    if not any(item["type"] in ANSWERING for item in output):
        output.append(message(message_id(answer, output), "", "completed"))
    return response(answer, output, result.finish_reason, result.usage, request)


def add_text(parts: list[dict[str, Any]], block: Text) -> None:
    """Text after text in one message: the same part, or a part of its own for a refusal after text (or text after a
    refusal) and for text with annotations (their indexes count from the start of their part)."""
    kind, field = ("refusal", "refusal") if block.refusal else ("output_text", "text")
    last = parts[-1] if parts else None
    if last is not None and last["type"] == kind and not block.annotations:
        start = len(last[field])
        last[field] += block.text
    else:
        start, last = 0, refusal_part(block.text) if block.refusal else part(block.text, block.annotations)
        parts.append(last)
    cited = [a for c in block.citations or [] if (a := url_citation(c, start, start + len(block.text)))]
    if cited and kind == "output_text":  # Anthropic's web citations of the block's text (formats/citations.py)
        last["annotations"] = [*last["annotations"], *cited]


def keeps_thinking(request: Request) -> bool:
    """Whether the caller asked for reasoning it can send back (include reasoning.encrypted_content): then an
    Anthropic upstream's thinking comes with the gateway's token of its signature (formats/reasoning.py)."""
    include = request.body.get("include")
    return isinstance(include, list) and ENCRYPTED in include


def _item(block: Block, answer: Answer, output: list[dict[str, Any]], keep: bool) -> dict[str, Any] | None:
    if isinstance(block, Text) and (block.text or block.annotations):
        item = message(message_id(answer, output), "", "completed") | {"content": []}
        add_text(item["content"], block)
        return item
    if isinstance(block, ToolCall):
        n = sum(1 for item in output if item["type"] in CALLS)
        return call(f"fc_{answer.decision_id}_{n}", block, block.arguments, "completed")
    if isinstance(block, Thinking):
        return _reasoning_item(block, answer, output, keep)
    if isinstance(block, Unknown) and block.format == "responses":
        return block.data
    return None  # another format's own blocks have no place here (the relay says so)


def _reasoning_item(block: Thinking, answer: Answer, output: list[dict[str, Any]], keep: bool
                    ) -> dict[str, Any] | None:
    """OpenAI's own reasoning with its id and encrypted content; Anthropic's with the token that takes it back when
    the caller keeps reasoning (a redacted block then is an item with no summary); anyone's as its summary."""
    own = block.format == "responses"
    token = carry(block) if keep else None
    if not (block.text or own or token):
        return None
    n = sum(1 for item in output if item["type"] == "reasoning")
    item_id = block.id if own and block.id else reasoning_id(answer, n)
    return reasoning(item_id, block.text, block.encrypted if own else token)


def response(
    answer: Answer,
    output: list[dict[str, Any]],
    reason: FinishReason | None,
    usage: Usage | None,
    request: Request,
) -> dict[str, Any]:
    """The Response object with every field the SDK's type requires; reason None means still in progress."""
    status, incomplete = ("in_progress", None) if reason is None else STATUSES[reason]
    body: dict[str, Any] = {
        "id": VOCABULARY.id_prefix + answer.decision_id,
        "object": "response",
        "created_at": answer.created,
        "status": status,
        "error": None,
        "incomplete_details": incomplete,
        "instructions": None,
        "max_output_tokens": None,
        "metadata": {},
        "model": answer.model,
        "output": output,
        "output_text": "".join(
            part["text"] for item in output if item["type"] == "message" for part in item["content"]
            if part["type"] == "output_text"
        ),
        "parallel_tool_calls": True,
        "temperature": None,
        "tool_choice": "auto",
        "tools": [],
        "top_p": None,
        "text": {"format": {"type": "text"}},
    }
    if usage is not None:  # OpenAI's schema has no null usage: an answer in progress has none yet
        body["usage"] = render_usage(usage)
    return body | _echo(request)


def _echo(request: Request) -> dict[str, Any]:
    echo: dict[str, Any] = {
        "instructions": request.instructions,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "max_output_tokens": request.max_tokens,
    }
    if request.format == "responses":  # tools and tool_choice of another format would not fit the Response type
        echo |= {key: request.body[key] for key in _ECHOED if request.body.get(key) is not None}
        echo["tools"] = [echo_tool(tool.raw) for tool in request.tools or []]
        echo["text"] = _text_echo(request.body.get("text"))
        choice = request.tool_choice
        if choice is not None and choice.raw is not None:
            echo["tool_choice"] = choice.raw
        if choice is not None and choice.parallel is not None:
            echo["parallel_tool_calls"] = choice.parallel
    return echo


# The request's fields a Response object repeats as they were sent.
_ECHOED = ("metadata", "reasoning", "max_tool_calls", "truncation", "user", "safety_identifier", "prompt_cache_key",
           "top_logprobs")


def echo_tool(raw: Any) -> Any:
    """A tool as the caller wrote it, with the fields OpenAI's schema requires of an answer's tool and the caller may
    leave out: a function's strict and parameters (null: not said), in a namespace too."""
    if not isinstance(raw, dict):
        return raw
    kind = raw.get("type")
    if kind == "function":
        return {"strict": None, "parameters": None} | raw
    if kind == "namespace" and isinstance(raw.get("tools"), list):
        return raw | {"tools": [echo_tool(member) for member in raw["tools"]]}
    return raw


def _text_echo(sent: Any) -> dict[str, Any]:
    """The request's text settings as sent (format {type: text} when it set none): clients read structured output
    by the format echoed."""
    sent = {key: value for key, value in sent.items() if value is not None} if isinstance(sent, dict) else {}
    return {"format": {"type": "text"}} | sent


CALLS = frozenset({"function_call", "custom_tool_call"})
ANSWERING = CALLS | {"message"}  # an output with none of these gets an empty message, so output_text is ""


# --- output items ---------------------------------------------------------------------------------------------------


def message_id(answer: Answer, output: list[dict[str, Any]]) -> str:
    n = sum(1 for item in output if item["type"] == "message")
    return f"msg_{answer.decision_id}" + (f"_{n}" if n else "")


def reasoning_id(answer: Answer, n: int) -> str:
    return f"rs_{answer.decision_id}" + (f"_{n}" if n else "")


def message(item_id: str, text: str, status: str) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": [part(text)]}


def part(text: str, annotations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": annotations or [], "logprobs": []}


def refusal_part(text: str) -> dict[str, Any]:
    return {"type": "refusal", "refusal": text}


def call(item_id: str, block: ToolCall | ToolCallStart, arguments: str, status: str) -> dict[str, Any]:
    """A function_call item, or a custom_tool_call item (its input is the free-form text), in its namespace."""
    item = {"id": item_id, "type": "custom_tool_call" if block.custom else "function_call", "status": status,
            "call_id": block.id, "name": block.name, "input" if block.custom else "arguments": arguments}
    return item | ({"namespace": block.namespace} if block.namespace else {})


def reasoning(item_id: str, text: str, encrypted: str | None) -> dict[str, Any]:
    """A reasoning item: the thinking as one summary part; encrypted content when it can go back to its provider in
    input (OpenAI's own, or the gateway's token of Anthropic's thinking)."""
    item: dict[str, Any] = {"id": item_id, "type": "reasoning", "summary": [summary(text)] if text else []}
    if encrypted is not None:
        item["encrypted_content"] = encrypted
    return item


def summary(text: str) -> dict[str, Any]:
    return {"type": "summary_text", "text": text}

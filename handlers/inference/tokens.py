"""Token estimates, for what must be known before an upstream answers: worst-case cost, context fit, tokens/min.

An estimate, not a tokenizer: about four characters a token, rounded up, plus a few tokens a message. Records
that had to rely on it (an upstream that reported no usage) say so.
"""

from __future__ import annotations

import math

from handlers.inference.canonical import Message, Request, Text, ToolCall, ToolResult

_PER_MESSAGE = 4
_CHARS_PER_TOKEN = 4
DEFAULT_MAX_OUTPUT = 4096  # the worst case assumed when a request sets no max tokens


def text_tokens(text: str) -> int:
    return math.ceil(len(text) / _CHARS_PER_TOKEN)


def _message_chars(message: Message) -> int:
    chars = 0
    for block in message.content:
        if isinstance(block, Text):
            chars += len(block.text)
        elif isinstance(block, ToolCall):
            chars += len(block.name) + len(block.arguments)
        elif isinstance(block, ToolResult):
            chars += len(block.content)
    return chars


def input_tokens(req: Request) -> int:
    chars = len(req.system or "") + sum(_message_chars(m) for m in req.messages)
    return math.ceil(chars / _CHARS_PER_TOKEN) + _PER_MESSAGE * (len(req.messages) + (1 if req.system else 0))


def max_output_tokens(req: Request) -> int:
    return req.max_tokens or DEFAULT_MAX_OUTPUT

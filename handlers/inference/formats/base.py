"""What a wire format is: one module that speaks it in both directions.

As the caller's format it parses the request body into the canonical Request and renders the canonical answer (whole
or streamed) back. As an upstream's format it renders the canonical Request into that upstream's body and reads the
upstream's answer and stream events back into canonical. An upstream kind is then a transport plus one format.

Each format package (chat, messages, responses) has the same modules: request (the caller's body into canonical),
answer and stream (canonical into the caller's JSON and events), upstream (canonical into the upstream's body),
reader (the upstream's answer and events into canonical) and vocabulary (the format's words: id prefix, stop reasons,
tool-choice words, usage, and its field rules read from the spec). The package satisfies WireFormat with its
module-level names, and FORMATS holds the three by name.

A format no caller speaks (Bedrock's Converse) is only the upstream half: upstream, reader and vocabulary, satisfying
UpstreamFormat. UPSTREAM_FORMATS holds every format an upstream kind may speak: the callers' three and those.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from generated.config import ThinkingBudget, UpstreamSettings
from handlers.errors import ApiError
from handlers.inference.canonical import Answer, Dialect, Event, Format, Request, Result


@dataclass(frozen=True, slots=True)
class FieldRules:
    """How a format's request fields travel to an upstream of another format (the spec's x-translate marks, read by
    fields.rules). A declared field the Request does not model is Request.extra: carried where the upstream's format
    has a word for it, and refused by name elsewhere, unless it is advisory or set to its inert value."""

    modelled: frozenset[str]  # read into the canonical Request, or owned by the gateway (stream)
    advisory: frozenset[str]  # a hint or a label: another format may leave it out
    inert: Mapping[str, Any]  # with this value the field asks for nothing
    extra: frozenset[str]  # every declared field not modelled: Request.extra when sent ("reasoning.summary" inside)

    def droppable(self, field: str, value: Any) -> bool:
        """Whether an extra field may be left out for an upstream of another format."""
        return value is None or field in self.advisory or (field in self.inert and value == self.inert[field])


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """A format's own words for what every format has, as other modules need to say them."""

    name: Format
    kind: str  # the upstream kind that speaks it natively, as refusals name it
    id_prefix: str  # of an answer's id, before its decision id (chatcmpl-, msg_, resp_)
    output_field: str  # where its callers ask for structured output
    stop_field: str  # where its callers give stop sequences
    fields: FieldRules
    session_field: str | None = None  # the body field (dotted) by which its callers name a conversation, if any


class StreamRenderer(Protocol):
    """Renders canonical events as the caller's server-sent events: start, each event, then finish or error."""

    def start(self) -> bytes: ...

    def event(self, ev: Event) -> bytes: ...

    def finish(self) -> bytes: ...

    def error(self, err: ApiError) -> bytes: ...


class StreamRendererFactory(Protocol):
    def __call__(self, answer: Answer, request: Request) -> StreamRenderer: ...


class CallerFormat(Protocol):
    """A format as callers speak it."""

    def parse(self, body: Any) -> Request: ...

    def render(self, result: Result, answer: Answer, request: Request) -> dict[str, Any]: ...

    @property
    def StreamRenderer(self) -> StreamRendererFactory: ...


_UPSTREAM = UpstreamSettings.model_fields  # the configuration's defaults, never typed again here
_BUDGETS = ThinkingBudget()


@dataclass(frozen=True, slots=True)
class UpstreamOptions:
    """What an upstream's configuration changes in the body rendered for it."""

    default_max_tokens: int = _UPSTREAM["default_max_tokens"].default  # where max_tokens is required (Messages)
    passthrough: bool = _UPSTREAM["passthrough"].default  # a same-format caller's fields no format defines go too

    @classmethod
    def of(cls, settings: UpstreamSettings) -> UpstreamOptions:
        return cls(default_max_tokens=settings.default_max_tokens, passthrough=settings.passthrough)


@dataclass(frozen=True, slots=True)
class Traits:
    """What the catalog says of the model a body is rendered for."""

    reasoning: bool = False  # takes an effort (reasoning_effort, thinking, reasoning.effort); max_completion_tokens
    thinking_budgets: tuple[int, int, int] = (_BUDGETS.low, _BUDGETS.medium, _BUDGETS.high)  # for low, medium, high
    refuse_hosted: bool = False  # a hosted tool with no equivalent upstream is a 400 rather than left out


class UpstreamReader(Protocol):
    """Reads one upstream stream's server-sent events into canonical events; `done` once the stream's end came."""

    done: bool

    def read(self, event: str, data: str) -> list[Event]: ...


class UpstreamReaderFactory(Protocol):
    def __call__(self) -> UpstreamReader: ...


class UpstreamFormat(Protocol):
    """A format as an upstream speaks it."""

    STREAM_FIELDS: dict[str, Any]  # added to the body of a streamed request
    STREAM_END: str  # what ends a stream, for the message when a stream is cut before it

    def upstream_body(self, request: Request, model: str, options: UpstreamOptions, traits: Traits) -> dict[str, Any]:
        ...

    def upstream_result(self, payload: dict[str, Any]) -> Result: ...

    @property
    def UpstreamReader(self) -> UpstreamReaderFactory: ...


class WireFormat(CallerFormat, UpstreamFormat, Protocol):
    """A format package (chat, messages, responses): both directions, and its vocabulary."""

    VOCABULARY: Vocabulary


# Every format by its name, filled by handlers/inference/formats/__init__.py, which runs before any module of the
# formats is imported: so it is complete wherever it is read.
FORMATS: dict[Format, WireFormat] = {}
# Every format an upstream may speak (FORMATS, and the formats only upstreams speak), filled there too.
UPSTREAM_FORMATS: dict[Dialect, UpstreamFormat] = {}


class UpstreamFault(Exception):
    """An upstream's answer or stream event that is an error object (`payload`) or that cannot be read (`what`)."""

    def __init__(self, *, payload: dict[str, Any] | None = None, what: str | None = None) -> None:
        super().__init__(what or "error payload")
        self.payload = payload
        self.what = what

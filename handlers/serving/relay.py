"""Relay one canonical request (chat, messages, responses) through its plan's candidates, whole or streamed.

Before any upstream call: routing (with cooldowns and context windows), rate limits and the worst-case reservation.
Fallback happens only before the first byte reaches the caller; after that a failure is reported in-stream.
Streamed and whole answers are metered by the same code (handlers/serving/lifecycle.py).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable

import anyio
from starlette.responses import Response

from generated import errors as codes
from handlers import gateway
from handlers.administration.auth import Principal
from handlers.edge.responses import json_response
from handlers.errors import ApiError
from handlers.inference import affinity, routing, tokens
from handlers.inference.canonical import (
    Answer,
    Event,
    ItemDone,
    Request,
    Result,
    Text,
    TextDelta,
    Unknown,
    UsageReport,
)
from handlers.inference.catalog import Model
from handlers.inference.formats import citations
from handlers.inference.formats.base import CallerFormat, Traits
from handlers.inference.routing import Plan
from handlers.inference.upstreams.base import UpstreamError
from handlers.observability import metrics, requestlog
from handlers.serving import spend
from handlers.serving.event_stream import EventStream
from handlers.serving.lifecycle import Lifecycle, upstream_failure
from handlers.serving.runs import runs
from handlers.store.base import Key

log = logging.getLogger("specway.relay")
_SETTLE_TIMEOUT = 10.0  # seconds a cancelled stream may take to close its upstream and settle
_LOGGED_CHARS = 2000


async def planned(gw: gateway.Gateway, key: Key, req: Request, session: str | None = None,
                  max_cost: str | None = None) -> tuple[Lifecycle, int]:
    """The request's screened plan, and its input estimate: what relay() tries, and what a route preview shows.
    `session` and `max_cost` are the caller's x-specway-session and x-specway-max-cost headers."""
    header = spend.asked(max_cost)
    _, policy = routing.policy_of(gw.config.policies, gw.config.default_policy, key)
    plan = routing.decide(gw.catalog, gw.config.policies, gw.config.default_policy, key, req,
                          affinity.session_of(key.id, req, session), await spend.stepped_down(policy, key, gw.credits))
    estimate = tokens.input_tokens(req)  # once: the context check and the reservation both need it
    traits = traits_for(gw, plan)  # screening keeps the plan's policy
    life = await Lifecycle.screened(gw, plan, estimate + (req.max_tokens or 0),
                                    worst=(estimate, tokens.max_output_tokens(req)),
                                    ceiling=spend.ceiling(policy, header), request=req, traits=traits)
    return life, estimate


async def relay(principal: Principal, req: Request, wire: CallerFormat, session: str | None = None,
                max_cost: str | None = None) -> Response:
    gw = gateway.current()
    life, estimate = await planned(gw, principal.key, req, session, max_cost)
    traits = life.traits
    req.effort = life.plan.effort  # the tier word every format's renderer maps into its own vocabulary
    async with life.failing():
        models = life.runnable()
        life.hold = await gw.meter.admit(principal.key, models, req, estimate)
        if req.stream:
            return await _stream(life, req, wire, traits, estimate)
        result, model = await life.attempt(lambda up, m: up.complete(req, m.name, traits(m)))
    _report_items(life, req, result)
    await life.settle(model, result.usage, len(result.text()))
    _log_content(gw, req, result.text())
    answer = Answer(life.plan.id, model.id, int(time.time()), estimate)
    return json_response(wire.render(result, answer, req), headers=life.headers())


def _report_items(life: Lifecycle, req: Request, result: Result) -> None:
    uncited: Counter[citations.Whose] = Counter()
    for block in result.content:
        if isinstance(block, Unknown):
            _left_out(life, req, block)
        elif isinstance(block, Text):
            uncited.update(citations.uncarried(block, req.format))
    _citations_left_out(life, req, uncited)


def _citations_left_out(life: Lifecycle, req: Request, uncited: Counter[citations.Whose]) -> None:
    """Citations of the answer's text the caller's format has no place for: by type in left_out, counted, logged."""
    if not uncited:
        return
    said = citations.left_out(uncited, req.format)
    life.trace.left_out.extend(said)
    for (whose, kind), n in uncited.items():
        metrics.UNREAD.labels(whose, "citation", kind).inc(n)
    log.warning("left out of a %s answer: %s (decision %s)", req.format, "; ".join(said), life.plan.id)


def _left_out(life: Lifecycle, req: Request, block: Unknown) -> None:
    """An upstream's output item that canonical does not model reaches a caller of its own format as it is; the
    caller's format has no place for another format's: left out, and said so (the decision record, a warning, the
    specway_upstream_unread metric), never dropped unseen."""
    if block.format == req.format:
        return
    kind = block.data.get("type")
    kind = kind[:64] if isinstance(kind, str) else "unknown"
    life.trace.left_out.append(f"answer item {kind}: the {req.format} format has no place for {block.format}'s own")
    metrics.UNREAD.labels(block.format, "item", kind).inc()
    log.warning("left out of a %s answer: a %s item %s (decision %s)", req.format, block.format, kind, life.plan.id)


def traits_for(gw: gateway.Gateway, plan: Plan) -> Callable[[Model], Traits]:
    """What each candidate's body is rendered for: the catalog's word on the model, the policy's thinking budgets."""
    budget = gw.config.policies[plan.policy].thinking_budget
    budgets = (budget.low, budget.medium, budget.high)
    return lambda model: Traits(reasoning=model.reasoning, thinking_budgets=budgets, refuse_hosted=model.refuse_hosted)


def _log_content(gw: gateway.Gateway, req: Request, answer: str) -> None:
    """Only with server.log_content: the last user message and the answer, cut short."""
    if gw.config.server.log_content:
        prompt = next((m.text() for m in reversed(req.messages) if m.role == "user"), "")
        requestlog.add(prompt=prompt[:_LOGGED_CHARS], answer=answer[:_LOGGED_CHARS])


async def _first_event(events: AsyncIterator[Event]) -> tuple[Event | None, AsyncIterator[Event]]:
    """Wait for the stream's first event, so a refusal can still fall back (nothing has reached the caller)."""
    try:
        return await anext(events), events
    except StopAsyncIteration:
        return None, events
    except BaseException:
        await _close(events)
        raise


async def _close(events: AsyncIterator[Event]) -> None:
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        try:
            await aclose()
        except Exception:  # closing a failed stream must not hide the failure being reported
            log.debug("error while closing an upstream stream", exc_info=True)


async def _stream(life: Lifecycle, req: Request, wire: CallerFormat, traits: Callable[[Model], Traits],
                  estimate: int) -> Response:
    (first, events), model = await life.attempt(lambda up, m: _first_event(up.stream(req, m.name, traits(m))))
    plan, trace = life.plan, life.trace
    answer = Answer(plan.id, model.id, int(time.time()), estimate)
    renderer = wire.StreamRenderer(answer, req)

    chars = 0
    texts: list[str] = []
    uncited: Counter[citations.Whose] = Counter()

    def told(ev: Event) -> bytes:
        """What the caller gets of one event, after what the record keeps of it."""
        nonlocal chars
        if isinstance(ev, UsageReport):
            trace.usage = ev.usage
        elif isinstance(ev, TextDelta):
            chars += len(ev.text)
            if chars <= _LOGGED_CHARS:
                texts.append(ev.text)
            if ev.citation is not None or ev.annotation is not None:
                uncited.update(citations.uncarried(ev, req.format))
        elif isinstance(ev, ItemDone):
            _left_out(life, req, ev.block)
        return renderer.event(ev)

    async def body() -> AsyncIterator[bytes]:
        trace.outcome = "cancelled"  # until the stream ends one way or another
        try:
            # The first event goes out with the stream's start, in one write, the moment it was read.
            yield renderer.start() + (told(first) if first is not None else b"")
            metrics.child(metrics.FIRST_BYTE, plan.format, answer.model).observe(time.perf_counter() - trace.started)
            async with contextlib.aclosing(runs(events)) as batches:
                async for run in batches:  # the events in hand together, in one write
                    chunk = b"".join([told(ev) for ev in run])
                    if chunk:
                        yield chunk
            trace.outcome = "ok"
            yield renderer.finish()
        except UpstreamError as err:
            api = upstream_failure(err, model.upstream)
            trace.outcome = api.code
            yield renderer.error(api)
        except Exception:  # a fault of ours mid-stream still ends the stream with an error event, never a cut
            log.exception("stream failed")
            failed = ApiError(codes.INTERNAL_ERROR, "The gateway failed while streaming; it has been logged.")
            trace.outcome = failed.code
            yield renderer.error(failed)
        finally:
            # A client that went away cancels this generator; closing the upstream and settling must still run.
            with anyio.move_on_after(_SETTLE_TIMEOUT, shield=True):
                _citations_left_out(life, req, uncited)
                await _close(events)
                await life.settle(model, trace.usage, chars)
                _log_content(life.gw, req, "".join(texts))

    return EventStream(body(), headers=life.headers())

"""Decision records: rendered from a request's Plan and Trace when it ends, kept pending here and written off the hot
path in batches by the gateway's one writer, and flushed at shutdown (nothing is lost). A record whose cost was
settled into a lease is written by the ledger in the transaction that charges it (Recorder.paid), so spend, records
and usage agree whatever happens to the process."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from generated import errors as codes
from generated import models
from handlers.errors import StoreUnavailable, bad_request
from handlers.periodic import Periodic
from handlers.store.base import Outage, Store
from handlers.store.values import fmt_money

if TYPE_CHECKING:
    from handlers.inference.routing import Plan
    from handlers.inference.trace import Trace

_PRICES = tuple(f for f in models.DecisionPricing.model_fields if f != "sources")  # the spec's four prices
_PRUNE_EVERY = 3600.0
_BATCH = 200

log = logging.getLogger("specway.decisions")


def record(plan: Plan, trace: Trace, note: str = "", revision: str | None = None) -> models.Decision:
    """What GET /v1/route/explain returns for the request, as its generated model; `note` ends its explanation,
    `revision` is the configuration's (handlers/config.py revision). The writer stores `stored()`, the same fields."""
    made = stored(plan, trace, note, revision)
    pricing = made["pricing"]
    return models.Decision.model_construct(**{
        **made,
        "candidates": [models.DecisionCandidate.model_construct(**c) for c in made["candidates"]],
        "affinity": affinity_of(plan),
        "attempts": [models.DecisionAttempt.model_construct(**a) for a in made["attempts"]],
        "usage": None if made["usage"] is None else models.DecisionUsage.model_construct(**made["usage"]),
        "pricing": None if pricing is None else models.DecisionPricing.model_construct(
            **{**pricing, "sources": models.PriceSources(**pricing["sources"])}),
    })


def stored(plan: Plan, trace: Trace, note: str = "", revision: str | None = None) -> dict[str, Any]:
    """The record as it is stored: record()'s model_dump(), built as plain values (a record is made for every
    request, and no model is needed on the way to the store). Built when the request is over (Recorder.add): the
    Plan and the Trace are final then."""
    u = trace.usage
    return {
        "id": plan.id, "object": "route.decision", "created_at": plan.created.isoformat(), "key_id": plan.key.id,
        "workspace_id": plan.key.workspace_id, "format": plan.format, "requested_model": plan.requested,
        "effort": plan.effort, "policy": plan.policy, "stream": plan.stream,
        "candidates": [{"model": c.model.id, "upstream": c.model.upstream, "deployment": c.model.deployment,
                        "verdict": c.verdict, "reason": c.reason} for c in plan.candidates],
        "max_cost": max_cost_of(plan), "stepped_down": plan.stepped_down, "affinity": _affinity(plan),
        "attempts": [{"model": a.model, "upstream": a.upstream, "deployment": a.deployment, "retry": a.retry,
                      "status": a.status, "error": a.error, "latency_ms": a.latency_ms} for a in trace.attempts],
        "model": trace.answered.id if trace.answered else None,
        "usage": None if u is None else {
            "input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
            "cached_input_tokens": u.cached_input_tokens, "cache_write_tokens": u.cache_write_tokens,
            "reasoning_tokens": u.reasoning_tokens},
        "usage_estimated": trace.usage_estimated, "cost": trace.cost, "pricing": _pricing(trace),
        "outcome": trace.outcome, "explanation": explanation(plan, trace) + note, "config_revision": revision,
        "left_out": list(trace.left_out),
    }


def max_cost_of(plan: Plan) -> str | None:
    return None if plan.max_cost is None else fmt_money(plan.max_cost.amount)


def affinity_of(plan: Plan) -> models.DecisionAffinity | None:
    """How the plan's conversation was told apart, and whether affinity decided its deployment."""
    found = _affinity(plan)
    return None if found is None else models.DecisionAffinity.model_construct(**found)


def _affinity(plan: Plan) -> dict[str, Any] | None:
    if plan.session is None:
        return None
    chosen = next((c for c in plan.candidates if c.verdict == "chosen"), None)
    decided = plan.remembered is not None and chosen is not None and chosen.model.deployment == plan.remembered
    return {"source": plan.session.source, "deployment": plan.remembered, "decided": decided}


def _pricing(trace: Trace) -> dict[str, Any] | None:
    """The prices the answering model's cost was reckoned at (its tier's, for the request's length), and whence."""
    model = trace.answered
    if model is None or trace.cost is None:
        return None
    prices = model.prices_at((trace.usage.input_tokens or 0) if trace.usage else 0)
    return {**{f: str(p) for f, p in zip(_PRICES, prices, strict=True)}, "sources": model.sources_of(_PRICES)}


def explanation(plan: Plan, trace: Trace) -> str:
    if plan.refusal is not None:
        return f"Routing refused the request: {plan.why}"
    parts = [plan.why]
    first = plan.candidates[0] if plan.candidates else None
    if first is not None and first.verdict == "skipped":
        parts.append(f"It was skipped ({first.reason}).")
    retries = max((a.retry for a in trace.attempts), default=0)
    if retries:
        parts.append(f"Every candidate failed before answering, and the gateway retried {retries} "
                     f"time{'s' if retries > 1 else ''}.")
    if trace.answered is None:
        parts.append(f"No candidate answered (outcome: {trace.outcome}).")
    elif first is not None and trace.answered.id != first.model.id:
        failed = list(dict.fromkeys(a.model for a in trace.attempts if a.failure is not None))
        before = f"{', '.join(failed)} failed before answering, so " if failed else ""
        parts.append(f"{before}the fallback {trace.answered.id} answered.")
    return " ".join(parts)


def summary(stored: dict[str, Any]) -> models.DecisionSummary:
    """A stored record in brief, as GET /v1/route/decisions lists it."""
    outcome = stored.get("outcome") or "pending"
    code = codes.BY_NAME.get(outcome)
    attempts = stored.get("attempts") or []
    usage = stored.get("usage") or {}
    return models.DecisionSummary.model_construct(
        id=stored["id"], object="route.decision", created_at=stored["created_at"], key_id=stored.get("key_id"),
        workspace_id=stored.get("workspace_id"), format=stored.get("format"), stream=stored.get("stream", False),
        requested_model=stored.get("requested_model"), model=stored.get("model"), outcome=outcome,
        status=200 if outcome == "ok" else code.status if code else None, attempts=len(attempts),
        latency_ms=round(sum(a.get("latency_ms") or 0 for a in attempts), 3),
        input_tokens=usage.get("input_tokens"), output_tokens=usage.get("output_tokens"), cost=stored.get("cost"),
        config_revision=stored.get("config_revision"))


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def cursor_after(stored: dict[str, Any]) -> str:
    """Where the page that ends with this record leaves off: its time in microseconds since 1970, "~", its id."""
    at = datetime.fromisoformat(stored["created_at"])
    at = at if at.tzinfo else at.replace(tzinfo=UTC)
    return f"{(at - _EPOCH) // _MICROSECOND}~{stored['id']}"


def read_cursor(cursor: str) -> tuple[datetime, str]:
    """(created_at, id) from cursor_after's text; the spec's pattern has checked its shape (17 digits at most stay
    within datetime's range)."""
    micros, _, last = cursor.partition("~")
    if not micros.isdigit() or not last or len(micros) > 17:
        raise bad_request("cursor: not a cursor this operation gave.", param="cursor")
    return _EPOCH + int(micros) * _MICROSECOND, last


class Recorder:
    def __init__(self, store: Store, retention_days: float = 30, revision: str | None = None) -> None:
        self._store = store
        self._revision = revision
        self._retention = timedelta(days=retention_days)
        self._unpaid: dict[str, dict[str, Any]] = {}  # records the writer writes, by id
        # The records whose cost a lease holds, by lease: the ledger writes them with the lease's charge.
        self._paid: dict[object, dict[str, dict[str, Any]]] = {}
        self._paid_count = 0  # records in _paid
        self._uncounted: set[str] = set()  # pending records that are no inference (token counts): not in usage
        self._flushing = asyncio.Lock()
        self.wake = lambda: None  # the writer's, set by the gateway: a full batch is waiting
        self._pruner = Periodic(self.prune, _PRUNE_EVERY, "prune old decision records")
        self._outage = Outage("decision records", "they stay pending and are retried", log)

    def add(self, plan: Plan, trace: Trace, *, note: str = "", counted: bool = True,
            revision: str | None = None) -> None:
        """A request is over: its record is made now (~6 µs) and written by the writer (or with its lease's charge).
        `revision` is the configuration's it was routed by (a reload may have swapped another in since; the
        recorder's own is the default). Made by the writer, a batch's records held the loop for 1-2 ms in slices,
        which the requests of the moment waited for: a p99 at one connection twice what it is without records
        (bench/README.md, "Garbage")."""
        made = stored(plan, trace, note, revision or self._revision)
        if trace.paid_by is not None:
            paid = self._paid.setdefault(trace.paid_by, {})
            self._paid_count += plan.id not in paid
            paid[plan.id] = made
        else:
            self._unpaid[plan.id] = made
        if not counted:
            self._uncounted.add(plan.id)
        if self.unwritten() >= _BATCH:
            self.wake()

    async def get(self, decision_id: str) -> dict[str, Any] | None:
        """A record as its JSON is (or will be) stored, whether still pending here or already in the store."""
        pending = self._unpaid.get(decision_id) or next(
            (paid[decision_id] for paid in self._paid.values() if decision_id in paid), None)
        return pending if pending is not None else await self._store.get_decision(decision_id)

    def start(self) -> None:
        self._pruner.start()

    async def stop(self) -> None:
        await self._pruner.stop()

    def unwritten(self) -> int:
        return len(self._unpaid) + self._paid_count

    def paid(self, lease: object) -> list[dict[str, Any]]:
        """The pending records whose cost `lease` holds: its sync writes them with that charge."""
        return list(self._paid.get(lease, {}).values())

    def written(self, lease: object, ids: list[str]) -> None:
        """A sync of `lease` wrote these records of it."""
        paid = self._paid.get(lease, {})
        for i in ids:
            self._paid_count -= paid.pop(i, None) is not None
            self._uncounted.discard(i)
        if not paid:
            self._paid.pop(lease, None)

    async def flush(self, between: Callable[[], Awaitable[None]] | None = None) -> None:
        """Write what is pending. While the store is away (StoreUnavailable) everything stays pending and is
        retried at the next flush, with one warning per outage rather than one per flush. One flush at a time;
        `between` runs between two batches (the writer's more urgent work)."""
        async with self._flushing:
            await self._flush(between)

    async def _flush(self, between: Callable[[], Awaitable[None]] | None) -> None:
        """What was pending when it began, in batches. Records of requests that end meanwhile wait for the next
        flush: a writer that went on until nothing was pending never stopped under load, and wrote batches of a
        few dozen records, each a transaction of its own."""
        unpaid = list(self._unpaid.values())  # a lease's are the ledger's
        for start in range(0, len(unpaid), _BATCH):
            if start and between is not None:
                await between()
            if not await self._write(unpaid[start:start + _BATCH]):
                return

    async def _write(self, batch: list[dict[str, Any]]) -> bool:
        """One batch; False when the store is away (it stays pending)."""
        try:
            await self._store.save_decisions(batch, self._uncounted_of(batch))
        except StoreUnavailable as away:
            self._outage.down(away.reason)
            return False
        except Exception:
            if not await self._one_by_one(batch):
                raise  # the store is away: everything stays pending and is retried
        self._outage.up()
        for written in batch:
            self._unpaid.pop(written["id"], None)
            self._uncounted.discard(written["id"])
        return True

    def _uncounted_of(self, batch: list[dict[str, Any]]) -> frozenset[str]:
        return frozenset(r["id"] for r in batch if r["id"] in self._uncounted) if self._uncounted else frozenset()

    async def _one_by_one(self, batch: list[dict[str, Any]]) -> bool:
        """A batch failed: write its records alone, so that one the store refuses cannot hold back the rest.
        A record is given up only when others were written in the same pass (the store is there; it refuses
        that record); False when none could be written."""
        refused = []
        for one in batch:
            try:
                await self._store.save_decisions([one], self._uncounted_of([one]))
            except StoreUnavailable:
                return False  # gone meanwhile: the batch stays pending, no record is judged refused
            except Exception:  # noqa: BLE001 - which failure it was is logged below, with the record's id
                refused.append(one)
        if len(refused) == len(batch):
            return False
        for one in refused:
            log.error("the store refused decision record %s; it is dropped", one["id"])
        return True

    async def prune(self) -> int:
        return await self._store.prune_decisions(datetime.now(UTC) - self._retention)

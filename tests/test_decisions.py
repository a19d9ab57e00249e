"""Decision records: the generated Decision built on every request's way out, and the recorder's batched writes that
one refused record cannot hold back, and that a store outage keeps."""

from __future__ import annotations

import asyncio
import re
import time
import warnings
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from generated import models
from handlers.inference.canonical import Usage
from handlers.inference.catalog import Model
from handlers.inference.routing import Candidate, Plan, new_decision_id
from handlers.inference.trace import Attempt, Trace
from handlers.observability import decisions
from handlers.observability.decisions import Recorder
from handlers.store import SQLiteStore
from handlers.store.base import Key
from tests.store_support import NOW


def made(decision_id: str) -> tuple[Plan, Trace]:
    """What a request leaves the recorder: its plan and its trace, from which the writer makes the record."""
    return Plan(decision_id, KEY, "chat", None, None, "default", False, "why", created=NOW), Trace()


def stored(decision_id: str) -> dict[str, object]:
    return decisions.record(*made(decision_id)).model_dump()


class RefusingStore(SQLiteStore):
    """A store that refuses the record named "refused" (as a store refuses one it cannot take), alone or in a batch."""

    async def save_decisions(self, records: list[dict[str, Any]], uncounted: frozenset[str] = frozenset()) -> None:
        if any(r["id"] == "refused" for r in records):
            raise ValueError("refused")
        await super().save_decisions(records, uncounted)


async def test_a_refused_record_is_dropped_and_the_rest_written(tmp_path: Path) -> None:
    store = RefusingStore(str(tmp_path / "s.db"))
    await store.open()
    recorder = Recorder(store)
    recorder.add(*made("a"))
    recorder.add(*made("refused"))
    recorder.add(*made("b"))
    await recorder.flush()
    assert await store.get_decision("a") == stored("a") and await store.get_decision("b") == stored("b")
    assert await recorder.get("refused") is None
    await store.close()


async def test_everything_stays_pending_while_the_store_is_away(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "s.db"))
    recorder = Recorder(store)  # the store is not open: every write fails
    recorder.add(*made("a"))
    recorder.add(*made("b"))
    with pytest.raises(RuntimeError):
        await recorder.flush()
    assert await recorder.get("a") == stored("a")
    await store.open()
    await recorder.flush()
    assert await store.get_decision("a") == stored("a") and await store.get_decision("b") == stored("b")
    await store.close()


class BusyStore(SQLiteStore):
    """A store that takes a while to write, during which more requests end (their records are added)."""

    recorder: Recorder
    arriving = 0
    late = 0

    async def save_decisions(self, records: list[dict[str, Any]], uncounted: frozenset[str] = frozenset()) -> None:
        for _ in range(self.arriving):
            self.recorder.add(*made(f"late{self.late}"))
            self.late += 1
        await super().save_decisions(records, uncounted)


async def test_a_flush_writes_what_was_pending_when_it_began(tmp_path: Path) -> None:
    """Under load a writer that went on until nothing was pending never stopped (and wrote batches of a few dozen
    records, a transaction each): the records of requests that end during a flush wait for the next one."""
    store = BusyStore(str(tmp_path / "s.db"))
    await store.open()
    try:
        recorder = store.recorder = Recorder(store)
        for i in range(450):
            recorder.add(*made(f"r{i}"))
        store.arriving = 30  # every batch written, 30 more requests end
        await asyncio.wait_for(recorder.flush(), 30)  # three batches of 200, 200 and 50
        assert recorder.unwritten() == 90
        for i in (0, 199, 200, 449):
            assert await store.get_decision(f"r{i}") == stored(f"r{i}")
        store.arriving = 0
        await recorder.flush()
        assert recorder.unwritten() == 0
        for i in (0, 89):
            assert await store.get_decision(f"late{i}") == stored(f"late{i}")
    finally:
        await store.close()


def test_decision_ids_begin_with_the_time_and_stay_unguessable() -> None:
    """32 hex digits as before; those made later sort after (the store's index grows at its end); 80 random bits."""
    made: list[str] = []
    for _ in range(20):
        made.append(new_decision_id())
        time.sleep(0.002)
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in made) and made == sorted(made)
    now_ms = time.time_ns() // 1_000_000
    assert now_ms - 1000 < int(made[-1][:12], 16) <= now_ms
    assert len({new_decision_id()[12:] for _ in range(10_000)}) == 10_000


# --- the record ----------------------------------------------------------------------------------------------------

KEY = Key("key_1", "ws_1", "k", "sk-sw-ab", ("inference",), None, None, None, NOW, None, None)
STRONG = Model("acme/strong", "oa", "gpt", (), Decimal(1), Decimal(2), None, "acme", "Strong")
FAST = Model("acme/fast", "an", "claude", (), Decimal(1), Decimal(2), None, "acme", "Fast")


def _plan_and_trace(usage: Usage | None) -> tuple[Plan, Trace]:
    plan = Plan("3a55", KEY, "chat", "acme/strong", "high", "default", True, "The request named acme/strong.",
                (Candidate(STRONG, "chosen", "named by the request"), Candidate(FAST, "fallback", "the policy's")),
                created=NOW)
    trace = Trace([Attempt("acme/strong", "oa", "oa/gpt", 503, "status", "overloaded", 12.5),
                   Attempt("acme/fast", "an", "an/claude", 200, None, None, 81.0)], FAST, "ok", usage, False,
                  "0.000123")
    return plan, trace


def test_the_record_is_the_decision_the_spec_describes_and_its_json_is_unchanged() -> None:
    plan, trace = _plan_and_trace(Usage(1200, 300, 800, 0))
    made = decisions.record(plan, trace, revision="0123456789ab")
    assert isinstance(made, models.Decision)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # pydantic warns when a value does not serialise as its field's type
        dumped = made.model_dump()
    assert models.Decision.model_validate(dumped).model_dump() == dumped  # what was built without validation is valid
    assert list(dumped) == list(models.Decision.model_fields)  # every field given, in the spec's order
    assert dumped == {
        "id": "3a55", "object": "route.decision", "created_at": NOW.isoformat(), "key_id": "key_1",
        "workspace_id": "ws_1", "format": "chat", "requested_model": "acme/strong", "effort": "high",
        "policy": "default", "stream": True,
        "candidates": [{"model": "acme/strong", "upstream": "oa", "deployment": "oa/gpt", "verdict": "chosen",
                        "reason": "named by the request"},
                       {"model": "acme/fast", "upstream": "an", "deployment": "an/claude", "verdict": "fallback",
                        "reason": "the policy's"}],
        "max_cost": None, "stepped_down": None, "affinity": None,
        "attempts": [{"model": "acme/strong", "upstream": "oa", "deployment": "oa/gpt", "retry": 0, "status": 503,
                      "error": "status: overloaded", "latency_ms": 12.5},
                     {"model": "acme/fast", "upstream": "an", "deployment": "an/claude", "retry": 0, "status": 200,
                      "error": None,
                      "latency_ms": 81.0}],
        "model": "acme/fast",
        "usage": {"input_tokens": 1200, "output_tokens": 300, "cached_input_tokens": 800, "cache_write_tokens": 0,
                  "reasoning_tokens": None},
        "usage_estimated": False, "cost": "0.000123", "outcome": "ok",
        "pricing": {"input_per_million": "1", "output_per_million": "2", "cached_input_per_million": "1",
                    "cache_write_per_million": "1",
                    "sources": dict.fromkeys(("input_per_million", "output_per_million", "cached_input_per_million",
                                              "cache_write_per_million"), "default")},
        "explanation": "The request named acme/strong. acme/strong failed before answering, so the fallback acme/fast "
                       "answered.",
        "config_revision": "0123456789ab", "left_out": [],
    }
    # Each object is what model_construct makes of the same values (its __dict__, fields set, extra, private).
    for built in (made, made.candidates[0], made.attempts[0], made.usage):
        assert built is not None
        same = type(built).model_construct(**dict(built.__dict__))
        assert built == same and built.model_fields_set == same.model_fields_set


def test_a_record_without_usage_and_one_with_a_note() -> None:
    plan, trace = _plan_and_trace(None)
    made = decisions.record(plan, trace, " Counted only.")  # as a token count's lifecycle notes it
    assert made.explanation.endswith("answered. Counted only.") and made.model_dump()["usage"] is None


async def test_a_pending_record_reads_back_as_it_will_be_stored(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "s.db"))
    await store.open()
    recorder = Recorder(store, revision="0123456789ab")
    plan, trace = _plan_and_trace(Usage(5, 6))
    made = decisions.record(plan, trace, revision="0123456789ab")
    recorder.add(plan, trace)
    pending = await recorder.get("3a55")
    await recorder.flush()
    assert pending == await store.get_decision("3a55") == await recorder.get("3a55") == made.model_dump()
    await store.close()

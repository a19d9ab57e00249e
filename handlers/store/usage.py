"""Hourly usage rollups: what the decision writer adds to `usage_hourly` as it writes decision records, and how
GET /v1/usage reads them back. A record is counted once, when it is first written (a record written again, by a
retried batch, is not counted twice); records of token counts are not inference and are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from .values import as_time, listed_model

GROUP = ("hour", "workspace_id", "key_id", "model", "upstream")  # the table's dimensions, the primary key but one
COUNTS = ("requests", "errors", "input_tokens", "output_tokens", "cached_input_tokens", "cache_write_tokens",
          "reasoning_tokens")
COLUMNS = (*GROUP, *COUNTS, "cost")
UPSERT = (
    f"INSERT INTO usage_hourly ({', '.join(COLUMNS)}) VALUES ({', '.join(f'${i}' for i in range(1, len(COLUMNS) + 1))})"
    f" ON CONFLICT (hour, key_id, model, upstream) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in (*COUNTS, "cost"))
)


@dataclass(slots=True)
class Counts:
    requests: int = 0
    errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    cost: Decimal = field(default_factory=Decimal)

    def add(self, other: Counts) -> None:  # field by field: a loop over fields() cost 1.7 µs a record, this 0.4
        self.requests += other.requests
        self.errors += other.errors
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cached_input_tokens += other.cached_input_tokens
        self.cache_write_tokens += other.cache_write_tokens
        self.reasoning_tokens += other.reasoning_tokens
        self.cost += other.cost


Group = tuple[datetime, str, str, str, str]  # GROUP's values


def of_record(record: dict[str, Any]) -> tuple[Group, Counts] | None:
    """Where a decision record counts and what; None for one that carries no key (never written by the relay)."""
    created = as_time(record.get("created_at"))
    if created is None or not record.get("key_id"):
        return None
    attempts = record.get("attempts") or []
    group = (created.replace(minute=0, second=0, microsecond=0), record.get("workspace_id") or "", record["key_id"],
             listed_model(record), (attempts[-1].get("upstream") or "")
             if attempts else "")
    usage = record.get("usage") or {}
    counts = Counts(1, 0 if record.get("outcome") == "ok" else 1, usage.get("input_tokens") or 0,
                    usage.get("output_tokens") or 0, usage.get("cached_input_tokens") or 0,
                    usage.get("cache_write_tokens") or 0, usage.get("reasoning_tokens") or 0,
                    Decimal(record.get("cost") or 0))
    return group, counts


def of_row(row: Any) -> tuple[Group, Counts]:
    group = (as_time(row["hour"]), row["workspace_id"], row["key_id"], row["model"], row["upstream"])
    counts = Counts(*(int(row[c]) for c in COUNTS), Decimal(row["cost"]))
    return group, counts  # type: ignore[return-value]  # hour is NOT NULL


def row_values(group: Group, counts: Counts) -> tuple[Any, ...]:
    return (*group, *(getattr(counts, c) for c in COUNTS), counts.cost)

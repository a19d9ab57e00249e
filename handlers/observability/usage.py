"""GET /v1/usage's answer, from the hourly rollups: one row per bucket (hour or UTC day) and group, and the totals."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from handlers.store.usage import Counts, Group

DIMENSIONS = {"workspace": 1, "key": 2, "model": 3, "upstream": 4}  # group_by word -> index in a rollup's Group
_FIELD = {"workspace": "workspace_id", "key": "key_id", "model": "model", "upstream": "upstream"}
MAX_RANGE = timedelta(days=366)


def hour_floor(at: datetime) -> datetime:
    return at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def hour_ceil(at: datetime) -> datetime:
    floor = hour_floor(at)
    if floor == at.astimezone(UTC):
        return floor
    try:
        return floor + timedelta(hours=1)
    except OverflowError:  # the last hour there is
        return floor


def _bucket(hour: datetime, bucket: str) -> datetime:
    return hour.replace(hour=0) if bucket == "day" else hour


def _counts(c: Counts) -> dict[str, Any]:
    return {"requests": c.requests, "errors": c.errors, "input_tokens": c.input_tokens,
            "output_tokens": c.output_tokens, "cached_input_tokens": c.cached_input_tokens,
            "cache_write_tokens": c.cache_write_tokens, "cost": str(c.cost)}


def report(rows: list[tuple[Group, Counts]], start: datetime, end: datetime, bucket: str,
           group_by: list[str]) -> dict[str, Any]:
    grouped: dict[tuple[Any, ...], Counts] = {}
    totals = Counts()
    for group, counts in rows:
        key = (_bucket(group[0], bucket), *(group[DIMENSIONS[d]] for d in group_by))
        grouped.setdefault(key, Counts()).add(counts)
        totals.add(counts)
    data = []
    for key in sorted(grouped):
        row: dict[str, Any] = {"start": key[0].isoformat()}
        row.update({_FIELD[d]: value for d, value in zip(group_by, key[1:], strict=True)})
        data.append(row | _counts(grouped[key]))
    return {"object": "usage", "start": start.isoformat(), "end": end.isoformat(), "bucket": bucket,
            "group_by": group_by, "data": data, "totals": _counts(totals)}

"""GET /v1/usage's answer, from the hourly rollups: one row per bucket (hour or UTC day) and group, and the totals."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from handlers.errors import bad_request
from handlers.store.usage import Counts, Group
from handlers.store.values import money_text

DIMENSIONS = {"workspace": 1, "key": 2, "model": 3, "upstream": 4}  # group_by word -> index in a rollup's Group
_FIELD = {"workspace": "workspace_id", "key": "key_id", "model": "model", "upstream": "upstream"}
MAX_RANGE = timedelta(days=366)
_LEAP = re.compile(r"(T\d\d:\d\d):60")


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
            "cache_write_tokens": c.cache_write_tokens, "reasoning_tokens": c.reasoning_tokens,
            "cost": money_text(c.cost)}


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
        row.update({_FIELD[d]: value or None for d, value in zip(group_by, key[1:], strict=True)})  # "": none
        data.append(row | _counts(grouped[key]))
    return {"object": "usage", "start": start.isoformat(), "end": end.isoformat(), "bucket": bucket,
            "group_by": group_by, "data": data, "totals": _counts(totals)}


def parse_time(name: str, value: str | None) -> datetime | None:
    """A query parameter's ISO 8601 time, in UTC (naive: UTC already); one past datetime's range once in UTC
    (0001-01-01T00:00:00+01:00) is its first or last instant."""
    if value is None:
        return None
    try:  # RFC 3339 allows a leap second, which datetime does not: it counts in its minute
        at = datetime.fromisoformat(_LEAP.sub(r"\1:59", value))
    except ValueError:
        raise bad_request(f"{name}: not an ISO 8601 date and time: {value!r}.", param=name) from None
    if at.tzinfo is None:
        return at.replace(tzinfo=UTC)
    try:
        return at.astimezone(UTC)
    except OverflowError:
        return (datetime.min if at.year == 1 else datetime.max).replace(tzinfo=UTC)


def _range(start: datetime | None, end: datetime | None) -> tuple[datetime, datetime]:
    """[since, until) in whole hours: `end` rounded up (default now), `start` rounded down (default a day before
    `end`), at most MAX_RANGE long (cut at its start), never inverted (an inverted range is an empty one)."""
    until = hour_ceil(end or datetime.now(UTC))
    earliest = _minus(until, MAX_RANGE)
    since = hour_floor(start) if start is not None else _minus(until, timedelta(hours=24))
    return min(max(since, earliest), until), until


def _minus(at: datetime, delta: timedelta) -> datetime:
    try:
        return at - delta
    except OverflowError:
        return datetime.min.replace(tzinfo=UTC)


def time_range(start: str | None, end: str | None) -> tuple[datetime, datetime]:
    return _range(parse_time("start", start), parse_time("end", end))


def dimensions(group_by: str | None) -> list[str]:
    """The group_by words in order; one named twice counts once. An unknown one is a 400 (the spec says so too)."""
    dims = list(dict.fromkeys(d.strip() for d in (group_by or "").split(",") if d.strip()))
    for d in dims:
        if d not in DIMENSIONS:
            raise bad_request(f"group_by: {d!r} is not one of {', '.join(DIMENSIONS)}.", param="group_by")
    return dims

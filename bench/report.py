"""Samples -> one row per (scenario, connections, gateway), with the direct baseline beside it; table and JSON."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.load import SCENARIOS, CellResult

CEILING = "httpx-ceiling"  # every row's req/s and added p50 are also given as a ratio to this one's
_ORDER = {"specway": 0, "specway-pg": 0, "baseline": 1, "litellm": 2, "httpx-ceiling": 3, "aiohttp-ceiling": 4}


def _rank(target: str) -> float:
    """A row's place in its cell: a gateway's free-request row ("specway:json") right before its own."""
    name, preload, _ = target.partition(":")
    return _ORDER.get(name, 5) - (0.5 if preload else 0)


@dataclass
class Sample:
    target: str  # direct | specway | specway-pg | baseline | litellm | httpx-ceiling | aiohttp-ceiling
    scenario: str
    conns: int
    cell: CellResult
    cpu_s: float  # CPU seconds the target's process tree used during the cell
    rss_mb: float  # its resident memory right after the cell


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def _summary(samples: list[Sample]) -> dict[str, Any]:
    """Medians over the repeats of one (target, scenario, conns)."""
    requests = sum(s.cell.requests for s in samples)
    seconds = sum(s.cell.seconds for s in samples)
    return {
        "rps": _median([s.cell.rps for s in samples]),
        "p50_ms": _median([s.cell.p50_ms for s in samples]),
        "p90_ms": _median([s.cell.p90_ms for s in samples]),
        "p99_ms": _median([s.cell.p99_ms for s in samples]),
        "first_ms": _median([s.cell.first_p50_ms for s in samples if s.cell.first_p50_ms is not None]) or None,
        "requests": requests,
        "errors": sum(s.cell.errors for s in samples),
        "cpu_ms_per_req": 1000 * sum(s.cpu_s for s in samples) / requests if requests else None,
        "cores": sum(s.cpu_s for s in samples) / seconds if seconds else None,
        "rss_mb": samples[-1].rss_mb,
        "repeats": len(samples),
    }


def rows(samples: list[Sample]) -> list[dict[str, Any]]:
    """One row per gateway cell (ceilings included), with the direct cell of the same scenario and connections
    beside it, and the ratios: to direct, to the httpx ceiling, Specway's to the row, and priced (or translated) to
    the same gateway's free JSON loaded in the same cell ("specway:json", see load.plan)."""
    groups: dict[tuple[str, str, int], list[Sample]] = {}
    for s in samples:
        groups.setdefault((s.target, s.scenario, s.conns), []).append(s)
    summary = {k: _summary(v) for k, v in groups.items()}
    out = []
    for (target, scenario, conns), row in sorted(summary.items(),
                                                 key=lambda kv: (list(SCENARIOS).index(kv[0][1])
                                                                 if kv[0][1] in SCENARIOS else len(SCENARIOS),
                                                                 kv[0][1], kv[0][2], _rank(kv[0][0]),
                                                                 kv[0][0])):
        if target == "direct":
            continue
        direct = summary.get(("direct", scenario, conns))
        row = {"scenario": scenario, "conns": conns, "target": target, **row}
        if direct:
            row["direct_rps"] = direct["rps"]
            row["direct_p50_ms"] = direct["p50_ms"]
            row["direct_p99_ms"] = direct["p99_ms"]
            row["added_p50_ms"] = row["p50_ms"] - direct["p50_ms"]
            if row["first_ms"] is not None and direct["first_ms"] is not None:
                row["direct_first_ms"] = direct["first_ms"]
                row["added_first_ms"] = row["first_ms"] - direct["first_ms"]
            row["x_direct"] = row["rps"] / direct["rps"] if direct["rps"] else None
        ceiling = summary.get((CEILING, scenario, conns))
        if ceiling and ceiling["rps"]:
            row["x_ceiling"] = row["rps"] / ceiling["rps"]
            if direct and ceiling["p50_ms"] > direct["p50_ms"]:
                row["added_p50_x_ceiling"] = row["added_p50_ms"] / (ceiling["p50_ms"] - direct["p50_ms"])
        specway = summary.get(("specway", scenario, conns)) or summary.get(("specway-pg", scenario, conns))
        if not target.startswith("specway") and specway and row["rps"]:
            row["specway_over_peer"] = specway["rps"] / row["rps"]  # how many times Specway's throughput
            if row["cpu_ms_per_req"] and specway["cpu_ms_per_req"]:
                row["specway_cpu_over_peer"] = specway["cpu_ms_per_req"] / row["cpu_ms_per_req"]
        vs = SCENARIOS[scenario].vs if scenario in SCENARIOS else None
        free = summary.get((f"{target}:{vs}", scenario, conns)) if vs else None
        if free and free["rps"]:
            row["x_free"] = row["rps"] / free["rps"]  # priced (or translated) / free JSON, same gateway, same cell
        out.append(row)
    return out


_COLUMNS = [  # header, key, format
    ("scenario", "scenario", "{}"),
    ("conns", "conns", "{}"),
    ("gateway", "target", "{}"),
    ("req/s", "rps", "{:.0f}"),
    ("direct req/s", "direct_rps", "{:.0f}"),
    ("p50 ms", "p50_ms", "{:.2f}"),
    ("p99 ms", "p99_ms", "{:.2f}"),
    ("direct p50", "direct_p50_ms", "{:.2f}"),
    ("added p50 ms", "added_p50_ms", "{:+.2f}"),
    ("1st event ms", "first_ms", "{:.2f}"),
    ("added 1st ms", "added_first_ms", "{:+.2f}"),
    ("gw/direct", "x_direct", "{:.3f}"),
    ("x httpx ceiling", "x_ceiling", "{:.2f}"),
    ("added p50 x ceiling", "added_p50_x_ceiling", "{:.2f}"),
    ("x free json", "x_free", "{:.2f}"),
    ("CPU ms/req", "cpu_ms_per_req", "{:.2f}"),
    ("cores", "cores", "{:.2f}"),
    ("RSS MB", "rss_mb", "{:.0f}"),
    ("errors", "errors", "{}"),
    ("Specway/row req/s", "specway_over_peer", "x{:.2f}"),
    ("Specway/row CPU", "specway_cpu_over_peer", "x{:.2f}"),
]


def table(rows_: list[dict[str, Any]]) -> str:
    cells = [[h for h, _, _ in _COLUMNS]]
    for r in rows_:
        cells.append([fmt.format(r[k]) if r.get(k) is not None else "-" for _, k, fmt in _COLUMNS])
    widths = [max(len(c[i]) for c in cells) for i in range(len(_COLUMNS))]
    lines = ["  ".join(c.rjust(w) if i > 2 else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
             for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write_json(path: Path, meta: dict[str, Any], rows_: list[dict[str, Any]], samples: list[Sample]) -> None:
    raw = [{"target": s.target, "scenario": s.scenario, "conns": s.conns, "rps": s.cell.rps, "requests": s.cell.requests,
            "errors": s.cell.errors, "seconds": s.cell.seconds, "p50_ms": s.cell.p50_ms, "p90_ms": s.cell.p90_ms,
            "p99_ms": s.cell.p99_ms, "first_p50_ms": s.cell.first_p50_ms, "cpu_s": s.cpu_s, "rss_mb": s.rss_mb} for s in samples]
    path.write_text(json.dumps({"meta": meta, "rows": rows_, "samples": raw}, indent=2) + "\n")

"""The `specway keys`, `workspaces`, `usage` and `audit` commands' options (handlers/cli/actions.py does them).

Only the standard library and the spec's scope names are imported here: `specway --help` builds these parsers.
"""

from __future__ import annotations

import argparse
from typing import Any

from generated.scopes import DEFAULT_SCOPES, SCOPES


class StoreUnreachable(Exception):
    """The configured store cannot be opened; the message names it (never its password)."""


class Unreachable(Exception):
    """A dependency the configuration names cannot be reached; startup stops with this message."""


CLEAR = "none"  # an option's value that removes a setting: null in the API
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> int:
    """Whole seconds from `90s`, `30m`, `24h`, `7d` or a plain number of seconds."""
    number, unit = (text[:-1], text[-1]) if text[-1:] in _UNITS else (text, "s")
    if not number.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 90s, 30m, 24h or 7d")
    return int(number) * _UNITS[unit]


def per_minute(text: str) -> int | str:
    """A limit per minute, or `none` (no limit). 0 is refused by name: it would allow nothing, which is not what
    anyone clearing a limit means, and the API refuses it too."""
    if text.strip().lower() == CLEAR:
        return CLEAR
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number, nor `none` (no limit)") from None
    if value == 0:
        raise argparse.ArgumentTypeError("0 would refuse every request: give a limit of at least 1, or `none` to "
                                         "remove the limit (null in the API)")
    return value


def _run(name: str) -> Any:
    def command(args: argparse.Namespace) -> int:
        from handlers.cli import actions

        return int(getattr(actions, name)(args))

    return command


def _key_options(p: argparse.ArgumentParser, create: bool) -> None:
    p.add_argument("--name", required=create)
    p.add_argument("--scopes", default=",".join(DEFAULT_SCOPES) if create else None,
                   help=f"comma-separated: {', '.join(SCOPES)}")
    p.add_argument("--models", help="comma-separated allowlist of model ids or aliases")
    p.add_argument("--policy", help="routing policy name (`none`: the default policy)")
    p.add_argument("--expires-at", dest="expires_at",
                   help="ISO 8601 time, e.g. 2027-01-01T00:00:00+00:00 (`none`: never)")
    p.add_argument("--budget", help="spend allowed per budget period, e.g. 25.00 (`none`: no budget)")
    p.add_argument("--budget-period", dest="budget_period", choices=["total", "daily", "monthly"])
    p.add_argument("--rpm", type=per_minute, help="requests per minute (`none`: no limit)")
    p.add_argument("--tpm", type=per_minute, help="tokens per minute (`none`: no limit)")


def add_parsers(sub: Any) -> None:
    k = sub.add_parser("keys", help="create, update, list, rotate and revoke relay keys")
    ksub = k.add_subparsers(dest="action", required=True)
    kc = ksub.add_parser("create", help="create a key; prints its secret, once, alone on stdout (its id on stderr)")
    _key_options(kc, create=True)
    kc.add_argument("--workspace", dest="workspace_id", help="workspace id (default: the first workspace)")
    kc.add_argument("--json", action="store_true", help="print the new key as JSON, its id and secret included")
    ku = ksub.add_parser("update", help="change a key (only the options given)")
    ku.add_argument("key_id")
    _key_options(ku, create=False)
    kl = ksub.add_parser("list", help="list keys (never their secrets): a table, or JSON with --json")
    kl.add_argument("--workspace")
    kl.add_argument("--json", action="store_true", help="print JSON instead of a table")
    kl.set_defaults(fn=_run("key_list"))
    ks = ksub.add_parser("show", help="one key as JSON (never its secret)")
    ks.add_argument("key_id")
    ks.add_argument("--json", action="store_true", help="JSON (the default: accepted for symmetry)")
    kr = ksub.add_parser("revoke", help="revoke a key by id")
    kr.add_argument("key_id")
    kt = ksub.add_parser("rotate", help="a new secret for a key (same id, limits, spend); prints it, once, alone on "
                         "stdout; the previous secret works for the grace period")
    kt.add_argument("key_id")
    kt.add_argument("--grace", type=duration, default=86400, metavar="DURATION",
                    help="how long the previous secret keeps working: 90s, 30m, 24h, 7d, or 0 to stop it at once "
                    "(default: 24h)")
    for command in (kc, ku, ks, kr, kt):
        command.set_defaults(fn=_run("keys"))
    w = sub.add_parser("workspaces", help="create, list, credit, revoke and restore workspaces")
    wsub = w.add_subparsers(dest="action", required=True)
    wc = wsub.add_parser("create", help="create a workspace")
    wc.add_argument("--name", required=True)
    wc.add_argument("--credit", default="0", help="its first credit, e.g. 25.00 (default: 0)")
    wl = wsub.add_parser("list", help="list workspaces: a table, or JSON with --json")
    wl.add_argument("--json", action="store_true", help="print JSON instead of a table")
    wl.set_defaults(fn=_run("workspace_list"))
    wa = wsub.add_parser("credit", help="add credit to a workspace (a negative amount corrects it downwards)")
    wa.add_argument("workspace_id")
    wa.add_argument("amount", help="e.g. 10.00, or -2.50 to take back credit given by mistake")
    wr = wsub.add_parser("revoke", help="revoke a workspace: its keys, new keys and credit are refused until restored")
    wr.add_argument("workspace_id")
    wo = wsub.add_parser("restore", help="restore a revoked workspace: its keys work again")
    wo.add_argument("workspace_id")
    for command in (wc, wa, wr, wo):
        command.set_defaults(fn=_run("workspaces"))
    u = sub.add_parser("usage", help="requests, tokens, cost and errors over a time range (every workspace)")
    u.add_argument("--start", help="ISO 8601 (default: a day before --end)")
    u.add_argument("--end", help="ISO 8601 (default: now)")
    u.add_argument("--bucket", choices=["hour", "day"], default="day")
    u.add_argument("--group-by", dest="group_by", default="", help="comma-separated: key, model, upstream, workspace")
    u.add_argument("--workspace", help="only this workspace")
    u.add_argument("--key", help="only this key id")
    u.add_argument("--json", action="store_true", help="print GET /v1/usage's JSON instead of a table")
    u.set_defaults(fn=_run("usage"))
    a = sub.add_parser("audit", help="who changed what and when: workspaces, credit, keys (newest first)")
    a.add_argument("--workspace", help="only entries about this workspace (its keys included)")
    a.add_argument("--key", help="only changes made by this key id")
    a.add_argument("--action", help="only this action, e.g. key.rotate")
    a.add_argument("--target", help="only changes to this workspace or key id")
    a.add_argument("--since", help="ISO 8601: at or after this time")
    a.add_argument("--until", help="ISO 8601: before this time")
    a.add_argument("--limit", type=int, default=100, help="entries per page (default 100)")
    a.add_argument("--cursor", help="the page after the one that printed this cursor")
    a.add_argument("--json", action="store_true", help="print GET /v1/audit's JSON instead of a table")
    a.set_defaults(fn=_run("audit"))

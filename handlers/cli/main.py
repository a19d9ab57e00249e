"""The specway command: serve, keys, workspaces, usage, audit, models, db, generate.

Building the parser imports nothing but the standard library and the spec's scope names; each command imports what
it needs when it runs, so that `specway --help` and the read-only commands start at once.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from handlers.cli.admin import StoreUnreachable, Unreachable, add_parsers
from handlers.cli.models import add_parser as add_models_parser
from handlers.config_names import DEFAULT_FILE, ENV_CONFIG, ConfigError


def cmd_serve(args: argparse.Namespace) -> int:
    from handlers.cli.serve import cmd_serve as serve

    return serve(args)


def cmd_db(args: argparse.Namespace) -> int:
    import asyncio

    from handlers.cli.actions import with_store

    async def noop(store: Any, _cfg: object) -> None:
        return None

    asyncio.run(with_store(args.config, noop))  # opening the store applies pending migrations
    print("database schema is up to date")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from generator.__main__ import main as generate

    return generate(["--check"] if args.check else [])


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("specway")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "(not installed)"


class _Version(argparse.Action):
    """--version, read from the installed package's metadata only when asked."""

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(f"specway {_version()}")
        parser.exit()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specway", description="A self-hostable LLM API gateway.")
    p.add_argument("--config", "-c", help=f"configuration file (default: ${ENV_CONFIG}, else ./{DEFAULT_FILE} when "
                   "there is one, else built-in)")
    p.add_argument("--version", action=_Version, nargs=0, help="print the installed version and exit")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run the gateway", description="Run the gateway. A fresh store gets a first "
                       "relay key with every scope, printed once, alone on stdout.")
    s.add_argument("--host", help="the address to listen on (default: server.host, 127.0.0.1; 0.0.0.0 for every "
                   "interface, to serve other machines)")
    s.add_argument("--port", type=int, help="the port to listen on (default: server.port, 8080)")
    s.add_argument("--workers", type=int, help="worker processes sharing the port (default: server.workers, 1)")
    s.set_defaults(fn=cmd_serve)
    add_parsers(sub)
    add_models_parser(sub)
    d = sub.add_parser("db", help="database schema")
    dsub = d.add_subparsers(dest="action", required=True)
    du = dsub.add_parser("upgrade", help="apply pending schema migrations, then exit",
                         description="Apply the schema migrations the store does not have yet (serve applies them at "
                         "start too), then exit: from a deploy step, before starting new replicas.")
    du.set_defaults(fn=cmd_db)
    g = sub.add_parser("generate", help="regenerate openapi.json and generated/ from specs/")
    g.add_argument("--check", action="store_true", help="fail with a diff when anything generated is stale")
    g.set_defaults(fn=cmd_generate)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except BrokenPipeError:  # `specway keys list | head`: the reader has gone, and that is no error of ours
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's last flush of stdout would raise again
        return 1
    except (ConfigError, Unreachable, StoreUnreachable) as exc:
        print(f"specway: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

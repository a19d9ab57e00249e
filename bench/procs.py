"""Processes the benchmark starts: each in its own session, logged to a file, always stopped; /proc readings."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
_NO_PROXY = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


_STARTED: list[Proc] = []  # every process we start, stopped by stop_all() in reverse order


class StartError(RuntimeError):
    """A process did not start or did not become ready; the message carries the tail of its log."""


def loopback_env(extra: dict[str, str] | None = None, unset: tuple[str, ...] = ()) -> dict[str, str]:
    """This process's environment with proxies removed (all traffic stays on 127.0.0.1)."""
    env = {k: v for k, v in os.environ.items() if k not in _PROXY_VARS and k not in unset}
    env.update(_NO_PROXY)
    env.update(extra or {})
    return env


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds: TIME_WAIT does not count
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def port_is_open(port: int) -> bool:
    """Something accepts connections on 127.0.0.1:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


class Proc:
    """A child process in its own session (so its own children are stopped with it), stdout/stderr to files."""

    def __init__(self, name: str, cmd: list[str], workdir: Path, *, cwd: Path | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.name = name
        self.out_path = workdir / f"{name}.out"
        self.err_path = workdir / f"{name}.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.popen = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=cwd,
                                          env=env, start_new_session=True)
        _STARTED.append(self)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stdout_lines(self) -> list[str]:
        return self.out_path.read_text(errors="replace").splitlines()

    def log_tail(self, lines: int = 25) -> str:
        text = self.out_path.read_text(errors="replace") + self.err_path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def fail(self, what: str) -> StartError:
        status = "still running" if self.alive() else f"exited with {self.popen.returncode}"
        return StartError(f"{self.name} {what} ({status}); last lines of its output:\n{self.log_tail()}")

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM to the process group we created, then SIGKILL after `grace` seconds."""
        if self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=5)


def stop_all() -> None:
    """Stop every process this run started (the last started first), even after an error or Ctrl-C."""
    while _STARTED:
        proc = _STARTED.pop()
        try:
            proc.stop()
        except KeyboardInterrupt:  # a second Ctrl-C: do not wait politely any more
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


def wait_until(proc: Proc, ready: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise proc.fail(f"exited before {what}")
        if ready():
            return
        time.sleep(0.1)
    raise proc.fail(f"was not {what} after {timeout:.0f} s")


def http_ok(url: str, headers: dict[str, str] | None = None, timeout: float = 2.0) -> bool:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return bool(200 <= resp.status < 300)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def http_post(url: str, body: bytes, headers: dict[str, str], timeout: float = 30.0) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json", **headers})
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def http_get(url: str, headers: dict[str, str], timeout: float = 30.0) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers=headers)
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a proxy


# --- /proc readings (Linux) -------------------------------------------------------------------------------------

def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def process_tree(pid: int) -> list[int]:
    """`pid` and all its descendants (LiteLLM may run its server in a child)."""
    kids, tree, todo = _children(), [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(kids.get(p, []))
    return tree


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of the process tree under `pid`, in seconds."""
    total = 0
    for p in process_tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / CLK_TCK


def rss_mb(pid: int) -> float:
    """Resident memory (VmRSS) of the process tree under `pid`, in MB."""
    kb = 0
    for p in process_tree(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    kb += int(line.split()[1])
    return kb / 1024

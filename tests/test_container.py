"""The image, built from the Dockerfile and run, with buildah (as root, vfs storage, chroot isolation).

No image registry is reachable here, Debian's package archive is: the Dockerfile's base is made with debootstrap (a
Debian rootfs with python3, as the official slim Python image has), cached outside the repository between runs
(`$XDG_CACHE_HOME/specway-tests`, else `~/.cache/specway-tests`), and tagged as the Dockerfile's FROM; the real
Dockerfile is then built with --pull=never. The build reaches the package index through this machine's pip
configuration, passed in as build secrets (its index URLs and its certificate authorities), which the test then
looks for in the image, and finds nowhere. The gateway is run from the image, as the image's user, and answers a
chat; SIGTERM stops it after its shutdown ran.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import free_port, tool, unavailable
from tests.deploy_support import ROOT, Dockerfile, compose

IMAGE = "localhost/specway-test:latest"
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
BASE_PACKAGES = "python3,python3-venv,ca-certificates"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specway-tests"


@dataclass
class Buildah:
    root: Path  # storage of its own, under the test's temporary folder

    def __call__(self, *args: str, timeout: float = 900, check: bool = True) -> str:
        command = [tool("buildah"), "--root", str(self.root / "storage"), "--runroot", str(self.root / "run"),
                   "--storage-driver", "vfs", *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        if check:
            assert done.returncode == 0, f"{' '.join(args[:2])} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done.stdout.strip()


def base_rootfs() -> Path:
    """The Debian rootfs, made once with debootstrap and kept as a tarball in the cache folder."""
    tarball = CACHE / f"debian-{SUITE}-python3.tar"
    if tarball.exists():
        return tarball
    debootstrap = tool("debootstrap")
    CACHE.mkdir(parents=True, exist_ok=True)
    work = CACHE / f"rootfs-{os.getpid()}"
    started = time.monotonic()
    done = subprocess.run([debootstrap, "--variant=minbase", f"--include={BASE_PACKAGES}", SUITE, str(work), MIRROR],
                          capture_output=True, text=True, timeout=1800, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for cache in ("var/cache/apt", "var/lib/apt/lists"):  # what an image does not keep
        shutil.rmtree(work / cache, ignore_errors=True)
    partial = tarball.with_suffix(".partial")
    subprocess.run(["tar", "-C", str(work), "-cf", str(partial), "."], check=True, timeout=600)
    partial.rename(tarball)  # whole or not at all, for the next run
    shutil.rmtree(work)
    print(f"debootstrap {SUITE} with {BASE_PACKAGES}: {time.monotonic() - started:.0f} s (cached in {tarball})")
    return tarball


def pip_secrets(folder: Path) -> list[str]:
    """This machine's pip configuration as build secrets: the index URLs a container can reach (pip.conf) and the
    certificate authorities pip trusts (ca.pem). File paths of this machine (find-links folders, constraint files)
    mean nothing inside the build and are left out."""
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                            timeout=60, check=True).stdout
    settings: dict[str, str] = {}
    for line in listed.splitlines():  # global.index-url='https://...'  or  :env:.cert='/etc/...'
        name, _, value = line.partition("=")
        settings[name.rpartition(".")[2]] = value.strip("'\"")
    keep = {"index-url", "extra-index-url", "trusted-host", "timeout", "default-timeout", "retries", "proxy"}
    lines = ["[global]"]
    for name in sorted(keep & set(settings)):
        values = settings[name].split()
        if name.endswith("index-url"):
            values = [v for v in values if v.startswith(("http://", "https://"))]
        if values:
            lines.append(f"{name} = {' '.join(values)}")
    conf = folder / "pip.conf"
    conf.write_text("\n".join(lines) + "\n")
    out = ["--secret", f"id=pip.conf,src={conf}"]
    ca = settings.get("cert") or os.environ.get("SSL_CERT_FILE") or "/etc/ssl/certs/ca-certificates.crt"
    if Path(ca).is_file():
        out += ["--secret", f"id=ca.pem,src={ca}"]
    return out


@dataclass
class Built:
    buildah: Buildah
    config: dict[str, Any]  # the image's Docker config: User, Env, ExposedPorts, Healthcheck, ...
    seconds: float


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    if os.geteuid() != 0:
        unavailable("building the image with buildah's vfs storage needs root")
    tool("buildah")
    folder = tmp_path_factory.mktemp("container")
    buildah = Buildah(folder)
    started = time.monotonic()
    tarball = base_rootfs()
    container = buildah("from", "scratch")
    mount = buildah("mount", container)
    subprocess.run(["tar", "-C", mount, "-xf", str(tarball)], check=True, timeout=600)
    buildah("umount", container)
    buildah("config", "--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "--env",
            "LANG=C.UTF-8", "--cmd", "python3", container)
    buildah("commit", "-q", "--rm", container, Dockerfile.read().base())  # as the Dockerfile's FROM names it
    based = time.monotonic()
    buildah("bud", "--isolation", "chroot", "--pull=never", "--format", "docker", "--layers=false", "-q",
            *pip_secrets(folder), "-t", IMAGE, "-f", str(ROOT / "Dockerfile"), str(ROOT), timeout=1800)
    seconds = time.monotonic() - based
    print(f"image built in {seconds:.0f} s (its base made from the cached rootfs in {based - started:.0f} s)")
    inspected = json.loads(buildah("inspect", "--type", "image", IMAGE))
    try:
        yield Built(buildah, inspected["Docker"]["config"], seconds)
    finally:
        buildah("rm", "--all", check=False)
        shutil.rmtree(folder / "storage", ignore_errors=True)


def test_the_image_is_what_the_dockerfile_says(built: Built) -> None:
    config, image = built.config, Dockerfile.read()
    assert config["User"] == "specway" and config["Entrypoint"] == ["specway"] and config["Cmd"] == ["serve"]
    assert list(config["ExposedPorts"]) == [f"{image.one('EXPOSE')}/tcp"] and config["StopSignal"] == "SIGTERM"
    assert "/readyz" in " ".join(config["Healthcheck"]["Test"])
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["SPECWAY_CONFIG"] == "/etc/specway/specway.yaml" and env["PATH"].startswith("/opt/specway/bin:")
    assert not [name for name in env if name.startswith("PIP_")]  # the build's pip settings stayed in the build


def test_compose_matches_the_image(built: Built) -> None:
    """compose.yaml's gateway: the image's port, its configuration path, and only variables the gateway reads."""
    service = compose()["services"]["specway"]
    env = dict(item.split("=", 1) for item in built.config["Env"])
    assert service["ports"][0].split(":")[1] + "/tcp" in built.config["ExposedPorts"]
    assert service["volumes"][0].split(":")[1] == env["SPECWAY_CONFIG"]
    assert not set(service["environment"]) & set(env)  # nothing the image sets is set again by another name


def test_the_gateway_runs_from_the_image_as_its_user_and_answers(built: Built) -> None:
    buildah = built.buildah
    container = buildah("from", "-q", IMAGE)
    assert buildah("run", "--isolation", "chroot", container, "--", "id", "-u") == "10001"
    leftovers = buildah("run", "--isolation", "chroot", container, "--", "sh", "-c",
                        "ls /run/secrets /etc/pip.conf /root/.config/pip 2>/dev/null; env | grep '^PIP_' || true")
    assert leftovers == ""  # no build secret, no pip configuration in the image
    port = free_port()
    proc = subprocess.Popen([tool("buildah"), "--root", str(buildah.root / "storage"), "--runroot",
                             str(buildah.root / "run"), "--storage-driver", "vfs", "run", "--isolation", "chroot",
                             "--env", f"SPECWAY_SERVER__PORT={port}", container, "--", "specway", "serve"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    log: list[str] = []
    threading.Thread(target=lambda: log.extend(proc.stderr), daemon=True).start()  # type: ignore[arg-type]
    try:
        key = proc.stdout.readline().strip()  # a fresh store: the first key, alone on stdout
        assert key.startswith("sk-sw-"), "".join(log)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "".join(log)
            time.sleep(0.2)
        # the image's own health check, run as the container runtime runs it
        check = built.config["Healthcheck"]["Test"][1:]
        buildah("run", "--isolation", "chroot", "--env", f"SPECWAY_SERVER__PORT={port}", container, "--", *check)
        answer = httpx.post(f"{url}/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                            json={"messages": [{"role": "user", "content": "Say hello."}]}, timeout=30)
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["message"]["content"]
        server = _serving(proc.pid)
        assert _uid(server) == 10001  # the gateway itself, not only `id`, runs without privileges
        os.kill(server, signal.SIGTERM)  # as `docker stop` and Kubernetes stop it
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    text = "".join(log)
    assert "Application shutdown complete" in text and "Traceback" not in text, text


def _serving(ancestor: int) -> int:
    """The python process of `specway serve` under the buildah process `ancestor`."""
    for stat in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            cmdline = stat.read_bytes().split(b"\0")
            pid = int(stat.parent.name)
        except (OSError, ValueError):
            continue
        if cmdline[:1] and cmdline[0].endswith(b"python3") and b"serve" in cmdline and _descends(pid, ancestor):
            return pid
    raise AssertionError("no specway serve process under buildah")


def _descends(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            pid = int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            return False
    return False


def _uid(pid: int) -> int:
    for line in (Path("/proc") / str(pid) / "status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid for {pid}")

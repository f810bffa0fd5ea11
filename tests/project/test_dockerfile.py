"""The container image, tested without a container engine (none runs on these machines).

The Dockerfile's own CMD and HEALTHCHECK are parsed out of it and run on the host, with only the
port and the paths an image would have remapped to a free 127.0.0.1 port and a tmp dir — so a
change to the image's command is exercised for real. Static checks cover the rest of what the
image promises: non-root user, data volume, healthcheck, dependencies before the source.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.broker_util import free_port

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = (REPO / "Dockerfile").read_text()
BIN = Path(sys.executable).parent


def _instruction(name: str) -> str:
    """The text of the single instruction ``name``, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    lines = [line for line in joined.splitlines() if line.startswith(name + " ")]
    assert len(lines) == 1, f"expected one {name} in the Dockerfile, found {len(lines)}"
    return lines[0][len(name) + 1 :].strip()


def _image_env() -> dict[str, str]:
    """The variables every ``ENV key=value ...`` instruction sets (values without spaces)."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    env: dict[str, str] = {}
    for line in joined.splitlines():
        if line.startswith("ENV "):
            for item in line[4:].split():
                key, sep, value = item.partition("=")
                assert sep, f"ENV {item}: use the key=value form"
                env[key] = value
    return env


def _exec_form(text: str) -> list[str]:
    argv = json.loads(text[text.index("[") :])
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
    return argv


def _map(arg: str, port: int, data_dir: Path) -> str:
    """One argument or variable value with the image's paths and port mapped onto this
    machine."""
    arg = arg.replace("/var/lib/sluice", str(data_dir))
    arg = arg.replace("/opt/sluice/config", str(REPO / "config"))
    arg = arg.replace("0.0.0.0:9092", f"127.0.0.1:{port}")
    arg = arg.replace("localhost:9092", f"127.0.0.1:{port}")
    return arg.replace("127.0.0.1:9092", f"127.0.0.1:{port}")


def _on_host(argv: list[str], port: int, data_dir: Path) -> list[str]:
    """Map the image's paths and port onto this machine."""
    mapped = [_map(arg, port, data_dir) for arg in argv]
    if mapped[0] == "python":
        mapped[0] = sys.executable
    elif (BIN / mapped[0]).exists():
        mapped[0] = str(BIN / mapped[0])
    return mapped


def test_image_is_non_root_with_volume_healthcheck_and_cached_dependencies() -> None:
    assert _instruction("USER") not in {"root", "0"}
    assert "/var/lib/sluice" in _instruction("VOLUME")
    assert "sluice.server.network.healthcheck" in _instruction("HEALTHCHECK")
    deps = DOCKERFILE.index("pip install -r")
    first_source = DOCKERFILE.index("COPY sluice ")
    assert deps < first_source, "dependencies must be installed before the source is copied"


def test_image_copies_what_the_package_is_built_from() -> None:
    """Every COPY source exists, and the wheel's inputs (pyproject's packages, py-modules and
    readme) are all copied before ``pip install .``."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    install = joined.index("pip install --no-deps .")
    copied: set[str] = set()
    for line in joined[:install].splitlines():
        if line.startswith("COPY "):
            sources = line.split()[1:-1]
            for source in sources:
                assert (REPO / source).exists(), f"COPY {source}: no such path in the repo"
            copied.update(sources)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    setuptools = project["tool"]["setuptools"]
    packages = {p.rstrip("*") for p in setuptools["packages"]["find"]["include"]}
    modules = {f"{m}.py" for m in setuptools.get("py-modules", [])}
    needed = packages | modules | {project["project"]["readme"], "pyproject.toml"}
    assert needed <= copied, f"not copied before the install: {sorted(needed - copied)}"


def test_healthcheck_fails_when_nothing_listens() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "sluice.server.network.healthcheck", f"127.0.0.1:{free_port()}"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
    )
    assert proc.returncode == 1
    assert "unhealthy" in proc.stderr


def _run_image(
    tmp_path: Path, port: int, data_dir: Path, run_env: dict[str, str]
) -> subprocess.Popen[bytes]:
    """The image's CMD with its ENV (both mapped onto this machine) and ``docker run -e``'s."""
    cmd = _on_host(_exec_form(_instruction("CMD")), port, data_dir)
    image_env = {k: _map(v, port, data_dir) for k, v in _image_env().items()}
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    log = (tmp_path / "broker.log").open("wb")
    try:
        return subprocess.Popen(
            cmd,
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**env, **image_env, **run_env},
        )
    finally:
        log.close()


def test_image_sets_its_listeners_and_data_dir_through_the_environment() -> None:
    env = _image_env()
    assert env["SLUICE_LOG_DIRS"] == "/var/lib/sluice"
    assert env["SLUICE_LISTENERS"] == "PLAINTEXT://0.0.0.0:9092"
    assert env["SLUICE_ADVERTISED_LISTENERS"] == "PLAINTEXT://localhost:9092"
    # Not in the command: an --override there would beat `docker run -e SLUICE_...`.
    assert "--override" not in _exec_form(_instruction("CMD"))


def test_image_command_serves_and_passes_its_healthcheck(tmp_path: Path) -> None:
    port = free_port()
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    health = _on_host(_exec_form(_instruction("HEALTHCHECK")), port, data_dir)
    broker = _run_image(tmp_path, port, data_dir, {})
    try:
        deadline = time.monotonic() + 30
        result = None
        while time.monotonic() < deadline and broker.poll() is None:
            result = subprocess.run(health, cwd=REPO, capture_output=True, text=True, timeout=30)
            if result.returncode == 0:
                break
            time.sleep(0.2)
        assert result is not None and result.returncode == 0, (tmp_path / "broker.log").read_text()
        broker.send_signal(signal.SIGTERM)
        assert broker.wait(timeout=30) == 0
    finally:
        if broker.poll() is None:
            broker.kill()
            broker.wait(timeout=10)
    assert (data_dir / ".kafka_cleanshutdown").exists()


def test_docker_run_e_advertises_another_address(tmp_path: Path) -> None:
    """``docker run -e SLUICE_ADVERTISED_LISTENERS=...``: Metadata gives clients that address
    (the image's default, localhost:9092, is overridden without touching the command)."""
    from sluice.protocol import messages as m
    from tests.broker_util import WireClient

    port = free_port()
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    run_env = {"SLUICE_ADVERTISED_LISTENERS": "PLAINTEXT://broker.example:19092",
               "SLUICE_NODE_ID": "7"}  # fmt: skip
    broker = _run_image(tmp_path, port, data_dir, run_env)

    async def metadata() -> Any:
        deadline = time.monotonic() + 30
        while True:
            try:
                client = await WireClient.connect("127.0.0.1", port)
                break
            except OSError:
                assert broker.poll() is None and time.monotonic() < deadline, (
                    tmp_path / "broker.log"
                ).read_text()
                await asyncio.sleep(0.05)
        try:
            return await client.request(m.Metadata.key, 9, m.MetadataRequest(topics=[]))
        finally:
            await client.close()

    try:
        resp = asyncio.run(metadata())
        assert [(b.node_id, b.host, b.port) for b in resp.brokers] == [(7, "broker.example", 19092)]
        broker.send_signal(signal.SIGTERM)
        assert broker.wait(timeout=30) == 0
    finally:
        if broker.poll() is None:
            broker.kill()
            broker.wait(timeout=10)
    assert (data_dir / ".kafka_cleanshutdown").exists()  # the image's data dir, mapped


@pytest.mark.parametrize("bad", ["nonsense", "host:port"])
def test_healthcheck_rejects_a_bad_target(bad: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "sluice.server.network.healthcheck", bad],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
    )
    assert proc.returncode == 2

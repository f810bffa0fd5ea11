"""The container image, tested without a container engine (none runs on these machines).

The Dockerfile's own CMD and HEALTHCHECK are parsed out of it and run on the host, with only the
port and the paths an image would have remapped to a free 127.0.0.1 port and a tmp dir — so a
change to the image's command is exercised for real. Static checks cover the rest of what the
image promises: non-root user, data volume, healthcheck, dependencies before the source.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

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


def _exec_form(text: str) -> list[str]:
    argv = json.loads(text[text.index("[") :])
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
    return argv


def _on_host(argv: list[str], port: int, data_dir: Path) -> list[str]:
    """Map the image's paths and port onto this machine."""
    mapped = []
    for arg in argv:
        arg = arg.replace("/var/lib/sluice", str(data_dir))
        arg = arg.replace("/opt/sluice/config", str(REPO / "config"))
        arg = arg.replace("0.0.0.0:9092", f"127.0.0.1:{port}")
        arg = arg.replace("localhost:9092", f"127.0.0.1:{port}")
        arg = arg.replace("127.0.0.1:9092", f"127.0.0.1:{port}")
        mapped.append(arg)
    if mapped[0] == "python":
        mapped[0] = sys.executable
    elif (BIN / mapped[0]).exists():
        mapped[0] = str(BIN / mapped[0])
    return mapped


def test_image_is_non_root_with_volume_healthcheck_and_cached_dependencies() -> None:
    assert _instruction("USER") not in {"root", "0"}
    assert "/var/lib/sluice" in _instruction("VOLUME")
    assert "sluice.server.core.healthcheck" in _instruction("HEALTHCHECK")
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
        [sys.executable, "-m", "sluice.server.core.healthcheck", f"127.0.0.1:{free_port()}"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
    )
    assert proc.returncode == 1
    assert "unhealthy" in proc.stderr


def test_image_command_serves_and_passes_its_healthcheck(tmp_path: Path) -> None:
    port = free_port()
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    cmd = _on_host(_exec_form(_instruction("CMD")), port, data_dir)
    health = _on_host(_exec_form(_instruction("HEALTHCHECK")), port, data_dir)
    log = (tmp_path / "broker.log").open("wb")
    broker = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
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
        log.close()
    assert (data_dir / ".kafka_cleanshutdown").exists()


@pytest.mark.parametrize("bad", ["nonsense", "host:port"])
def test_healthcheck_rejects_a_bad_target(bad: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "sluice.server.core.healthcheck", bad],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
    )
    assert proc.returncode == 2

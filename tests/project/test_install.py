"""Installing Sluice must not break the project that installs it.

The repository is built into a wheel and installed, non-editably, into a fresh virtualenv next to
a tiny application that has its own top-level ``server.py``, ``client.py`` and ``protocol.py`` --
the names Sluice's own packages had before they moved under ``sluice``. The application's test
uses the ``sluice_broker`` fixture (found only through the wheel's ``pytest11`` entry point) with
confluent-kafka to produce and consume one record, and records which files its imports came from.

Speed and no network: the wheel goes in with ``--no-deps``; third-party packages (Sluice's runtime
dependencies, pytest, confluent-kafka) come from this venv's site-packages through a ``.pth`` line,
written after the install so pip never sees this venv's editable Sluice. A ``.pth`` path line adds
the directory to ``sys.path`` without running that directory's own ``.pth`` files, so the editable
install's import hook stays off and ``sluice`` can only come from the wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Not copied into the build tree: the venv, caches, egg-info and build leftovers of this checkout.
_NOT_SOURCE = {".venv", ".git", "build", "dist", "data", "spark-warehouse", "metastore_db"}

APP_FILES = {
    "server.py": 'MARKER = "tinyapp.server"\n',
    "client.py": 'MARKER = "tinyapp.client"\n',
    "protocol.py": 'MARKER = "tinyapp.protocol"\n',
    "pyproject.toml": textwrap.dedent(
        """\
        [project]
        name = "tinyapp"
        version = "0"

        [tool.pytest.ini_options]
        addopts = "--strict-markers"
        """
    ),
    "test_app.py": textwrap.dedent(
        """\
        import json
        import sys
        import time

        import client
        import protocol
        import server
        from confluent_kafka import Consumer, Producer, TopicPartition


        def test_roundtrip_through_sluice(sluice_broker):
            bootstrap = sluice_broker.bootstrap_servers
            producer = Producer({"bootstrap.servers": bootstrap})
            producer.produce("tiny", key=b"k", value=b"hello")
            assert producer.flush(30) == 0
            consumer = Consumer(
                {"bootstrap.servers": bootstrap, "group.id": "tiny", "enable.auto.commit": False}
            )
            consumer.assign([TopicPartition("tiny", 0, 0)])
            try:
                deadline = time.monotonic() + 30
                message = None
                while message is None and time.monotonic() < deadline:
                    message = consumer.poll(1.0)
                assert message is not None and message.error() is None
                assert (message.key(), message.value()) == (b"k", b"hello")
            finally:
                consumer.close()
            # Checked after the broker ran: its imports did not replace the application's modules.
            assert (server.MARKER, client.MARKER, protocol.MARKER) == (
                "tinyapp.server", "tinyapp.client", "tinyapp.protocol"
            )
            imported = {name: sys.modules[name].__file__ for name in
                        ("server", "client", "protocol", "sluice")}
            with open("imports.json", "w") as f:
                json.dump(imported, f)
        """
    ),
}


def _build_wheel(source: Path, tmp_path: Path) -> Path:
    """A wheel of ``source``, built from a copy (an in-tree build writes build/ and egg-info)."""
    tree = tmp_path / "src"
    shutil.copytree(
        source,
        tree,
        ignore=lambda d, names: (
            {n for n in names if n in _NOT_SOURCE or n.endswith(("cache", ".egg-info"))}
            if Path(d) == source
            else {"__pycache__"} & set(names)
        ),
    )
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(tree)],
        check=True,
        timeout=300,
    )
    (wheel,) = dist.glob("sluice_broker-*.whl")
    return wheel


def _fresh_venv_with(wheel: Path, venv: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60
    )
    python = venv / "bin" / "python"
    # This venv's pip installs into the new one (pip >= 22.3); the new one needs no pip of its own.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            str(wheel),
        ],
        check=True,
        timeout=300,
    )
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    (Path(site) / "outer_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


@pytest.mark.slow
def test_installed_wheel_leaves_the_applications_modules_alone(tmp_path: Path) -> None:
    python = _fresh_venv_with(_build_wheel(REPO, tmp_path), tmp_path / "venv")
    app = tmp_path / "tinyapp"
    app.mkdir()
    for name, text in APP_FILES.items():
        (app / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME"}}
    result = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "timeout=120"],
        cwd=app,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
    imported = {k: Path(v) for k, v in json.loads((app / "imports.json").read_text()).items()}
    for name in ("server", "client", "protocol"):
        assert imported[name] == app / f"{name}.py"
    # The wheel's copy, not this checkout (an editable install would point back at REPO).
    assert imported["sluice"].is_relative_to(tmp_path / "venv")

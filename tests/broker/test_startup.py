"""A plain standalone start imports only what it needs (``sluice.server.__main__``'s docstring).

The broker runs in a subprocess through the real entrypoint (``main()``), is stopped with
SIGTERM once it accepts connections, and reports the modules it had loaded at exit; none of
:data:`HEAVY` may be among them. Each would cost tens of milliseconds of every start (the
import profile is in bench/NOTES.md) and is needed only for what a plain start does not use:
a terminal's pretty console, a CLI framework, ZooKeeper (cluster mode), Prometheus
(``sluice.metrics.listener``), Spark, the user-facing client, TLS keystores and SCRAM.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.broker_util import REPO, free_port

#: Module prefixes a plain standalone start must not import.
HEAVY = (
    "rich",
    "click",
    "kazoo",
    "prometheus_client",
    "pyspark",
    "javaproperties",
    "xml",
    "urllib.request",
    "http.client",
    "sluice.client",
    "sluice.net",  # the inter-broker client: replica fetchers, markers to other brokers
    "sluice.cli",
    "sluice.pipeline",
    "sluice.server.zk",
    "sluice.server.metadata.zk_cluster",
    "sluice.server.metrics.prometheus",
    "sluice.server.replication.replica_fetcher",
    "sluice.server.controller.controller",
    "cryptography",  # TLS keystores and certificate names: only with an SSL listener
    "scramp",  # SCRAM: only when a client logs in with it
    "asn1crypto",
)

#: Runs the entrypoint in-process and writes ``sorted(sys.modules)`` to argv[1] at exit.
_PROBE = """
import atexit, json, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
from sluice.server.__main__ import main
main(sys.argv[1:])
"""


def loaded_by_a_plain_start(tmp_path: Path, *args: str) -> list[str]:
    """The modules a standalone broker started with ``args`` had loaded when it stopped."""
    port = free_port()
    out = tmp_path / "modules.json"
    (tmp_path / "data").mkdir()
    props = tmp_path / "server.properties"
    props.write_text(f"listeners=PLAINTEXT://127.0.0.1:{port}\nlog.dirs={tmp_path / 'data'}\n")
    proc = subprocess.Popen(
        [sys.executable, "-c", _PROBE, str(out), "--log-format", "json", str(props), *args],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()[1].decode()
            assert time.monotonic() < deadline, "the broker did not accept connections"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    return list(json.loads(out.read_text()))


def test_a_plain_start_imports_nothing_heavy(tmp_path: Path) -> None:
    modules = loaded_by_a_plain_start(tmp_path)
    assert "sluice.server.server" in modules  # the probe saw a real start
    heavy = sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))
    assert heavy == []


def test_importing_the_entrypoint_imports_only_the_standard_library() -> None:
    """``import sluice.server.__main__`` (what ``-m`` and the console script do first) loads no
    other Sluice module and no third-party package: ``main()`` decides what a start needs."""
    code = "import json, sys; import sluice.server.__main__; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    modules = json.loads(out)
    assert [m for m in modules if m.startswith("sluice")] == [
        "sluice", "sluice.server", "sluice.server.__main__",
    ]  # fmt: skip
    for package in ("structlog", "uvloop", "click", "rich", "crc32c", "cramjam"):
        assert package not in modules

"""One Ctrl-C stops ``make cluster`` and ``make jepsen`` within seconds, children included.

Each command runs in a session of its own, as a shell runs a foreground job, and the test sends
SIGINT to its whole process group, as the terminal's Ctrl-C does. Children (brokers, the
ZooKeeper JVM) run in sessions of their own, so only the parent hears it and stops them in order:
brokers first (a controlled shutdown needs ZooKeeper), then ZooKeeper. Without that, every
process got the signal at once: ZooKeeper died under brokers still shutting down (30 s and a
``TimeoutError`` for ``make cluster``; every later trial failing with ``ConnectionLossError`` and
leaked temporary directories for ``make jepsen``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cluster.test_local_cluster_command import three_free_ports

pytestmark = pytest.mark.slow

#: "Within a few seconds" on an idle machine (about 3 s measured); the rest is for a loaded one.
STOP_BOUND = 20.0


def descendants(pid: int) -> dict[int, bytes]:
    """PID -> command line of every live descendant of ``pid``, from /proc."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent[int(entry.name)] = int(stat.rpartition(")")[2].split()[1])
    found: dict[int, bytes] = {}
    frontier = [pid]
    while frontier:
        current = frontier.pop()
        for child, ppid in parent.items():
            if ppid == current and child not in found and alive(child):
                found[child] = cmdline(child)
                frontier.append(child)
    return found


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def alive(pid: int, command: bytes | None = None) -> bool:
    """Running (not a zombie) and, if given, still running ``command`` (not a reused PID)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z" and (command is None or cmdline(pid) == command)


def wait_for(condition: object, what: str, timeout: float) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not after {timeout}s"
        time.sleep(0.1)


def run_until(
    args: list[str], tmp: Path, ready: str, children: int, files: str = ""
) -> subprocess.Popen[str]:
    """Start ``python -m <args>`` as a terminal's foreground job (its own session and process
    group, temporary files under ``tmp``); return once it printed ``ready``, has ``children``
    broker processes and (if given) a non-empty file matching the glob ``files`` exists under
    ``tmp``."""
    out = (tmp.parent / "output.txt").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", *args],
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
        cwd=Path(__file__).resolve().parents[2],  # the checkout, as `make` runs them
        env={**os.environ, "TMPDIR": str(tmp), "PYTHONUNBUFFERED": "1"},
    )
    out.close()

    def started() -> bool:
        assert proc.poll() is None, output(tmp)
        brokers = [c for c in descendants(proc.pid).values() if b"sluice.server" in c]
        found = not files or any(size(p) > 0 for p in tmp.glob(files))
        return ready in output(tmp) and len(brokers) >= children and found

    try:
        wait_for(started, f"{args[0]} ready", 120)
    except BaseException:
        for pid in [proc.pid, *descendants(proc.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(30)
        raise
    return proc


def size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # deleted meanwhile
        return 0


def output(tmp: Path) -> str:
    return (tmp.parent / "output.txt").read_text(errors="replace")


def interrupt(proc: subprocess.Popen[str], tmp: Path) -> tuple[int, float, str]:
    """Ctrl-C: SIGINT to the job's process group. Returns (exit code, seconds to exit, output),
    having checked that no child outlived it; kills whatever did (so a failure leaks nothing)."""
    children = descendants(proc.pid)
    assert any(b"zookeeper" in c.lower() for c in children.values()), children
    started = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    try:
        code = proc.wait(STOP_BOUND)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(30)
        code = None
    seconds = time.monotonic() - started
    left = [pid for pid, command in children.items() if alive(pid, command)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    text = output(tmp)
    assert code is not None, f"still running {STOP_BOUND}s after Ctrl-C:\n{text[-3000:]}"
    assert not left, f"children left running: {[children[p] for p in left]}"
    return code, seconds, text


def test_one_ctrl_c_stops_the_local_cluster(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    port = three_free_ports()
    proc = run_until(
        ["sluice.testing.cluster", "--brokers", "3", "--port", str(port),
         "--data", str(tmp_path / "cluster-data")],
        tmp, "(Ctrl-C stops the cluster)", 3,
    )  # fmt: skip
    code, seconds, text = interrupt(proc, tmp)
    assert code == 0, text
    assert "stopping the cluster: brokers 1, 2, 3 in turn" in text
    assert "Traceback" not in text, text
    assert list(tmp.iterdir()) == []  # ZooKeeper's scratch dir and the brokers' are gone
    print(f"stopped in {seconds:.1f}s")


def test_one_ctrl_c_stops_jepsen_and_its_trials(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    # Interrupted mid-trial: the workload's first records are on disk, the faults under way.
    proc = run_until(
        ["tests.jepsen", "--trials", "3", "--duration", "3"], tmp, "", 3,
        "sluice-cluster-*/broker-*/jepsen-1-0/*.log",
    )  # fmt: skip
    code, seconds, text = interrupt(proc, tmp)
    assert code == 130, text
    assert "stopping: the trial's brokers, then ZooKeeper" in text
    assert "ConnectionLoss" not in text and "Traceback" not in text, text
    assert '"trials": 0' in text  # the figures of the trials done (none)
    assert list(tmp.iterdir()) == []  # no sluice-sync-journals-*, no ZooKeeper scratch dir
    print(f"stopped in {seconds:.1f}s")

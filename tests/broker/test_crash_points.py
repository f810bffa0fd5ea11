"""``SLUICE_CRASH_AT`` (:mod:`sluice.server.crash_points`): a process dies with SIGKILL at an
armed point -- for its scope only, when one is given -- saying which on stderr, and goes on
everywhere else; the broker's config does not take the variable for a misspelt setting."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sluice.server.config import Config
from sluice.server.crash_points import ENV, ONCE_DIR_ENV, _parse

SCRIPT = """
from sluice.server.crash_points import crash_point
crash_point("a.b", "one")
print("past a.b", flush=True)
crash_point("c", "anything")
print("past c", flush=True)
"""


def run(armed: str | None, once_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in (ENV, ONCE_DIR_ENV)}
    if armed is not None:
        env[ENV] = armed
    if once_dir is not None:
        env[ONCE_DIR_ENV] = str(once_dir)
    return subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60
    )


def test_unarmed_and_other_scopes_go_on() -> None:
    for armed in (None, "", "a.b@two,d"):
        done = run(armed)
        assert (done.returncode, done.stdout) == (0, "past a.b\npast c\n"), armed


def test_an_armed_point_kills_the_process_there() -> None:
    done = run("a.b@two, a.b@one")
    assert done.returncode == -9 and done.stdout == ""
    assert '{"event": "crash point", "point": "a.b", "scope": "one"}' in done.stderr
    done = run("c")  # no scope: any
    assert done.returncode == -9 and done.stdout == "past a.b\n"


def test_a_once_directory_fires_each_point_once_across_processes(tmp_path: Path) -> None:
    assert run("c,a.b@one", tmp_path).returncode == -9  # at a.b
    done = run("c,a.b@one", tmp_path)  # a.b fired already: on to c
    assert done.returncode == -9 and done.stdout == "past a.b\n"
    assert run("c,a.b@one", tmp_path).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.b@one", "c@anything"]


def test_parse() -> None:
    assert _parse(" x@1,x@2,y,,y@3 ") == {"x": frozenset({"1", "2"}), "y": None}


def test_the_broker_config_does_not_warn_about_it() -> None:
    config = Config.load(None, environ={ENV: "txn.after.PrepareCommit", ONCE_DIR_ENV: "/tmp"})
    assert config.ignored_environment == ()

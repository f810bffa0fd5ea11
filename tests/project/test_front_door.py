"""What a new user reads first: the distribution's name, how to install from a checkout, where
the commands live, what `make run` and `make test` do to the terminal and how long they take,
and installs that show their progress."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def test_the_distribution_is_not_the_unrelated_sluice_on_pypi() -> None:
    # `sluice` on PyPI is a ZFS snapshot tool: `pip install sluice[spark]` installed that.
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["name"] == "sluice-broker"
    installs = re.findall(r"pip install ([^`\n]+)", README)
    assert installs, "the README says how to install"
    for target in installs:
        assert not re.match(r"'?sluice[\[' ]", target), target
    assert "from a checkout" in README and "`sluice-broker`" in README


def test_the_readme_says_where_the_commands_live_and_what_make_does() -> None:
    start = README[: README.index("## Point a Kafka client at it")]
    assert "source .venv/bin/activate" in start and ".venv/bin/sluice" in start
    assert "holds the terminal" in start  # make run: the examples need a second terminal
    assert re.search(r"about \d+\s+minutes", start)  # how long make test runs


def test_installs_show_their_progress() -> None:
    makefile = (REPO / "Makefile").read_text()
    pip_lines = [line for line in makefile.splitlines() if "pip install" in line]
    assert pip_lines and not [line for line in pip_lines if "--quiet" in line or " -q" in line]


def test_the_system_packages_install_shows_its_progress() -> None:
    # `make setup` / `make cluster` install kcat and ZooKeeper (with a JRE: minutes on a fresh
    # machine) through apt-get: its lines show, at most without the progress bars (-q).
    script = (REPO / "scripts" / "install-system-deps.sh").read_text()
    apt_lines = [
        line for line in script.splitlines() if re.search(r"\bapt-get\b.* (update|install)", line)
    ]
    assert [line for line in apt_lines if " install " in line], script
    silenced = [
        line for line in apt_lines if "-qq" in line or "/dev/null" in line or "--quiet" in line
    ]
    assert silenced == []

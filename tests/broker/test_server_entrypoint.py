"""``sluice-server`` command line: the properties file by --config or positionally, not both."""

from __future__ import annotations

from pathlib import Path

import pytest
import structlog

from sluice.server.__main__ import main


@pytest.fixture(autouse=True)
def _reset_logging() -> object:
    yield
    structlog.reset_defaults()


def _exit_code(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as info:
        main(argv)
    return int(info.value.code or 0)


def test_config_file_given_twice_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    props = tmp_path / "server.properties"
    props.write_text("num.partitions=2\n")
    assert _exit_code(["--config", str(props), str(props)]) == 2
    assert "either --config FILE or FILE" in capsys.readouterr().err


def test_invalid_config_value_exits_2_before_serving(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text("num.partitions=zero\n")
    assert _exit_code(["--config", str(props), "--log-format", "json"]) == 2


def test_the_entrypoint_reads_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``SLUICE_<KEY>`` variables reach the config (here a bad value, so it stops before
    serving and names the key); ``--override`` still wins over them."""
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    # Without the variable this broker would fail to start (exit 1: log.dirs is a file).
    safe = ["--log-format", "json", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
            "--override", f"log.dirs={not_a_dir}"]  # fmt: skip
    monkeypatch.setenv("SLUICE_NUM_PARTITIONS", "zero")
    assert _exit_code(safe) == 2
    assert "num.partitions" in capsys.readouterr().out
    args = ["--log-format", "json", "--override", "num.partitions=zero",
            "--override", f"log.dirs={tmp_path}"]  # fmt: skip
    monkeypatch.setenv("SLUICE_NUM_PARTITIONS", "2")
    assert _exit_code(args) == 2 and "'zero'" in capsys.readouterr().out


def test_help_and_bad_choices(capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit_code(["--help"]) == 0
    out = capsys.readouterr().out
    assert "--override KEY=VALUE" in out and "CONFIG_FILE" in out
    assert _exit_code(["--log-format", "xml"]) == 2
    assert "invalid choice: 'xml'" in capsys.readouterr().err

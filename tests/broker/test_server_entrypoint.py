"""``sluice-server`` command line: the properties file by --config or positionally, not both."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from sluice.server.__main__ import cli


def test_config_file_given_twice_is_a_usage_error(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text("num.partitions=2\n")
    result = CliRunner().invoke(cli, ["--config", str(props), str(props)])
    assert result.exit_code == 2
    assert "either --config FILE or FILE" in result.output


def test_invalid_config_value_exits_2_before_serving(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text("num.partitions=zero\n")
    result = CliRunner().invoke(cli, ["--config", str(props), "--log-format", "json"])
    assert result.exit_code == 2


def test_the_entrypoint_reads_the_environment(tmp_path: Path) -> None:
    """``SLUICE_<KEY>`` variables reach the config (here a bad value, so it stops before
    serving and names the key); ``--override`` still wins over them."""
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    # Without the variable this broker would fail to start (exit 1: log.dirs is a file).
    safe = ["--log-format", "json", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
            "--override", f"log.dirs={not_a_dir}"]  # fmt: skip
    result = CliRunner().invoke(cli, safe, env={"SLUICE_NUM_PARTITIONS": "zero"})
    assert result.exit_code == 2
    assert "num.partitions" in result.output
    args = ["--log-format", "json", "--override", "num.partitions=zero",
            "--override", f"log.dirs={tmp_path}"]  # fmt: skip
    result = CliRunner().invoke(cli, args, env={"SLUICE_NUM_PARTITIONS": "2"})
    assert result.exit_code == 2 and "'zero'" in result.output

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

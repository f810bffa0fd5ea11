"""Entrypoint: ``sluice-server [--config FILE | FILE] [--override key=value ...]``.

Also ``python -m sluice.server``.

Mirrors ``kafka-server-start.sh``: an optional properties file, then ``SLUICE_*`` environment
variables (``SLUICE_ADVERTISED_LISTENERS`` sets ``advertised.listeners``: what a container image
is configured with, see :mod:`sluice.server.config`), then overrides. Loads the config
once, configures logging once, runs the Server on uvloop until SIGTERM/SIGINT.
"""

from __future__ import annotations

import os
import sys

import click

from sluice.server.config import Config, ConfigError
from sluice.server.logging import configure_logging, get_logger


async def _serve(config: Config) -> None:
    from sluice.server.server import Server

    server = Server(config)
    server.install_signal_handlers()
    await server.start()
    await server.serve_forever()


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("config_file", required=False, type=click.Path(dir_okay=False))
@click.option(
    "--config",
    "config_option",
    type=click.Path(dir_okay=False),
    help="Properties file (same as the positional CONFIG_FILE of kafka-server-start.sh).",
)
@click.option(
    "--override",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set a config key, overriding the file (repeatable).",
)
@click.option(
    "--log-level", default="info", type=click.Choice(["debug", "info", "warning", "error"])
)
@click.option(
    "--log-format",
    default="auto",
    type=click.Choice(["auto", "json", "console"]),
    help="auto: JSON unless stdout is a terminal.",
)
def cli(
    config_file: str | None,
    config_option: str | None,
    overrides: tuple[str, ...],
    log_level: str,
    log_format: str,
) -> None:
    """Run a Sluice broker."""
    if config_file and config_option:
        raise click.UsageError("give the properties file once: either --config FILE or FILE")
    config_file = config_file or config_option
    configure_logging(log_level, json=None if log_format == "auto" else log_format == "json")
    log = get_logger("sluice.main")
    try:
        config = Config.load(config_file, overrides, environ=os.environ)
    except ConfigError as exc:
        log.error("invalid configuration", error=str(exc))
        raise SystemExit(2) from exc
    for key in config.ignored_keys:
        log.warning("unknown or unused config key ignored", key=key)
    for name in config.ignored_environment:
        log.warning("environment variable names no broker key: ignored", variable=name)
    if config.environment_keys:
        log.info("config keys from the environment", keys=list(config.environment_keys))
    import uvloop

    from sluice.server.storage.log_manager import OpenFileLimitError

    try:
        uvloop.run(_serve(config))
    except (OSError, OpenFileLimitError) as exc:
        # cannot listen (address in use...), cannot open the data dir, or its partitions need
        # more open files than allowed
        log.error("cannot start broker", error=str(exc))
        raise SystemExit(1) from exc


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point (``sluice-server``)."""
    cli.main(args=argv if argv is not None else sys.argv[1:], prog_name="sluice-server")


if __name__ == "__main__":
    main()

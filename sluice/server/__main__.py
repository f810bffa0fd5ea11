"""Entrypoint: ``sluice-server [--config FILE | FILE] [--override key=value ...]``.

Also ``python -m sluice.server``.

Mirrors ``kafka-server-start.sh``: an optional properties file, then ``SLUICE_*`` environment
variables (``SLUICE_ADVERTISED_LISTENERS`` sets ``advertised.listeners``: what a container image
is configured with, see :mod:`sluice.server.config`), then overrides. Loads the config
once, configures logging once, runs the Server on uvloop until SIGTERM/SIGINT.

**Start-up cost.** A broker is started by tests, benchmarks and orchestrators that wait for it
to accept connections, so this module imports only the standard library; :func:`main` parses
the command line with ``argparse`` (click costs ~40 ms of imports, and the broker has four
options), then imports what a plain start needs. With JSON logs (the default off a terminal)
structlog is imported without ``rich``: structlog's package imports its dev console renderer,
which imports rich (~70-150 ms) when it is installed, only to pretty-print tracebacks on a
terminal (:func:`_import_structlog_without_rich`). ZooKeeper (kazoo, the controller, the
replica fetcher) and Prometheus load only when the config asks for them (``zookeeper.connect``,
``sluice.metrics.listener``). ``bench/startup.py`` measures the ready time (figures and import
profiles in bench/NOTES.md), ``tests/broker/test_startup.py`` keeps heavy modules out of a
plain start.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sluice.server.config import Config

_LOG_LEVELS = ("debug", "info", "warning", "error")


async def _serve(config: Config) -> None:
    from sluice.server.server import Server

    server = Server(config)
    server.install_signal_handlers()
    await server.start()
    await server.serve_forever()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sluice-server", description="Run a Sluice broker.")
    parser.add_argument(
        "config_file",
        nargs="?",
        metavar="CONFIG_FILE",
        help="Properties file (same as the positional CONFIG_FILE of kafka-server-start.sh).",
    )
    parser.add_argument("--config", dest="config_option", metavar="FILE", help="Properties file.")
    parser.add_argument(
        "--override",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Set a config key, overriding the file (repeatable).",
    )
    parser.add_argument("--log-level", default="info", choices=_LOG_LEVELS)
    parser.add_argument(
        "--log-format",
        default="auto",
        choices=("auto", "json", "console"),
        help="auto: JSON unless stdout is a terminal.",
    )
    return parser


def _import_structlog_without_rich() -> None:
    """Import structlog while ``rich`` cannot be imported, when neither is loaded yet.

    structlog's package imports ``structlog.dev`` and ``structlog.tracebacks``, each of which
    imports rich if it is installed, to render exceptions on a terminal. JSON logs never use
    it, and rich costs more than the rest of a broker's imports. A ``None`` entry in
    ``sys.modules`` makes ``import rich`` raise ImportError, which structlog handles as "not
    installed"; the entry is removed afterwards, so rich stays importable for anything else.
    Only the entrypoint does this: the process is the broker's.
    """
    if "structlog" in sys.modules or "rich" in sys.modules:
        return
    sys.modules["rich"] = None  # type: ignore[assignment]
    try:
        import structlog  # noqa: F401
    finally:
        del sys.modules["rich"]


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point (``sluice-server``)."""
    parser = _parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.config_file and args.config_option:
        parser.error("give the properties file once: either --config FILE or FILE")
    config_file = args.config_file or args.config_option
    json = None if args.log_format == "auto" else args.log_format == "json"
    if json is None:
        json = not sys.stdout.isatty()
    if json:
        _import_structlog_without_rich()

    from sluice.server.config import Config, ConfigError
    from sluice.server.logging import configure_logging, get_logger

    configure_logging(args.log_level, json=json)
    log = get_logger("sluice.main")
    try:
        config = Config.load(config_file, args.overrides, environ=os.environ)
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

    from sluice.server.security.errors import SecurityError
    from sluice.server.storage.log_manager import OpenFileLimitError

    try:
        uvloop.run(_serve(config))
    except (OSError, OpenFileLimitError, SecurityError, ConfigError) as exc:
        # cannot listen (address in use...), cannot open the data dir, its partitions need
        # more open files than allowed, or a keystore / the inter-broker login does not load
        log.error("cannot start broker", error=str(exc))
        raise SystemExit(1) from exc


if __name__ == "__main__":
    main()

"""``sluice pipeline ...``: the Spark jobs of :mod:`sluice.pipeline.jobs` from the command line.

The click group ``pipeline`` is attached to the ``sluice`` CLI (sluice/cli/main.py) and runs on
its own as ``python -m sluice.pipeline.cli``::

    sluice pipeline archive -b 127.0.0.1:9092 -t events --path /data/archive \\
        --checkpoint /data/archive-checkpoint            # archive what is there, then exit
    sluice pipeline replay -b 127.0.0.1:9092 --path /data/archive --to-topic events-replayed

Exit status: 0 on success, 1 when the job failed (the error is printed), 2 for bad usage.
"""

from __future__ import annotations

import click

from .offsets import OptionError


@click.group(name="pipeline")
@click.option("--master", default="local[*]", show_default=True, help="Spark master URL.")
@click.pass_context
def pipeline(ctx: click.Context, master: str) -> None:
    """Spark jobs over Sluice topics (PySpark, format("sluice"))."""
    ctx.ensure_object(dict)
    ctx.obj["master"] = master


def _session(ctx: click.Context) -> object:
    from .jobs import spark_session

    try:
        return spark_session(ctx.obj.get("master", "local[*]") if ctx.obj else "local[*]")
    except ModuleNotFoundError as exc:
        # `pip install sluice-broker` (and `make run`) install the broker and CLI only.
        if (exc.name or "").partition(".")[0] not in {"pyspark", "pyarrow", "pandas"}:
            raise
        raise click.ClickException(
            f"the pipeline jobs need PySpark ({exc.name} is not installed): "
            "pip install 'sluice-broker[spark]'"
        ) from exc


@pipeline.command()
@click.option("-b", "--bootstrap-server", "bootstrap", required=True, help="host:port")
@click.option("-t", "--topic", "topics", multiple=True, required=True, help="Topic (repeatable).")
@click.option("--path", required=True, help="Output directory (Parquet, partitioned by date).")
@click.option("--checkpoint", required=True, help="Checkpoint directory of the streaming query.")
@click.option("--starting-offsets", default="earliest", show_default=True)
@click.option("--max-offsets-per-trigger", type=click.IntRange(min=1), default=None)
@click.option(
    "--every",
    "processing_time",
    default=None,
    help="Keep running with this trigger interval (e.g. '1 minute'); default: archive what "
    "is there now and exit.",
)
@click.option("--fail-on-data-loss/--no-fail-on-data-loss", default=True, show_default=True)
@click.pass_context
def archive(
    ctx: click.Context,
    bootstrap: str,
    topics: tuple[str, ...],
    path: str,
    checkpoint: str,
    starting_offsets: str,
    max_offsets_per_trigger: int | None,
    processing_time: str | None,
    fail_on_data_loss: bool,
) -> None:
    """Archive topics to Parquet (exactly-once files, resumable from --checkpoint)."""
    from .jobs import archive as run

    spark = _session(ctx)
    try:
        query = run(
            spark,
            bootstrap=bootstrap,
            topics=list(topics),
            path=path,
            checkpoint=checkpoint,
            starting_offsets=starting_offsets,
            max_offsets_per_trigger=max_offsets_per_trigger,
            processing_time=processing_time,
            fail_on_data_loss=fail_on_data_loss,
        )
        if processing_time:
            query.awaitTermination()
        rows = sum(p["numInputRows"] for p in query.recentProgress)
        click.echo(f"archived {rows} records to {path}")
    except (OptionError, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from exc
    except Exception as exc:  # Spark's errors (AnalysisException, StreamingQueryException)
        raise click.ClickException(f"archive failed: {exc}") from exc


@pipeline.command()
@click.option("-b", "--bootstrap-server", "bootstrap", required=True, help="host:port")
@click.option("--path", required=True, help="Directory written by `archive`.")
@click.option(
    "--to-topic",
    "topic",
    required=True,
    help="Topic to produce to (created if missing when the broker auto-creates topics).",
)
@click.option("--from-topic", "source_topic", default=None, help="Only records of this topic.")
@click.option("--keep-partitions", is_flag=True, help="Produce to the original partition numbers.")
@click.option("--date-from", default=None, help="First date (YYYY-MM-DD), inclusive.")
@click.option("--date-to", default=None, help="Last date (YYYY-MM-DD), inclusive.")
@click.pass_context
def replay(
    ctx: click.Context,
    bootstrap: str,
    path: str,
    topic: str,
    source_topic: str | None,
    keep_partitions: bool,
    date_from: str | None,
    date_to: str | None,
) -> None:
    """Produce archived records back to a topic (per-partition order kept)."""
    from .jobs import replay as run

    spark = _session(ctx)
    try:
        count = run(
            spark,
            path=path,
            bootstrap=bootstrap,
            topic=topic,
            keep_partitions=keep_partitions,
            date_from=date_from,
            date_to=date_to,
            source_topic=source_topic,
        )
    except OptionError as exc:
        raise click.ClickException(str(exc)) from exc
    except Exception as exc:  # Spark's errors carry the task's Python traceback
        raise click.ClickException(f"replay failed: {exc}") from exc
    click.echo(f"replayed {count} records to {topic}")


def main() -> None:
    pipeline(obj={})


if __name__ == "__main__":
    main()

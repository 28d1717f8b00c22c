"""Audit a replica: compare leader and follower tables, excusing what the topic still holds.

    spark-submit spark/verify_replica.py --producer-profile producer.toml --consumer-profile consumer.toml \\
        [--report report.json]
    python spark/verify_replica.py ...   (pyspark installed with pip; local Spark)

The MariaDB/MySQL JDBC jar is found without --jars (--jars, $CDC_JDBC_JAR, then Debian's
libmariadb-java); under spark-submit without it the job starts itself again with --jars.

Exit codes: 0 in sync (changes still pending in the topic are not drift), 1 drift
found, 2 could not audit (one line `error: ...` naming the cause and the fix).
The work is done by audit.run_audit; this file parses, calls it and formats.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # audit*.py beside us, also under spark-submit

from cdc_spark import missing_extra

if (_missing := missing_extra(("pyspark", "pyarrow"))) is not None:  # before audit.py imports them
    print(f"error: {_missing}", file=sys.stderr)
    sys.exit(2)

from audit import AuditOptions, AuditResult, run_audit
from rich.console import Console
from rich.table import Table as RichTable

from cdc_spark.jars import ensure_jdbc_jar

SAMPLES = 3  # keys shown per kind of difference on the terminal; --report has them all
KINDS = ("missing", "extra", "changed", "pending")
# Not a terminal (spark-submit logs, CI): rich would assume 80 columns and fold the table.
out = Console(highlight=False, width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 160)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see --help)."""
    p = argparse.ArgumentParser(prog="verify_replica.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--producer-profile", required=True, type=Path, help="cdc-producer profile: the leader, [filters]")
    p.add_argument("--consumer-profile", required=True, type=Path, help="cdc-consumer profile: the follower, [stream]")
    p.add_argument("--report", type=Path, help="also write the result as JSON to this file")
    p.add_argument("--tables", help="audit only these tables: db.table,db.table (default: all the filters pass)")
    p.add_argument("--jars", help="MariaDB/MySQL Connector/J jar for python runs (default: $CDC_JDBC_JAR, then "
                                  "/usr/share/java/mariadb-java-client.jar from libmariadb-java); "
                                  "under spark-submit give --jars to spark-submit")
    p.add_argument("--master", help="Spark master when run with python (default: local[*]; spark-submit sets its own)")
    p.add_argument("--rows-per-partition", type=int, default=100_000, help="JDBC read split size (default 100000)")
    p.add_argument("--recheck-after", type=float, default=1.0,
                   help="seconds to let in-flight changes land before differing keys are re-read (default 1)")
    p.add_argument("--max-keys", type=int, default=10_000, help="differing keys listed per table (default 10000)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p.parse_args(argv)


def render(result: AuditResult) -> None:
    """The per-table summary on stdout."""
    table = RichTable(title=f"replica audit: {result.status} (consumer at offset {result.checkpoint} of "
                            f"{result.topic_end} in the topic)", title_justify="left")
    table.add_column("table", no_wrap=True)
    for name in ("leader rows", "follower rows", "in sync", *KINDS):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("sample keys", overflow="fold")
    for t in result.tables:
        samples = [f"{kind} " + ", ".join(json.dumps(k, ensure_ascii=False) for k in keys[:SAMPLES])
                   + (" ..." if len(keys) > SAMPLES else "") for kind in KINDS if (keys := getattr(t, kind))]
        table.add_row(f"{t.database}.{t.table}", str(t.leader_rows), str(t.follower_rows),
                      "yes" if t.in_sync else "[bold red]NO[/]", *(str(len(getattr(t, k))) for k in KINDS),
                      "; ".join(samples + t.notes))
    out.print(table)


def report_text(doc: dict) -> str:
    """The JSON report, one line per table so that it stays readable and diffable."""
    tables = ",\n    ".join(json.dumps(t, ensure_ascii=False) for t in doc["tables"])
    return f'{{"status": {json.dumps(doc["status"])}, "tables": [\n    {tables}\n]}}\n'


def main(argv: list[str] | None = None) -> int:
    """Parse, audit, print (and write --report); returns the exit code."""
    args = parse_args(argv)
    opts = AuditOptions(
        producer_profile=args.producer_profile, consumer_profile=args.consumer_profile,
        tables=[t.strip() for t in args.tables.split(",") if t.strip()] if args.tables else None,
        jars=args.jars, master=args.master, rows_per_partition=args.rows_per_partition,
        recheck_after=args.recheck_after, max_keys=args.max_keys,
    )
    try:
        ensure_jdbc_jar(args.jars)  # under spark-submit without the jar: re-launched with --jars, no return
        result = run_audit(opts, progress=lambda msg: err.print(msg, markup=False))
        if args.report:
            args.report.write_text(report_text(result.to_json()))
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # every failure is "could not audit": one line, the traceback only with --debug
        if args.debug:
            traceback.print_exc()
        err.print(f"error: {_one_line(e)}", markup=False)
        return 2
    render(result)
    return 0 if result.status == "ok" else 1


def _one_line(e: Exception) -> str:
    from cdc_spark.task_errors import task_error
    from cdc_stream.console import describe_error  # the CLIs' one path from an exception to its message

    return describe_error(task_error(e))[0]


if __name__ == "__main__":
    sys.exit(main())

"""The MariaDB/MySQL JDBC driver (Connector/J) for Spark jobs that read servers through JDBC.

`spark-submit job.py` starts the JVM before the job's Python runs, so a jar named only
when the SparkSession is built reaches the executors but not the driver's class path,
where Spark's JDBC source resolves the driver class. So a job started by spark-submit
without the jar starts itself again: the same spark-submit arguments (read from the
parent JVM's command line) plus `--jars JAR`. `python job.py` starts the JVM itself and
passes the jar in `spark.jars` (see `session_jars`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from cdc_stream.errors import JarNotFound

DEBIAN_JAR = "/usr/share/java/mariadb-java-client.jar"
RELAUNCHED = "CDC_JDBC_RELAUNCHED"  # set in the re-launched job: never re-launch twice
_SUBMIT_CLASS = "org.apache.spark.deploy.SparkSubmit"


def is_jdbc_jar(path: str) -> bool:
    """Whether a jar path looks like MariaDB's or MySQL's Connector/J."""
    name = path.rsplit("/", 1)[-1].lower()
    return name.endswith(".jar") and ("mariadb" in name or "mysql" in name)


def find_jdbc_jar(cli_jar: str | None = None) -> str:
    """The Connector/J jar: --jars, then $CDC_JDBC_JAR, then the Debian package's."""
    for source, value in (("--jars", cli_jar), ("CDC_JDBC_JAR", os.environ.get("CDC_JDBC_JAR"))):
        if value:
            missing = [j for j in value.split(",") if "://" not in j and not Path(j).is_file()]
            if missing:
                raise JarNotFound(f"{source}: no such jar {missing[0]}; pass the path of the MariaDB Connector/J jar")
            return value
    if Path(DEBIAN_JAR).is_file():
        return DEBIAN_JAR
    raise JarNotFound("no JDBC driver for MariaDB/MySQL found: install it with `apt-get install libmariadb-java` "
                      "or pass --jars /path/to/mariadb-java-client.jar (or set CDC_JDBC_JAR)")


def under_spark_submit() -> bool:
    """Whether spark-submit started this Python process (its JVM is already running)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def submitted_jars() -> str:
    """spark.jars of the JVM spark-submit started (its --jars)."""
    from pyspark import SparkConf, SparkContext

    # A SparkConf made before the gateway is up is Python-only and empty; connect to
    # spark-submit's JVM first (SparkContext reuses that connection later).
    SparkContext._ensure_initialized()
    return SparkConf().get("spark.jars", "") or ""


def ensure_jdbc_jar(cli_jar: str | None = None) -> str | None:
    """Make sure the JDBC driver will be on Spark's class path.

    Under spark-submit: returns None when its --jars holds a Connector/J jar, else starts the
    job again through spark-submit with `--jars JAR` added (this call then never returns).
    Under plain python: returns the jar to put in `spark.jars`. Raises JarNotFound with the
    package to install when there is no jar anywhere.
    """
    if not under_spark_submit():
        return find_jdbc_jar(cli_jar)
    if any(is_jdbc_jar(j) for j in submitted_jars().split(",")):
        return None
    jar = find_jdbc_jar(cli_jar)
    if os.environ.get(RELAUNCHED):
        raise JarNotFound(f"spark-submit was started again with --jars {jar} but Spark still lacks it: "
                          f"add --jars {jar} to the spark-submit command")
    argv = relaunch_command(_parent_args(), jar, os.environ.get("SPARK_HOME"))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(argv[0], argv, {**os.environ, RELAUNCHED: "1"})
    return None  # not reached


def relaunch_command(submit_args: list[str], jar: str, spark_home: str | None) -> list[str]:
    """spark-submit with the original arguments and the jar added to (or as) --jars."""
    submit = str(Path(spark_home) / "bin" / "spark-submit") if spark_home else "spark-submit"
    args = list(submit_args)
    for i, arg in enumerate(args):
        if arg == "--jars" and i + 1 < len(args):
            args[i + 1] = f"{args[i + 1]},{jar}"
            return [submit, *args]
        if arg.startswith("--jars="):
            args[i] = f"{arg},{jar}"
            return [submit, *args]
    return [submit, "--jars", jar, *args]


def _parent_args() -> list[str]:
    """The spark-submit arguments of the JVM that started us (Linux: /proc/<ppid>/cmdline)."""
    try:
        raw = Path(f"/proc/{os.getppid()}/cmdline").read_bytes()
    except OSError:
        raw = b""
    words = [w.decode(errors="surrogateescape") for w in raw.split(b"\0") if w]
    if _SUBMIT_CLASS not in words:
        raise JarNotFound("spark-submit was given no MariaDB/MySQL JDBC jar and its command line cannot be read: "
                          f"add --jars {find_jdbc_jar()} to the spark-submit command")
    return words[words.index(_SUBMIT_CLASS) + 1:]


def session_jars(jar: str | None) -> dict[str, str]:
    """Builder settings that load the jar when we start the JVM ourselves (`python job.py`)."""
    return {"spark.jars": jar} if jar else {}

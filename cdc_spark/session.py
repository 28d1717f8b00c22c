"""SparkSession settings shared by the jobs (spark/lake.py, spark/verify_replica.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from cdc_spark.jars import under_spark_submit

_LOG4J = ("rootLogger.level = error\nrootLogger.appenderRef.e.ref = e\nappender.e.type = Console\n"
          "appender.e.name = e\nappender.e.target = SYSTEM_ERR\nappender.e.layout.type = PatternLayout\n"
          "appender.e.layout.pattern = %p %c{1}: %m%n\n"
          # else pyspark's shell default resets the level to WARN, noisily
          "logger.py.name = org.apache.spark.api.python.PythonGatewayServer\nlogger.py.level = error\n")


def prepare_local(master: str | None) -> None:
    """What a Spark this process starts itself (`python job.py`, a local master) reads from the
    environment; nothing under spark-submit, whose settings stand. Each entry point calls it before
    builder() (spark/lake.py, spark/verify_replica.py, bench/spark.py, the tests): the environment
    is the only way to tell these, and changing it is the program's business, not a library call's.

    - PYSPARK_PYTHON: Python workers (the source's readers, the lake's writers) run this interpreter
      unless it says otherwise. Spark's default is `python3` from PATH, which outside an activated
      virtualenv lacks the project. Only for local masters: on a cluster the executors' Python is the
      cluster's (docs/lake.md: PYSPARK_PYTHON or a packed environment). pyspark reads it when the
      SparkContext starts; no setting covers every kind of worker.
    - SPARK_HOME (local-cluster masters): separate executor JVMs are started from SPARK_HOME's
      scripts; the pyspark wheel's own.
    """
    if under_spark_submit():
        return
    master = master or "local[*]"
    if master.startswith("local-cluster"):
        import pyspark

        os.environ.setdefault("SPARK_HOME", os.path.dirname(pyspark.__file__ or ""))
    if master.startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def builder(app: str, master: str | None, settings: dict[str, str] | None = None) -> Any:
    """A SparkSession builder: quiet and UI-less when we start the JVM ourselves (`python job.py`;
    call prepare_local first). Under spark-submit, its own settings (master, logging, UI) are kept.
    """
    from pyspark.sql import SparkSession

    b = SparkSession.builder.appName(app)
    for key, value in (settings or {}).items():
        b = b.config(key, value)
    if under_spark_submit():
        return b
    master = master or "local[*]"
    if master.startswith("local"):
        b = b.config("spark.sql.shuffle.partitions", "4")  # 200 tiny local tasks cost seconds
    log4j = Path(os.environ.get("TMPDIR", "/tmp")) / "mysql-cdc-spark-log4j2.properties"
    log4j.write_text(_LOG4J)
    return (b.master(master).config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}"))


def quiet_query_failures(spark: Any) -> None:
    """Spark logs a failed streaming query at ERROR with the Python traceback; the jobs report the
    failure themselves in one line (`--debug` keeps Spark's log)."""
    jvm = spark.sparkContext._jvm
    level = jvm.org.apache.logging.log4j.Level.OFF
    for name in ("org.apache.spark.sql.execution.streaming", "org.apache.spark.sql.execution.datasources.v2"):
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)

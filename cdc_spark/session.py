"""SparkSession settings shared by the jobs (spark/lake.py, spark/verify_replica.py)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
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


def builder(app: str, master: str | None, settings: dict[str, str] | None = None,
            executor_defaults: bool = False) -> Any:
    """A SparkSession builder: quiet and UI-less when we start the JVM ourselves (`python job.py`;
    call prepare_local first). Under spark-submit, its own settings (master, logging, UI) are kept.
    `executor_defaults`: add `executor_settings` where the user set none (this starts the JVM, or
    connects to spark-submit's, to see the settings Spark starts with).
    """
    from pyspark.sql import SparkSession

    options = dict(settings or {})
    if not under_spark_submit():
        master = master or "local[*]"
        if master.startswith("local"):
            options["spark.sql.shuffle.partitions"] = "4"  # 200 tiny local tasks cost seconds
        log4j = Path(os.environ.get("TMPDIR", "/tmp")) / "mysql-cdc-spark-log4j2.properties"
        log4j.write_text(_LOG4J)
        options.update({"spark.master": master, "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{log4j}"})
    if executor_defaults and not in_driver(options.get("spark.master", "")):  # known without a JVM
        options.update(executor_settings(started_conf(options)))
    b = SparkSession.builder.appName(app)
    for key, value in options.items():
        b = b.config(key, value)
    return b


EXECUTOR_JAVA_OPTIONS = "spark.executor.extraJavaOptions"
# The executors' JVM options when the user chose none (docs/lake.md "The executors' JVM options", bench/README.md
# "Executor GC" and "The lake's rows"): the garbage collector: under G1 on a small executor heap (1 MiB regions
# below 2 GiB) the columnar cache's column buffers and the cached blocks' deserialization are humongous
# allocations, which start collections of their own; the throughput collector has no such class and cost the job
# less CPU. The JIT: the C1 compiler only (no C2): C2's compilations of Spark's code and each query's generated
# code were half of the executor's CPU time in a batch, and the batches after the first ran no slower without it.
EXECUTOR_GC = "-XX:+UseParallelGC -XX:TieredStopAtLevel=1"
_COLLECTOR = re.compile(r"-XX:\+Use\w*GC\b")


def executor_settings(conf: Callable[[str], str | None]) -> dict[str, str]:
    """The lake job's executor settings that the user's Spark settings (`conf`: key -> value or None) leave
    unset: `spark.executor.extraJavaOptions` = EXECUTOR_GC when it is not set at all (any value, even empty,
    is the user's and stands: nothing is merged into it) and spark.executor.defaultJavaOptions (an
    administrator's, put before it) names no collector (two would stop the executor JVM). None with a local
    master (`local`, `local[N]`: the executor is the driver's JVM, started already)."""
    if in_driver(conf("spark.master") or ""):
        return {}
    if conf(EXECUTOR_JAVA_OPTIONS) is not None or _COLLECTOR.search(conf("spark.executor.defaultJavaOptions") or ""):
        return {}
    return {EXECUTOR_JAVA_OPTIONS: EXECUTOR_GC}


def in_driver(master: str) -> bool:
    """Whether the master runs its executor in the driver's JVM (`local`, `local[N]`, `local[N,F]`)."""
    return master.startswith("local") and not master.startswith("local-cluster")


def started_conf(options: dict[str, str]) -> Callable[[str], str | None]:
    """The settings the SparkContext will start from, before the builder's own: spark-submit's (`--conf`,
    spark-defaults.conf; its JVM runs already) or, under `python job.py`, those of the JVM started here
    with `options` (PYSPARK_SUBMIT_ARGS, spark-defaults.conf, `options`), as pyspark would start it."""
    from pyspark import SparkConf, SparkContext

    if under_spark_submit():
        SparkContext._ensure_initialized()
    else:
        SparkContext._ensure_initialized(conf=SparkConf(loadDefaults=False).setAll(list(options.items())))
    conf = SparkConf()  # with the JVM up: its spark.* system properties

    def get(key: str) -> str | None:
        value = conf.get(key, None)
        return None if value is None else str(value)

    return get


def quiet_query_failures(spark: Any) -> None:
    """Spark logs a failed streaming query at ERROR with the Python traceback; the jobs report the
    failure themselves in one line (`--debug` keeps Spark's log)."""
    jvm = spark.sparkContext._jvm
    level = jvm.org.apache.logging.log4j.Level.OFF
    for name in ("org.apache.spark.sql.execution.streaming", "org.apache.spark.sql.execution.datasources.v2"):
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)

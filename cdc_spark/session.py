"""SparkSession settings shared by the jobs (spark/lake.py, spark/verify_replica.py)."""

from __future__ import annotations

import os
import re
import sys
import tempfile
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
            job_defaults: bool = False) -> Any:
    """A SparkSession builder: quiet and UI-less when we start the JVM ourselves (`python job.py`;
    call prepare_local first). Under spark-submit, its own settings (master, logging, UI) are kept.
    `job_defaults`: the lake job's JVM choices where the user made none: `executor_settings`, and the
    driver's JIT (`driver_c1`). This starts the JVM, or connects to spark-submit's, to see the settings
    Spark starts with.
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
    if job_defaults:
        conf = started_conf(options)
        if not in_driver(options.get("spark.master", "")):  # known without a JVM
            options.update(executor_settings(conf))
        if driver_c1_wanted(jvm_arguments()):
            driver_c1()
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


# The driver's JIT, C1 only from the job's start (docs/lake.md "The driver's JIT"; bench/README.md "The start-up"):
# the driver JVM's C2 compilations of Spark's start, planning and scheduling code were its largest CPU cost in a
# --once job on 2 cores, while the batch's rows never pass through that JVM. spark-submit starts the JVM before
# the job runs, so the flag (-XX:TieredStopAtLevel=1) cannot be given; a compiler directive added through the
# JVM's DiagnosticCommand MBean (`jcmd PID Compiler.directives_add`) excludes C2 from then on, and HotSpot
# compiles what C2 may not at C1's optimised level instead.
C2_EXCLUDED = '[{match: "*.*", c2: {Exclude: true}}]'
_JIT = re.compile(r"-XX:(TieredStopAtLevel=|[+-]TieredCompilation$|[+-]UseJVMCICompiler$|CompileThreshold=)")


def driver_c1_wanted(arguments: list[str]) -> bool:
    """Whether the job may take its driver's JIT to C1, from the driver JVM's arguments (`jvm_arguments`): not
    when one is a JIT option. Those are the user's (`--driver-java-options`, spark.driver.extraJavaOptions or
    defaultJavaOptions, JDK_JAVA_OPTIONS, JAVA_TOOL_OPTIONS) and stand, e.g. `-XX:TieredStopAtLevel=4`
    (Java's default) to keep C2."""
    return not any(_JIT.match(argument) for argument in arguments)


def _started_jvm() -> tuple[Any, Any]:
    """(py4j gateway, JVM view) of the driver's JVM, started already (started_conf starts it)."""
    from pyspark import SparkContext

    if SparkContext._gateway is None or SparkContext._jvm is None:
        raise RuntimeError("the driver's JVM is not started")
    return SparkContext._gateway, SparkContext._jvm


def jvm_arguments() -> list[str]:
    """The driver JVM's arguments (started already), as the JVM saw them."""
    bean = _started_jvm()[1].java.lang.management.ManagementFactory.getRuntimeMXBean()
    return [str(a) for a in bean.getInputArguments()]


def diagnostic_command(name: str, *args: str) -> str | None:
    """Run a HotSpot diagnostic command (`jcmd`'s, as the DiagnosticCommand MBean names it, e.g.
    compilerDirectivesAdd) in the driver's JVM (started already); None where the JVM has no such MBean."""
    gateway, jvm = _started_jvm()

    def array(kind: Any, items: list[Any]) -> Any:
        made = gateway.new_array(kind, len(items))
        for i, item in enumerate(items):
            made[i] = item
        return made

    try:
        mbean = jvm.javax.management.ObjectName("com.sun.management:type=DiagnosticCommand")
        server = jvm.java.lang.management.ManagementFactory.getPlatformMBeanServer()
        load = jvm.java.lang.Class.forName
        # through the interface's Method: py4j cannot call the server's own class (not exported by its module)
        invoke = load("javax.management.MBeanServerConnection").getMethod("invoke", array(jvm.java.lang.Class, [
            load("javax.management.ObjectName"), load("java.lang.String"), load("[Ljava.lang.Object;"),
            load("[Ljava.lang.String;")]))
        params = array(jvm.java.lang.Object, [array(jvm.java.lang.String, list(args))])
        signature = array(jvm.java.lang.String, ["[Ljava.lang.String;"])
        return str(invoke.invoke(server, array(jvm.java.lang.Object, [mbean, name, params, signature])))
    except Exception:  # py4j's errors for a JVM without the MBean (not HotSpot, no jdk.management module)
        return None


def driver_c1() -> bool:
    """From now on, compile the driver JVM's code with C1 only (C2_EXCLUDED); False where the JVM cannot be
    told (the job then runs with the JVM's own JIT)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="mysql-cdc-jit-") as directive:
        directive.write(C2_EXCLUDED)
        directive.flush()
        answer = diagnostic_command("compilerDirectivesAdd", directive.name)
    return answer is not None and answer.strip().startswith("1 compiler directives added")


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
    """Spark logs a failed streaming query, and a failed task (the executor's log in a local master, the
    scheduler's), at ERROR with the Python and Java stack traces; the jobs report the failure themselves in
    one line (cdc_spark/task_errors.py; `--debug` keeps Spark's log)."""
    jvm = spark.sparkContext._jvm
    level = jvm.org.apache.logging.log4j.Level.OFF
    for name in ("org.apache.spark.sql.execution.streaming", "org.apache.spark.sql.execution.datasources.v2",
                 "org.apache.spark.executor.Executor", "org.apache.spark.scheduler.TaskSetManager"):
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)

"""mysql-cdc on Spark: the `mysql_cdc` data source and the lake writer.

    import cdc_spark
    cdc_spark.register(spark)
    spark.readStream.format("mysql_cdc").option("profile", "producer.toml").load()

docs/lake.md describes the options, the columns and the types.
"""

from __future__ import annotations

from typing import Any

__all__ = ["missing_extra", "register"]

SPARK_EXTRA = ("pyspark", "pyarrow", "pandas", "deltalake")  # pyproject.toml's `spark` extra


def missing_extra(modules: tuple[str, ...] = SPARK_EXTRA) -> str | None:
    """The one-line error for modules of the `spark` extra that are not installed (None: all are)."""
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        return None
    return (f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed: the Spark jobs need the "
            "project's spark extra: pip install 'mysql-cdc[spark]' (from a checkout: pip install -e '.[spark]')")


def register(spark: Any) -> None:
    """Make format("mysql_cdc") available in this SparkSession (one call per session)."""
    from cdc_spark.source import MysqlCdcDataSource

    spark.dataSource.register(MysqlCdcDataSource)

"""mysql-cdc on Spark: the `mysql_cdc` data source and the lake writer.

    import cdc_spark
    cdc_spark.register(spark)
    spark.readStream.format("mysql_cdc").option("profile", "producer.toml").load()

docs/lake.md describes the options, the columns and the types.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


def register(spark: Any) -> None:
    """Make format("mysql_cdc") available in this SparkSession (one call per session)."""
    from cdc_spark.source import MysqlCdcDataSource

    spark.dataSource.register(MysqlCdcDataSource)

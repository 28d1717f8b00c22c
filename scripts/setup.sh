#!/usr/bin/env bash
# Install what a fresh machine lacks, then the project into .venv (idempotent).
#   MariaDB server + client (for the demo and the tests), mariadb-test and sysbench (the corpus), Java 17 and the MariaDB
#   JDBC driver (for the Spark audit), Python 3.11+ venv with mysql-cdc[dev,spark].
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)
command -v mariadb >/dev/null 2>&1 || need+=(mariadb-client)
# MariaDB's own test suite and its driver: scripts/corpus.py runs it through the differential harness.
{ command -v mariadb-test >/dev/null 2>&1 && [ -d /usr/share/mysql/mysql-test/main ]; } || need+=(mariadb-test)
# A real client's OLTP workload (scripts/corpus.py --workloads sysbench).
command -v sysbench >/dev/null 2>&1 || need+=(sysbench)
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
[ -f /usr/share/java/mariadb-java-client.jar ] || need+=(libmariadb-java)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

python=${PYTHON:-python3}
"$python" -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is needed"' \
  || { echo "setup: Python 3.11+ is needed (set PYTHON=/path/to/python3.11)" >&2; exit 1; }
[ -x .venv/bin/python ] || "$python" -m venv .venv
if ! .venv/bin/python -c 'import cdc_stream, cdc_spark, pytest, pyspark, deltalake' >/dev/null 2>&1 || [ pyproject.toml -nt .venv/.installed ]; then
  echo "setup: installing mysql-cdc into .venv"
  .venv/bin/python -m pip install -q --upgrade pip > .venv/setup.log 2>&1
  .venv/bin/python -m pip install -e '.[dev,spark]' >> .venv/setup.log 2>&1 \
    || { tail -n 30 .venv/setup.log >&2; echo "setup: pip install failed (full log: .venv/setup.log)" >&2; exit 1; }
  touch .venv/.installed
fi
# Byte-compile the project's own modules (pip compiles only what it copies into site-packages,
# and the editable install copies nothing): where PYTHONDONTWRITEBYTECODE=1 is set, every launch of
# a CLI would otherwise compile them again (~40 ms of cdc-producer's start). Python still checks
# each .pyc against its source, so an edited module is simply compiled in memory until the next run.
.venv/bin/python -m compileall -q cdc_stream cdc_producer cdc_consumer cdc_spark >/dev/null
echo "setup: ready (.venv/bin has cdc-producer, cdc-consumer, cdc-topic)"

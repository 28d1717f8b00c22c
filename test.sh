#!/usr/bin/env bash
# Run the test suite: real MariaDB servers, the real CLIs, Spark in local mode.
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"

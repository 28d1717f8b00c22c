"""Compact and vacuum the lake's Delta tables, beside the running lake job (cdc_spark/maintain.py).

    python spark/maintain.py --lake DIR [--retain-hours 168]
"""

from __future__ import annotations

import sys

from cdc_spark.maintain import main

if __name__ == "__main__":
    sys.exit(main())

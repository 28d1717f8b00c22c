"""The README's first command: ./demo.sh runs the tutorial end to end and shows the result."""

from __future__ import annotations

import json
import subprocess

import pytest
from harness import ROOT
from test_tutorial import EXPECTED_OPERATIONS


@pytest.mark.server  # demo.sh starts its own MariaDB pair
def test_demo_script_runs_the_tutorial():
    result = subprocess.run(["bash", str(ROOT / "demo.sh")], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    table = out[out.index("== follower: SELECT * FROM flvDb.pet"):out.index("== topic:")]
    assert "| Jack | Peter | dog     | m    | 1989-08-31 | NULL  |" in table
    assert "| Spot | Jane  | dog     | m    | 2010-11-02 | White |" in table
    events = [json.loads(line) for line in out[out.index("== topic:"):].splitlines() if line.startswith("{")]
    assert [e["operation"] for e in events] == EXPECTED_OPERATIONS

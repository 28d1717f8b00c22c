"""The compatibility matrix: every scenario must leave the follower equal to a native replica.

One leader, native replica, follower and pipeline serve the whole module (tests/differential.py);
each scenario runs in its own database. Rows are applied as the consumer does by default
(`[replay] rows = "auto"`: BINLOG replay of the leader's own row events); test_compat_matrix_sql.py
runs the same scenarios on the SQL path. Set CDC_COMPAT_RESULTS=path.json to keep the outcomes
(status, diff or error, seconds) of a run, e.g. for the report or docs/compatibility.md.
"""

from __future__ import annotations

import pytest
from compat_scenarios import SCENARIOS
from differential import Differential, scenario_ids


@pytest.fixture(scope="module")
def compat(tmp_path_factory):
    with Differential(tmp_path_factory.mktemp("compat")) as harness:
        yield harness


@pytest.mark.parametrize("scenario", SCENARIOS, ids=scenario_ids(SCENARIOS))
def test_equal_to_native_replication(compat, scenario):
    outcome = compat.run(scenario)
    assert outcome.ok, outcome.report()

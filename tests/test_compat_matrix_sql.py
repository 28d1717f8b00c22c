"""The compatibility matrix on the SQL path (`[replay] rows = "sql"`: what a MySQL follower of a MariaDB
leader, or a follower user without BINLOG REPLAY, gets): every scenario equal to a native replica but
for the guard of replicated triggers (`[replay] triggers = "auto"`; differential.Documented checks it is
the only difference), or refused loudly where SQL cannot reproduce it (`Scenario.sql_refusal`: what
system versioning SQL cannot write exactly). CDC_COMPAT_RESULTS_SQL=path.json keeps the outcomes.
"""

from __future__ import annotations

import os

import pytest
from compat_scenarios import SCENARIOS
from differential import Differential, scenario_ids


@pytest.fixture(scope="module")
def compat_sql(tmp_path_factory, monkeypatch_module):
    if os.environ.get("CDC_COMPAT_RESULTS_SQL"):
        monkeypatch_module.setenv("CDC_COMPAT_RESULTS", os.environ["CDC_COMPAT_RESULTS_SQL"])
    else:
        monkeypatch_module.delenv("CDC_COMPAT_RESULTS", raising=False)
    with Differential(tmp_path_factory.mktemp("compat-sql"), rows="sql") as harness:
        yield harness


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.mark.parametrize("scenario", SCENARIOS, ids=scenario_ids(SCENARIOS))
def test_equal_to_native_replication_on_the_sql_path(compat_sql, scenario):
    outcome = compat_sql.run(scenario)
    assert outcome.ok, outcome.report()

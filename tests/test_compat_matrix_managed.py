"""The compatibility matrix with a managed follower's user (issue 23): the consumer's account on the
follower has what a managed MySQL/MariaDB service grants (DML and DDL on everything, no SUPER, SET USER or
BINLOG REPLAY; log_bin_trust_function_creators=ON, as its parameter group allows), so its rows take SQL
(`[replay] rows = "auto"` finds no BINLOG privilege), triggers are created guarded and stored objects with
the consumer's user as definer (`[replay] definer = "consumer"`). Every scenario must equal the native
replica (which replicates as root) except for those two documented differences, which the harness checks
are the only ones (differential.Documented), or be refused loudly where the SQL path cannot reproduce it.
CDC_COMPAT_RESULTS_MANAGED=path.json keeps the outcomes.
"""

from __future__ import annotations

import os

import pytest
from compat_scenarios import SCENARIOS
from differential import Differential, scenario_ids


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.fixture(scope="module")
def compat_managed(tmp_path_factory, monkeypatch_module):
    if os.environ.get("CDC_COMPAT_RESULTS_MANAGED"):
        monkeypatch_module.setenv("CDC_COMPAT_RESULTS", os.environ["CDC_COMPAT_RESULTS_MANAGED"])
    else:
        monkeypatch_module.delenv("CDC_COMPAT_RESULTS", raising=False)
    with Differential(tmp_path_factory.mktemp("compat-managed"), managed=True) as harness:
        yield harness


@pytest.mark.parametrize("scenario", SCENARIOS, ids=scenario_ids(SCENARIOS))
def test_equal_to_native_replication_with_a_managed_followers_user(compat_managed, scenario):
    outcome = compat_managed.run(scenario)
    assert outcome.ok, outcome.report()

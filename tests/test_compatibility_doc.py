"""docs/compatibility.md's feature table against tests/compat_scenarios.py: every scenario appears once,
with the status its definition asks of each matrix run (test_compat_matrix.py: BINLOG replay;
test_compat_matrix_sql.py: the SQL path; test_compat_matrix_managed.py: a managed follower's user): equal,
refused (`refusal`, `sql_refusal`, `managed_refusal`) or differs (`sql_differs`), and nothing else appears.
So the table cannot drift."""

from __future__ import annotations

from pathlib import Path

from compat_scenarios import SCENARIOS

DOC = Path(__file__).resolve().parent.parent / "docs" / "compatibility.md"
SECTION = "## Features: the follower against a native replica"


def feature_rows() -> list[list[str]]:
    text = DOC.read_text()
    assert SECTION in text, f"{DOC} lacks the section '{SECTION}'"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| `")]
    return [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines]


def expected_status(refusal: str | None, differs: str | None = None) -> str:
    return "refused" if refusal else "differs" if differs else "equal"


def test_every_scenario_is_in_the_table_with_the_status_the_matrix_checks():
    rows = feature_rows()
    assert all(len(r) == 6 and r[5] for r in rows), [r for r in rows if len(r) != 6 or not r[5]]
    documented = {r[0].strip("`"): (r[2], r[3], r[4]) for r in rows}
    assert len(documented) == len(rows), "a scenario appears twice"
    ids = [s.id for s in SCENARIOS]
    assert sorted(set(documented) - set(ids)) == [], "rows of scenarios that do not exist"
    assert [i for i in ids if i not in documented] == [], "scenarios missing from docs/compatibility.md"
    for s in SCENARIOS:
        want = (expected_status(s.refusal_for("auto")), expected_status(s.refusal_for("sql"), s.sql_differs),
                expected_status(s.refusal_for("sql", managed=True), s.sql_differs))
        assert documented[s.id] == want, f"{s.id}: the table says {documented[s.id]}, the matrix checks {want}"


def test_the_table_follows_the_scenarios_order():
    assert [r[0].strip("`") for r in feature_rows()] == [s.id for s in SCENARIOS]

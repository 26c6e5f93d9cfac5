"""contrib/'s alerting rules and Grafana dashboard: the rules pass `promtool check rules` and
their unit tests (contrib/prometheus/alerts_test.yml), the dashboard's queries parse as
PromQL, and every metric either names is one delayq really exposes after a run.

promtool comes from Debian's `prometheus` package (bin/test installs it). Without it these
tests skip, except under CI=true, where they fail: CI must check the rules.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import IN_CI, ROOT
from tests.faults.test_processes import delayq

H = "tests.sample_handlers.jobs"
RULES = ROOT / "contrib" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "contrib" / "prometheus" / "alerts_test.yml"
DASHBOARD = ROOT / "contrib" / "grafana" / "delayq.json"
ALERTS = {"DelayqRunOverdue", "DelayqDueJobsLate", "DelayqTerminalFailures", "DelayqNoRunnerAlive"}
# What Grafana puts in a query before Prometheus sees it.
GRAFANA_VARIABLES = {"$queue": ".*", "$__rate_interval": "5m"}


@pytest.fixture
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        missing = "promtool (Debian's prometheus package; bin/test installs it)"
        if IN_CI:
            pytest.fail(f"CI must check the alerting rules: install {missing}")
        pytest.skip(f"no {missing}")
    return found


def rule_expressions(text: str) -> dict[str, list[str]]:
    """{alert name: its rules' PromQL} of a rules file (an alert may have several rules):
    their `expr:` values, one line or a folded block (no YAML library is a dependency; the
    file keeps to these two forms)."""
    found: dict[str, list[str]] = {}
    name, lines = "", text.splitlines()
    for number, line in enumerate(lines):
        if alert := re.match(r"\s*- alert: (\w+)$", line):
            name = alert.group(1)
        key = re.match(r"(\s*)expr: (.*)$", line)
        if not key:
            continue
        if key.group(2) not in (">-", ">", "|"):
            found.setdefault(name, []).append(key.group(2))
            continue
        block = []
        for following in lines[number + 1 :]:
            if following.strip() and len(following) - len(following.lstrip()) <= len(key.group(1)):
                break
            block.append(following.strip())
        found.setdefault(name, []).append(" ".join(block).strip())
    return found


def dashboard_expressions() -> list[str]:
    """Every PromQL a panel or a variable of the dashboard asks, Grafana's variables filled in."""
    board = json.loads(DASHBOARD.read_text())
    queries = [target["expr"] for panel in board["panels"] for target in panel["targets"]]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            queries.append(re.sub(r"^label_values\((.*), \w+\)$", r"\1", variable["definition"]))
    for name, value in GRAFANA_VARIABLES.items():
        queries = [query.replace(name, value) for query in queries]
    return queries


def metric_names(queries: list[str]) -> set[str]:
    return {name for query in queries for name in re.findall(r"\bdelayq_\w+", query)}


def exposed_names(text: bytes) -> set[str]:
    return {
        sample.name
        for family in text_string_to_metric_families(text.decode())
        for sample in family.samples
    }


def test_the_alerting_rules_pass_promtool_and_their_unit_tests(promtool):
    assert set(rule_expressions(RULES.read_text())) == ALERTS
    for command in (["check", "rules", str(RULES)], ["test", "rules", str(RULE_TESTS)]):
        checked = subprocess.run([promtool, *command], capture_output=True, text=True, check=False)
        assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_dashboards_queries_parse_as_promql(promtool, tmp_path):
    # promtool parses a recording rule's expression as Prometheus would a panel's query.
    rules = tmp_path / "dashboard.yml"
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for number, query in enumerate(dashboard_expressions()):
        lines += [f"      - record: dashboard:query{number}", f"        expr: {json.dumps(query)}"]
    rules.write_text("\n".join(lines) + "\n")
    checked = subprocess.run(
        [promtool, "check", "rules", str(rules)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_every_metric_the_rules_and_dashboard_name_is_exposed(queue, cli_env, log, tmp_path):
    queue.add(H, "record", {"log": log})
    queue.add(H, "fail", {"log": log})
    run_file = tmp_path / "delayq.prom"
    run = delayq(cli_env, "run", "--metrics-file", str(run_file))
    printed = delayq(cli_env, "metrics")
    assert (run.returncode, printed.returncode) == (0, 0), run.stderr + printed.stderr

    from_metrics = exposed_names(printed.stdout)
    # The dashboard reads what `delayq metrics` prints, wherever it is scraped from.
    assert metric_names(dashboard_expressions()) - from_metrics == set()
    # The rules too, so that a cron'd `delayq metrics --file` feeds every alert; and each
    # alert's series is also in what `run --metrics-file` writes.
    from_runs = exposed_names(run_file.read_bytes())
    rules = metric_names(
        [expr for exprs in rule_expressions(RULES.read_text()).values() for expr in exprs]
    )
    assert rules - from_metrics == set()
    assert rules - from_runs == set()
    assert rules and metric_names(dashboard_expressions())

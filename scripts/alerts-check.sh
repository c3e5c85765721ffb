#!/usr/bin/env bash
# The monitoring profile's files (deploy/): Prometheus' config and the sale's alert rules pass
# `promtool check config`, every alert has unit tests in deploy/alerts_test.yml and passes them
# (`promtool test rules`), and the Grafana dashboard's queries are valid PromQL on the provisioned
# data source. Alerts and dashboard name only metrics that internal/metrics/metrics.go defines.
# promtool comes from Debian's prometheus package, installed with apt-get when missing.
# Run by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v promtool >/dev/null; then
  echo "alerts-check: installing Debian's prometheus package for promtool" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi

promtool check config deploy/prometheus.yml
promtool test rules deploy/alerts_test.yml

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The dashboard's queries as recording rules, so that promtool parses each of them.
python3 - "$tmp/dashboard-rules.yml" <<'EOF'
import glob, json, re, sys
import yaml

status = 0
def fail(msg):
    global status
    print(f"alerts-check: {msg}", file=sys.stderr)
    status = 1

metrics_go = open("internal/metrics/metrics.go").read()
defined = set(re.findall(r'Name:\s*"(flashsale_\w+)"', metrics_go)) | set(re.findall(r'new(?:FuncCounter|FlagGauge)\(\s*"(flashsale_\w+)"', metrics_go))
if not defined:
    fail("found no metric names in internal/metrics/metrics.go")
def check_names(where, expr):
    for name in re.findall(r"\bflashsale_\w+", expr):
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        if name not in defined and base not in defined:
            fail(f"{where}: {name} is not defined in internal/metrics/metrics.go")

alerts = yaml.safe_load(open("deploy/alerts.yml"))
runbook = open("docs/runbook.md").read()
tests = open("deploy/alerts_test.yml").read()
for group in alerts["groups"]:
    for rule in group["rules"]:
        check_names(f"deploy/alerts.yml {rule.get('alert')}", rule["expr"])
        if not re.search(rf"alertname:\s*{re.escape(rule['alert'])}\s*$", tests, re.M):
            fail(f"alert {rule['alert']} has no test in deploy/alerts_test.yml")
        # Every alert links its own section of the runbook.
        url = rule.get("annotations", {}).get("runbook_url", "")
        want = "docs/runbook.md#" + rule["alert"].lower()
        if url != want:
            fail(f"alert {rule['alert']}: runbook_url is {url!r}, want {want!r}")
        elif not re.search(rf"^## {re.escape(rule['alert'])}\s*$", runbook, re.M):
            fail(f"alert {rule['alert']}: docs/runbook.md has no section '## {rule['alert']}'")

uids = set()
for path in glob.glob("deploy/grafana/provisioning/datasources/*.yml"):
    uids |= {d["uid"] for d in yaml.safe_load(open(path))["datasources"]}
rules = []
dashboards = glob.glob("deploy/grafana/dashboards/*.json")
if not dashboards:
    fail("no dashboard in deploy/grafana/dashboards")
for path in dashboards:
    dash = json.load(open(path))
    for panel in dash["panels"]:
        if panel["type"] == "row":
            continue
        where = f"{path} panel {panel['title']!r}"
        if panel.get("datasource", {}).get("uid") not in uids:
            fail(f"{where}: data source {panel.get('datasource')} is not provisioned ({sorted(uids)})")
        if not panel.get("targets"):
            fail(f"{where}: no query")
        for t in panel.get("targets", []):
            expr = t["expr"].replace("$__rate_interval", "1m")
            check_names(where, expr)
            rules.append({"record": f"dashboard:panel_{panel['id']}_{t['refId']}", "expr": expr})
yaml.safe_dump({"groups": [{"name": "dashboard-queries", "rules": rules}]}, open(sys.argv[1], "w"))
print(f"alerts-check: {len(rules)} dashboard queries, metric names checked against internal/metrics")
sys.exit(status)
EOF
promtool check rules "$tmp/dashboard-rules.yml" >/dev/null || {
  promtool check rules "$tmp/dashboard-rules.yml"; echo "alerts-check: a dashboard query is not valid PromQL" >&2; exit 1; }
echo "alerts-check: prometheus config, alert rules and their tests, dashboard queries: ok"

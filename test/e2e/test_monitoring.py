"""Issue 34 ("Pictures", operator side): the Grafana dashboard and the Prometheus rules of deploy/.
Prometheus's own tool checks them (promtool: the rules parse, their unit tests pass, every query
of the dashboard is valid PromQL); the dashboard has the structure Grafana imports (unique panel
ids, a place on the grid, queries with a refId, the data source chosen by a variable); and every
metric they use is in the metrics table of docs/operations.md, with its labels, and exported by
a real gateway's /metrics, as are the route patterns they match on."""

import json
import os
import re
import shutil
import subprocess

from conftest import ROOT, wait_for

RULES = os.path.join(ROOT, "deploy", "prometheus", "omnigate-rules.yml")
RULES_TEST = os.path.join(ROOT, "deploy", "prometheus", "omnigate-rules.test.yml")
DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "omnigate-dashboard.json")
OPERATIONS = os.path.join(ROOT, "docs", "operations.md")

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Grafana's variables in the dashboard's queries, and what stands for them when promtool checks
# a query (the longest names first: $__rate_interval before $__range...).
GRAFANA_VARS = [("${instance}", ".*"), ("$instance", ".*"), ("$__rate_interval", "5m"),
                ("$__interval", "1m"), ("$__range", "1h")]
# A metric name: not part of a longer name, nor of a recording rule's name (level:metric:ops).
METRIC_RE = re.compile(r"(?<![\w:])omnigate_[a-z_]+(?![\w:])")
RECORDED_RE = re.compile(r"(?<![\w:])[a-z_]+:[a-z0-9_]+:[a-z0-9_]+(?![\w:])")
SELECTOR_RE = re.compile(r"(?<![\w:])(omnigate_[a-z_]+)\{([^}]*)\}")
MATCHER_RE = re.compile(r"([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*\"((?:[^\"\\]|\\.)*)\"")
GROUPING_RE = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# Labels every series has once scraped, besides the gateway's own.
TARGET_LABELS = {"job", "instance"}
# What the dashboard must show (the list), by metric.
DASHBOARD_MUST_SHOW = [
    "omnigate_http_requests_total", "omnigate_http_request_duration_seconds",
    "omnigate_provider_attempts_total", "omnigate_circuit_state",
    "omnigate_db_connections_ready", "omnigate_db_queue_depth",
    "omnigate_db_commit_duration_seconds", "omnigate_db_timeouts_total",
    "omnigate_queue_depth", "omnigate_queue_lag_seconds", "omnigate_steps_due",
    "omnigate_steps_running", "omnigate_webhook_outbox_depth",
    "omnigate_webhook_outbox_oldest_seconds", "omnigate_webhook_tries_total",
    "omnigate_inbound_messages_total", "omnigate_suppressions", "omnigate_loop_lag_max_seconds",
    "omnigate_log_lines_dropped_total",
]
# The alerts of the issue, each with its unit tests in omnigate-rules.test.yml.
ALERTS = [
    "OmnigateInstanceDown", "OmnigateHigh5xxRatio", "OmnigateSendLatencyHigh", "OmnigateCircuitOpen",
    "OmnigateDatabaseUnavailable", "OmnigateDatabaseTimeouts", "OmnigateLoopLagHigh",
    "OmnigateWebhookOutboxOld", "OmnigateWebhookDeliveriesStalled", "OmnigateQueueLagHigh",
    "OmnigateQueueGrowing", "OmnigateStepsDuePilingUp", "OmnigateLogLinesDropped",
]


def promtool(*args):
    """Runs promtool (package prometheus, deploy/install-deps.sh); returns CompletedProcess."""
    exe = shutil.which("promtool")
    assert exe, "promtool not found: install the Debian package prometheus (deploy/install-deps.sh)"
    return subprocess.run([exe] + list(args), cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=120)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def dashboard():
    with open(DASHBOARD, encoding="utf-8") as f:
        return json.load(f)


def query_panels(dash):
    """The panels that query Prometheus (rows hold none), nested rows' panels included."""
    out = []
    for p in dash["panels"]:
        if p.get("type") == "row":
            out.extend(p.get("panels", []))
        else:
            out.append(p)
    return out


def all_panels(dash):
    out = []
    for p in dash["panels"]:
        out.append(p)
        if p.get("type") == "row":
            out.extend(p.get("panels", []))
    return out


def dashboard_exprs(dash):
    """(where, expr) of every query of the dashboard: the panels' targets and the variables'."""
    out = []
    for p in query_panels(dash):
        for t in p.get("targets", []):
            out.append(("panel %d %r target %s" % (p["id"], p["title"], t.get("refId")), t.get("expr")))
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            out.append(("variable %s" % v["name"], q))
    return out


def as_promql(expr):
    """A dashboard query with Grafana's variables replaced, so that promtool can parse it."""
    for var, value in GRAFANA_VARS:
        expr = expr.replace(var, value)
    return expr


def metrics_table():
    """docs/operations.md's metrics table: {name: (type, {labels})}."""
    text = read(OPERATIONS)
    begin = text.index("<!-- metrics-table:begin")
    end = text.index("<!-- metrics-table:end")
    table = {}
    for line in text[begin:end].splitlines():
        m = re.match(r"^\| `(omnigate_[a-z_]+)` \| (counter|gauge|histogram) \| ([^|]*) \|", line)
        if m:
            labels = set(re.findall(r"`([a-z_]+)`", m.group(3)))
            table[m.group(1)] = (m.group(2), labels)
    assert len(table) >= 40, "metrics table of docs/operations.md not found or cut: %r" % sorted(table)
    return table


def base_name(name, table):
    """A histogram's series (_bucket, _sum, _count) named by its histogram."""
    for suffix in HISTOGRAM_SUFFIXES:
        base = name[:-len(suffix)]
        if name.endswith(suffix) and table.get(base, ("",))[0] == "histogram":
            return base
    return name


def used_metrics(table):
    """{metric: where} of every omnigate metric the rules and the dashboard name (queries,
    annotations, descriptions and comments alike), histogram series named by their histogram."""
    used = {}
    for where, text in (("deploy/prometheus/omnigate-rules.yml", read(RULES)),
                        ("deploy/grafana/omnigate-dashboard.json", read(DASHBOARD))):
        for name in METRIC_RE.findall(text):
            used.setdefault(base_name(name, table), where)
    return used


def promql_of_rules():
    """The text of every expr of the rules file, without a YAML parser: a one-line `expr:`, or a
    block (`expr: |`) of the lines indented deeper than its key."""
    exprs = []
    lines = read(RULES).splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)expr:\s*(.*)$", line)
        if not m:
            continue
        if m.group(2).strip() not in ("|", ">"):
            exprs.append(m.group(2).strip())
            continue
        block = []
        for nxt in lines[i + 1:]:
            if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= len(m.group(1)):
                break
            block.append(nxt.strip())
        exprs.append(" ".join(block).strip())
    return exprs


# ---- promtool --------------------------------------------------------------------------------


def test_promtool_check_rules():
    """`promtool check rules` accepts the rules file (syntax, PromQL, templates)."""
    p = promtool("check", "rules", RULES)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "SUCCESS" in p.stdout, p.stdout


def test_promtool_test_rules():
    """`promtool test rules` passes every unit test: each alert fires with its exact labels and
    annotations, and stays quiet for the healthy series beside it."""
    p = promtool("test", "rules", RULES_TEST)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "SUCCESS" in p.stdout and "FAILED" not in p.stdout, p.stdout


def test_every_alert_has_for_severity_annotations_and_a_unit_test():
    """The rules hold the issue's alerts, each with `for:`, labels.severity (critical or warning),
    a summary and a description, and each is tested firing in omnigate-rules.test.yml; every
    recording rule an alert or a test reads is defined."""
    text = read(RULES)
    tests = read(RULES_TEST)
    blocks = re.split(r"\n\s*- (?=alert:|record:)", text)
    alerts = {}
    for b in blocks:
        m = re.match(r"alert:\s*(\w+)", b)
        if m:
            alerts[m.group(1)] = b
    assert sorted(alerts) == sorted(ALERTS)
    for name, b in alerts.items():
        assert re.search(r"\n\s+for:\s*\d+[smh]\b", b), "%s has no for:" % name
        assert re.search(r"\n\s+severity:\s*(critical|warning)\s*\n", b), "%s has no severity" % name
        assert re.search(r"\n\s+summary:\s*\S", b), "%s has no summary" % name
        assert re.search(r"\n\s+description:\s*\S", b), "%s has no description" % name
        firing = re.search(r"alertname:\s*%s\s*\n\s*exp_alerts:\s*\n\s*- exp_labels:" % name, tests)
        assert firing, "%s is never tested firing in omnigate-rules.test.yml" % name
    recorded = set(re.findall(r"record:\s*(\S+)", text))
    assert recorded, "no recording rule"
    assert len(promql_of_rules()) == len(alerts) + len(recorded)
    for name in set(RECORDED_RE.findall("\n".join(promql_of_rules())) + RECORDED_RE.findall(tests)):
        assert name in recorded, "recording rule %s is used but not defined" % name


# ---- the dashboard ---------------------------------------------------------------------------


def test_dashboard_structure():
    """The dashboard is Grafana JSON of schema 39 with a DS_PROMETHEUS input, a `datasource`
    variable of type datasource and an `instance` variable; every panel has a unique id, a title
    and a place on the 24-column grid that no other panel takes; every query panel and target
    uses the data source variable, and every target has an expr and a refId unique in its panel."""
    d = dashboard()
    assert d["schemaVersion"] == 39
    assert d["title"] and d["uid"]
    inputs = {i["name"]: i for i in d["__inputs"]}
    assert inputs["DS_PROMETHEUS"]["type"] == "datasource"
    assert inputs["DS_PROMETHEUS"]["pluginId"] == "prometheus"
    variables = {v["name"]: v for v in d["templating"]["list"]}
    ds = variables["datasource"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    assert ds["current"]["value"] == "${DS_PROMETHEUS}"
    inst = variables["instance"]
    assert inst["type"] == "query" and inst["datasource"] == DATASOURCE
    assert inst["includeAll"] and inst["multi"]

    panels = all_panels(d)
    ids = [p.get("id") for p in panels]
    assert all(isinstance(i, int) for i in ids), ids
    assert len(ids) == len(set(ids)), "duplicate panel ids: %r" % sorted(ids)
    cells = {}
    for p in panels:
        assert p.get("title"), p
        g = p.get("gridPos")
        assert g and all(isinstance(g.get(k), int) for k in ("h", "w", "x", "y")), p["title"]
        assert g["w"] > 0 and g["h"] > 0 and g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, "%r overlaps %r" % (p["title"], cells[(x, y)])
                cells[(x, y)] = p["title"]
        if p["type"] == "row":
            continue
        assert p.get("datasource") == DATASOURCE, p["title"]
        targets = p.get("targets")
        assert targets, "%r has no targets" % p["title"]
        refids = [t.get("refId") for t in targets]
        assert all(refids) and len(refids) == len(set(refids)), (p["title"], refids)
        for t in targets:
            assert isinstance(t.get("expr"), str) and t["expr"].strip(), (p["title"], t)
            assert t.get("datasource", DATASOURCE) == DATASOURCE, (p["title"], t)
            assert '$instance' in t["expr"], "%r target %s ignores the instance variable" % (p["title"], t["refId"])
    assert [p["title"] for p in d["panels"] if p["type"] == "row"], "no rows"
    shown = {m for _, e in dashboard_exprs(d) for m in METRIC_RE.findall(e)}
    shown = {base_name(m, metrics_table()) for m in shown}
    missing = [m for m in DASHBOARD_MUST_SHOW if m not in shown]
    assert not missing, "the dashboard shows none of %r" % missing


def test_dashboard_queries_are_valid_promql(tmp_path):
    """Every query of the dashboard, its Grafana variables replaced, is valid PromQL: written as
    recording rules into a temporary rules file that `promtool check rules` accepts."""
    rules = []
    for i, (where, expr) in enumerate(dashboard_exprs(dashboard())):
        promql = as_promql(expr)
        if promql.startswith("label_values("):  # a variable's query: its metric is checked below
            m = re.match(r"^label_values\((omnigate_[a-z_]+)\s*,\s*([a-z_]+)\)$", promql)
            assert m, "%s: %r" % (where, expr)
            promql = "count by (%s) (%s)" % (m.group(2), m.group(1))
        assert "$" not in promql, "%s: unknown Grafana variable in %r" % (where, expr)
        rules.append({"record": "dashboard:query_%d:check" % i, "expr": promql})
    assert len(rules) >= 30
    path = tmp_path / "dashboard-queries.rules.json"  # JSON is YAML: promtool reads it
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}, indent=1))
    p = promtool("check", "rules", str(path))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "SUCCESS: %d rules found" % len(rules) in p.stdout, p.stdout


# ---- the metrics against the docs and the gateway --------------------------------------------


def test_every_metric_used_is_in_the_metrics_table_with_its_labels():
    """Every omnigate metric the rules and the dashboard name is in docs/operations.md's metrics
    table; a histogram's _bucket/_sum/_count belong to a histogram; every label a selector
    matches is one of the metric's (or le of a bucket, job and instance); every label grouped or
    joined on is some metric's."""
    table = metrics_table()
    used = used_metrics(table)
    assert len(used) >= 30, sorted(used)
    unknown = {m: w for m, w in used.items() if m not in table}
    assert not unknown, "not in the metrics table of docs/operations.md: %r" % unknown

    d = dashboard()
    exprs = promql_of_rules() + [as_promql(e) for _, e in dashboard_exprs(d)]
    all_labels = set(TARGET_LABELS) | {"le"}
    for _, labels in table.values():
        all_labels |= labels
    for expr in exprs:
        for name, matchers in SELECTOR_RE.findall(expr):
            base = base_name(name, table)
            kind, labels = table[base]
            allowed = labels | TARGET_LABELS
            if name == base + "_bucket" and kind == "histogram":
                allowed = allowed | {"le"}
            for label, _, _ in MATCHER_RE.findall(matchers):
                assert label in allowed, "%s has no label %r (table: %r) in %r" % (name, label, sorted(labels), expr)
        for group in GROUPING_RE.findall(expr):
            for label in filter(None, (x.strip() for x in group.split(","))):
                assert label in all_labels, "no metric has the label %r grouped on in %r" % (label, expr)
        for name in METRIC_RE.findall(expr):
            if name in table:
                assert table[name][0] != "histogram", "histogram %s without _bucket, _sum or _count in %r" % (name, expr)


def scrape(srv):
    """The text of GET /metrics."""
    r = srv.request("GET", "/metrics")
    assert r.status == 200, r
    assert r.header("Content-Type").startswith("text/plain; version=0.0.4")
    return r.body.decode()


def routes_matched():
    """Every route pattern the rules and the dashboard match the route label against."""
    routes = set()
    exprs = promql_of_rules() + [as_promql(e) for _, e in dashboard_exprs(dashboard())]
    for expr in exprs:
        for _, matchers in SELECTOR_RE.findall(expr):
            for label, _, value in MATCHER_RE.findall(matchers):
                if label == "route":
                    routes.update(value.split("|"))
    return routes


def test_every_metric_used_is_exported_by_the_gateway(make_gateway):
    """A gateway (2 workers) on a migrated database exports every metric the rules and the
    dashboard use (a `# TYPE` line each), of the type the metrics table gives; the histogram
    buckets the rules pick by `le` exist; and every route pattern they match on is a route label
    of the gateway (each route called once, without a token)."""
    srv = make_gateway(workers=2)
    # Ready on every worker (/readyz below may reach either: a 503 seen once in CI).
    assert wait_for(srv.workers_connected, 10)
    assert wait_for(lambda: srv.request("GET", "/readyz").status == 200, 10)
    text = scrape(srv)
    table = metrics_table()
    exported = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    used = used_metrics(table)
    missing = sorted(m for m in used if m not in exported)
    assert not missing, "not exported by GET /metrics: %r" % missing
    for m in used:
        assert exported[m] == table[m][0], "%s is a %s, the table says %s" % (m, exported[m], table[m][0])
    for expr in promql_of_rules():
        for name, matchers in SELECTOR_RE.findall(expr):
            for label, op, value in MATCHER_RE.findall(matchers):
                if label == "le":
                    assert op == "="
                    assert re.search(r'^%s\{(?:.*,)?le="%s"\} ' % (re.escape(name), re.escape(value)), text, re.M), \
                        "no bucket le=%r of %s in /metrics" % (value, name)

    with open(os.path.join(ROOT, "src", "product", "static", "openapi.json"), encoding="utf-8") as f:
        paths = json.load(f)["paths"]
    routes = routes_matched()
    assert "/api/omni/send" in routes, routes
    for route in sorted(routes):
        assert route in paths, "%s is no route of the gateway (openapi.json)" % route
        method = "POST" if "post" in paths[route] else "GET"
        body = b"{}" if method == "POST" else None
        hdrs = [("Content-Type", "application/json")] if method == "POST" else None
        r = srv.request(method, route, hdrs, body)
        assert r.status in (200, 401), (route, r)
    text = scrape(srv)
    for route in sorted(routes):
        assert re.search(r'^omnigate_http_requests_total\{[^}]*route="%s"' % re.escape(route), text, re.M), \
            "no route=%r in omnigate_http_requests_total" % route

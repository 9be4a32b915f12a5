//! The monitoring kit of `manifests/overlays/monitoring/`: the alerts pass Prometheus' own
//! `promtool check rules` and the unit tests of `tests/monitoring/alerts-test.yaml` (each alert
//! silent before its window, firing after it, resolved when the condition ends), and a broken
//! alert fails them; every alert links its runbook; the Grafana dashboard has the fields Grafana
//! needs to import it and its queries parse as PromQL. That the queries name metrics the
//! operator exports is checked against the real exposition in `src/metrics.rs`'s unit tests;
//! that the series move in a real maintenance, in `tests/operations.rs`.
//!
//! promtool is built from the Go module proxy by `tests/cluster/build-promtool.sh` (cached under
//! `$HOME`). Its checks are the long form: its cold build took 898 to 972 s on the loaded 2-core
//! development machine, more than the CI budget has room for, so they are `#[ignore]`d (libtest
//! prints them as ignored, with the reason) and run with `-- --include-ignored`. Everything that
//! needs no tool (the five alerts by name, the runbook links, each alert having a unit test, the
//! dashboard's fields) runs always.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use nmo_packaging::bundle;
use serde_json::Value;

const RULES: &str = "manifests/overlays/monitoring/rules/prometheusrule.yaml";
const DASHBOARD: &str = "manifests/overlays/monitoring/rules/dashboard.json";
const ALERTS: [&str; 5] = [
    "NodeMaintenanceDrainStuck",
    "NodeMaintenanceFailed",
    "NodeMaintenanceLeaseLost",
    "NodeMaintenanceWebhookErrors",
    "NodeMaintenanceOperatorDown",
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The PrometheusRule's `spec` (a Prometheus rule file).
fn rule_file() -> Value {
    let rule: Value = serde_yaml::from_str(&read(RULES)).unwrap();
    assert_eq!(rule["kind"], "PrometheusRule");
    rule["spec"].clone()
}

fn rules() -> Vec<Value> {
    rule_file()["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().clone())
        .collect()
}

/// Builds (once, cached under `$HOME`) and returns promtool.
fn promtool() -> PathBuf {
    nmo_devcluster::go_tool("build-promtool.sh")
}

/// Runs `promtool test rules` on `rule_file` with the committed unit tests; returns whether it
/// passed and what it printed.
fn promtool_test(rule_file: &Value) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("rules.yaml"),
        serde_yaml::to_string(rule_file).unwrap(),
    )
    .unwrap();
    std::fs::copy(
        root().join("tests/monitoring/alerts-test.yaml"),
        dir.path().join("alerts-test.yaml"),
    )
    .unwrap();
    let out = Command::new(promtool())
        .args(["test", "rules", "alerts-test.yaml"])
        .current_dir(dir.path())
        .output()
        .expect("promtool runs");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The rule file holds exactly the five alerts (no tool needed).
#[test]
fn the_rules_are_the_five_alerts() {
    let names: Vec<String> = rules()
        .iter()
        .map(|r| {
            r["alert"]
                .as_str()
                .expect("only alerting rules")
                .to_string()
        })
        .collect();
    assert_eq!(names, ALERTS);
}

#[test]
#[ignore = "long form: needs promtool (cold build about 15 min); run with -- --include-ignored"]
fn the_rules_pass_promtool_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rules.yaml");
    std::fs::write(&path, serde_yaml::to_string(&rule_file()).unwrap()).unwrap();
    let out = Command::new(promtool())
        .args(["check", "rules"])
        .arg(&path)
        .output()
        .expect("promtool runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("SUCCESS: 5 rules found"), "{text}");
}

/// Every alert is exercised by the promtool unit tests (no tool needed to see that).
#[test]
fn every_alert_has_a_unit_test() {
    let tests = read("tests/monitoring/alerts-test.yaml");
    for alert in ALERTS {
        assert!(
            tests.contains(&format!("alertname: {alert}")),
            "{alert} untested"
        );
    }
}

#[test]
#[ignore = "long form: needs promtool (cold build about 15 min); run with -- --include-ignored"]
fn every_alert_fires_after_its_window_and_resolves() {
    let (ok, text) = promtool_test(&rule_file());
    assert!(ok, "promtool test rules failed:\n{text}");
    assert!(text.contains("SUCCESS"), "{text}");
}

/// The unit tests catch an alert that never fires and one that fires too early.
#[test]
#[ignore = "long form: needs promtool (cold build about 15 min); run with -- --include-ignored"]
fn a_broken_alert_fails_the_unit_tests() {
    for (alert, field, broken) in [
        (
            "NodeMaintenanceDrainStuck",
            "expr",
            "max by (nodemaintenance, node) (nmo_maintenance_blocked_pods) > 100",
        ),
        ("NodeMaintenanceFailed", "for", "0m"),
        ("NodeMaintenanceOperatorDown", "for", "30m"),
    ] {
        let mut file = rule_file();
        for r in file["groups"][0]["rules"].as_array_mut().unwrap() {
            if r["alert"] == alert {
                r[field] = Value::from(broken);
            }
        }
        let (ok, text) = promtool_test(&file);
        assert!(!ok, "{alert} with {field}: {broken} still passes:\n{text}");
        assert!(text.contains(alert), "{text}");
    }
}

#[test]
fn every_alert_links_its_runbook() {
    for r in rules() {
        let alert = r["alert"].as_str().unwrap();
        let url = r["annotations"]["runbook_url"].as_str().unwrap_or_default();
        let doc = format!("docs/runbooks/{alert}.md");
        // The link names this project's repository, the one setting (Cargo.toml's
        // `[workspace.package] repository`) that the bundle's and the chart's links follow too.
        assert_eq!(
            url,
            bundle::runbook_url(alert),
            "{alert}: runbook_url in {RULES} does not follow Cargo.toml's `repository`"
        );
        let text = read(&doc);
        assert!(text.starts_with(&format!("# {alert}\n")), "{doc}");
        for section in ["## Meaning", "## Diagnosis", "## Mitigation"] {
            assert!(text.contains(section), "{doc} lacks {section}");
        }
        assert!(text.contains("kubectl"), "{doc} gives no command");
        for a in ["summary", "description"] {
            assert!(
                r["annotations"][a].as_str().is_some_and(|s| !s.is_empty()),
                "{alert} lacks {a}"
            );
        }
        assert!(
            matches!(
                r["labels"]["severity"].as_str(),
                Some("warning" | "critical")
            ),
            "{alert}"
        );
    }
    // The promtool unit tests expect the same links (the long form compares them).
    let tests = read("tests/monitoring/alerts-test.yaml");
    for line in tests.lines().filter(|l| l.contains("runbook_url:")) {
        let url = line.split_once("runbook_url:").unwrap().1.trim();
        let alert = url
            .rsplit('/')
            .next()
            .and_then(|f| f.strip_suffix(".md"))
            .unwrap_or_default();
        assert_eq!(
            url,
            bundle::runbook_url(alert),
            "tests/monitoring/alerts-test.yaml does not follow Cargo.toml's `repository`"
        );
    }
    let stuck = read("docs/runbooks/NodeMaintenanceDrainStuck.md");
    assert!(
        stuck.contains("kubectl describe nm") && stuck.contains("status.blockers"),
        "the drain runbook must show how to read the blockers"
    );
}

/// The fields Grafana's dashboard model requires to import a dashboard and draw its panels
/// (title, uid, schemaVersion, panels with id, type, title, gridPos and targets) and a
/// datasource variable the panels use.
#[test]
fn the_dashboard_loads() {
    assert!(!dashboard_queries().is_empty());
}

/// Every dashboard query is PromQL that Prometheus' parser accepts: promtool checks each query
/// as a recording rule, with Grafana's `$__rate_interval` as 5m.
#[test]
#[ignore = "long form: needs promtool (cold build about 15 min); run with -- --include-ignored"]
fn the_dashboard_queries_are_promql() {
    dashboard_queries_are_promql(dashboard_queries());
}

/// The dashboard's queries, once its fields are checked (`$__rate_interval` as 5m).
fn dashboard_queries() -> Vec<String> {
    let d: Value = serde_json::from_str(&read(DASHBOARD)).expect("the dashboard is JSON");
    for k in ["title", "uid"] {
        assert!(d[k].as_str().is_some_and(|s| !s.is_empty()), "{k}");
    }
    assert!(
        d["schemaVersion"].as_u64().is_some_and(|v| v >= 36),
        "schemaVersion"
    );
    let vars = d["templating"]["list"].as_array().unwrap();
    assert!(
        vars.iter().any(|v| v["name"] == "datasource"
            && v["type"] == "datasource"
            && v["query"] == "prometheus"),
        "no Prometheus datasource variable"
    );
    let panels = d["panels"].as_array().unwrap();
    assert!(panels.len() >= 8, "{} panels", panels.len());
    let mut ids = BTreeSet::new();
    let mut exprs = Vec::new();
    for p in panels {
        let title = p["title"].as_str().unwrap_or_default();
        assert!(!title.is_empty(), "{p}");
        assert!(
            ids.insert(p["id"].as_u64().expect("numeric id")),
            "duplicate id in {title}"
        );
        assert!(
            matches!(
                p["type"].as_str(),
                Some("timeseries" | "stat" | "gauge" | "table" | "bargauge")
            ),
            "{title}: type {}",
            p["type"]
        );
        let g = &p["gridPos"];
        let (x, w) = (g["x"].as_u64().unwrap(), g["w"].as_u64().unwrap());
        assert!(
            x + w <= 24 && g["h"].as_u64().unwrap() > 0 && g["y"].is_u64(),
            "{title}: {g}"
        );
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title} has no query");
        let mut refs = BTreeSet::new();
        for t in targets {
            assert!(
                refs.insert(t["refId"].as_str().unwrap().to_string()),
                "{title}"
            );
            exprs.push(
                t["expr"]
                    .as_str()
                    .unwrap()
                    .replace("$__rate_interval", "5m"),
            );
        }
    }
    exprs
}

fn dashboard_queries_are_promql(exprs: Vec<String>) {
    let rules: Vec<Value> = exprs
        .iter()
        .enumerate()
        .map(|(i, e)| serde_json::json!({"record": format!("dashboard:query_{i}"), "expr": e}))
        .collect();
    let file = serde_json::json!({"groups": [{"name": "dashboard", "rules": rules}]});
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dashboard-queries.yaml");
    std::fs::write(&path, serde_yaml::to_string(&file).unwrap()).unwrap();
    let out = Command::new(promtool())
        .args(["check", "rules"])
        .arg(&path)
        .output()
        .expect("promtool runs");
    assert!(
        out.status.success(),
        "a dashboard query is not PromQL:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

use super::*;
use std::collections::BTreeSet;

/// The value of the first sample line that starts with `prefix` (name plus labels).
fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix) && l[prefix.len()..].starts_with(' '))
        .and_then(|l| l[prefix.len()..].trim().parse().ok())
}

#[test]
fn every_family_is_described() {
    let m = Metrics::new();
    // The failure family has an open label set, so it appears with its first series.
    m.reconcile_failure(ReconcileErrorKind::node);
    let text = m.encode();
    for family in [
        "# TYPE nmo_reconciles counter",
        "# TYPE nmo_reconcile_failures counter",
        "# TYPE nmo_reconcile_duration_seconds histogram",
        "# TYPE nmo_maintenances gauge",
        "# TYPE nmo_evictions counter",
        "# TYPE nmo_drain_duration_seconds histogram",
        "# TYPE nmo_admission_requests counter",
        "# TYPE nmo_admission_duration_seconds histogram",
        // Not `nmo_maintenance_blocked_pods`: a family without series is not encoded.
        "# TYPE nmo_lease_losses counter",
    ] {
        assert!(text.contains(family), "missing {family:?} in:\n{text}");
    }
    assert!(text.ends_with("# EOF\n"), "not OpenMetrics: {text}");
    assert_eq!(sample(&text, "nmo_reconciles_total"), Some(0.0), "{text}");
    assert_eq!(
        sample(&text, "nmo_evictions_total{result=\"too_many_requests\"}"),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "nmo_maintenances{phase=\"Failed\"}"),
        Some(0.0),
        "{text}"
    );
    // Label values as dashboards spell them, each series at zero from the start.
    for series in [
        "nmo_reconcile_failures_total{error=\"node_not_found\"}",
        "nmo_reconcile_failures_total{error=\"stop_after_lease_loss\"}",
        "nmo_reconcile_failures_total{error=\"timeout\"}",
        "nmo_evictions_total{result=\"blocked_pdb\"}",
        "nmo_maintenances{phase=\"Running\"}",
        "nmo_maintenances{phase=\"Succeeded\"}",
        "nmo_admission_requests_total{operation=\"UPDATE\",result=\"invalid\"}",
        "nmo_admission_duration_seconds_count{operation=\"UPDATE\"}",
    ] {
        assert_eq!(sample(&text, series), Some(0.0), "{series} in:\n{text}");
    }
    assert!(!text.contains("phase=\"\""), "{text}");
    assert_eq!(sample(&text, "nmo_lease_losses_total"), Some(0.0), "{text}");
    // No maintenance is blocked, so no blocked series at all.
    assert!(!text.contains("nmo_maintenance_blocked_pods{"), "{text}");
}

/// The metric names a PromQL expression selects: what is left of it without strings,
/// label matchers, ranges, `by`/`without` clauses, numbers, functions and operators.
fn promql_metric_names(expr: &str) -> BTreeSet<String> {
    const NOT_METRICS: &[&str] = &[
        "sum",
        "max",
        "min",
        "avg",
        "count",
        "rate",
        "increase",
        "irate",
        "delta",
        "histogram_quantile",
        "absent",
        "or",
        "and",
        "unless",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "offset",
        "by",
        "without",
        "clamp_min",
        "vector",
        "time",
        "label_replace",
        "topk",
        "bottomk",
        "max_over_time",
    ];
    let mut text = String::new();
    let (mut depth_brace, mut depth_bracket, mut quote) = (0, 0, false);
    for c in expr.chars() {
        match c {
            '"' => quote = !quote,
            _ if quote => {}
            '{' => depth_brace += 1,
            '}' => depth_brace -= 1,
            '[' => depth_bracket += 1,
            ']' => depth_bracket -= 1,
            _ if depth_brace > 0 || depth_bracket > 0 => {}
            c => text.push(c),
        }
        if matches!(c, '{' | '[' | '"') {
            text.push(' ');
        }
    }
    // `by (a, b)` and `without (a)` list labels, not metrics.
    let words: Vec<&str> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| !w.is_empty())
        .collect();
    let mut names = BTreeSet::new();
    let mut rest = text.as_str();
    let mut grouping_labels = BTreeSet::new();
    while let Some(i) = rest.find(['b', 'w']) {
        let tail = &rest[i..];
        let kw = ["by", "without"].into_iter().find(|k| {
            tail.starts_with(k)
                && tail[k.len()..].trim_start().starts_with('(')
                && !rest[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        });
        match kw {
            Some(k) => {
                let open = tail[k.len()..].find('(').unwrap() + k.len();
                let close = tail[open..].find(')').map_or(tail.len(), |c| open + c);
                for l in tail[open + 1..close].split(',') {
                    grouping_labels.insert(l.trim().to_string());
                }
                rest = &tail[close..];
            }
            None => rest = &tail[1..],
        }
    }
    for w in words {
        if w.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && !NOT_METRICS.contains(&w)
            && !grouping_labels.contains(w)
        {
            names.insert(w.to_string());
        }
    }
    names
}

#[test]
fn promql_metric_names_finds_the_selected_metrics_only() {
    assert_eq!(
        promql_metric_names("max by (nodemaintenance, node) (nmo_maintenance_blocked_pods) > 0"),
        BTreeSet::from(["nmo_maintenance_blocked_pods".to_string()])
    );
    assert_eq!(
        promql_metric_names(
            "histogram_quantile(0.9, sum by(le) (rate(a_bucket{x=\"y{z}\"}[5m]))) or absent(up{job=\"j\"} == 1)"
        ),
        BTreeSet::from(["a_bucket".to_string(), "up".to_string()])
    );
}

/// Every metric the shipped alerts and dashboard query is one this process exports (or one
/// of the two the API server and Prometheus provide), so a renamed series breaks this test
/// rather than an alert in production.
#[test]
fn alerts_and_dashboard_query_only_exported_metrics() {
    const EXTERNAL: &[&str] = &["up", "apiserver_admission_webhook_rejection_count"];
    let m = Metrics::new();
    // Families with an open label set appear with their first series.
    m.set_blockers("nm", "node", ["PodDisruptionBudget"]);
    m.set_evacuating("nm", "node", 1);
    m.reconcile_failure(ReconcileErrorKind::node);
    let text = m.encode();
    let exported: BTreeSet<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    let rule: serde_yaml::Value = serde_yaml::from_str(include_str!(
        "../../manifests/overlays/monitoring/rules/prometheusrule.yaml"
    ))
    .unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(include_str!(
        "../../manifests/overlays/monitoring/rules/dashboard.json"
    ))
    .unwrap();
    let mut exprs: Vec<String> = Vec::new();
    for g in rule["spec"]["groups"].as_sequence().unwrap() {
        for r in g["rules"].as_sequence().unwrap() {
            exprs.push(r["expr"].as_str().unwrap().to_string());
        }
    }
    for p in dashboard["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            exprs.push(t["expr"].as_str().unwrap().to_string());
        }
    }
    let mut seen = 0;
    for e in &exprs {
        let names = promql_metric_names(e);
        assert!(!names.is_empty(), "no metric found in {e}");
        for n in names {
            seen += 1;
            assert!(
                exported.contains(n.as_str()) || EXTERNAL.contains(&n.as_str()),
                "{n} (in `{e}`) is not exported:\n{text}"
            );
        }
    }
    assert!(seen >= 20, "{seen}");
}

#[test]
fn blocked_series_follow_the_blockers_and_vanish_with_them() {
    let m = Metrics::new();
    let series = |reason: &str| {
        format!(
            "nmo_maintenance_blocked_pods{{nodemaintenance=\"nm-a\",node=\"n1\",reason=\"{reason}\"}}"
        )
    };
    m.set_blockers(
        "nm-a",
        "n1",
        ["PodDisruptionBudget", "PodDisruptionBudget", "Terminating"],
    );
    m.set_blockers("nm-b", "n2", ["SomethingNew"]);
    let text = m.encode();
    assert_eq!(
        sample(&text, &series("PodDisruptionBudget")),
        Some(2.0),
        "{text}"
    );
    assert_eq!(sample(&text, &series("Terminating")), Some(1.0), "{text}");
    // An unknown reason is `Other`, never its own text.
    assert!(
        text.contains(
            "nmo_maintenance_blocked_pods{nodemaintenance=\"nm-b\",node=\"n2\",reason=\"Other\"} 1"
        ),
        "{text}"
    );
    assert!(!text.contains("SomethingNew"), "{text}");

    m.set_blockers("nm-a", "n1", ["PodDisruptionBudget"]);
    let text = m.encode();
    assert_eq!(
        sample(&text, &series("PodDisruptionBudget")),
        Some(1.0),
        "{text}"
    );
    assert_eq!(sample(&text, &series("Terminating")), None, "{text}");

    m.set_blockers("nm-a", "n1", []);
    m.forget_maintenance("nm-b");
    let text = m.encode();
    assert!(!text.contains("nmo_maintenance_blocked_pods{"), "{text}");
    m.lease_lost();
    assert_eq!(sample(&m.encode(), "nmo_lease_losses_total"), Some(1.0));
}

#[test]
fn the_evacuating_series_follows_the_count_and_vanishes_with_it() {
    let m = Metrics::new();
    let series = |nm: &str, node: &str| {
        format!("nmo_maintenance_evacuating_pods{{nodemaintenance=\"{nm}\",node=\"{node}\"}}")
    };
    m.set_evacuating("nm-a", "n1", 50);
    m.set_evacuating("nm-b", "n2", 2);
    m.set_evacuating("nm-c", "n3", 0);
    let text = m.encode();
    assert_eq!(sample(&text, &series("nm-a", "n1")), Some(50.0), "{text}");
    assert_eq!(sample(&text, &series("nm-b", "n2")), Some(2.0), "{text}");
    assert!(
        !text.contains("nm-c"),
        "no series without a migration: {text}"
    );

    m.set_evacuating("nm-a", "n1", 49);
    m.set_evacuating("nm-b", "n2", 0);
    let text = m.encode();
    assert_eq!(sample(&text, &series("nm-a", "n1")), Some(49.0), "{text}");
    assert!(!text.contains("nm-b"), "{text}");

    // The maintenance deleted: its series goes, whatever node it named.
    m.forget_maintenance("nm-a");
    let text = m.encode();
    assert!(!text.contains("nmo_maintenance_evacuating_pods{"), "{text}");
}

#[test]
fn recorded_values_show_up_in_the_encoding() {
    let m = Metrics::new();
    {
        let _t = m.reconcile();
        let _u = m.reconcile();
    }
    m.reconcile_failure(ReconcileErrorKind::node);
    m.set_maintenances(MaintenancePhase::Running, 3);
    m.set_maintenances(MaintenancePhase::Running, 2);
    m.eviction(&EvictionResult::evicted);
    m.eviction(&EvictionResult::evicted);
    m.eviction(&EvictionResult::blocked_pdb);
    m.drain_duration(12.5);
    m.admission(AdmissionOperation::CREATE, AdmissionResult::denied, 0.002);
    m.admission(AdmissionOperation::CREATE, AdmissionResult::allowed, 0.004);
    let text = m.encode();

    let expect = [
        ("nmo_reconciles_total", 2.0),
        ("nmo_reconcile_failures_total{error=\"node\"}", 1.0),
        ("nmo_reconcile_duration_seconds_count", 2.0),
        ("nmo_maintenances{phase=\"Running\"}", 2.0),
        ("nmo_evictions_total{result=\"evicted\"}", 2.0),
        ("nmo_evictions_total{result=\"blocked_pdb\"}", 1.0),
        ("nmo_drain_duration_seconds_sum", 12.5),
        ("nmo_drain_duration_seconds_count", 1.0),
        (
            "nmo_admission_requests_total{operation=\"CREATE\",result=\"denied\"}",
            1.0,
        ),
        (
            "nmo_admission_requests_total{operation=\"CREATE\",result=\"allowed\"}",
            1.0,
        ),
        (
            "nmo_admission_duration_seconds_count{operation=\"CREATE\"}",
            2.0,
        ),
    ];
    for (series, value) in expect {
        assert_eq!(sample(&text, series), Some(value), "{series} in:\n{text}");
    }
    let sum = sample(
        &text,
        "nmo_admission_duration_seconds_sum{operation=\"CREATE\"}",
    )
    .expect("admission sum");
    assert!((sum - 0.006).abs() < 1e-9, "sum {sum}");
}

#[test]
fn controller_runtime_families_have_upstream_names_labels_and_buckets() {
    let m = Metrics::new();
    m.runtime().set_max_concurrent_reconciles(32);
    let text = m.encode();
    let c = "controller=\"nodemaintenance\"";
    let q = "name=\"nodemaintenance\",controller=\"nodemaintenance\"";
    for (series, value) in [
        (
            format!("controller_runtime_reconcile_total{{{c},result=\"success\"}}"),
            0.0,
        ),
        (
            format!("controller_runtime_reconcile_total{{{c},result=\"error\"}}"),
            0.0,
        ),
        (
            format!("controller_runtime_reconcile_total{{{c},result=\"requeue\"}}"),
            0.0,
        ),
        (
            format!("controller_runtime_reconcile_total{{{c},result=\"requeue_after\"}}"),
            0.0,
        ),
        (
            format!("controller_runtime_reconcile_errors_total{{{c}}}"),
            0.0,
        ),
        (
            format!("controller_runtime_reconcile_time_seconds_count{{{c}}}"),
            0.0,
        ),
        (
            format!("controller_runtime_reconcile_time_seconds_bucket{{le=\"0.005\",{c}}}"),
            0.0,
        ),
        (
            format!("controller_runtime_reconcile_time_seconds_bucket{{le=\"60.0\",{c}}}"),
            0.0,
        ),
        (
            format!("controller_runtime_max_concurrent_reconciles{{{c}}}"),
            32.0,
        ),
        (format!("controller_runtime_active_workers{{{c}}}"), 0.0),
        (format!("workqueue_depth{{{q},priority=\"\"}}"), 0.0),
        (format!("workqueue_adds_total{{{q}}}"), 0.0),
        (
            format!("workqueue_queue_duration_seconds_count{{{q}}}"),
            0.0,
        ),
        (
            format!("workqueue_queue_duration_seconds_bucket{{le=\"1e-8\",{q}}}"),
            0.0,
        ),
        (format!("workqueue_work_duration_seconds_count{{{q}}}"), 0.0),
        (format!("workqueue_retries_total{{{q}}}"), 0.0),
    ] {
        assert_eq!(sample(&text, &series), Some(value), "{series} in:\n{text}");
    }
    // Not under our prefix.
    assert!(!text.contains("nmo_controller_runtime"), "{text}");
    assert!(!text.contains("nmo_workqueue"), "{text}");
}

#[tokio::test]
async fn a_reconcile_moves_the_controller_runtime_families() {
    use kube::runtime::controller::Action;
    use std::time::Duration;
    let m = Metrics::new();
    let rt = m.runtime();
    rt.triggered("nm-a", Duration::ZERO);
    rt.triggered("nm-a", Duration::ZERO);
    rt.triggered("nm-b", Duration::ZERO);
    assert_eq!(
        sample(
            &m.encode(),
            "workqueue_depth{name=\"nodemaintenance\",controller=\"nodemaintenance\",priority=\"\"}"
        ),
        Some(2.0)
    );
    let ok: Result<Action, ()> =
        runtime::observe_reconcile(rt, "nm-a".into(), async { Ok(Action::await_change()) }).await;
    assert!(ok.is_ok());
    let _ = runtime::observe_reconcile(rt, "nm-b".into(), async {
        Ok::<_, ()>(Action::requeue(Duration::from_secs(5)))
    })
    .await;
    let err =
        runtime::observe_reconcile(rt, "nm-c".into(), async { Err::<Action, _>("boom") }).await;
    assert!(err.is_err());
    let text = m.encode();
    let c = "controller=\"nodemaintenance\"";
    let q = "name=\"nodemaintenance\",controller=\"nodemaintenance\"";
    for (series, value) in [
        (
            format!("controller_runtime_reconcile_total{{{c},result=\"success\"}}"),
            1.0,
        ),
        (
            format!("controller_runtime_reconcile_total{{{c},result=\"requeue_after\"}}"),
            1.0,
        ),
        (
            format!("controller_runtime_reconcile_total{{{c},result=\"error\"}}"),
            1.0,
        ),
        (
            format!("controller_runtime_reconcile_errors_total{{{c}}}"),
            1.0,
        ),
        (
            format!("controller_runtime_reconcile_time_seconds_count{{{c}}}"),
            3.0,
        ),
        (format!("controller_runtime_active_workers{{{c}}}"), 0.0),
        // nm-a and nm-b by watch, nm-c unseen until it started; nm-b's requeue is not due.
        (format!("workqueue_adds_total{{{q}}}"), 3.0),
        (
            format!("workqueue_queue_duration_seconds_count{{{q}}}"),
            3.0,
        ),
        (format!("workqueue_depth{{{q},priority=\"\"}}"), 0.0),
    ] {
        assert_eq!(sample(&text, &series), Some(value), "{series} in:\n{text}");
    }
}

#[test]
fn reconcile_timer_observes_on_drop_not_before() {
    let m = Metrics::new();
    let t = m.reconcile();
    let before = m.encode();
    assert_eq!(sample(&before, "nmo_reconciles_total"), Some(1.0));
    assert_eq!(
        sample(&before, "nmo_reconcile_duration_seconds_count"),
        Some(0.0)
    );
    drop(t);
    let after = m.encode();
    assert_eq!(
        sample(&after, "nmo_reconcile_duration_seconds_count"),
        Some(1.0)
    );
}

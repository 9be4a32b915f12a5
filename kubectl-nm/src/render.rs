//! What `kubectl nm` prints: the one-line summary, the blocker table (one stable row per pod),
//! `list`'s table and the `-o json|yaml` documents.

use std::collections::BTreeMap;

use node_maintenance_operator::api::{NodeMaintenance, NodeMaintenanceStatus, PodBlocker, Stage};
use node_maintenance_operator::policy::STAGE_ANNOTATION;

use crate::failure::Failure;

/// `-o`: the objects as kubectl prints them, instead of the tables.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Output {
    /// A `v1` `List` of the NodeMaintenances, as JSON.
    Json,
    /// The same `List`, as YAML.
    Yaml,
}

/// `items` as a `v1` `List` document (kubectl's `get -o json|yaml` of several objects), each
/// with its `apiVersion` and `kind`.
pub(crate) fn objects(items: &[NodeMaintenance], format: Output) -> Result<String, Failure> {
    use kube::Resource;
    let items: Vec<serde_json::Value> = items
        .iter()
        .map(|nm| {
            let mut v = serde_json::to_value(nm).map_err(Failure::error)?;
            v["apiVersion"] = NodeMaintenance::api_version(&()).into();
            v["kind"] = NodeMaintenance::kind(&()).into();
            Ok(v)
        })
        .collect::<Result<_, Failure>>()?;
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
    match format {
        Output::Json => serde_json::to_string_pretty(&list)
            .map(|s| s + "\n")
            .map_err(Failure::error),
        Output::Yaml => serde_yaml::to_string(&list).map_err(Failure::error),
    }
}

/// The stage `list` shows: the operator's word when it has written one (the `Stage` condition's
/// reason, which follows its `--stage` default too), else what the object asks (annotation,
/// then `spec.stage`), else `Drain` (the default, today's and upstream's behaviour).
pub(crate) fn stage_shown(nm: &NodeMaintenance) -> String {
    let condition = nm.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Stage")
            .map(|c| c.reason.clone())
    });
    let asked = || {
        nm.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(STAGE_ANNOTATION).cloned())
            .or_else(|| nm.spec.knobs.stage.map(|s| s.to_string()))
    };
    condition
        .filter(|r| !r.is_empty())
        .or_else(asked)
        .unwrap_or_else(|| Stage::Drain.to_string())
}

/// `list`'s table: NAME, NODE, STAGE, PHASE, DRAIN, PENDING, REASON.
pub(crate) fn list_table(list: &[NodeMaintenance]) -> String {
    let mut rows = vec![
        [
            "NAME", "NODE", "STAGE", "PHASE", "DRAIN", "PENDING", "REASON",
        ]
        .map(String::from),
    ];
    for nm in list {
        let s = nm.status.clone().unwrap_or_default();
        rows.push([
            nm.metadata.name.clone().unwrap_or_default(),
            nm.spec.node_name.clone(),
            stage_shown(nm),
            s.phase.map_or("-".into(), |p| p.to_string()),
            s.drain_progress.map_or("-".into(), |p| format!("{p}%")),
            s.pending_pods.as_ref().map_or(0, Vec::len).to_string(),
            nm.spec.reason.clone().unwrap_or_default(),
        ]);
    }
    table(&rows)
}

/// One line: phase (with `DrainAborted` when the drain was aborted at its deadline), drain
/// progress, pods pending, the last error.
pub(crate) fn summary(s: &NodeMaintenanceStatus) -> String {
    use node_maintenance_operator::api::{ABORTED_CONDITION, DRAIN_ABORTED_REASON};
    let mut phase = s.phase.map_or("Pending".into(), |p| p.to_string());
    let aborted = s.conditions.iter().flatten().any(|c| {
        c.type_ == ABORTED_CONDITION && c.status == "True" && c.reason == DRAIN_ABORTED_REASON
    });
    if aborted {
        phase.push_str(&format!(" ({DRAIN_ABORTED_REASON})"));
    }
    let mut parts = vec![phase];
    if let Some(p) = s.drain_progress {
        parts.push(format!("drain {p}%"));
    }
    if let Some(p) = &s.pending_pods {
        parts.push(format!("{} pods pending", p.len()));
    }
    if let Some(e) = &s.last_error {
        parts.push(format!("last error: {e}"));
    }
    parts.join(", ")
}

/// What holds the whole drain before any pod: the pre-drain hooks on `nm`, by owner, read from
/// its annotations (present on upstream's CRD too, where the `PreDrainHooks` condition is
/// pruned); `None` when there is none.
pub(crate) fn hooks_line(nm: &NodeMaintenance) -> Option<String> {
    use node_maintenance_operator::policy::pre_drain_hooks::{PRE_DRAIN_HOOK_PREFIX, owners};
    let owners = owners(nm);
    if owners.is_empty() {
        return None;
    }
    let shown: Vec<String> = owners.iter().map(|o| format!("{o:?}")).collect();
    Some(format!(
        "held by pre-drain hooks of {} (PreDrainHooks): no pod is evicted until each owner \
         removes its annotation {PRE_DRAIN_HOOK_PREFIX}<owner>\n",
        shown.join(", ")
    ))
}

/// The blockers, one row per pod (POD, REASON, BUDGET, NEEDS, HAS), sorted by namespace and
/// name, so the same facts always give the same rows whatever order the status lists them in.
/// A pod listed twice keeps its first entry, with the budget's figures of a later one when the
/// first has none (the budget is what holds it).
pub(crate) fn blocker_rows(s: &NodeMaintenanceStatus) -> Vec<[String; 5]> {
    let mut by_pod: BTreeMap<(&str, &str), PodBlocker> = BTreeMap::new();
    for b in s.blockers.as_deref().unwrap_or_default() {
        by_pod
            .entry((&b.namespace, &b.name))
            .and_modify(|kept| {
                if kept.pod_disruption_budget.is_none() && b.pod_disruption_budget.is_some() {
                    kept.pod_disruption_budget
                        .clone_from(&b.pod_disruption_budget);
                    kept.desired_healthy = b.desired_healthy;
                    kept.current_healthy = b.current_healthy;
                }
            })
            .or_insert_with(|| b.clone());
    }
    let dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    by_pod
        .into_values()
        .map(|b| {
            [
                // A VolumeAttachment still on the node (waitForVolumeDetach) has no namespace.
                match b.namespace.as_str() {
                    "" => format!("volumeattachment/{}", b.name),
                    ns => format!("{ns}/{}", b.name),
                },
                b.reason,
                dash(b.pod_disruption_budget),
                dash(b.desired_healthy.map(|v| v.to_string())),
                dash(b.current_healthy.map(|v| v.to_string())),
            ]
        })
        .collect()
}

/// The blockers as a table (POD, REASON, BUDGET, NEEDS, HAS, DUE; rows as [`blocker_rows`]),
/// DUE being the drain's deadline and what happens then (`onTimeout`); "no blockers" when there
/// are none.
pub(crate) fn blocker_table(s: &NodeMaintenanceStatus) -> String {
    table_of(blocker_rows(s), s)
}

/// `rows` (as [`blocker_rows`]) as [`blocker_table`] prints them, DUE read from `s`.
pub(crate) fn table_of(rows: Vec<[String; 5]>, s: &NodeMaintenanceStatus) -> String {
    if rows.is_empty() {
        return "no blockers\n".into();
    }
    let due = match (&s.drain_deadline, &s.on_timeout) {
        (Some(t), Some(o)) => format!("{} ({o:?})", t.0),
        (Some(t), None) => t.0.to_string(),
        _ => "-".into(),
    };
    let mut table_rows = vec![["POD", "REASON", "BUDGET", "NEEDS", "HAS", "DUE"].map(String::from)];
    for [pod, reason, budget, needs, has] in rows {
        table_rows.push([pod, reason, budget, needs, has, due.clone()]);
    }
    table(&table_rows)
}

/// One line per pod whose blocker is an active eviction responder (`EvictionResponder`,
/// KEP-4563): the pod, the responder's name, its message and when it expects to be done, e.g.
/// `ns/web-0: responder example.com/mover: moving the workload (expected by
/// 2026-01-01T00:10:00Z)`; sorted by pod; empty when there is none.
pub(crate) fn responder_lines(s: &NodeMaintenanceStatus) -> String {
    let mut lines: Vec<String> = s
        .blockers
        .as_deref()
        .unwrap_or_default()
        .iter()
        .filter_map(|b| {
            let responder = b.responder.as_deref()?;
            let mut line = format!("{}/{}: responder {responder}", b.namespace, b.name);
            if let Some(m) = &b.message {
                line.push_str(&format!(": {m}"));
            }
            if let Some(t) = &b.expected_completion_time {
                line.push_str(&format!(" (expected by {t})"));
            }
            Some(line + "\n")
        })
        .collect();
    lines.sort();
    lines.dedup();
    lines.concat()
}

/// The blocker reasons of the `surge` knob (`docs/drain-contract.md` "Surge"): the pod's
/// Deployment restarted, unable to surge, or its rollout stuck.
pub(crate) const SURGE_REASONS: [&str; 3] = ["Surging", "CannotSurge", "SurgeStuck"];

/// One line per pod whose blocker is the `surge` knob's ([`SURGE_REASONS`]): the pod and the
/// operator's message, which names the Deployment and why, e.g. `ns/web-0: not evicted (its
/// budget allows no disruption): Deployment ns/web restarted for this maintenance ...`; sorted
/// by pod; empty when there is none.
pub(crate) fn surge_lines(s: &NodeMaintenanceStatus) -> String {
    let mut lines: Vec<String> = s
        .blockers
        .as_deref()
        .unwrap_or_default()
        .iter()
        .filter(|b| SURGE_REASONS.contains(&b.reason.as_str()))
        .map(|b| {
            let m = b.message.as_deref().unwrap_or(&b.reason);
            format!("{}/{}: {m}\n", b.namespace, b.name)
        })
        .collect();
    lines.sort();
    lines.dedup();
    lines.concat()
}

/// Rows as kubectl prints tables: columns left-aligned, three spaces apart.
pub(crate) fn table<const N: usize>(rows: &[[String; N]]) -> String {
    let widths: Vec<usize> = (0..N)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(line.join("   ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_shows_the_operators_stage_else_the_asked_one_else_drain() {
        let nm = |v: serde_json::Value| serde_json::from_value::<NodeMaintenance>(v).unwrap();
        let base = serde_json::json!({"apiVersion": "nodemaintenance.medik8s.io/v1beta1",
            "kind": "NodeMaintenance", "metadata": {"name": "m"}, "spec": {"nodeName": "n1"}});
        assert_eq!(stage_shown(&nm(base.clone())), "Drain");
        let mut asked = base.clone();
        asked["spec"]["stage"] = "Cordon".into();
        assert_eq!(stage_shown(&nm(asked.clone())), "Cordon");
        asked["metadata"]["annotations"] = serde_json::json!({STAGE_ANNOTATION: "Idle"});
        assert_eq!(stage_shown(&nm(asked.clone())), "Idle");
        asked["status"] = serde_json::json!({"conditions": [{"type": "Stage", "status": "True",
            "reason": "Preflight", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        assert_eq!(stage_shown(&nm(asked)), "Preflight");
    }

    #[test]
    fn why_names_the_pre_drain_hooks_that_hold_the_drain() {
        let nm = |v: serde_json::Value| -> NodeMaintenance { serde_json::from_value(v).unwrap() };
        let mut v = serde_json::json!({"metadata": {"name": "nm"}, "spec": {"nodeName": "n1"}});
        assert_eq!(hooks_line(&nm(v.clone())), None);
        v["metadata"]["annotations"] = serde_json::json!({
            "pre-drain.hook.nodemaintenance.medik8s.io/rook-ceph": "",
            "pre-drain.hook.nodemaintenance.medik8s.io/backup": "",
        });
        assert_eq!(
            hooks_line(&nm(v)).as_deref(),
            Some(
                "held by pre-drain hooks of \"backup\", \"rook-ceph\" (PreDrainHooks): no pod is \
                 evicted until each owner removes its annotation \
                 pre-drain.hook.nodemaintenance.medik8s.io/<owner>\n"
            )
        );
    }

    #[test]
    fn the_blocker_table_names_the_budget_and_what_it_needs_and_has() {
        let status: NodeMaintenanceStatus = serde_json::from_value(serde_json::json!({
            "blockers": [{"namespace": "ns", "name": "web-1", "reason": "PodDisruptionBudget",
                          "podDisruptionBudget": "web", "desiredHealthy": 2, "currentHealthy": 2},
                         {"namespace": "ns", "name": "db-0", "reason": "Terminating"}],
            "drainDeadline": "2026-01-01T00:00:00Z", "onTimeout": "Fail"
        }))
        .unwrap();
        assert_eq!(
            blocker_table(&status),
            "POD        REASON                BUDGET   NEEDS   HAS   DUE\n\
             ns/db-0    Terminating           -        -       -     2026-01-01T00:00:00Z (Fail)\n\
             ns/web-1   PodDisruptionBudget   web      2       2     2026-01-01T00:00:00Z (Fail)\n"
        );
        assert_eq!(
            blocker_table(&NodeMaintenanceStatus::default()),
            "no blockers\n"
        );
    }

    #[test]
    fn why_lists_daemon_set_pods_waiting_their_turn() {
        // `daemonSets: EvictLast`: DaemonSet pods wait for the ordinary pods, one row each, as
        // the other staged pods.
        let status: NodeMaintenanceStatus = serde_json::from_value(serde_json::json!({
            "blockers": [{"namespace": "logs", "name": "fluent-bit-x2", "reason": "DaemonSetLast",
                          "message": "DaemonSet pod (daemonSets: EvictLast): evicted once every other evictable pod has left the node, before the system-critical pods"},
                         {"namespace": "ns", "name": "web-0", "reason": "Terminating"}]
        }))
        .unwrap();
        assert_eq!(
            blocker_table(&status),
            "POD                  REASON          BUDGET   NEEDS   HAS   DUE\n\
             logs/fluent-bit-x2   DaemonSetLast   -        -       -     -\n\
             ns/web-0             Terminating     -        -       -     -\n"
        );
    }

    #[test]
    fn why_names_the_active_eviction_responder_its_message_and_expected_time() {
        let status: NodeMaintenanceStatus = serde_json::from_value(serde_json::json!({
            "blockers": [{"namespace": "ns", "name": "web-1", "reason": "EvictionResponder",
                          "responder": "example.com/responder", "message": "moving the workload",
                          "expectedCompletionTime": "2026-01-01T00:10:00Z",
                          "podDisruptionBudget": "web", "desiredHealthy": 1, "currentHealthy": 1},
                         {"namespace": "ns", "name": "db-0", "reason": "Terminating"}]
        }))
        .unwrap();
        assert_eq!(
            responder_lines(&status),
            "ns/web-1: responder example.com/responder: moving the workload \
             (expected by 2026-01-01T00:10:00Z)\n"
        );
        assert!(blocker_table(&status).contains("ns/web-1   EvictionResponder"));
        assert_eq!(responder_lines(&NodeMaintenanceStatus::default()), "");
    }

    #[test]
    fn blocker_rows_are_one_per_pod_in_a_stable_order() {
        let status = |v: serde_json::Value| -> NodeMaintenanceStatus {
            serde_json::from_value(serde_json::json!({ "blockers": v })).unwrap()
        };
        let a = serde_json::json!({"namespace": "ns", "name": "a", "reason": "PodDisruptionBudget",
            "podDisruptionBudget": "g", "desiredHealthy": 2, "currentHealthy": 2});
        let b = serde_json::json!({"namespace": "ns", "name": "b", "reason": "PodDisruptionBudget",
            "podDisruptionBudget": "g", "desiredHealthy": 2, "currentHealthy": 2});
        let one = blocker_rows(&status(serde_json::json!([a, b])));
        assert_eq!(one, blocker_rows(&status(serde_json::json!([b, a]))));
        assert_eq!(one.len(), 2);
        let twice = blocker_rows(&status(serde_json::json!([
            {"namespace": "ns", "name": "a", "reason": "Terminating"}, a
        ])));
        assert_eq!(twice.len(), 1);
        assert_eq!(twice[0][2], "g", "{twice:?}");
    }

    #[test]
    fn the_summary_names_an_abort_at_the_deadline() {
        let s: NodeMaintenanceStatus = serde_json::from_value(serde_json::json!({
            "phase": "Failed", "lastError": "the drain did not finish; onTimeout Abort",
            "conditions": [{"type": "Aborted", "status": "True", "reason": "DrainAborted",
                            "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}))
        .unwrap();
        assert_eq!(
            summary(&s),
            "Failed (DrainAborted), last error: the drain did not finish; onTimeout Abort"
        );
        let ended: NodeMaintenanceStatus = serde_json::from_value(serde_json::json!({
            "phase": "Running",
            "conditions": [{"type": "Aborted", "status": "False", "reason": "AbortEnded",
                            "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}))
        .unwrap();
        assert_eq!(summary(&ended), "Running");
    }

    #[test]
    fn why_names_the_surged_deployment_and_why_it_cannot_surge() {
        let status: NodeMaintenanceStatus = serde_json::from_value(serde_json::json!({
            "blockers": [
                {"namespace": "ns", "name": "web-1", "reason": "CannotSurge",
                 "message": "Deployment ns/web cannot surge: its rollingUpdate.maxSurge is 0"},
                {"namespace": "ns", "name": "api-0", "reason": "Surging",
                 "message": "Deployment ns/api restarted for this maintenance"},
                {"namespace": "ns", "name": "db-0", "reason": "PodDisruptionBudget",
                 "message": "StatefulSet pods cannot surge"}]
        }))
        .unwrap();
        assert_eq!(
            surge_lines(&status),
            "ns/api-0: Deployment ns/api restarted for this maintenance\n\
             ns/web-1: Deployment ns/web cannot surge: its rollingUpdate.maxSurge is 0\n"
        );
        let rows = blocker_rows(&status);
        assert_eq!(rows[0][1], "Surging");
        assert_eq!(surge_lines(&NodeMaintenanceStatus::default()), "");
    }

    #[test]
    fn a_volume_attachment_blocker_is_shown_as_the_attachment() {
        let status: NodeMaintenanceStatus = serde_json::from_value(serde_json::json!({
            "blockers": [{"namespace": "", "name": "csi-123", "reason": "VolumeAttached",
                          "message": "VolumeAttachment csi-123 of PersistentVolume pv-a"}]
        }))
        .unwrap();
        let rows = blocker_rows(&status);
        assert_eq!(rows[0][0], "volumeattachment/csi-123");
        assert_eq!(rows[0][1], "VolumeAttached");
    }

    #[test]
    fn objects_are_a_list_with_kind_and_api_version() {
        let nm: NodeMaintenance = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "m"}, "spec": {"nodeName": "n1"}}))
        .unwrap();
        let json: serde_json::Value =
            serde_json::from_str(&objects(std::slice::from_ref(&nm), Output::Json).unwrap())
                .unwrap();
        assert_eq!(json["kind"], "List");
        assert_eq!(json["items"][0]["kind"], "NodeMaintenance");
        assert_eq!(
            json["items"][0]["apiVersion"],
            "nodemaintenance.medik8s.io/v1beta1"
        );
        let yaml: serde_json::Value =
            serde_yaml::from_str(&objects(&[nm], Output::Yaml).unwrap()).unwrap();
        assert_eq!(yaml, json);
    }
}

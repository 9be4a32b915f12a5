use super::*;
use serde_json::json;

// Test-only ways into the node's state, kept out of the production code.
impl NodeMaintenanceState {
    /// True when a holder is recorded and the node is cordoned, carries both maintenance taints
    /// and is excluded from remediation, i.e. entry needs no node change except possibly the
    /// reason annotation.
    pub(crate) fn complete(&self) -> bool {
        self.holder.is_some()
            && self.cordoned
            && self.drain_taint
            && self.unschedulable_taint
            && self.excluded
    }
}

impl<'a> Claimant<'a> {
    /// A claimant known by name only (its record on the node matches any uid).
    pub(crate) fn named(name: &'a str) -> Self {
        Self { name, uid: None }
    }
}

const NM: &str = "nm-1";

fn node(value: Value) -> Node {
    let mut base = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "worker-1", "resourceVersion": "100"},
    });
    json_patch::merge(&mut base, &value);
    serde_json::from_value(base).expect("valid node")
}

/// Applies a merge patch the way the API server does (RFC 7386) and bumps resourceVersion.
fn apply(n: &Node, patch: &Value) -> Node {
    let mut doc = serde_json::to_value(n).unwrap();
    json_patch::merge(&mut doc, patch);
    let rv: u64 = n
        .metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap();
    doc["metadata"]["resourceVersion"] = json!((rv + 1).to_string());
    serde_json::from_value(doc).unwrap()
}

fn enter_patch(n: &Node, holder: &str, reason: Option<&str>) -> (Value, Vec<&'static str>) {
    match plan_enter(n, holder, reason) {
        EnterPlan::Apply { patch, repaired } => (patch, repaired),
        other => panic!("expected Apply, got {other:?}"),
    }
}

fn exit_patch(n: &Node, holder: &str) -> (Value, bool) {
    match plan_exit(n, holder) {
        ExitPlan::Apply { patch, uncordon } => (patch, uncordon),
        other => panic!("expected Apply, got {other:?}"),
    }
}

fn taint_refs(n: &Node) -> Vec<(String, String)> {
    node_taints(n)
        .iter()
        .map(|t| (t.key.clone(), t.effect.clone()))
        .collect()
}

fn pair(key: &str, effect: &str) -> (String, String) {
    (key.to_owned(), effect.to_owned())
}

#[test]
fn first_entry_on_clean_node_writes_everything_in_one_patch() {
    let clean = node(json!({"spec": {}}));
    let (patch, repaired) = enter_patch(&clean, NM, Some("kernel upgrade"));
    assert!(
        repaired.is_empty(),
        "first entry repairs nothing: {repaired:?}"
    );
    assert_eq!(
        patch,
        json!({
            "metadata": {
                "resourceVersion": "100",
                "labels": {EXCLUDE_LABEL: "true"},
                "annotations": {
                    HOLDER_ANNOTATION: NM,
                    PRIOR_STATE_ANNOTATION:
                        r#"{"unschedulable":false,"taints":[],"excludeLabel":false}"#,
                    REASON_ANNOTATION: "kernel upgrade",
                },
            },
            "spec": {
                "unschedulable": true,
                "taints": [
                    {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"},
                    {"key": DRAIN_TAINT_KEY, "effect": "NoSchedule"},
                ],
            },
        })
    );
    let entered = apply(&clean, &patch);
    let state = observe(&entered);
    assert!(state.complete(), "{state:?}");
    assert_eq!(state.holder.as_deref(), Some(NM));
    assert_eq!(
        plan_enter(&entered, NM, Some("kernel upgrade")),
        EnterPlan::Unchanged
    );
    let d = decide_enter(&clean, Claimant::named(NM), None, &|_, _| true);
    assert!(d.first && d.cordons && !d.adopted);
}

#[test]
fn upstream_taint_order_maintenance_taints_first_then_others_in_order() {
    let n = node(json!({"spec": {"taints": [
        {"key": "a", "effect": "NoExecute", "value": "x"},
        {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule", "timeAdded": "2024-01-01T00:00:00Z"},
        {"key": "b", "effect": "PreferNoSchedule"},
        {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoExecute"},
    ]}}));
    let (patch, _) = enter_patch(&n, NM, None);
    assert_eq!(
        patch["spec"]["taints"],
        json!([
            {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"},
            {"key": DRAIN_TAINT_KEY, "effect": "NoSchedule"},
            {"key": "a", "effect": "NoExecute", "value": "x"},
            {"key": "b", "effect": "PreferNoSchedule"},
            {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoExecute"},
        ])
    );
}

#[test]
fn entry_over_admin_cordon_and_exit_keeps_cordon_and_preexisting_taints() {
    let original = node(json!({
        "metadata": {"labels": {"kubernetes.io/hostname": "worker-1"}},
        "spec": {"unschedulable": true, "taints": [
            {"key": "dummy-key", "effect": "PreferNoSchedule", "value": "dummy"},
            {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"},
        ]},
    }));
    let (patch, repaired) = enter_patch(&original, NM, None);
    assert!(repaired.is_empty());
    assert!(
        patch["spec"].get("unschedulable").is_none(),
        "already cordoned: {patch}"
    );
    assert!(!decide_enter(&original, Claimant::named(NM), None, &|_, _| true).cordons);
    let prior: PriorState = serde_json::from_str(
        patch["metadata"]["annotations"][PRIOR_STATE_ANNOTATION]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        prior,
        PriorState {
            unschedulable: true,
            taints: vec![TaintRef {
                key: UNSCHEDULABLE_TAINT_KEY.into(),
                effect: "NoSchedule".into()
            }],
            exclude_label: false,
            exclude_label_value: None,
        }
    );
    let entered = apply(&original, &patch);
    assert!(observe(&entered).complete());

    let (patch, uncordon) = exit_patch(&entered, NM);
    assert!(!uncordon, "admin cordon must survive exit");
    assert!(patch["spec"].get("unschedulable").is_none(), "{patch}");
    let exited = apply(&entered, &patch);
    let state = observe(&exited);
    assert!(state.cordoned);
    assert!(state.unschedulable_taint);
    assert!(!state.drain_taint);
    assert!(!state.excluded);
    assert_eq!(state.holder, None);
    assert_eq!(
        taint_refs(&exited),
        vec![
            pair(UNSCHEDULABLE_TAINT_KEY, "NoSchedule"),
            pair("dummy-key", "PreferNoSchedule"),
        ]
    );
    assert_eq!(node_taints(&exited)[1].value.as_deref(), Some("dummy"));
    assert_eq!(
        exited
            .metadata
            .annotations
            .as_ref()
            .map(|a| a.len())
            .unwrap_or(0),
        0
    );
    assert_eq!(
        exited.metadata.labels, original.metadata.labels,
        "only the exclude label we added is removed"
    );
}

#[test]
fn drift_repair_lists_what_was_repaired_and_keeps_prior_state() {
    let original = node(json!({"spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}}));
    let (patch, _) = enter_patch(&original, NM, Some("r"));
    let entered = apply(&original, &patch);
    let prior_before = annotation(&entered, PRIOR_STATE_ANNOTATION)
        .unwrap()
        .to_owned();

    // An admin uncordons, strips our drain taint and the label.
    let drifted = apply(
        &entered,
        &json!({
            "metadata": {"labels": {EXCLUDE_LABEL: null}},
            "spec": {"unschedulable": false, "taints": [
                {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"},
                {"key": "x", "effect": "NoSchedule"},
            ]},
        }),
    );
    let (patch, repaired) = enter_patch(&drifted, NM, Some("r"));
    assert_eq!(
        repaired,
        vec![
            REPAIRED_CORDON,
            REPAIRED_DRAIN_TAINT,
            REPAIRED_EXCLUDE_LABEL
        ]
    );
    assert!(
        patch["metadata"].get("annotations").is_none(),
        "prior state untouched: {patch}"
    );
    assert_eq!(
        patch["metadata"]["resourceVersion"],
        json!("102"),
        "the re-read version"
    );
    let repaired_node = apply(&drifted, &patch);
    assert!(observe(&repaired_node).complete());
    assert_eq!(
        annotation(&repaired_node, PRIOR_STATE_ANNOTATION),
        Some(prior_before.as_str())
    );
    assert!(!decide_enter(&drifted, Claimant::named(NM), Some("r"), &|_, _| true).first);

    // Only the taint list drifted.
    let untainted = apply(
        &entered,
        &json!({"spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}}),
    );
    let (_, repaired) = enter_patch(&untainted, NM, Some("r"));
    assert_eq!(
        repaired,
        vec![REPAIRED_DRAIN_TAINT, REPAIRED_UNSCHEDULABLE_TAINT]
    );
}

#[test]
fn reason_change_alone_updates_only_the_annotation() {
    let original = node(json!({}));
    let (patch, _) = enter_patch(&original, NM, Some("old"));
    let entered = apply(&original, &patch);
    let (patch, repaired) = enter_patch(&entered, NM, Some("new"));
    assert!(repaired.is_empty());
    assert_eq!(
        patch,
        json!({"metadata": {"resourceVersion": "101", "annotations": {REASON_ANNOTATION: "new"}}})
    );
    let (patch, _) = enter_patch(&entered, NM, None);
    assert_eq!(
        patch["metadata"]["annotations"],
        json!({REASON_ANNOTATION: null})
    );
    assert_eq!(plan_enter(&entered, NM, Some("old")), EnterPlan::Unchanged);
    // A reason of any length is copied cut to its bound, and then stays unchanged.
    let huge = "r".repeat(1 << 20);
    let (patch, _) = enter_patch(&entered, NM, Some(&huge));
    let copied = patch["metadata"]["annotations"][REASON_ANNOTATION]
        .as_str()
        .unwrap();
    assert!(copied.len() <= crate::bounds::MAX_REASON_ANNOTATION && copied.starts_with("rrr"));
    let cut = apply(&entered, &patch);
    assert_eq!(plan_enter(&cut, NM, Some(&huge)), EnterPlan::Unchanged);
}

#[test]
fn node_held_by_another_maintenance_is_left_alone() {
    let n = node(json!({"metadata": {"annotations": {HOLDER_ANNOTATION: "other-nm"}}}));
    assert_eq!(
        plan_enter(&n, NM, None),
        EnterPlan::HeldBy("other-nm".into())
    );
    assert_eq!(
        plan_exit(&n, NM),
        ExitPlan::NotHeld(Some("other-nm".into()))
    );
}

#[test]
fn exit_when_not_held_writes_nothing() {
    // Looks like maintenance but carries no holder: we can't prove we added any of it.
    let n = node(json!({
        "metadata": {
            "labels": {EXCLUDE_LABEL: "true"},
            "annotations": {PRIOR_STATE_ANNOTATION: r#"{"unschedulable":false,"taints":[],"excludeLabel":false}"#},
        },
        "spec": {"unschedulable": true, "taints": [{"key": DRAIN_TAINT_KEY, "effect": "NoSchedule"}]},
    }));
    assert_eq!(plan_exit(&n, NM), ExitPlan::NotHeld(None));
    assert_eq!(plan_exit(&node(json!({})), NM), ExitPlan::NotHeld(None));
}

#[test]
fn exit_without_prior_state_but_with_our_holder_removes_everything() {
    let n = node(json!({
        "metadata": {
            "labels": {EXCLUDE_LABEL: "true"},
            "annotations": {HOLDER_ANNOTATION: NM, PRIOR_STATE_ANNOTATION: "{not json"},
        },
        "spec": {"unschedulable": true, "taints": [
            {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"},
            {"key": DRAIN_TAINT_KEY, "effect": "NoSchedule"},
        ]},
    }));
    let (patch, uncordon) = exit_patch(&n, NM);
    assert!(uncordon);
    assert_eq!(
        patch,
        json!({
            "metadata": {
                "resourceVersion": "100",
                "labels": {EXCLUDE_LABEL: null},
                "annotations": {HOLDER_ANNOTATION: null, PRIOR_STATE_ANNOTATION: null},
            },
            "spec": {"unschedulable": false, "taints": null},
        })
    );
}

#[test]
fn exit_removes_the_label_only_when_we_added_it() {
    let labelled = node(json!({"metadata": {"labels": {EXCLUDE_LABEL: "true"}}}));
    let entered = apply(&labelled, &enter_patch(&labelled, NM, None).0);
    let (patch, uncordon) = exit_patch(&entered, NM);
    assert!(uncordon);
    assert!(patch["metadata"].get("labels").is_none(), "{patch}");
    assert!(observe(&apply(&entered, &patch)).excluded);

    let unlabelled = node(json!({}));
    let entered = apply(&unlabelled, &enter_patch(&unlabelled, NM, None).0);
    let (patch, _) = exit_patch(&entered, NM);
    assert_eq!(patch["metadata"]["labels"], json!({EXCLUDE_LABEL: null}));

    let other_value = node(json!({"metadata": {"labels": {EXCLUDE_LABEL: "false"}}}));
    let entered = apply(&other_value, &enter_patch(&other_value, NM, None).0);
    assert!(observe(&entered).excluded);
    let (patch, _) = exit_patch(&entered, NM);
    assert_eq!(patch["metadata"]["labels"], json!({EXCLUDE_LABEL: "false"}));

    // Someone changed the label during maintenance: not ours to remove any more.
    let changed = apply(
        &entered,
        &json!({"metadata": {"labels": {EXCLUDE_LABEL: "custom"}}}),
    );
    let (patch, _) = exit_patch(&changed, NM);
    assert!(patch["metadata"].get("labels").is_none(), "{patch}");
}

#[test]
fn node_left_in_maintenance_by_upstream_nmo_is_adopted_and_exit_restores_like_upstream() {
    let upstream = node(json!({
        "metadata": {"labels": {EXCLUDE_LABEL: "true"}},
        "spec": {"unschedulable": true, "taints": [
            {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"},
            {"key": DRAIN_TAINT_KEY, "effect": "NoSchedule"},
            {"key": "keep", "effect": "NoExecute"},
        ]},
    }));
    let decision = decide_enter(&upstream, Claimant::named(NM), None, &|_, _| true);
    assert!(decision.first && decision.adopted && !decision.cordons);
    let EnterPlan::Apply { patch, repaired } = decision.plan else {
        panic!("expected Apply");
    };
    assert!(repaired.is_empty());
    assert!(
        patch.get("spec").is_none(),
        "nothing to change on the node: {patch}"
    );
    let entered = apply(&upstream, &patch);
    let (patch, uncordon) = exit_patch(&entered, NM);
    assert!(uncordon);
    let exited = apply(&entered, &patch);
    let state = observe(&exited);
    assert!(!state.cordoned && !state.drain_taint && !state.unschedulable_taint && !state.excluded);
    assert_eq!(taint_refs(&exited), vec![pair("keep", "NoExecute")]);
}

#[test]
fn every_patch_carries_the_resource_version() {
    let n = node(json!({"metadata": {"resourceVersion": "4711"}}));
    let (p, _) = enter_patch(&n, NM, None);
    assert_eq!(p["metadata"]["resourceVersion"], json!("4711"));
    let entered = apply(&n, &p);
    let (p, _) = enter_patch(&entered, NM, Some("why"));
    assert_eq!(p["metadata"]["resourceVersion"], json!("4712"));
    let (p, _) = exit_patch(&entered, NM);
    assert_eq!(p["metadata"]["resourceVersion"], json!("4712"));
    let p = plan_transfer(&entered, NM, "nm-2").unwrap();
    assert_eq!(p["metadata"]["resourceVersion"], json!("4712"));
}

#[test]
fn transfer_rewrites_only_the_holder() {
    let original = node(json!({"spec": {"unschedulable": true}}));
    let entered = apply(&original, &enter_patch(&original, NM, Some("r")).0);
    let patch = plan_transfer(&entered, NM, "nm-2").unwrap();
    assert_eq!(
        patch,
        json!({"metadata": {"resourceVersion": "101", "annotations": {HOLDER_ANNOTATION: "nm-2"}}})
    );
    let moved = apply(&entered, &patch);
    assert_eq!(
        plan_enter(&moved, NM, Some("r")),
        EnterPlan::HeldBy("nm-2".into())
    );
    assert_eq!(plan_enter(&moved, "nm-2", Some("r")), EnterPlan::Unchanged);
    // The prior state travels with the node: the admin cordon still survives exit.
    let (_, uncordon) = exit_patch(&moved, "nm-2");
    assert!(!uncordon);
    assert_eq!(plan_transfer(&moved, NM, "nm-3"), None);
    assert_eq!(plan_transfer(&moved, "nm-2", "nm-2"), None);
}

/// Enter then exit restores every combination of prior cordon, pre-existing unschedulable
/// taint, exclude label value and foreign taint placement (compared on key and effect; the
/// pre-existing maintenance taint may move to the front, as upstream's entry puts it there).
#[test]
fn enter_then_exit_restores_the_prior_state_for_every_combination() {
    let labels = [None, Some("true"), Some("false"), Some("")];
    for cordoned in [false, true] {
        for unsched_taint in [false, true] {
            for label_value in labels {
                for foreign_first in [false, true] {
                    let mut taints = Vec::new();
                    let foreign = json!({"key": "f", "effect": "NoExecute", "value": "v"});
                    if foreign_first {
                        taints.push(foreign.clone());
                    }
                    if unsched_taint {
                        taints
                            .push(json!({"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"}));
                    }
                    if !foreign_first {
                        taints.push(foreign);
                    }
                    let mut labels = Map::new();
                    labels.insert("keep".into(), json!("me"));
                    if let Some(v) = label_value {
                        labels.insert(EXCLUDE_LABEL.into(), json!(v));
                    }
                    let original = node(json!({
                        "metadata": {"labels": labels, "annotations": {"other": "x"}},
                        "spec": {"unschedulable": cordoned, "taints": taints},
                    }));
                    let case = format!(
                        "cordoned={cordoned} unsched_taint={unsched_taint} label={label_value:?} foreign_first={foreign_first}"
                    );
                    let (patch, _) = enter_patch(&original, NM, Some("r"));
                    let entered = apply(&original, &patch);
                    assert!(observe(&entered).complete(), "{case}");
                    assert_eq!(
                        plan_enter(&entered, NM, Some("r")),
                        EnterPlan::Unchanged,
                        "{case}"
                    );
                    let (patch, uncordon) = exit_patch(&entered, NM);
                    assert_eq!(uncordon, !cordoned, "{case}");
                    let exited = apply(&entered, &patch);
                    assert_eq!(observe(&exited).cordoned, cordoned, "{case}");
                    let mut before = taint_refs(&original);
                    let mut after = taint_refs(&exited);
                    before.sort();
                    after.sort();
                    assert_eq!(after, before, "{case}");
                    assert_eq!(exited.metadata.labels, original.metadata.labels, "{case}");
                    assert_eq!(
                        exited.metadata.annotations, original.metadata.annotations,
                        "{case}"
                    );
                }
            }
        }
    }
}

/// Issue 8 item 2: an owner that releases a mark recorded as pre-existing while we hold the
/// node is heard: the mark is re-applied for the maintenance, and the end no longer restores it.
#[test]
fn a_released_pre_existing_mark_is_reapplied_and_forgotten_by_the_prior_state() {
    // An admin cordon (with the taint the node lifecycle controller adds for it) and a
    // label someone else set.
    let original = node(json!({
        "metadata": {"labels": {EXCLUDE_LABEL: "true"}},
        "spec": {"unschedulable": true, "taints": [
            {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"},
            {"key": "x", "effect": "NoExecute"},
        ]},
    }));
    let entered = apply(&original, &enter_patch(&original, NM, None).0);
    assert_eq!(
        prior_state(&entered).unwrap(),
        PriorState {
            unschedulable: true,
            taints: vec![TaintRef {
                key: UNSCHEDULABLE_TAINT_KEY.into(),
                effect: NO_SCHEDULE.into()
            }],
            exclude_label: true,
            exclude_label_value: None,
        }
    );
    // `kubectl uncordon` (which also drops the unschedulable taint) and the label's owner
    // removes it.
    let released = apply(
        &entered,
        &json!({
            "metadata": {"labels": {EXCLUDE_LABEL: null}},
            "spec": {"unschedulable": false, "taints": [
                {"key": DRAIN_TAINT_KEY, "effect": "NoSchedule"},
                {"key": "x", "effect": "NoExecute"},
            ]},
        }),
    );
    let (patch, repaired) = enter_patch(&released, NM, None);
    assert_eq!(
        repaired,
        vec![
            REPAIRED_CORDON,
            REPAIRED_UNSCHEDULABLE_TAINT,
            REPAIRED_EXCLUDE_LABEL
        ]
    );
    let reentered = apply(&released, &patch);
    assert!(observe(&reentered).complete(), "still enforced: {patch}");
    assert_eq!(prior_state(&reentered).unwrap(), PriorState::default());
    assert_eq!(plan_enter(&reentered, NM, None), EnterPlan::Unchanged);
    let (patch, uncordon) = exit_patch(&reentered, NM);
    assert!(uncordon);
    let exited = apply(&reentered, &patch);
    let state = observe(&exited);
    assert!(!state.cordoned && !state.unschedulable_taint && !state.drain_taint);
    assert!(!state.excluded && label(&exited, EXCLUDE_LABEL).is_none());
    assert_eq!(taint_refs(&exited), vec![pair("x", "NoExecute")]);

    // The label's owner sets another value instead: that value is what the end restores.
    let relabelled = apply(
        &entered,
        &json!({"metadata": {"labels": {EXCLUDE_LABEL: "false"}}}),
    );
    let reentered = apply(&relabelled, &enter_patch(&relabelled, NM, None).0);
    let exited = apply(&reentered, &exit_patch(&reentered, NM).0);
    assert_eq!(label(&exited, EXCLUDE_LABEL), Some("false"));
    assert!(observe(&exited).cordoned, "the cordon owner did not let go");

    // A drift of a mark that was ours changes nothing in the prior state.
    let clean = node(json!({}));
    let entered = apply(&clean, &enter_patch(&clean, NM, None).0);
    let drifted = apply(&entered, &json!({"spec": {"unschedulable": false}}));
    let (patch, _) = enter_patch(&drifted, NM, None);
    assert!(patch["metadata"].get("annotations").is_none(), "{patch}");
}

fn claimant<'a>(name: &'a str, uid: &'a str) -> Claimant<'a> {
    Claimant {
        name,
        uid: Some(uid),
    }
}

/// Issue 8 item 10: the record of a vanished holder is reused only while the node still
/// carries the marks it describes; otherwise the prior state is recorded afresh.
#[test]
fn a_record_of_a_vanished_holder_is_reused_only_while_its_marks_are_on_the_node() {
    let nobody_alive: HolderLive<'_> = &|_, _| false;
    let clean = node(json!({}));
    let b = claimant("b", "uid-b");
    let entered = match plan_enter_for(&clean, b, Some("r"), nobody_alive).0 {
        EnterPlan::Apply { patch, .. } => apply(&clean, &patch),
        other => panic!("{other:?}"),
    };
    assert_eq!(annotation(&entered, HOLDER_UID_ANNOTATION), Some("uid-b"));

    // Rolled back to upstream: its stop uncordons, untaints, unlabels, leaves our
    // annotations; then an admin cordons.
    let upstream_stopped = apply(
        &entered,
        &json!({"metadata": {"labels": {EXCLUDE_LABEL: null}},
                "spec": {"unschedulable": true, "taints": null}}),
    );
    let c = claimant("c", "uid-c");
    let d = decide_enter(&upstream_stopped, c, None, nobody_alive);
    assert!(d.first && !d.adopted, "record discarded, fresh entry");
    assert_eq!(d.record, Record::Discarded("b".into()));
    let EnterPlan::Apply { patch, .. } = d.plan else {
        panic!("Apply")
    };
    let entered_c = apply(&upstream_stopped, &patch);
    assert_eq!(annotation(&entered_c, HOLDER_ANNOTATION), Some("c"));
    assert_eq!(annotation(&entered_c, HOLDER_UID_ANNOTATION), Some("uid-c"));
    assert!(prior_state(&entered_c).unwrap().unschedulable);
    let exited = apply(&entered_c, &exit_patch(&entered_c, "c").0);
    assert!(observe(&exited).cordoned, "the admin's cordon survives");
    assert!(
        exited.metadata.annotations.as_ref().is_none_or(|a| a
            .keys()
            .all(|k| !k.starts_with("nodemaintenance.medik8s.io/"))),
        "our record is gone: {:?}",
        exited.metadata.annotations
    );

    // Same name, another object (uid): the old record is not ours.
    let b2 = claimant("b", "uid-b2");
    let d = decide_enter(&upstream_stopped, b2, None, nobody_alive);
    assert_eq!(d.record, Record::Discarded("b".into()));
    assert_eq!(
        plan_exit_for(&entered, b2),
        ExitPlan::NotHeld(Some("b".into()))
    );

    // The record's holder vanished but the node still carries every mark: the maintenance
    // it describes is still in place, so its prior state is taken over as it is.
    let admin_cordoned = node(json!({"spec": {"unschedulable": true}}));
    let held = match plan_enter_for(&admin_cordoned, b, None, nobody_alive).0 {
        EnterPlan::Apply { patch, .. } => apply(&admin_cordoned, &patch),
        other => panic!("{other:?}"),
    };
    let d = decide_enter(&held, c, None, nobody_alive);
    assert_eq!(d.record, Record::Reused("b".into()));
    let EnterPlan::Apply { patch, repaired } = d.plan else {
        panic!("Apply")
    };
    assert!(
        repaired.is_empty() && patch.get("spec").is_none(),
        "{patch}"
    );
    assert_eq!(
        patch["metadata"]["annotations"],
        json!({HOLDER_ANNOTATION: "c", HOLDER_UID_ANNOTATION: "uid-c"})
    );
    let taken = apply(&held, &patch);
    let exited = apply(&taken, &exit_patch(&taken, "c").0);
    assert!(observe(&exited).cordoned, "the recorded admin cordon stays");

    // `docs/drain-contract.md` §6 with a new NodeMaintenance: the vanished holder's node uncordoned by
    // hand, its drain taint and label left. The maintenance is still in place: the record
    // is reused, so the admin's label value that predated it comes back at the end.
    let labelled = node(json!({"metadata": {"labels": {EXCLUDE_LABEL: "no"}}}));
    let held = match plan_enter_for(&labelled, b, None, nobody_alive).0 {
        EnterPlan::Apply { patch, .. } => apply(&labelled, &patch),
        other => panic!("{other:?}"),
    };
    let uncordoned = apply(
        &held,
        &json!({"spec": {"unschedulable": false, "taints": [{"key": DRAIN_TAINT_KEY, "effect": NO_SCHEDULE}]}}),
    );
    assert!(record_in_place(&uncordoned));
    let d = decide_enter(&uncordoned, c, None, nobody_alive);
    assert_eq!(d.record, Record::Reused("b".into()));
    let EnterPlan::Apply { patch, .. } = d.plan else {
        panic!("Apply")
    };
    let taken = apply(&uncordoned, &patch);
    let exited = apply(&taken, &exit_patch(&taken, "c").0);
    assert_eq!(
        label(&exited, EXCLUDE_LABEL),
        Some("no"),
        "the admin's value"
    );
    let after = observe(&exited);
    assert!(!after.cordoned && !after.drain_taint && !after.unschedulable_taint);

    // A live holder (same name and uid in the cache) keeps its node.
    let alive: HolderLive<'_> = &|name, uid| name == "b" && uid == Some("uid-b");
    assert_eq!(
        plan_enter_for(&held, c, None, alive).0,
        EnterPlan::HeldBy("b".into())
    );
    assert_eq!(
        plan_enter_for(&held, b, None, alive).0,
        EnterPlan::Unchanged,
        "its own record"
    );
}

/// The drain's start is part of the node's record but not of the entry (the maintenance pass
/// decides when the drain starts): an entry does not write it, a re-entry that repairs drift
/// keeps it, and exit removes it with the rest of the record.
#[test]
fn the_drain_start_is_kept_by_re_entry_and_removed_on_exit() {
    let alive: HolderLive<'_> = &|_, _| true;
    let b = claimant("b", "uid-b");
    let clean = node(json!({}));
    let entered = match plan_enter_for(&clean, b, None, alive) {
        (EnterPlan::Apply { patch, .. }, EnterOutcome::Entered { .. }) => {
            assert!(
                patch["metadata"]["annotations"]
                    .get(DRAIN_STARTED_ANNOTATION)
                    .is_none(),
                "{patch}"
            );
            apply(&clean, &patch)
        }
        other => panic!("{other:?}"),
    };
    let started = apply(
        &entered,
        &json!({"metadata": {"annotations": {DRAIN_STARTED_ANNOTATION: "2027-01-15T08:00:00Z"}}}),
    );
    let at0 = jiff::Timestamp::from_second(1_800_000_000).unwrap();
    assert_eq!(drain_started(&started), Some(at0));

    // Drift repaired later: the start stays.
    let drifted = apply(&started, &json!({"spec": {"unschedulable": null}}));
    let repaired = match plan_enter_for(&drifted, b, None, alive) {
        (EnterPlan::Apply { patch, .. }, EnterOutcome::Repaired(_)) => apply(&drifted, &patch),
        other => panic!("{other:?}"),
    };
    assert_eq!(drain_started(&repaired), Some(at0));
    assert_eq!(
        plan_enter_for(&repaired, b, None, alive).0,
        EnterPlan::Unchanged
    );

    let ExitPlan::Apply { patch, .. } = plan_exit_for(&repaired, b) else {
        panic!("ours to exit")
    };
    let exited = apply(&repaired, &patch);
    assert_eq!(annotation(&exited, DRAIN_STARTED_ANNOTATION), None);
    assert_eq!(annotation(&exited, HOLDER_ANNOTATION), None);
}

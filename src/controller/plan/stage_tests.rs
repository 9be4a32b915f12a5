//! The stages (`stage` knob) as whole plans: what each stage writes from one observation.

use super::condition::{Stamp, condition, set_condition};
use super::preflight::REQUEUE_PREFLIGHT;
use super::status::REQUEUE_SUCCEEDED;
use super::*;
use crate::api::NodeMaintenanceStatus;
use crate::api::{MaintenancePhase, NodeMaintenanceSpec, PodBlocker, Stage};
use crate::controller::memory::{Memory, StatusSchema};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use std::time::Duration;

fn t(s: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_second(1_800_000_000 + s).unwrap()
}

fn nm(stage: Option<Stage>, annotation: Option<&str>) -> NodeMaintenance {
    let mut nm = NodeMaintenance::new(
        "nm",
        NodeMaintenanceSpec {
            node_name: "node01".into(),
            ..NodeMaintenanceSpec::default()
        },
    );
    nm.spec.knobs.stage = stage;
    nm.metadata.finalizers = Some(vec![FINALIZER.into()]);
    nm.metadata.uid = Some("uid-nm".into());
    nm.metadata.generation = Some(1);
    if let Some(a) = annotation {
        nm.metadata.annotations =
            Some([(crate::policy::STAGE_ANNOTATION.to_string(), a.to_string())].into());
    }
    nm.status = Some(NodeMaintenanceStatus {
        phase: Some(MaintenancePhase::Running),
        ..NodeMaintenanceStatus::default()
    });
    nm
}

fn free_node() -> Node {
    let mut n = Node::default();
    n.metadata.name = Some("node01".into());
    n
}

/// node01 in maintenance for `nm` since before (its record and every mark, nothing there
/// before).
fn entered_node() -> Node {
    use crate::node::*;
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": "node01",
            "resourceVersion": "7",
            "annotations": {
                HOLDER_ANNOTATION: "nm", HOLDER_UID_ANNOTATION: "uid-nm",
                PRIOR_STATE_ANNOTATION: "{}",
            },
            "labels": {EXCLUDE_LABEL: "true"},
        },
        "spec": {"unschedulable": true, "taints": [
            {"key": UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"},
            {"key": DRAIN_TAINT_KEY, "effect": "NoSchedule"},
        ]},
    }))
    .unwrap()
}

fn our_lease() -> Lease {
    Lease {
        metadata: kube::api::ObjectMeta {
            name: Some("node-node01".into()),
            uid: Some("uid-lease".into()),
            resource_version: Some("5".into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(crate::lease::LEASE_HOLDER.into()),
            lease_duration_seconds: Some(3600),
            acquire_time: Some(MicroTime(t(90))),
            renew_time: Some(MicroTime(t(90))),
            ..LeaseSpec::default()
        }),
    }
}

fn plan_of(nm: NodeMaintenance, node: Node, lease: Option<Lease>, defaults: Stage) -> Plan {
    let defaults = crate::policy::Defaults {
        stage: defaults,
        ..Default::default()
    };
    let observed = Observed {
        policy: crate::policy::resolve(&nm, &defaults),
        nm,
        world: World::Maintenance(Box::new(ObservedMaintenance {
            node: Some(node),
            lease,
            holder_live: true,
            ..ObservedMaintenance::default()
        })),
        memory: Memory::default(),
        schema: StatusSchema::default(),
    };
    plan(&observed, t(100))
}

fn kinds(p: &Plan) -> Vec<&'static str> {
    p.writes.iter().map(Write::kind).collect()
}

fn stage_condition(p: &Plan) -> Option<(String, String)> {
    let status = p.status.as_ref()?;
    condition(status, condition::STAGE).map(|c| (c.status.clone(), c.reason.clone()))
}

fn cond(p: &Plan, type_: &str) -> Option<(String, String)> {
    let status = p.status.as_ref()?;
    condition(status, type_).map(|c| (c.status.clone(), c.reason.clone()))
}

fn is(s: &str, r: &str) -> Option<(String, String)> {
    Some((s.to_string(), r.to_string()))
}

#[test]
fn idle_touches_nothing_on_the_node_and_takes_no_lease() {
    let p = plan_of(nm(Some(Stage::Idle), None), free_node(), None, Stage::Drain);
    assert_eq!(kinds(&p), ["status"]);
    assert_eq!(p.then, Then::Requeue(Requeue::After(REQUEUE_SUCCEEDED)));
    assert_eq!(stage_condition(&p), is("True", "Idle"));
    assert_eq!(p.status.unwrap().phase, Some(MaintenancePhase::Running));
}

#[test]
fn cordon_takes_the_lease_and_enters_the_node_without_a_round() {
    let p = plan_of(
        nm(Some(Stage::Cordon), None),
        free_node(),
        None,
        Stage::Drain,
    );
    // Ownership recorded before the node is touched, then the node's state.
    assert_eq!(
        kinds(&p),
        [
            "create lease",
            "status",
            "enter node",
            "record entered node",
            "status"
        ]
    );
    assert_eq!(p.then, Then::Requeue(Requeue::After(REQUEUE_SUCCEEDED)));
    assert_eq!(stage_condition(&p), is("True", "Cordon"));
    assert_eq!(cond(&p, condition::CORDONED), is("True", "NodeCordoned"));
    // Held: the next pass writes nothing and still sends no eviction.
    let mut held = nm(Some(Stage::Cordon), None);
    held.status = p.status.clone();
    held.metadata.annotations = Some(
        [
            (crate::api::ENTERED_NODE_ANNOTATION, "node01"),
            (crate::api::ENTERED_NODE_PROVIDER_ID_ANNOTATION, ""),
            (crate::api::ENTERED_NODE_UID_ANNOTATION, ""),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into(),
    );
    let again = plan_of(held, entered_node(), Some(our_lease()), Stage::Drain);
    assert_eq!(kinds(&again), Vec::<&str>::new());
    assert!(matches!(again.then, Then::Requeue(_)));
}

/// Cordon enters the node without the drain's start; the first Drain pass records it (the API
/// server's time of its node read; the operator's in this plan without one) on the node entered
/// already, in a patch of its own under the node's resourceVersion, and the round compares with
/// it; later passes keep it, and the deadline counts from it (docs/drain-contract.md §11).
#[test]
fn the_drain_starts_when_stage_drain_first_applies_not_at_the_cordon() {
    let cordoned = plan_of(
        nm(Some(Stage::Cordon), None),
        free_node(),
        None,
        Stage::Drain,
    );
    let enter = cordoned.writes.iter().find_map(|w| match w {
        Write::Node { patch, .. } => Some(patch.clone()),
        _ => None,
    });
    let key = crate::node::DRAIN_STARTED_ANNOTATION;
    assert!(
        enter
            .as_ref()
            .is_some_and(|p| p["metadata"]["annotations"].get(key).is_none()),
        "{enter:?}"
    );
    // Moved to Drain, 50 s later by this plan's clock, with drainTimeout 40s.
    let mut drain = nm(Some(Stage::Drain), None);
    drain.spec.knobs.drain_timeout = Some("40s".into());
    let p = plan_of(
        drain.clone(),
        entered_node(),
        Some(our_lease()),
        Stage::Drain,
    );
    let started = p.writes.iter().find_map(|w| match w {
        Write::Node { patch, purpose, .. } => Some((patch.clone(), purpose.clone())),
        _ => None,
    });
    assert_eq!(
        started,
        Some((
            serde_json::json!({"metadata": {
                "resourceVersion": "7", "annotations": {key: t(100).to_string()}
            }}),
            NodePurpose::Enter(crate::node::EnterOutcome::Unchanged)
        ))
    );
    let Then::Drain(round) = &p.then else {
        panic!("{:?}", p.then)
    };
    assert_eq!(round.started, Some(t(100)));
    // Not overdue in this pass: the deadline counts from the start, not from the cordon.
    assert_eq!(
        round.policy.overdue(round.policy.deadline_start, t(100)),
        None
    );
    // A later pass reads the start from the node: kept, the deadline 40 s after it.
    let mut node = entered_node();
    node.annotations_mut()
        .insert(key.into(), t(100).to_string());
    let later = plan_of(drain, node, Some(our_lease()), Stage::Drain);
    assert!(
        !later.writes.iter().any(|w| matches!(w, Write::Node { .. })),
        "{:?}",
        later.writes
    );
    let Then::Drain(round) = &later.then else {
        panic!("{:?}", later.then)
    };
    assert_eq!(round.started, Some(t(100)));
    assert_eq!(round.policy.deadline_start, Some(t(100)));
    assert_eq!(
        later.status.unwrap().drain_deadline.map(|d| d.0),
        Some(t(140))
    );
}

#[test]
fn drain_is_todays_pass_and_writes_no_stage_condition() {
    let default = plan_of(nm(None, None), free_node(), None, Stage::Drain);
    let explicit = plan_of(
        nm(Some(Stage::Drain), None),
        free_node(),
        None,
        Stage::Drain,
    );
    assert_eq!(default, explicit);
    assert!(matches!(default.then, Then::Drain(_)));
    assert_eq!(stage_condition(&default), None);
}

#[test]
fn the_annotation_wins_over_the_field_which_wins_over_the_flag() {
    let p = plan_of(
        nm(Some(Stage::Idle), Some("Cordon")),
        free_node(),
        None,
        Stage::Idle,
    );
    assert_eq!(stage_condition(&p), is("True", "Cordon"));
    let p = plan_of(
        nm(Some(Stage::Cordon), None),
        free_node(),
        None,
        Stage::Idle,
    );
    assert_eq!(stage_condition(&p), is("True", "Cordon"));
    let p = plan_of(nm(None, None), free_node(), None, Stage::Idle);
    assert_eq!(stage_condition(&p), is("True", "Idle"));
    // A refused value: the default applies and the status says why.
    let p = plan_of(nm(None, Some("Later")), free_node(), None, Stage::Idle);
    assert_eq!(stage_condition(&p), is("True", "Idle"));
    assert_eq!(
        cond(&p, condition::DRAIN_POLICY_VALID),
        is("False", "InvalidValue")
    );
}

#[test]
fn back_to_idle_restores_the_node_and_gives_up_the_lease() {
    let cordoned = plan_of(
        nm(Some(Stage::Cordon), None),
        free_node(),
        None,
        Stage::Drain,
    );
    let mut back = nm(Some(Stage::Idle), None);
    back.status = cordoned.status.clone();
    let p = plan_of(back, entered_node(), Some(our_lease()), Stage::Drain);
    assert_eq!(
        kinds(&p),
        ["exit node", "UncordonNode", "delete lease", "status"]
    );
    let Write::Node { patch, .. } = &p.writes[0] else {
        panic!("a node write first");
    };
    assert_eq!(patch["spec"]["unschedulable"], false);
    assert_eq!(stage_condition(&p), is("True", "Idle"));
    assert_eq!(cond(&p, condition::CORDONED), is("False", "Released"));
    assert_eq!(cond(&p, condition::LEASE_HELD), is("False", "Released"));
    // Forward again: a lease released is not one lost, so it is simply taken again.
    let mut again = nm(Some(Stage::Cordon), None);
    again.status = p.status.clone();
    let p = plan_of(again, free_node(), None, Stage::Drain);
    assert_eq!(
        kinds(&p),
        [
            "create lease",
            "status",
            "enter node",
            "record entered node",
            "status"
        ]
    );
    assert_eq!(p.status.unwrap().error_on_lease_count, None);
}

#[test]
fn a_succeeded_maintenance_moved_back_runs_again() {
    let mut done = nm(Some(Stage::Idle), None);
    done.status.as_mut().unwrap().phase = Some(MaintenancePhase::Succeeded);
    let p = plan_of(done, free_node(), None, Stage::Drain);
    assert_eq!(p.status.unwrap().phase, Some(MaintenancePhase::Running));
}

#[test]
fn preflight_touches_nothing_and_asks_with_a_dry_run() {
    let p = plan_of(
        nm(Some(Stage::Preflight), None),
        free_node(),
        None,
        Stage::Drain,
    );
    // Nothing before the round: its findings and the stage are written in one status write.
    assert_eq!(kinds(&p), Vec::<&str>::new());
    let Then::Preflight(round) = &p.then else {
        panic!("a preflight round, not {:?}", p.then);
    };
    let blocker = PodBlocker {
        namespace: "ns".into(),
        name: "web-0".into(),
        reason: crate::drain::reason::PDB.into(),
        pod_disruption_budget: Some("web".into()),
        ..PodBlocker::default()
    };
    let found = preflight_plan(round, std::slice::from_ref(&blocker), t(101));
    assert_eq!(kinds(&found), ["status"]);
    assert_eq!(stage_condition(&found), is("True", "Preflight"));
    let status = found.status.unwrap();
    assert_eq!(status.blockers, Some(vec![blocker.clone()]));
    assert_eq!(found.then, Then::Requeue(Requeue::After(REQUEUE_PREFLIGHT)));
    // The same findings again: no write.
    let mut stored = (**round).clone();
    stored.status = status.clone();
    stored.stored = status;
    let same = preflight_plan(&stored, &[blocker], t(160));
    assert_eq!(kinds(&same), Vec::<&str>::new());
}

#[test]
fn node_conditions_are_written_on_transitions_only_when_the_knob_asks() {
    let conditions_of = |p: &Plan| {
        p.writes
            .iter()
            .filter_map(|w| match w {
                Write::NodeConditions { patch, .. } => Some(patch.clone()),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    // Off (the default): no node status write.
    let p = plan_of(nm(Some(Stage::Idle), None), free_node(), None, Stage::Drain);
    assert!(conditions_of(&p).is_empty());
    // On: Idle says planned, not in progress; after the node, before the status.
    let mut on = nm(Some(Stage::Idle), None);
    on.spec.knobs.node_conditions = Some(true);
    let p = plan_of(on.clone(), free_node(), None, Stage::Drain);
    assert_eq!(kinds(&p), ["node conditions", "status"]);
    let patch = &conditions_of(&p)[0];
    let said: Vec<String> = patch["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| format!("{}={} {}", c["type"], c["status"], c["reason"]))
        .collect();
    assert_eq!(
        said,
        [
            r#""MaintenancePlanned"="True" "AdminRequested""#,
            r#""MaintenanceInProgress"="False" "MaintenanceNotStarted""#,
            r#""DrainInProgress"="False" "DrainNotStarted""#,
            r#""Drained"="False" "DrainNotStarted""#,
        ]
    );
    assert_eq!(
        patch["status"]["conditions"][0]["message"],
        "NodeMaintenance nm"
    );
    // Already said: nothing again.
    let mut node = free_node();
    node.status = Some(serde_json::from_value(patch["status"].clone()).unwrap());
    let p = plan_of(on.clone(), node.clone(), None, Stage::Drain);
    assert!(conditions_of(&p).is_empty());
    // The deletion ends them: all False, MaintenanceEnded.
    let deletion = ObservedDeletion {
        name: "nm".into(),
        uid: Some("uid-nm".into()),
        node_name: "node01".into(),
        node: Some(node),
        successor: None,
        started: true,
        lease: None,
        finalizers: vec![FINALIZER.into()],
        replaced: false,
        evacuations: Default::default(),
    };
    let p = deletion::plan_deletion(&deletion, t(200));
    let ended = conditions_of(&p);
    assert_eq!(ended.len(), 1);
    assert!(
        ended[0]["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["status"] == "False" && c["reason"] == "MaintenanceEnded")
    );
}

#[test]
fn before_its_window_a_maintenance_waits_idle_and_comes_back_when_it_opens() {
    let at = |s: i64| {
        let mut nm = nm(None, None);
        nm.spec.knobs.start_at = Some(t(s).to_string());
        nm
    };
    // t(100) is the pass's time: 30 s ahead, nothing on the node, back a second after it opens.
    let p = plan_of(at(130), free_node(), None, Stage::Drain);
    assert_eq!(kinds(&p), ["status"]);
    assert_eq!(stage_condition(&p), is("True", "MaintenanceWindow"));
    assert_eq!(
        p.then,
        Then::Requeue(Requeue::After(Duration::from_secs(31)))
    );
    // Open (the start is now): today's pass.
    let p = plan_of(at(100), free_node(), None, Stage::Drain);
    assert!(matches!(p.then, Then::Drain(_)));
    // The window keeps a Cordon from cordoning, not a Preflight from asking.
    let mut cordon = at(130);
    cordon.spec.knobs.stage = Some(Stage::Cordon);
    let p = plan_of(cordon, free_node(), None, Stage::Drain);
    assert_eq!(kinds(&p), ["status"]);
    let mut preflight = at(130);
    preflight.spec.knobs.stage = Some(Stage::Preflight);
    let p = plan_of(preflight, free_node(), None, Stage::Drain);
    assert!(matches!(p.then, Then::Preflight(_)));
    // A value that is no time is refused (the status says why) and no window applies.
    let mut bad = nm(None, None);
    bad.spec.knobs.start_at = Some("tomorrow".into());
    let p = plan_of(bad, free_node(), None, Stage::Drain);
    assert!(matches!(p.then, Then::Drain(_)));
    assert_eq!(
        cond(&p, condition::DRAIN_POLICY_VALID),
        is("False", "InvalidValue")
    );
}

#[test]
fn a_succeeded_maintenance_deletes_itself_once_it_expires() {
    // Succeeded at t(40) on a node it holds, expireAfter 30s; the pass runs at t(100).
    let expiring = |after: &str| {
        let mut nm = nm(None, None);
        nm.spec.knobs.expire_after = Some(after.into());
        let status = nm.status.as_mut().unwrap();
        status.phase = Some(MaintenancePhase::Succeeded);
        set_condition(
            status,
            condition::DRAINED,
            true,
            "AllPodsEvicted",
            "",
            Stamp {
                generation: Some(1),
                now: t(40),
            },
        );
        nm.metadata.annotations = Some(
            [
                (crate::api::ENTERED_NODE_ANNOTATION, "node01"),
                (crate::api::ENTERED_NODE_PROVIDER_ID_ANNOTATION, ""),
                (crate::api::ENTERED_NODE_UID_ANNOTATION, ""),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into(),
        );
        nm
    };
    let p = plan_of(
        expiring("90s"),
        entered_node(),
        Some(our_lease()),
        Stage::Drain,
    );
    // 30 s left (the statuses record the lease and cordon this fixture's status lacked): no
    // deletion, back a second after it expires.
    assert_eq!(kinds(&p), ["status", "status"]);
    assert_eq!(
        p.then,
        Then::Requeue(Requeue::After(Duration::from_secs(31)))
    );
    let p = plan_of(
        expiring("30s"),
        entered_node(),
        Some(our_lease()),
        Stage::Drain,
    );
    assert_eq!(
        kinds(&p),
        [
            "status",
            "status",
            "MaintenanceExpired",
            "delete maintenance"
        ]
    );
    assert_eq!(
        p.writes[3],
        Write::DeleteMaintenance {
            uid: Some("uid-nm".into())
        }
    );
    // Without the knob a Succeeded maintenance stays (today's behaviour).
    let mut stays = expiring("30s");
    stays.spec.knobs.expire_after = None;
    let p = plan_of(stays, entered_node(), Some(our_lease()), Stage::Drain);
    assert_eq!(kinds(&p), ["status", "status"]);
    assert_eq!(p.then, Then::Requeue(Requeue::After(REQUEUE_SUCCEEDED)));
}

/// `nm` with pre-drain hooks of `owners`.
fn hooked(mut nm: NodeMaintenance, owners: &[&str]) -> NodeMaintenance {
    let prefix = crate::policy::pre_drain_hooks::PRE_DRAIN_HOOK_PREFIX;
    for o in owners {
        nm.annotations_mut()
            .insert(format!("{prefix}{o}"), String::new());
    }
    nm
}

#[test]
fn a_hooked_drain_enters_the_node_without_a_round_or_a_start_until_the_last_hook_goes() {
    use super::pre_drain_hooks::PRE_DRAIN_HOOKS;
    let key = crate::node::DRAIN_STARTED_ANNOTATION;
    let mut drain = nm(Some(Stage::Drain), None);
    drain.spec.knobs.drain_timeout = Some("40s".into());
    // Two hooks at the first pass: the node is entered (cordon, taints, label, record), the
    // lease taken, no start recorded, no round, no deadline; the status names both.
    let first = plan_of(
        hooked(drain.clone(), &["rook", "backup"]),
        free_node(),
        None,
        Stage::Drain,
    );
    let enter = first.writes.iter().find_map(|w| match w {
        Write::Node { patch, .. } => Some(patch.clone()),
        _ => None,
    });
    let enter = enter.expect("the node is entered");
    assert_eq!(enter["spec"]["unschedulable"], true, "{enter}");
    assert!(
        enter["metadata"]["annotations"].get(key).is_none(),
        "{enter}"
    );
    assert!(
        kinds(&first).contains(&"create lease"),
        "{:?}",
        kinds(&first)
    );
    assert!(matches!(first.then, Then::Requeue(_)), "{:?}", first.then);
    let s = first.status.clone().unwrap();
    assert_eq!(s.drain_deadline, None);
    assert_eq!(cond(&first, PRE_DRAIN_HOOKS), is("True", "HooksPresent"));
    let c = condition(&s, PRE_DRAIN_HOOKS).unwrap();
    assert!(c.message.contains("\"backup\", \"rook\""), "{}", c.message);
    // One removed: still held, naming the other; the entered node gets no start.
    let mut one = hooked(drain.clone(), &["rook"]);
    one.status = Some(s);
    let p = plan_of(one, entered_node(), Some(our_lease()), Stage::Drain);
    assert!(matches!(p.then, Then::Requeue(_)), "{:?}", p.then);
    assert!(
        !p.writes.iter().any(|w| matches!(w, Write::Node { .. })),
        "{:?}",
        p.writes
    );
    let s = p.status.clone().unwrap();
    let c = condition(&s, PRE_DRAIN_HOOKS).unwrap();
    assert!(
        c.message.contains("\"rook\"") && !c.message.contains("backup"),
        "{}",
        c.message
    );
    // Paused as well: removing the last hook leaves the pause holding.
    let mut paused = drain.clone();
    paused.spec.knobs.paused = Some(true);
    paused.status = Some(s.clone());
    let p = plan_of(paused, entered_node(), Some(our_lease()), Stage::Drain);
    assert!(matches!(p.then, Then::Requeue(_)), "paused: {:?}", p.then);
    // Stage Cordon with a hook: Cordon holds, as without one.
    let cordon = plan_of(
        hooked(nm(Some(Stage::Cordon), None), &["rook"]),
        entered_node(),
        Some(our_lease()),
        Stage::Drain,
    );
    assert!(matches!(cordon.then, Then::Requeue(_)), "{:?}", cordon.then);
    // The last removed: this pass records the start, the deadline counts from it, the round
    // runs, and the condition says the hooks are gone.
    drain.status = Some(s);
    let p = plan_of(
        drain.clone(),
        entered_node(),
        Some(our_lease()),
        Stage::Drain,
    );
    let Then::Drain(round) = &p.then else {
        panic!("{:?}", p.then)
    };
    assert_eq!(round.started, Some(t(100)));
    let start = p.writes.iter().find_map(|w| match w {
        Write::Node { patch, .. } => Some(patch["metadata"]["annotations"][key].clone()),
        _ => None,
    });
    assert_eq!(start, Some(serde_json::json!(t(100).to_string())));
    assert_eq!(cond(&p, PRE_DRAIN_HOOKS), is("False", "HooksRemoved"));
    // The next pass reads the start from the node: the deadline is 40 s after the removal's
    // pass, not after the entry.
    let mut node = entered_node();
    node.annotations_mut()
        .insert(key.into(), t(100).to_string());
    drain.status = p.status.clone();
    let later = plan_of(drain, node, Some(our_lease()), Stage::Drain);
    assert_eq!(
        later.status.unwrap().drain_deadline.map(|d| d.0),
        Some(t(140))
    );
}

/// The queue (`--max-parallel-drains`): a hooked maintenance at Drain takes part in the budget
/// (`policy::drains`); waiting for its slot it leaves its node in service, as any waiting one;
/// given its slot it enters the node and the hooks hold it there, counting against the budget
/// (docs/drain-contract.md §12).
#[test]
fn a_hooked_maintenance_waits_for_its_slot_in_service_then_holds_it_entered() {
    use super::pre_drain_hooks::PRE_DRAIN_HOOKS;
    use crate::controller::queue::Place;
    let object = hooked(nm(Some(Stage::Drain), None), &["rook"]);
    assert!(crate::policy::drains(&object, &Default::default(), t(100)));
    let observed = |queue| Observed {
        policy: crate::policy::resolve(&object, &Default::default()),
        nm: object.clone(),
        world: World::Maintenance(Box::new(ObservedMaintenance {
            node: Some(free_node()),
            holder_live: true,
            queue,
            ..ObservedMaintenance::default()
        })),
        memory: Memory::default(),
        schema: StatusSchema::default(),
    };
    let full = "--max-parallel-drains=1".to_string();
    let queued = plan(&observed(Some(Place::Queued { position: 1, full })), t(100));
    assert!(
        !kinds(&queued).contains(&"enter node"),
        "{:?}",
        kinds(&queued)
    );
    assert!(matches!(queued.then, Then::Requeue(_)), "{:?}", queued.then);
    assert_eq!(cond(&queued, PRE_DRAIN_HOOKS), is("True", "HooksPresent"));
    let admitted = plan(&observed(Some(Place::Draining)), t(100));
    assert!(
        kinds(&admitted).contains(&"enter node"),
        "{:?}",
        kinds(&admitted)
    );
    assert!(
        matches!(admitted.then, Then::Requeue(_)),
        "{:?}",
        admitted.then
    );
    assert_eq!(cond(&admitted, PRE_DRAIN_HOOKS), is("True", "HooksPresent"));
}

/// `docs/drain-contract.md` §4, "A node going down": a Drain maintenance whose node has
/// `GracefulNodeShutdownInProgress=True` is entered and held but starts no round, and its status
/// says why; cleared, the round runs again (and no Node lifecycle condition is written with the
/// knob off: reading the node's condition is not writing one).
#[test]
fn a_node_going_down_holds_the_drain_without_a_round_until_it_is_cleared() {
    let mut down = entered_node();
    down.status = Some(
        serde_json::from_value(serde_json::json!({"conditions": [
            {"type": "GracefulNodeShutdownInProgress", "status": "True"}
        ]}))
        .unwrap(),
    );
    let p = plan_of(nm(None, None), down, Some(our_lease()), Stage::Drain);
    assert!(!matches!(p.then, Then::Drain(_)), "{:?}", p.then);
    assert!(matches!(p.then, Then::Requeue(Requeue::After(_))));
    assert_eq!(
        cond(&p, "NodeShuttingDown"),
        is("True", "GracefulNodeShutdownInProgress")
    );
    assert!(!kinds(&p).contains(&"node conditions"), "{:?}", kinds(&p));
    // Cleared: the round runs, the status says it no longer shuts down.
    let mut was = nm(None, None);
    was.status = p.status.clone();
    let p = plan_of(was, entered_node(), Some(our_lease()), Stage::Drain);
    assert!(matches!(p.then, Then::Drain(_)), "{:?}", p.then);
    assert_eq!(
        cond(&p, "NodeShuttingDown"),
        is("False", "NodeNotShuttingDown")
    );
}

use super::condition::{self, Stamp, condition, set_condition};
use super::encode::{needs_write, status_patch};
use super::outcome::DrainRound;
use super::*;
use super::{draining::*, enter::*, init::*, lease::*, node_found::*, slot::*, status::*};
use crate::api::NodeMaintenanceStatus;
use crate::api::{MaintenancePhase, NodeMaintenanceSpec, PodBlocker, PodReference};
use crate::controller::memory::{Memory, Remember, StatusSchema};
use crate::drain::DrainReport;
use crate::drain::Survey;
use crate::drain::{self, reason};
use deletion::{DeletionPlan, NodeSeen, deletion_plan};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use std::time::Duration;

pub(super) fn t(s: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_second(1_800_000_000 + s).unwrap()
}
pub(super) const GEN: Option<i64> = Some(1);
/// A status written at `t(s)` of generation [`GEN`].
pub(super) fn at(s: i64) -> Stamp {
    Stamp {
        generation: GEN,
        now: t(s),
    }
}
fn pods(names: &[&str]) -> Vec<PodReference> {
    names
        .iter()
        .map(|n| PodReference {
            namespace: "test-namespace".into(),
            name: n.to_string(),
        })
        .collect()
}
fn survey(names: &[&str]) -> Survey {
    Survey {
        total_pods: names.len(),
        evictable: pods(names),
    }
}
fn report(evictable: &[&str], pending: &[(&str, &str)], errors: &[&str]) -> DrainReport {
    DrainReport {
        total_pods: evictable.len(),
        evictable: pods(evictable),
        pending: pending
            .iter()
            .map(|(n, r)| PodBlocker {
                namespace: "test-namespace".into(),
                name: n.to_string(),
                reason: r.to_string(),
                ..PodBlocker::default()
            })
            .collect(),
        errors: errors.iter().map(|e| e.to_string()).collect(),
        ..DrainReport::default()
    }
}
pub(super) fn nm(name: &str, node: &str) -> NodeMaintenance {
    let mut nm = NodeMaintenance::new(
        name,
        NodeMaintenanceSpec {
            node_name: node.into(),
            reason: None,
            ..NodeMaintenanceSpec::default()
        },
    );
    nm.metadata.finalizers = Some(vec![FINALIZER.into()]);
    nm
}
const HELD_ERR: &str =
    "can't update or invalidate the lease because it is held by different owner: NodeHealthCheck-x";
fn already_held() -> LeaseObservation {
    LeaseObservation::AlreadyHeld(HELD_ERR.into())
}
pub(super) fn reasons(events: &[PlannedEvent]) -> Vec<&str> {
    events.iter().map(|e| e.reason).collect()
}

/// One maintenance reconcile as the reconciler runs it, through [`plan`] and, when it ends in a
/// drain round, [`drained_plan`]: a node that exists and that no NodeMaintenance holds yet, the
/// lease free (`Held`) or held by `NodeHealthCheck-x` (`AlreadyHeld`), and the drain answering
/// `drain`. Returns the status the pass ends with, its events in order, and the requeue.
fn pass(
    old: &NodeMaintenanceStatus,
    lease: LeaseObservation,
    drain: &DrainReport,
    now: jiff::Timestamp,
) -> (NodeMaintenanceStatus, Vec<PlannedEvent>, Requeue) {
    let mut o = nm("nm", "node01");
    o.metadata.uid = Some("uid-nm".into());
    o.metadata.generation = GEN;
    o.status = Some(old.clone());
    // A lease that was ours means the node was entered (the lease comes first).
    let node = if held_lease_before(old) || old.error_on_lease_count.unwrap_or(0) > 0 {
        entered_node()
    } else {
        let mut n = Node::default();
        n.metadata.name = Some("node01".into());
        n
    };
    let lease = match lease {
        LeaseObservation::Held => None,
        LeaseObservation::AlreadyHeld(_) => Some(Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some("NodeHealthCheck-x".into()),
                lease_duration_seconds: Some(3600),
                renew_time: Some(MicroTime(now)),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }),
    };
    let observed = Observed {
        policy: crate::policy::resolve(&o, &Default::default()),
        nm: o,
        world: World::Maintenance(Box::new(ObservedMaintenance {
            node: Some(node),
            lease,
            holder_live: true,
            ..ObservedMaintenance::default()
        })),
        memory: Memory::default(),
        schema: StatusSchema::default(),
    };
    let first = plan(&observed, now);
    let mut events = events_of(&first);
    let last = match &first.then {
        Then::Drain(round) => drained_plan(round, drain, None, now),
        Then::Requeue(_) | Then::Preflight(_) => first.clone(),
    };
    if last != first {
        events.extend(events_of(&last));
    }
    let Then::Requeue(requeue) = last.then else {
        panic!("a drain round ends in a requeue");
    };
    (last.status.unwrap_or_else(|| old.clone()), events, requeue)
}
/// node01 in maintenance for `nm` (uid `uid-nm`): cordoned, both taints, excluded.
pub(super) fn entered_node() -> Node {
    use crate::node::{DRAIN_TAINT_KEY, EXCLUDE_LABEL, HOLDER_ANNOTATION, HOLDER_UID_ANNOTATION};
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": "node01",
            "annotations": {HOLDER_ANNOTATION: "nm", HOLDER_UID_ANNOTATION: "uid-nm"},
            "labels": {EXCLUDE_LABEL: "true"},
        },
        "spec": {"unschedulable": true, "taints": [
            {"key": crate::node::UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"},
            {"key": DRAIN_TAINT_KEY, "effect": "NoSchedule"},
        ]},
    }))
    .unwrap()
}
fn events_of(p: &Plan) -> Vec<PlannedEvent> {
    p.writes
        .iter()
        .filter_map(|w| match w {
            Write::Event { event, .. } => Some(event.clone()),
            _ => None,
        })
        .collect()
}
/// A write as the tables name it: its kind, with the phase of a status and the node of an
/// annotation.
fn label(w: &Write) -> String {
    match w {
        Write::Status { sent, .. } => format!("status {:?}", sent.phase),
        Write::Annotations { patch, required } => format!(
            "{} {}",
            if *required { "annotate" } else { "record" },
            patch["metadata"]["annotations"][crate::api::ENTERED_NODE_ANNOTATION]
        ),
        w => w.kind().to_string(),
    }
}
pub(super) fn labels(p: &Plan) -> Vec<String> {
    p.writes.iter().map(label).collect()
}
pub(super) fn then_of(p: &Plan) -> String {
    match &p.then {
        Then::Drain(_) => "drain".into(),
        Then::Preflight(_) => "preflight".into(),
        Then::Requeue(r) => format!("{r:?}"),
    }
}
fn running_with_two() -> NodeMaintenanceStatus {
    init_status(
        &NodeMaintenanceStatus::default(),
        &survey(&["test-pod-1", "test-pod-2"]),
        at(0),
    )
    .unwrap()
}

// Upstream's contract: initialisation with 2 pods to drain.
#[test]
fn init_sets_running_with_the_pods_to_drain() {
    let s = running_with_two();
    assert_eq!(s.phase, Some(MaintenancePhase::Running));
    assert_eq!(s.pending_pods.as_ref().unwrap().len(), 2);
    assert_eq!(s.pending_pods_refs.as_ref().unwrap().len(), 2);
    assert_eq!(
        (s.eviction_pods, s.total_pods, s.drain_progress),
        (Some(2), Some(2), Some(0))
    );
    assert!(s.last_update.is_some());
    // Not yet: the drain starts with its first round (stage Cordon and the queue come first).
    assert_eq!(s.drain_start_time, None);
    assert_eq!(s.observed_generation, GEN);
}

/// `status.drainStartTime` is the drain's start recorded on the node (the API server's clock),
/// not the first pass: a maintenance that sat at Cordon or in the queue before its round shows
/// the round's start; a release clears it, so Drain → Idle → Drain shows the new start.
#[test]
fn drain_start_time_is_the_start_on_the_node_and_goes_with_a_release() {
    let s0 = running_with_two();
    let rep = report(&["test-pod-1"], &[("test-pod-1", reason::PDB)], &[]);
    let round = |status: &NodeMaintenanceStatus, started: i64| DrainRound {
        node: "node01".into(),
        status: status.clone(),
        stored: status.clone(),
        started: Some(t(started)),
        policy: Default::default(),
        generation: GEN,
        pruned: Vec::new(),
    };
    // Created at t(0), cordoned, drained from t(40): the round at t(41) shows t(40).
    let first = drained_plan(&round(&s0, 40), &rep, None, t(41))
        .status
        .unwrap();
    assert_eq!(first.drain_start_time.as_ref().map(|d| d.0), Some(t(40)));
    // Released (stage Idle): gone with the node's record.
    let released = super::timeline::release(&first, at(60));
    assert_eq!(released.drain_start_time, None);
    // Drain again from t(90): the new start, not the first.
    let again = drained_plan(&round(&released, 90), &rep, None, t(91))
        .status
        .unwrap();
    assert_eq!(again.drain_start_time.map(|d| d.0), Some(t(90)));
}

// Upstream's contract: no re-initialisation once a phase is set.
#[test]
fn init_leaves_a_set_phase_alone() {
    let failed = NodeMaintenanceStatus {
        phase: Some(MaintenancePhase::Failed),
        ..Default::default()
    };
    assert_eq!(init_status(&failed, &survey(&["a"]), at(0)), None);
}

// Upstream's contract: a valid maintenance drains and succeeds once.
#[test]
fn valid_maintenance_succeeds_once_and_then_stays_quiet() {
    let s0 = running_with_two();
    let (s1, ev1, rq1) = pass(
        &s0,
        LeaseObservation::Held,
        &report(&["test-pod-1", "test-pod-2"], &[], &[]),
        t(1),
    );
    assert_eq!(s1.phase, Some(MaintenancePhase::Succeeded));
    assert_eq!(
        (s1.pending_pods.as_ref(), s1.pending_pods_refs.as_ref()),
        (None, None)
    );
    assert_eq!(
        (s1.eviction_pods, s1.total_pods, s1.drain_progress),
        (Some(2), Some(2), Some(100))
    );
    assert_eq!(s1.last_error, None);
    assert_eq!(s1.error_on_lease_count.unwrap_or(0), 0);
    assert_eq!(reasons(&ev1), vec!["SucceedMaintenance"]);
    assert_eq!(ev1[0].message, "Node maintenance was succeeded");
    assert!(!ev1[0].warning);
    assert_eq!(rq1, Requeue::After(REQUEUE_SUCCEEDED));
    // Re-reconciled later with nothing changed: no write, no event.
    let (s2, ev2, _) = pass(&s1, LeaseObservation::Held, &report(&[], &[], &[]), t(400));
    assert!(ev2.is_empty());
    assert!(!needs_write(&s1, &s2, &[]), "{s1:?}\n{s2:?}");
}

// Upstream's contract: a node that does not exist.
#[test]
fn missing_node_fails_once_and_resumes_when_it_appears() {
    let s0 = init_status(&NodeMaintenanceStatus::default(), &survey(&[]), at(0)).unwrap();
    let step = node_missing(&s0, "non-existing", at(1));
    let s = &step.status;
    assert_eq!(s.phase, Some(MaintenancePhase::Failed));
    assert_eq!(
        s.last_error.as_deref(),
        Some("nodes \"non-existing\" not found")
    );
    assert_eq!(
        (s.eviction_pods, s.total_pods, s.drain_progress),
        (Some(0), Some(0), Some(0))
    );
    assert_eq!(s.error_on_lease_count.unwrap_or(0), 0);
    assert_eq!(reasons(&step.events), vec!["FailedMaintenance"]);
    assert!(step.events[0].warning);
    assert_eq!(step.events[0].message, "Failed a node maintenance");
    // Still missing: no second event, no write.
    let again = node_missing(s, "non-existing", at(31));
    assert!(again.events.is_empty());
    assert!(!needs_write(s, &again.status, &[]));
    // The node appears with a pod: Running, counted, drained.
    let (s2, ev, _) = pass(
        s,
        LeaseObservation::Held,
        &report(&["p"], &[("p", reason::TERMINATING)], &[]),
        t(60),
    );
    assert_eq!(s2.phase, Some(MaintenancePhase::Running));
    assert_eq!(s2.eviction_pods, Some(1));
    assert_eq!(s2.last_error, None);
    assert!(ev.is_empty());
}

// Upstream's contract: a lease held by someone else from the start is waited for, not counted.
#[test]
fn foreign_lease_from_the_start_is_not_counted() {
    let mut s = running_with_two();
    for i in 0..6 {
        let (next, ev, rq) = pass(&s, already_held(), &report(&[], &[], &[]), t(i));
        // The first wait of a process (the memory of earlier waits: see the test below).
        assert_eq!(rq, Requeue::After(LEASE_WAIT_INITIAL));
        assert!(ev.is_empty());
        s = next;
    }
    assert!(s.last_error.as_deref().unwrap().starts_with(&format!(
        "failed to obtain a lease that is not owned by us : {HELD_ERR} errorOnLeaseCount 0"
    )));
    assert_eq!(s.error_on_lease_count.unwrap_or(0), 0);
    assert_eq!(s.drain_progress, Some(0));
    assert_eq!(s.phase, Some(MaintenancePhase::Running));
}

// Upstream's contract: held 5 times, then released: succeeds without ever failing.
#[test]
fn lease_released_later_leads_straight_to_success() {
    let mut s = running_with_two();
    let mut all = Vec::new();
    for i in 0..5 {
        let (next, ev, _) = pass(&s, already_held(), &report(&[], &[], &[]), t(i));
        all.extend(ev);
        s = next;
    }
    assert!(
        s.last_error
            .as_deref()
            .unwrap()
            .contains("failed to obtain a lease that is not owned by us")
    );
    let (s, ev, _) = pass(&s, LeaseObservation::Held, &report(&[], &[], &[]), t(10));
    all.extend(ev);
    assert_eq!(s.phase, Some(MaintenancePhase::Succeeded));
    assert_eq!(
        (s.error_on_lease_count.unwrap_or(0), s.drain_progress),
        (0, Some(100))
    );
    assert_eq!(reasons(&all), vec!["SucceedMaintenance"]);
}

// Upstream's contract: lease lost twice during the drain, then recovered.
#[test]
fn transiently_lost_lease_is_counted_then_reset() {
    let s0 = running_with_two();
    let blocked = report(
        &["test-pod-1", "test-pod-2"],
        &[("test-pod-1", reason::PDB)],
        &["e"],
    );
    let (s1, _, _) = pass(&s0, LeaseObservation::Held, &blocked, t(1));
    let (s2, _, rq) = pass(&s1, already_held(), &blocked, t(2));
    assert_eq!(rq, Requeue::Fixed(REQUEUE_LEASE_LOST));
    // Woken at once by its own status write: not a new strike, come back when one is due.
    let (again, ev, rq) = pass(&s2, already_held(), &blocked, t(3));
    assert_eq!((&again, ev.len()), (&s2, 0));
    assert!(matches!(rq, Requeue::After(d) if d <= REQUEUE_LEASE_LOST));
    let (s3, _, _) = pass(&s2, already_held(), &blocked, t(8));
    assert_eq!(s3.error_on_lease_count, Some(2));
    assert_eq!(
        s3.last_error.as_deref(),
        Some(&*format!(
            "failed to extend a lease that used to be owned by us, incrementing error on lease count: {HELD_ERR}, errorOnLeaseCount: 2"
        ))
    );
    let (s4, ev, _) = pass(&s3, LeaseObservation::Held, &report(&[], &[], &[]), t(9));
    assert_eq!(s4.phase, Some(MaintenancePhase::Succeeded));
    assert_eq!(
        (s4.error_on_lease_count.unwrap_or(0), s4.drain_progress),
        (0, Some(100))
    );
    assert_eq!(reasons(&ev), vec!["SucceedMaintenance"]);
}

// Upstream's contract: lease lost for good: Failed after more than 3 counted errors, then quiet.
#[test]
fn permanently_lost_lease_fails_the_maintenance_once() {
    let s0 = running_with_two();
    let (mut s, _, _) = pass(
        &s0,
        LeaseObservation::Held,
        &report(&["test-pod-1"], &[("test-pod-1", reason::PDB)], &[]),
        t(1),
    );
    assert!(s.drain_progress.unwrap() > 0);
    let mut all = Vec::new();
    for i in 0..4 {
        let (next, ev, _) = pass(&s, already_held(), &report(&[], &[], &[]), t(2 + 5 * i));
        all.extend(ev);
        s = next;
    }
    assert_eq!(s.phase, Some(MaintenancePhase::Failed));
    assert!(s.error_on_lease_count.unwrap() > 3);
    assert!(is_terminal(&s));
    assert_eq!(
        s.last_error.as_deref(),
        Some("maintenance failed: lease could not be extended after 4 attempts")
    );
    assert_eq!(reasons(&all), vec!["UncordonNode", "FailedMaintenance"]);
    assert_eq!(all[0].target, EventTarget::Node);
    // Terminal: later reconciles neither write nor emit.
    let (s2, ev, rq) = pass(&s, already_held(), &report(&[], &[], &[]), t(100));
    assert!(ev.is_empty() && !needs_write(&s, &s2, &[]) && rq == Requeue::Never);
    let mut obj = nm("nm", "node01");
    obj.status = Some(s);
    assert_eq!(entry(&obj).1, Entry::Terminal);
}

// Upstream's contract (bug #154): a deleting object never falls through to maintenance.
#[test]
fn deletion_comes_first_and_never_falls_through() {
    let mut obj = nm("nm", "node01");
    obj.metadata.deletion_timestamp = Some(now_time(t(0)));
    assert_eq!(entry(&obj).1, Entry::Cleanup);
    obj.metadata.finalizers = Some(vec!["test/blocker".into()]);
    assert_eq!(entry(&obj).1, Entry::Ignore);
    obj.spec.node_name = String::new();
    assert_eq!(entry(&obj).1, Entry::Ignore);
    let mut fresh = nm("nm", "node01");
    fresh.metadata.finalizers = None;
    let (add, e) = entry(&fresh);
    assert!(add.is_some(), "the finalizer is added first");
    assert_eq!(e, Entry::Maintain);
    assert_eq!(entry(&nm("nm", "node01")).1, Entry::Maintain);
}

#[test]
fn deletion_restores_only_what_this_maintenance_holds() {
    assert_eq!(
        deletion_plan(NodeSeen::Holder(Some("a")), "a", None),
        DeletionPlan::Exit
    );
    assert_eq!(
        deletion_plan(NodeSeen::Holder(Some("a")), "a", Some("b")),
        DeletionPlan::Transfer { to: "b".into() }
    );
    assert_eq!(
        deletion_plan(NodeSeen::Holder(Some("b")), "a", None),
        DeletionPlan::Nothing
    );
    assert_eq!(
        deletion_plan(NodeSeen::Holder(None), "a", None),
        DeletionPlan::InvalidateLease
    );
    assert_eq!(
        deletion_plan(NodeSeen::Missing, "a", None),
        DeletionPlan::InvalidateLease
    );
    assert_eq!(
        deletion_plan(NodeSeen::Missing, "a", Some("b")),
        DeletionPlan::Nothing
    );
}

/// One pass as a table of observations -> plans: whether the finalizer is added, the
/// ordered steps, and how the pass ends (its status phase, events and requeue).
#[test]
fn one_pass_is_planned_whole_from_one_observation() {
    use crate::node::{
        DRAIN_TAINT_KEY, EXCLUDE_LABEL, HOLDER_ANNOTATION, HOLDER_UID_ANNOTATION,
        UNSCHEDULABLE_TAINT_KEY,
    };
    use k8s_openapi::api::core::v1::{NodeSpec, Taint};
    let now = t(100);
    // A node; `holder` records a NodeMaintenance (name, uid); `marks`: cordoned, both
    // maintenance taints, excluded from remediation.
    let node = |holder: Option<(&str, &str)>, marks: bool| {
        let mut n = Node::default();
        n.metadata.name = Some("node01".into());
        if let Some((h, uid)) = holder {
            n.metadata.annotations = Some(
                [
                    (HOLDER_ANNOTATION.to_string(), h.to_string()),
                    (HOLDER_UID_ANNOTATION.to_string(), uid.to_string()),
                    // Its holder's drain started (timeline::start_record).
                    (
                        crate::node::DRAIN_STARTED_ANNOTATION.to_string(),
                        t(-60).to_string(),
                    ),
                ]
                .into(),
            );
        }
        if marks {
            n.metadata.labels = Some([(EXCLUDE_LABEL.to_string(), "true".into())].into());
            let taint = |key: &str| Taint {
                key: key.into(),
                effect: "NoSchedule".into(),
                ..Taint::default()
            };
            n.spec = Some(NodeSpec {
                unschedulable: Some(true),
                taints: Some(vec![taint(DRAIN_TAINT_KEY), taint(UNSCHEDULABLE_TAINT_KEY)]),
                ..NodeSpec::default()
            });
        }
        Some(n)
    };
    let foreign_lease = || {
        Some(Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some("NodeHealthCheck-x".into()),
                lease_duration_seconds: Some(3600),
                renew_time: Some(MicroTime(t(90))),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        })
    };
    let our_lease = || {
        Some(Lease {
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
        })
    };
    let mine = || {
        let mut o = nm("nm", "node01");
        o.metadata.uid = Some("uid-nm".into());
        o.status = Some(running_with_two());
        o
    };
    let seen = |node: Option<Node>, lease: Option<Lease>, holder_live: bool| {
        World::Maintenance(Box::new(ObservedMaintenance {
            node,
            lease,
            holder_live,
            ..ObservedMaintenance::default()
        }))
    };
    // (what, the NodeMaintenance, the reads, the writes in order, then)
    type Case<'a> = (&'a str, NodeMaintenance, World, Vec<&'a str>, &'a str);
    let mut fresh = nm("nm", "node01");
    fresh.metadata.finalizers = None;
    let mut deleted = nm("nm", "node01");
    deleted.metadata.finalizers = Some(vec!["test/blocker".into()]);
    deleted.metadata.deletion_timestamp = Some(now_time(t(0)));
    let mut terminal = mine();
    terminal.status = Some(NodeMaintenanceStatus {
        phase: Some(MaintenancePhase::Failed),
        error_on_lease_count: Some(MAX_LEASE_ERRORS + 1),
        ..NodeMaintenanceStatus::default()
    });
    let mut moved = mine();
    moved
        .annotations_mut()
        .insert(crate::api::ENTERED_NODE_ANNOTATION.into(), "node02".into());
    let record = |o: &mut NodeMaintenance, provider_id: &str, uid: &str| {
        let a = o.annotations_mut();
        a.insert(crate::api::ENTERED_NODE_ANNOTATION.into(), "node01".into());
        a.insert(
            crate::api::ENTERED_NODE_PROVIDER_ID_ANNOTATION.into(),
            provider_id.into(),
        );
        a.insert(crate::api::ENTERED_NODE_UID_ANNOTATION.into(), uid.into());
    };
    let mut entered_here = mine();
    record(&mut entered_here, "", "");
    let mut entered_before_identities = mine();
    entered_before_identities
        .annotations_mut()
        .insert(crate::api::ENTERED_NODE_ANNOTATION.into(), "node01".into());
    // Entered machine i-old (Node uid-old), whose Node was deleted: Failed, node missing.
    let mut node_was_deleted = mine();
    record(&mut node_was_deleted, "aws:///i-old", "uid-old");
    node_was_deleted.status.as_mut().unwrap().phase = Some(MaintenancePhase::Failed);
    let machine = |provider_id: &str, uid: &str| {
        let mut n = node(None, false).unwrap();
        n.metadata.uid = Some(uid.into());
        n.spec.get_or_insert_with(Default::default).provider_id = Some(provider_id.into());
        Some(n)
    };
    let mut succeeded = entered_here.clone();
    if let Some(s) = succeeded.status.as_mut() {
        s.phase = Some(MaintenancePhase::Succeeded);
    }
    let mut striking = entered_here.clone();
    if let Some(s) = striking.status.as_mut() {
        s.error_on_lease_count = Some(MAX_LEASE_ERRORS);
        s.last_update = Some(now_time(t(0)));
    }
    let cases: Vec<Case> = vec![
        (
            "new: finalizer, status initialised before anything else, node missing",
            fresh,
            World::Maintenance(Box::new(ObservedMaintenance {
                survey: Some(survey(&["a", "b"])),
                ..ObservedMaintenance::default()
            })),
            vec![
                "add finalizer",
                "BeginMaintenance",
                "status Some(Running)",
                "status Some(Failed)",
                "FailedMaintenance",
            ],
            "After(30s)",
        ),
        (
            "deleted without our finalizer: nothing",
            deleted,
            World::Nothing,
            vec![],
            "Never",
        ),
        (
            "failed for good: nothing",
            terminal,
            World::Nothing,
            vec![],
            "Never",
        ),
        (
            "invalid nodeName: failed, no node touched",
            nm("nm", "Node_01"),
            World::Maintenance(Box::default()),
            vec!["status Some(Failed)", "FailedMaintenance"],
            "After(300s)",
        ),
        (
            "nodeName changed: restore the node entered and its lease, clear record and status",
            moved,
            World::Maintenance(Box::new(ObservedMaintenance {
                entered: Some((
                    "node02".into(),
                    node(Some(("nm", "uid-nm")), true),
                    our_lease(),
                )),
                ..ObservedMaintenance::default()
            })),
            vec![
                "exit node",
                "UncordonNode",
                "delete lease",
                "annotate null",
                "status None",
            ],
            "After(100ms)",
        ),
        (
            "free node, no lease: lease, ownership recorded, entered, then recorded (best effort), drain",
            mine(),
            seen(node(None, false), None, true),
            vec![
                "create lease",
                "status Some(Running)",
                "enter node",
                "record \"node01\"",
            ],
            "drain",
        ),
        (
            "entered before identities were recorded: the record is completed, best effort",
            entered_before_identities,
            seen(node(Some(("nm", "uid-nm")), true), our_lease(), true),
            vec!["status Some(Running)", "record \"node01\""],
            "drain",
        ),
        (
            "the node entered was deleted and another machine registered under its name: Failed, \
             nothing on it touched, no lease taken, ours given up",
            node_was_deleted.clone(),
            seen(machine("aws:///i-new", "uid-new"), our_lease(), true),
            vec!["status Some(Failed)", "delete lease", "NodeReplaced"],
            "After(30s)",
        ),
        (
            "another machine under the name, already entered by another maintenance: its lease stays",
            node_was_deleted.clone(),
            seen(
                machine("aws:///i-new", "uid-new").map(|mut n| {
                    n.metadata.annotations = node(Some(("other", "uid-o")), true)
                        .unwrap()
                        .metadata
                        .annotations;
                    n
                }),
                our_lease(),
                true,
            ),
            vec!["status Some(Failed)", "NodeReplaced"],
            "After(30s)",
        ),
        (
            "the machine entered came back (same providerID, new Node): Running, entered, drains again",
            node_was_deleted,
            seen(machine("aws:///i-old", "uid-back"), our_lease(), true),
            vec!["status Some(Running)", "enter node", "record \"node01\""],
            "drain",
        ),
        (
            "lease held by another holder, never ours: wait, the node untouched",
            mine(),
            seen(node(None, false), foreign_lease(), true),
            vec!["status Some(Running)"],
            "After(2s)",
        ),
        (
            "node held by another live NodeMaintenance: no drain",
            mine(),
            seen(node(Some(("other", "uid-o")), true), None, true),
            vec![
                "create lease",
                "status Some(Running)",
                "status Some(Running)",
            ],
            "After(30s)",
        ),
        (
            "node held by a vanished NodeMaintenance: taken over, drain",
            mine(),
            seen(node(Some(("other", "uid-o")), true), None, false),
            vec![
                "create lease",
                "status Some(Running)",
                "enter node",
                "record \"node01\"",
            ],
            "drain",
        ),
        (
            "ours, partly undone: re-applied, and said so right after",
            entered_here.clone(),
            seen(node(Some(("nm", "uid-nm")), false), our_lease(), true),
            vec!["status Some(Running)", "enter node", "MaintenanceReapplied"],
            "drain",
        ),
        (
            "Succeeded: node and lease still enforced, no drain round (ours: upstream drains on every reconcile)",
            succeeded,
            seen(node(Some(("nm", "uid-nm")), false), our_lease(), true),
            vec![
                "status Some(Succeeded)",
                "enter node",
                "MaintenanceReapplied",
                "status Some(Succeeded)",
            ],
            "After(300s)",
        ),
        (
            "ours, complete, lease current: no write before the drain round",
            entered_here,
            seen(node(Some(("nm", "uid-nm")), true), our_lease(), true),
            vec!["status Some(Running)"],
            "drain",
        ),
        (
            "lease lost past the limit: count recorded before leaving, then the node; a foreign lease stays",
            striking,
            seen(node(Some(("nm", "uid-nm")), true), foreign_lease(), true),
            vec![
                "status Some(Running)",
                "exit node after lease loss",
                "status Some(Failed)",
                "UncordonNode",
                "FailedMaintenance",
            ],
            "Never",
        ),
    ];
    for (what, nm, world, writes, then) in cases {
        let got = plan(
            &Observed {
                policy: crate::policy::resolve(&nm, &Default::default()),
                nm,
                world,
                memory: Memory::default(),
                schema: StatusSchema::default(),
            },
            now,
        );
        assert_eq!(labels(&got), writes, "{what}");
        assert_eq!(then_of(&got), then, "{what}");
    }
}

/// The drain's start: recorded on the node, in the patch that first enters it, by the API
/// server's clock (the `Date` of the node's read; the operator's only without one), and the
/// round compares with it; the NodeMaintenance's record, written after, carries no start. Read
/// back from the node.
#[test]
fn the_drain_start_is_the_api_servers_time_recorded_on_the_node() {
    use crate::api::{
        DRAIN_STARTED_ANNOTATION, ENTERED_NODE_ANNOTATION, ENTERED_NODE_PROVIDER_ID_ANNOTATION,
        ENTERED_NODE_UID_ANNOTATION,
    };
    let mut o = nm("nm", "node01");
    o.metadata.uid = Some("uid-nm".into());
    o.status = Some(running_with_two());
    let mut node = Node::default();
    node.metadata.name = Some("node01".into());
    node.metadata.uid = Some("uid-node".into());
    node.metadata.resource_version = Some("1".into());
    node.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
        provider_id: Some("kwok://node01".into()),
        ..Default::default()
    });
    // The operator's clock 30 s behind the API server's.
    let now = t(50);
    let server = t(80);
    for (server_time, start) in [(Some(server), server), (None, now)] {
        let world = World::Maintenance(Box::new(ObservedMaintenance {
            node: Some(node.clone()),
            server_time,
            holder_live: true,
            ..ObservedMaintenance::default()
        }));
        let got = plan(
            &Observed {
                policy: crate::policy::resolve(&o, &Default::default()),
                nm: o.clone(),
                world,
                memory: Memory::default(),
                schema: StatusSchema::default(),
            },
            now,
        );
        let entered = got.writes.iter().find_map(|w| match w {
            Write::Node {
                patch,
                purpose: NodePurpose::Enter(_),
                ..
            } => Some(patch["metadata"]["annotations"][DRAIN_STARTED_ANNOTATION].clone()),
            _ => None,
        });
        assert_eq!(
            entered,
            Some(serde_json::json!(start.to_string())),
            "{got:?}"
        );
        let recorded = got.writes.iter().find_map(|w| match w {
            Write::Annotations {
                patch,
                required: false,
            } => Some(patch["metadata"]["annotations"].clone()),
            _ => None,
        });
        assert_eq!(
            recorded,
            Some(serde_json::json!({
                ENTERED_NODE_ANNOTATION: "node01",
                ENTERED_NODE_PROVIDER_ID_ANNOTATION: "kwok://node01",
                ENTERED_NODE_UID_ANNOTATION: "uid-node",
            })),
            "{got:?}"
        );
        assert!(
            matches!(&got.then, Then::Drain(round) if round.started == Some(start)),
            "{:?}",
            got.then
        );
    }
    // Read back from the node: a later pass keeps the start and the round compares with it,
    // whatever the NodeMaintenance's legacy annotation or drainStartTime say.
    o.status.as_mut().unwrap().drain_start_time = Some(now_time(t(-50)));
    o.annotations_mut()
        .insert(DRAIN_STARTED_ANNOTATION.into(), t(7).to_string());
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": "node01", "uid": "uid-node", "resourceVersion": "2",
            "annotations": {
                crate::node::HOLDER_ANNOTATION: "nm", crate::node::HOLDER_UID_ANNOTATION: "uid-nm",
                crate::node::PRIOR_STATE_ANNOTATION: "{}", DRAIN_STARTED_ANNOTATION: t(9).to_string(),
            },
            "labels": {crate::node::EXCLUDE_LABEL: "true"},
        },
        "spec": {"unschedulable": true, "providerID": "kwok://node01", "taints": [
            {"key": crate::node::UNSCHEDULABLE_TAINT_KEY, "effect": "NoSchedule"},
            {"key": crate::node::DRAIN_TAINT_KEY, "effect": "NoSchedule"},
        ]},
    }))
    .unwrap();
    let got = plan(
        &Observed {
            policy: crate::policy::resolve(&o, &Default::default()),
            nm: o,
            world: World::Maintenance(Box::new(ObservedMaintenance {
                node: Some(node),
                server_time: Some(server),
                holder_live: true,
                ..ObservedMaintenance::default()
            })),
            memory: Memory::default(),
            schema: StatusSchema::default(),
        },
        now,
    );
    assert!(
        matches!(&got.then, Then::Drain(round) if round.started == Some(t(9))),
        "{:?}",
        got.then
    );
}

/// The deletion pass as a table of observations -> ordered steps.
#[test]
fn deletion_pass_is_planned_whole_in_order() {
    use crate::node::{DRAIN_TAINT_KEY, HOLDER_ANNOTATION, HOLDER_UID_ANNOTATION};
    use k8s_openapi::api::core::v1::{NodeSpec, Taint};
    fn node(holder: Option<(&str, &str)>, drain_taint: bool) -> Option<Node> {
        let mut n = Node::default();
        n.metadata.name = Some("node01".into());
        if let Some((h, uid)) = holder {
            n.metadata.annotations = Some(
                [
                    (HOLDER_ANNOTATION.to_string(), h.to_string()),
                    (HOLDER_UID_ANNOTATION.to_string(), uid.to_string()),
                ]
                .into(),
            );
        }
        if drain_taint {
            n.spec = Some(NodeSpec {
                taints: Some(vec![Taint {
                    key: DRAIN_TAINT_KEY.into(),
                    effect: "NoSchedule".into(),
                    ..Taint::default()
                }]),
                ..NodeSpec::default()
            });
        }
        Some(n)
    }
    let observed = |node_name: &str, node: Option<Node>, successor: Option<&str>, started| {
        let mut lease = Lease::default();
        lease.metadata.name = Some(format!("node-{node_name}"));
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(crate::lease::LEASE_HOLDER.into()),
            ..LeaseSpec::default()
        });
        ObservedDeletion {
            name: "a".into(),
            uid: Some("uid-a".into()),
            node_name: node_name.into(),
            node,
            successor: successor.map(|s| (s.to_string(), Some(format!("uid-{s}")))),
            started,
            lease: Some(lease),
            finalizers: vec!["other/x".into(), FINALIZER.into()],
            replaced: false,
            evacuations: Default::default(),
        }
    };
    // Two VMIs evacuating off the node; the server offers `evacuate/cancel` or not.
    let evacuating = |o: ObservedDeletion, cancel_served| ObservedDeletion {
        evacuations: crate::drain::cancel::Evacuations {
            vmis: ["vm-1", "vm-2"]
                .map(|n| crate::drain::cancel::VmiRef {
                    namespace: "ns".into(),
                    name: n.into(),
                })
                .to_vec(),
            cancel_served,
            unread: None,
        },
        ..o
    };
    let replaced = |node: Option<Node>| ObservedDeletion {
        replaced: true,
        ..observed("node01", node, None, true)
    };
    let with_tail = |v: &[&str]| {
        let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
        v.extend(["remove finalizer".into(), "RemovedMaintenance".into()]);
        v
    };
    let cases: Vec<(&str, ObservedDeletion, Vec<String>)> = vec![
        (
            "held by us, nobody else wants it: exit, then the lease",
            observed("node01", node(Some(("a", "uid-a")), true), None, true),
            with_tail(&["exit node", "delete lease"]),
        ),
        (
            "held by us, a successor: hand over, lease stays",
            observed("node01", node(Some(("a", "uid-a")), true), Some("b"), true),
            with_tail(&["transfer node"]),
        ),
        (
            "held under our name by an earlier object (other uid): not ours",
            observed("node01", node(Some(("a", "uid-old")), true), None, true),
            with_tail(&[]),
        ),
        (
            "held by another NodeMaintenance: node and lease alone",
            observed("node01", node(Some(("b", "uid-b")), true), None, true),
            with_tail(&[]),
        ),
        (
            "node missing: the lease by name",
            observed("node01", None, None, true),
            with_tail(&["delete lease"]),
        ),
        (
            "node missing, a successor: nothing",
            observed("node01", None, Some("b"), true),
            with_tail(&[]),
        ),
        (
            "left in maintenance by upstream NMO: adopted and restored in one patch, then the lease",
            observed("node01", node(None, true), None, true),
            with_tail(&["adopt and exit node", "UncordonNode", "delete lease"]),
        ),
        (
            "drain taint but never started: only the lease",
            observed("node01", node(None, true), None, false),
            with_tail(&["delete lease"]),
        ),
        (
            "no record, no taint: only the lease",
            observed("node01", node(None, false), None, true),
            with_tail(&["delete lease"]),
        ),
        (
            "invalid node name: no node, no lease",
            observed("Node_01", None, None, true),
            with_tail(&[]),
        ),
        (
            "another machine under the name entered, carrying a drain taint: not adopted, the lease by name",
            replaced(node(None, true)),
            with_tail(&["delete lease"]),
        ),
        (
            "VMIs evacuating off the node restored, cancel offered: restored first, then one cancel each",
            evacuating(
                observed("node01", node(Some(("a", "uid-a")), true), None, true),
                true,
            ),
            with_tail(&[
                "exit node",
                "delete lease",
                "cancel evacuation",
                "cancel evacuation",
            ]),
        ),
        (
            "VMIs evacuating off the node restored, cancel not offered: one event each, the migration continues",
            evacuating(
                observed("node01", node(Some(("a", "uid-a")), true), None, true),
                false,
            ),
            with_tail(&[
                "exit node",
                "delete lease",
                "EvacuationContinues",
                "EvacuationContinues",
            ]),
        ),
        (
            "VMIs evacuating, the node handed to a successor: it stays in maintenance, the migrations go on",
            evacuating(
                observed("node01", node(Some(("a", "uid-a")), true), Some("b"), true),
                true,
            ),
            with_tail(&["transfer node"]),
        ),
        (
            "VMIs evacuating, the node held by another NodeMaintenance: not ours to cancel",
            evacuating(
                observed("node01", node(Some(("b", "uid-b")), true), None, true),
                true,
            ),
            with_tail(&[]),
        ),
        (
            "the VMIs could not be listed: the node restored all the same, and a Warning",
            ObservedDeletion {
                evacuations: crate::drain::cancel::Evacuations {
                    unread: Some("forbidden".into()),
                    ..Default::default()
                },
                ..observed("node01", node(Some(("a", "uid-a")), true), None, true)
            },
            with_tail(&["exit node", "delete lease", "EvacuationNotCancelled"]),
        ),
        (
            "another machine under the name entered, held by another NodeMaintenance: left alone",
            replaced(node(Some(("b", "uid-b")), true)),
            with_tail(&[]),
        ),
    ];
    for (what, o, want) in cases {
        let mut nm = nm("a", &o.node_name);
        nm.metadata.deletion_timestamp = Some(now_time(t(0)));
        let got = plan(
            &Observed {
                policy: crate::policy::resolve(&nm, &Default::default()),
                nm,
                world: World::Deletion(Box::new(o)),
                memory: Memory::default(),
                schema: StatusSchema::default(),
            },
            t(1),
        );
        assert_eq!(labels(&got), want, "{what}");
        assert_eq!(got.remember, Remember::Forget, "{what}");
        // Each VMI's event names it, as text and as the related object.
        for w in &got.writes {
            match w {
                Write::CancelEvacuation { vmi, done, failed } => {
                    let named = format!("{}/{}", vmi.namespace, vmi.name);
                    assert!(!done.warning && failed.warning, "{what}");
                    for e in [done, failed] {
                        assert!(e.message.contains(&named), "{what}: {e:?}");
                        assert_eq!(e.vmi.as_ref(), Some(vmi), "{what}");
                    }
                }
                Write::Event { event, .. } if event.reason == "EvacuationContinues" => {
                    let vmi = event.vmi.as_ref().expect(what);
                    let named = format!("{}/{}", vmi.namespace, vmi.name);
                    assert!(
                        event
                            .message
                            .contains(&format!("The migration of VMI {named} continues")),
                        "{what}: {event:?}"
                    );
                }
                _ => {}
            }
        }
        let Some(Write::Finalizers { patch, .. }) = got
            .writes
            .iter()
            .find(|w| matches!(w, Write::Finalizers { .. }))
        else {
            panic!("{what}: no finalizer write");
        };
        assert_eq!(
            serde_json::to_value(patch).unwrap(),
            serde_json::json!([
                {"op": "test", "path": "/metadata/finalizers/1", "value": FINALIZER},
                {"op": "remove", "path": "/metadata/finalizers/1"},
            ]),
            "{what}: ours removed by index, tested first"
        );
    }
}

/// Issue 10 item 3: on upstream's schema the stored status lacks our additions; once the
/// schema is learnt, a pass that changes only those (or lastUpdate) writes nothing, and a
/// field never sent before calls for a dry run first.
#[test]
fn status_comparison_ignores_what_the_api_server_prunes() {
    let running = running_with_two();
    let (s, _, _) = pass(
        &running,
        LeaseObservation::Held,
        &report(&["a", "b"], &[], &[]),
        t(5),
    );
    assert_eq!(s.phase, Some(MaintenancePhase::Succeeded));
    let pruned_copy = |s: &NodeMaintenanceStatus| NodeMaintenanceStatus {
        conditions: None,
        observed_generation: None,
        drain_start_time: None,
        blockers: None,
        ..s.clone()
    };
    let stored = pruned_copy(&s);
    let mut schema = StatusSchema::default();
    assert!(schema.has_unknown(&s));
    let fresh = schema.learn(&s, Some(&stored));
    assert_eq!(
        fresh,
        ["conditions", "drainStartTime", "observedGeneration"]
    );
    assert!(!schema.has_unknown(&s));
    // The next pass, later: only lastUpdate, conditions' times and drainStartTime differ.
    let (again, _, _) = pass(
        &stored,
        LeaseObservation::Held,
        &report(&["a", "b"], &[], &[]),
        t(60),
    );
    assert!(
        needs_write(&stored, &again, &[]),
        "without the schema: a write every pass"
    );
    assert!(!needs_write(&stored, &again, &schema.pruned()));
    // A kept field that changes is still written.
    let failed = NodeMaintenanceStatus {
        last_error: Some("x".into()),
        ..again.clone()
    };
    assert!(needs_write(&stored, &failed, &schema.pruned()));
    assert!(schema.has_unknown(&failed), "lastError not seen yet");
    // With our own CRD nothing is pruned.
    let mut ours = StatusSchema::default();
    assert!(ours.learn(&s, Some(&s)).is_empty());
    assert!(ours.pruned().is_empty());
}

#[test]
fn successor_is_the_oldest_live_maintenance_of_the_same_node() {
    let me = nm("a", "n1");
    let mut b = nm("b", "n1");
    b.metadata.creation_timestamp = Some(now_time(t(5)));
    let mut c = nm("c", "n1");
    c.metadata.creation_timestamp = Some(now_time(t(1)));
    let mut deleting = nm("d", "n1");
    deleting.metadata.creation_timestamp = Some(now_time(t(0)));
    deleting.metadata.deletion_timestamp = Some(now_time(t(9)));
    let other_node = nm("e", "n2");
    let all = [me.clone(), b, c, deleting, other_node];
    assert_eq!(
        successor(&me.name_any(), "n1", all.iter()).map(ResourceExt::name_any),
        Some("c".into())
    );
    assert_eq!(successor(&me.name_any(), "n1", [me.clone()].iter()), None);
}

#[test]
fn invalid_node_names_fail_without_touching_anything() {
    assert!(validate_node_name("").unwrap_err().contains("empty"));
    assert!(validate_node_name("Node_1").is_err());
    assert!(validate_node_name("-a").is_err());
    assert!(validate_node_name("a..b").is_err());
    assert!(validate_node_name(&"a".repeat(254)).is_err());
    assert!(validate_node_name("worker-1.example.com").is_ok());
    let mut obj = nm("nm", "");
    assert!(matches!(entry(&obj).1, Entry::InvalidNodeName(_)));
    obj.spec.node_name = "ok".into();
    assert_eq!(entry(&obj).1, Entry::Maintain);
    let step = invalid_node_name(&NodeMaintenanceStatus::default(), "", "it is empty", at(0));
    assert_eq!(step.status.phase, Some(MaintenancePhase::Failed));
    assert_eq!(
        step.status.last_error.as_deref(),
        Some("resource name may not be empty: invalid nodeName, it is empty; no node was changed")
    );
    assert_eq!(reasons(&step.events), vec!["FailedMaintenance"]);
    assert!(
        invalid_node_name_error("doesNotExist", "it is not a valid node name")
            .starts_with(r#"nodes "doesNotExist" not found"#)
    );
    assert!(
        invalid_node_name(&step.status, "", "it is empty", at(5))
            .events
            .is_empty()
    );
}

/// `docs/drain-contract.md` §7: a valid node name of 251 characters has no valid lease name; the
/// maintenance fails at once, saying so, and the plan touches no node and no lease.
#[test]
fn a_node_name_too_long_for_its_lease_fails_without_touching_anything() {
    let long = format!("{}.example", "a".repeat(61) + &".b".repeat(91));
    assert_eq!(long.len(), 251);
    assert!(crate::api::validate_node_name(&long).is_ok());
    let why = validate_node_name(&long).unwrap_err();
    assert!(validate_node_name(&"a".repeat(248)).is_ok());
    let obj = nm("nm", &long);
    assert_eq!(entry(&obj).1, Entry::InvalidNodeName(why.clone()));
    let text = invalid_node_name_error(&long, &why);
    assert!(
        text.starts_with(
            "invalid nodeName, its medik8s lease name node-<nodeName> would have 256 characters"
        ) && text.ends_with("; no node was changed"),
        "{text}"
    );
    let step = invalid_node_name(&NodeMaintenanceStatus::default(), &long, &why, at(0));
    assert_eq!(step.status.phase, Some(MaintenancePhase::Failed));
    assert_eq!(step.status.last_error.as_deref(), Some(text.as_str()));
    assert_eq!(reasons(&step.events), vec!["FailedMaintenance"]);
}

#[test]
fn drain_progress_is_clamped_and_never_negative() {
    assert_eq!(drain_progress(2, 1), 50);
    assert_eq!(drain_progress(3, 1), 66);
    assert_eq!(drain_progress(2, 5), 0);
    assert_eq!(drain_progress(0, 3), 0);
    assert_eq!(drain_progress(2, 0), 100);
    // And through a pass where more pods are pending than were counted at the start.
    let s0 = init_status(&NodeMaintenanceStatus::default(), &survey(&["a"]), at(0)).unwrap();
    let rep = report(
        &["a", "b", "c"],
        &[("a", reason::PDB), ("b", reason::PDB), ("c", reason::PDB)],
        &[],
    );
    let (s, _, _) = pass(&s0, LeaseObservation::Held, &rep, t(1));
    assert_eq!(s.drain_progress, Some(0));
}

#[test]
fn blocked_pass_requeues_at_the_first_per_pod_retry_and_names_skipped_pods_once() {
    let s0 = running_with_two();
    let mut rep = report(&["test-pod-1"], &[("test-pod-1", reason::PDB)], &[]);
    rep.retry_in = Some(Duration::from_millis(4900));
    let skipped = drain::skipped_entry(&PodReference {
        namespace: "test-namespace".into(),
        name: "tolerant".into(),
    });
    rep.skipped = vec![skipped.clone()];
    rep.newly_skipped = vec![skipped];
    let step = drained(&s0, &rep, at(1));
    assert_eq!(step.requeue, Requeue::Fixed(Duration::from_millis(4900)));
    assert_eq!(reasons(&step.events), vec![event::POD_SKIPPED]);
    let cond = step.status.conditions.as_ref().unwrap();
    let drained_cond = cond.iter().find(|c| c.type_ == condition::DRAINED).unwrap();
    assert!(
        drained_cond
            .message
            .ends_with("; not evicted: test-namespace/tolerant (ToleratesMaintenanceTaints)"),
        "{}",
        drained_cond.message
    );
    // The announcement is written before the status: a status write that conflicts ends the
    // pass, and the drain's memory already counts the pod as announced.
    let round = DrainRound {
        node: "node01".into(),
        status: s0.clone(),
        stored: s0.clone(),
        started: None,
        policy: Default::default(),
        generation: GEN,
        pruned: Vec::new(),
    };
    let kinds: Vec<&str> = drained_plan(&round, &rep, None, t(1))
        .writes
        .iter()
        .map(Write::kind)
        .collect();
    assert_eq!(kinds, ["PodNotEvicted", "status"]);
    // So is a failed migration's Warning, which is about the migration, not the pod (a pass
    // woken by the migration's next change lost it to a conflict, and the memory said warned).
    let mut failed = report(&["vm-launcher"], &[("vm-launcher", "MigrationFailed")], &[]);
    failed.newly_failed_migrations = vec![drain::report::FailedMigration {
        blocker: failed.pending[0].clone(),
        migration: "vm-migration-1".into(),
    }];
    let kinds: Vec<&str> = drained_plan(&round, &failed, None, t(1))
        .writes
        .iter()
        .map(Write::kind)
        .collect();
    assert_eq!(kinds, ["PodMigrationFailed", "status"]);
    // Announced already: no second event; a retry due at once is not a busy loop.
    rep.newly_skipped.clear();
    rep.retry_in = Some(Duration::ZERO);
    let again = drained(&step.status, &rep, at(2));
    assert!(again.events.is_empty());
    assert_eq!(again.requeue, Requeue::Fixed(Duration::from_millis(200)));
    assert!(!needs_write(&step.status, &again.status, &[]));
}

#[test]
fn blocked_pass_records_blockers_and_requeues_with_the_fixed_duration() {
    let s0 = running_with_two();
    let rep = report(
        &["test-pod-1", "test-pod-2"],
        &[
            ("test-pod-1", reason::PDB),
            ("test-pod-2", reason::TERMINATING),
        ],
        &[
            "error when evicting pods/\"test-pod-1\" -n \"test-namespace\": Cannot evict pod as it would violate the pod's disruption budget.",
        ],
    );
    let (s, ev, rq) = pass(&s0, LeaseObservation::Held, &rep, t(1));
    assert!(ev.is_empty());
    assert_eq!(rq, Requeue::Fixed(REQUEUE_BLOCKED));
    assert_eq!(s.phase, Some(MaintenancePhase::Running));
    assert_eq!(
        s.pending_pods,
        Some(vec!["test-pod-1".to_string(), "test-pod-2".to_string()])
    );
    assert_eq!(s.blockers.as_ref().unwrap().len(), 2);
    assert_eq!(s.drain_progress, Some(0));
    assert!(
        s.last_error
            .as_deref()
            .unwrap()
            .starts_with("error when evicting pods/\"test-pod-1\"")
    );
    let drained_cond = s
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == condition::DRAINED)
        .unwrap();
    assert_eq!(
        (drained_cond.status.as_str(), drained_cond.reason.as_str()),
        ("False", "EvictionBlocked")
    );
    // Only terminating left: short requeue, lastError cleared.
    let rep = report(&["test-pod-2"], &[("test-pod-2", reason::TERMINATING)], &[]);
    let (s, _, rq) = pass(&s, LeaseObservation::Held, &rep, t(2));
    assert_eq!(rq, Requeue::Fixed(REQUEUE_TERMINATING));
    assert_eq!((s.drain_progress, s.last_error.as_ref()), (Some(50), None));
}

#[test]
fn lease_ownership_comes_from_the_condition_not_the_progress() {
    // drainProgress > 0 without ever holding the lease (e.g. pods left on their own): not counted.
    let mut s = running_with_two();
    s.drain_progress = Some(50);
    let LeaseStep::Wait(step) = lease_result(&s, &already_held(), false, at(1)) else {
        panic!()
    };
    assert_eq!(step.status.error_on_lease_count.unwrap_or(0), 0);
    // Held with drainProgress 0 (nothing evicted yet), then lost: counted.
    let LeaseStep::Proceed(held) =
        lease_result(&running_with_two(), &LeaseObservation::Held, false, at(1))
    else {
        panic!()
    };
    assert!(held_lease_before(&held));
    let LeaseStep::Wait(step) = lease_result(&held, &already_held(), false, at(2)) else {
        panic!()
    };
    assert_eq!(step.status.error_on_lease_count, Some(1));
    assert!(held_lease_before(&step.status));
}

/// The wait for a lease we never held comes from what earlier passes remember, and the plan
/// says what to remember next; holding the lease forgets the waits.
#[test]
fn lease_wait_comes_from_the_remembered_waits() {
    let mut o = nm("nm", "node01");
    o.metadata.uid = Some("uid-nm".into());
    o.status = Some(running_with_two());
    let mut node = Node::default();
    node.metadata.name = Some("node01".into());
    let foreign = Lease {
        spec: Some(LeaseSpec {
            holder_identity: Some("NodeHealthCheck-x".into()),
            lease_duration_seconds: Some(3600),
            renew_time: Some(MicroTime(t(0))),
            ..LeaseSpec::default()
        }),
        ..Lease::default()
    };
    let observed = |lease: Option<Lease>, lease_waits| Observed {
        policy: crate::policy::resolve(&o, &Default::default()),
        nm: o.clone(),
        world: World::Maintenance(Box::new(ObservedMaintenance {
            node: Some(node.clone()),
            lease,
            holder_live: true,
            ..ObservedMaintenance::default()
        })),
        memory: Memory {
            lease_waits,
            ..Memory::default()
        },
        schema: StatusSchema::default(),
    };
    let waiting = plan(&observed(Some(foreign), 3), t(1));
    assert_eq!(
        waiting.then,
        Then::Requeue(Requeue::After(Duration::from_secs(16)))
    );
    assert_eq!(
        waiting.remember,
        Remember::Set(Memory {
            lease_waits: 4,
            ..Memory::default()
        })
    );
    let held = plan(&observed(None, 4), t(2));
    let proceeding = Memory {
        paused: Some(false),
        deadline_announced: Some(false),
        ..Memory::default()
    };
    assert_eq!(held.remember, Remember::Set(proceeding));
    assert!(matches!(held.then, Then::Drain(_)));
}

#[test]
fn lease_wait_doubles_up_to_thirty_seconds() {
    assert_eq!(lease_wait(0), Duration::from_secs(2));
    assert_eq!(lease_wait(1), Duration::from_secs(4));
    assert_eq!(lease_wait(3), Duration::from_secs(16));
    assert_eq!(lease_wait(4), Duration::from_secs(30));
    assert_eq!(lease_wait(100), Duration::from_secs(30));
}

#[test]
fn reapplied_maintenance_is_reported_with_what_was_undone() {
    let (s, ev) = entered(
        &running_with_two(),
        "node01",
        &["cordon", "medik8s.io/drain taint"],
        at(1),
    );
    assert_eq!(ev.len(), 1);
    assert!(ev[0].warning);
    assert_eq!(ev[0].reason, "MaintenanceReapplied");
    assert_eq!(
        ev[0].message,
        "Re-applied maintenance to node node01: cordon, medik8s.io/drain taint had been removed"
    );
    let (_, ev) = entered(&s, "node01", &[], at(2));
    assert!(ev.is_empty());
}

#[test]
fn conditions_keep_their_transition_time_until_the_status_flips() {
    let mut s = NodeMaintenanceStatus::default();
    set_condition(&mut s, "Drained", false, "A", "m", at(0));
    set_condition(&mut s, "Drained", false, "B", "m2", at(10));
    let c = &s.conditions.as_ref().unwrap()[0];
    assert_eq!((c.last_transition_time.0, c.reason.as_str()), (t(0), "B"));
    set_condition(&mut s, "Drained", true, "C", "m3", at(20));
    assert_eq!(
        s.conditions.as_ref().unwrap()[0].last_transition_time.0,
        t(20)
    );
}

#[test]
fn status_patch_nulls_every_cleared_field() {
    let s = NodeMaintenanceStatus {
        phase: Some(MaintenancePhase::Succeeded),
        drain_progress: Some(100),
        ..Default::default()
    };
    let p = status_patch(&s);
    assert_eq!(p["status"]["phase"], "Succeeded");
    assert_eq!(p["status"]["lastError"], serde_json::Value::Null);
    assert!(p["status"].as_object().unwrap().contains_key("pendingPods"));
    // Every field of the type is covered.
    let full = serde_json::to_value(NodeMaintenanceStatus {
        phase: Some(MaintenancePhase::Running),
        drain_progress: Some(1),
        last_update: Some(now_time(t(0))),
        last_error: Some("e".into()),
        pending_pods: Some(vec![]),
        pending_pods_refs: Some(vec![]),
        total_pods: Some(1),
        eviction_pods: Some(1),
        error_on_lease_count: Some(1),
        blockers: Some(vec![]),
        evacuating_pods: Some(1),
        drain_start_time: Some(now_time(t(0))),
        drain_deadline: Some(now_time(t(0))),
        on_timeout: Some(crate::api::OnTimeout::Wait),
        observed_generation: Some(1),
        conditions: Some(vec![]),
    })
    .unwrap();
    let nulled = status_patch(&NodeMaintenanceStatus::default());
    let keys = |v: &serde_json::Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&nulled["status"]), keys(&full));
    assert!(
        nulled["status"]
            .as_object()
            .unwrap()
            .values()
            .all(|v| v.is_null())
    );
    assert_eq!(
        p.get("metadata"),
        None,
        "the executor adds the resourceVersion"
    );
}

/// docs/drain-contract.md §3: a Succeeded maintenance is re-checked every 5 minutes and its
/// lease renewed once 900 s passed since the last renewal, so renewals come 15 to 20 minutes
/// apart, well inside the lease's 3600 s.
#[test]
fn a_succeeded_maintenance_renews_its_lease_15_to_20_minutes_apart() {
    use crate::lease::{LEASE_DURATION, RENEW_AFTER};
    assert_eq!(REQUEUE_SUCCEEDED, Duration::from_secs(300));
    assert_eq!(RENEW_AFTER, Duration::from_secs(900));
    let latest = RENEW_AFTER + REQUEUE_SUCCEEDED;
    assert_eq!(latest, Duration::from_secs(1200));
    assert!(
        latest * 2 < LEASE_DURATION,
        "a missed re-check still renews in time"
    );
}

/// `docs/drain-contract.md` §10: a paused maintenance keeps its node entered and its lease, and
/// runs no drain round; unpausing resumes the round; a refused annotation value is said in
/// status and a Warning event, and the default applies.
#[test]
fn a_paused_maintenance_runs_no_drain_round_and_says_so() {
    let observed = |annotation: Option<&str>, old: &NodeMaintenanceStatus| {
        let mut o = nm("nm", "node01");
        o.metadata.uid = Some("uid-nm".into());
        o.metadata.generation = GEN;
        o.status = Some(old.clone());
        if let Some(v) = annotation {
            o.annotations_mut()
                .insert(crate::policy::PAUSED_ANNOTATION.into(), v.into());
        }
        Observed {
            policy: crate::policy::resolve(&o, &Default::default()),
            nm: o,
            world: World::Maintenance(Box::new(ObservedMaintenance {
                node: Some(entered_node()),
                holder_live: true,
                ..ObservedMaintenance::default()
            })),
            memory: Memory::default(),
            schema: StatusSchema::default(),
        }
    };
    let condition = |s: &NodeMaintenanceStatus, type_: &str| {
        condition(s, type_).map(|c| (c.status.clone(), c.reason.clone()))
    };
    let running = NodeMaintenanceStatus {
        phase: Some(MaintenancePhase::Running),
        ..NodeMaintenanceStatus::default()
    };
    // (annotation, old status) -> a round or not, DrainPaused, events.
    let paused = plan(&observed(Some("true"), &running), t(0));
    assert!(matches!(paused.then, Then::Requeue(_)), "no drain round");
    let s = paused.status.clone().unwrap();
    assert_eq!(
        condition(&s, condition::DRAIN_PAUSED),
        Some(("True".into(), "Paused".into()))
    );
    assert_eq!(reasons(&events_of(&paused)), ["DrainPaused"]);
    let again = plan(&observed(Some("true"), &s), t(1));
    assert!(events_of(&again).is_empty(), "said once");
    // Upstream's CRD prunes the condition: what the last pass found is remembered instead.
    let mut pruned = observed(Some("true"), &running);
    pruned.memory.paused = Some(true);
    assert!(
        events_of(&plan(&pruned, t(1))).is_empty(),
        "said once there too"
    );
    let resumed = plan(&observed(Some("false"), &s), t(2));
    assert!(matches!(resumed.then, Then::Drain(_)), "the round resumes");
    assert_eq!(reasons(&events_of(&resumed)), ["DrainResumed"]);
    let never = plan(&observed(None, &running), t(0));
    assert!(matches!(never.then, Then::Drain(_)));
    assert_eq!(
        condition(&never.status.unwrap(), condition::DRAIN_PAUSED),
        None,
        "a maintenance that never paused keeps upstream's status"
    );
    let refused = plan(&observed(Some("yes"), &running), t(0));
    assert!(
        matches!(refused.then, Then::Drain(_)),
        "the default applies"
    );
    let s = refused.status.clone().unwrap();
    assert_eq!(
        condition(&s, condition::DRAIN_POLICY_VALID),
        Some(("False".into(), "InvalidValue".into()))
    );
    assert!(
        events_of(&refused)
            .iter()
            .any(|e| e.warning && e.reason == "InvalidDrainPolicy" && e.message.contains("paused"))
    );
}

/// `docs/drain-contract.md` §10: once the drain's deadline has passed (the start recorded on the
/// node plus `drainTimeout`, by the API server's time of the node read), `Fail` ends the drain:
/// phase Failed with the pods left named, the node kept as it is, one event each; an edit of the
/// policy resumes it. `Wait` keeps the round and says so once.
#[test]
fn past_the_deadline_fail_fails_the_maintenance_and_keeps_the_node() {
    use crate::api::OnTimeout;
    let mut node = entered_node();
    node.annotations_mut().insert(
        crate::api::DRAIN_STARTED_ANNOTATION.into(),
        t(0).to_string(),
    );
    let observed = |on_timeout: Option<OnTimeout>, old: &NodeMaintenanceStatus, at: i64| {
        let mut o = nm("nm", "node01");
        o.metadata.uid = Some("uid-nm".into());
        o.metadata.generation = GEN;
        o.status = Some(old.clone());
        o.spec.knobs.drain_timeout = on_timeout.map(|_| "90s".into());
        o.spec.knobs.on_timeout = on_timeout;
        Observed {
            policy: crate::policy::resolve(&o, &Default::default()),
            nm: o,
            world: World::Maintenance(Box::new(ObservedMaintenance {
                node: Some(node.clone()),
                server_time: Some(t(at)),
                holder_live: true,
                ..ObservedMaintenance::default()
            })),
            memory: Memory::default(),
            schema: StatusSchema::default(),
        }
    };
    let running = NodeMaintenanceStatus {
        phase: Some(MaintenancePhase::Running),
        blockers: Some(vec![crate::api::PodBlocker {
            namespace: "ns".into(),
            name: "db-0".into(),
            reason: "PodDisruptionBudget".into(),
            ..Default::default()
        }]),
        pending_pods: Some(vec!["db-0".into()]),
        ..NodeMaintenanceStatus::default()
    };
    let before = plan(&observed(Some(OnTimeout::Fail), &running, 89), t(89));
    assert!(matches!(before.then, Then::Drain(_)));
    assert!(events_of(&before).is_empty());
    let failed = plan(&observed(Some(OnTimeout::Fail), &running, 90), t(90));
    assert!(matches!(failed.then, Then::Requeue(_)), "no drain round");
    assert!(
        !failed
            .writes
            .iter()
            .any(|w| matches!(w, Write::Node { .. })),
        "the node stays cordoned and tainted: {:?}",
        failed.preconditions()
    );
    let s = failed.status.clone().unwrap();
    assert_eq!(s.phase, Some(MaintenancePhase::Failed));
    let error = s.last_error.clone().unwrap();
    assert!(
        error.contains("drainTimeout of 90s") && error.contains("ns/db-0 (PodDisruptionBudget)"),
        "{error}"
    );
    assert_eq!(
        condition(&s, condition::DRAINED).map(|c| c.reason.clone()),
        Some("DrainDeadlineExceeded".into())
    );
    assert_eq!(
        reasons(&events_of(&failed)),
        ["DrainDeadlineExceeded", "FailedMaintenance"]
    );
    // The next pass keeps it Failed (not Running again) and says nothing new.
    let again = plan(&observed(Some(OnTimeout::Fail), &s, 400), t(400));
    assert_eq!(
        again.status.clone().unwrap().phase,
        Some(MaintenancePhase::Failed)
    );
    assert!(events_of(&again).is_empty());
    // The policy edited away: Running, and the round resumes.
    let resumed = plan(&observed(None, &s, 401), t(401));
    assert!(matches!(resumed.then, Then::Drain(_)));
    assert_eq!(
        resumed.status.unwrap().phase,
        Some(MaintenancePhase::Running)
    );
    // Paused, the next pass comes at the deadline (not at the 300 s re-check).
    let mut paused = observed(Some(OnTimeout::Fail), &running, 50);
    paused
        .nm
        .annotations_mut()
        .insert(crate::policy::PAUSED_ANNOTATION.into(), "true".into());
    paused.policy = crate::policy::resolve(&paused.nm, &Default::default());
    let held = plan(&paused, t(50));
    assert_eq!(
        held.then,
        Then::Requeue(Requeue::After(Duration::from_secs(40)))
    );
    // No round, yet the status shows the drain's start on the node beside its deadline.
    let s = held.status.unwrap();
    assert_eq!(
        (
            s.drain_start_time.map(|d| d.0),
            s.drain_deadline.map(|d| d.0)
        ),
        (Some(t(0)), Some(t(90)))
    );
    // Wait: the round goes on; the event comes once (the memory of this process says it came).
    let wait = plan(&observed(Some(OnTimeout::Wait), &running, 90), t(90));
    assert!(matches!(wait.then, Then::Drain(_)));
    assert_eq!(reasons(&events_of(&wait)), ["DrainDeadlineExceeded"]);
    let mut quiet = observed(Some(OnTimeout::Wait), &running, 91);
    quiet.memory.deadline_announced = Some(true);
    assert!(events_of(&plan(&quiet, t(91))).is_empty());
}

/// `docs/drain-contract.md` §10 (`--max-parallel-drains`): a maintenance beyond the budget is
/// entered but runs no drain round, says where it waits (condition and one event), and starts
/// its round once a slot is its (a `DrainStarted` event).
#[test]
fn a_queued_maintenance_leaves_its_node_in_service_and_runs_no_round_until_a_slot_is_its() {
    use crate::controller::queue::Place;
    let free = || {
        let mut n = Node::default();
        n.metadata.name = Some("node01".into());
        n
    };
    let node = std::cell::RefCell::new(free());
    let observed = |place: Option<Place>, old: &NodeMaintenanceStatus, queued: Option<bool>| {
        let mut o = nm("nm", "node01");
        o.metadata.uid = Some("uid-nm".into());
        o.metadata.generation = GEN;
        o.status = Some(old.clone());
        Observed {
            policy: crate::policy::resolve(&o, &Default::default()),
            nm: o,
            world: World::Maintenance(Box::new(ObservedMaintenance {
                node: Some(node.borrow().clone()),
                holder_live: true,
                queue: place,
                ..ObservedMaintenance::default()
            })),
            memory: Memory {
                queued,
                ..Memory::default()
            },
            schema: StatusSchema::default(),
        }
    };
    let running = NodeMaintenanceStatus {
        phase: Some(MaintenancePhase::Running),
        ..NodeMaintenanceStatus::default()
    };
    let third = Place::Queued {
        position: 3,
        full: "--max-parallel-drains=2".into(),
    };
    let waiting = plan(&observed(Some(third.clone()), &running, None), t(0));
    assert!(matches!(waiting.then, Then::Requeue(_)), "no drain round");
    assert_eq!(
        labels(&waiting),
        ["DrainQueued", "status Some(Running)"],
        "node and lease untouched"
    );
    let s = waiting.status.clone().unwrap();
    let c = condition(&s, condition::DRAIN_QUEUED).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "MaxParallelDrains")
    );
    assert!(
        c.message.contains("position 3 in the queue")
            && c.message.contains("--max-parallel-drains=2"),
        "{}",
        c.message
    );
    assert_eq!(reasons(&events_of(&waiting)), ["DrainQueued"]);
    assert_eq!(
        waiting.remember,
        // No deadline step while it waits: nothing announced.
        Remember::Set(Memory {
            paused: Some(false),
            queued: Some(true),
            ..Memory::default()
        })
    );
    let again = plan(&observed(Some(third.clone()), &s, Some(true)), t(1));
    assert!(events_of(&again).is_empty(), "said once");
    let started = plan(&observed(Some(Place::Draining), &s, Some(true)), t(2));
    assert!(matches!(started.then, Then::Drain(_)));
    assert_eq!(reasons(&events_of(&started)), ["DrainStarted"]);
    assert!(
        labels(&started).contains(&"enter node".to_string()),
        "{:?}",
        labels(&started)
    );
    // A node an earlier version entered while it waited is released.
    *node.borrow_mut() = entered_node();
    let released = plan(&observed(Some(third), &s, Some(true)), t(3));
    assert!(matches!(released.then, Then::Requeue(_)));
    assert_eq!(reasons(&events_of(&released)), ["UncordonNode"]);
    assert!(
        labels(&released).contains(&"exit node".to_string()),
        "{:?}",
        labels(&released)
    );
    // Without a budget nothing changes: no condition, a round.
    let free = plan(&observed(None, &running, None), t(0));
    assert!(matches!(free.then, Then::Drain(_)));
    assert!(condition(&free.status.unwrap(), condition::DRAIN_QUEUED).is_none());
}

/// `docs/drain-contract.md` §10: time spent waiting for a drain slot does not count toward the
/// deadline: none while queued, and from the moment the slot was granted after, even on a node an
/// earlier version entered while it waited (its start recorded at that entry, t(0)).
#[test]
fn the_deadline_counts_from_the_drain_slot_not_from_the_queue() {
    use crate::api::OnTimeout;
    use crate::controller::queue::Place;
    let mut node = entered_node();
    node.annotations_mut().insert(
        crate::api::DRAIN_STARTED_ANNOTATION.into(),
        t(0).to_string(),
    );
    let observed = |queue: Option<Place>, old: &NodeMaintenanceStatus, at: i64| {
        let mut o = nm("nm", "node01");
        o.metadata.uid = Some("uid-nm".into());
        o.metadata.generation = GEN;
        o.status = Some(old.clone());
        o.spec.knobs.drain_timeout = Some("90s".into());
        o.spec.knobs.on_timeout = Some(OnTimeout::Fail);
        Observed {
            policy: crate::policy::resolve(&o, &Default::default()),
            nm: o,
            world: World::Maintenance(Box::new(ObservedMaintenance {
                node: Some(node.clone()),
                server_time: Some(t(at)),
                holder_live: true,
                queue,
                ..ObservedMaintenance::default()
            })),
            memory: Memory::default(),
            schema: StatusSchema::default(),
        }
    };
    let mut running = NodeMaintenanceStatus {
        phase: Some(MaintenancePhase::Running),
        ..NodeMaintenanceStatus::default()
    };
    let waiting = Place::Queued {
        position: 1,
        full: "--max-parallel-drains=1".into(),
    };
    // The last pass found it waiting.
    running = queued(&running, Some(&waiting), None, at(0)).0;
    let queued = plan(&observed(Some(waiting), &running, 500), t(500));
    let s = queued.status.clone().unwrap();
    assert_eq!(
        s.phase,
        Some(MaintenancePhase::Running),
        "no deadline while waiting"
    );
    // The slot is granted at t(500) by the API server's clock (the operator's runs 3 s ahead):
    // the round runs; the drain started then and the deadline is t(590).
    let granted = plan(&observed(Some(Place::Draining), &s, 500), t(503));
    assert!(matches!(granted.then, Then::Drain(_)));
    let s = granted.status.clone().unwrap();
    let moments = |s: &NodeMaintenanceStatus| {
        (
            s.drain_start_time.clone().map(|d| d.0),
            s.drain_deadline.clone().map(|d| d.0),
        )
    };
    assert_eq!(moments(&s), (Some(t(500)), Some(t(590))));
    // The next passes read the slot's moment back from the status: the same start, by the
    // same clock, so neither the deadline nor the start (nor a surge record) moves.
    let later = plan(&observed(Some(Place::Draining), &s, 589), t(592));
    assert!(matches!(later.then, Then::Drain(_)));
    assert_eq!(
        moments(&later.status.clone().unwrap_or(s.clone())),
        (Some(t(500)), Some(t(590)))
    );
    let failed = plan(&observed(Some(Place::Draining), &s, 590), t(590));
    assert_eq!(failed.status.unwrap().phase, Some(MaintenancePhase::Failed));
}

/// `surge`: each Deployment the round restarted gets one Normal `WorkloadRestarted` event
/// naming it and the pod (the blocker's message); a round that restarted nothing, none.
#[test]
fn a_restarted_workload_gets_one_event_naming_it() {
    let s0 = running_with_two();
    let mut rep = report(&["test-pod-1"], &[("test-pod-1", "Surging")], &[]);
    let surging = rep.pending[0].clone();
    let message = "not evicted (its budget allows no disruption): Deployment test-namespace/web \
                   restarted for this maintenance (surge RolloutRestart)";
    rep.restarted = vec![PodBlocker {
        message: Some(message.into()),
        ..surging
    }];
    let step = drained(&s0, &rep, at(1));
    assert_eq!(reasons(&step.events), vec![event::WORKLOAD_RESTARTED]);
    assert!(
        step.events[0]
            .message
            .contains("Deployment test-namespace/web restarted")
            && step.events[0].message.contains("test-pod-1"),
        "{}",
        step.events[0].message
    );
    rep.restarted.clear();
    assert!(drained(&step.status, &rep, at(2)).events.is_empty());
}

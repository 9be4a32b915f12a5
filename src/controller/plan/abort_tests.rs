//! `onTimeout: Abort` (docs/drain-contract.md §10a): the pure decision, and whole passes planned
//! from what they observe.

use super::super::tests::{GEN, at, entered_node, labels, nm, reasons, t, then_of};
use super::super::{Observed, ObservedMaintenance, Then, World, plan};
use super::*;
use crate::api::condition::condition;
use crate::api::{NodeMaintenanceStatus, PodBlocker};
use crate::controller::memory::{Memory, StatusSchema};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;

fn running() -> NodeMaintenanceStatus {
    NodeMaintenanceStatus {
        phase: Some(MaintenancePhase::Running),
        blockers: Some(vec![PodBlocker {
            namespace: "ns".into(),
            name: "db-0".into(),
            reason: "PodDisruptionBudget".into(),
            ..Default::default()
        }]),
        pending_pods: Some(vec!["db-0".into()]),
        ..NodeMaintenanceStatus::default()
    }
}

/// The maintenance `nm` on node01 (drain started at `t(0)` when `node` is the entered one),
/// `drainTimeout: 90s, onTimeout: Abort`, in `stage`, seen at `t(at)` with its lease ours.
fn observed(old: &NodeMaintenanceStatus, node: &Node, stage: Stage, at: i64) -> Observed {
    let mut o = nm("nm", "node01");
    o.metadata.uid = Some("uid-nm".into());
    o.metadata.generation = GEN;
    o.status = Some(old.clone());
    o.spec.knobs.drain_timeout = Some("90s".into());
    o.spec.knobs.on_timeout = Some(OnTimeout::Abort);
    o.spec.knobs.stage = Some(stage);
    let lease = Lease {
        metadata: kube::api::ObjectMeta {
            name: Some("node-node01".into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(crate::lease::LEASE_HOLDER.into()),
            ..LeaseSpec::default()
        }),
    };
    Observed {
        policy: crate::policy::resolve(&o, &Default::default()),
        nm: o,
        world: World::Maintenance(Box::new(ObservedMaintenance {
            node: Some(node.clone()),
            lease: Some(lease),
            server_time: Some(t(at)),
            holder_live: true,
            ..ObservedMaintenance::default()
        })),
        memory: Memory::default(),
        schema: StatusSchema::default(),
    }
}

fn started_node() -> Node {
    let mut node = entered_node();
    node.annotations_mut().insert(
        crate::api::DRAIN_STARTED_ANNOTATION.into(),
        t(0).to_string(),
    );
    node
}

/// The node as a released one looks: no record, no cordon, no taint, no label.
fn free_node() -> Node {
    let mut n = Node::default();
    n.metadata.name = Some("node01".into());
    n
}

#[test]
fn only_abort_past_the_deadline_records_an_abort_and_only_once() {
    let window = (Some(t(90)), Some(Duration::from_secs(90)));
    for other in [
        None,
        Some(OnTimeout::Wait),
        Some(OnTimeout::Fail),
        Some(OnTimeout::SkipStuck),
        Some(OnTimeout::ForceDelete),
    ] {
        assert_eq!(at_deadline(&running(), other, window, at(90)), None);
    }
    let step = at_deadline(&running(), Some(OnTimeout::Abort), window, at(90)).unwrap();
    let s = &step.status;
    assert_eq!(s.phase, Some(MaintenancePhase::Failed));
    assert!(is_aborted(s));
    assert_eq!(condition(s, ABORTED).unwrap().reason, DRAIN_ABORTED);
    let error = s.last_error.clone().unwrap();
    assert!(
        error.contains("drainTimeout of 90s")
            && error.contains("onTimeout Abort")
            && error.contains("ns/db-0 (PodDisruptionBudget)"),
        "{error}"
    );
    assert_eq!(
        reasons(&step.events),
        ["DrainDeadlineExceeded", "FailedMaintenance"]
    );
    assert_eq!(step.requeue, Requeue::After(REQUEUE_ABORTED));
    // Recorded once: the pass that reads it back decides nothing new.
    assert_eq!(at_deadline(s, Some(OnTimeout::Abort), window, at(91)), None);
    // Drained once is drained.
    let succeeded = NodeMaintenanceStatus {
        phase: Some(MaintenancePhase::Succeeded),
        ..running()
    };
    assert_eq!(
        at_deadline(&succeeded, Some(OnTimeout::Abort), window, at(90)),
        None
    );
}

/// Upstream's CRD prunes conditions: the abort is read back from `phase` and `lastError`.
#[test]
fn where_conditions_are_pruned_the_abort_is_read_from_the_phase_and_last_error() {
    let window = (Some(t(90)), Some(Duration::from_secs(90)));
    let mut pruned = at_deadline(&running(), Some(OnTimeout::Abort), window, at(90))
        .unwrap()
        .status;
    pruned.conditions = None;
    assert!(is_aborted(&pruned));
    assert!(!is_aborted(&running()));
    let (ended, holds) = standing(&pruned, Stage::Idle, at(100));
    assert!(!holds && !is_aborted(&ended));
    let mut failed_otherwise = pruned.clone();
    failed_otherwise.last_error = Some("node not found".into());
    assert!(!is_aborted(&failed_otherwise));
}

#[test]
fn an_abort_holds_in_cordon_and_drain_and_ends_with_a_stage_that_releases() {
    let window = (Some(t(90)), Some(Duration::from_secs(90)));
    let aborted = at_deadline(&running(), Some(OnTimeout::Abort), window, at(90))
        .unwrap()
        .status;
    for stage in [Stage::Cordon, Stage::Drain] {
        assert_eq!(standing(&aborted, stage, at(100)), (aborted.clone(), true));
    }
    for stage in [Stage::Idle, Stage::Preflight] {
        let (s, holds) = standing(&aborted, stage, at(100));
        assert!(!holds, "{stage}");
        assert!(!is_aborted(&s));
        assert_eq!(condition(&s, ABORTED).unwrap().reason, ABORT_ENDED);
        assert_eq!(s.phase, Some(MaintenancePhase::Running));
        assert_eq!(s.last_error, None);
        // Ended is ended: back in Drain it is a maintenance like any other.
        assert_eq!(standing(&s, Stage::Drain, at(101)), (s.clone(), false));
    }
    // Never aborted: nothing to say.
    assert_eq!(
        standing(&running(), Stage::Idle, at(100)),
        (running(), false)
    );
}

/// Whole passes: the pass at the deadline records the abort and touches nothing else; the next
/// one (this process's or a new one's: the memory plays no part) restores the node and gives up
/// the lease; once released, passes touch nothing, whether the knob still says Abort, was edited
/// to Wait, or the maintenance is paused or moved to Cordon.
#[test]
fn at_the_deadline_abort_records_first_then_releases_the_node_and_never_enters_it_again() {
    let before = plan(
        &observed(&running(), &started_node(), Stage::Drain, 89),
        t(89),
    );
    assert_eq!(then_of(&before), "drain");
    let at = plan(
        &observed(&running(), &started_node(), Stage::Drain, 90),
        t(90),
    );
    assert_eq!(
        labels(&at),
        [
            "status Some(Failed)",
            "DrainDeadlineExceeded",
            "FailedMaintenance"
        ],
        "recorded before the node is touched"
    );
    assert_eq!(
        then_of(&at),
        format!("{:?}", Requeue::After(REQUEUE_ABORTED))
    );
    let aborted = at.status.clone().unwrap();
    // The next pass, as read back: the node restored and the lease given up, still Failed.
    let release = plan(
        &observed(&aborted, &started_node(), Stage::Drain, 91),
        t(91),
    );
    assert_eq!(
        labels(&release)[..3],
        ["exit node", "UncordonNode", "delete lease"]
    );
    assert!(matches!(release.then, Then::Requeue(_)), "no round");
    let released = release.status.clone().unwrap();
    assert_eq!(released.phase, Some(MaintenancePhase::Failed));
    assert!(is_aborted(&released));
    assert_eq!(released.drain_deadline, None);
    // Released: nothing is entered again, nor in Cordon, nor with the knob edited, nor paused.
    let mut quiet = vec![
        observed(&released, &free_node(), Stage::Drain, 400),
        observed(&released, &free_node(), Stage::Cordon, 400),
    ];
    let mut edited = observed(&released, &free_node(), Stage::Drain, 400);
    edited.nm.spec.knobs.on_timeout = Some(OnTimeout::Wait);
    quiet.push(edited);
    let mut paused = observed(&released, &free_node(), Stage::Drain, 400);
    paused.nm.spec.knobs.paused = Some(true);
    quiet.push(paused);
    for o in &quiet {
        let p = plan(o, t(400));
        let writes = labels(&p);
        assert!(
            writes
                .iter()
                .all(|w| !w.contains("node") && !w.contains("lease")),
            "{writes:?}"
        );
        assert!(matches!(p.then, Then::Requeue(_)), "no round");
        assert_eq!(
            p.status.unwrap().phase,
            Some(MaintenancePhase::Failed),
            "{:?}",
            o.nm.spec
        );
    }
    // A pause at the deadline does not hold the abort back (the deadline passes paused too).
    let mut paused = observed(&running(), &started_node(), Stage::Drain, 90);
    paused.nm.spec.knobs.paused = Some(true);
    assert!(is_aborted(&plan(&paused, t(90)).status.unwrap()));
    // Idle ends the abort; back in Drain, a new drain enters the node afresh.
    let idle = plan(&observed(&released, &free_node(), Stage::Idle, 500), t(500));
    let ended = idle.status.clone().unwrap();
    assert!(!is_aborted(&ended));
    assert_eq!(ended.phase, Some(MaintenancePhase::Running));
    let again = plan(&observed(&ended, &free_node(), Stage::Drain, 600), t(600));
    assert!(
        labels(&again).iter().any(|w| w == "enter node"),
        "{:?}",
        labels(&again)
    );
}

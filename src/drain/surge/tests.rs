//! The `surge` rule's decisions (`docs/drain-contract.md` §15).

use std::time::Instant;

use super::*;
use crate::drain::answer::EvictionOutcome;
use crate::drain::consts::result;
use crate::drain::disposition::Stage;
use crate::drain::pod::OwnerRef;

const NM: &str = "nm-uid";

fn pod(name: &str, app: &str) -> DrainPod {
    let mut p = DrainPod::default();
    p.metadata.name = name.into();
    p.metadata.namespace = "ns".into();
    p.metadata.uid = Some(format!("uid-{name}"));
    p.metadata.labels = [("app".to_string(), app.to_string())].into();
    p.metadata.owner_references = vec![OwnerRef {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: format!("{app}-rs"),
        uid: "rs".into(),
        controller: Some(true),
    }];
    p.status.phase = Some("Running".into());
    p.status.ready = true;
    p
}

fn evict(stage: Stage) -> Disposition {
    Disposition::Evict {
        warnings: Vec::new(),
        stage,
    }
}

fn deployment(name: &str, replicas: i32) -> Deployment {
    Deployment {
        namespace: "ns".into(),
        name: name.into(),
        resource_version: Some("7".into()),
        replicas,
        ..Deployment::default()
    }
}

fn facts(entries: &[(&str, Workload)]) -> Facts {
    Facts {
        maintenance: Some(NM.into()),
        workloads: entries
            .iter()
            .map(|(p, w)| (("ns".to_string(), p.to_string()), w.clone()))
            .collect(),
    }
}

fn on() -> DrainPolicy {
    DrainPolicy {
        surge: Surge::RolloutRestart,
        ..DrainPolicy::default()
    }
}

fn r(name: &str) -> PodReference {
    PodReference {
        namespace: "ns".into(),
        name: name.into(),
    }
}

fn now() -> jiff::Timestamp {
    "2030-01-02T03:04:05.678Z".parse().unwrap()
}

/// A pod whose budget allows nothing, or that is its Deployment's only replica, is restarted,
/// not evicted; a Deployment of more replicas whose budget allows one is left to the eviction.
#[test]
fn a_held_or_only_replica_is_restarted_not_evicted() {
    let budget = Budget::over_app("ns", "pdb", "web", 0, 1);
    let d = deployment("web", 1);
    let Verdict::Restart(b) = verdict(&r("p"), &d, Some(&budget), false, NM) else {
        panic!("restarted");
    };
    assert_eq!(b.reason, reason::SURGING);
    let m = b.message.unwrap();
    assert!(
        m.contains("Deployment ns/web restarted") && m.contains("budget allows no disruption"),
        "{m}"
    );
    // One replica without any budget: its only pod.
    let Verdict::Restart(b) = verdict(&r("p"), &d, None, false, NM) else {
        panic!("restarted");
    };
    assert!(b.message.unwrap().contains("only replica"));
    // Three replicas: held by its budget (allows 0) or refused by it: restarted.
    let three = deployment("web", 3);
    assert!(matches!(
        verdict(&r("p"), &three, Some(&budget), false, NM),
        Verdict::Restart(_)
    ));
    assert!(matches!(
        verdict(&r("p"), &three, None, true, NM),
        Verdict::Restart(_)
    ));
    // Three replicas, a budget that allows one: evicted as usual.
    let allows = Budget::over_app("ns", "pdb", "web", 1, 3);
    assert_eq!(
        verdict(&r("p"), &three, Some(&allows), false, NM),
        Verdict::Evict
    );
    assert_eq!(verdict(&r("p"), &three, None, false, NM), Verdict::Evict);
}

/// Once restarted for this maintenance it is never restarted again: it waits for the
/// Deployment to replace it, or is evicted once its budget allows; a rollout that cannot
/// progress is named; a restart for another maintenance does not count.
#[test]
fn a_restarted_deployment_is_waited_for_never_restarted_twice() {
    let budget = Budget::over_app("ns", "pdb", "web", 0, 1);
    let mut d = deployment("web", 1);
    d.restarted_for = Some(NM.into());
    let Verdict::Hold(b) = verdict(&r("p"), &d, Some(&budget), false, NM) else {
        panic!("held");
    };
    assert_eq!(b.reason, reason::SURGING);
    assert!(
        b.message
            .unwrap()
            .contains("was restarted for this maintenance")
    );
    // Its budget now allows one (the replacement is Ready): evicted as usual.
    let allows = Budget::over_app("ns", "pdb", "web", 1, 2);
    assert_eq!(
        verdict(&r("p"), &d, Some(&allows), false, NM),
        Verdict::Evict
    );
    // Without a budget, the Deployment removes it itself.
    assert!(matches!(
        verdict(&r("p"), &d, None, false, NM),
        Verdict::Hold(_)
    ));
    d.stuck = Some("its replacement pod web-x is not scheduled (Unschedulable): 0/3 nodes".into());
    let Verdict::Hold(b) = verdict(&r("p"), &d, Some(&budget), false, NM) else {
        panic!("held");
    };
    assert_eq!(b.reason, reason::SURGE_STUCK);
    let m = b.message.unwrap();
    assert!(
        m.contains("Deployment ns/web") && m.contains("0/3 nodes"),
        "{m}"
    );
    // Paused after the restart (mid-rollout): stuck, saying why, not Surging for ever.
    d.stuck = None;
    d.paused = true;
    let Verdict::Hold(b) = verdict(&r("p"), &d, Some(&budget), false, NM) else {
        panic!("held");
    };
    assert_eq!(b.reason, reason::SURGE_STUCK);
    assert!(b.message.unwrap().contains("spec.paused"));
    d.paused = false;
    // Restarted by another maintenance: this one restarts it.
    d.restarted_for = Some("another".into());
    assert!(matches!(
        verdict(&r("p"), &d, Some(&budget), false, NM),
        Verdict::Restart(_)
    ));
}

/// The record is per drain, read with the pod's revision: the same maintenance's next drain
/// (Drain → Idle → Drain, a new start on the node) restarts again, once, a pod of the newest
/// revision (one the restart created, scheduled back onto the released node); a pod of an older
/// revision is left to the rollout already replacing it; within one drain, never twice. A
/// restart in the same second as the last one still changes the template.
#[test]
fn a_new_drain_of_the_same_maintenance_restarts_a_replacement_that_came_back_once() {
    let at = |s: &str| s.parse::<jiff::Timestamp>().unwrap();
    let (first, restart, second) = (
        at("2026-12-05T10:00:00Z"),
        at("2026-12-05T10:00:02Z"),
        at("2026-12-05T10:05:00Z"),
    );
    assert_eq!(record("uid-1", Some(first)), "uid-1@2026-12-05T10:00:00Z");
    assert_eq!(record("uid-1", None), "uid-1");
    let budget = Budget::over_app("ns", "pdb", "web", 0, 1);
    let mut d = deployment("web", 1);
    d.restarted_for = Some(record("uid-1", Some(first)));
    d.restarted_at = Some(restart);
    let (this_drain, next_drain) = (record("uid-1", Some(first)), record("uid-1", Some(second)));
    let read = |current: bool, drain: &str| {
        let d = as_read_by(
            &Deployment {
                current,
                ..d.clone()
            },
            drain,
        );
        verdict(&r("p"), &d, Some(&budget), false, drain)
    };
    // The drain that restarted it: waits, whichever pod.
    assert!(matches!(read(false, &this_drain), Verdict::Hold(_)));
    assert!(matches!(read(true, &this_drain), Verdict::Hold(_)));
    // The next drain: the old pod is still being replaced; the one that came back is restarted.
    assert!(matches!(read(false, &next_drain), Verdict::Hold(_)));
    assert!(matches!(read(true, &next_drain), Verdict::Restart(_)));
    // Another maintenance's restart: not this one's.
    assert!(matches!(
        read(false, &record("uid-2", Some(second))),
        Verdict::Restart(_)
    ));
    // The stamp moves on even within the last restart's second.
    assert_eq!(stamp(restart, Some(restart)), at("2026-12-05T10:00:03Z"));
    assert_eq!(stamp(second, Some(restart)), second);
    assert_eq!(stamp(second, None), second);
    // A last restart at the end of time (a hand-edited annotation) has no second after it:
    // the stamp is now, still a change of the template, and nothing panics.
    let end = jiff::Timestamp::MAX;
    assert_eq!(stamp(second, Some(end)), second);
}

/// A rollout that would delete the only pod first is no restart: a blocker naming the
/// Deployment and why.
#[test]
fn a_deployment_that_cannot_surge_is_a_blocker_not_a_restart() {
    for (set, says) in [
        (
            (|d: &mut Deployment| d.recreate = true) as fn(&mut Deployment),
            "strategy is Recreate",
        ),
        (
            |d: &mut Deployment| d.max_surge_zero = true,
            "maxSurge is 0",
        ),
        (|d: &mut Deployment| d.paused = true, "paused"),
    ] {
        let mut d = deployment("web", 1);
        set(&mut d);
        let Verdict::Hold(b) = verdict(&r("p"), &d, None, false, NM) else {
            panic!("held: {says}");
        };
        assert_eq!(b.reason, reason::CANNOT_SURGE);
        let m = b.message.unwrap();
        assert!(
            m.contains("Deployment ns/web cannot surge") && m.contains(says),
            "{m}"
        );
    }
}

/// Over a round: only the pods of the earliest stage, not terminating and with no eviction
/// sent, are held; each Deployment is restarted once however many of its pods are on the node,
/// stamped with the API server's time in whole seconds and recording the maintenance; nothing
/// with the knob off, without the maintenance's UID, or past the deadline with ForceDelete.
#[test]
fn a_round_restarts_each_deployment_once_and_holds_its_pods() {
    let budgets = Budgets::known([Budget::over_app("ns", "pdb", "web", 0, 2)]);
    let mut terminating = pod("c", "web");
    terminating.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
    let pods = vec![
        (pod("a", "web"), evict(Stage::Ordinary(0))),
        (pod("b", "web"), evict(Stage::Ordinary(0))),
        (terminating, evict(Stage::Ordinary(0))),
        (pod("late", "web"), evict(Stage::Ordinary(1))),
        (pod("sent", "web"), evict(Stage::Ordinary(0))),
    ];
    let web = Workload::Deployment(deployment("web", 3));
    let f = facts(&[
        ("a", web.clone()),
        ("b", web.clone()),
        ("c", web.clone()),
        ("late", web.clone()),
        ("sent", web),
    ]);
    let mut memory = RetrySchedule::default();
    memory.send(["uid-sent"], Instant::now());
    let s = decide(&pods, &f, &budgets, &memory, &on(), now());
    let mut held: Vec<&str> = s.held.keys().map(String::as_str).collect();
    held.sort_unstable();
    assert_eq!(held, ["uid-a", "uid-b"]);
    assert_eq!(s.restart.len(), 1);
    let patch = s.restart[0].patch();
    assert_eq!(
        patch,
        serde_json::json!({
            "metadata": {"resourceVersion": "7", "annotations": {RESTARTED_FOR: NM}},
            "spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: "2030-01-02T03:04:05Z"}}}},
        })
    );
    let off = DrainPolicy::default();
    assert_eq!(
        decide(&pods, &f, &budgets, &memory, &off, now()),
        Surging::default()
    );
    let anonymous = Facts {
        maintenance: None,
        ..f.clone()
    };
    assert_eq!(
        decide(&pods, &anonymous, &budgets, &memory, &on(), now()),
        Surging::default()
    );
    let overdue = DrainPolicy {
        drain_timeout: Some(std::time::Duration::from_secs(60)),
        on_timeout: OnTimeout::ForceDelete,
        deadline_start: Some(now() - jiff::SignedDuration::from_secs(120)),
        ..on()
    };
    assert_eq!(
        decide(&pods, &f, &budgets, &memory, &overdue, now()),
        Surging::default()
    );
    // Under Wait the deadline changes nothing.
    let waits = DrainPolicy {
        on_timeout: OnTimeout::Wait,
        ..overdue
    };
    assert_eq!(
        decide(&pods, &f, &budgets, &memory, &waits, now())
            .restart
            .len(),
        1
    );
}

/// A refusal by the pod's budget (429) makes it a candidate even when the watch's budget allows.
#[test]
fn a_refusal_by_its_budget_makes_a_pod_a_candidate() {
    let budgets = Budgets::known([Budget::over_app("ns", "pdb", "web", 1, 3)]);
    let pods = vec![(pod("a", "web"), evict(Stage::Ordinary(0)))];
    let f = facts(&[("a", Workload::Deployment(deployment("web", 3)))]);
    let mut memory = RetrySchedule::default();
    assert!(
        decide(&pods, &f, &budgets, &memory, &on(), now())
            .restart
            .is_empty()
    );
    let refused = EvictionOutcome {
        result: result::BLOCKED_PDB,
        blocker: Some(PodBlocker {
            reason: reason::PDB.into(),
            ..PodBlocker::default()
        }),
        error: None,
        api_error: None,
        retry: Some(std::time::Duration::from_secs(5)),
        shared: None,
    };
    memory.record("uid-a", &refused, Instant::now());
    assert_eq!(
        decide(&pods, &f, &budgets, &memory, &on(), now())
            .restart
            .len(),
        1
    );
}

/// A StatefulSet's (or any other controller's) pod held by its budget says it cannot surge,
/// once, keeping the budget's blocker; other blockers and the knob off are left as they are.
#[test]
fn other_controllers_cannot_surge_and_their_budget_blocker_says_so() {
    let f = facts(&[
        (
            "db-0",
            Workload::Other {
                kind: "StatefulSet".into(),
                name: "db".into(),
            },
        ),
        (
            "job",
            Workload::Other {
                kind: "Job".into(),
                name: "j".into(),
            },
        ),
    ]);
    let held = |name: &str, why: &str| PodBlocker {
        namespace: "ns".into(),
        name: name.into(),
        reason: why.into(),
        message: Some("not asked: the disruption budget db-pdb allows no disruption now".into()),
        pod_disruption_budget: Some("db-pdb".into()),
        ..PodBlocker::default()
    };
    let mut pending = vec![
        held("db-0", reason::PDB),
        held("job", reason::TERMINATING),
        held("x", reason::PDB),
    ];
    explain(&mut pending, &f, &on());
    explain(&mut pending, &f, &on());
    let m = pending[0].message.as_deref().unwrap();
    assert_eq!(
        m,
        "StatefulSet pods cannot surge (StatefulSet db: one pod per identity); held by budget \
         db-pdb: not asked: the disruption budget db-pdb allows no disruption now"
    );
    assert_eq!(pending[0].pod_disruption_budget.as_deref(), Some("db-pdb"));
    assert_eq!(pending[1], held("job", reason::TERMINATING));
    assert_eq!(pending[2], held("x", reason::PDB));
    let mut off = vec![held("db-0", reason::PDB)];
    explain(&mut off, &f, &DrainPolicy::default());
    assert_eq!(off[0], held("db-0", reason::PDB));
}

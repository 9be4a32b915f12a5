//! The decision for DaemonSet pods under both values of `daemonSets`, and the round's order.

use std::collections::HashSet;
use std::time::Instant;

use serde_json::{Value, json};

use crate::api::{DaemonSets, DrainBehavior, DrainRule};
use crate::drain::budget::Budgets;
use crate::drain::consts::{DRAIN_LABEL, DRAIN_RULES, reason};
use crate::drain::memory::RetrySchedule;
use crate::drain::pod::DrainPod;
use crate::drain::round::tests::plan_pass;
use crate::drain::{Arrival, Disposition, DrainOptions, Stage, decide};
use crate::policy::DrainPolicy;

/// The DaemonSet's UID, as the drain's GET finds it.
const DS_UID: &str = "ds-uid";

fn t(s: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_second(1_700_000_000 + s).unwrap()
}

fn pod(name: &str, extra: Value) -> DrainPod {
    let mut v = json!({"metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
        "creationTimestamp": t(-100).to_string()}});
    crate::drain::tests::merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

/// A pod of the DaemonSet `agent` (UID [`DS_UID`]), merged with `extra`.
fn ds_pod(name: &str, extra: Value) -> DrainPod {
    let mut v = json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1",
        "kind": "DaemonSet", "name": "agent", "uid": DS_UID, "controller": true}]}});
    crate::drain::tests::merge(&mut v, extra);
    pod(name, v)
}

fn options(daemon_sets: DaemonSets) -> DrainOptions {
    DrainOptions::default().with_daemon_sets(daemon_sets)
}

const LAST: DaemonSets = DaemonSets::EvictLast;

fn evict(stage: Stage) -> Disposition {
    Disposition::Evict {
        warnings: Vec::new(),
        stage,
    }
}

/// `decide` with the DaemonSet found, no drain start and no rule.
fn decided(p: &DrainPod, o: &DrainOptions) -> Disposition {
    decide(p, Some(DS_UID), o, &Arrival::default(), None)
}

#[test]
fn evict_last_drains_a_daemonset_pod_in_its_own_stage_and_ignore_leaves_it() {
    let p = ds_pod("agent-x", json!({}));
    assert_eq!(
        decided(&p, &DrainOptions::default()),
        Disposition::SkipDaemonSet,
        "the default: upstream's IgnoreAllDaemonSets"
    );
    assert_eq!(
        decided(&p, &options(DaemonSets::Ignore)),
        Disposition::SkipDaemonSet
    );
    assert_eq!(decided(&p, &options(LAST)), evict(Stage::DaemonSet));
    // Its stage comes after every ordinary pod's, whatever their drain order, and before the
    // critical pods and the operator's own.
    assert!(Stage::Ordinary(i32::MAX) < Stage::DaemonSet);
    assert!(Stage::DaemonSet < Stage::Critical && Stage::Critical < Stage::OwnPod);
    // A system-critical DaemonSet pod (a CNI agent) goes with the critical pods.
    let cni = ds_pod("cni", json!({"spec": {"priority": 2_000_001_000}}));
    assert_eq!(decided(&cni, &options(LAST)), evict(Stage::Critical));
    assert_eq!(
        decided(&cni, &options(DaemonSets::Ignore)),
        Disposition::SkipDaemonSet
    );
    // The operator's own pod stays last.
    let own = DrainOptions {
        own_pod: Some(crate::api::PodReference {
            namespace: "ns".into(),
            name: "agent-x".into(),
        }),
        ..options(LAST)
    };
    assert_eq!(decided(&p, &own), evict(Stage::OwnPod));
    // An orphan (its DaemonSet gone or replaced) is an ordinary pod under both values.
    for o in [options(DaemonSets::Ignore), options(LAST)] {
        let Disposition::Evict { warnings, stage } =
            decide(&p, Some("other-uid"), &o, &Arrival::default(), None)
        else {
            panic!("an orphan is evicted");
        };
        assert_eq!(stage, Stage::Ordinary(0));
        assert_eq!(warnings, ["daemonsets.apps \"agent\" not found"]);
    }
}

#[test]
fn mirror_and_finished_pods_stay_under_evict_last() {
    let finished = ds_pod("done", json!({"status": {"phase": "Succeeded"}}));
    assert_eq!(
        decided(&finished, &options(LAST)),
        Disposition::SkipFinished
    );
    let mirror = ds_pod(
        "static",
        json!({"metadata": {"annotations": {"kubernetes.io/config.mirror": "x"}}}),
    );
    assert_eq!(decided(&mirror, &options(LAST)), Disposition::SkipMirror);
}

#[test]
fn a_daemonset_pod_back_on_the_node_is_kept_only_when_it_tolerates_both_taints() {
    let started = Arrival {
        started: Some(t(0)),
        first_listing: Some(HashSet::new()),
    };
    let everything = json!({"spec": {"tolerations": [{"operator": "Exists"}]}});
    // The DaemonSet controller adds the unschedulable toleration to every DaemonSet pod.
    let unschedulable_only = json!({"spec": {"tolerations": [
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]}});
    let at = |extra: &Value, second: i64| {
        let mut extra = extra.clone();
        crate::drain::tests::merge(
            &mut extra,
            json!({"metadata": {"creationTimestamp": t(second).to_string()}}),
        );
        decide(
            &ds_pod("agent-y", extra),
            Some(DS_UID),
            &options(LAST),
            &started,
            None,
        )
    };
    assert_eq!(at(&everything, 5), Disposition::KeepReplacement);
    assert_eq!(
        at(&everything, -5),
        evict(Stage::DaemonSet),
        "there before the start: evicted once"
    );
    assert_eq!(
        at(&unschedulable_only, 5),
        evict(Stage::DaemonSet),
        "the DaemonSet controller does not bring such a pod back while the drain taint is on"
    );
}

#[test]
fn a_daemonset_pods_label_and_the_drain_rules_decide_within_its_stage() {
    let label = |v: &str| ds_pod("agent-z", json!({"metadata": {"labels": {DRAIN_LABEL: v}}}));
    assert_eq!(
        decided(&label("skip"), &options(LAST)),
        Disposition::SkipByRule { label: DRAIN_LABEL }
    );
    assert_eq!(
        decided(&label("wait-completed"), &options(LAST)),
        Disposition::WaitCompleted { label: DRAIN_LABEL }
    );
    assert_eq!(
        decided(&label("3"), &options(LAST)),
        evict(Stage::DaemonSet),
        "an order ranks the ordinary pods; a DaemonSet pod stays in its stage"
    );
    // Under Ignore a label changes nothing: the DaemonSet pod stays, as today.
    assert_eq!(
        decided(&label("3"), &options(DaemonSets::Ignore)),
        Disposition::SkipDaemonSet
    );
    let rule = |behavior| DrainRule {
        behavior,
        order: Some(7),
        ..DrainRule::default()
    };
    let p = ds_pod("agent-r", json!({}));
    let with =
        |r: &DrainRule, o: &DrainOptions| decide(&p, Some(DS_UID), o, &Arrival::default(), Some(r));
    assert_eq!(
        with(&rule(DrainBehavior::Skip), &options(LAST)),
        Disposition::SkipByRule { label: DRAIN_RULES }
    );
    assert_eq!(
        with(&rule(DrainBehavior::WaitCompleted), &options(LAST)),
        Disposition::WaitCompleted { label: DRAIN_RULES }
    );
    assert_eq!(
        with(&rule(DrainBehavior::Drain), &options(LAST)),
        evict(Stage::DaemonSet)
    );
    assert_eq!(
        with(&rule(DrainBehavior::Drain), &options(DaemonSets::Ignore)),
        Disposition::SkipDaemonSet,
        "a rule does not evict what the classification leaves"
    );
    // An opt-out holds it in its stage.
    let held = ds_pod(
        "agent-o",
        json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}),
    );
    let honor = DrainOptions {
        honor_opt_out: true,
        ..options(LAST)
    };
    assert_eq!(
        decided(&held, &honor),
        Disposition::OptedOut {
            annotation: "karpenter.sh/do-not-disrupt",
            stage: Stage::DaemonSet
        }
    );
}

/// The names the round evicts, and each waiting pod's reason.
fn round_over(pods: Vec<(DrainPod, Disposition)>) -> (Vec<String>, Vec<(String, String)>) {
    let plan = plan_pass(
        pods,
        &RetrySchedule::default(),
        &Budgets::default(),
        &DrainPolicy::default(),
        Some(t(-10)),
        t(0),
        Instant::now(),
    );
    let evicted = plan.evict.iter().map(|e| e.pod.name.clone()).collect();
    let waiting = plan
        .report
        .pending
        .iter()
        .map(|b| (b.name.clone(), b.reason.clone()))
        .collect();
    (evicted, waiting)
}

#[test]
fn daemonset_pods_go_after_every_ordinary_pod_and_before_the_critical_ones() {
    let web = || (pod("web", json!({})), evict(Stage::Ordinary(0)));
    let late = || (pod("late", json!({})), evict(Stage::Ordinary(5)));
    let agent = || (ds_pod("agent", json!({})), evict(Stage::DaemonSet));
    let cni = || (ds_pod("cni", json!({})), evict(Stage::Critical));
    let terminating = json!({"metadata": {"deletionTimestamp": t(-1).to_string()}});
    let s = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    // Ordinary pods first, whatever their order; the DaemonSet pod waits its turn, named.
    let (evicted, waiting) = round_over(vec![web(), late(), agent(), cni()]);
    assert_eq!(evicted, ["web"]);
    assert_eq!(
        waiting,
        s(&[
            ("late", reason::DRAIN_ORDER),
            ("agent", reason::DAEMON_SET),
            ("cni", reason::SYSTEM_CRITICAL)
        ])
    );
    // An ordinary pod still terminating holds it.
    let going = (pod("late", terminating.clone()), evict(Stage::Ordinary(5)));
    let (evicted, _) = round_over(vec![going, agent(), cni()]);
    assert!(evicted.is_empty(), "{evicted:?}");
    // Then the DaemonSet pods, the critical ones waiting for them.
    let (evicted, waiting) = round_over(vec![agent(), cni()]);
    assert_eq!(evicted, ["agent"]);
    assert_eq!(waiting, s(&[("cni", reason::SYSTEM_CRITICAL)]));
    // Kept, pods skipped and pods waited for do not hold the next stage.
    let (evicted, _) = round_over(vec![
        (ds_pod("back", json!({})), Disposition::KeepReplacement),
        (
            ds_pod("skip", json!({})),
            Disposition::SkipByRule { label: DRAIN_LABEL },
        ),
        cni(),
    ]);
    assert_eq!(evicted, ["cni"]);
    // A DaemonSet pod terminating holds the critical pods.
    let (evicted, _) = round_over(vec![
        (ds_pod("agent", terminating), evict(Stage::DaemonSet)),
        cni(),
    ]);
    assert!(evicted.is_empty(), "{evicted:?}");
}

#[test]
fn a_waiting_daemonset_pod_reads_like_the_other_staged_pods() {
    let b = crate::drain::waiting_blocker(
        &crate::api::PodReference {
            namespace: "ns".into(),
            name: "agent".into(),
        },
        Stage::DaemonSet,
        None,
    );
    assert_eq!(b.reason, "DaemonSetLast");
    let text = b.message.unwrap();
    assert!(
        text.contains("daemonSets: EvictLast") && text.contains("every other evictable pod"),
        "{text}"
    );
    assert!(crate::drain::report::waits_only(reason::DAEMON_SET));
}

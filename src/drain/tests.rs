use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::answer::*;
use super::pod::{DrainPod, OwnerRef, api_group};
use super::rules::selector_matches;
use super::*;
use crate::api::{PodBlocker, PodReference};
use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, Pod, PodSpec, PodStatus, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelectorRequirement, OwnerReference, Time,
};
use kube::core::Status;
use kube::core::response::{StatusCause, StatusDetails};

/// Merges JSON object `from` into `into`.
pub(crate) fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
    match (into, from) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}
/// A PodDisruptionBudget refusal of pod `name`.
pub(crate) fn pdb_refusal(name: &str) -> EvictionOutcome {
    let e = api_err(
        429,
        "Cannot evict pod as it would violate the pod's disruption budget.",
        &[(
            "DisruptionBudget",
            "The disruption budget b needs 1 healthy pods and has 1 currently",
        )],
    );
    classify_eviction(&r(name), false, Err(&e))
}
/// The drain's view of a full pod, as the list would give it.
fn slim(p: &Pod) -> DrainPod {
    serde_json::from_value(serde_json::to_value(p).unwrap()).unwrap()
}
// The rules, called on full pods (the tests build them with k8s-openapi's types), with no
// drain start (nothing arrived after it).
fn classify(p: &Pod, ds: Option<&str>, o: &DrainOptions) -> Disposition {
    super::classify(&slim(p), ds, o, &Arrival::default())
}
fn daemonset_owner(p: &Pod) -> Option<OwnerRef> {
    slim(p).daemon_set_owner().cloned()
}
fn terminating_blocker(p: &Pod, now: jiff::Timestamp) -> Option<PodBlocker> {
    super::deadline::terminating_blocker(&slim(p), now)
}

fn pod(name: &str) -> Pod {
    let mut p = Pod::default();
    p.metadata.name = Some(name.into());
    p.metadata.namespace = Some("ns".into());
    p.metadata.uid = Some(format!("uid-{name}"));
    p.spec = Some(PodSpec::default());
    p
}
fn owned(mut p: Pod, kind: &str, name: &str) -> Pod {
    p.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "apps/v1".into(),
        kind: kind.into(),
        name: name.into(),
        uid: "x".into(),
        controller: Some(true),
        block_owner_deletion: None,
    }]);
    p
}
fn phase(mut p: Pod, phase: &str) -> Pod {
    p.status = Some(PodStatus {
        phase: Some(phase.into()),
        ..PodStatus::default()
    });
    p
}
fn evict_warnings(d: Disposition) -> Vec<String> {
    match d {
        Disposition::Evict { warnings, .. } => warnings,
        other => panic!("expected Evict, got {other:?}"),
    }
}
pub(crate) fn api_err(code: u16, message: &str, causes: &[(&str, &str)]) -> kube::Error {
    // The API server's reason for each code, as kube's `Status::is_*` helpers read it.
    let reason = match code {
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        429 => "TooManyRequests",
        500 => "InternalError",
        _ => "",
    };
    let mut s = Status::failure(message, reason).with_code(code);
    if !causes.is_empty() {
        s.details = Some(StatusDetails {
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            causes: causes
                .iter()
                .map(|(r, m)| StatusCause {
                    reason: r.to_string(),
                    message: m.to_string(),
                    field: String::new(),
                })
                .collect(),
            retry_after_seconds: 0,
        });
    }
    kube::Error::Api(s.boxed())
}
fn r(name: &str) -> PodReference {
    PodReference {
        namespace: "ns".into(),
        name: name.into(),
    }
}

#[test]
fn daemonset_pods_stay_while_their_daemonset_exists() {
    let p = owned(pod("ds-1"), "DaemonSet", "agent");
    assert_eq!(
        daemonset_owner(&p).as_ref().map(|o| o.name.as_str()),
        Some("agent")
    );
    assert_eq!(
        classify(&p, Some("x"), &DrainOptions::default()),
        Disposition::SkipDaemonSet
    );
}

#[test]
fn orphaned_daemonset_pods_are_evicted_with_kubectls_notfound_warning() {
    let p = owned(pod("ds-1"), "DaemonSet", "agent");
    let w = evict_warnings(classify(&p, None, &DrainOptions::default()));
    assert_eq!(w, vec!["daemonsets.apps \"agent\" not found".to_string()]);
}

#[test]
fn finished_pods_are_left_without_a_lookup() {
    let p = phase(owned(pod("ds-1"), "DaemonSet", "agent"), "Succeeded");
    assert_eq!(daemonset_owner(&p), None);
    assert_eq!(
        classify(&p, Some("x"), &DrainOptions::default()),
        Disposition::SkipFinished
    );
    for phase_ in ["Succeeded", "Failed"] {
        let job = phase(owned(pod("job-1"), "Job", "j"), phase_);
        assert_eq!(
            classify(&job, None, &DrainOptions::default()),
            Disposition::SkipFinished
        );
    }
    for phase_ in ["Running", "Pending", "Unknown"] {
        assert!(classify(&phase(pod("p"), phase_), None, &DrainOptions::default()).evicts());
    }
}

#[test]
fn mirror_pods_are_skipped_even_when_finished() {
    let mut p = phase(pod("etcd-node1"), "Failed");
    p.metadata.annotations = Some([(MIRROR_ANNOTATION.to_string(), "abc".to_string())].into());
    assert_eq!(
        classify(&p, None, &DrainOptions::default()),
        Disposition::SkipMirror
    );
}

#[test]
fn emptydir_and_bare_pods_are_evicted_with_kubectls_warnings() {
    let mut p = pod("bare");
    p.spec.as_mut().unwrap().volumes = Some(vec![Volume {
        name: "scratch".into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    }]);
    assert_eq!(
        evict_warnings(classify(&p, None, &DrainOptions::default())),
        vec![
            "deleting Pods with local storage",
            "deleting Pods that declare no controller"
        ]
    );
    let managed = owned(pod("rs-pod"), "ReplicaSet", "web-123");
    assert!(evict_warnings(classify(&managed, None, &DrainOptions::default())).is_empty());
}

fn stage_of(d: Disposition) -> Stage {
    match d {
        Disposition::Evict { stage, .. } => stage,
        other => panic!("expected Evict, got {other:?}"),
    }
}
fn critical(mut p: Pod, class: Option<&str>, priority: Option<i32>) -> Pod {
    let spec = p.spec.as_mut().unwrap();
    spec.priority_class_name = class.map(str::to_string);
    spec.priority = priority;
    p
}
fn tolerating(mut p: Pod, tolerations: serde_json::Value) -> Pod {
    p.spec.as_mut().unwrap().tolerations = Some(serde_json::from_value(tolerations).unwrap());
    p
}

#[test]
fn the_operators_own_pod_is_evicted_last() {
    let opts = DrainOptions {
        own_pod: Some(r("nmo")),
        ..DrainOptions::default()
    };
    assert_eq!(stage_of(classify(&pod("nmo"), None, &opts)), Stage::OwnPod);
    assert_eq!(
        stage_of(classify(&pod("other"), None, &opts)),
        Stage::Ordinary(0)
    );
    let mut elsewhere = pod("nmo");
    elsewhere.metadata.namespace = Some("other-ns".into());
    assert_eq!(
        stage_of(classify(&elsewhere, None, &opts)),
        Stage::Ordinary(0)
    );
    // Even a critical own pod goes after the critical ones: it evicts them.
    let own_critical = critical(
        pod("nmo"),
        Some("system-cluster-critical"),
        Some(2_000_000_000),
    );
    assert_eq!(
        stage_of(classify(&own_critical, None, &opts)),
        Stage::OwnPod
    );
    assert!(Stage::Ordinary(i32::MAX) < Stage::Critical && Stage::Critical < Stage::OwnPod);
    let b = waiting_blocker(&r("nmo"), Stage::OwnPod, None);
    assert_eq!(b.reason, reason::OPERATOR_POD);
}

#[test]
fn system_critical_pods_are_keyed_on_priority_or_the_builtin_class_names() {
    let o = DrainOptions::default();
    for (class, prio) in [
        (Some("system-node-critical"), Some(2_000_001_000)),
        (Some("system-cluster-critical"), Some(2_000_000_000)),
        // Priority admission off: the class name decides.
        (Some("system-node-critical"), None),
        // A `system-` class of the same priority under another name.
        (Some("system-custom"), Some(2_000_000_000)),
    ] {
        let p = critical(pod("dns"), class, prio);
        assert_eq!(
            stage_of(classify(&p, None, &o)),
            Stage::Critical,
            "{class:?} {prio:?}"
        );
    }
    for (class, prio) in [
        (Some("high"), Some(1_000_000_000)),
        (Some("system-cluster-critical"), Some(0)),
        (None, None),
    ] {
        let p = critical(pod("app"), class, prio);
        assert_eq!(
            stage_of(classify(&p, None, &o)),
            Stage::Ordinary(0),
            "{class:?} {prio:?}"
        );
    }
    let b = waiting_blocker(&r("dns"), Stage::Critical, Some("system-node-critical"));
    assert_eq!(b.reason, reason::SYSTEM_CRITICAL);
    assert!(b.message.unwrap().contains("system-node-critical"));
}

fn created(mut p: Pod, second: i64) -> Pod {
    p.metadata.creation_timestamp = Some(Time(jiff::Timestamp::from_second(second).unwrap()));
    p
}

#[test]
fn only_replacements_that_arrived_after_the_start_and_tolerate_both_taints_are_kept() {
    let o = DrainOptions::default();
    let start = jiff::Timestamp::from_second(1_000).unwrap();
    let started = Arrival {
        started: Some(start),
        first_listing: None,
    };
    let at = |t: serde_json::Value, second: i64| {
        let p = created(tolerating(owned(pod("p"), "ReplicaSet", "rs"), t), second);
        super::classify(&slim(&p), None, &o, &started)
    };
    let everything = serde_json::json!([{"operator": "Exists"}]);
    // Created in a later second than the start, by the same clock: kept, with any form of
    // tolerating both.
    for t in [
        everything.clone(),
        serde_json::json!([{"operator": "Exists", "effect": "NoSchedule"}]),
        serde_json::json!([
            {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "medik8s.io/drain", "effect": "NoSchedule"}
        ]),
    ] {
        assert_eq!(at(t.clone(), 1_001), Disposition::KeepReplacement, "{t}");
    }
    // There before the start, or in its second with no first listing known (after a restart):
    // evicted, whatever it tolerates (upstream evicts them all; a VM's launcher pod is
    // live-migrated by its eviction).
    for second in [900, 999, 1_000] {
        assert!(
            at(everything.clone(), second).evicts(),
            "created at {second}"
        );
    }
    // No start known (the survey before the drain) or no creation time: evicted.
    let p = tolerating(pod("p"), everything.clone());
    assert!(super::classify(&slim(&p), None, &o, &started).evicts());
    assert!(classify(&created(p, 5_000), None, &o).evicts());
    // After the start but not tolerating both: evicted (the cordon keeps its replacement
    // away). Only one of the two taints, the wrong effect, or a value the taint lacks.
    for t in [
        serde_json::json!([{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]),
        serde_json::json!([{"operator": "Exists", "effect": "NoExecute"}]),
        serde_json::json!([
            {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"},
            {"key": "medik8s.io/drain", "operator": "Equal", "value": "yes"}
        ]),
        // An empty key needs `Exists`.
        serde_json::json!([{"operator": "Equal"}]),
        // What admission adds to every pod.
        serde_json::json!([
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        ]),
    ] {
        assert!(at(t.clone(), 2_000).evicts(), "{t}");
    }
    // A finished pod is left, whenever it came.
    let done = phase(
        created(tolerating(pod("job"), everything), 2_000),
        "Succeeded",
    );
    assert_eq!(
        super::classify(&slim(&done), None, &o, &started),
        Disposition::SkipFinished
    );
    assert_eq!(skipped_entry(&r("p")).reason, reason::TOLERATES_MAINTENANCE);
}

#[test]
fn in_the_starts_own_second_the_first_listing_decides() {
    let o = DrainOptions::default();
    let start = jiff::Timestamp::from_second(1_000).unwrap();
    let everything = serde_json::json!([{"operator": "Exists"}]);
    let original = created(tolerating(pod("orig"), everything.clone()), 1_000);
    let replacement = created(tolerating(pod("repl"), everything), 1_000);
    let listed = Arrival {
        started: Some(start),
        first_listing: Some(["uid-orig".to_string()].into()),
    };
    // Listed first: there before the drain evicted anything, so evicted.
    assert!(super::classify(&slim(&original), None, &o, &listed).evicts());
    // Not in the first listing though created in the same second: a replacement, kept.
    assert_eq!(
        super::classify(&slim(&replacement), None, &o, &listed),
        Disposition::KeepReplacement
    );
    // Another drain's listing (another start) says nothing about this one.
    let mut schedule = RetrySchedule::default();
    let settled = Settled {
        first_listing: Some((999, ["uid-orig".to_string()].into())),
        ..Default::default()
    };
    schedule.apply(settled);
    assert!(schedule.first_listing(Some(start)).is_none());
    assert!(
        schedule
            .first_listing(jiff::Timestamp::from_second(999).ok())
            .is_some()
    );
}

#[test]
fn a_daemonset_owner_needs_the_apps_group_and_the_found_daemonsets_uid() {
    let o = DrainOptions::default();
    // A custom resource of kind DaemonSet: not a DaemonSet, no lookup, drained as controlled.
    let mut custom = owned(pod("agent-1"), "DaemonSet", "agent");
    custom.metadata.owner_references.as_mut().unwrap()[0].api_version =
        "apps.example.com/v1".into();
    assert!(daemonset_owner(&custom).is_none());
    assert_eq!(
        evict_warnings(classify(&custom, Some("x"), &o)),
        Vec::<String>::new()
    );
    // apps/v1 DaemonSet of that name, but another one (recreated): the pod's owner is gone.
    let p = owned(pod("ds-1"), "DaemonSet", "agent");
    assert_eq!(
        daemonset_owner(&p).as_ref().map(|o| o.uid.as_str()),
        Some("x")
    );
    assert_eq!(
        evict_warnings(classify(&p, Some("other-uid"), &o)),
        vec!["daemonsets.apps \"agent\" not found".to_string()]
    );
    // Any version of the apps group.
    let mut beta = owned(pod("ds-2"), "DaemonSet", "agent");
    beta.metadata.owner_references.as_mut().unwrap()[0].api_version = "apps/v1beta2".into();
    assert_eq!(classify(&beta, Some("x"), &o), Disposition::SkipDaemonSet);
    assert_eq!(api_group("v1"), "");
    assert_eq!(api_group("apps/v1"), "apps");
}

#[test]
fn a_refused_pod_is_not_asked_again_before_its_retry_is_due() {
    let t0 = Instant::now();
    let mut s = RetrySchedule::default();
    let e = api_err(
        429,
        "x",
        &[(
            "DisruptionBudget",
            "The disruption budget b needs 1 healthy pods and has 1 currently",
        )],
    );
    let refused = classify_eviction(&r("p"), false, Err(&e));
    s.record("uid-p", &refused, t0);
    let (b, err) = s.held("uid-p", t0 + Duration::from_millis(100)).unwrap();
    assert_eq!(b.reason, reason::PDB);
    assert!(err.is_some());
    assert!(s.held("uid-p", t0 + EVICTION_RETRY_INTERVAL).is_none());
    assert!(s.held("uid-q", t0).is_none());
    assert_eq!(s.next_due(t0), Some(EVICTION_RETRY_INTERVAL));
    // A pass that still lists the pod keeps its refusal; one without the pod forgets it.
    s.retain(&HashSet::from(["uid-p".to_string()]));
    assert!(s.held("uid-p", t0).is_some());
    s.retain(&HashSet::new());
    assert!(s.held("uid-p", t0).is_none());
    // An accepted eviction clears the schedule.
    s.record("uid-p", &refused, t0);
    s.record("uid-p", &classify_eviction(&r("p"), false, Ok(())), t0);
    assert!(s.held("uid-p", t0).is_none());
    // Skipped pods are announced once per UID.
    assert!(s.announce("uid-t"));
    assert!(!s.announce("uid-t"));
}

#[test]
fn a_budgets_relief_ends_what_it_says_of_its_refusals() {
    let t0 = Instant::now();
    let refused_by = |pod: &str, budget: &str| {
        let e = api_err(
            429,
            "x",
            &[(
                "DisruptionBudget",
                &format!("The disruption budget {budget} needs 1 healthy pods and has 1 currently"),
            )],
        );
        classify_eviction(&r(pod), false, Err(&e))
    };
    let cause = refused_by("p", "b").shared.unwrap();
    let fresh = || {
        let mut s = RetrySchedule::default();
        // p, the probe of budget b (often the only pod of its budget on a node); q, of budget c.
        s.record("uid-p", &refused_by("p", "b"), t0);
        s.record("uid-q", &refused_by("q", "c"), t0);
        s
    };
    let soon = t0 + Duration::from_millis(100);
    let relief = |hold: bool, retries: bool| Relief {
        cause: cause.clone(),
        hold,
        retries,
    };
    // Lets its pods that are not Ready go: the probe's own retry ends (it may be one of them),
    // the hold on the pods no request was sent for stays (its Ready pods are still refused).
    let mut s = fresh();
    assert!(s.release(&relief(false, true)));
    assert!(s.held("uid-p", soon).is_none());
    assert!(s.shared(&cause, soon).is_some());
    // Still allows: the hold ends, the refused pod keeps its retry.
    let mut s = fresh();
    assert!(s.release(&relief(true, false)));
    assert!(s.held("uid-p", soon).is_some());
    assert!(s.shared(&cause, soon).is_none());
    // Allows where it allowed none, or gone: both end.
    let mut s = fresh();
    assert!(s.release(&Relief::gone(cause.clone())));
    assert!(s.held("uid-p", soon).is_none());
    assert!(s.shared(&cause, soon).is_none());
    // Another budget's refusal is not ended; with nothing left held, nothing to wake.
    assert!(s.held("uid-q", soon).is_some());
    assert!(!s.release(&Relief::gone(cause.clone())));
}

#[test]
fn accepted_eviction_leaves_the_pod_pending_as_terminating() {
    let o = classify_eviction(&r("p"), false, Ok(()));
    assert_eq!(o.result, result::EVICTED);
    assert_eq!(o.blocker.unwrap().reason, reason::TERMINATING);
    assert_eq!(o.error, None);
}

#[test]
fn not_found_and_failed_uid_precondition_mean_gone() {
    let e = api_err(404, "pods \"p\" not found", &[]);
    let o = classify_eviction(&r("p"), false, Err(&e));
    assert_eq!((o.result, o.blocker, o.error), (result::GONE, None, None));
    let e = api_err(
        409,
        "Operation cannot be fulfilled on Pod \"p\": Precondition failed: UID in precondition: a, UID in object meta: b",
        &[],
    );
    assert_eq!(
        classify_eviction(&r("p"), false, Err(&e)).result,
        result::GONE
    );
}

#[test]
fn pdb_refusal_names_the_budget_and_its_healthy_counts() {
    let e = api_err(
        429,
        "Cannot evict pod as it would violate the pod's disruption budget.",
        &[(
            "DisruptionBudget",
            "The disruption budget web-pdb needs 2 healthy pods and has 2 currently",
        )],
    );
    let o = classify_eviction(&r("web-1"), false, Err(&e));
    assert_eq!(o.result, result::BLOCKED_PDB);
    let b = o.blocker.unwrap();
    assert_eq!(b.reason, reason::PDB);
    assert_eq!(b.pod_disruption_budget.as_deref(), Some("web-pdb"));
    assert_eq!((b.desired_healthy, b.current_healthy), (Some(2), Some(2)));
    assert_eq!(
        o.error.as_deref(),
        Some(
            "error when evicting pods/\"web-1\" -n \"ns\": Cannot evict pod as it would violate the pod's disruption budget."
        )
    );
}

#[test]
fn pdb_cause_forms_without_counts_still_name_the_budget() {
    assert_eq!(
        parse_pdb_cause("The disruption budget db is still being processed by the server."),
        Some(("db".to_string(), None, None))
    );
    assert_eq!(
        parse_pdb_cause(
            "The disruption budget db does not allow evicting pods currently because it failed sync: x"
        ),
        Some(("db".to_string(), None, None))
    );
    assert_eq!(parse_pdb_cause("something else"), None);
}

#[test]
fn evacuations_are_progress_a_vm_that_cannot_migrate_blocks_other_429s_are_too_many_requests() {
    // KubeVirt's virt-api texts (pod-eviction-admitter.go) as the API server wraps a webhook's
    // denial, the descheduler's contract, and a webhook's rate limit. (answer, pod carries the
    // in-progress annotation) -> (reason, retry, counts as error?)
    let webhook = |text: &str| {
        format!(
            "admission webhook \"virt-launcher-eviction-interceptor.kubevirt.io\" denied the request: {text}"
        )
    };
    let cases: [(String, bool, &str, Duration, bool); 7] = [
        (
            webhook("Eviction triggered evacuation of VMI \"ns/vm\""),
            false,
            reason::EVACUATING,
            EVACUATION_RETRY_INTERVAL,
            false,
        ),
        (
            webhook("Evacuation in progress: Eviction triggered evacuation of VMI \"ns/vm\""),
            false,
            reason::EVACUATING,
            EVACUATION_RETRY_INTERVAL,
            false,
        ),
        (
            "Eviction triggered evacuation of pod ns/p".into(),
            false,
            reason::EVACUATING,
            EVACUATION_RETRY_INTERVAL,
            false,
        ),
        (
            webhook("VMI vm is configured with an eviction strategy but is not live-migratable"),
            false,
            reason::NOT_MIGRATABLE,
            EVICTION_RETRY_INTERVAL,
            true,
        ),
        // A responder that took the pod over (the annotation) answers as it likes.
        (
            "rate limited".into(),
            true,
            reason::EVACUATING,
            EVACUATION_RETRY_INTERVAL,
            false,
        ),
        (
            "rate limited".into(),
            false,
            reason::TOO_MANY_REQUESTS,
            EVICTION_RETRY_INTERVAL,
            true,
        ),
        // The not-migratable text wins over the annotation: the VM cannot leave.
        (
            webhook("VMI vm is configured with an eviction strategy but is not live-migratable"),
            true,
            reason::NOT_MIGRATABLE,
            EVICTION_RETRY_INTERVAL,
            true,
        ),
    ];
    for (text, in_progress, reason, retry, error) in cases {
        let e = api_err(429, &text, &[]);
        let o = classify_eviction(&r("virt-launcher"), in_progress, Err(&e));
        let b = o.blocker.as_ref().unwrap();
        assert_eq!(
            (
                b.reason.as_str(),
                o.retry,
                o.error.is_some(),
                o.api_error.is_some()
            ),
            (reason, Some(retry), error, error),
            "{text} (in progress: {in_progress})"
        );
        assert_eq!(b.message.as_deref(), Some(text.as_str()));
        assert_eq!(o.result, result::TOO_MANY_REQUESTS, "counted as a 429");
        assert!(o.shared.is_none());
    }
    // A budget's 429 stays a budget's, whatever the pod carries.
    let e = api_err(
        429,
        "Cannot evict pod as it would violate the pod's disruption budget.",
        &[(
            "DisruptionBudget",
            "The disruption budget b needs 1 healthy pods and has 1 currently",
        )],
    );
    assert_eq!(
        classify_eviction(&r("p"), true, Err(&e))
            .blocker
            .unwrap()
            .reason,
        reason::PDB
    );
    // The annotation changes nothing but a 429's row.
    assert_eq!(
        classify_eviction(&r("p"), true, Ok(()))
            .blocker
            .unwrap()
            .reason,
        reason::TERMINATING
    );
    let e = api_err(500, "boom", &[]);
    assert_eq!(
        classify_eviction(&r("p"), true, Err(&e))
            .blocker
            .unwrap()
            .reason,
        reason::EVICTION_ERROR
    );
    // The table itself: an evacuation is the one refusal that is no error.
    let refusals = [
        Answer::Budget,
        Answer::Evacuating,
        Answer::NotMigratable,
        Answer::TooManyRequests,
        Answer::MultipleBudgets,
        Answer::NamespaceTerminating,
        Answer::Error,
    ];
    let no_error: Vec<Answer> = refusals
        .into_iter()
        .filter(|a| !meaning(*a).error)
        .collect();
    assert_eq!(no_error, vec![Answer::Evacuating]);
}

#[test]
fn multiple_budgets_namespace_terminating_and_other_errors() {
    let e = api_err(
        500,
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
        &[],
    );
    assert_eq!(
        classify_eviction(&r("p"), false, Err(&e))
            .blocker
            .unwrap()
            .reason,
        reason::MULTIPLE_PDBS
    );
    let e = api_err(
        403,
        "namespace ns is being terminated",
        &[("NamespaceTerminating", "ns")],
    );
    assert_eq!(
        classify_eviction(&r("p"), false, Err(&e))
            .blocker
            .unwrap()
            .reason,
        reason::NAMESPACE_TERMINATING
    );
    let e = api_err(403, "pdb disruptions allowed is negative", &[]);
    let o = classify_eviction(&r("p"), false, Err(&e));
    assert_eq!(o.result, result::ERROR);
    assert_eq!(o.blocker.unwrap().reason, reason::EVICTION_ERROR);
    assert_eq!(
        o.error.as_deref(),
        Some("error when evicting pods/\"p\" -n \"ns\": pdb disruptions allowed is negative")
    );
}

#[test]
fn terminating_turns_stuck_sixty_seconds_after_the_deletion_was_due() {
    let due: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    let mut p = pod("p");
    assert!(terminating_blocker(&p, due).is_none());
    p.metadata.deletion_timestamp = Some(Time(due));
    p.metadata.deletion_grace_period_seconds = Some(80);
    let at = |s: i64| due + jiff::SignedDuration::from_secs(s);
    assert_eq!(
        terminating_blocker(&p, at(-10)).unwrap().reason,
        reason::TERMINATING
    );
    assert_eq!(
        terminating_blocker(&p, at(60)).unwrap().reason,
        reason::TERMINATING
    );
    let stuck = terminating_blocker(&p, at(61)).unwrap();
    assert_eq!(stuck.reason, reason::STUCK_TERMINATING);
    // The blocker does not change while the pod stays stuck (no status rewrite per pass).
    assert_eq!(terminating_blocker(&p, at(3600)).unwrap(), stuck);
    let msg = stuck.message.unwrap();
    assert!(
        msg.contains("grace period of 80s") && msg.contains("more than 60s"),
        "{msg}"
    );
}

#[test]
fn selectors_match_like_the_api_server() {
    let labels = [
        ("app".to_string(), "web".to_string()),
        ("tier".to_string(), "fe".to_string()),
    ]
    .into();
    assert!(selector_matches(&LabelSelector::default(), &labels));
    let s = LabelSelector {
        match_labels: Some([("app".to_string(), "web".to_string())].into()),
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "tier".into(),
            operator: "In".into(),
            values: Some(vec!["fe".into(), "be".into()]),
        }]),
    };
    assert!(selector_matches(&s, &labels));
    let s2 = LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "app".into(),
            operator: "DoesNotExist".into(),
            values: None,
        }]),
        ..LabelSelector::default()
    };
    assert!(!selector_matches(&s2, &labels));
}

#[test]
fn errors_aggregate_like_utilerrors() {
    assert_eq!(aggregate_errors(&[]), None);
    assert_eq!(aggregate_errors(&["a".into()]).as_deref(), Some("a"));
    assert_eq!(
        aggregate_errors(&["a".into(), "b".into(), "a".into()]).as_deref(),
        Some("[a, b]")
    );
    // Bounded: the first texts, each cut, and how many more.
    let many: Vec<String> = (0..2000)
        .map(|i| format!("e{i:04} {}", "x".repeat(5000)))
        .collect();
    let text = aggregate_errors(&many).unwrap();
    assert!(
        text.len() < crate::bounds::MAX_ERRORS * (crate::bounds::MAX_ERROR + 2) + 64,
        "{}",
        text.len()
    );
    assert!(
        text.ends_with(", and 1990 more errors]"),
        "{}",
        &text[text.len() - 60..]
    );
}

#[test]
fn report_is_blocked_only_by_something_other_than_termination() {
    let mut rep = DrainReport::default();
    assert!(rep.done() && !rep.blocked());
    rep.pending
        .push(classify_eviction(&r("p"), false, Ok(())).blocker.unwrap());
    assert!(!rep.done() && !rep.blocked());
    // An evacuation paces the next round as a refusal does (its retry, not 1 s).
    let e = api_err(429, "Eviction triggered evacuation of VMI \"ns/vm\"", &[]);
    rep.pending
        .push(classify_eviction(&r("vm"), false, Err(&e)).blocker.unwrap());
    assert!(rep.blocked());
    let e = api_err(429, "x", &[]);
    rep.pending
        .push(classify_eviction(&r("q"), false, Err(&e)).blocker.unwrap());
    assert!(rep.blocked());
    let mut waiting = DrainReport::default();
    waiting
        .pending
        .push(waiting_blocker(&r("nmo"), Stage::OwnPod, None));
    waiting
        .pending
        .push(waiting_blocker(&r("dns"), Stage::Critical, None));
    assert!(!waiting.done() && !waiting.blocked());
}

#[test]
fn a_pods_drain_label_skips_it_waits_for_it_or_orders_it() {
    let o = DrainOptions::default();
    let labelled = |labels: &[(&str, &str)]| {
        let mut p = pod("p");
        p.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        classify(&p, None, &o)
    };
    let ours = DRAIN_LABEL;
    let capi = CAPI_DRAIN_LABEL;
    // (labels) -> what the drain does; ours wins over Cluster API's.
    for (labels, expected) in [
        (vec![], Stage::Ordinary(0).into()),
        (
            vec![(ours, "skip")],
            Disposition::SkipByRule { label: ours },
        ),
        (
            vec![(capi, "skip")],
            Disposition::SkipByRule { label: capi },
        ),
        (
            vec![(ours, "wait-completed")],
            Disposition::WaitCompleted { label: ours },
        ),
        (
            vec![(capi, "wait-completed")],
            Disposition::WaitCompleted { label: capi },
        ),
        (vec![(ours, "2")], Stage::Ordinary(2).into()),
        (vec![(ours, "-1")], Stage::Ordinary(-1).into()),
        (vec![(ours, "3"), (capi, "skip")], Stage::Ordinary(3).into()),
        (
            vec![(ours, "wait-completed"), (capi, "skip")],
            Disposition::WaitCompleted { label: ours },
        ),
    ] {
        let got = labelled(&labels);
        match (&got, &expected) {
            (Disposition::Evict { stage, .. }, Disposition::Evict { stage: want, .. }) => {
                assert_eq!(stage, want, "{labels:?}")
            }
            _ => assert_eq!(got, expected, "{labels:?}"),
        }
    }
    // An unknown value drains the pod as without the label, and says so.
    for labels in [vec![(ours, "later")], vec![(capi, "2")]] {
        let Disposition::Evict { stage, warnings } = labelled(&labels) else {
            panic!("{labels:?} is drained");
        };
        assert_eq!(stage, Stage::Ordinary(0));
        assert!(
            warnings.iter().any(|w| w.contains("ignored")),
            "{warnings:?}"
        );
    }
    // A finished pod stays whatever its label says; the waiting pod is counted, the kept not.
    assert!(Disposition::WaitCompleted { label: ours }.drains());
    assert!(!Disposition::SkipByRule { label: ours }.drains());
    let b = waiting_blocker(&r("db"), Stage::Ordinary(2), None);
    assert_eq!(b.reason, reason::DRAIN_ORDER);
}

/// Every waiting pod's text reads as one sentence: no run of spaces left by a broken line
/// continuation (the drain order's once carried seventeen), no line break, no edge blank.
#[test]
fn every_waiting_blocker_text_is_one_clean_sentence() {
    for stage in [
        Stage::Ordinary(2),
        Stage::DaemonSet,
        Stage::Critical,
        Stage::OwnPod,
    ] {
        for class in [None, Some("system-node-critical")] {
            let text = waiting_blocker(&r("p"), stage, class).message.unwrap();
            assert!(
                !text.contains("  ") && !text.contains('\n') && text.trim() == text,
                "{stage:?}: {text:?}"
            );
        }
    }
    let kept = skipped_entry(&r("p")).message.unwrap();
    assert!(!kept.contains("  ") && !kept.contains('\n'), "{kept:?}");
}

impl From<Stage> for Disposition {
    fn from(stage: Stage) -> Self {
        Disposition::Evict {
            warnings: Vec::new(),
            stage,
        }
    }
}

#[test]
fn a_pod_no_longer_listed_keeps_only_its_unanswered_eviction_and_awaited_replacement() {
    let t0 = Instant::now();
    let accepted = classify_eviction(&r("p"), false, Ok(()));
    let awaits = Awaited {
        pod: r("p"),
        owner: "rs-uid".into(),
        last_seen: jiff::Timestamp::UNIX_EPOCH,
    };
    let mut s = RetrySchedule::default();
    // p: evicted (accepted, its replacement awaited), announced and warned; q: in flight.
    s.sent("uid-p");
    s.answered("uid-p", Some(&accepted), Some((&Some(awaits), &None)), t0);
    assert!(s.announce("uid-p"));
    assert!(s.warn("uid-p"));
    s.sent("uid-q");
    s.record("uid-q", &pdb_refusal("q"), t0);
    s.retain(&HashSet::new());
    // p is gone: its acceptance and announcements are forgotten, its awaited replacement is not.
    assert!(s.state("uid-p").is_none_or(|p| p.accepted.is_none()));
    assert_eq!(
        s.awaited().map(|(uid, _)| uid.as_str()).collect::<Vec<_>>(),
        ["uid-p"]
    );
    assert!(
        s.announce("uid-p"),
        "a pod no longer listed is announced anew"
    );
    // q's refusal is forgotten, its unanswered eviction is not.
    assert!(s.held("uid-q", t0).is_none());
    assert!(s.in_flight("uid-q"));
    // Once nothing is left of a pod, nothing is remembered of the node.
    s.answered("uid-q", None, None, t0);
    s.apply(Settled {
        read_awaited: ["uid-p".to_string()].into(),
        done: true,
        ..Settled::default()
    });
    assert!(!s.any_in_flight());
    assert!(s.is_empty(), "{s:?}");
}

#[test]
fn an_eviction_is_sent_once_and_only_an_answer_that_changes_a_decision_wakes_the_next_pass() {
    let t0 = Instant::now();
    let uids = |v: &[&str]| v.iter().map(|u| u.to_string()).collect::<HashSet<String>>();
    let accepted = |name: &str| classify_eviction(&r(name), false, Ok(()));
    let awaits = Awaited {
        pod: r("c"),
        owner: "rs-uid".into(),
        last_seen: jiff::Timestamp::UNIX_EPOCH,
    };
    let mut s = RetrySchedule::default();
    assert_eq!(
        s.send(["uid-a", "uid-b", "uid-c"], t0),
        uids(&["uid-a", "uid-b", "uid-c"])
    );
    // A round that read the memory before the evictions were sent decides them again.
    assert!(s.send(["uid-a"], t0).is_empty());
    // An acceptance while others are in flight changes no decision yet.
    assert!(!s.answered("uid-a", Some(&accepted("a")), None, t0));
    // One that awaits a replacement does, and so does a refusal, which holds its pod.
    assert!(s.answered(
        "uid-c",
        Some(&accepted("c")),
        Some((&Some(awaits), &None)),
        t0
    ));
    assert!(s.answered("uid-b", Some(&pdb_refusal("b")), None, t0));
    assert!(s.send(["uid-b"], t0).is_empty());
    // The node's last answer does; an eviction not sent after all does not.
    assert_eq!(s.send(["uid-d", "uid-e"], t0), uids(&["uid-d", "uid-e"]));
    assert!(!s.answered("uid-e", None, None, t0));
    assert!(s.answered("uid-d", Some(&accepted("d")), None, t0));
}

#[test]
fn a_pods_decision_is_its_classification_then_the_drain_rule_that_selects_it() {
    let o = DrainOptions::default();
    let none = Arrival::default();
    let rule = |behavior| crate::api::DrainRule {
        behavior,
        order: Some(4),
        ..crate::api::DrainRule::default()
    };
    let wait = rule(crate::api::DrainBehavior::WaitCompleted);
    let drain = rule(crate::api::DrainBehavior::Drain);
    let p = owned(pod("p"), "ReplicaSet", "rs");
    // No rule: the classification.
    assert_eq!(
        decide(&slim(&p), None, &o, &none, None),
        classify(&p, None, &o)
    );
    // A rule decides after it: it waits for the pod, or orders it.
    assert_eq!(
        decide(&slim(&p), None, &o, &none, Some(&wait)),
        Disposition::WaitCompleted { label: DRAIN_RULES }
    );
    assert_eq!(
        stage_of(decide(&slim(&p), None, &o, &none, Some(&drain))),
        Stage::Ordinary(4)
    );
    // What the classification leaves alone, a rule does not evict.
    let ds = owned(pod("d"), "DaemonSet", "ds");
    let uid = daemonset_owner(&ds).map(|o| o.uid);
    assert_eq!(
        decide(&slim(&ds), uid.as_deref(), &o, &none, Some(&drain)),
        Disposition::SkipDaemonSet
    );
}

/// A big drain holds one record per pod (3,000 at once in `cargo bench --bench maintenance --
/// bigdrain`): every blocker in it is boxed, so a record of a pod in flight is a few words.
#[test]
fn a_pods_record_is_a_few_words_whatever_it_may_hold() {
    let size = std::mem::size_of::<PodState>();
    assert!(size <= 48, "PodState is {size} bytes");
}

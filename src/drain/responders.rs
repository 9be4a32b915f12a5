//! KEP-4563's eviction responders as the drain shows them (`docs/design.md` §2b, "The
//! responders' progress is the blocker"; `docs/drain-contract.md` §4b): while a responder is
//! `Active` on the `lifecycle.k8s.io` `Eviction` of a pod the drain waits for, the pod's blocker
//! is `EvictionResponder`, naming that responder, its `message` and its
//! `expectedCompletionTime`, and the pod's refusal is not an error (not in `lastError`).
//!
//! The Evictions come from one watch of `evictions.lifecycle.k8s.io` in all namespaces, started
//! only where discovery at the controller's start finds the group version that serves
//! EvictionRequests (`super::requester::discover`) also serving `evictions`, and one list of one
//! item shows the operator may read them; elsewhere (Kubernetes 1.36, the `EvictionRequestAPI`
//! gate off) nothing is watched, asked or logged as an error, and blockers are as before. A watch,
//! not a read per pod and pass, as for KubeVirt's migrations (`super::migration`).
//!
//! Kubernetes 1.37 serves the API but runs no evictionrequest controller, so an Eviction exists
//! only where something else made it; the drain reads Evictions, it never writes one.

use std::collections::HashMap;

use kube::api::DynamicObject;
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};

use super::answer::evicting_error;
use super::consts::reason;
pub(crate) use super::consts::reason::{EVICTION_RESPONDER, moving};
use super::pod::DrainPod;
use crate::api::PodBlocker;
use crate::watch::optional::{OptionalWatch, Unavailable};

/// The resource this module watches, in the group version that serves EvictionRequests.
pub(crate) const RESOURCE: &str = "evictions";
/// `status.targetResponders[].state` of the one responder at work (KEP-4563: at most one).
const ACTIVE: &str = "Active";
/// The conditions that end an Eviction (`TargetEvicted`, `Failed`): once either is `True`, no
/// responder is at work any more, whatever `targetResponders` still says.
const ENDING_CONDITIONS: [&str; 2] = ["TargetEvicted", "Failed"];

/// The blockers a responder at work explains: refusals of the eviction the drain keeps asking
/// (a budget's, another 429, KubeVirt's "evacuating"). A pod that terminates, waits for an
/// earlier stage or order, for an answer, or is held by the operator's own rules keeps its
/// blocker: that is why the drain waits, whoever else works on the pod.
const SHOWN_OVER: [&str; 4] = [
    reason::PDB,
    reason::MULTIPLE_PDBS,
    reason::TOO_MANY_REQUESTS,
    reason::EVACUATING,
];

/// The `Active` responder of one Eviction, as its blocker shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ActiveResponder {
    /// The target pod's namespace (the Eviction's own: it targets a pod of its namespace).
    pub namespace: String,
    /// The responder's domain-prefixed name (`status.targetResponders[].name`).
    pub name: String,
    /// Its `status.responders[].message`, the responder's words; `None` when it wrote none.
    pub message: Option<String>,
    /// Its `status.responders[].expectedCompletionTime` (RFC 3339), as the API server returned
    /// it; `None` when the responder gave no estimate.
    pub expected_completion_time: Option<String>,
}

impl ActiveResponder {
    /// The target pod's UID and the `Active` responder of Eviction `obj`; `None` when it targets
    /// no pod (`spec.target.pod.uid` missing or empty), has ended (a `TargetEvicted` or `Failed`
    /// condition `True`) or names no `Active` responder in `status.targetResponders`.
    pub(crate) fn of(obj: &DynamicObject) -> Option<(String, Self)> {
        let uid = obj.data["spec"]["target"]["pod"]["uid"]
            .as_str()
            .filter(|u| !u.is_empty())?;
        let status = &obj.data["status"];
        let ended = status["conditions"].as_array().is_some_and(|cs| {
            cs.iter().any(|c| {
                c["status"] == "True"
                    && c["type"]
                        .as_str()
                        .is_some_and(|t| ENDING_CONDITIONS.contains(&t))
            })
        });
        if ended {
            return None;
        }
        let name = status["targetResponders"]
            .as_array()?
            .iter()
            .find(|r| r["state"] == ACTIVE)?["name"]
            .as_str()
            .filter(|n| !n.is_empty())?;
        let own = status["responders"]
            .as_array()
            .and_then(|rs| rs.iter().find(|r| r["name"] == name));
        let text = |field: &str| {
            own.and_then(|r| r[field].as_str())
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        Some((
            uid.to_string(),
            Self {
                namespace: obj.namespace().unwrap_or_default(),
                name: name.to_string(),
                message: text("message"),
                expected_completion_time: text("expectedCompletionTime"),
            },
        ))
    }

    /// The blocker `b` shows this responder: reason [`EVICTION_RESPONDER`], the responder's
    /// name, message (else a sentence naming it) and expected completion. The budget's figures
    /// stay: the budget still refuses the eviction the drain keeps asking.
    fn show_in(&self, b: &mut PodBlocker) {
        b.reason = EVICTION_RESPONDER.to_string();
        b.responder = Some(self.name.clone());
        b.message =
            Some(self.message.clone().unwrap_or_else(|| {
                format!("eviction responder {} is moving the workload", self.name)
            }));
        b.expected_completion_time = self.expected_completion_time.clone();
    }
}

/// The `Active` responders by target pod UID; empty where Evictions are not watched.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Responders {
    by_uid: HashMap<String, ActiveResponder>,
}

impl Responders {
    /// The index of `evictions` (`(target pod UID, responder)`, as [`ActiveResponder::of`]
    /// reads them). Two Evictions of one pod (one per target is the API's rule; a stale one may
    /// linger): the responder with the greater name, so every pass shows the same one.
    pub(crate) fn index(evictions: impl IntoIterator<Item = (String, ActiveResponder)>) -> Self {
        let mut by_uid: HashMap<String, ActiveResponder> = HashMap::new();
        for (uid, r) in evictions {
            if by_uid.get(&uid).is_none_or(|old| r.name > old.name) {
                by_uid.insert(uid, r);
            }
        }
        Self { by_uid }
    }

    /// The responders at work on `pods`, by the pod's `(namespace, name)`: the Eviction must
    /// target the pod's UID (a same-named replacement is another pod) in the pod's namespace.
    pub(crate) fn on<'a>(
        &self,
        pods: impl IntoIterator<Item = &'a DrainPod>,
    ) -> HashMap<(String, String), ActiveResponder> {
        if self.by_uid.is_empty() {
            return HashMap::new();
        }
        pods.into_iter()
            .filter_map(|p| {
                let m = &p.metadata;
                let r = self.by_uid.get(m.uid.as_deref()?)?;
                (r.namespace == m.namespace)
                    .then(|| ((m.namespace.clone(), m.name.clone()), r.clone()))
            })
            .collect()
    }
}

/// Shows in a round's `pending` blockers each responder at work (`active`, from [`Responders::on`]):
/// the blocker of its pod, when it is one a responder explains ([`SHOWN_OVER`]), becomes
/// [`EVICTION_RESPONDER`], and the pod's refusal text leaves `errors` (so `lastError`),
/// since a responder at work is progress. A pure step at the end of `round::round`: what the drain asks
/// and when it asks again are unchanged (it keeps asking the Eviction API, `docs/design.md`
/// §2b); only what the status says changes.
pub(crate) fn show(
    pending: &mut [PodBlocker],
    errors: &mut Vec<String>,
    active: &HashMap<(String, String), ActiveResponder>,
) {
    if active.is_empty() {
        return;
    }
    let mut quiet = Vec::new();
    for b in pending {
        let key = (b.namespace.clone(), b.name.clone());
        let Some(r) = active.get(&key) else {
            continue;
        };
        if !SHOWN_OVER.contains(&b.reason.as_str()) {
            continue;
        }
        r.show_in(b);
        let pod = b.pod();
        // Every refusal's text is `evicting_error(pod, ..)`: its prefix names the pod.
        quiet.push(evicting_error(&pod, ""));
    }
    errors.retain(|e| !quiet.iter().any(|prefix| e.starts_with(prefix.as_str())));
}

/// The controller's watch of Evictions, read by each drain round; inert where the API is not
/// served (or not readable).
#[derive(Clone, Default)]
pub(crate) struct ResponderWatch(OptionalWatch);

impl ResponderWatch {
    /// A watch that watches nothing.
    pub(crate) fn none() -> Self {
        Self::default()
    }

    /// Starts watching `evictions` in `served`, the group version that serves EvictionRequests
    /// (`super::requester::discover`; `None`: not served, an inert watch and no request), once
    /// discovery shows it lists [`RESOURCE`] and one list of one item shows the operator may
    /// read them; returns the watch and the future that drives it (until dropped). Not
    /// readable: an inert watch and one info line naming the missing grant.
    pub(crate) async fn start(
        client: Client,
        served: Option<&str>,
    ) -> (Self, Option<impl Future<Output = ()> + Send + 'static>) {
        let Some((gv, (group, version))) = served.and_then(|gv| Some((gv, gv.split_once('/')?)))
        else {
            return (Self::none(), None);
        };
        let gvk = GroupVersionKind::gvk(group, version, "Eviction");
        let resource = ApiResource::from_gvk_with_plural(&gvk, RESOURCE);
        match OptionalWatch::start(client, resource, "Eviction", super::consts::READ_TIMEOUT).await
        {
            Ok((watch, drive)) => {
                tracing::info!(group_version = %gv, "Evictions watched: a pod's active eviction responder is shown in its blocker");
                (Self(watch), Some(drive))
            }
            Err(Unavailable::NotServed) => {
                tracing::info!(group_version = %gv, "EvictionRequests are served but not Evictions; eviction responders are not shown");
                (Self::none(), None)
            }
            Err(Unavailable::NotReadable(e)) => {
                tracing::info!(group_version = %gv, error = %e, "Evictions cannot be listed; eviction responders are not shown (grant get, list, watch on evictions.lifecycle.k8s.io, manifests/base/rbac.yaml)");
                (Self::none(), None)
            }
        }
    }

    /// The active responders now (empty until the watch has listed, or where not watched).
    pub(crate) fn read(&self) -> Responders {
        Responders::index(self.0.state().iter().filter_map(|o| ActiveResponder::of(o)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::PodReference;
    use crate::drain::DrainReport;
    use serde_json::{Value, json};

    const UID: &str = "0b6f7e3a-1111-4222-8333-944455556666";

    fn eviction(status: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "lifecycle.k8s.io/v1alpha1", "kind": "Eviction",
            "metadata": {"name": "web-0", "namespace": "ns"},
            "spec": {"target": {"pod": {"name": "web-0", "uid": UID}}},
            "status": status
        }))
        .unwrap()
    }

    fn active(state: &str) -> Value {
        json!({
            "targetResponders": [
                {"name": "example.com/responder", "priority": 10000, "state": state},
                {"name": "imperative-eviction.k8s.io/evictor", "priority": 100, "state": "Inactive"}
            ],
            "responders": [
                {"name": "example.com/responder", "startTime": "2026-01-01T00:00:00Z",
                 "expectedCompletionTime": "2026-01-01T00:10:00Z",
                 "message": "moving the workload"},
                {"name": "imperative-eviction.k8s.io/evictor"}
            ]
        })
    }

    fn pod(name: &str, uid: &str) -> DrainPod {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns", "uid": uid}}))
            .unwrap()
    }

    fn blocker(name: &str, reason: &str) -> PodBlocker {
        PodBlocker {
            namespace: "ns".into(),
            name: name.into(),
            reason: reason.into(),
            message: Some(
                "Cannot evict pod as it would violate the pod's disruption budget.".into(),
            ),
            pod_disruption_budget: Some("guard".into()),
            desired_healthy: Some(1),
            current_healthy: Some(1),
            ..PodBlocker::default()
        }
    }

    #[test]
    fn an_active_responder_is_read_with_its_message_and_expected_completion() {
        let (uid, r) = ActiveResponder::of(&eviction(active("Active"))).unwrap();
        assert_eq!(uid, UID);
        assert_eq!(
            r,
            ActiveResponder {
                namespace: "ns".into(),
                name: "example.com/responder".into(),
                message: Some("moving the workload".into()),
                expected_completion_time: Some("2026-01-01T00:10:00Z".into()),
            }
        );
        // Done, interrupted, canceled or not yet started: no responder at work.
        for state in ["Completed", "Interrupted", "Canceled", "Inactive"] {
            assert_eq!(
                ActiveResponder::of(&eviction(active(state))),
                None,
                "{state}"
            );
        }
        // An Eviction that ended keeps its last states; it is over all the same.
        for ending in ENDING_CONDITIONS {
            let mut ended = active("Active");
            ended["conditions"] = json!([{"type": ending, "status": "True", "reason": "x",
                "message": "", "lastTransitionTime": "2026-01-01T00:05:00Z"}]);
            assert_eq!(ActiveResponder::of(&eviction(ended)), None, "{ending}");
        }
        let mut not_ended = active("Active");
        not_ended["conditions"] = json!([{"type": "Failed", "status": "False", "reason": "AwaitingEviction",
            "message": "", "lastTransitionTime": "2026-01-01T00:05:00Z"}]);
        assert!(ActiveResponder::of(&eviction(not_ended)).is_some());
        // No status yet (no controller wrote it), or no pod target: nothing.
        assert_eq!(ActiveResponder::of(&eviction(json!({}))), None);
        let mut no_pod = eviction(active("Active"));
        no_pod.data["spec"]["target"] = json!({});
        assert_eq!(ActiveResponder::of(&no_pod), None);
        // A responder that wrote nothing yet: named, without message or estimate.
        let mut silent = active("Active");
        silent["responders"][0] =
            json!({"name": "example.com/responder", "startTime": "2026-01-01T00:00:00Z"});
        let (_, r) = ActiveResponder::of(&eviction(silent)).unwrap();
        assert_eq!(
            (r.message, r.expected_completion_time),
            (None, None),
            "nothing invented"
        );
    }

    #[test]
    fn the_responder_is_matched_to_the_pod_by_uid_in_its_namespace() {
        let index = Responders::index(ActiveResponder::of(&eviction(active("Active"))));
        let same = pod("web-0", UID);
        let replacement = pod("web-0", "another-uid");
        let found = index.on([&same, &replacement]);
        assert_eq!(found.len(), 1);
        assert!(found.contains_key(&("ns".to_string(), "web-0".to_string())));
        assert!(index.on([&replacement]).is_empty(), "same name, other pod");
        let mut elsewhere = pod("web-0", UID);
        elsewhere.metadata.namespace = "other".into();
        assert!(index.on([&elsewhere]).is_empty(), "another namespace");
        assert!(Responders::default().on([&same]).is_empty());
    }

    #[test]
    fn a_responder_at_work_is_the_blocker_and_not_an_error() {
        let index = Responders::index(ActiveResponder::of(&eviction(active("Active"))));
        let found = index.on([&pod("web-0", UID)]);
        let pod_ref = |name: &str| PodReference {
            namespace: "ns".into(),
            name: name.into(),
        };
        let budget_error = "Cannot evict pod as it would violate the pod's disruption budget.";
        let mut report = DrainReport {
            pending: vec![blocker("web-0", reason::PDB), blocker("web-1", reason::PDB)],
            errors: vec![
                crate::drain::answer::evicting_error(&pod_ref("web-0"), budget_error),
                crate::drain::answer::evicting_error(&pod_ref("web-1"), budget_error),
            ],
            ..DrainReport::default()
        };
        show(&mut report.pending, &mut report.errors, &found);
        let b = &report.pending[0];
        assert_eq!(
            (
                b.reason.as_str(),
                b.responder.as_deref(),
                b.message.as_deref(),
                b.expected_completion_time.as_deref(),
                b.pod_disruption_budget.as_deref()
            ),
            (
                EVICTION_RESPONDER,
                Some("example.com/responder"),
                Some("moving the workload"),
                Some("2026-01-01T00:10:00Z"),
                Some("guard")
            )
        );
        assert_eq!(
            report.pending[1],
            blocker("web-1", reason::PDB),
            "another pod"
        );
        assert_eq!(
            report.errors,
            vec![crate::drain::answer::evicting_error(
                &pod_ref("web-1"),
                budget_error
            )],
            "only the pod without a responder is an error"
        );
        assert!(moving(&report.pending[0].reason) && !moving(&report.pending[1].reason));
        // Whatever else holds the pod stays: it terminates, waits for its turn, or is in flight.
        for kept in [
            reason::TERMINATING,
            reason::DRAIN_ORDER,
            reason::EVICTING,
            reason::OPTED_OUT,
            reason::STUCK_TERMINATING,
        ] {
            let mut r = DrainReport {
                pending: vec![blocker("web-0", kept)],
                ..DrainReport::default()
            };
            show(&mut r.pending, &mut r.errors, &found);
            assert_eq!(r.pending[0], blocker("web-0", kept), "{kept}");
        }
        // The responder finished (Completed): the budget's blocker and error again.
        let done = Responders::index(ActiveResponder::of(&eviction(active("Completed"))));
        let mut again = DrainReport {
            pending: vec![blocker("web-0", reason::PDB)],
            errors: vec![crate::drain::answer::evicting_error(
                &pod_ref("web-0"),
                budget_error,
            )],
            ..DrainReport::default()
        };
        show(
            &mut again.pending,
            &mut again.errors,
            &done.on([&pod("web-0", UID)]),
        );
        assert_eq!(again.pending[0], blocker("web-0", reason::PDB));
        assert_eq!(again.errors.len(), 1);
    }
}

//! The PodDisruptionBudgets a drain round reads before it asks (`docs/drain-contract.md` §1,
//! "How often"): a budget that allows no disruption is asked through one of its pods per retry interval, and
//! the others it covers are reported as held by it without a request; a budget that allows `k`
//! has up to `k` of its pods asked at once. Ours: kubectl drain and upstream ask every pod every
//! 5 s, so a budget-held node of 2,000 pods costs the API server hundreds of refused evictions a
//! second.
//!
//! The budgets come from the controller's watch of every PodDisruptionBudget (`Budget::of`
//! keeps only what the rule reads); until that watch has listed, a round has no budgets and
//! asks every pod, as before.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

use super::rules::selector_matches;

/// A PodDisruptionBudget as the drain reads it.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Budget {
    /// Its namespace (it covers pods of this namespace only).
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// `spec.selector`; `None` selects no pod, an empty one every pod of the namespace
    /// (policy/v1).
    pub selector: Option<LabelSelector>,
    /// Evictions the API server would accept now: `status.disruptionsAllowed`, or 0 while
    /// `status.observedGeneration` is behind `metadata.generation` (the API server then refuses
    /// with "…is still being processed by the server", `pkg/registry/core/pod/storage/eviction.go`).
    pub allowed: i32,
    /// `status.desiredHealthy`.
    pub desired: Option<i32>,
    /// `status.currentHealthy`.
    pub current: Option<i32>,
    /// `spec.unhealthyPodEvictionPolicy` is `AlwaysAllow`: a pod that is not Ready is evicted
    /// whatever the budget allows (the default, `IfHealthyBudget`, only while the budget has
    /// its healthy pods).
    pub always_allow_unhealthy: bool,
}

impl Budget {
    /// The drain's view of `pdb`.
    pub(crate) fn of(pdb: &PodDisruptionBudget) -> Self {
        let status = pdb.status.as_ref();
        let processed = status
            .and_then(|s| s.observed_generation)
            .is_some_and(|o| pdb.metadata.generation.is_none_or(|g| o >= g));
        Self {
            namespace: pdb.namespace().unwrap_or_default(),
            name: pdb.name_any(),
            selector: pdb.spec.as_ref().and_then(|s| s.selector.clone()),
            allowed: if processed {
                status
                    .and_then(|s| s.disruptions_allowed)
                    .unwrap_or(0)
                    .max(0)
            } else {
                0
            },
            desired: status.and_then(|s| s.desired_healthy),
            current: status.and_then(|s| s.current_healthy),
            always_allow_unhealthy: pdb
                .spec
                .as_ref()
                .and_then(|s| s.unhealthy_pod_eviction_policy.as_deref())
                == Some("AlwaysAllow"),
        }
    }

    /// Whether this budget's answer is the API server's answer to evicting `pod`, so that,
    /// while it allows no disruption, the pod is refused as its other pods are. Not for a pod
    /// `Pending`, `Succeeded`, `Failed` or terminating (deleted without a budget check), nor
    /// for one not Ready while the budget has its healthy pods (`currentHealthy >=
    /// desiredHealthy > 0`) or with `unhealthyPodEvictionPolicy: AlwaysAllow` (let go without
    /// spending a disruption). Source: kube-apiserver's eviction handler,
    /// `pkg/registry/core/pod/storage/eviction.go` (`canIgnorePDB`, the not-Ready case). Such a
    /// pod is asked on its own: its eviction, and its replacement becoming Ready elsewhere, is
    /// how a budget that allows nothing because of it recovers.
    pub(crate) fn decides(&self, pod: &super::pod::DrainPod) -> bool {
        let ignored = matches!(
            pod.status.phase.as_deref(),
            Some("Pending") | Some("Succeeded") | Some("Failed")
        ) || pod.metadata.deletion_timestamp.is_some();
        if ignored {
            return false;
        }
        pod.status.ready || !self.lets_go_unready()
    }

    /// Whether the API server evicts a pod of this budget that is not Ready without spending
    /// a disruption: with `unhealthyPodEvictionPolicy: AlwaysAllow`, or while the budget has its
    /// healthy pods (`currentHealthy >= desiredHealthy > 0`). Source: the not-Ready case of
    /// `pkg/registry/core/pod/storage/eviction.go`.
    fn lets_go_unready(&self) -> bool {
        let healthy = matches!((self.current, self.desired), (Some(c), Some(d)) if d > 0 && c >= d);
        self.always_allow_unhealthy || healthy
    }

    /// What this budget, seen by the watch as `self` after `before` (`None`: not seen before),
    /// ends of what its refusals hold, `None` when nothing. While it allows a disruption (every
    /// sighting), the hold on the pods no request was sent for; the retries of the pods it
    /// refused only when it has changed since it refused them, a new fact from the API server:
    /// it allows a disruption where it allowed none, or it has just come to let its pods that
    /// are not Ready go ([`Budget::lets_go_unready`]: its healthy count regained, or
    /// `AlwaysAllow` set; its Ready pods stay held, as it still refuses them). A budget that
    /// stays healthy while allowing none ends nothing: a pod not Ready that it refused meanwhile
    /// (the API server's status ahead of the watch's) waits for its own retry.
    pub(crate) fn relief_after(&self, before: Option<&Budget>) -> Option<Relief> {
        let allowed_none = before.is_none_or(|b| b.allowed <= 0);
        let lets_go_unready =
            self.lets_go_unready() && !before.is_some_and(Budget::lets_go_unready);
        let relief = Relief {
            cause: self.cause(),
            hold: self.allowed > 0,
            retries: (self.allowed > 0 && allowed_none) || lets_go_unready,
        };
        (relief.hold || relief.retries).then_some(relief)
    }

    /// Whether it covers a pod of `namespace` with `labels`.
    pub(crate) fn covers(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        self.namespace == namespace
            && self
                .selector
                .as_ref()
                .is_some_and(|s| selector_matches(s, labels))
    }

    /// Its key among the shared causes of refusals.
    pub(crate) fn cause(&self) -> SharedCause {
        SharedCause::Budget {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

#[cfg(test)]
impl Budget {
    /// A budget of `namespace` over the pods labelled `app=<app>`, allowing `allowed`, with
    /// `healthy` of `healthy` pods healthy.
    pub(crate) fn over_app(
        namespace: &str,
        name: &str,
        app: &str,
        allowed: i32,
        healthy: i32,
    ) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            selector: Some(LabelSelector {
                match_labels: Some([("app".to_string(), app.to_string())].into()),
                ..LabelSelector::default()
            }),
            allowed,
            desired: Some(healthy),
            current: Some(healthy),
            always_allow_unhealthy: false,
        }
    }
}

/// The budgets a round read, by namespace; `None`: not known yet (every pod is asked).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Budgets(Option<BTreeMap<String, Vec<Budget>>>);

impl Budgets {
    /// Budgets known to be every budget of the cluster.
    pub(crate) fn known(budgets: impl IntoIterator<Item = Budget>) -> Self {
        let mut by_namespace: BTreeMap<String, Vec<Budget>> = BTreeMap::new();
        for b in budgets {
            by_namespace.entry(b.namespace.clone()).or_default().push(b);
        }
        Self(Some(by_namespace))
    }

    /// The names of the budgets covering a pod of `namespace` with `labels`, sorted, when more than one
    /// does (the API server then refuses its eviction with a 500 that names none); empty
    /// otherwise, and while the budgets are not known.
    pub(crate) fn overlapping(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> Vec<String> {
        let mut names: Vec<String> = self
            .all_covering(namespace, labels)
            .map(|b| b.name.clone())
            .collect();
        // Sorted: the watch's order is not stable, and the status text must not change with it.
        names.sort();
        if names.len() > 1 { names } else { Vec::new() }
    }

    /// The one budget covering a pod of `namespace` with `labels`; `None` when none or several
    /// do, or the budgets are not known (several: the API server refuses the eviction with 500
    /// whatever they allow, and the pod keeps its own retry).
    pub(crate) fn covering(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> Option<&Budget> {
        let mut covering = self.all_covering(namespace, labels);
        let one = covering.next()?;
        covering.next().is_none().then_some(one)
    }

    /// Every known budget covering a pod of `namespace` with `labels`; none while the budgets are
    /// not known.
    fn all_covering<'a: 'b, 'b>(
        &'a self,
        namespace: &'b str,
        labels: &'b BTreeMap<String, String>,
    ) -> impl Iterator<Item = &'a Budget> + 'b {
        let budgets = self.0.as_ref().and_then(|b| b.get(namespace));
        budgets
            .into_iter()
            .flatten()
            .filter(move |b| b.covers(namespace, labels))
    }
}

/// A cause of refusal that many pods share, so one request stands for all of them until it is
/// due again: a PodDisruptionBudget (the 429's `DisruptionBudget` cause names it) or a
/// namespace being deleted (403 with a `NamespaceTerminating` cause).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum SharedCause {
    /// A PodDisruptionBudget.
    Budget {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The namespace is being deleted.
    NamespaceTerminating {
        /// The namespace.
        namespace: String,
    },
}

/// What the budget watch saw that ends what a budget's refusals hold
/// ([`RetrySchedule::release`](super::RetrySchedule::release); [`Budget::relief_after`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Relief {
    /// The budget.
    pub cause: SharedCause,
    /// The hold on the pods no request was sent for ends: it allows a disruption, or is gone.
    pub hold: bool,
    /// The retries of the pods it refused end: it changed since (it allows a disruption where
    /// it allowed none, lets its pods that are not Ready go, or is gone).
    pub retries: bool,
}

impl Relief {
    /// All of it: the budget is gone.
    pub(crate) fn gone(cause: SharedCause) -> Self {
        Self {
            cause,
            hold: true,
            retries: true,
        }
    }
}

/// The controller's watch of every PodDisruptionBudget, read by each drain round.
#[derive(Clone)]
pub(crate) struct BudgetWatch {
    store: Store<PodDisruptionBudget>,
    /// Whether the store holds every budget: set once the watch has listed, cleared while it
    /// lists again (a relist after a 410 may miss deletions until it is done;
    /// `crate::watch::relist::complete_after`).
    listed: Arc<AtomicBool>,
}

impl BudgetWatch {
    /// A watch of every PodDisruptionBudget through `client`, the future that drives it (until
    /// dropped; watch errors are logged and retried with the watch's back-off), and the budgets
    /// that may end a hold now: each one seen allowing at least one, or newly letting its pods
    /// that are not Ready go ([`Budget::relief_after`]), or deleted (the drain's trigger ends
    /// their holds, `crate::controller`).
    pub(crate) fn start(
        client: Client,
    ) -> (
        Self,
        impl Future<Output = ()> + Send + 'static,
        futures::channel::mpsc::UnboundedReceiver<Relief>,
    ) {
        let (store, writer) = reflector::store::<PodDisruptionBudget>();
        let listed = Arc::new(AtomicBool::new(false));
        let flag = listed.clone();
        // Read before the event reaches the store: the budget as last seen.
        let seen = store.clone();
        let (relaxed_tx, relaxed) = futures::channel::mpsc::unbounded();
        let api: Api<PodDisruptionBudget> = Api::all(client);
        let drive = watcher(api, watcher::Config::default())
            .backoff(crate::watch::relist::watch_backoff())
            .inspect(move |ev| {
                if let Some(complete) = crate::watch::relist::complete_after(ev) {
                    flag.store(complete, Ordering::Relaxed);
                }
                let Ok(ev) = ev else { return };
                match ev {
                    // A relist's objects too: the store keeps the objects from before it until
                    // InitDone, so a change made while the watch was away is seen as one.
                    watcher::Event::Apply(pdb) | watcher::Event::InitApply(pdb) => {
                        let before = seen
                            .get(&reflector::ObjectRef::from_obj(pdb))
                            .map(|b| Budget::of(&b));
                        if let Some(relief) = Budget::of(pdb).relief_after(before.as_ref()) {
                            let _ = relaxed_tx.unbounded_send(relief);
                        }
                    }
                    watcher::Event::Delete(pdb) => {
                        let _ = relaxed_tx.unbounded_send(Relief::gone(Budget::of(pdb).cause()));
                    }
                    _ => {}
                }
            })
            .filter_map(crate::watch::relist::log_error("PodDisruptionBudget"))
            .modify(slim)
            .reflect(writer)
            .for_each(|_| async {});
        (Self { store, listed }, drive, relaxed)
    }

    /// A watch that never lists (tests of the executor): every pod is asked.
    #[cfg(test)]
    pub(crate) fn none() -> Self {
        let (store, _writer) = reflector::store::<PodDisruptionBudget>();
        Self {
            store,
            listed: Arc::default(),
        }
    }

    /// The budgets now: known once the watch has listed, else unknown.
    pub(crate) fn read(&self) -> Budgets {
        if !self.listed.load(Ordering::Relaxed) {
            return Budgets::default();
        }
        Budgets::known(self.store.state().iter().map(|pdb| Budget::of(pdb)))
    }
}

/// Keeps what [`Budget::of`] reads: the watch holds every budget of the cluster.
fn slim(pdb: &mut PodDisruptionBudget) {
    pdb.metadata.managed_fields = None;
    pdb.metadata.annotations = None;
    pdb.metadata.labels = None;
    if let Some(status) = pdb.status.as_mut() {
        status.conditions = None;
        status.disrupted_pods = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_decides_what_the_api_servers_eviction_handler_would() {
        let pod = |phase: Option<&str>,
                   ready: bool,
                   terminating: bool|
         -> super::super::pod::DrainPod {
            let mut status = serde_json::json!({
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]
            });
            if let Some(phase) = phase {
                status["phase"] = phase.into();
            }
            let mut meta = serde_json::json!({"name": "p"});
            if terminating {
                meta["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
            }
            serde_json::from_value(serde_json::json!({"metadata": meta, "status": status})).unwrap()
        };
        let budget = |current: Option<i32>, desired: Option<i32>, always: bool| Budget {
            current,
            desired,
            always_allow_unhealthy: always,
            ..Budget::default()
        };
        let unhealthy = budget(Some(1), Some(2), false);
        // canIgnorePDB: deleted without a budget check, whatever the counts and readiness.
        for phase in ["Pending", "Succeeded", "Failed"] {
            assert!(
                !unhealthy.decides(&pod(Some(phase), true, false)),
                "{phase}"
            );
        }
        assert!(
            !unhealthy.decides(&pod(Some("Running"), true, true)),
            "terminating"
        );
        // Ready: the budget decides, in any other phase too, and with AlwaysAllow.
        for phase in [Some("Running"), Some("Unknown"), None] {
            assert!(unhealthy.decides(&pod(phase, true, false)), "{phase:?}");
        }
        assert!(budget(Some(1), Some(2), true).decides(&pod(Some("Running"), true, false)));
        // Not Ready: let go while the budget has its healthy pods (desired above 0), or always
        // with AlwaysAllow; refused with the rest otherwise.
        let unready = pod(Some("Running"), false, false);
        assert!(!budget(Some(2), Some(2), false).decides(&unready));
        assert!(!budget(Some(1), Some(2), true).decides(&unready));
        for (current, desired) in [(Some(1), Some(2)), (Some(0), Some(0)), (None, None)] {
            assert!(
                budget(current, desired, false).decides(&unready),
                "{current:?} of {desired:?}"
            );
        }
    }

    #[test]
    fn a_budget_relieves_when_it_allows_or_newly_lets_its_unready_pods_go() {
        let budget = |allowed: i32, current: i32, desired: i32, always: bool| Budget {
            allowed,
            current: Some(current),
            desired: Some(desired),
            always_allow_unhealthy: always,
            ..Budget::default()
        };
        let relief = |hold: bool, retries: bool| {
            Some(Relief {
                cause: Budget::default().cause(),
                hold,
                retries,
            })
        };
        let unhealthy = budget(0, 2, 3, false);
        let healthy = budget(0, 3, 3, false);
        let allowing = budget(1, 4, 3, false);
        // Allows a disruption where it allowed none: the hold and the refusals' retries.
        assert_eq!(allowing.relief_after(Some(&healthy)), relief(true, true));
        assert_eq!(allowing.relief_after(Some(&unhealthy)), relief(true, true));
        assert_eq!(allowing.relief_after(None), relief(true, true));
        // Still allows: the hold only; a pod it refused meanwhile keeps its retry.
        assert_eq!(allowing.relief_after(Some(&allowing)), relief(true, false));
        // Regains its healthy count while allowing none: the retries, not the hold.
        assert_eq!(healthy.relief_after(Some(&unhealthy)), relief(false, true));
        assert_eq!(healthy.relief_after(None), relief(false, true));
        // AlwaysAllow set on a budget below its healthy count.
        assert_eq!(
            budget(0, 2, 3, true).relief_after(Some(&unhealthy)),
            relief(false, true)
        );
        // Stays healthy or unhealthy, allowing none: nothing it refuses is let go.
        assert_eq!(healthy.relief_after(Some(&healthy)), None);
        assert_eq!(healthy.relief_after(Some(&allowing)), None);
        assert_eq!(unhealthy.relief_after(Some(&unhealthy)), None);
        assert_eq!(unhealthy.relief_after(None), None);
        assert_eq!(unhealthy.relief_after(Some(&healthy)), None);
        // Desired 0 (an empty budget) is not "healthy" to the API server.
        assert_eq!(budget(0, 0, 0, false).relief_after(Some(&unhealthy)), None);
    }
}

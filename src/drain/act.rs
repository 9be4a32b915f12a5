//! The drain's I/O: the pod list (pages of slim pods), the DaemonSet lookups, the evictions, each
//! API call under its own deadline so that one call that hangs becomes that pod's blocker (or the
//! pass's error, naming the call) while the others proceed and the pass ends in time
//! (`docs/drain-contract.md §4`). Every decision is made by the pure functions of `pass.rs` and
//! `mod.rs`; this module only carries them out.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use super::pass::{self, DrainReport, EVICTION_BUDGET, PlannedEviction, Survey};
use super::pod::{DrainPod, PodPage};
use super::{
    Disposition, DrainOptions, EvictionOutcome, RetrySchedule, classify, classify_eviction,
    daemonset_owner, reason, result, selector_matches,
};
use crate::api::{PodBlocker, PodReference};

/// Evictions in flight at once within one pass (kubectl starts one goroutine per pod, unbounded).
pub(crate) const EVICTION_PARALLELISM: usize = 32;
/// Page size of the pod list. kubectl's `--chunk-size` is 500; a smaller page keeps the raw JSON
/// a pass holds at once small (about 1.1 MB for kubelet-size pods), at the cost of more requests.
pub(crate) const LIST_PAGE_SIZE: u32 = 100;
/// Pod-list pages being fetched at once across every pass of the process, so that many nodes
/// draining at once hold at most this many raw pages.
pub(crate) const LIST_PAGES_IN_FLIGHT: usize = 4;
/// Deadline of one read (a pod-list page, a DaemonSet GET, a PodDisruptionBudget list).
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(15);
/// Deadline of one eviction request. The API server gives an admission webhook up to 30 s
/// (`timeoutSeconds`, default 10 s); past this one the pod is reported as
/// [`reason::EVICTION_TIMEOUT`] and asked again after the retry interval.
pub(crate) const EVICTION_TIMEOUT: Duration = Duration::from_secs(10);

/// Failure of a whole pass (the pod list or a DaemonSet lookup failed or hung); single evictions
/// never fail a pass.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DrainError {
    /// Listing the pods of the node failed.
    #[error("failed to list pods on node {node}: {source}")]
    ListPods {
        /// The node.
        node: String,
        /// The API error.
        source: kube::Error,
    },
    /// Looking up a pod's DaemonSet failed with something other than NotFound (kubectl aborts
    /// the drain in this case too).
    #[error("failed to get DaemonSet {namespace}/{name}: {source}")]
    DaemonSet {
        /// Namespace of the DaemonSet.
        namespace: String,
        /// Name of the DaemonSet.
        name: String,
        /// The API error.
        source: kube::Error,
    },
    /// A read did not answer within [`READ_TIMEOUT`].
    #[error("{what} did not answer within {}s", READ_TIMEOUT.as_secs())]
    Timeout {
        /// The call, e.g. `the list of pods on node n1 (page 3)`.
        what: String,
    },
}

/// Runs drain passes. Cheap to clone; holds two clients: `client` for reads, `eviction_client`
/// (built with kube's default 429 retry disabled) for evictions, so that a PodDisruptionBudget
/// refusal comes back at once instead of being retried inside the client for minutes.
#[derive(Clone)]
pub(crate) struct Drainer {
    client: Client,
    eviction_client: Client,
    options: DrainOptions,
    /// The drain's memory: each node's retry schedule, read into every round.
    retries: Arc<Mutex<HashMap<String, RetrySchedule>>>,
    pages: Arc<tokio::sync::Semaphore>,
}

async fn deadline<T>(
    what: impl FnOnce() -> String,
    call: impl std::future::Future<Output = T>,
) -> Result<T, DrainError> {
    tokio::time::timeout(READ_TIMEOUT, call)
        .await
        .map_err(|_| DrainError::Timeout { what: what() })
}

impl Drainer {
    /// A drainer; `eviction_client` must have `default_retry = false`.
    pub(crate) fn new(client: Client, eviction_client: Client, options: DrainOptions) -> Self {
        Self {
            client,
            eviction_client,
            options,
            retries: Arc::default(),
            pages: Arc::new(tokio::sync::Semaphore::new(LIST_PAGES_IN_FLIGHT)),
        }
    }

    fn schedules(&self) -> std::sync::MutexGuard<'_, HashMap<String, RetrySchedule>> {
        self.retries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// All pods bound to `node`, as [`DrainPod`]s: a field-selected list in pages of
    /// [`LIST_PAGE_SIZE`] (never a cluster-wide cache), each page under [`READ_TIMEOUT`].
    async fn list_pods(&self, node: &str) -> Result<Vec<DrainPod>, DrainError> {
        let request = kube::core::Request::new("/api/v1/pods");
        let mut lp = ListParams::default()
            .fields(&format!("spec.nodeName={node}"))
            .limit(LIST_PAGE_SIZE);
        let mut pods = Vec::new();
        for page_no in 1.. {
            let err = |source| DrainError::ListPods {
                node: node.to_string(),
                source,
            };
            let req = request
                .list(&lp)
                .map_err(|e| err(kube::Error::BuildRequest(e)))?;
            let page: PodPage = {
                let _slot = self.pages.acquire().await;
                let what = || format!("the list of pods on node {node} (page {page_no})");
                deadline(what, self.client.request(req))
                    .await?
                    .map_err(err)?
            };
            pods.extend(page.items);
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => lp = lp.continue_token(&token),
                _ => break,
            }
        }
        Ok(pods)
    }

    /// Lists the node's pods and classifies each (`drain_started`: see [`classify`]), looking up
    /// each DaemonSet once.
    async fn classified(
        &self,
        node: &str,
        drain_started: Option<jiff::Timestamp>,
    ) -> Result<Vec<(DrainPod, Disposition)>, DrainError> {
        let pods = self.list_pods(node).await?;
        // UID of the DaemonSet found under each (namespace, name); `None` when not found.
        let mut daemonsets: HashMap<(String, String), Option<String>> = HashMap::new();
        let mut out = Vec::with_capacity(pods.len());
        for pod in pods {
            let exists = match daemonset_owner(&pod) {
                None => None,
                Some(owner) => {
                    let namespace = pod.metadata.namespace.clone();
                    let key = (namespace.clone(), owner.name.clone());
                    match daemonsets.get(&key) {
                        Some(uid) => uid.clone(),
                        None => {
                            let api: Api<DaemonSet> =
                                Api::namespaced(self.client.clone(), &namespace);
                            let what =
                                || format!("the GET of DaemonSet {namespace}/{}", owner.name);
                            let uid = deadline(what, api.get_metadata_opt(&owner.name))
                                .await?
                                .map_err(|source| DrainError::DaemonSet {
                                    namespace: namespace.clone(),
                                    name: owner.name.clone(),
                                    source,
                                })?
                                .and_then(|d| d.metadata.uid);
                            daemonsets.insert(key, uid.clone());
                            uid
                        }
                    }
                }
            };
            let disposition = classify(&pod, exists.as_deref(), &self.options, drain_started);
            out.push((pod, disposition));
        }
        Ok(out)
    }

    /// Counts the node's pods without evicting anything (status initialisation: `totalpods`,
    /// `evictionPods`, `pendingPods`), before the drain starts (so no pod is kept).
    ///
    /// # Errors
    /// [`DrainError`] when the pod list or a DaemonSet lookup fails or hangs.
    pub(crate) async fn survey(&self, node: &str) -> Result<Survey, DrainError> {
        Ok(pass::survey(&self.classified(node, None).await?))
    }

    /// One drain pass over `node`, whose drain started at `drain_started`: lists its pods, plans
    /// the pass ([`pass::plan_pass`]), sends the evictions (at most [`EVICTION_PARALLELISM`] at
    /// once, each with a UID precondition, no grace period override, and [`EVICTION_TIMEOUT`];
    /// none started after [`EVICTION_BUDGET`]), records refusals in the retry schedule and
    /// reports ([`pass::report`]). Never sleeps or waits for pods to go: a pod counts as gone
    /// once a later pass no longer lists it on the node.
    ///
    /// # Errors
    /// [`DrainError`] when the pod list or a DaemonSet lookup fails or hangs; eviction failures
    /// are reported per pod in [`DrainReport::pending`] and [`DrainReport::errors`].
    pub(crate) async fn pass(
        &self,
        node: &str,
        drain_started: Option<jiff::Timestamp>,
        now: jiff::Timestamp,
    ) -> Result<DrainReport, DrainError> {
        // Observe: the pods, and what earlier rounds remember of them.
        let started = Instant::now();
        let pods = self.classified(node, drain_started).await?;
        let schedule = self.schedules().get(node).cloned().unwrap_or_default();
        // Plan (pure), evict, settle (pure), remember.
        let plan = pass::plan_pass(pods, &schedule, now, started);
        let answers = self
            .evict_all(node, &plan.evict, started + EVICTION_BUDGET)
            .await;
        let labels = plan.labels.clone();
        let (mut report, schedule) = pass::settle(node, plan, answers, schedule, Instant::now());
        self.remember(node, schedule);
        for b in &report.newly_skipped {
            tracing::info!(pod = %format!("{}/{}", b.namespace, b.name), "not evicting a replacement pod that tolerates the maintenance taints");
        }
        self.name_overlapping_budgets(&mut report.pending, &labels)
            .await;
        Ok(report)
    }

    /// Sends the planned evictions, at most [`EVICTION_PARALLELISM`] at once; each answer paired
    /// with its eviction (`None`: not sent, `budget_end` had passed).
    async fn evict_all(
        &self,
        node: &str,
        evict: &[PlannedEviction],
        budget_end: Instant,
    ) -> Vec<(PlannedEviction, Option<EvictionOutcome>)> {
        stream::iter(evict.iter().cloned())
            .map(|e| async move {
                let outcome = self
                    .evict_once(node, &e.pod, e.uid.as_deref(), budget_end)
                    .await;
                (e, outcome)
            })
            .buffer_unordered(EVICTION_PARALLELISM)
            .collect()
            .await
    }

    /// Replaces the retry schedule of `node` with what the round settled.
    fn remember(&self, node: &str, schedule: RetrySchedule) {
        let mut schedules = self.schedules();
        if schedule.is_empty() {
            schedules.remove(node);
        } else {
            schedules.insert(node.to_owned(), schedule);
        }
    }

    /// One eviction with its deadline, classified; `None` (not sent) once `budget_end` has
    /// passed.
    async fn evict_once(
        &self,
        node: &str,
        pod: &PodReference,
        uid: Option<&str>,
        budget_end: Instant,
    ) -> Option<EvictionOutcome> {
        if Instant::now() >= budget_end {
            return None;
        }
        let Ok(answer) = tokio::time::timeout(EVICTION_TIMEOUT, self.evict(pod, uid)).await else {
            tracing::warn!(pod = %format!("{}/{}", pod.namespace, pod.name), timeout = ?EVICTION_TIMEOUT, "eviction request did not answer");
            return Some(super::timed_out(pod, EVICTION_TIMEOUT));
        };
        if answer.is_ok() {
            tracing::info!(
                "pod: {}:{} Evicted from node: {node}",
                pod.namespace,
                pod.name
            );
        }
        let outcome = classify_eviction(pod, answer.as_ref().map(|_| ()));
        if outcome.result != result::EVICTED && outcome.result != result::GONE {
            tracing::info!(error = %outcome.error.as_deref().unwrap_or_default(), "eviction refused");
        }
        Some(outcome)
    }

    /// POST `pods/<name>/eviction` (policy/v1) with a UID precondition. Written by hand because
    /// kube's `Api::evict` sends its delete options under a `delete_options` key the API server
    /// does not know, so a precondition would be dropped silently.
    async fn evict(&self, pod: &PodReference, uid: Option<&str>) -> Result<(), kube::Error> {
        let mut body = serde_json::json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
        });
        if let Some(uid) = uid {
            body["deleteOptions"] = serde_json::json!({"preconditions": {"uid": uid}});
        }
        let url = format!(
            "/api/v1/namespaces/{}/pods/{}/eviction",
            pod.namespace, pod.name
        );
        let req = http::Request::post(url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(&body).map_err(kube::Error::SerdeError)?)
            .map_err(kube::Error::HttpError)?;
        self.eviction_client.request_text(req).await.map(|_| ())
    }

    /// For pods refused because several budgets select them, names those budgets (the API
    /// server's 500 names none). `labels` are the pods' labels as this pass listed them (not
    /// re-read by name, which could find a same-named replacement). Best effort: a failed or
    /// hung PDB list leaves the message as it was.
    async fn name_overlapping_budgets(
        &self,
        pending: &mut [PodBlocker],
        labels: &BTreeMap<PodReference, BTreeMap<String, String>>,
    ) {
        let mut by_namespace: HashMap<String, Vec<PodDisruptionBudget>> = HashMap::new();
        for b in pending
            .iter_mut()
            .filter(|b| b.reason == reason::MULTIPLE_PDBS)
        {
            if !by_namespace.contains_key(&b.namespace) {
                let api: Api<PodDisruptionBudget> =
                    Api::namespaced(self.client.clone(), &b.namespace);
                let lp = ListParams::default();
                let Ok(Ok(list)) = tokio::time::timeout(READ_TIMEOUT, api.list(&lp)).await else {
                    continue;
                };
                by_namespace.insert(b.namespace.clone(), list.items);
            }
            let key = PodReference {
                namespace: b.namespace.clone(),
                name: b.name.clone(),
            };
            let Some(labels) = labels.get(&key) else {
                continue;
            };
            let names: Vec<String> = by_namespace[&b.namespace]
                .iter()
                .filter(|pdb| {
                    pdb.spec
                        .as_ref()
                        .and_then(|s| s.selector.as_ref())
                        .is_some_and(|s| selector_matches(s, labels))
                })
                .map(|pdb| pdb.name_any())
                .collect();
            if !names.is_empty() {
                let msg = b.message.take().unwrap_or_default();
                b.message = Some(format!(
                    "{msg} (budgets selecting the pod: {})",
                    names.join(", ")
                ));
                b.pod_disruption_budget = Some(names.join(","));
            }
        }
    }
}

//! The drain's I/O: the pod list (pages of slim pods, with the API server's time), the DaemonSet
//! lookups, and the evictions. Each eviction is sent on its own, after the round has decided and
//! recorded it, right after a check that the maintenance still stands; it waits for the API
//! server's answer however long its admission webhooks take, and the answer, recorded in the
//! node's memory as it arrives, wakes the maintenance's next pass (`docs/drain-contract.md §4`).
//! Every decision is made by the pure functions of `round.rs`, `decide.rs`, `answer.rs` and
//! `memory.rs` (which evictions are sent, which answers wake a pass); this module only
//! carries them out.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, ListParams, Preconditions};
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::answer::{EvictionOutcome, classify_eviction};
use super::budget::BudgetWatch;
use super::budget::SharedCause;
use super::consts::{READ_TIMEOUT, reason, result};
use super::deadline::PlannedDeletion;
use super::decide::{Arrival, daemonset_owner, decide, selector_matches};
use super::disposition::{Disposition, DrainOptions};
use super::gate::{Halt, Standing};
use super::gone::GoneWatches;
use super::memory::{Awaited, DrainMemory, RetrySchedule, Settled};
use super::migration::MigrationWatch;
use super::pod::{DrainPod, PodPage};
use super::preview::{self, Ask};
use super::report::{self, DrainReport, Survey};
use super::round::{self, Observed, PlannedEviction, Round};
use super::rules;
use crate::api::PodReference;
use crate::metrics::Metrics;
use crate::policy::DrainPolicy;

/// Evictions in flight at once in the whole process (kubectl and upstream start one goroutine per
/// pod, unbounded). An eviction that waits on a slow admission webhook holds its slot until the
/// API server answers; namespaces take turns for the slots (`round::fair_order`), so one
/// namespace's hung evictions do not hold back the others' while slots are left.
pub(crate) const EVICTION_PARALLELISM: usize = 256;
/// Page size of the pod list. kubectl's `--chunk-size` is 500; a smaller page keeps the raw JSON
/// a pass holds at once small (about 1.1 MB for kubelet-size pods), at the cost of more requests.
pub(crate) const LIST_PAGE_SIZE: u32 = 100;
/// Pod-list pages being fetched at once across every pass of the process, so that many nodes
/// draining at once hold at most this many raw pages.
pub(crate) const LIST_PAGES_IN_FLIGHT: usize = 4;

/// Dry-run evictions of the stage Preflight in flight at once: enough to ask a node of a few
/// hundred pods in a handful of round trips, few enough that a preview never loads the API
/// server as a drain (`EVICTION_PARALLELISM`) does.
const PREFLIGHT_IN_FLIGHT: usize = 16;

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
    /// Reading the labels of a pod's namespace (a drain rule's namespace selector) failed.
    #[error("failed to get namespace {name} for the drain rules: {source}")]
    Namespace {
        /// The namespace.
        name: String,
        /// The API error.
        source: kube::Error,
    },
    /// Reading a pod's workload (`surge`: its ReplicaSet or Deployment) failed.
    #[error("failed to get {what}: {source}")]
    Workload {
        /// What was read: its kind, namespace and name (`ReplicaSet ns/web-5d8f`).
        what: String,
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
    /// The drain's memory, kept with the rest of what the controller remembers
    /// (`crate::controller::memory`): each node's retry schedule, read into every round and
    /// written by the answers as they arrive.
    retries: DrainMemory,
    /// The PodDisruptionBudgets, read into every round.
    budgets: BudgetWatch,
    /// KubeVirt's migrations, read into every round (inert without KubeVirt).
    migrations: MigrationWatch,
    /// The Evictions' active responders (`super::responders`; inert where not served).
    responders: super::responders::ResponderWatch,
    pages: Arc<tokio::sync::Semaphore>,
    slots: Arc<tokio::sync::Semaphore>,
    /// One eviction in flight per budget ([`super::lanes`]).
    lanes: super::lanes::BudgetLanes,
    metrics: Arc<Metrics>,
    /// Cancelled when the controller stops: no eviction is sent after that.
    stopped: CancellationToken,
    /// The evictions sent on their own, awaited by [`Drainer::stop`].
    tasks: TaskTracker,
    /// The watches of pods going on the nodes whose drain waits for them.
    gone: GoneWatches,
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
    /// A drainer; `eviction_client` must have `default_retry = false`. Answers are counted in
    /// `metrics`; `retries` is the drain's part of the controller's memory, `budgets` the
    /// watch of PodDisruptionBudgets, `migrations` that of KubeVirt's migrations, `responders`
    /// that of KEP-4563's Evictions.
    pub(crate) fn new(
        client: Client,
        eviction_client: Client,
        options: DrainOptions,
        metrics: Arc<Metrics>,
        retries: DrainMemory,
        (budgets, migrations, responders): (
            BudgetWatch,
            MigrationWatch,
            super::responders::ResponderWatch,
        ),
    ) -> Self {
        Self {
            gone: GoneWatches::new(client.clone()),
            client,
            eviction_client,
            options,
            retries,
            budgets,
            migrations,
            responders,
            pages: Arc::new(tokio::sync::Semaphore::new(LIST_PAGES_IN_FLIGHT)),
            slots: Arc::new(tokio::sync::Semaphore::new(EVICTION_PARALLELISM)),
            lanes: Default::default(),
            metrics,
            stopped: CancellationToken::new(),
            tasks: TaskTracker::new(),
        }
    }

    /// A guard that stops sending evictions when dropped: the controller's run future holds it,
    /// so a controller dropped at the end of a leadership term sends none after it.
    /// KubeVirt's evacuations off `node` (`super::cancel::observe`); none, without a request,
    /// where KubeVirt's migrations are not watched (no KubeVirt, or no grant to read it).
    ///
    /// # Errors
    /// The list of VMIs failed.
    pub(crate) async fn evacuations(
        &self,
        node: &str,
    ) -> Result<super::cancel::Evacuations, kube::Error> {
        if !self.migrations.watched() {
            return Ok(super::cancel::Evacuations::default());
        }
        super::cancel::observe(&self.client, node).await
    }

    /// Sends `evacuate/cancel` for `vmi` (`super::cancel::cancel`).
    ///
    /// # Errors
    /// The API server's answer, or a timeout.
    pub(crate) async fn cancel_evacuation(
        &self,
        vmi: &super::cancel::VmiRef,
    ) -> Result<(), kube::Error> {
        super::cancel::cancel(&self.client, vmi).await
    }

    pub(crate) fn stop_on_drop(&self) -> tokio_util::sync::DropGuard {
        self.stopped.clone().drop_guard()
    }

    /// Sends no eviction from now on, and returns once every eviction already sent has been
    /// answered (the controller stops: a leader's term ends with its last request answered).
    pub(crate) async fn stop(&self) {
        self.stopped.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }

    fn schedules(&self) -> std::sync::MutexGuard<'_, HashMap<String, RetrySchedule>> {
        self.retries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// All pods bound to `node`, as [`DrainPod`]s, and the API server's time of the first page
    /// (`None` when its answer had no `Date`): a field-selected list in pages of
    /// [`LIST_PAGE_SIZE`] (never a cluster-wide cache), each page under [`READ_TIMEOUT`].
    async fn list_pods(
        &self,
        node: &str,
    ) -> Result<(Vec<DrainPod>, Option<jiff::Timestamp>), DrainError> {
        let request = kube::core::Request::new("/api/v1/pods");
        let mut lp = ListParams::default()
            .fields(&format!("spec.nodeName={node}"))
            .limit(LIST_PAGE_SIZE);
        let mut pods = Vec::new();
        let mut listed_at = None;
        for page_no in 1.. {
            let err = |source| DrainError::ListPods {
                node: node.to_string(),
                source,
            };
            let req = request
                .list(&lp)
                .map_err(|e| err(kube::Error::BuildRequest(e)))?;
            let (page, date): (PodPage, _) = {
                let _slot = self.pages.acquire().await;
                let what = || format!("the list of pods on node {node} (page {page_no})");
                deadline(what, crate::server_time::request_dated(&self.client, req))
                    .await?
                    .map_err(err)?
            };
            listed_at = listed_at.or(date);
            pods.extend(page.items);
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => lp = lp.continue_token(&token),
                _ => break,
            }
        }
        Ok((pods, listed_at))
    }

    /// Decides each pod ([`decide`], with `arrival`, `policy`'s `daemonSets` knob and the first
    /// of its drain rules that selects it), looking up each DaemonSet once, and each pod
    /// namespace's labels once when a rule has a namespace selector.
    async fn classified(
        &self,
        pods: Vec<DrainPod>,
        arrival: &Arrival,
        policy: &DrainPolicy,
    ) -> Result<Vec<(DrainPod, Disposition)>, DrainError> {
        let drain_rules = &policy.drain_rules[..];
        let options = self.options.with_daemon_sets(policy.daemon_sets);
        // UID of the DaemonSet found under each (namespace, name); `None` when not found.
        let mut daemonsets: HashMap<(String, String), Option<String>> = HashMap::new();
        let mut namespaces: HashMap<String, BTreeMap<String, String>> = HashMap::new();
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
            let rule = if drain_rules.is_empty() {
                None
            } else {
                let labels = if rules::need_namespaces(drain_rules) {
                    Some(
                        self.namespace_labels(&pod.metadata.namespace, &mut namespaces)
                            .await?,
                    )
                } else {
                    None
                };
                rules::matching(drain_rules, &pod, labels)
            };
            let disposition = decide(&pod, exists.as_deref(), &options, arrival, rule);
            out.push((pod, disposition));
        }
        Ok(out)
    }

    /// The labels of namespace `name`, read once per round into `seen`.
    async fn namespace_labels<'a>(
        &self,
        name: &str,
        seen: &'a mut HashMap<String, BTreeMap<String, String>>,
    ) -> Result<&'a BTreeMap<String, String>, DrainError> {
        if !seen.contains_key(name) {
            let api: Api<Namespace> = Api::all(self.client.clone());
            let what = || format!("the GET of namespace {name}");
            let labels = deadline(what, api.get_metadata_opt(name))
                .await?
                .map_err(|source| DrainError::Namespace {
                    name: name.to_string(),
                    source,
                })?
                .and_then(|n| n.metadata.labels)
                .unwrap_or_default();
            seen.insert(name.to_string(), labels);
        }
        Ok(&seen[name])
    }

    /// Counts the node's pods without evicting anything (status initialisation: `totalpods`,
    /// `evictionPods`, `pendingPods`), before the drain starts (so no pod is kept).
    ///
    /// # Errors
    /// [`DrainError`] when the pod list or a DaemonSet lookup fails or hangs.
    pub(crate) async fn survey(
        &self,
        node: &str,
        policy: &DrainPolicy,
    ) -> Result<Survey, DrainError> {
        let (pods, _) = self.list_pods(node).await?;
        Ok(report::survey(
            &self.classified(pods, &Arrival::default(), policy).await?,
        ))
    }

    /// One drain round over `node`, whose drain started at `started` (the API server's clock):
    /// observes its pods and the node's memory, decides ([`round::round`]),
    /// records the decision, then sends the evictions it decided on their own (at most
    /// [`EVICTION_PARALLELISM`] in flight in the process, each with a UID precondition and no
    /// grace period override, each only while `standing` says the maintenance still stands) and
    /// returns without waiting for their answers: each answer is recorded as it arrives and
    /// wakes the next pass. A pod counts as gone once a later round no longer lists it.
    ///
    /// # Errors
    /// [`DrainError`] when the pod list or a DaemonSet lookup fails or hangs; eviction failures
    /// are reported per pod by the round after their answer.
    pub(crate) async fn pass(
        &self,
        node: &str,
        started: Option<jiff::Timestamp>,
        policy: &DrainPolicy,
        standing: &Standing,
    ) -> Result<DrainReport, DrainError> {
        // Observe: the pods with the API server's time, the budgets, and what earlier rounds
        // remember.
        let at = Instant::now();
        let (pods, listed_at) = self.list_pods(node).await?;
        let budgets = self.budgets.read();
        let now = listed_at.unwrap_or_else(jiff::Timestamp::now);
        let schedule = self.schedules().get(node).cloned().unwrap_or_default();
        let arrival = Arrival {
            started,
            first_listing: schedule.first_listing(started).cloned(),
        };
        let pods = self.classified(pods, &arrival, policy).await?;
        let surge = match policy.surge {
            crate::knobs::Surge::Never => Default::default(),
            _ => {
                let drain = standing
                    .uid
                    .as_deref()
                    .map(|u| super::surge::record(u, started));
                super::surge_io::observe(&self.client, &pods, drain.as_deref()).await?
            }
        };
        let observed = Observed {
            surge,
            responders: self.responders.read().on(pods.iter().map(|(p, _)| p)),
            pods,
            started,
            listed_at: now,
            at,
            migrations: self.migrations.read(),
        };
        // Decide (pure).
        let Round {
            evict,
            delete,
            mut report,
            memory,
            restart,
        } = round::round(observed, &schedule, &budgets, policy, Instant::now());
        for r in restart {
            super::surge_io::send(&self.client, &r, standing, &self.stopped, &mut report).await;
        }
        // Record, then send.
        let evict = self.remember(node, memory, evict);
        for b in &report.newly_skipped {
            tracing::info!(pod = %format!("{}/{}", b.namespace, b.name), "not evicting a replacement pod that tolerates the maintenance taints");
        }
        match report.awaiting_deletion() {
            Some(pods) => self.gone.await_pods(node, pods, standing, &self.stopped),
            None => self.gone.end(node),
        }
        for e in evict {
            self.send_on_its_own(node, e, standing.clone());
        }
        for d in delete {
            self.delete_on_its_own(node, d, standing.clone());
        }
        Ok(report)
    }

    /// Sends one forced DELETE on its own (`onTimeout: ForceDelete`), with the pod's UID as
    /// precondition and the planned grace period, while the maintenance still stands; a
    /// failure is recorded so the pod is held and deleted again once the retry is due.
    fn delete_on_its_own(&self, node: &str, d: PlannedDeletion, standing: Standing) {
        let this = self.clone();
        let node = node.to_owned();
        self.tasks.spawn(async move {
            if let Some(halt) = standing.halted(&this.stopped) {
                tracing::info!(pod = %format!("{}/{}", d.pod.namespace, d.pod.name), %halt, "forced deletion not sent");
                if let Some(schedule) = this.schedules().get_mut(&node) {
                    schedule.force_unsent(d.uid.as_deref().unwrap_or_default());
                }
                return;
            }
            let api: Api<Pod> = Api::namespaced(this.eviction_client.clone(), &d.pod.namespace);
            let params = DeleteParams {
                grace_period_seconds: u32::try_from(d.grace_seconds).ok(),
                preconditions: d.uid.clone().map(|uid| Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            let pod = format!("{}/{}", d.pod.namespace, d.pod.name);
            let error = match api.delete(&d.pod.name, &params).await {
                Ok(_) => {
                    tracing::warn!(%pod, grace_seconds = d.grace_seconds, "pod deleted after the drain deadline (onTimeout ForceDelete)");
                    None
                }
                // Gone, or a successor under its name (the UID precondition).
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => None,
                Err(e) => {
                    tracing::warn!(%pod, error = %e, "the forced deletion after the drain deadline failed");
                    Some(e.to_string())
                }
            };
            let uid = d.uid.unwrap_or_default();
            let mut schedules = this.schedules();
            if let Some(schedule) = schedules.get_mut(&node) {
                schedule.force_answered(&uid, error.as_deref(), Instant::now());
            }
            drop(schedules);
            (standing.wake)();
        });
    }

    /// Applies what the round settled to the node's memory and marks its evictions sent; returns
    /// those still to send (an eviction already in flight or held by an answer that arrived
    /// since the round read the memory is not sent twice).
    fn remember(
        &self,
        node: &str,
        settled: Settled,
        evict: Vec<PlannedEviction>,
    ) -> Vec<PlannedEviction> {
        let mut schedules = self.schedules();
        let schedule = schedules.entry(node.to_owned()).or_default();
        schedule.apply(settled);
        let uid = |e: &PlannedEviction| e.uid.clone().unwrap_or_default();
        let send = schedule.send(
            evict.iter().map(|e| e.uid.as_deref().unwrap_or_default()),
            Instant::now(),
        );
        let evict: Vec<PlannedEviction> = evict
            .into_iter()
            .filter(|e| send.contains(&uid(e)))
            .collect();
        if schedule.is_empty() {
            schedules.remove(node);
        }
        evict
    }

    /// Sends one eviction on its own: waits for a slot, checks that the maintenance still
    /// stands and the controller runs, sends, records the answer and wakes the maintenance.
    fn send_on_its_own(&self, node: &str, e: PlannedEviction, standing: Standing) {
        let this = self.clone();
        let node = node.to_owned();
        self.tasks.spawn(async move {
            let uid = e.uid.clone().unwrap_or_default();
            // The budget's lane first, then a slot: a pod waiting for its budget's previous
            // eviction holds no slot meanwhile (`lanes`).
            let lane = tokio::select! {
                lane = this.lanes.enter(e.cause.as_ref()) => Some(lane),
                () = this.stopped.cancelled() => None,
            };
            let slot = tokio::select! {
                slot = this.slots.clone().acquire_owned() => slot.ok(),
                () = this.stopped.cancelled() => None,
            };
            let halt = match (&lane, &slot) {
                (Some(_), Some(_)) => standing.halted(&this.stopped),
                _ => Some(Halt::Stopped),
            };
            if let Some(halt) = halt {
                tracing::debug!(pod = %format!("{}/{}", e.pod.namespace, e.pod.name), %halt, "eviction not sent");
                let _ = this.answered(&node, &uid, None, None);
                return;
            }
            // Boxed: a task waiting for its slot then holds a pointer, not the request's whole
            // state machine (thousands of evictions may wait at once on a big node).
            let outcome = Box::pin(this.evict_once(&node, &e)).await;
            drop((slot, lane));
            if this.answered(&node, &uid, Some(&outcome), Some((&e.awaits, &e.cause))) {
                (standing.wake)();
            }
        });
    }

    /// Records the answer to the eviction of `uid` on `node` (`None`: not sent), with what the
    /// round planned for it (the replacement it awaits and the budget it spends once accepted).
    /// Returns whether it wakes the node's next pass ([`RetrySchedule::answered`]; always when
    /// the node's memory is gone).
    fn answered(
        &self,
        node: &str,
        uid: &str,
        outcome: Option<&EvictionOutcome>,
        planned: Option<(&Option<Awaited>, &Option<SharedCause>)>,
    ) -> bool {
        let mut schedules = self.schedules();
        let Some(schedule) = schedules.get_mut(node) else {
            return true;
        };
        let wake = schedule.answered(uid, outcome, planned, Instant::now());
        if schedule.is_empty() {
            schedules.remove(node);
        }
        wake
    }

    /// One eviction, classified and counted; a refusal by several budgets names them.
    async fn evict_once(&self, node: &str, e: &PlannedEviction) -> EvictionOutcome {
        let pod = &e.pod;
        let answer = self.evict(pod, e.uid.as_deref()).await;
        if answer.is_ok() {
            tracing::info!(
                "pod: {}:{} Evicted from node: {node}",
                pod.namespace,
                pod.name
            );
        }
        let mut outcome = classify_eviction(pod, e.in_progress, answer.as_ref().map(|_| ()));
        if outcome.result != result::EVICTED && outcome.result != result::GONE {
            let b = outcome.blocker.as_ref();
            let answer = b
                .and_then(|b| b.message.as_deref())
                .or(outcome.api_error.as_deref());
            tracing::info!(pod = %format!("{}/{}", pod.namespace, pod.name), reason = b.map_or("", |b| &b.reason), answer, "eviction refused");
        }
        if let Some(b) = outcome.blocker.as_mut()
            && b.reason == reason::MULTIPLE_PDBS
        {
            self.name_overlapping_budgets(b, &e.labels).await;
        }
        self.metrics.eviction(&outcome.result);
        outcome
    }

    /// POST `pods/<name>/eviction` (policy/v1) with a UID precondition. Written by hand because
    /// kube's `Api::evict` sends its delete options under a `delete_options` key the API server
    /// does not know, so a precondition would be dropped silently. No deadline of ours: the API
    /// server answers within its own request timeout, its admission webhooks' included.
    async fn evict(&self, pod: &PodReference, uid: Option<&str>) -> Result<(), kube::Error> {
        self.eviction(pod, uid, false).await
    }

    /// What would keep `node`'s pods on it (the stage Preflight): each pod the drain would
    /// evict (under `policy`'s drain rules and `daemonSets`) asked for with a server-side dry run
    /// (`dryRun=All`: admission and the budgets are evaluated, nothing is evicted and no
    /// disruption is consumed), the refusals as blockers, in listing order. A budget that allows
    /// no disruption is asked through its first pod and its other pods take that refusal, as in
    /// the drain ([`preview`]). Not counted as evictions.
    ///
    /// # Errors
    /// [`DrainError`] when the pod list or a DaemonSet lookup fails or hangs.
    pub(crate) async fn preflight(
        &self,
        node: &str,
        policy: &DrainPolicy,
    ) -> Result<Vec<crate::api::PodBlocker>, DrainError> {
        let (pods, _) = self.list_pods(node).await?;
        let classified = self.classified(pods, &Arrival::default(), policy).await?;
        let drained: Vec<&DrainPod> = classified
            .iter()
            .filter(|(_, d)| d.drains())
            .map(|(pod, _)| pod)
            .collect();
        let asks = preview::asks(&drained, &self.budgets.read());
        let mut answers: Vec<Option<crate::api::PodBlocker>> = vec![None; drained.len()];
        let asked: Vec<usize> = (0..drained.len())
            .filter(|&i| asks[i] == Ask::Dry)
            .collect();
        self.dry_runs(&drained, &asked, &mut answers).await;
        // The probe's answer stands for its budget's other pods only when it is the budget's
        // refusal: the budget may allow one by now, or something else refused the probe.
        let mut again = Vec::new();
        for (i, ask) in asks.iter().enumerate() {
            if let Ask::Follow { probe, budget } = ask {
                answers[i] = preview::follow(answers[*probe].as_ref(), budget, drained[i]);
                if answers[i].is_none() {
                    again.push(i);
                }
            }
        }
        self.dry_runs(&drained, &again, &mut answers).await;
        Ok(answers.into_iter().flatten().collect())
    }

    /// Dry-run evictions of `pods[i]` for each `i` of `which`, side by side (they consume
    /// nothing; a node of 200 pods took 200 round trips one after the other), each answer into
    /// `answers[i]`.
    async fn dry_runs(
        &self,
        pods: &[&DrainPod],
        which: &[usize],
        answers: &mut [Option<crate::api::PodBlocker>],
    ) {
        // The futures are made in a loop, not by a closure inside the stream: such a closure
        // is not general enough over lifetimes for the controller's `Send` bound.
        let mut asks = Vec::with_capacity(which.len());
        for &i in which {
            asks.push(self.dry_run_blocker(pods[i]));
        }
        let got: Vec<_> = futures::stream::iter(asks)
            .buffered(PREFLIGHT_IN_FLIGHT)
            .collect()
            .await;
        for (&i, answer) in which.iter().zip(got) {
            answers[i] = answer;
        }
    }

    /// The blocker a dry-run eviction of `pod` answers with; `None` when it would go.
    async fn dry_run_blocker(&self, pod: &DrainPod) -> Option<crate::api::PodBlocker> {
        let reference = pod.reference();
        let refusal = self
            .eviction(&reference, pod.metadata.uid.as_deref(), true)
            .await
            .err()?;
        classify_eviction(
            &reference,
            pod.metadata.marks.eviction_in_progress,
            Err(&refusal),
        )
        .blocker
    }

    async fn eviction(
        &self,
        pod: &PodReference,
        uid: Option<&str>,
        dry_run: bool,
    ) -> Result<(), kube::Error> {
        let mut body = serde_json::json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
        });
        if let Some(uid) = uid {
            body["deleteOptions"] = serde_json::json!({"preconditions": {"uid": uid}});
        }
        let url = format!(
            "/api/v1/namespaces/{}/pods/{}/eviction{}",
            pod.namespace,
            pod.name,
            if dry_run { "?dryRun=All" } else { "" }
        );
        let req = http::Request::post(url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(&body).map_err(kube::Error::SerdeError)?)
            .map_err(kube::Error::HttpError)?;
        self.eviction_client.request_text(req).await.map(|_| ())
    }

    /// For a pod refused because several budgets select it, names those budgets (the API
    /// server's 500 names none). `labels` are the pod's labels as the round listed them (not
    /// re-read by name, which could find a same-named replacement). Best effort: a failed or
    /// hung PDB list leaves the message as it was.
    async fn name_overlapping_budgets(
        &self,
        b: &mut crate::api::PodBlocker,
        labels: &std::collections::BTreeMap<String, String>,
    ) {
        let api: Api<PodDisruptionBudget> = Api::namespaced(self.client.clone(), &b.namespace);
        let Ok(Ok(list)) =
            tokio::time::timeout(READ_TIMEOUT, api.list(&ListParams::default())).await
        else {
            return;
        };
        let names: Vec<String> = list
            .items
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

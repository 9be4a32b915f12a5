//! One drain round ([`Drainer::pass`]): observe (the pod list, in pages of slim pods with the
//! API server's time; the DaemonSet and namespace lookups; each pod's decision, `decide.rs`;
//! the workloads `surge` reads), decide (`round.rs`, pure), then act: the restarts `surge`
//! decided, the round's memory, deletions and evictions (`send.rs`), then the watch of the pods
//! the round waits for (`gone.rs`). Also the stage Preflight's dry runs and the survey
//! that counts the pods. This module decides nothing.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::ListParams;
use kube::{Api, Client};

use super::answer::classify_eviction;
use super::budget::BudgetWatch;
use super::consts::READ_TIMEOUT;
use super::decide::{Arrival, decide};
use super::disposition::{Disposition, DrainOptions};
use super::error::DrainError;
use super::gate::Standing;
use super::gone::GoneWatches;
use super::memory::DrainMemory;
use super::migration::MigrationWatch;
use super::pod::{DrainPod, PodPage};
use super::preview::{self, Ask};
use super::report::{self, DrainReport, Survey};
use super::round::{self, Observed, Round};
use super::rules;
use super::send::{SendClients, Sender};
use crate::metrics::Metrics;
use crate::policy::DrainPolicy;

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

/// Runs drain passes. Cheap to clone; `client` reads, and the [`Sender`]'s clients
/// ([`SendClients`]) send the evictions and deletions.
#[derive(Clone)]
pub(crate) struct Drainer {
    client: Client,
    options: DrainOptions,
    /// The drain's memory, kept with the rest of what the controller remembers
    /// (`crate::controller::memory`): each node's retry schedule, read into every round and
    /// written by the [`Sender`] as answers arrive.
    retries: DrainMemory,
    /// The PodDisruptionBudgets, read into every round.
    budgets: BudgetWatch,
    /// KubeVirt's migrations, read into every round (inert without KubeVirt).
    migrations: MigrationWatch,
    /// The Evictions' active responders (`super::responders`; inert where not served).
    responders: super::responders::ResponderWatch,
    pages: Arc<tokio::sync::Semaphore>,
    /// Carries out what each round decided.
    sender: Sender,
    /// The watches of pods going on the nodes whose drain waits for them.
    gone: GoneWatches,
}

/// `call` bounded by [`READ_TIMEOUT`]: [`DrainError::Timeout`] naming `what()` when it hangs.
async fn bounded<T>(
    what: impl FnOnce() -> String,
    call: impl std::future::Future<Output = T>,
) -> Result<T, DrainError> {
    tokio::time::timeout(READ_TIMEOUT, call)
        .await
        .map_err(|_| DrainError::Timeout { what: what() })
}

/// The GET of `what` (`DaemonSet ns/name`), bounded as [`bounded`] says; its error as
/// [`DrainError::Get`].
async fn get<T>(
    what: String,
    call: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, DrainError> {
    bounded(|| format!("the GET of {what}"), call)
        .await?
        .map_err(|source| DrainError::Get { what, source })
}

impl Drainer {
    /// A drainer sending over `send` ([`SendClients`]). Answers are counted in
    /// `metrics`; `retries` is the drain's part of the controller's memory, `budgets` the
    /// watch of PodDisruptionBudgets, `migrations` that of KubeVirt's migrations, `responders`
    /// that of KEP-4563's Evictions.
    pub(crate) fn new(
        client: Client,
        send: SendClients,
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
            sender: Sender::new(send, retries.clone(), metrics),
            client,
            options,
            retries,
            budgets,
            migrations,
            responders,
            pages: Arc::new(tokio::sync::Semaphore::new(LIST_PAGES_IN_FLIGHT)),
        }
    }

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

    /// A guard that stops sending when dropped ([`Sender::stop_on_drop`]).
    pub(crate) fn stop_on_drop(&self) -> tokio_util::sync::DropGuard {
        self.sender.stop_on_drop()
    }

    /// Sends nothing from now on, and returns once everything already sent has been answered
    /// ([`Sender::stop`]).
    pub(crate) async fn stop(&self) {
        self.sender.stop().await;
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
                bounded(what, crate::server_time::request_dated(&self.client, req))
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
            let exists = match pod.daemon_set_owner() {
                None => None,
                Some(owner) => {
                    let namespace = pod.metadata.namespace.clone();
                    let key = (namespace.clone(), owner.name.clone());
                    match daemonsets.get(&key) {
                        Some(uid) => uid.clone(),
                        None => {
                            let api: Api<DaemonSet> =
                                Api::namespaced(self.client.clone(), &namespace);
                            let what = format!("DaemonSet {namespace}/{}", owner.name);
                            let uid = get(what, api.get_metadata_opt(&owner.name))
                                .await?
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
            let labels = get(format!("namespace {name}"), api.get_metadata_opt(name))
                .await?
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
    /// [`DrainError`] when the pod list or a GET the round needs fails or hangs.
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
    /// records the decision, then sends the evictions it decided on their own ([`Sender`]: at most
    /// [`super::send::EVICTION_PARALLELISM`] in flight in the process, each with a UID precondition and no
    /// grace period override, each only while `standing` says the maintenance still stands) and
    /// returns without waiting for their answers: each answer is recorded as it arrives and
    /// wakes the next pass. A pod counts as gone once a later round no longer lists it.
    ///
    /// # Errors
    /// [`DrainError`] when the pod list or a GET the round needs fails or hangs; eviction failures
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
        let schedule = (self.retries.lock().unwrap_or_else(|e| e.into_inner()))
            .get(node)
            .cloned()
            .unwrap_or_default();
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
        // Act: the restarts `surge` decided, the round's memory, deletions and evictions, then
        // the watch of the pods the round waits for.
        let stopped = self.sender.stopped();
        for r in restart {
            super::surge_io::send(&self.client, &r, standing, stopped, &mut report).await;
        }
        for b in &report.newly_skipped {
            tracing::info!(pod = %format!("{}/{}", b.namespace, b.name), "not evicting a replacement pod that tolerates the maintenance taints");
        }
        self.sender.send(node, memory, evict, delete, standing);
        match report.awaiting_deletion() {
            Some(pods) => self.gone.await_pods(node, pods, standing, stopped),
            None => self.gone.end(node),
        }
        Ok(report)
    }

    /// What would keep `node`'s pods on it (the stage Preflight): each pod the drain would
    /// evict (under `policy`'s drain rules and `daemonSets`) asked for with a server-side dry run
    /// (`dryRun=All`: admission and the budgets are evaluated, nothing is evicted and no
    /// disruption is consumed), the refusals as blockers, in listing order. A budget that allows
    /// no disruption is asked through its first pod and its other pods take that refusal, as in
    /// the drain ([`preview`]). Not counted as evictions.
    ///
    /// # Errors
    /// [`DrainError`] when the pod list or a GET the round needs fails or hangs.
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
            .sender
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
}

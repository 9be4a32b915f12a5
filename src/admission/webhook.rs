//! The webhook adapter: decides CREATEs from the watch caches (`docs/design.md §4`), keeps the
//! per-node reservations, and answers AdmissionReviews as a [`nmo_webhook::Validator`].

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;

use super::cache::{self, CacheTasks, Caches, NmEvent, QuorumStores};
use super::platform::Platform;
use super::pods::{PodCache, PodCacheTasks};
use super::quorum::{
    GUARD_BUDGET_NAMES, GuardBudget, GuardPod, Quorum, budget_selects_pods, disruptions_allowed,
    etcd_members, guard_pod, is_control_plane, kubernetes_quorum, node_ready,
    openshift_quorum_allows, pdb_selector,
};
use super::reservations::{CONFIRM_AFTER, CONFIRM_MAX_INTERVAL, Reservations};
use super::rules::{
    CreateFacts, Denial, asks_force_delete, validate_create, validate_node_name, validate_update,
};
use super::warnings::{NodePod, Share};
use crate::api::NodeMaintenance;
use crate::drain::DrainOptions;
use crate::metrics::{AdmissionOperation, AdmissionResult, Metrics};
use crate::watch::nodes::NodeCache;

/// Path of the validating webhook (upstream's, derived by kubebuilder from the GVK).
pub const WEBHOOK_PATH: &str = "/validate-nodemaintenance-medik8s-io-v1beta1-nodemaintenance";
/// Upper bound of the waits of one review (caches not yet synced, the live lookup of a node
/// missing from the cache); stays below the webhook's 15 s `timeoutSeconds` so the user gets our
/// "please try again" message rather than a webhook timeout.
pub(crate) const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

/// The NodeMaintenance validator: the pure rules over the watch caches, plus the reservations.
pub(crate) struct Admission {
    client: Client,
    metrics: Arc<Metrics>,
    caches: Caches,
    /// Held while a CREATE reads the caches and reserves its node, so that the check and the
    /// reservation are one step for every CREATE of this replica (a few microseconds: nothing
    /// awaits under it).
    reservations: Arc<Mutex<Reservations>>,
    /// `None` with `--pod-warnings=false`.
    pods: Option<PodCache>,
    settings: WarningSettings,
    _tasks: CacheTasks,
    _pod_tasks: Option<PodCacheTasks>,
}

/// What the CREATE warnings read of the operator's flags.
#[derive(Clone, Debug, Default)]
pub(crate) struct WarningSettings {
    /// The knobs' defaults: the drain rules of a maintenance that has none of its own.
    pub policy: crate::policy::Defaults,
    /// The drain's settings (its own pod).
    pub drain: DrainOptions,
    /// `--maintenance-share-warning`, percent (0: off).
    pub share_threshold: u8,
    /// `--pod-warnings`: keep the pod cache and warn about the node's pods.
    pub pod_cache: bool,
}

impl Admission {
    /// Starts the caches beside the process's Node watch `nodes`, for the platform detected at
    /// start-up ([`detect_platform`](super::detect_platform)). Must run inside a tokio runtime; the caches' watches stop
    /// when the validator is dropped (`nodes`, the process's, runs on). The returned validator
    /// answers CREATEs once [`Admission::synced`] reads true (until then a CREATE waits for it,
    /// up to [`LOOKUP_TIMEOUT`]). The pod cache of the warnings starts listing once they and
    /// the Node watch of `nodes` have listed, and is not waited for ([`Admission::pod_warnings`]).
    pub(crate) fn with_platform(
        client: Client,
        metrics: Arc<Metrics>,
        platform: Platform,
        nodes: NodeCache,
        settings: WarningSettings,
    ) -> Self {
        let reservations = Arc::new(Mutex::new(Reservations::default()));
        let nodes_listed = nodes.synced();
        let (caches, tasks) = {
            let reservations = reservations.clone();
            // The handle for the relist check is only known after start; it is set right below.
            let relist_view: Arc<std::sync::OnceLock<Caches>> = Arc::default();
            let view = relist_view.clone();
            let (caches, tasks) = cache::start(&client, platform, nodes, move |ev| {
                let mut r = lock(&reservations);
                match ev {
                    NmEvent::Observed { name, node } => {
                        if r.observed(&name, &node) {
                            tracing::debug!(name = %name, node = %node, "reservation ended: the cache shows the NodeMaintenance");
                        }
                    }
                    // A relist may have skipped events; a reservation whose object is now in the
                    // cache ends, the others stay with their live check.
                    NmEvent::Relisted => {
                        if let Some(c) = view.get() {
                            let shown: Vec<(String, String)> = r
                                .iter()
                                .filter(|(node, res)| c.has_nm_for(&res.nm_name, node))
                                .map(|(node, res)| (res.nm_name.clone(), node.clone()))
                                .collect();
                            for (name, node) in shown {
                                r.observed(&name, &node);
                            }
                        }
                    }
                }
            });
            let _ = relist_view.set(caches.clone());
            (caches, tasks)
        };
        let (pods, pod_tasks) = if settings.pod_cache {
            let (pods, tasks) = super::pods::start(&client, caches.synced(), nodes_listed);
            (Some(pods), Some(tasks))
        } else {
            (None, None)
        };
        Self {
            client,
            metrics,
            caches,
            reservations,
            pods,
            settings,
            _tasks: tasks,
            _pod_tasks: pod_tasks,
        }
    }

    /// Turns true once the caches have listed everything; `/readyz` waits for it.
    pub(crate) fn synced(&self) -> watch::Receiver<bool> {
        self.caches.synced()
    }

    /// The stripped node: from the cache, or, when the cache does not have it (a node created a
    /// moment ago, or the Node cache still listing), from one live GET. `None` when it does not
    /// exist.
    async fn node(&self, name: &str) -> Result<Option<Arc<Node>>, Denial> {
        if let Some(node) = self.caches.node(name) {
            return Ok(Some(node));
        }
        self.live_node(name)
            .await
            .map_err(|e| Denial::NodeLookup(e.to_string()))
    }

    /// Node `name` as the API server has it now, stripped; `None` when it does not exist.
    async fn live_node(&self, name: &str) -> Result<Option<Arc<Node>>, kube::Error> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        Ok(nodes.get_opt(name).await?.map(|mut node| {
            cache::strip_node(&mut node);
            Arc::new(node)
        }))
    }

    /// While the Node cache is still listing: the nodes of the etcd members the quorum rule of
    /// `node` reads, each by one live GET, all at once (at most one per etcd pod; none for a
    /// worker that runs no etcd pod, or on OpenShift, whose rule reads no node). `None` once
    /// the Node cache has listed: the rule then reads it.
    async fn live_members(
        &self,
        node: &Node,
    ) -> Result<Option<std::collections::HashMap<String, Option<Arc<Node>>>>, Denial> {
        if self.caches.nodes_synced() {
            return Ok(None);
        }
        let QuorumStores::Kubernetes { etcd_pods, .. } = self.caches.quorum() else {
            return Ok(None);
        };
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let pods = etcd_pods.state();
        let node_of = |p: &Arc<k8s_openapi::api::core::v1::Pod>| {
            p.spec.as_ref().and_then(|s| s.node_name.clone())
        };
        if !is_control_plane(node) && !pods.iter().any(|p| node_of(p).as_deref() == Some(name)) {
            return Ok(None);
        }
        let mut members: Vec<String> = pods
            .iter()
            .filter_map(node_of)
            .filter(|m| m != name)
            .collect();
        members.sort();
        members.dedup();
        let read = members.into_iter().map(|m| async move {
            let got = self.live_node(&m).await;
            (m, got)
        });
        // The node itself was just read.
        let mut nodes =
            std::collections::HashMap::from([(name.to_string(), Some(Arc::new(node.clone())))]);
        for (m, got) in futures::future::join_all(read).await {
            let got = got.map_err(|e| Denial::QuorumLookup {
                node: name.to_string(),
                error: format!("could not get node {m}: {e}"),
            })?;
            nodes.insert(m, got);
        }
        Ok(Some(nodes))
    }

    /// The warnings of [`super::warnings::warnings`] about `nm`'s node, from the caches alone
    /// (no request). While the pod cache has not listed yet, only the share of nodes under
    /// maintenance is judged, and a log line says the rest was skipped: readiness does not wait
    /// for a list that grows with the cluster's pods.
    fn warnings(&self, nm: &NodeMaintenance) -> Vec<String> {
        let node = nm.spec.node_name.as_str();
        let share =
            (self.settings.share_threshold > 0 && self.caches.nodes_synced()).then(|| Share {
                maintenances: self.caches.maintenances(),
                nodes: self.caches.node_count(),
                threshold: self.settings.share_threshold,
            });
        let Some(pods) = &self.pods else {
            return super::warnings::warnings(node, &[], &[], share);
        };
        if !pods.synced() {
            tracing::info!(%node, "pod warnings skipped: the admission pod cache has not listed yet");
            return super::warnings::warnings(node, &[], &[], share);
        }
        let policy = crate::policy::resolve(nm, &self.settings.policy).0;
        let surge = policy.surge == crate::knobs::Surge::RolloutRestart;
        let (rules, options) = (
            policy.drain_rules,
            self.settings.drain.with_daemon_sets(policy.daemon_sets),
        );
        let on_node = pods.on_node(node);
        let mut elsewhere: std::collections::HashMap<String, bool> = Default::default();
        let facts: Vec<NodePod> = on_node
            .iter()
            .map(|p| {
                let disposition = super::warnings::disposition(&p.pod, &rules, &options);
                let last_of = (p.ready
                    && matches!(disposition, crate::drain::Disposition::Evict { .. }))
                .then(|| pods.workload(&p.pod))
                .flatten()
                .filter(|w| {
                    !*elsewhere
                        .entry(w.uid.clone())
                        .or_insert_with(|| pods.ready_elsewhere(w, node))
                });
                NodePod {
                    pod: &p.pod,
                    disposition,
                    last_of,
                    surge,
                }
            })
            .collect();
        super::warnings::warnings(node, &facts, &self.caches.blocking_budgets(), share)
    }

    /// Decides a CREATE; `Ok` carries the admission warnings (a quorum that was not checked,
    /// budgets that will hold the drain, a node name the maintenance will fail on).
    async fn admit_create(
        &self,
        nm: &NodeMaintenance,
        dry_run: bool,
    ) -> Result<Vec<String>, Denial> {
        let node_name = nm.spec.node_name.as_str();
        // A name no node can have is answered like a missing node, without a lookup.
        validate_node_name(node_name)?;
        let mut synced = self.caches.synced();
        if synced.wait_for(|v| *v).await.is_err() {
            return Err(Denial::NotSynced);
        }
        let Some(node) = self.node(node_name).await? else {
            return Err(Denial::NodeNotFound(node_name.to_string()));
        };
        // Read before the reservations' lock, under which nothing awaits.
        let live_members = self.live_members(&node).await?;
        let nm_name = nm.metadata.name.clone().unwrap_or_default();

        // The decision and the reservation it grants under one lock; the warnings, which never
        // change the decision, only once it allows (a refused CREATE costs no pod lookups).
        let (quorum, token) = {
            let mut reservations = lock(&self.reservations);
            let maintained =
                |n: &str| self.caches.maintained(n) || reservations.reserved_for_other(n, &nm_name);
            let already_maintained = maintained(node_name);
            let quorum = if already_maintained {
                Quorum::Kept
            } else {
                self.quorum(&node, live_members.as_ref(), &maintained)?
            };
            validate_create(
                nm,
                &CreateFacts {
                    node_exists: true,
                    already_maintained,
                    quorum_safe: quorum != Quorum::Violated,
                },
            )?;
            let token = (!dry_run)
                .then(|| reservations.reserve(node_name, &nm_name))
                .flatten();
            (quorum, token)
        };
        if let Some(token) = token {
            tokio::spawn(confirm_reservation(
                Api::all(self.client.clone()),
                self.reservations.clone(),
                node_name.to_string(),
                nm_name,
                token,
            ));
        }
        let mut warnings = Vec::new();
        if let Quorum::NotChecked(why) = quorum {
            tracing::info!(node = %node_name, warning = why, "admitted without an etcd quorum check");
            warnings.push(why.to_string());
        }
        warnings.extend(self.warnings(nm));
        if let Some(why) = crate::lease::lease_name_error(node_name) {
            warnings.push(format!(
                "this maintenance will fail without changing the node: {}",
                why.split(" (node names").next().unwrap_or(&why)
            ));
        }
        Ok(warnings)
    }

    /// The quorum rule of the platform over the cached inputs (no API call); the etcd members'
    /// nodes from `live_members` when given ([`Admission::live_members`]), else from the Node
    /// cache.
    fn quorum(
        &self,
        node: &Node,
        live_members: Option<&std::collections::HashMap<String, Option<Arc<Node>>>>,
        maintained: &dyn Fn(&str) -> bool,
    ) -> Result<Quorum, Denial> {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let control_plane = is_control_plane(node);
        let lookup = |error| Denial::QuorumLookup {
            node: name.to_string(),
            error,
        };
        match self.caches.quorum() {
            QuorumStores::OpenShift { budgets, pods } => {
                if !control_plane {
                    return Ok(Quorum::Kept);
                }
                let budgets = budgets.state();
                if budgets.is_empty() {
                    tracing::info!(
                        "No PDBs were found, can't check if the etcd quorum will be violated!"
                    );
                }
                let allowed: Vec<i32> = budgets.iter().map(|p| disruptions_allowed(p)).collect();
                let guard = match (budgets.as_slice(), allowed.as_slice()) {
                    ([pdb], [a]) if *a < 1 => {
                        guard_pod(name, pdb_selector(pdb), &pods.state()).map_err(lookup)?
                    }
                    _ => GuardPod::Absent,
                };
                Ok(if openshift_quorum_allows(true, &allowed, &guard) {
                    Quorum::Kept
                } else {
                    Quorum::Violated
                })
            }
            QuorumStores::Kubernetes {
                etcd_pods,
                budgets,
                pods,
            } => {
                let on_node = |p: &k8s_openapi::api::core::v1::Pod| {
                    p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name)
                };
                // Most maintenances are for workers: a node that is not control-plane labelled
                // and runs no etcd pod is judged by nothing.
                if !control_plane && etcd_pods.find(on_node).is_none() {
                    return Ok(Quorum::Kept);
                }
                let guard_pods = pods.state();
                let guards = budgets
                    .state()
                    .iter()
                    .filter(|p| {
                        GUARD_BUDGET_NAMES.contains(&p.metadata.name.as_deref().unwrap_or_default())
                    })
                    .map(|p| {
                        let selector = pdb_selector(p);
                        Ok(GuardBudget {
                            disruptions_allowed: disruptions_allowed(p),
                            guard: guard_pod(name, selector, &guard_pods)?,
                            selects_pods: budget_selects_pods(selector, &guard_pods)?,
                        })
                    })
                    .collect::<Result<Vec<_>, String>>()
                    .map_err(lookup)?;
                let members = etcd_members(
                    &etcd_pods.state(),
                    |n| match live_members {
                        Some(live) => live
                            .get(n)
                            .is_some_and(|n| n.as_deref().is_some_and(node_ready)),
                        None => self.caches.node(n).is_some_and(|n| node_ready(&n)),
                    },
                    maintained,
                );
                let quorum = kubernetes_quorum(name, control_plane, &guards, &members);
                if quorum == Quorum::Violated {
                    tracing::info!(node = %name, ?members, ?guards, "etcd quorum would be violated");
                }
                Ok(quorum)
            }
        }
    }

    /// Refuses a maintenance that newly asks `onTimeout: ForceDelete` ([`asks_force_delete`])
    /// while the operator's own identity (its ServiceAccount) may not delete pods in every
    /// namespace, by one SelfSubjectAccessReview under [`LOOKUP_TIMEOUT`]; reads nothing else.
    ///
    /// # Errors
    /// [`Denial::ForceDeleteNotPermitted`], or [`Denial::PermissionLookup`] when the review
    /// failed or hung.
    async fn may_force_delete(
        &self,
        old: Option<&NodeMaintenance>,
        new: &NodeMaintenance,
    ) -> Result<(), Denial> {
        use k8s_openapi::api::authorization::v1::{
            ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
        };
        if !asks_force_delete(old, new) {
            return Ok(());
        }
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    verb: Some("delete".into()),
                    resource: Some("pods".into()),
                    group: Some(String::new()),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        let api: Api<SelfSubjectAccessReview> = Api::all(self.client.clone());
        // The CREATE's own lookups may take LOOKUP_TIMEOUT (10 s) of the webhook's 15 s.
        const PERMISSION_TIMEOUT: Duration = Duration::from_secs(4);
        let answer = tokio::time::timeout(
            PERMISSION_TIMEOUT,
            api.create(&kube::api::PostParams::default(), &review),
        )
        .await
        .map_err(|_| {
            Denial::PermissionLookup(format!(
                "no answer within {} s",
                PERMISSION_TIMEOUT.as_secs()
            ))
        })?
        .map_err(|e| Denial::PermissionLookup(e.to_string()))?;
        match answer.status {
            Some(s) if s.allowed => Ok(()),
            _ => Err(Denial::ForceDeleteNotPermitted),
        }
    }

    /// Refuses an UPDATE that adds a pre-drain hook once the drain started
    /// ([`crate::policy::pre_drain_hooks::may_add`]). The fact is the API server's: the start
    /// recorded on the node (`nodemaintenance.medik8s.io/drain-started`, under this
    /// maintenance's holder record), read by one live GET under [`LOOKUP_TIMEOUT`] (the Node
    /// cache keeps no annotation), or the start an earlier version recorded on the object
    /// itself. `status.drainStartTime` shows the same start, but only once a pass has written it
    /// (the node's record comes first, in the patch that starts the drain), so it is not read.
    /// Reads nothing when no hook is added.
    ///
    /// # Errors
    /// [`Denial::HookAfterDrainStart`], or [`Denial::DrainStartLookup`] when the node could not
    /// be read.
    async fn may_add_hooks(
        &self,
        old: &NodeMaintenance,
        new: &NodeMaintenance,
    ) -> Result<(), Denial> {
        use crate::policy::pre_drain_hooks;
        let added = pre_drain_hooks::added(old, new);
        if added.is_empty() {
            return Ok(());
        }
        let legacy = new
            .annotations()
            .get(crate::api::DRAIN_STARTED_ANNOTATION)
            .and_then(|v| v.parse::<jiff::Timestamp>().ok());
        let nodes: Api<Node> = Api::all(self.client.clone());
        let node = tokio::time::timeout(LOOKUP_TIMEOUT, nodes.get_opt(&new.spec.node_name))
            .await
            .map_err(|_| {
                let s = LOOKUP_TIMEOUT.as_secs();
                Denial::DrainStartLookup(format!("no answer within {s} s"))
            })?
            .map_err(|e| Denial::DrainStartLookup(e.to_string()))?;
        let name = new.name_any();
        let on_node = node
            .filter(|n| crate::node::observe(n).holder.as_deref() == Some(name.as_str()))
            .and_then(|n| crate::node::drain_started(&n));
        pre_drain_hooks::may_add(&added, on_node.or(legacy)).map_err(Denial::HookAfterDrainStart)
    }

    /// Decides a review; `Ok` carries the warnings of an admitted one.
    async fn decide(&self, req: &AdmissionRequest<NodeMaintenance>) -> Result<Vec<String>, Denial> {
        match req.operation {
            Operation::Create => {
                let nm = req.object.as_ref().ok_or(Denial::MissingObject("object"))?;
                match tokio::time::timeout(LOOKUP_TIMEOUT, self.admit_create(nm, req.dry_run)).await
                {
                    Ok(Ok(warnings)) => self.may_force_delete(None, nm).await.map(|()| warnings),
                    Ok(result) => result,
                    Err(_) if !*self.caches.synced().borrow() => Err(Denial::NotSynced),
                    Err(_) => Err(Denial::NodeLookup(format!(
                        "lookups did not finish within {} s",
                        LOOKUP_TIMEOUT.as_secs()
                    ))),
                }
            }
            // The controller's own finalizer patches come through here: only the two objects
            // are read, never the API, save for an UPDATE that adds a pre-drain hook (the
            // controller never does) or newly asks ForceDelete.
            Operation::Update => {
                let new = req.object.as_ref().ok_or(Denial::MissingObject("object"))?;
                let old = req
                    .old_object
                    .as_ref()
                    .ok_or(Denial::MissingObject("oldObject"))?;
                validate_update(old, new)?;
                self.may_add_hooks(old, new).await?;
                self.may_force_delete(Some(old), new).await?;
                Ok(Vec::new())
            }
            // DELETE/CONNECT are not registered (upstream only logs `validate delete`).
            _ => Ok(Vec::new()),
        }
    }
}

fn lock(r: &Mutex<Reservations>) -> MutexGuard<'_, Reservations> {
    r.lock().unwrap_or_else(|e| e.into_inner())
}

/// Ends reservation `token` of `node` once a live check finds that its NodeMaintenance does not
/// exist (the request failed after admission, or the object is already gone). Runs only while
/// the cache has not shown the object: normally the watch ends the reservation within
/// milliseconds and this task finds nothing to do.
async fn confirm_reservation(
    api: Api<NodeMaintenance>,
    reservations: Arc<Mutex<Reservations>>,
    node: String,
    nm_name: String,
    token: u64,
) {
    let mut wait = CONFIRM_AFTER;
    loop {
        tokio::time::sleep(wait).await;
        let Some(renewals) = lock(&reservations).renewals(&node, token) else {
            return;
        };
        let exists = if nm_name.is_empty() {
            api.list(&Default::default())
                .await
                .map(|l| l.items.iter().any(|o| o.spec.node_name == node))
        } else {
            // An object of that name for another node is not this CREATE's (it failed with
            // AlreadyExists).
            api.get_opt(&nm_name)
                .await
                .map(|o| o.is_some_and(|o| o.spec.node_name == node))
        };
        match exists {
            Ok(false) => {
                let mut r = lock(&reservations);
                if r.release(&node, token, renewals) {
                    tracing::info!(name = %nm_name, node = %node, "reservation ended: the admitted NodeMaintenance does not exist (its request failed later, or it is gone)");
                    return;
                }
                if r.renewals(&node, token).is_none() {
                    return;
                }
                // Admitted again while this check ran: check afresh.
                wait = CONFIRM_AFTER;
                continue;
            }
            Ok(true) => {}
            Err(e) => {
                tracing::warn!(name = %nm_name, node = %node, error = %e, "could not check an admitted NodeMaintenance; retrying")
            }
        }
        wait = (wait * 2).min(CONFIRM_MAX_INTERVAL);
    }
}

fn operation_name(op: &Operation) -> AdmissionOperation {
    match op {
        Operation::Create => AdmissionOperation::CREATE,
        Operation::Update => AdmissionOperation::UPDATE,
        Operation::Delete => AdmissionOperation::DELETE,
        Operation::Connect => AdmissionOperation::CONNECT,
    }
}

/// The `operation` metric label of a review that could not be decoded: one of the four
/// admission operations, else `UNKNOWN`. The text comes from an unauthenticated request body, so
/// it must never become a label value as is (each distinct value is a new series, held forever).
pub(crate) fn operation_label(operation: Option<&str>) -> AdmissionOperation {
    match operation {
        Some("CREATE") => AdmissionOperation::CREATE,
        Some("UPDATE") => AdmissionOperation::UPDATE,
        Some("DELETE") => AdmissionOperation::DELETE,
        Some("CONNECT") => AdmissionOperation::CONNECT,
        _ => AdmissionOperation::UNKNOWN,
    }
}

impl nmo_webhook::Validator for Admission {
    type Object = NodeMaintenance;

    async fn validate(&self, req: AdmissionRequest<NodeMaintenance>) -> AdmissionResponse {
        let started = Instant::now();
        let operation = operation_name(&req.operation);
        let node = req
            .object
            .as_ref()
            .map(|o| o.spec.node_name.clone())
            .unwrap_or_default();
        tracing::debug!(name = %req.name, node = %node, ?operation, dry_run = req.dry_run, "validate {}", format!("{operation:?}").to_lowercase());
        let (resp, result) = match self.decide(&req).await {
            Ok(warnings) => {
                let mut resp = nmo_webhook::allow(&req);
                if !warnings.is_empty() {
                    resp.warnings = Some(warnings);
                }
                (resp, AdmissionResult::allowed)
            }
            Err(denial) => {
                tracing::info!(name = %req.name, node = %node, ?operation, reason = %denial, "validation failed");
                (nmo_webhook::deny(&req, &denial), AdmissionResult::denied)
            }
        };
        self.metrics
            .admission(operation, result, started.elapsed().as_secs_f64());
        resp
    }

    fn rejected(&self, operation: Option<&str>, _error: &nmo_webhook::EnvelopeError) {
        self.metrics
            .admission(operation_label(operation), AdmissionResult::invalid, 0.0);
    }
}

/// The webhook router: `POST` [`WEBHOOK_PATH`] served by `admission` through the
/// [`nmo_webhook`] envelope (3 MiB body limit, 10 s body timeout). Serve it with
/// `nmo_webhook::WebhookServer::start`, merged with any other routes.
pub(crate) fn router(admission: Arc<Admission>) -> axum::Router {
    nmo_webhook::admission_route(WEBHOOK_PATH, admission)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejected_reviews_get_a_bounded_operation_label() {
        for op in ["CREATE", "UPDATE", "DELETE", "CONNECT"] {
            assert_eq!(format!("{:?}", operation_label(Some(op))), op);
        }
        for junk in [
            None,
            Some(""),
            Some("create"),
            Some("x".repeat(4096).as_str()),
        ] {
            assert_eq!(operation_label(junk), AdmissionOperation::UNKNOWN);
        }
    }
}

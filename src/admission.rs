//! Admission rules for `NodeMaintenance` (the validating webhook `vnodemaintenance.kb.io`).
//!
//! Upstream's checks and exact denial strings (nmo-compat.md §9) with its weaknesses fixed
//! (§16 rows 9, 10, 20):
//! - lookups go to the API server, not a cache, and concurrent CREATEs for one node are serialised
//!   inside the process, with admitted-but-not-yet-listed objects remembered, so exactly one of
//!   several racing CREATEs for a node is admitted;
//! - the etcd quorum guard also protects non-OpenShift clusters (etcd static pods, else
//!   control-plane labelled nodes, counted as members);
//! - an empty or malformed `spec.nodeName` gets a clear message.
//!
//! The decisions are pure functions over observed facts ([`validate_create`],
//! [`validate_update`], [`etcd_quorum_allows`], [`openshift_quorum_allows`]); [`Admission`] does
//! the lookups and plugs into [`nmo_webhook`] via [`router`].

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::ListParams;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use kube::{Api, Client};

use crate::api::{NodeMaintenance, NodeNameError};
use crate::metrics::Metrics;

/// Path of the validating webhook (upstream's, derived by kubebuilder from the GVK).
pub const WEBHOOK_PATH: &str = "/validate-nodemaintenance-medik8s-io-v1beta1-nodemaintenance";
/// How long an admitted CREATE keeps its node reserved when the object does not show up in the
/// LIST (it may have been rejected later in the API server's chain, or not be visible yet).
pub const PENDING_TTL: Duration = Duration::from_secs(30);
/// Upper bound of all lookups for one review; stays below the webhook's 15 s `timeoutSeconds`
/// so the user gets our "please try again" message rather than a webhook timeout.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Node labels that mark a control-plane node; presence is enough, any value (upstream).
pub const CONTROL_PLANE_LABELS: [&str; 2] = [
    "node-role.kubernetes.io/control-plane",
    "node-role.kubernetes.io/master",
];
/// Namespace of the etcd guard PodDisruptionBudget and guard pods on OpenShift.
pub const OPENSHIFT_ETCD_NAMESPACE: &str = "openshift-etcd";
/// Namespace of kubeadm's etcd static pods.
pub const ETCD_POD_NAMESPACE: &str = "kube-system";
/// Label selector of kubeadm's etcd static pods.
pub const ETCD_POD_SELECTOR: &str = "component=etcd";
/// The group version whose presence marks an OpenShift cluster (upstream's detection).
pub const OPENSHIFT_CONFIG_GROUP_VERSION: &str = "config.openshift.io/v1";

/// Why a NodeMaintenance is not admitted. The display text is the denial message returned with
/// code 403 (kubectl prints `admission webhook "vnodemaintenance.kb.io" denied the request:
/// <text>`); the first five are upstream's exact strings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denial {
    /// CREATE for a node that does not exist (upstream check 1).
    #[error("invalid nodeName, no node with name {0} found")]
    NodeNotFound(String),
    /// Another NodeMaintenance already targets the node (upstream check 2).
    #[error("invalid nodeName, a NodeMaintenance for node {0} already exists")]
    AlreadyExists(String),
    /// The node hosts an etcd member whose loss would break quorum (upstream check 3).
    #[error(
        "can not put master/control-plane node into maintenance at this moment, disrupting node {0} will violate etcd quorum"
    )]
    EtcdQuorum(String),
    /// UPDATE changing `spec.nodeName` (upstream UPDATE check).
    #[error("updating spec.NodeName isn't allowed")]
    NodeNameChanged,
    /// Node lookup failed for a reason other than NotFound (upstream check 1e).
    #[error(
        "could not get node for validating spec.NodeName, please try again: could not get node: {0}"
    )]
    NodeLookup(String),
    /// NodeMaintenance LIST failed (upstream check 2e).
    #[error("could not list NodeMaintenances for validating spec.NodeName, please try again: {0}")]
    ListLookup(String),
    /// The quorum lookups failed (upstream returns these errors raw).
    #[error("could not check the etcd quorum for node {node}, please try again: {error}")]
    QuorumLookup {
        /// The node.
        node: String,
        /// The lookup error.
        error: String,
    },
    /// `spec.nodeName` is empty (upstream answers with a confusing "please try again").
    #[error("invalid nodeName, spec.nodeName must be a valid node name")]
    EmptyNodeName,
    /// `spec.nodeName` is not a DNS-1123 subdomain, so no Node can have that name.
    #[error(
        "invalid nodeName, spec.nodeName must be a valid node name (a lowercase DNS-1123 subdomain), got {0:?}"
    )]
    MalformedNodeName(String),
    /// The review carried no object to validate.
    #[error("the admission request has no {0} to validate")]
    MissingObject(&'static str),
}

/// Checks that `name` can be a Node name ([`crate::api::validate_node_name`], the rule the
/// controller applies too).
///
/// # Errors
/// [`Denial::EmptyNodeName`] or [`Denial::MalformedNodeName`].
pub fn validate_node_name(name: &str) -> Result<(), Denial> {
    match crate::api::validate_node_name(name) {
        Ok(()) => Ok(()),
        Err(NodeNameError::Empty) => Err(Denial::EmptyNodeName),
        Err(NodeNameError::TooLong | NodeNameError::Malformed) => {
            Err(Denial::MalformedNodeName(name.to_string()))
        }
    }
}

/// What the CREATE decision needs to know, observed in upstream's order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CreateFacts {
    /// A Node named `spec.nodeName` exists.
    pub node_exists: bool,
    /// Nodes that already have a NodeMaintenance (listed, plus admitted but not yet listed).
    pub maintained_nodes: BTreeSet<String>,
    /// Putting the node into maintenance keeps etcd quorum (true for non-members).
    pub quorum_safe: bool,
}

/// Decides a CREATE: valid name, node exists, no other NodeMaintenance for the node, etcd quorum
/// kept; the first failing check wins (upstream's order, nmo-compat.md §9.1).
///
/// # Errors
/// The [`Denial`] of the first failing check.
pub fn validate_create(nm: &NodeMaintenance, facts: &CreateFacts) -> Result<(), Denial> {
    let node = nm.spec.node_name.as_str();
    validate_node_name(node)?;
    if !facts.node_exists {
        return Err(Denial::NodeNotFound(node.to_string()));
    }
    if facts.maintained_nodes.contains(node) {
        return Err(Denial::AlreadyExists(node.to_string()));
    }
    if !facts.quorum_safe {
        return Err(Denial::EtcdQuorum(node.to_string()));
    }
    Ok(())
}

/// Decides an UPDATE: `spec.nodeName` is immutable; reason, metadata and finalizer edits are
/// allowed (nmo-compat.md §9.2).
///
/// # Errors
/// [`Denial::NodeNameChanged`].
pub fn validate_update(old: &NodeMaintenance, new: &NodeMaintenance) -> Result<(), Denial> {
    if old.spec.node_name != new.spec.node_name {
        return Err(Denial::NodeNameChanged);
    }
    Ok(())
}

/// One etcd member as seen for the quorum rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdMember {
    /// Node hosting the member.
    pub node: String,
    /// The member is up: its node is Ready (and its etcd pod Ready, when pods were found).
    pub ready: bool,
    /// Its node already has a NodeMaintenance, so the member is (or will be) disrupted.
    pub in_maintenance: bool,
}

/// The quorum rule for clusters without OpenShift's etcd guard: a node that hosts a member may
/// enter maintenance only if a majority (`n/2 + 1` of the `n` members) stays Ready and out of
/// maintenance without it. Nodes that host no member are always allowed.
pub fn etcd_quorum_allows(node: &str, members: &[EtcdMember]) -> bool {
    if !members.iter().any(|m| m.node == node) {
        return true;
    }
    let majority = members.len() / 2 + 1;
    let remaining = members
        .iter()
        .filter(|m| m.node != node && m.ready && !m.in_maintenance)
        .count();
    remaining >= majority
}

/// Readiness of the OpenShift etcd guard pod on the node, if there is one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GuardPod {
    /// No guard pod runs on the node.
    Absent,
    /// The guard pod's `Ready` condition status (`True`, `False`, `Unknown`), `None` without one.
    Present(Option<String>),
}

/// Upstream's OpenShift rule (medik8s/common `IsEtcdDisruptionAllowed`, nmo-compat.md §9.1):
/// non-control-plane nodes are allowed; otherwise exactly one PDB must exist in `openshift-etcd`
/// (none or several: deny); `disruptionsAllowed >= 1` allows; else the guard pod on the node
/// denies when its Ready is `True` or `Unknown` and allows when `False`, missing, or when there is
/// no guard pod on the node (the node is already disrupted).
pub fn openshift_quorum_allows(
    is_control_plane: bool,
    pdb_disruptions_allowed: &[i32],
    guard: &GuardPod,
) -> bool {
    if !is_control_plane {
        return true;
    }
    let [disruptions_allowed] = pdb_disruptions_allowed else {
        return false;
    };
    if *disruptions_allowed >= 1 {
        return true;
    }
    match guard {
        GuardPod::Absent => true,
        GuardPod::Present(ready) => !matches!(ready.as_deref(), Some("True") | Some("Unknown")),
    }
}

/// Whether the node carries a control-plane role label (any value).
pub fn is_control_plane(node: &Node) -> bool {
    node.metadata
        .labels
        .as_ref()
        .is_some_and(|l| CONTROL_PLANE_LABELS.iter().any(|k| l.contains_key(*k)))
}

/// Whether the node's `Ready` condition is `True`.
pub fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The status of the pod's `Ready` condition, if it has one.
pub fn pod_ready_status(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

/// Builds the etcd member list from etcd static pods (members by `spec.nodeName`, Ready when both
/// the pod and its node are Ready) or, when there are none, from control-plane labelled nodes
/// (Ready when the node is Ready). `maintained` are nodes with a NodeMaintenance.
pub fn etcd_members(
    etcd_pods: &[Pod],
    control_plane_nodes: &[Node],
    all_nodes_ready: &HashMap<String, bool>,
    maintained: &BTreeSet<String>,
) -> Vec<EtcdMember> {
    let mut members: Vec<EtcdMember> = Vec::new();
    if etcd_pods.is_empty() {
        for n in control_plane_nodes {
            let name = n.metadata.name.clone().unwrap_or_default();
            if members.iter().any(|m| m.node == name) {
                continue;
            }
            members.push(EtcdMember {
                in_maintenance: maintained.contains(&name),
                ready: node_ready(n),
                node: name,
            });
        }
    } else {
        for p in etcd_pods {
            let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) else {
                continue;
            };
            if members.iter().any(|m| m.node == node) {
                continue;
            }
            let ready = pod_ready_status(p).as_deref() == Some("True")
                && all_nodes_ready.get(&node).copied().unwrap_or(false);
            members.push(EtcdMember {
                in_maintenance: maintained.contains(&node),
                ready,
                node,
            });
        }
    }
    members
}

/// Converts a LabelSelector to the list-call syntax (`matchLabels` plus `In`, `NotIn`, `Exists`,
/// `DoesNotExist` expressions). An absent or empty selector selects everything (`""`), as
/// upstream's `LabelSelectorAsMap(nil)` does.
pub fn selector_string(selector: Option<&LabelSelector>) -> String {
    let Some(sel) = selector else {
        return String::new();
    };
    let mut parts: Vec<String> = sel
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for e in sel.match_expressions.iter().flatten() {
        let values = e.values.clone().unwrap_or_default().join(",");
        parts.push(match e.operator.as_str() {
            "In" => format!("{} in ({values})", e.key),
            "NotIn" => format!("{} notin ({values})", e.key),
            "Exists" => e.key.clone(),
            "DoesNotExist" => format!("!{}", e.key),
            other => format!("{} {other} ({values})", e.key),
        });
    }
    parts.join(",")
}

/// Admitted CREATEs that the NodeMaintenance LIST may not show yet, by node name.
#[derive(Debug, Default)]
pub struct PendingCreates {
    entries: HashMap<String, (String, Instant)>,
}

impl PendingCreates {
    /// Forgets entries older than [`PENDING_TTL`] and entries whose object is now listed (the LIST
    /// then speaks for them). `listed` holds the names of listed NodeMaintenances.
    pub fn prune(&mut self, listed: &HashSet<String>, now: Instant) {
        self.entries.retain(|_, (nm, at)| {
            now.saturating_duration_since(*at) < PENDING_TTL && !listed.contains(nm)
        });
    }

    /// Nodes reserved by a pending CREATE other than one for `nm_name` itself (a client retrying
    /// the same object must not be refused by its own earlier admission; the API server refuses a
    /// real duplicate name with AlreadyExists).
    pub fn reserved_nodes(&self, nm_name: &str) -> impl Iterator<Item = &String> {
        self.entries
            .iter()
            // An empty name (generateName not yet resolved) identifies nothing, so it never
            // exempts itself.
            .filter(move |(_, (nm, _))| nm_name.is_empty() || nm != nm_name)
            .map(|(node, _)| node)
    }

    /// Reserves `node` for the admitted `nm_name`.
    pub fn record(&mut self, node: &str, nm_name: &str, now: Instant) {
        self.entries
            .insert(node.to_string(), (nm_name.to_string(), now));
    }
}

/// The platform's quorum guard, detected once at start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Platform {
    /// `config.openshift.io/v1` is served: upstream's etcd-guard PDB rule.
    OpenShift,
    /// Anything else: the etcd member majority rule.
    Kubernetes,
}

/// Errors of [`Admission::new`].
#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    /// API discovery failed; upstream treats this as fatal at startup.
    #[error("could not detect whether the cluster is OpenShift: {0}")]
    Discovery(#[source] kube::Error),
}

/// The NodeMaintenance validator: API lookups plus the pure rules above.
pub struct Admission {
    client: Client,
    metrics: Arc<Metrics>,
    platform: Platform,
    node_locks: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
    pending: Mutex<PendingCreates>,
}

impl Admission {
    /// Detects the platform once (API group discovery: OpenShift when `config.openshift.io/v1` is
    /// served, as upstream) and builds the validator.
    ///
    /// # Errors
    /// [`AdmissionError::Discovery`] when discovery fails.
    pub async fn new(client: Client, metrics: Arc<Metrics>) -> Result<Self, AdmissionError> {
        let groups = client
            .list_api_groups()
            .await
            .map_err(AdmissionError::Discovery)?;
        let openshift = groups.groups.iter().any(|g| {
            g.versions
                .iter()
                .any(|v| v.group_version == OPENSHIFT_CONFIG_GROUP_VERSION)
        });
        let platform = if openshift {
            Platform::OpenShift
        } else {
            tracing::info!(
                "Cluster does not have etcd quorum PDB; using the etcd member majority rule for control-plane nodes"
            );
            Platform::Kubernetes
        };
        Ok(Self::with_platform(client, metrics, platform))
    }

    /// Builds the validator for a known platform (no discovery call).
    pub fn with_platform(client: Client, metrics: Arc<Metrics>, platform: Platform) -> Self {
        Self {
            client,
            metrics,
            platform,
            node_locks: Mutex::new(HashMap::new()),
            pending: Mutex::new(PendingCreates::default()),
        }
    }

    /// The detected platform.
    pub fn platform(&self) -> Platform {
        self.platform
    }

    fn node_lock(&self, node: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.node_locks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(lock) = locks.get(node).and_then(Weak::upgrade) {
            return lock;
        }
        locks.retain(|_, w| w.strong_count() > 0);
        let lock = Arc::new(tokio::sync::Mutex::new(()));
        locks.insert(node.to_string(), Arc::downgrade(&lock));
        lock
    }

    async fn admit_create(&self, nm: &NodeMaintenance, dry_run: bool) -> Result<(), Denial> {
        let node_name = nm.spec.node_name.clone();
        validate_node_name(&node_name)?;
        let nm_name = nm.metadata.name.clone().unwrap_or_default();
        // One decision per node at a time: the LIST below plus the pending set then see every
        // earlier admission for this node.
        let lock = self.node_lock(&node_name);
        let _guard = lock.lock().await;

        let nodes: Api<Node> = Api::all(self.client.clone());
        let node = match nodes.get_opt(&node_name).await {
            Ok(node) => node,
            Err(e) => return Err(Denial::NodeLookup(e.to_string())),
        };
        let Some(node) = node else {
            return Err(Denial::NodeNotFound(node_name));
        };

        let nms: Api<NodeMaintenance> = Api::all(self.client.clone());
        let listed = nms
            .list(&ListParams::default())
            .await
            .map_err(|e| Denial::ListLookup(e.to_string()))?;
        let listed_names: HashSet<String> = listed
            .items
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        let mut maintained: BTreeSet<String> = listed
            .items
            .iter()
            .map(|n| n.spec.node_name.clone())
            .collect();
        {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            pending.prune(&listed_names, Instant::now());
            maintained.extend(pending.reserved_nodes(&nm_name).cloned());
        }
        if maintained.contains(&node_name) {
            return Err(Denial::AlreadyExists(node_name));
        }

        let quorum_safe =
            self.quorum_safe(&node, &maintained)
                .await
                .map_err(|e| Denial::QuorumLookup {
                    node: node_name.clone(),
                    error: e.to_string(),
                })?;
        validate_create(
            nm,
            &CreateFacts {
                node_exists: true,
                maintained_nodes: maintained,
                quorum_safe,
            },
        )?;
        if !dry_run {
            self.pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .record(&node_name, &nm_name, Instant::now());
        }
        Ok(())
    }

    async fn quorum_safe(
        &self,
        node: &Node,
        maintained: &BTreeSet<String>,
    ) -> Result<bool, kube::Error> {
        let name = node.metadata.name.clone().unwrap_or_default();
        match self.platform {
            Platform::OpenShift => {
                if !is_control_plane(node) {
                    return Ok(true);
                }
                let pdbs: Api<PodDisruptionBudget> =
                    Api::namespaced(self.client.clone(), OPENSHIFT_ETCD_NAMESPACE);
                let pdbs = pdbs.list(&ListParams::default()).await?.items;
                let allowed: Vec<i32> = pdbs
                    .iter()
                    .map(|p| {
                        p.status
                            .as_ref()
                            .and_then(|s| s.disruptions_allowed)
                            .unwrap_or(0)
                    })
                    .collect();
                if pdbs.is_empty() {
                    tracing::info!(
                        "No PDBs were found, can't check if the etcd quorum will be violated!"
                    );
                }
                let guard = if let [pdb] = pdbs.as_slice()
                    && allowed[0] < 1
                {
                    let selector =
                        selector_string(pdb.spec.as_ref().and_then(|s| s.selector.as_ref()));
                    let pods: Api<Pod> =
                        Api::namespaced(self.client.clone(), OPENSHIFT_ETCD_NAMESPACE);
                    let pods = pods.list(&ListParams::default().labels(&selector)).await?;
                    pods.items
                        .iter()
                        .find(|p| {
                            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&name)
                        })
                        .map_or(GuardPod::Absent, |p| GuardPod::Present(pod_ready_status(p)))
                } else {
                    GuardPod::Absent
                };
                Ok(openshift_quorum_allows(true, &allowed, &guard))
            }
            Platform::Kubernetes => {
                let pods: Api<Pod> = Api::namespaced(self.client.clone(), ETCD_POD_NAMESPACE);
                // Most maintenances are for workers: a node that is not control-plane labelled and
                // runs no etcd pod is no member whichever way members are found, so one
                // node-scoped list settles it.
                if !is_control_plane(node) {
                    let on_node = pods
                        .list(
                            &ListParams::default()
                                .labels(ETCD_POD_SELECTOR)
                                .fields(&format!("spec.nodeName={name}"))
                                .limit(1),
                        )
                        .await?;
                    if on_node.items.is_empty() {
                        return Ok(true);
                    }
                }
                let etcd_pods = pods
                    .list(&ListParams::default().labels(ETCD_POD_SELECTOR))
                    .await?
                    .items;
                let nodes: Api<Node> = Api::all(self.client.clone());
                let (control_plane, ready) = if etcd_pods.is_empty() {
                    let mut cp = Vec::new();
                    for label in CONTROL_PLANE_LABELS {
                        cp.extend(
                            nodes
                                .list(&ListParams::default().labels(label))
                                .await?
                                .items,
                        );
                    }
                    (cp, HashMap::new())
                } else {
                    let mut ready = HashMap::new();
                    for p in &etcd_pods {
                        if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.as_deref())
                            && !ready.contains_key(n)
                        {
                            let r = nodes.get_opt(n).await?.as_ref().is_some_and(node_ready);
                            ready.insert(n.to_string(), r);
                        }
                    }
                    (Vec::new(), ready)
                };
                let members = etcd_members(&etcd_pods, &control_plane, &ready, maintained);
                let allowed = etcd_quorum_allows(&name, &members);
                if !allowed {
                    tracing::info!(node = %name, ?members, "etcd quorum would be violated");
                }
                Ok(allowed)
            }
        }
    }

    async fn decide(&self, req: &AdmissionRequest<NodeMaintenance>) -> Result<(), Denial> {
        match req.operation {
            Operation::Create => {
                let nm = req.object.as_ref().ok_or(Denial::MissingObject("object"))?;
                match tokio::time::timeout(LOOKUP_TIMEOUT, self.admit_create(nm, req.dry_run)).await
                {
                    Ok(result) => result,
                    Err(_) => Err(Denial::NodeLookup(format!(
                        "lookups did not finish within {} s",
                        LOOKUP_TIMEOUT.as_secs()
                    ))),
                }
            }
            Operation::Update => {
                let new = req.object.as_ref().ok_or(Denial::MissingObject("object"))?;
                let old = req
                    .old_object
                    .as_ref()
                    .ok_or(Denial::MissingObject("oldObject"))?;
                validate_update(old, new)
            }
            // DELETE/CONNECT are not registered (upstream only logs `validate delete`).
            _ => Ok(()),
        }
    }
}

fn operation_name(op: &Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

/// The `operation` metric label of a review that could not be decoded: one of the four
/// admission operations, else `UNKNOWN`. The text comes from an unauthenticated request body, so
/// it must never become a label value as is (each distinct value is a new series, held forever).
pub fn operation_label(operation: Option<&str>) -> &'static str {
    match operation {
        Some("CREATE") => "CREATE",
        Some("UPDATE") => "UPDATE",
        Some("DELETE") => "DELETE",
        Some("CONNECT") => "CONNECT",
        _ => "UNKNOWN",
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
        tracing::info!(name = %req.name, node = %node, operation, dry_run = req.dry_run, "validate {}", operation.to_lowercase());
        let (resp, result) = match self.decide(&req).await {
            Ok(()) => (nmo_webhook::allow(&req), "allowed"),
            Err(denial) => {
                tracing::info!(name = %req.name, node = %node, operation, reason = %denial, "validation failed");
                (nmo_webhook::deny(&req, &denial), "denied")
            }
        };
        self.metrics
            .admission(operation, result, started.elapsed().as_secs_f64());
        resp
    }

    fn rejected(&self, operation: Option<&str>, _error: &nmo_webhook::EnvelopeError) {
        self.metrics
            .admission(operation_label(operation), "invalid", 0.0);
    }
}

/// The webhook router: `POST` [`WEBHOOK_PATH`] served by `admission` through the
/// [`nmo_webhook`] envelope (3 MiB body limit, 10 s body timeout). Serve it with
/// `nmo_webhook::WebhookServer::start`, merged with any other routes.
pub fn router(admission: Arc<Admission>) -> axum::Router {
    nmo_webhook::admission_route(WEBHOOK_PATH, admission)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NodeMaintenanceSpec;
    use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus, PodCondition, PodSpec, PodStatus};
    use kube::api::ObjectMeta;

    fn nm(name: &str, node: &str) -> NodeMaintenance {
        let mut nm = NodeMaintenance::new(
            name,
            NodeMaintenanceSpec {
                node_name: node.into(),
                reason: None,
            },
        );
        nm.metadata.uid = Some("uid".into());
        nm
    }

    fn facts(node_exists: bool, maintained: &[&str], quorum_safe: bool) -> CreateFacts {
        CreateFacts {
            node_exists,
            maintained_nodes: maintained.iter().map(|s| s.to_string()).collect(),
            quorum_safe,
        }
    }

    #[test]
    fn create_denials_use_upstreams_exact_strings_in_order() {
        let m = nm("nm-1", "node-a");
        assert_eq!(
            validate_create(&m, &facts(false, &["node-a"], false))
                .unwrap_err()
                .to_string(),
            "invalid nodeName, no node with name node-a found"
        );
        assert_eq!(
            validate_create(&m, &facts(true, &["node-a"], false))
                .unwrap_err()
                .to_string(),
            "invalid nodeName, a NodeMaintenance for node node-a already exists"
        );
        assert_eq!(
            validate_create(&m, &facts(true, &["node-b"], false))
                .unwrap_err()
                .to_string(),
            "can not put master/control-plane node into maintenance at this moment, disrupting node node-a will violate etcd quorum"
        );
        assert_eq!(validate_create(&m, &facts(true, &["node-b"], true)), Ok(()));
    }

    #[test]
    fn rejected_reviews_get_a_bounded_operation_label() {
        for op in ["CREATE", "UPDATE", "DELETE", "CONNECT"] {
            assert_eq!(operation_label(Some(op)), op);
        }
        for junk in [
            None,
            Some(""),
            Some("create"),
            Some("x".repeat(4096).as_str()),
        ] {
            assert_eq!(operation_label(junk), "UNKNOWN");
        }
    }

    #[test]
    fn update_only_refuses_a_node_name_change() {
        let old = nm("nm-1", "node-a");
        let mut new = old.clone();
        new.spec.reason = Some("kernel upgrade".into());
        new.metadata.finalizers = Some(vec!["foregroundDeleteNodeMaintenance".into()]);
        assert_eq!(validate_update(&old, &new), Ok(()));
        new.spec.node_name = "new-node-name".into();
        assert_eq!(
            validate_update(&old, &new).unwrap_err().to_string(),
            "updating spec.NodeName isn't allowed"
        );
    }

    #[test]
    fn empty_and_malformed_node_names_get_a_clear_message() {
        let err = validate_create(&nm("x", ""), &facts(true, &[], true)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid nodeName, spec.nodeName must be a valid node name"
        );
        for bad in [
            "Node-A",
            "node_a",
            "-node",
            "node-",
            "a..b",
            ".a",
            &"a".repeat(254),
        ] {
            let err = validate_node_name(bad).unwrap_err();
            assert!(
                err.to_string()
                    .starts_with("invalid nodeName, spec.nodeName must be a valid node name"),
                "{bad}: {err}"
            );
        }
        for good in [
            "node-a",
            "ip-10-0-0-1.ec2.internal",
            "a",
            "0",
            &"a".repeat(63),
        ] {
            assert_eq!(validate_node_name(good), Ok(()), "{good}");
        }
    }

    fn member(node: &str, ready: bool, in_maintenance: bool) -> EtcdMember {
        EtcdMember {
            node: node.into(),
            ready,
            in_maintenance,
        }
    }

    #[test]
    fn single_member_is_never_disrupted() {
        assert!(!etcd_quorum_allows("cp-0", &[member("cp-0", true, false)]));
    }

    #[test]
    fn three_members_allow_one_at_a_time() {
        let mut members = vec![
            member("cp-0", true, false),
            member("cp-1", true, false),
            member("cp-2", true, false),
        ];
        assert!(etcd_quorum_allows("cp-0", &members));
        // cp-0 now has a NodeMaintenance.
        members[0].in_maintenance = true;
        assert!(!etcd_quorum_allows("cp-1", &members));
        assert!(!etcd_quorum_allows("cp-2", &members));
    }

    #[test]
    fn a_not_ready_member_counts_as_lost() {
        let members = vec![
            member("cp-0", true, false),
            member("cp-1", false, false),
            member("cp-2", true, false),
        ];
        assert!(!etcd_quorum_allows("cp-0", &members));
        // Taking down the NotReady member itself leaves the two healthy ones: allowed.
        assert!(etcd_quorum_allows("cp-1", &members));
    }

    #[test]
    fn five_members_tolerate_two_losses() {
        let mut members: Vec<_> = (0..5)
            .map(|i| member(&format!("cp-{i}"), true, false))
            .collect();
        members[0].in_maintenance = true;
        assert!(etcd_quorum_allows("cp-1", &members));
        members[1].in_maintenance = true;
        assert!(!etcd_quorum_allows("cp-2", &members));
    }

    #[test]
    fn non_members_are_always_allowed() {
        assert!(etcd_quorum_allows(
            "worker-0",
            &[member("cp-0", true, false)]
        ));
        assert!(etcd_quorum_allows("worker-0", &[]));
    }

    fn node(name: &str, labels: &[&str], ready: Option<&str>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|l| (l.to_string(), String::new()))
                        .collect(),
                ),
                ..Default::default()
            },
            status: ready.map(|r| NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: r.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(node: &str, ready: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(format!("etcd-{node}")),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some(node.into()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                conditions: ready.map(|r| {
                    vec![PodCondition {
                        type_: "Ready".into(),
                        status: r.into(),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn members_come_from_etcd_pods_when_present() {
        let pods = vec![
            pod("cp-0", Some("True")),
            pod("cp-1", Some("True")),
            pod("cp-2", Some("False")),
        ];
        let ready: HashMap<String, bool> = [("cp-0", true), ("cp-1", false), ("cp-2", true)]
            .into_iter()
            .map(|(n, r)| (n.to_string(), r))
            .collect();
        let maintained: BTreeSet<String> = ["cp-0".to_string()].into();
        let members = etcd_members(
            &pods,
            &[node("ignored", &[], Some("True"))],
            &ready,
            &maintained,
        );
        assert_eq!(
            members,
            vec![
                member("cp-0", true, true),
                // Pod Ready but node NotReady: lost.
                member("cp-1", false, false),
                // Node Ready but pod not Ready: lost.
                member("cp-2", false, false),
            ]
        );
    }

    #[test]
    fn members_fall_back_to_control_plane_labelled_nodes() {
        let nodes = vec![
            node(
                "cp-0",
                &["node-role.kubernetes.io/control-plane"],
                Some("True"),
            ),
            node("cp-1", &["node-role.kubernetes.io/master"], None),
            node("cp-0", &["node-role.kubernetes.io/master"], Some("True")),
        ];
        let members = etcd_members(&[], &nodes, &HashMap::new(), &BTreeSet::new());
        assert_eq!(
            members,
            vec![member("cp-0", true, false), member("cp-1", false, false)]
        );
        assert!(is_control_plane(&nodes[1]));
        assert!(!is_control_plane(&node(
            "w",
            &["node-role.kubernetes.io/worker"],
            None
        )));
    }

    #[test]
    fn openshift_rule_matches_upstream() {
        let ready = |s: &str| GuardPod::Present(Some(s.into()));
        // Not control-plane: allowed whatever the PDBs say.
        assert!(openshift_quorum_allows(false, &[], &GuardPod::Absent));
        // No PDB, or several: denied.
        assert!(!openshift_quorum_allows(true, &[], &GuardPod::Absent));
        assert!(!openshift_quorum_allows(true, &[1, 1], &GuardPod::Absent));
        // disruptionsAllowed >= 1: allowed.
        assert!(openshift_quorum_allows(true, &[1], &ready("True")));
        // disruptionsAllowed 0: the guard pod decides.
        assert!(!openshift_quorum_allows(true, &[0], &ready("True")));
        assert!(!openshift_quorum_allows(true, &[0], &ready("Unknown")));
        assert!(openshift_quorum_allows(true, &[0], &ready("False")));
        assert!(openshift_quorum_allows(
            true,
            &[0],
            &GuardPod::Present(None)
        ));
        assert!(openshift_quorum_allows(true, &[0], &GuardPod::Absent));
    }

    #[test]
    fn selectors_render_for_list_calls() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
        assert_eq!(selector_string(None), "");
        assert_eq!(selector_string(Some(&LabelSelector::default())), "");
        let sel = LabelSelector {
            match_labels: Some([("app".to_string(), "guard".to_string())].into()),
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: "In".into(),
                    values: Some(vec!["a".into(), "b".into()]),
                },
                LabelSelectorRequirement {
                    key: "x".into(),
                    operator: "DoesNotExist".into(),
                    values: None,
                },
            ]),
        };
        assert_eq!(selector_string(Some(&sel)), "app=guard,tier in (a,b),!x");
    }

    #[test]
    fn pending_creates_reserve_until_listed_or_expired() {
        let t0 = Instant::now();
        let mut p = PendingCreates::default();
        p.record("node-a", "nm-1", t0);
        let none = HashSet::new();
        p.prune(&none, t0 + Duration::from_secs(1));
        assert_eq!(p.reserved_nodes("nm-2").collect::<Vec<_>>(), vec!["node-a"]);
        // The same object retried is not refused by its own reservation.
        assert_eq!(p.reserved_nodes("nm-1").count(), 0);
        let mut unnamed = PendingCreates::default();
        unnamed.record("node-c", "", t0);
        assert_eq!(unnamed.reserved_nodes("").count(), 1);
        // Listed: the LIST speaks for it now.
        p.prune(&["nm-1".to_string()].into(), t0 + Duration::from_secs(2));
        assert_eq!(p.reserved_nodes("nm-2").count(), 0);
        // Expired.
        p.record("node-b", "nm-3", t0);
        p.prune(&none, t0 + PENDING_TTL);
        assert_eq!(p.reserved_nodes("nm-4").count(), 0);
    }
}

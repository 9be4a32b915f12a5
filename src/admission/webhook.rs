//! The webhook adapter: the lookups a CREATE needs, the per-node serialisation, and the
//! [`nmo_webhook::Validator`] that answers AdmissionReviews.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::ListParams;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use kube::{Api, Client};

use super::*;
use crate::api::NodeMaintenance;
use crate::metrics::Metrics;

/// Path of the validating webhook (upstream's, derived by kubebuilder from the GVK).
pub const WEBHOOK_PATH: &str = "/validate-nodemaintenance-medik8s-io-v1beta1-nodemaintenance";
/// Upper bound of all lookups for one review; stays below the webhook's 15 s `timeoutSeconds`
/// so the user gets our "please try again" message rather than a webhook timeout.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

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
}

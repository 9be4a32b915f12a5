//! The watch caches admission decides from (`docs/design.md §4`): the process's one Node watch
//! ([`crate::watch::nodes`], started by the process and shared with the controller) and
//! kube-runtime reflectors over
//! NodeMaintenances and the etcd quorum inputs, each object stripped to what the rules read
//! before it is stored, so memory stays flat on large clusters.
//!
//! | Cache | Watched | Kept per object |
//! |---|---|---|
//! | Nodes | all | name, control-plane role, `Ready` condition status (a few bytes; never decoded whole) |
//! | NodeMaintenances | all | name, `spec.nodeName` |
//! | etcd pods (Kubernetes) | `kube-system`, `component=etcd` | name, `spec.nodeName`, `Ready` status |
//! | guard budgets (both) | `openshift-etcd` | name, selector, `disruptionsAllowed` |
//! | guard pods (both) | `openshift-etcd` | name, labels, `spec.nodeName`, `Ready` status |
//! | budgets | all | name, namespace, generation, selector, `observedGeneration`, `disruptionsAllowed`, `desiredHealthy`, `currentHealthy`, `expectedPods` |

use std::sync::Arc;
use tokio_util::task::AbortOnDropHandle;

use crate::watch::nodes::NodeCache;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus, Pod, PodCondition, PodStatus};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use kube::api::ObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use super::platform::Platform;
use super::quorum::{ETCD_POD_NAMESPACE, ETCD_POD_SELECTOR, OPENSHIFT_ETCD_NAMESPACE};
use crate::api::{NodeMaintenance, NodeMaintenanceSpec};
use crate::watch::nodes::CONTROL_PLANE_LABELS;

/// Keeps only a Node's name, its control-plane role labels and the status of its `Ready`
/// condition: what the existence, control-plane and quorum rules read. For the one node a
/// review looks up live; the cache never holds a whole Node.
pub(crate) fn strip_node(node: &mut Node) {
    let labels = node.metadata.labels.take().map(|mut l| {
        l.retain(|k, _| CONTROL_PLANE_LABELS.contains(&k.as_str()));
        l
    });
    let conditions = node.status.as_ref().and_then(|s| s.conditions.as_ref());
    let ready = conditions.and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
    let ready = ready.map(|c| c.status.clone());
    *node = Node {
        metadata: ObjectMeta {
            name: node.metadata.name.take(),
            labels: labels.filter(|l| !l.is_empty()),
            ..ObjectMeta::default()
        },
        spec: None,
        status: ready.map(|status| NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status,
                ..NodeCondition::default()
            }]),
            ..NodeStatus::default()
        }),
    };
}

/// Keeps only a NodeMaintenance's name and `spec.nodeName`.
pub(crate) fn strip_nm(nm: &mut NodeMaintenance) {
    let name = nm.metadata.name.take();
    let node_name = std::mem::take(&mut nm.spec.node_name);
    *nm = NodeMaintenance {
        metadata: ObjectMeta {
            name,
            ..ObjectMeta::default()
        },
        spec: NodeMaintenanceSpec {
            node_name,
            reason: None,
            ..Default::default()
        },
        status: None,
    };
}

/// Keeps only a Pod's name, namespace, labels, `spec.nodeName` and the status of its `Ready`
/// condition.
pub(crate) fn strip_pod(pod: &mut Pod) {
    let ready = super::quorum::pod_ready_status(pod);
    let node_name = pod.spec.as_mut().and_then(|s| s.node_name.take());
    *pod = Pod {
        metadata: ObjectMeta {
            name: pod.metadata.name.take(),
            namespace: pod.metadata.namespace.take(),
            labels: pod.metadata.labels.take(),
            ..ObjectMeta::default()
        },
        spec: Some(k8s_openapi::api::core::v1::PodSpec {
            node_name,
            ..Default::default()
        }),
        status: ready.map(|status| PodStatus {
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status,
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        }),
    };
}

/// Keeps what [`crate::drain::Budget::of`] reads of a PodDisruptionBudget, for the CREATE
/// warning about budgets that allow no disruption (`super::budgets`); the etcd guard rule reads
/// a subset of it (selector, `disruptionsAllowed`).
pub(crate) fn strip_budget(pdb: &mut PodDisruptionBudget) {
    let selector = pdb.spec.as_mut().and_then(|s| s.selector.take());
    let unhealthy_pod_eviction_policy = pdb
        .spec
        .as_mut()
        .and_then(|s| s.unhealthy_pod_eviction_policy.take());
    let status = pdb.status.take().map(|s| PodDisruptionBudgetStatus {
        observed_generation: s.observed_generation,
        disruptions_allowed: s.disruptions_allowed,
        desired_healthy: s.desired_healthy,
        current_healthy: s.current_healthy,
        expected_pods: s.expected_pods,
        ..Default::default()
    });
    *pdb = PodDisruptionBudget {
        metadata: ObjectMeta {
            name: pdb.metadata.name.take(),
            namespace: pdb.metadata.namespace.take(),
            generation: pdb.metadata.generation,
            ..ObjectMeta::default()
        },
        spec: Some(k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec {
            selector,
            unhealthy_pod_eviction_policy,
            ..Default::default()
        }),
        status,
    };
}

/// The quorum inputs of the detected platform.
#[derive(Clone)]
pub(crate) enum QuorumStores {
    /// kubeadm-style etcd static pods in `kube-system`, and an etcd guard budget in
    /// `openshift-etcd` if one exists (`docs/drain-contract.md` §9).
    Kubernetes {
        /// Pods labelled `component=etcd`.
        etcd_pods: Store<Pod>,
        /// Every budget in `openshift-etcd` (only the guard names count off OpenShift).
        budgets: Store<PodDisruptionBudget>,
        /// Every pod in `openshift-etcd`.
        pods: Store<Pod>,
    },
    /// OpenShift's etcd guard.
    OpenShift {
        /// Every budget in `openshift-etcd`.
        budgets: Store<PodDisruptionBudget>,
        /// Every pod in `openshift-etcd`.
        pods: Store<Pod>,
    },
}

/// Read handles of the admission caches. Cheap to clone; the watches run in tasks that end
/// when the [`CacheTasks`] returned beside it are dropped.
#[derive(Clone)]
pub(crate) struct Caches {
    nodes: NodeCache,
    nms: Store<NodeMaintenance>,
    budgets: Store<PodDisruptionBudget>,
    quorum: QuorumStores,
    synced: watch::Receiver<bool>,
}

/// The tasks that keep the caches current (the Node watch is the process's and runs on its
/// own); dropping this stops them.
pub(crate) type CacheTasks = Vec<tokio_util::task::AbortOnDropHandle<()>>;

impl Caches {
    /// The stripped Node `name`, if the Node cache has listed every node and has it; `None`
    /// while it is still listing (read the node from the API server then: [`Caches::nodes_synced`]).
    pub(crate) fn node(&self, name: &str) -> Option<Arc<Node>> {
        if !self.nodes_synced() {
            return None;
        }
        self.nodes.get(name).map(|e| Arc::new(e.to_node(name)))
    }

    /// Whether the process's Node watch has listed every node once. Until it has, no decision
    /// reads it: the nodes a CREATE needs are read from the API server instead (`docs/design.md
    /// §4`, "Readiness").
    pub(crate) fn nodes_synced(&self) -> bool {
        *self.nodes.synced().borrow()
    }

    /// Nodes the Node cache holds (all of them once [`Caches::nodes_synced`]).
    pub(crate) fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// NodeMaintenances the cache holds.
    pub(crate) fn maintenances(&self) -> usize {
        self.nms.len()
    }

    /// Whether a cached NodeMaintenance targets `node`.
    pub(crate) fn maintained(&self, node: &str) -> bool {
        self.nms.find(|nm| nm.spec.node_name == node).is_some()
    }

    /// Whether the cache holds a NodeMaintenance named `name` for `node` (an empty `name`: any
    /// NodeMaintenance for `node`).
    pub(crate) fn has_nm_for(&self, name: &str, node: &str) -> bool {
        if name.is_empty() {
            return self.maintained(node);
        }
        self.nms
            .get(&ObjectRef::new(name))
            .is_some_and(|nm| nm.spec.node_name == node)
    }

    /// The cluster's PodDisruptionBudgets that allow no disruption now and count pods
    /// (`status.expectedPods` > 0: one that covers no pod, such as upstream's fake etcd guard,
    /// holds no drain). Empty until the budget watch has listed: the warning they feed is
    /// advice, so it never waits.
    pub(crate) fn blocking_budgets(&self) -> Vec<crate::drain::Budget> {
        self.budgets
            .state()
            .iter()
            .filter(|pdb| {
                pdb.status
                    .as_ref()
                    .and_then(|s| s.expected_pods)
                    .is_some_and(|n| n > 0)
            })
            .map(|pdb| crate::drain::Budget::of(pdb))
            .filter(|b| b.allowed == 0 && b.selector.is_some())
            .collect()
    }

    /// The quorum inputs.
    pub(crate) fn quorum(&self) -> &QuorumStores {
        &self.quorum
    }

    /// True once the NodeMaintenance cache and the quorum caches have listed their objects;
    /// stays true through later reconnects (a cache then serves its last state, as
    /// controller-runtime's informers do). The Node cache is not among them: its list grows with
    /// the cluster, and until it is complete a CREATE reads its nodes live
    /// ([`Caches::nodes_synced`]).
    pub(crate) fn synced(&self) -> watch::Receiver<bool> {
        self.synced.clone()
    }
}

/// A NodeMaintenance watch event as the reservations need it: `(name, nodeName)` of an object the
/// cache now shows (added, changed or deleted), or a completed relist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum NmEvent {
    /// The cache now shows this object's latest state.
    Observed {
        /// `metadata.name`.
        name: String,
        /// `spec.nodeName`.
        node: String,
    },
    /// A (re)list completed; the cache holds exactly what it listed.
    Relisted,
}

/// Starts the caches of `platform` on `client` beside the process's Node watch `nodes`.
/// `on_nm_event` runs after each NodeMaintenance event has been applied to the cache (the
/// reservations end there). Returns the read handles and the tasks; [`Caches::synced`] turns
/// true once all have listed, `nodes` excepted (it has [`Caches::nodes_synced`]).
pub(crate) fn start(
    client: &Client,
    platform: Platform,
    nodes: NodeCache,
    on_nm_event: impl Fn(NmEvent) + Send + Sync + 'static,
) -> (Caches, CacheTasks) {
    let mut tasks = Vec::new();
    let mut synced = Vec::new();

    let (nms, t, s) = spawn_cache(
        "NodeMaintenances",
        Api::<NodeMaintenance>::all(client.clone()),
        watcher::Config::default(),
        strip_nm,
        move |ev: &watcher::Event<NodeMaintenance>| match ev {
            watcher::Event::Apply(nm) | watcher::Event::Delete(nm) => {
                on_nm_event(NmEvent::Observed {
                    name: nm.metadata.name.clone().unwrap_or_default(),
                    node: nm.spec.node_name.clone(),
                })
            }
            watcher::Event::InitDone => on_nm_event(NmEvent::Relisted),
            // During a relist the store swaps in the new state only at InitDone.
            watcher::Event::Init | watcher::Event::InitApply(_) => {}
        },
    );
    tasks.push(t);
    synced.push(s);

    // Not among the caches `synced` waits for: the budget warning is advice, and a CREATE never
    // waits for it.
    let (budgets_all, t, _) = spawn_cache(
        "PodDisruptionBudgets",
        Api::<PodDisruptionBudget>::all(client.clone()),
        watcher::Config::default(),
        strip_budget,
        |_| {},
    );
    tasks.push(t);

    // The guard budget is honoured on every platform (`docs/drain-contract.md` §9).
    let (budgets, t, s) = spawn_cache(
        "etcd guard budgets",
        Api::<PodDisruptionBudget>::namespaced(client.clone(), OPENSHIFT_ETCD_NAMESPACE),
        watcher::Config::default(),
        strip_budget,
        |_| {},
    );
    tasks.push(t);
    synced.push(s);
    let (pods, t, s) = spawn_cache(
        "etcd guard pods",
        Api::<Pod>::namespaced(client.clone(), OPENSHIFT_ETCD_NAMESPACE),
        watcher::Config::default(),
        strip_pod,
        |_| {},
    );
    tasks.push(t);
    synced.push(s);
    let quorum = match platform {
        Platform::Kubernetes => {
            let (etcd_pods, t, s) = spawn_cache(
                "etcd pods",
                Api::<Pod>::namespaced(client.clone(), ETCD_POD_NAMESPACE),
                watcher::Config::default().labels(ETCD_POD_SELECTOR),
                strip_pod,
                |_| {},
            );
            tasks.push(t);
            synced.push(s);
            QuorumStores::Kubernetes {
                etcd_pods,
                budgets,
                pods,
            }
        }
        Platform::OpenShift => QuorumStores::OpenShift { budgets, pods },
    };

    let (all_synced_tx, all_synced) = watch::channel(false);
    tasks.push(tokio::spawn(async move {
        for mut s in synced {
            if s.wait_for(|v| *v).await.is_err() {
                return;
            }
        }
        tracing::info!("admission caches synced");
        all_synced_tx.send_replace(true);
    }));
    (
        Caches {
            nodes,
            nms,
            budgets: budgets_all,
            quorum,
            synced: all_synced,
        },
        tasks.into_iter().map(AbortOnDropHandle::new).collect(),
    )
}

/// One reflector: watch `api` (retrying after the shared short watch back-off of
/// [`crate::watch::relist`], so a cache is back soon after an API server restart), strip each
/// object, store it, then hand the event to `on_event`. Returns the store, the task and a flag that turns true at the first
/// completed list.
fn spawn_cache<K>(
    what: &'static str,
    api: Api<K>,
    config: watcher::Config,
    strip: fn(&mut K),
    on_event: impl Fn(&watcher::Event<K>) + Send + Sync + 'static,
) -> (Store<K>, tokio::task::JoinHandle<()>, watch::Receiver<bool>)
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let (synced_tx, synced) = watch::channel(false);
    // Lists are served from the API server's watch cache as it stands (`resourceVersion=0`),
    // not after waiting for it to catch up with etcd: a consistent list of the quorum inputs
    // took 40 to 50 ms where this one takes 3, and `/readyz` waits for these lists. What that
    // waits for is the watch lag every later decision of these caches lives with anyway;
    // admission is built for it (the reservations, and duplicates harmless across it:
    // `docs/design.md §4`). kube sends `resourceVersion=0` only without a page size, and the
    // API server answers such a list whole from its cache in any case.
    let mut config = config.any_semantic();
    config.page_size = None;
    let events = watcher(api, config)
        .backoff(crate::watch::relist::watch_backoff())
        .modify(strip)
        .reflect(writer);
    let task = tokio::spawn(drive(what, events, move |ev| {
        if matches!(ev, watcher::Event::InitDone) {
            tracing::debug!(cache = what, "admission cache listed");
            synced_tx.send_replace(true);
        }
        on_event(&ev);
    }));
    (store, task, synced)
}

/// Feeds the events of `events` to `on_event` for as long as it runs, logging each failed watch
/// of the cache `what` (the watcher retries by itself).
pub(super) async fn drive<K>(
    what: &'static str,
    events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    on_event: impl Fn(watcher::Event<K>) + Send + 'static,
) {
    let mut events = std::pin::pin!(events);
    while let Some(ev) = events.next().await {
        match ev {
            Ok(ev) => on_event(ev),
            Err(e) => {
                tracing::warn!(cache = what, error = %e, "admission cache watch failed; retrying")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_stripped_budget_reads_as_the_whole_one_to_the_drain() {
        let full: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": "db", "namespace": "ns", "generation": 2,
                         "labels": {"a": "b"}, "annotations": {"c": "d"}},
            "spec": {"minAvailable": 3, "selector": {"matchLabels": {"app": "db"}},
                     "unhealthyPodEvictionPolicy": "AlwaysAllow"},
            "status": {"observedGeneration": 2, "disruptionsAllowed": 0, "desiredHealthy": 3,
                       "currentHealthy": 2, "expectedPods": 4,
                       "disruptedPods": {"db-0": "2026-01-01T00:00:00Z"}}
        }))
        .unwrap();
        let mut stripped = full.clone();
        strip_budget(&mut stripped);
        assert_eq!(
            crate::drain::Budget::of(&stripped),
            crate::drain::Budget::of(&full)
        );
        assert!(crate::drain::Budget::of(&stripped).always_allow_unhealthy);
    }

    #[test]
    fn nodes_keep_only_name_control_plane_labels_and_ready() {
        let mut node: Node = serde_json::from_value(json!({
            "metadata": {
                "name": "cp-0",
                "uid": "u",
                "resourceVersion": "7",
                "annotations": {"a": "b"},
                "labels": {"kubernetes.io/hostname": "cp-0", "node-role.kubernetes.io/control-plane": ""},
                "managedFields": [{"manager": "kubelet"}]
            },
            "spec": {"unschedulable": true, "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {
                "conditions": [
                    {"type": "MemoryPressure", "status": "False"},
                    {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "long text"}
                ],
                "images": [{"names": ["registry/image:tag"], "sizeBytes": 1}],
                "capacity": {"cpu": "4"}
            }
        }))
        .unwrap();
        strip_node(&mut node);
        assert_eq!(
            serde_json::to_value(&node).unwrap(),
            json!({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "cp-0", "labels": {"node-role.kubernetes.io/control-plane": ""}},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]}
            })
        );
        assert!(crate::admission::quorum::is_control_plane(&node));
        assert!(crate::admission::quorum::node_ready(&node));

        let mut worker: Node = serde_json::from_value(json!({
            "metadata": {"name": "w", "labels": {"kubernetes.io/hostname": "w"}}
        }))
        .unwrap();
        strip_node(&mut worker);
        assert_eq!(
            serde_json::to_value(&worker).unwrap(),
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "w"}})
        );
    }

    #[test]
    fn node_maintenances_keep_only_name_and_node() {
        let mut nm: NodeMaintenance = serde_json::from_value(json!({
            "apiVersion": "nodemaintenance.medik8s.io/v1beta1",
            "kind": "NodeMaintenance",
            "metadata": {"name": "nm-1", "finalizers": ["f"], "uid": "u"},
            "spec": {"nodeName": "n1", "reason": "kernel"},
            "status": {"phase": "Running", "pendingPods": ["a", "b"]}
        }))
        .unwrap();
        strip_nm(&mut nm);
        assert_eq!(nm.metadata.name.as_deref(), Some("nm-1"));
        assert_eq!(nm.spec.node_name, "n1");
        assert_eq!(nm.spec.reason, None);
        assert_eq!(nm.status, None);
        assert_eq!(nm.metadata.finalizers, None);
    }

    #[test]
    fn pods_and_budgets_keep_what_the_quorum_rules_read() {
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "guard-0", "namespace": "openshift-etcd", "labels": {"app": "guard"}, "uid": "u"},
            "spec": {"nodeName": "cp-0", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "Unknown"}]}
        }))
        .unwrap();
        strip_pod(&mut pod);
        assert_eq!(
            serde_json::to_value(&pod).unwrap(),
            json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "guard-0", "namespace": "openshift-etcd", "labels": {"app": "guard"}},
                "spec": {"containers": [], "nodeName": "cp-0"},
                "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}
            })
        );
        let mut pdb: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": "etcd-guard-pdb", "namespace": "openshift-etcd"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "guard"}}},
            "status": {"disruptionsAllowed": 1, "currentHealthy": 3, "desiredHealthy": 2, "expectedPods": 3}
        }))
        .unwrap();
        strip_budget(&mut pdb);
        assert_eq!(
            pdb.spec.as_ref().and_then(|s| s.selector.as_ref()),
            Some(&serde_json::from_value(json!({"matchLabels": {"app": "guard"}})).unwrap())
        );
        assert_eq!(
            pdb.status.as_ref().and_then(|s| s.disruptions_allowed),
            Some(1)
        );
        assert_eq!(
            pdb.spec.as_ref().and_then(|s| s.min_available.as_ref()),
            None
        );
    }
}

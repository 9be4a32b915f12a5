//! The process's one Node watch (`docs/design.md §4`, `§7`): the admission rules and the
//! controller's triggers both read it, so every node is listed and parsed once, not once per
//! reader.
//!
//! Only what a reader needs is parsed ([`WatchedNode`]): name, uid, resourceVersion, labels,
//! annotations, `spec.unschedulable`, `spec.taints` and the `Ready` condition's status. The
//! rest of a Node (images, nodeInfo, capacity, the other conditions, managedFields: most of its
//! 9 KB on a real cluster) is skipped while parsing and never allocated. The watch speaks
//! protobuf ([`protobuf`]) when the API server streams initial lists, since encoding JSON is
//! most of what a large cluster's start-up waits for; else it is kube's watcher over JSON, with
//! pages of [`NODE_PAGE_SIZE`].
//!
//! Each node is then kept as a [`NodeEntry`] of a few bytes (control-plane role, `Ready`, a
//! fingerprint of what maintenance reads, whether it carries a lease-holder annotation). The
//! controller subscribes to the names of nodes whose fingerprint changed ([`NodeChange`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::{mpsc, watch};

mod protobuf;
mod watched;

pub(crate) use watched::WatchedNode;

/// Node labels that mark a control-plane node; presence is enough, any value (upstream). The
/// watch keeps a node's role as an index into this list ([`NodeEntry::control_plane`]); the
/// admission rules read the same labels from a Node.
pub(crate) const CONTROL_PLANE_LABELS: [&str; 2] = [
    "node-role.kubernetes.io/control-plane",
    "node-role.kubernetes.io/master",
];

/// Objects per page of the initial Node list and relists when the API server cannot stream
/// them (see [`streams_initial_lists`]). A page's response body is held whole until it is
/// parsed, so at about 9 KB per node kube's default of 500 would make one page of 4.5 MB the
/// largest thing in the process on a big cluster; 100 keeps it under 1 MB, at one round trip
/// per 100 nodes.
pub(crate) const NODE_PAGE_SIZE: u32 = 100;

/// A hash of the parts of a Node that maintenance reads or writes: `spec.unschedulable`,
/// `spec.taints`, labels, annotations, uid and whether it shuts down (a drain halts, then
/// resumes, on its change). Equal fingerprints mean a watch event changed
/// nothing a reconcile would act on (typically a status heartbeat).
pub(crate) fn maintenance_fingerprint(node: &WatchedNode) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let spec = node.spec.as_ref();
    spec.and_then(|s| s.unschedulable).hash(&mut h);
    for t in spec.and_then(|s| s.taints.as_deref()).unwrap_or_default() {
        (&t.key, &t.value, &t.effect).hash(&mut h);
    }
    node.metadata.labels.hash(&mut h);
    node.metadata.annotations.hash(&mut h);
    node.metadata.uid.hash(&mut h);
    node.shutting_down.hash(&mut h);
    h.finish()
}

/// Status of a node's `Ready` condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ready {
    /// `True`.
    True,
    /// `False`.
    False,
    /// `Unknown`, or any other value.
    Unknown,
}

impl Ready {
    fn parse(s: &str) -> Self {
        match s {
            "True" => Ready::True,
            "False" => Ready::False,
            _ => Ready::Unknown,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Ready::True => "True",
            Ready::False => "False",
            Ready::Unknown => "Unknown",
        }
    }
}

/// What is kept of one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NodeEntry {
    /// Index in [`CONTROL_PLANE_LABELS`] of the role label the node carries; `None` for a
    /// worker.
    pub control_plane: Option<u8>,
    /// The `Ready` condition's status; `None` when the node has no such condition.
    pub ready: Option<Ready>,
    /// [`maintenance_fingerprint`].
    pub fingerprint: u64,
    /// The node carries a NodeMaintenance's mark: [`crate::node::HOLDER_ANNOTATION`] (its
    /// record) or a Node lifecycle condition that is True ([`WatchedNode::lifecycle`]), either
    /// of which the orphan sweep settles when that NodeMaintenance is gone.
    pub holder: bool,
    /// The node's `GracefulNodeShutdownInProgress` is True ([`WatchedNode::shutting_down`]).
    pub shutting_down: bool,
    /// Bit `i` set: the `i`-th node drain budget (`--max-parallel-drains-for`) selects the node.
    pub budgets: u32,
}

impl NodeEntry {
    /// The entry of `node`.
    pub(crate) fn of(node: &WatchedNode) -> Self {
        let labels = node.metadata.labels.as_ref();
        let control_plane = CONTROL_PLANE_LABELS
            .iter()
            .position(|k| labels.is_some_and(|l| l.contains_key(*k)))
            .map(|i| i as u8);
        NodeEntry {
            control_plane,
            ready: node.ready.as_deref().map(Ready::parse),
            fingerprint: maintenance_fingerprint(node),
            holder: node.lifecycle
                || node
                    .metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(crate::node::HOLDER_ANNOTATION)),
            shutting_down: node.shutting_down,
            budgets: 0,
        }
    }

    /// The entry of `node` with the node drain budgets of `budgets` that select it.
    fn with_budgets(node: &WatchedNode, budgets: &[crate::policy::NodeBudget]) -> Self {
        let labels = node.metadata.labels.as_ref();
        let mask = budgets
            .iter()
            .enumerate()
            .filter(|(_, b)| b.selects(labels))
            .fold(0u32, |m, (i, _)| m | 1 << i);
        Self {
            budgets: mask,
            ..Self::of(node)
        }
    }

    /// A `Node` with only `name`, the control-plane role label (empty value) and the `Ready`
    /// condition's status: what the admission rules read.
    pub(crate) fn to_node(self, name: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                labels: self.control_plane.map(|i| {
                    BTreeMap::from([(
                        CONTROL_PLANE_LABELS[usize::from(i)].to_string(),
                        String::new(),
                    )])
                }),
                ..ObjectMeta::default()
            },
            spec: None,
            status: self.ready.map(|r| NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: r.as_str().into(),
                    ..NodeCondition::default()
                }]),
                ..NodeStatus::default()
            }),
        }
    }
}

/// A node whose maintenance fingerprint changed, that appeared, or that is gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NodeChange {
    /// `metadata.name`.
    pub name: String,
    /// The node now carries a NodeMaintenance's mark ([`NodeEntry::holder`]; false once
    /// deleted).
    pub holder: bool,
}

struct Inner {
    nodes: RwLock<HashMap<Box<str>, NodeEntry>>,
    /// The node drain budgets whose selectors each entry is matched against (at most 32).
    budgets: Arc<[crate::policy::NodeBudget]>,
    subscribers: Mutex<Vec<mpsc::UnboundedSender<NodeChange>>>,
    synced: watch::Receiver<bool>,
    synced_tx: watch::Sender<bool>,
}

/// Read handle of the Node watch. Cheap to clone.
#[derive(Clone)]
pub(crate) struct NodeCache(Arc<Inner>);

impl std::fmt::Debug for NodeCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeCache")
            .field("nodes", &self.len())
            .field("synced", &*self.0.synced.borrow())
            .finish()
    }
}

/// The task that keeps a [`NodeCache`] current; dropping this stops it.
pub(crate) type NodeWatchTask = tokio_util::task::AbortOnDropHandle<()>;

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}

impl NodeCache {
    /// The entry of node `name`, if the cache has it.
    pub(crate) fn get(&self, name: &str) -> Option<NodeEntry> {
        read(&self.0.nodes).get(name).copied()
    }

    /// `(name, entry)` of every node `keep` selects.
    pub(crate) fn filter(&self, keep: impl Fn(&NodeEntry) -> bool) -> Vec<(String, NodeEntry)> {
        read(&self.0.nodes)
            .iter()
            .filter(|(_, e)| keep(e))
            .map(|(n, e)| (n.to_string(), *e))
            .collect()
    }

    /// Number of nodes cached.
    pub(crate) fn len(&self) -> usize {
        read(&self.0.nodes).len()
    }

    /// Number of nodes cached that `keep` selects.
    pub(crate) fn count(&self, keep: impl Fn(&NodeEntry) -> bool) -> usize {
        read(&self.0.nodes).values().filter(|e| keep(e)).count()
    }

    /// True once the first list completed; stays true through later relists (the cache serves
    /// its last state meanwhile).
    pub(crate) fn synced(&self) -> watch::Receiver<bool> {
        self.0.synced.clone()
    }

    /// Changes from now on, starting with every cached node that carries a lease-holder
    /// annotation (so a new subscriber sees the records it may have to clean up). Nodes of the
    /// first list are reported only when they carry that annotation; later changes, relist
    /// differences and deletions always.
    pub(crate) fn subscribe(&self) -> mpsc::UnboundedReceiver<NodeChange> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut subs = self.0.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        for (name, _) in self.filter(|e| e.holder) {
            let _ = tx.send(NodeChange { name, holder: true });
        }
        subs.push(tx);
        rx
    }

    fn notify(&self, change: NodeChange) {
        self.0
            .subscribers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|tx| tx.send(change.clone()).is_ok());
    }

    /// An empty cache, not synced, whose entries record which of `budgets` (at most 32) select
    /// their node ([`NodeEntry::budgets`]); [`watch`] fills it.
    pub(crate) fn new(budgets: Arc<[crate::policy::NodeBudget]>) -> Self {
        let (synced_tx, synced) = watch::channel(false);
        NodeCache(Arc::new(Inner {
            nodes: RwLock::default(),
            budgets,
            subscribers: Mutex::default(),
            synced,
            synced_tx,
        }))
    }
}

/// Longest wait of the Node watch for `after` ([`watch`]): the controller reads the Node
/// cache, and must not depend on the admission caches syncing.
pub(crate) const START_AFTER_MAX: Duration = Duration::from_secs(2);

/// Starts the Node watch that fills `cache` once `after` reads true (or its sender is gone,
/// or [`START_AFTER_MAX`] passed): probes whether the API server streams initial lists, then
/// watches, retrying after the shared watch back-off (`watch::relist`). Must run inside a
/// tokio runtime.
///
/// `after` is the admission caches' sync: the first list of thousands of nodes kept the API
/// server and both cores busy while the small lists readiness waits for queued behind it
/// (`cargo bench --bench scale`, start-to-ready at 5,000 nodes); readiness never waits for
/// this one.
pub(crate) fn watch(
    client: &Client,
    cache: &NodeCache,
    mut after: watch::Receiver<bool>,
) -> NodeWatchTask {
    let (client, cache) = (client.clone(), cache.clone());
    NodeWatchTask::new(tokio::spawn(async move {
        let _ = tokio::time::timeout(START_AFTER_MAX, after.wait_for(|v| *v)).await;
        drive(client, cache).await;
    }))
}

async fn drive(client: Client, cache: NodeCache) {
    let synced = &cache.0.synced_tx;
    let api: Api<WatchedNode> = Api::all(client.clone());
    type Events = std::pin::Pin<
        Box<dyn futures::Stream<Item = Result<watcher::Event<WatchedNode>, watcher::Error>> + Send>,
    >;
    // Streamed initial lists come in protobuf (`protobuf`: a third of the API server's JSON
    // encoding time); a server without them gets kube's watcher with paged JSON lists.
    let forced_json = forced_json();
    let protobuf = !forced_json && streams_initial_lists(&api).await;
    let encoding = if protobuf { "protobuf" } else { "json" };
    tracing::info!(
        encoding,
        forced = forced_json,
        "Node watch: {}",
        if protobuf {
            "streamed initial lists, protobuf"
        } else {
            "paged JSON lists"
        }
    );
    let events: Events = if protobuf {
        Box::pin(protobuf::watch(client))
    } else {
        Box::pin(watcher(
            api,
            watcher::Config::default().page_size(NODE_PAGE_SIZE),
        ))
    };
    let mut events = std::pin::pin!(events.backoff(crate::watch::relist::watch_backoff()));
    // A relist's nodes, swapped in whole at its end.
    let mut listing: HashMap<Box<str>, NodeEntry> = HashMap::new();
    while let Some(ev) = events.next().await {
        match ev {
            Ok(watcher::Event::Init) => listing = HashMap::new(),
            Ok(watcher::Event::InitApply(n)) => {
                let name = n.metadata.name.clone().unwrap_or_default();
                listing.insert(name.into(), NodeEntry::with_budgets(&n, &cache.0.budgets));
            }
            Ok(watcher::Event::InitDone) => {
                listing.shrink_to_fit();
                let first = !*synced.borrow();
                let old =
                    std::mem::replace(&mut *write(&cache.0.nodes), std::mem::take(&mut listing));
                let changes = relist_changes(first, &old, &read(&cache.0.nodes));
                for c in changes {
                    cache.notify(c);
                }
                // Trimmed before the sync is told: the pod cache lists once it is (admission).
                super::release_freed_heap();
                if first {
                    tracing::info!(nodes = cache.len(), encoding, "Node watch listed all nodes");
                    synced.send_replace(true);
                }
            }
            Ok(watcher::Event::Apply(n)) => {
                let name = n.metadata.name.clone().unwrap_or_default();
                let entry = NodeEntry::with_budgets(&n, &cache.0.budgets);
                let before = write(&cache.0.nodes).insert(name.as_str().into(), entry);
                if before.map(|b| b.fingerprint) != Some(entry.fingerprint) {
                    cache.notify(NodeChange {
                        name,
                        holder: entry.holder,
                    });
                }
            }
            Ok(watcher::Event::Delete(n)) => {
                let name = n.metadata.name.clone().unwrap_or_default();
                write(&cache.0.nodes).remove(name.as_str());
                cache.notify(NodeChange {
                    name,
                    holder: false,
                });
            }
            Err(e) => tracing::warn!(error = %e, "Node watch failed; retrying"),
        }
    }
}

/// What a completed list tells subscribers: on the `first` list only the nodes that carry a
/// NodeMaintenance's mark ([`NodeEntry::holder`]); on a relist every node that is new or whose
/// fingerprint changed, and every node that is gone (a deletion missed while disconnected).
fn relist_changes(
    first: bool,
    old: &HashMap<Box<str>, NodeEntry>,
    new: &HashMap<Box<str>, NodeEntry>,
) -> Vec<NodeChange> {
    let mut changes: Vec<NodeChange> = new
        .iter()
        .filter(|(name, e)| {
            if first {
                e.holder
            } else {
                old.get(*name).map(|o| o.fingerprint) != Some(e.fingerprint)
            }
        })
        .map(|(name, e)| NodeChange {
            name: name.to_string(),
            holder: e.holder,
        })
        .collect();
    changes.extend(
        old.keys()
            .filter(|name| !new.contains_key(*name))
            .map(|name| NodeChange {
                name: name.to_string(),
                holder: false,
            }),
    );
    changes
}

/// Environment variable that, set to `json`, makes the Node watch use kube's watcher with paged
/// JSON lists even when the API server streams initial lists: the path of servers older than
/// Kubernetes 1.32, which the end-to-end tests (control plane 1.36) would otherwise never run.
/// A test and support setting, not a flag: it changes no behaviour but the wire encoding.
pub(crate) const FORCE_JSON_ENV: &str = "NMO_NODE_WATCH_ENCODING";

/// Whether [`FORCE_JSON_ENV`] asks for the JSON path.
fn forced_json() -> bool {
    std::env::var(FORCE_JSON_ENV).is_ok_and(|v| v.eq_ignore_ascii_case("json"))
}

/// Whether the API server streams a watch's initial list (`sendInitialEvents`, Kubernetes'
/// WatchList feature): then the Node watch gets every node as one watch event at a time, parsed
/// one by one, with no page round trips. Probed with a watch that selects no node: a server
/// that supports it ends the (empty) initial events with a bookmark annotated
/// `k8s.io/initial-events-end`; one that does not refuses the parameters or sends no such
/// bookmark within 2 s. Any doubt means paged lists.
pub(crate) async fn streams_initial_lists(nodes: &Api<WatchedNode>) -> bool {
    use kube::api::{WatchEvent, WatchParams};
    let probe = async {
        let wp = WatchParams::streaming_lists().labels("nodemaintenance.medik8s.io/no-such-label");
        let mut events = nodes.watch(&wp, "0").await.ok()?.boxed();
        while let Some(ev) = events.next().await {
            match ev.ok()? {
                WatchEvent::Bookmark(b) => {
                    return Some(
                        b.metadata
                            .annotations
                            .contains_key("k8s.io/initial-events-end"),
                    );
                }
                WatchEvent::Error(_) => return Some(false),
                _ => {}
            }
        }
        Some(false)
    };
    let streams = tokio::time::timeout(Duration::from_secs(2), probe)
        .await
        .ok()
        .flatten()
        .unwrap_or(false);
    tracing::debug!(streams, "Node watch initial list strategy probed");
    streams
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(unschedulable: bool, heartbeat: &str) -> WatchedNode {
        serde_json::from_value(json!({
            "metadata": {"name": "n", "uid": "u", "labels": {"a": "b"},
                "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]},
            "spec": {"unschedulable": unschedulable, "taints": [{"key": "k", "effect": "NoSchedule"}],
                "podCIDR": "10.0.0.0/24"},
            "status": {
                "conditions": [
                    {"type": "MemoryPressure", "status": "False"},
                    {"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat, "message": "m"}
                ],
                "images": [{"names": ["registry/image:tag"], "sizeBytes": 1}],
                "capacity": {"cpu": "4"}
            }
        }))
        .unwrap()
    }

    #[test]
    fn fingerprint_ignores_heartbeats_and_sees_an_uncordon() {
        let a = node(true, "2026-01-01T00:00:00Z");
        let heartbeat = node(true, "2026-01-01T00:00:10Z");
        let uncordoned = node(false, "2026-01-01T00:00:10Z");
        assert_eq!(
            maintenance_fingerprint(&a),
            maintenance_fingerprint(&heartbeat)
        );
        assert_ne!(
            maintenance_fingerprint(&a),
            maintenance_fingerprint(&uncordoned)
        );
        let mut untainted = a.clone();
        untainted.spec.as_mut().unwrap().taints = None;
        assert_ne!(
            maintenance_fingerprint(&a),
            maintenance_fingerprint(&untainted)
        );
    }

    #[test]
    fn watched_node_keeps_what_the_readers_need_and_skips_the_rest() {
        let n = node(true, "2026-01-01T00:00:00Z");
        assert_eq!(n.metadata.name.as_deref(), Some("n"));
        assert_eq!(n.metadata.uid.as_deref(), Some("u"));
        assert_eq!(n.metadata.labels.as_ref().unwrap()["a"], "b");
        assert!(n.metadata.managed_fields.is_none());
        let spec = n.spec.as_ref().unwrap();
        assert_eq!(spec.unschedulable, Some(true));
        assert_eq!(spec.taints.as_ref().unwrap().len(), 1);
        assert_eq!(spec.pod_cidr, None);
        assert_eq!(n.ready.as_deref(), Some("True"));
        assert_eq!(kube::ResourceExt::name_any(&n), "n");
        assert_eq!(
            <WatchedNode as kube::Resource>::url_path(&(), None),
            "/api/v1/nodes"
        );
        let bare: WatchedNode = serde_json::from_value(json!({"metadata": {"name": "w"}})).unwrap();
        assert_eq!(bare.ready, None);
        assert!(bare.spec.is_none());
    }

    #[test]
    fn an_entry_keeps_role_ready_and_holder_and_rebuilds_a_stripped_node() {
        let cp: WatchedNode = serde_json::from_value(json!({
            "metadata": {"name": "cp-0", "labels": {"kubernetes.io/hostname": "cp-0",
                "node-role.kubernetes.io/master": "x"},
                "annotations": {(crate::node::HOLDER_ANNOTATION): "nm-1"}},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]}
        }))
        .unwrap();
        let e = NodeEntry::of(&cp);
        assert_eq!(e.control_plane, Some(1));
        assert_eq!(e.ready, Some(Ready::False));
        assert!(e.holder);
        assert_eq!(
            serde_json::to_value(e.to_node("cp-0")).unwrap(),
            json!({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "cp-0", "labels": {"node-role.kubernetes.io/master": ""}},
                "status": {"conditions": [{"type": "Ready", "status": "False"}]}
            })
        );
        let w: WatchedNode = serde_json::from_value(json!({"metadata": {"name": "w"}})).unwrap();
        let e = NodeEntry::of(&w);
        assert_eq!((e.control_plane, e.ready, e.holder), (None, None, false));
        // A maintenance at stage Idle leaves no record, only a True lifecycle condition.
        let idle: WatchedNode = serde_json::from_value(json!({
            "metadata": {"name": "i"},
            "status": {"conditions": [{"type": "MaintenancePlanned", "status": "True"}]}
        }))
        .unwrap();
        assert!(NodeEntry::of(&idle).holder);
        let ended: WatchedNode = serde_json::from_value(json!({
            "metadata": {"name": "i"},
            "status": {"conditions": [{"type": "MaintenancePlanned", "status": "False"}]}
        }))
        .unwrap();
        assert!(!NodeEntry::of(&ended).holder);
        assert_eq!(
            serde_json::to_value(e.to_node("w")).unwrap(),
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "w"}})
        );
    }

    #[test]
    fn a_relist_reports_changed_new_and_vanished_nodes_and_the_first_list_only_holders() {
        let entry = |fingerprint, holder| NodeEntry {
            control_plane: None,
            ready: None,
            fingerprint,
            holder,
            shutting_down: false,
            budgets: 0,
        };
        let old: HashMap<Box<str>, NodeEntry> = [
            ("same".into(), entry(1, false)),
            ("changed".into(), entry(2, true)),
            ("gone".into(), entry(3, true)),
        ]
        .into();
        let new: HashMap<Box<str>, NodeEntry> = [
            ("same".into(), entry(1, false)),
            ("changed".into(), entry(20, false)),
            ("added".into(), entry(4, true)),
        ]
        .into();
        let mut got = relist_changes(false, &old, &new);
        got.sort_by(|a, b| a.name.cmp(&b.name));
        let change = |name: &str, holder| NodeChange {
            name: name.into(),
            holder,
        };
        assert_eq!(
            got,
            vec![
                change("added", true),
                change("changed", false),
                change("gone", false)
            ]
        );
        assert_eq!(
            relist_changes(true, &HashMap::new(), &new),
            vec![change("added", true)]
        );
    }
}

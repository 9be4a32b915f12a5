//! The pod cache the CREATE warnings read (`super::warnings`, `docs/compat.md §6`), so that a
//! CREATE is answered without a request to the API server: every scheduled, unfinished pod of
//! the cluster, stripped to a [`DrainPod`] (what the drain's own decision, [`crate::drain::decide()`],
//! reads) plus its node and `Ready` status, indexed by node and by controller; and the
//! ReplicaSets that a Deployment controls, from a metadata-only watch, so a pod's Deployment is
//! known without a GET.
//!
//! Driven by kube-runtime watchers rather than kept in a reflector `Store`, whose only read is a
//! clone of every object: a CREATE reads the pods of one node and of a few workloads, and at
//! thousands of CREATEs a second a scan of every pod of the cluster per CREATE would be the cost.
//!
//! Until both have listed once, [`PodCache::synced`] is false and the warnings that need them
//! are skipped (logged): the webhook's readiness does not wait for a list that grows with the
//! cluster's pods.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio_util::task::AbortOnDropHandle;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::watch;

use crate::drain::pod::{DrainPod, OwnerRef, PodMarks};

/// A pod as the warnings read it.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct WarnPod {
    /// `spec.nodeName`.
    pub node: String,
    /// `Ready` condition `True` and not being deleted: a replica that serves.
    pub ready: bool,
    /// What the drain's decision reads: namespace, name, uid, labels, the controller reference,
    /// the drain's annotations, whether an emptyDir is mounted, phase, `deletionTimestamp`.
    pub pod: DrainPod,
}

impl WarnPod {
    /// `pod` stripped; `None` for a pod not scheduled to a node or finished (no drain touches
    /// it, and it is no ready replica).
    pub(crate) fn of(pod: Pod) -> Option<Self> {
        let spec = pod.spec?;
        let node = spec.node_name.filter(|n| !n.is_empty())?;
        let status = pod.status.unwrap_or_default();
        if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
            return None;
        }
        let meta = pod.metadata;
        let ready_condition = status
            .conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let ready = meta.deletion_timestamp.is_none() && ready_condition;
        let annotations = meta.annotations.unwrap_or_default();
        let marks = PodMarks {
            mirror: annotations.contains_key(crate::drain::MIRROR_ANNOTATION),
            eviction_in_progress: annotations
                .contains_key(crate::drain::EVICTION_IN_PROGRESS_ANNOTATION),
            request_evict_only: annotations
                .contains_key(crate::drain::REQUEST_EVICT_ONLY_ANNOTATION),
            opt_out: crate::drain::opt_out::marks(&annotations),
        };
        let mut drain = DrainPod::default();
        drain.metadata.name = meta.name.unwrap_or_default();
        drain.metadata.namespace = meta.namespace.unwrap_or_default();
        drain.metadata.uid = meta.uid;
        drain.metadata.deletion_timestamp = meta.deletion_timestamp;
        drain.metadata.labels = meta.labels.unwrap_or_default();
        drain.metadata.marks = marks;
        drain.metadata.owner_references = meta
            .owner_references
            .unwrap_or_default()
            .into_iter()
            .filter(|o| o.controller == Some(true))
            .map(|o| OwnerRef {
                api_version: o.api_version,
                kind: o.kind,
                name: o.name,
                uid: o.uid,
                controller: Some(true),
            })
            .collect();
        // Tolerations and priority only place an evicted pod among the drain's stages, or keep a
        // replacement that arrived after the drain started: neither applies before it starts.
        drain.spec.empty_dir = spec
            .volumes
            .unwrap_or_default()
            .iter()
            .any(|v| v.empty_dir.is_some());
        drain.status.phase = status.phase;
        drain.status.ready = ready_condition;
        Some(Self {
            node,
            ready,
            pod: drain,
        })
    }

    fn uid(&self) -> &str {
        self.pod.metadata.uid.as_deref().unwrap_or_default()
    }

    fn controller_uid(&self) -> Option<&str> {
        self.pod.controller_ref().map(|o| o.uid.as_str())
    }
}

/// A workload the last-ready-replica warning names.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Workload {
    /// `Deployment` or `StatefulSet`.
    pub kind: &'static str,
    /// Its namespace (a pod's).
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its UID.
    pub uid: String,
}

/// The pods, by UID, indexed by node and by controller UID.
#[derive(Default)]
struct Pods {
    by_uid: HashMap<String, Arc<WarnPod>>,
    by_node: HashMap<String, HashSet<String>>,
    by_owner: HashMap<String, HashSet<String>>,
}

fn unindex(index: &mut HashMap<String, HashSet<String>>, key: &str, uid: &str) {
    if let Some(set) = index.get_mut(key) {
        set.remove(uid);
        if set.is_empty() {
            index.remove(key);
        }
    }
}

impl Pods {
    fn remove(&mut self, uid: &str) {
        if let Some(old) = self.by_uid.remove(uid) {
            unindex(&mut self.by_node, &old.node, uid);
            if let Some(owner) = old.controller_uid() {
                unindex(&mut self.by_owner, owner, uid);
            }
        }
    }

    fn upsert(&mut self, pod: Pod) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        self.remove(&uid);
        let Some(p) = WarnPod::of(pod) else {
            return;
        };
        let uid = p.uid().to_string();
        self.by_node
            .entry(p.node.clone())
            .or_default()
            .insert(uid.clone());
        if let Some(owner) = p.controller_uid() {
            self.by_owner
                .entry(owner.to_string())
                .or_default()
                .insert(uid.clone());
        }
        self.by_uid.insert(uid, Arc::new(p));
    }
}

/// ReplicaSets a Deployment controls: ReplicaSet UID to the Deployment's name and UID, and the
/// Deployment's ReplicaSets.
#[derive(Default)]
struct ReplicaSets {
    deployment_of: HashMap<String, (String, String)>,
    of_deployment: HashMap<String, HashSet<String>>,
}

impl ReplicaSets {
    fn remove(&mut self, uid: &str) {
        if let Some((_, d)) = self.deployment_of.remove(uid) {
            unindex(&mut self.of_deployment, &d, uid);
        }
    }

    fn upsert(&mut self, rs: PartialObjectMeta<ReplicaSet>) {
        let uid = rs.metadata.uid.clone().unwrap_or_default();
        self.remove(&uid);
        let deployment = rs
            .metadata
            .owner_references
            .unwrap_or_default()
            .into_iter()
            .find(|o| o.controller == Some(true) && o.kind == "Deployment");
        if let Some(d) = deployment {
            self.of_deployment
                .entry(d.uid.clone())
                .or_default()
                .insert(uid.clone());
            self.deployment_of.insert(uid, (d.name, d.uid));
        }
    }
}

/// A table a watch keeps: the live state, and the one a relist is building (swapped in whole
/// when the relist completes, as a reflector's store does).
#[derive(Default)]
struct Table<T> {
    live: T,
    next: Option<T>,
}

/// Applies `ev` to `table`; true when a (re)list completed.
fn apply<T: Default, K>(
    table: &RwLock<Table<T>>,
    ev: watcher::Event<K>,
    upsert: fn(&mut T, K),
    uid: fn(&K) -> String,
    remove: fn(&mut T, &str),
) -> bool {
    let mut t = table.write().unwrap_or_else(|e| e.into_inner());
    match ev {
        watcher::Event::Apply(o) => upsert(&mut t.live, o),
        watcher::Event::Delete(o) => remove(&mut t.live, &uid(&o)),
        watcher::Event::Init => t.next = Some(T::default()),
        watcher::Event::InitApply(o) => upsert(t.next.get_or_insert_with(T::default), o),
        watcher::Event::InitDone => {
            t.live = t.next.take().unwrap_or_default();
            return true;
        }
    }
    false
}

/// Read handle of the pod cache. Cheap to clone.
#[derive(Clone)]
pub(crate) struct PodCache {
    pods: Arc<RwLock<Table<Pods>>>,
    replica_sets: Arc<RwLock<Table<ReplicaSets>>>,
    synced: watch::Receiver<bool>,
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

impl PodCache {
    /// True once pods and ReplicaSets have both been listed once; stays true through relists.
    pub(crate) fn synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// The cached pods on `node`, by namespace and name.
    pub(crate) fn on_node(&self, node: &str) -> Vec<Arc<WarnPod>> {
        let t = read(&self.pods);
        let mut pods: Vec<Arc<WarnPod>> = t
            .live
            .by_node
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|uid| t.live.by_uid.get(uid).cloned())
            .collect();
        pods.sort_by(|a, b| {
            (&a.pod.metadata.namespace, &a.pod.metadata.name)
                .cmp(&(&b.pod.metadata.namespace, &b.pod.metadata.name))
        });
        pods
    }

    /// The Deployment (through its ReplicaSet) or StatefulSet that controls `pod`, if any.
    pub(crate) fn workload(&self, pod: &DrainPod) -> Option<Workload> {
        let owner = pod.controller_ref()?;
        let group = crate::drain::pod::api_group(&owner.api_version);
        let namespace = pod.metadata.namespace.clone();
        match (group, owner.kind.as_str()) {
            ("apps", "StatefulSet") => Some(Workload {
                kind: "StatefulSet",
                namespace,
                name: owner.name.clone(),
                uid: owner.uid.clone(),
            }),
            ("apps", "ReplicaSet") => {
                let rs = read(&self.replica_sets);
                let (name, uid) = rs.live.deployment_of.get(&owner.uid)?.clone();
                Some(Workload {
                    kind: "Deployment",
                    namespace,
                    name,
                    uid,
                })
            }
            _ => None,
        }
    }

    /// Whether `workload` has a ready pod on a node other than `node`.
    pub(crate) fn ready_elsewhere(&self, workload: &Workload, node: &str) -> bool {
        let owners: Vec<String> = if workload.kind == "Deployment" {
            read(&self.replica_sets)
                .live
                .of_deployment
                .get(&workload.uid)
                .map(|s| s.iter().cloned().collect())
                .unwrap_or_default()
        } else {
            vec![workload.uid.clone()]
        };
        let t = read(&self.pods);
        owners
            .iter()
            .filter_map(|o| t.live.by_owner.get(o))
            .flatten()
            .filter_map(|uid| t.live.by_uid.get(uid))
            .any(|p| p.ready && p.node != node)
    }

    /// Pods cached (for the log line of a completed list).
    fn len(&self) -> usize {
        read(&self.pods).live.by_uid.len()
    }
}

/// The tasks that keep a [`PodCache`] current; dropping this stops them.
pub(crate) type PodCacheTasks = Vec<tokio_util::task::AbortOnDropHandle<()>>;

/// Longest wait of the pod cache for the Node watch's first list ([`start`]); past it the pods
/// are listed anyway, so a Node watch that cannot list costs the warnings nothing but this.
pub(crate) const NODE_LIST_WAIT_MAX: Duration = Duration::from_secs(30);

/// Starts the pod and ReplicaSet watches on `client` once `after` reads true (the admission
/// caches that readiness waits for have listed) and then `nodes_listed` reads true (the Node
/// watch's first list; at most [`NODE_LIST_WAIT_MAX`]): a list of every pod of the cluster is
/// not worth slowing the start for, since the warnings are skipped until it completes anyway.
/// Not beside the Node watch's list either: the two decoded at once left partly used pages
/// that trimming could not release (an idle operator at 5,000 nodes and 1,000 pods: 24.7 MiB
/// with them at once, 23.9 one after the other, 19.3 with `--pod-warnings=false`;
/// `BENCH_SCALE_ONLY=start cargo bench --bench scale`).
pub(crate) fn start(
    client: &Client,
    after: watch::Receiver<bool>,
    nodes_listed: watch::Receiver<bool>,
) -> (PodCache, PodCacheTasks) {
    let (go_tx, go) = watch::channel(false);
    let gate = tokio::spawn(async move {
        if in_turn(after, nodes_listed, NODE_LIST_WAIT_MAX).await {
            go_tx.send_replace(true);
        }
    });
    let after = go;
    let pods: Arc<RwLock<Table<Pods>>> = Arc::default();
    let replica_sets: Arc<RwLock<Table<ReplicaSets>>> = Arc::default();
    let (pods_listed_tx, mut pods_listed) = watch::channel(false);
    let (rs_listed_tx, mut rs_listed) = watch::channel(false);
    let (synced_tx, synced) = watch::channel(false);
    // Pages of 100, so the first list of a cluster's pods is never held whole (the server leaves
    // out unscheduled and finished pods), and the heap the pages' decoding freed is handed back
    // once the list is complete: without that, the allocator kept it, and a replica grew by
    // 34.7 MiB at 5,000 pods with kube's default of 500 a page, by 10.8 with 50 (`cargo bench
    // --bench admission` with `BENCH_PODS=5000`).
    let config = watcher::Config::default()
        .fields("spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed")
        .page_size(100);
    let pod_events = watcher(Api::<Pod>::all(client.clone()), config)
        .backoff(crate::watch::relist::watch_backoff());
    let table = pods.clone();
    let pod_task = tokio::spawn(drive("pods", after.clone(), pod_events, move |ev| {
        apply(
            &table,
            ev,
            Pods::upsert,
            |p| p.metadata.uid.clone().unwrap_or_default(),
            Pods::remove,
        )
        .then(|| {
            crate::watch::release_freed_heap();
            pods_listed_tx.send_replace(true)
        });
    }));
    // Metadata only: the controller reference is all that is read of a ReplicaSet.
    let rs_events = watcher(
        Api::<PartialObjectMeta<ReplicaSet>>::all(client.clone()),
        watcher::Config::default(),
    )
    .backoff(crate::watch::relist::watch_backoff());
    let table = replica_sets.clone();
    let rs_task = tokio::spawn(drive("ReplicaSets", after, rs_events, move |ev| {
        apply(
            &table,
            ev,
            ReplicaSets::upsert,
            |r| r.metadata.uid.clone().unwrap_or_default(),
            ReplicaSets::remove,
        )
        .then(|| rs_listed_tx.send_replace(true));
    }));
    let cache = PodCache {
        pods,
        replica_sets,
        synced,
    };
    let view = cache.clone();
    let sync_task = tokio::spawn(async move {
        if pods_listed.wait_for(|v| *v).await.is_ok() && rs_listed.wait_for(|v| *v).await.is_ok() {
            tracing::info!(pods = view.len(), "admission pod cache synced");
            synced_tx.send_replace(true);
        }
    });
    (
        cache,
        [gate, pod_task, rs_task, sync_task]
            .map(AbortOnDropHandle::new)
            .into(),
    )
}

/// Waits until `after` reads true and then `nodes_listed` reads true, or `max` passed since
/// `after` did. Returns false when `after`'s sender is gone first (the caches were dropped):
/// nothing is to be listed then.
async fn in_turn(
    mut after: watch::Receiver<bool>,
    mut nodes_listed: watch::Receiver<bool>,
    max: Duration,
) -> bool {
    if after.wait_for(|v| *v).await.is_err() {
        return false;
    }
    let _ = tokio::time::timeout(max, nodes_listed.wait_for(|v| *v)).await;
    true
}

async fn drive<K>(
    what: &'static str,
    mut after: watch::Receiver<bool>,
    events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    on_event: impl Fn(watcher::Event<K>) + Send + 'static,
) {
    // A watcher lists when first polled: not polled until `after`.
    if after.wait_for(|v| *v).await.is_ok() {
        super::cache::drive(what, events, on_event).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn the_pods_are_listed_after_the_caches_then_the_nodes_or_the_longest_wait() {
        // Generous for a loaded 2-core machine; the "not yet" windows only need to be open.
        const DEADLINE: Duration = Duration::from_secs(10);
        const NOT_YET: Duration = Duration::from_millis(200);
        let (caches_tx, caches) = watch::channel(false);
        let (nodes_tx, nodes) = watch::channel(false);
        let mut turn = tokio::spawn(in_turn(caches, nodes, Duration::from_secs(3600)));
        nodes_tx.send_replace(true);
        assert!(
            tokio::time::timeout(NOT_YET, &mut turn).await.is_err(),
            "listed before the caches readiness waits for"
        );
        caches_tx.send_replace(true);
        let listed = tokio::time::timeout(DEADLINE, turn).await;
        assert!(matches!(listed, Ok(Ok(true))), "{listed:?}");

        let (_caches_tx, caches) = watch::channel(true);
        let (nodes_tx, nodes) = watch::channel(false);
        let mut turn = tokio::spawn(in_turn(caches, nodes, Duration::from_secs(3600)));
        assert!(
            tokio::time::timeout(NOT_YET, &mut turn).await.is_err(),
            "listed beside the Node watch's first list"
        );
        nodes_tx.send_replace(true);
        let listed = tokio::time::timeout(DEADLINE, turn).await;
        assert!(matches!(listed, Ok(Ok(true))), "{listed:?}");

        let (_caches_tx, caches) = watch::channel(true);
        let (_nodes_tx, nodes) = watch::channel(false);
        let listed =
            tokio::time::timeout(DEADLINE, in_turn(caches, nodes, Duration::from_millis(50))).await;
        assert_eq!(
            listed,
            Ok(true),
            "a Node watch that never lists holds the pods back for good"
        );

        let (caches_tx, caches) = watch::channel(false);
        let (_nodes_tx, nodes) = watch::channel(true);
        drop(caches_tx);
        let listed =
            tokio::time::timeout(DEADLINE, in_turn(caches, nodes, Duration::from_secs(3600))).await;
        assert_eq!(listed, Ok(false), "the caches are gone: nothing to list");
    }

    fn pod(name: &str, node: &str, owner: Option<(&str, &str)>, ready: bool) -> Pod {
        let owners: Vec<_> = owner
            .map(|(kind, uid)| {
                json!({"apiVersion": "apps/v1", "kind": kind, "name": format!("{kind}-{uid}"),
                       "uid": uid, "controller": true})
            })
            .into_iter()
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": name, "ownerReferences": owners,
                         "annotations": {"kubernetes.io/config.mirror": "x", "other": "y"},
                         "managedFields": [{"manager": "kubelet"}]},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}],
                     "volumes": [{"name": "v", "emptyDir": {}}]},
            "status": {"phase": "Running",
                       "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        }))
        .unwrap()
    }

    #[test]
    fn keeps_what_the_drain_and_the_warnings_read() {
        let p = WarnPod::of(pod("a", "n1", Some(("ReplicaSet", "rs1")), true)).unwrap();
        assert_eq!((p.node.as_str(), p.ready), ("n1", true));
        assert!(p.pod.metadata.marks.mirror && p.pod.spec.empty_dir);
        assert_eq!(p.pod.controller_ref().map(|o| o.uid.as_str()), Some("rs1"));
        let mut unscheduled = pod("b", "", None, false);
        assert!(WarnPod::of(unscheduled.clone()).is_none());
        unscheduled.spec.as_mut().unwrap().node_name = Some("n1".into());
        unscheduled.status.as_mut().unwrap().phase = Some("Succeeded".into());
        assert!(WarnPod::of(unscheduled).is_none(), "finished");
    }

    #[test]
    fn indexes_follow_moves_deletions_and_relists() {
        let table: RwLock<Table<Pods>> = RwLock::default();
        let uid = |p: &Pod| p.metadata.uid.clone().unwrap_or_default();
        let ev = |e| apply(&table, e, Pods::upsert, uid, Pods::remove);
        ev(watcher::Event::Apply(pod(
            "a",
            "n1",
            Some(("StatefulSet", "s")),
            true,
        )));
        ev(watcher::Event::Apply(pod("b", "n1", None, true)));
        ev(watcher::Event::Apply(pod(
            "a",
            "n2",
            Some(("StatefulSet", "s")),
            true,
        )));
        {
            let t = read(&table);
            assert_eq!(t.live.by_node["n1"], HashSet::from(["b".to_string()]));
            assert_eq!(t.live.by_node["n2"], HashSet::from(["a".to_string()]));
            assert_eq!(t.live.by_owner["s"], HashSet::from(["a".to_string()]));
        }
        ev(watcher::Event::Delete(pod("b", "n1", None, true)));
        assert!(!read(&table).live.by_node.contains_key("n1"));
        ev(watcher::Event::Init);
        ev(watcher::Event::InitApply(pod("c", "n3", None, true)));
        assert_eq!(
            read(&table).live.by_uid.len(),
            1,
            "the old state until done"
        );
        assert!(ev(watcher::Event::InitDone));
        let t = read(&table);
        assert_eq!(t.live.by_uid.keys().collect::<Vec<_>>(), ["c"]);
        assert!(t.live.by_owner.is_empty());
    }

    #[test]
    fn a_deployments_ready_replicas_are_found_through_its_replica_sets() {
        let cache = PodCache {
            pods: Arc::default(),
            replica_sets: Arc::default(),
            synced: watch::channel(true).1,
        };
        let rs = |uid: &str, deployment: &str| -> PartialObjectMeta<ReplicaSet> {
            serde_json::from_value(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": uid, "namespace": "ns", "uid": uid, "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": deployment,
                 "controller": true}]}}))
            .unwrap()
        };
        let rs_uid = |r: &PartialObjectMeta<ReplicaSet>| r.metadata.uid.clone().unwrap();
        for r in [rs("old", "d"), rs("new", "d")] {
            apply(
                &cache.replica_sets,
                watcher::Event::Apply(r),
                ReplicaSets::upsert,
                rs_uid,
                ReplicaSets::remove,
            );
        }
        let pod_uid = |p: &Pod| p.metadata.uid.clone().unwrap_or_default();
        for p in [
            pod("web-1", "n1", Some(("ReplicaSet", "new")), true),
            pod("web-0", "n2", Some(("ReplicaSet", "old")), false),
        ] {
            apply(
                &cache.pods,
                watcher::Event::Apply(p),
                Pods::upsert,
                pod_uid,
                Pods::remove,
            );
        }
        let on_n1 = cache.on_node("n1");
        let web = cache.workload(&on_n1[0].pod).unwrap();
        assert_eq!((web.kind, web.name.as_str()), ("Deployment", "web"));
        assert!(!cache.ready_elsewhere(&web, "n1"), "web-0 is not ready");
        apply(
            &cache.pods,
            watcher::Event::Apply(pod("web-0", "n2", Some(("ReplicaSet", "old")), true)),
            Pods::upsert,
            pod_uid,
            Pods::remove,
        );
        assert!(cache.ready_elsewhere(&web, "n1"));
        assert!(cache.ready_elsewhere(&web, "n2"), "web-1 on n1");
    }
}

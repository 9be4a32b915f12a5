//! What starts a reconcile: the NodeMaintenance watch (through the controller's own reflector)
//! and the changes of the process's Node watch, each mapped to the NodeMaintenances concerned
//! (`docs/design.md §1`, `§7`). Both streams also feed the orphan sweeper ([`super::orphans`])
//! the nodes that may carry the record of a NodeMaintenance that vanished without us.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use tokio::sync::{mpsc, watch};

use super::memory::OwnWrites;
use crate::api::NodeMaintenance;
use crate::metrics::Metrics;
use crate::watch::nodes::{NodeCache, NodeChange, WatchedNode};
use crate::watch::relist;

/// The NodeMaintenance triggers: the watch of `nms`, reflected into `writer`'s store (our own
/// reflector rather than `Controller::new`'s, so that we see its InitDone:
/// `Store::wait_until_ready` wakes only one of several concurrent waiters, kube 5's `DelayedInit`
/// keeping a single waker, and the controller's applier is already one).
///
/// `synced` is true while the watch is delivering: set when it has listed everything or
/// delivers an event, cleared by a watch error or the start of a relist. The nodes of every
/// deleted NodeMaintenance, seen or implied by a relist ([`relist::RelistTracker`]), go to
/// `deleted`. The event of our own last status write to an object (`own`) triggers nothing: the
/// pass that wrote it set its own requeue. Watch errors are logged and retried on the watch's
/// own back-off, never passed on.
pub(super) fn maintenances(
    nms: Api<NodeMaintenance>,
    writer: Writer<NodeMaintenance>,
    synced: watch::Sender<bool>,
    deleted: mpsc::UnboundedSender<String>,
    own: OwnWrites,
    metrics: Arc<Metrics>,
) -> impl Stream<Item = Result<NodeMaintenance, watcher::Error>> + Send + 'static {
    let store = writer.as_reader();
    let mut nm_relist = relist::RelistTracker::<Vec<String>>::default();
    let synced = Arc::new(synced);
    let away = synced.clone();
    let own_deleted = own.clone();
    watcher(nms, watcher::Config::default())
        .backoff(relist::watch_backoff())
        .inspect(move |ev| {
            if matches!(ev, Err(_) | Ok(watcher::Event::Init)) {
                away.send_replace(false);
            }
        })
        .filter_map(relist::log_error("NodeMaintenance"))
        // No write of ours sends managedFields (every NodeMaintenance write is a merge patch of
        // the fields it sets), and they are the largest part of a stored object (a JSON tree per
        // field manager).
        .modify(|nm| nm.metadata.managed_fields = None)
        .reflect(writer)
        .inspect(move |ev| {
            let Ok(ev) = ev else { return };
            if matches!(
                ev,
                watcher::Event::InitDone | watcher::Event::Apply(_) | watcher::Event::Delete(_)
            ) {
                synced.send_if_modified(|live| !std::mem::replace(live, true));
            }
            if let watcher::Event::Delete(nm) = ev {
                own_deleted.forget(&nm.name_any());
                for node in nodes_of_maintenance(nm) {
                    let _ = deleted.send(node);
                }
            }
            // Nodes that NodeMaintenances deleted while the watch was away were on: the relist
            // does not contain them and no deletion event comes.
            for (name, nodes) in nm_relist.observe(ev, ResourceExt::name_any, nodes_of_maintenance)
            {
                tracing::info!(nodemaintenance = %name, nodes = ?nodes, "NodeMaintenance deleted while its watch was away; checking its nodes");
                for node in nodes {
                    let _ = deleted.send(node);
                }
            }
        })
        // A relist's objects trigger reconciles only once it is complete: the reflector swaps
        // them into the store at InitDone, and a reconcile reads the store when it starts, so a
        // reconcile started from an earlier InitApply (a later page is still being fetched)
        // would read the copy from before the watch was away, or find nothing and drop the
        // trigger. Every NodeMaintenance is reconciled after every relist.
        .map(move |ev| match ev {
            Ok(watcher::Event::Apply(nm))
                if own.is_own(&nm.name_any(), nm.metadata.resource_version.as_deref()) =>
            {
                Vec::new()
            }
            Ok(watcher::Event::Apply(nm)) => vec![Ok(nm)],
            Ok(watcher::Event::InitDone) => store
                .state()
                .into_iter()
                .map(|nm| Ok(NodeMaintenance::clone(&nm)))
                .collect(),
            Ok(_) => Vec::new(),
            Err(e) => vec![Err(e)],
        })
        .flat_map(futures::stream::iter)
        .inspect(move |ev| {
            if let Ok(nm) = ev {
                metrics.runtime().triggered(&nm.name_any(), Duration::ZERO);
            }
        })
}

/// The Node triggers: a pass runs when what maintenance cares about changes (cordon, taints,
/// labels, annotations, `GracefulNodeShutdownInProgress`) or the node comes or goes, not on every status heartbeat. No debounce,
/// so a manual uncordon is seen at once. They come from the process's one Node watch
/// ([`crate::watch::nodes`]: only what a reader needs is parsed; a fingerprint per node is
/// kept), shared with the admission caches so every node is listed once. A node that carries a
/// lease-holder record also goes to `orphans`.
///
/// Subscribes at once: the nodes already carrying a record are the first changes.
pub(super) fn nodes(
    nodes: &NodeCache,
    orphans: mpsc::UnboundedSender<String>,
) -> impl Stream<Item = Result<WatchedNode, watcher::Error>> + Send + 'static {
    let mut changes = nodes.subscribe();
    futures::stream::poll_fn(move |cx| changes.poll_recv(cx)).map(move |change: NodeChange| {
        if change.holder {
            let _ = orphans.send(change.name.clone());
        }
        Ok(WatchedNode {
            metadata: ObjectMeta {
                name: Some(change.name),
                ..ObjectMeta::default()
            },
            ..WatchedNode::default()
        })
    })
}

/// The Node watch's mapper: the NodeMaintenances in `store` that concern a changed node
/// ([`maintenances_of_node`]), each counted as triggered.
pub(super) fn node_mapper(
    store: Store<NodeMaintenance>,
    metrics: Arc<Metrics>,
) -> impl Fn(WatchedNode) -> Vec<ObjectRef<NodeMaintenance>> + Send + Sync + 'static {
    move |node| {
        let refs = maintenances_of_node(&store, &node.name_any());
        for r in &refs {
            metrics.runtime().triggered(&r.name, Duration::ZERO);
        }
        refs
    }
}

/// The budget triggers: a PodDisruptionBudget that allows a disruption now, newly lets its pods
/// that are not Ready go, or is gone (`crate::drain::Budget::relief_after`) ends the holds its
/// refusals put on pods in the drain's memory (`RetrySchedule::release`: a fact the watch saw,
/// recorded as an answer is), and wakes the maintenances of the nodes it held, so their next
/// round asks at once rather than at the refusal's retry (`docs/drain-contract.md` §1). A budget
/// that held nothing wakes nothing.
pub(super) fn budgets(
    relaxed: futures::channel::mpsc::UnboundedReceiver<crate::drain::Relief>,
    memory: crate::drain::DrainMemory,
    store: Store<NodeMaintenance>,
) -> impl Stream<Item = ObjectRef<NodeMaintenance>> + Send + 'static {
    relaxed.flat_map(move |relief| {
        let held: Vec<String> = {
            let mut nodes = memory.lock().unwrap_or_else(|e| e.into_inner());
            nodes
                .iter_mut()
                .filter_map(|(node, schedule)| schedule.release(&relief).then(|| node.clone()))
                .collect()
        };
        let refs: Vec<ObjectRef<NodeMaintenance>> = held
            .iter()
            .flat_map(|node| maintenances_of_node(&store, node))
            .collect();
        futures::stream::iter(refs)
    })
}

/// Logs once the NodeMaintenance watch (`nms_synced`) has listed everything. Readiness does
/// not wait for it (`crate::run::readiness`).
pub(super) async fn report_synced(mut nms_synced: watch::Receiver<bool>) {
    if nms_synced.wait_for(|v| *v).await.is_ok() {
        tracing::info!("NodeMaintenance watch synced");
    }
}

/// The nodes a NodeMaintenance concerns: `spec.nodeName` and the node it entered
/// ([`crate::api::ENTERED_NODE_ANNOTATION`]) when that differs.
fn nodes_of_maintenance(nm: &NodeMaintenance) -> Vec<String> {
    let mut nodes = vec![nm.spec.node_name.clone()];
    if let Some(entered) = super::plan::entered_node(nm)
        && entered != nm.spec.node_name
    {
        nodes.push(entered.to_owned());
    }
    nodes
}

/// The NodeMaintenances in `store` whose `spec.nodeName` is `node` or that entered `node`
/// ([`crate::api::ENTERED_NODE_ANNOTATION`]).
fn maintenances_of_node(
    store: &Store<NodeMaintenance>,
    node: &str,
) -> Vec<ObjectRef<NodeMaintenance>> {
    store
        .state()
        .iter()
        .filter(|nm| super::orphans::targets(nm, node))
        .map(|nm| ObjectRef::from_obj(nm.as_ref()))
        .collect()
}

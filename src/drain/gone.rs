//! Pods going: once a node's drain waits for evicted pods to terminate and for no eviction's
//! answer, a metadata watch of the pods bound to that node wakes the maintenance's next pass as
//! soon as the API server has reported every one of them deleted, so the round that finds them
//! gone runs then instead of at the next requeue (`docs/drain-contract.md` §4). The watch only
//! wakes; every decision stays with the round, which lists the node's pods as before.
//!
//! One watch per node at most. It is started by a round that finds terminating pods and no
//! eviction in flight, told by each such round which pods it waits for (the pods of a later
//! drain order, or those a refusal holds, are then asked by the round it wakes), and ended by a
//! round that finds no terminating pod or an eviction in flight, when the maintenance no longer
//! stands (checked on each event), or when the controller stops. While evictions are answered it
//! does not run: the node's last answer wakes a pass anyway, and the API server would otherwise
//! send it every update of every pod on the node.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::gate::Standing;

/// `namespace/name` of a pod.
type PodKey = String;

/// What one node's watch knows: the pods the last round waits for, and those the watch saw
/// deleted since that round's set arrived.
#[derive(Default)]
struct Awaited {
    /// The pods the last round found terminating, less those seen deleted since.
    pods: HashSet<PodKey>,
    /// Deletions seen since `pods` was last set: the round's listing may predate them.
    deleted: HashSet<PodKey>,
    /// Whether the watch has listed the node's pods (`watcher::Event::InitDone`).
    listed: bool,
}

impl Awaited {
    /// Takes the pods a round waits for; `true` when every one is already known gone.
    fn set(&mut self, pods: HashSet<PodKey>) -> bool {
        self.pods = pods;
        self.pods.retain(|p| !self.deleted.contains(p));
        self.deleted.clear();
        self.listed && self.pods.is_empty()
    }
    /// A deletion the watch reported; `true` when it was the last pod awaited.
    fn gone(&mut self, pod: PodKey) -> bool {
        let was = self.pods.remove(&pod);
        self.deleted.insert(pod);
        was && self.pods.is_empty()
    }
    /// The watch's listing is complete (`present`: the pods it listed); `true` when none of
    /// the pods awaited is among them.
    fn listed(&mut self, present: &HashSet<PodKey>) -> bool {
        self.listed = true;
        let before = self.pods.len();
        self.pods.retain(|p| present.contains(p));
        before > 0 && self.pods.is_empty()
    }
}

struct Watch {
    token: CancellationToken,
    awaited: Arc<Mutex<Awaited>>,
}

/// The running watches, by node name.
#[derive(Clone)]
pub(crate) struct GoneWatches {
    client: Client,
    running: Arc<Mutex<HashMap<String, Watch>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl GoneWatches {
    /// No watch yet; `client` reads the pods.
    pub(crate) fn new(client: Client) -> Self {
        Self {
            client,
            running: Arc::default(),
        }
    }

    /// The round of `node` waits only for `pods` (`namespace/name`) to go: starts the watch of
    /// the node's pods unless one runs, and wakes the maintenance (`standing.wake`) once all of
    /// them are reported deleted. The watch ends when the maintenance no longer stands, on
    /// [`Self::end`], or when `stopped` is cancelled.
    pub(crate) fn await_pods(
        &self,
        node: &str,
        pods: HashSet<PodKey>,
        standing: &Standing,
        stopped: &CancellationToken,
    ) {
        let mut running = lock(&self.running);
        if let Some(w) = running.get(node).filter(|w| !w.token.is_cancelled()) {
            if lock(&w.awaited).set(pods) {
                (standing.wake)();
            }
            return;
        }
        let token = stopped.child_token();
        let awaited = Arc::new(Mutex::new(Awaited {
            pods,
            ..Awaited::default()
        }));
        running.insert(
            node.to_owned(),
            Watch {
                token: token.clone(),
                awaited: awaited.clone(),
            },
        );
        drop(running);
        let api: Api<PartialObjectMeta<Pod>> = Api::all(self.client.clone());
        let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
        let mut events = watcher(api, config).default_backoff().boxed();
        let (this, node, standing) = (self.clone(), node.to_owned(), standing.clone());
        tokio::spawn(async move {
            let key = |p: &PartialObjectMeta<Pod>| {
                format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any())
            };
            let mut listing = HashSet::new();
            loop {
                let event = tokio::select! {
                    () = token.cancelled() => break,
                    event = events.next() => event,
                };
                if (standing.may_send)().is_err() {
                    break;
                }
                let all_gone = match event {
                    Some(Ok(watcher::Event::Delete(p))) => lock(&awaited).gone(key(&p)),
                    Some(Ok(watcher::Event::Init)) => {
                        listing.clear();
                        false
                    }
                    Some(Ok(watcher::Event::InitApply(p))) => {
                        listing.insert(key(&p));
                        false
                    }
                    Some(Ok(watcher::Event::InitDone)) => {
                        lock(&awaited).listed(&std::mem::take(&mut listing))
                    }
                    Some(Ok(watcher::Event::Apply(_))) => false,
                    Some(Err(e)) => {
                        tracing::debug!(%node, error = %e, "the watch of the node's pods failed; it retries, and passes still requeue");
                        false
                    }
                    None => break,
                };
                if all_gone {
                    (standing.wake)();
                }
            }
            token.cancel();
            let mut running = lock(&this.running);
            if running.get(&node).is_some_and(|w| w.token.is_cancelled()) {
                running.remove(&node);
            }
        });
    }

    /// Ends the watch of `node`'s pods, if one runs.
    pub(crate) fn end(&self, node: &str) {
        if let Some(w) = lock(&self.running).remove(node) {
            w.token.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(keys: &[&str]) -> HashSet<PodKey> {
        keys.iter().map(|k| k.to_string()).collect()
    }

    #[test]
    fn wakes_once_every_awaited_pod_is_gone_whatever_the_order_of_round_and_watch() {
        let mut a = Awaited {
            pods: set(&["ns/a", "ns/b"]),
            ..Awaited::default()
        };
        // The watch's listing still shows both: nothing to wake for yet.
        assert!(!a.listed(&set(&["ns/a", "ns/b", "ns/kept"])));
        assert!(!a.gone("ns/kept".into()), "a pod not awaited");
        assert!(!a.gone("ns/a".into()));
        assert!(a.gone("ns/b".into()), "the last awaited pod");
        // A round whose listing predates a deletion the watch already reported.
        assert!(!a.gone("ns/c".into()));
        assert!(
            a.set(set(&["ns/c"])),
            "already gone when the round's set arrives"
        );
        assert!(!a.set(set(&["ns/d"])), "a later round: ns/c was forgotten");
        // Pods gone before the watch listed the node.
        let mut before = Awaited {
            pods: set(&["ns/x"]),
            ..Awaited::default()
        };
        assert!(!before.set(set(&["ns/x"])), "not listed yet: unknown");
        assert!(before.listed(&set(&["ns/other"])));
    }
}

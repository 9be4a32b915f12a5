//! The drain's sends: what a round decided, carried out. The round's memory is recorded first
//! ([`Sender::send`]), then each forced deletion and each eviction is sent on its own task,
//! right after a check that the maintenance still stands; an eviction waits for its budget's
//! lane (a budget's pod) and a slot (the others wait in the round's order, a task spawned for
//! each as it gets its slot), then for the API server's answer however long its admission
//! webhooks take, and the answer, recorded in the node's memory as it arrives, wakes the
//! maintenance's next pass (`docs/drain-contract.md §4`). Which evictions go and which answers wake a pass is
//! decided by `round.rs`, `answer.rs` and `memory.rs`; this module decides nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Preconditions};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::answer::{EvictionOutcome, classify_eviction};
use super::budget::SharedCause;
use super::consts::result;
use super::deadline::PlannedDeletion;
use super::gate::{Halt, Standing};
use super::memory::{Awaited, DrainMemory, RetrySchedule, Settled};
use super::round::PlannedEviction;
use crate::api::PodReference;
use crate::metrics::Metrics;

/// Evictions in flight at once in the whole process (kubectl and upstream start one goroutine per
/// pod, unbounded). An eviction that waits on a slow admission webhook holds its slot until the
/// API server answers; namespaces take turns for the slots (`round::fair_order`), so one
/// namespace's hung evictions do not hold back the others' while slots are left.
///
/// The evictions share one HTTP/2 connection ([`SendClients::evictions`]), and kube-apiserver
/// serves 100 streams per connection unless `--http2-max-streams-per-connection` says otherwise
/// (`k8s.io/apiserver` `pkg/server/secure_serving.go`). Not more: an eviction past the streams
/// would wait in hyper's queue after the check that its maintenance still stands, and go out
/// after a pause (`tests/drain_facts.rs` `pausing_the_maintenance_stops_its_queued_evictions`
/// failed with 128: 28 sent 5 s after the pause). Not fewer: besides the pace, every draining
/// node shares the slots, and evictions hung in a namespace's webhook hold theirs until its
/// timeout (at most 30 s). Measured over HTTP/1.1 on 2026-12-05 (`cargo bench --bench
/// maintenance -- drainrate` at 3,000 pods, bare-client floor 11.3 to 11.5 s): 14.5 s with 128
/// in flight, 15.1 with 64, 13.5 with 256.
pub(crate) const EVICTION_PARALLELISM: usize = 100;

/// The sender's clients, both with kube's default 429 retry disabled, so that a
/// PodDisruptionBudget refusal comes back at once instead of being retried inside the client
/// for minutes.
#[derive(Clone)]
pub(crate) struct SendClients {
    /// The evictions, at most [`EVICTION_PARALLELISM`] in flight: HTTP/2
    /// (`client::Http::Two`), one connection for all of them instead of a TLS connection each
    /// with its buffers (`docs/design.md` §2).
    pub(crate) evictions: Client,
    /// The forced deletions and the dry-run evictions, whose numbers in flight the slots do not
    /// bound: HTTP/1.1, so none of them waits in the HTTP/2 connection's queue, and no eviction
    /// behind them.
    pub(crate) others: Client,
}

/// Sends a round's deletions and evictions. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Sender {
    clients: SendClients,
    /// The drain's memory (`crate::controller::memory`), written by the answers as they arrive.
    retries: DrainMemory,
    slots: Arc<tokio::sync::Semaphore>,
    /// At most [`PER_BUDGET`] evictions in flight per budget ([`BudgetLanes`]).
    lanes: BudgetLanes,
    metrics: Arc<Metrics>,
    /// Cancelled when the controller stops: nothing is sent after that.
    stopped: CancellationToken,
    /// The deletions and evictions sent on their own, awaited by [`Sender::stop`].
    tasks: TaskTracker,
}

impl Sender {
    /// A sender over `clients`, recording answers in `retries` and counting them in `metrics`.
    pub(crate) fn new(clients: SendClients, retries: DrainMemory, metrics: Arc<Metrics>) -> Self {
        Self {
            clients,
            retries,
            slots: Arc::new(tokio::sync::Semaphore::new(EVICTION_PARALLELISM)),
            lanes: BudgetLanes::default(),
            metrics,
            stopped: CancellationToken::new(),
            tasks: TaskTracker::new(),
        }
    }

    /// Cancelled once the controller stops.
    pub(crate) fn stopped(&self) -> &CancellationToken {
        &self.stopped
    }

    /// A guard that stops sending when dropped: the controller's run future holds it, so a
    /// controller dropped at the end of a leadership term sends nothing after it.
    pub(crate) fn stop_on_drop(&self) -> tokio_util::sync::DropGuard {
        self.stopped.clone().drop_guard()
    }

    /// Sends nothing from now on, and returns once everything already sent has been answered
    /// (the controller stops: a leader's term ends with its last request answered).
    pub(crate) async fn stop(&self) {
        self.stopped.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }

    /// Records what the round settled for `node`, then sends its forced deletions and the
    /// evictions not already in flight, each on its own while `standing` holds.
    pub(crate) fn send(
        &self,
        node: &str,
        settled: Settled,
        evict: Vec<PlannedEviction>,
        delete: Vec<PlannedDeletion>,
        standing: &Standing,
    ) {
        let evict = self.remember(node, settled, evict);
        for d in delete {
            self.delete_on_its_own(node, d, standing.clone());
        }
        if !evict.is_empty() {
            self.send_in_turn(node, evict, standing.clone());
        }
    }

    /// Sends `evict` in the round's order (namespaces taking turns, `round::fair_order`), each
    /// spawned on its own once it holds a slot: evictions waiting for a slot are held here as
    /// the round planned them, not as a task each (3,000 waiting tasks took about 2 MB of a
    /// 3,000-pod drain's peak in heaptrack). A budget's pod whose lane is full waits for it on
    /// a task of its own, so the pods behind it keep their turns (`BudgetLanes`). The halt is
    /// read before each wait for a slot: once the maintenance is halted, the rest are recorded
    /// as not sent together, at the first slot freed (or at once when the controller stops),
    /// instead of each waiting for a slot of its own behind other nodes' evictions.
    fn send_in_turn(&self, node: &str, evict: Vec<PlannedEviction>, standing: Standing) {
        let this = self.clone();
        let node = node.to_owned();
        self.tasks.spawn(async move {
            let mut evict = evict.into_iter();
            while let Some(e) = evict.next() {
                let lane = match this.lanes.try_enter(e.cause.as_ref()) {
                    Ok(lane) => lane,
                    Err(Full) => {
                        this.send_on_its_own(&node, e, standing.clone(), None);
                        continue;
                    }
                };
                let slot = match standing.halted(&this.stopped) {
                    Some(_) => None,
                    None => tokio::select! {
                        biased;
                        () = this.stopped.cancelled() => None,
                        slot = this.slots.clone().acquire_owned() => slot.ok(),
                    },
                };
                let Some(slot) = slot else {
                    for e in std::iter::once(e).chain(evict.by_ref()) {
                        let uid = e.uid.as_deref().unwrap_or_default();
                        let _ = this.answered(&node, uid, None, None);
                    }
                    return;
                };
                this.send_on_its_own(&node, e, standing.clone(), Some((slot, lane)));
            }
        });
    }

    fn schedules(&self) -> std::sync::MutexGuard<'_, HashMap<String, RetrySchedule>> {
        self.retries.lock().unwrap_or_else(|e| e.into_inner())
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
            let api: Api<Pod> = Api::namespaced(this.clients.others.clone(), &d.pod.namespace);
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

    /// Sends one eviction on its own: waits for its budget's lane and a slot (unless `held`
    /// already, the slot with the lane if any), checks that the maintenance still stands and the
    /// controller runs, sends, records the answer and wakes the maintenance.
    fn send_on_its_own(
        &self,
        node: &str,
        e: PlannedEviction,
        standing: Standing,
        held: Option<(tokio::sync::OwnedSemaphorePermit, Option<Lane>)>,
    ) {
        let this = self.clone();
        let node = node.to_owned();
        self.tasks.spawn(async move {
            let uid = e.uid.clone().unwrap_or_default();
            let (lane, slot) = match held {
                Some((slot, lane)) => (Some(lane), Some(slot)),
                // The budget's lane first, then a slot: a pod waiting for its budget's previous
                // eviction holds no slot meanwhile (`BudgetLanes`).
                None => {
                    let lane = tokio::select! {
                        lane = this.lanes.enter(e.cause.as_ref()) => Some(lane),
                        () = this.stopped.cancelled() => None,
                    };
                    let slot = tokio::select! {
                        slot = this.slots.clone().acquire_owned() => slot.ok(),
                        () = this.stopped.cancelled() => None,
                    };
                    (lane, slot)
                }
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

    /// One eviction, classified and counted; a refusal by several budgets names those the round
    /// saw covering the pod ([`PlannedEviction::overlapping`]).
    async fn evict_once(&self, node: &str, e: &PlannedEviction) -> EvictionOutcome {
        let pod = &e.pod;
        let answer = self.eviction(pod, e.uid.as_deref(), false).await;
        if answer.is_ok() {
            tracing::info!(
                "pod: {}:{} Evicted from node: {node}",
                pod.namespace,
                pod.name
            );
        }
        let mut outcome = classify_eviction(pod, e.in_progress, answer.as_ref().map(|_| ()));
        outcome.name_budgets(&e.overlapping);
        if outcome.result != result::EVICTED && outcome.result != result::GONE {
            let b = outcome.blocker.as_ref();
            let answer = b
                .and_then(|b| b.message.as_deref())
                .or(outcome.api_error.as_deref());
            tracing::info!(pod = %format!("{}/{}", pod.namespace, pod.name), reason = b.map_or("", |b| &b.reason), answer, "eviction refused");
        }
        self.metrics.eviction(&outcome.result);
        outcome
    }

    /// POST `pods/<name>/eviction` (policy/v1) with a UID precondition, a server-side dry run
    /// (`dryRun=All`) when `dry_run`. Written by hand because kube's `Api::evict` sends its delete
    /// options under a `delete_options` key the API server does not know, so a precondition would
    /// be dropped silently. No deadline of ours: the API server answers within its own request
    /// timeout, its admission webhooks' included.
    ///
    /// # Errors
    /// The API server's refusal, or the transport's error.
    pub(crate) async fn eviction(
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
        let client = if dry_run {
            &self.clients.others
        } else {
            &self.clients.evictions
        };
        client.request_text(req).await.map(|_| ())
    }
}

// At most [`PER_BUDGET`] evictions in flight per PodDisruptionBudget (`docs/drain-contract.md`
// §1, "How fast a budget that allows is drained"). The API server accepts an eviction of a
// budget's pod by updating that budget's status (`disruptionsAllowed` less one, the pod added to
// `disruptedPods`) under optimistic concurrency: evictions of one budget's pods sent at once
// conflict there (and with the disruption controller's own status writes), and the API server
// retries each loser after 500 ms, up to 20 times, then answers 504
// (`pkg/registry/core/pod/storage/eviction.go`, `EvictionsRetry`). Hundreds at once mostly
// sleep in those retries; one at a time waits for every conflict with the controller. Evictions
// of pods no budget covers, and of different budgets, are not held back.
//
// Pacing only: which pods to evict is the round's decision; this is how the executor sends them.

type Semaphore = tokio::sync::Semaphore;

/// Evictions of one budget's pods in flight at once. Measured with a bare client on the local
/// control plane (`cargo bench --bench maintenance -- budgetrelents`, 2,000 pods under one budget
/// lowered to `minAvailable: 0`): 1 in flight 154 s, 8 in flight 65 s; the operator's former 256
/// took 97 s.
pub(crate) const PER_BUDGET: usize = 8;

/// The lanes of the budgets with an eviction in flight or waiting, by budget.
#[derive(Clone, Default)]
pub(crate) struct BudgetLanes {
    lanes: Arc<Mutex<HashMap<SharedCause, Arc<Semaphore>>>>,
}

/// A budget's lane has [`PER_BUDGET`] evictions in flight or waiting for a slot.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Full;

/// The right to send one eviction of a budget's pod; held until its answer.
pub(crate) struct Lane {
    cause: SharedCause,
    lanes: BudgetLanes,
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl BudgetLanes {
    /// The lane of `cause` when it is a budget.
    fn lane(&self, cause: Option<&SharedCause>) -> Option<(SharedCause, Arc<Semaphore>)> {
        let cause = cause.filter(|c| matches!(c, SharedCause::Budget { .. }))?;
        let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        let lane = lanes
            .entry(cause.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(PER_BUDGET)));
        Some((cause.clone(), lane.clone()))
    }

    /// Waits for a place in the lane of `cause` when it is a budget (fewer than [`PER_BUDGET`]
    /// of its evictions in flight); `None` (at once) for any other cause and for none.
    pub(crate) async fn enter(&self, cause: Option<&SharedCause>) -> Option<Lane> {
        let (cause, lane) = self.lane(cause)?;
        // Never closed: the permit comes once one of the budget's evictions is answered.
        let permit = lane.acquire_owned().await.ok();
        Some(Lane {
            cause,
            lanes: self.clone(),
            permit,
        })
    }

    /// As [`Self::enter`] without waiting: [`Full`] when the budget's lane has no place now.
    pub(crate) fn try_enter(&self, cause: Option<&SharedCause>) -> Result<Option<Lane>, Full> {
        let Some((cause, lane)) = self.lane(cause) else {
            return Ok(None);
        };
        let permit = lane.try_acquire_owned().map_err(|_| Full)?;
        Ok(Some(Lane {
            cause,
            lanes: self.clone(),
            permit: Some(permit),
        }))
    }

    /// How many budgets have a lane (one in flight or waiting).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lanes.lock().unwrap().len()
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        drop(self.permit.take());
        // The last user of a lane removes it: the map holds only the budgets in use.
        let mut lanes = self.lanes.lanes.lock().unwrap_or_else(|e| e.into_inner());
        if lanes
            .get(&self.cause)
            .is_some_and(|l| Arc::strong_count(l) == 1)
        {
            lanes.remove(&self.cause);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(name: &str) -> SharedCause {
        SharedCause::Budget {
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    /// The paths of the evictions a fake API server received.
    type Seen = Arc<Mutex<Vec<String>>>;

    /// A sender over a fake API server (both clients) that records each request's path and
    /// never answers those of namespace `hung` (a webhook that hangs); it accepts the others.
    fn sender_over_a_hanging_server() -> (Sender, Seen) {
        let seen: Seen = Arc::default();
        let log = seen.clone();
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let log = log.clone();
            async move {
                let path = req.uri().path().to_string();
                log.lock().unwrap().push(path.clone());
                if path.contains("/namespaces/hung/") {
                    std::future::pending::<()>().await;
                }
                let answer = br#"{"kind":"Status","apiVersion":"v1","status":"Success"}"#;
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .status(201)
                        .body(kube::client::Body::from(answer.to_vec()))
                        .unwrap(),
                )
            }
        });
        let client = kube::Client::new(service, "default");
        let clients = SendClients {
            evictions: client.clone(),
            others: client,
        };
        let sender = Sender::new(clients, DrainMemory::default(), Arc::new(Metrics::new()));
        (sender, seen)
    }

    /// A maintenance that stands.
    fn standing() -> Standing {
        Standing {
            uid: None,
            may_send: Arc::new(|| Ok(())),
            wake: Arc::new(|| {}),
        }
    }

    /// The eviction of pod `name` (also its UID) of `namespace`, under `cause`.
    fn planned(namespace: &str, name: String, cause: Option<SharedCause>) -> PlannedEviction {
        PlannedEviction {
            pod: PodReference {
                namespace: namespace.into(),
                name: name.clone(),
            },
            uid: Some(name),
            overlapping: Vec::new(),
            awaits: None,
            cause,
            in_progress: false,
        }
    }

    /// Waits up to 30 s for `done`; fails with what `seen` says then.
    async fn wait_until(what: &str, mut done: impl FnMut() -> bool, seen: impl Fn() -> String) {
        let deadline = Instant::now() + std::time::Duration::from_secs(30);
        while !done() {
            assert!(
                Instant::now() < deadline,
                "{what}: not after 30 s; {}",
                seen()
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// `docs/drain-contract.md` §4 ("Many evictions"): evictions take slots in the round's order,
    /// and a budget's pod whose lane is full does not take one ahead of the pods behind it. 13
    /// budgets of 10 pods whose evictions never answer (more than the slots once each lane has
    /// its 8), and a pod no budget covers after the fifth budget's: that pod is sent.
    #[tokio::test]
    async fn pods_behind_full_budget_lanes_keep_their_turn_for_the_slots() {
        let (sender, seen) = sender_over_a_hanging_server();
        let mut evict = Vec::new();
        for b in 0..13 {
            let cause = SharedCause::Budget {
                namespace: "hung".into(),
                name: format!("b{b}"),
            };
            for i in 0..10 {
                evict.push(planned("hung", format!("b{b}-{i}"), Some(cause.clone())));
            }
            if b == 4 {
                evict.push(planned("free", "free-0".into(), None));
            }
        }
        let standing = standing();
        sender.send("n1", Settled::default(), evict, Vec::new(), &standing);
        let free = "/api/v1/namespaces/free/pods/free-0/eviction";
        let sent = || format!("{} evictions sent", seen.lock().unwrap().len());
        let free_sent = || seen.lock().unwrap().iter().any(|p| p == free);
        wait_until("the free pod's eviction sent", free_sent, sent).await;
        // The hung ones hold every slot, no more.
        let hung = || {
            let seen = seen.lock().unwrap();
            seen.iter()
                .filter(|p| p.contains("/namespaces/hung/"))
                .count()
        };
        wait_until("every slot held", || hung() >= EVICTION_PARALLELISM, sent).await;
        assert_eq!(hung(), EVICTION_PARALLELISM);
    }

    #[tokio::test]
    async fn at_most_per_budget_evictions_in_flight_per_budget_and_none_held_back_otherwise() {
        let lanes = BudgetLanes::default();
        let mut a = Vec::new();
        for _ in 0..PER_BUDGET {
            a.push(
                lanes
                    .enter(Some(&budget("a")))
                    .await
                    .expect("a budget's lane"),
            );
        }
        // Another budget's pod, a pod no budget covers, a namespace's cause: not held back.
        let b = lanes.enter(Some(&budget("b"))).await;
        assert!(b.is_some());
        // Without waiting: budget a's lane is full, b's has a place, no lane for no budget.
        assert_eq!(lanes.try_enter(Some(&budget("a"))).err(), Some(Full));
        let b2 = lanes
            .try_enter(Some(&budget("b")))
            .expect("a place in b's lane");
        assert!(b2.is_some());
        assert!(matches!(lanes.try_enter(None), Ok(None)));
        let ns = SharedCause::NamespaceTerminating {
            namespace: "ns".into(),
        };
        assert!(lanes.enter(Some(&ns)).await.is_none());
        assert!(lanes.enter(None).await.is_none());
        // The same budget's next eviction waits for one of those answers.
        let a_again = budget("a");
        let next = lanes.enter(Some(&a_again));
        tokio::pin!(next);
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), &mut next)
                .await
                .is_err(),
            "more than {PER_BUDGET} evictions of budget a in flight"
        );
        a.pop();
        let second = next.await;
        assert!(second.is_some());
        drop((second, b, b2, a));
        assert_eq!(lanes.len(), 0, "no lane kept for budgets no longer in use");
    }
}

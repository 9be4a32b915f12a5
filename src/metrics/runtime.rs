//! The controller-runtime metric families that dashboards and alerts written for upstream read,
//! under controller-runtime's names, label sets, label values and buckets (`docs/compat.md §10`):
//!
//! | family (as encoded) | type | labels |
//! |---|---|---|
//! | `controller_runtime_reconcile_total` | counter | `controller`, `result` (`success`, `error`, `requeue`, `requeue_after`) |
//! | `controller_runtime_reconcile_errors_total` | counter | `controller` |
//! | `controller_runtime_reconcile_time_seconds` | histogram | `controller` |
//! | `controller_runtime_max_concurrent_reconciles` | gauge | `controller` |
//! | `controller_runtime_active_workers` | gauge | `controller` |
//! | `workqueue_depth` | gauge | `name`, `controller`, `priority` (always empty) |
//! | `workqueue_adds_total` | counter | `name`, `controller` |
//! | `workqueue_queue_duration_seconds` | histogram | `name`, `controller` |
//! | `workqueue_work_duration_seconds` | histogram | `name`, `controller` |
//! | `workqueue_retries_total` | counter | `name`, `controller` |
//!
//! kube-runtime keeps its scheduler private, so the work queue is modelled from the outside
//! ([`WorkQueue`]) with client-go's semantics: an object is queued once however often it is
//! triggered (an add of an object already waiting is not counted), an object triggered while it
//! is being reconciled waits until that reconcile ends, and a requeue after a delay is an add when
//! the delay has passed. The triggers are the controller's watch events and the requeues its
//! reconciles and error policy return.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

/// The `controller` (and work queue `name`) label value: controller-runtime names a controller
/// after the lower-cased kind it reconciles, and upstream's reconciles `NodeMaintenance`.
pub(crate) const CONTROLLER_NAME: &str = "nodemaintenance";

/// controller-runtime's buckets of `controller_runtime_reconcile_time_seconds` (seconds).
pub(crate) const RECONCILE_TIME_BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

label_values! {
    /// How one reconcile ended, as controller-runtime's `result` label says it.
    pub(crate) enum ReconcileResult {
        /// Done; nothing is queued until a watch event.
        success,
        /// Failed; retried with back-off.
        error,
        /// Requeued at once (rate limited) without an error.
        requeue,
        /// Requeued after a delay.
        requeue_after,
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    controller: &'static str,
    result: ReconcileResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    name: &'static str,
    controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DepthLabels {
    name: &'static str,
    controller: &'static str,
    priority: &'static str,
}

/// client-go's work queue latency buckets: 10 ns to 1000 s, factor 10.
fn queue_histogram() -> Histogram {
    Histogram::new(exponential_buckets(10e-9, 10.0, 12))
}

/// The work queue as client-go would have counted it. Pure bookkeeping over caller-supplied
/// instants, so the rules are unit-tested without a clock.
#[derive(Debug, Default)]
pub(crate) struct WorkQueue {
    /// Objects waiting to be reconciled. An entry due in the future is a delayed requeue, not yet
    /// in the queue.
    dirty: HashMap<String, Waiting>,
    /// Objects being reconciled now.
    processing: HashSet<String>,
}

#[derive(Debug, Clone, Copy)]
struct Waiting {
    /// When the object is (or becomes) due.
    due: Instant,
    /// Whether its add has been counted (at once for a trigger, when due for a delay).
    counted: bool,
}

/// What a [`WorkQueue`] operation asks the metrics to record.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct QueueEffects {
    /// Adds to count (`workqueue_adds_total`).
    pub adds: u64,
    /// Seconds an object waited in the queue before its reconcile started.
    pub waited: Option<f64>,
}

impl WorkQueue {
    /// `key` is triggered at `now`, due `after` later (zero for a watch event). An add is counted
    /// when the object falls due and was not already waiting.
    pub(crate) fn add(&mut self, key: &str, now: Instant, after: Duration) -> QueueEffects {
        let due = now + after;
        let w = self.dirty.entry(key.to_string()).or_insert(Waiting {
            due,
            counted: false,
        });
        // One entry per object; the earliest due time wins, as in kube-runtime's scheduler.
        if due < w.due {
            w.due = due;
        }
        let adds = u64::from(!w.counted && w.due <= now);
        if w.due <= now {
            w.counted = true;
        }
        QueueEffects { adds, waited: None }
    }

    /// A reconcile of `key` starts at `now`: the object leaves the queue. An object whose add was
    /// not counted yet (a trigger the model has no hook for, or a delay that ran out since the
    /// last [`WorkQueue::depth`]) counts as added now.
    pub(crate) fn start(&mut self, key: &str, now: Instant) -> QueueEffects {
        self.processing.insert(key.to_string());
        match self.dirty.remove(key) {
            Some(w) if w.due <= now => QueueEffects {
                adds: u64::from(!w.counted),
                waited: Some(now.duration_since(w.due).as_secs_f64()),
            },
            Some(_) | None => QueueEffects {
                adds: 1,
                waited: Some(0.0),
            },
        }
    }

    /// The reconcile of `key` ended.
    pub(crate) fn done(&mut self, key: &str) {
        self.processing.remove(key);
    }

    /// Objects due at `now` and not being reconciled (client-go's queue length), and the number
    /// of delayed requeues that fell due since the last call (each an add).
    pub(crate) fn depth(&mut self, now: Instant) -> (i64, u64) {
        let mut depth = 0;
        let mut newly_due = 0;
        for (key, w) in &mut self.dirty {
            if w.due <= now {
                if !w.counted {
                    w.counted = true;
                    newly_due += 1;
                }
                if !self.processing.contains(key) {
                    depth += 1;
                }
            }
        }
        (depth, newly_due)
    }
}

/// The families of this module and the [`WorkQueue`] model behind the work queue ones.
pub(crate) struct RuntimeMetrics {
    reconcile_total: Family<ResultLabels, Counter>,
    reconcile_errors: Family<ControllerLabels, Counter>,
    reconcile_time: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    max_concurrent: Family<ControllerLabels, Gauge>,
    active_workers: Family<ControllerLabels, Gauge>,
    depth: Family<DepthLabels, Gauge>,
    adds: Family<QueueLabels, Counter>,
    queue_duration: Family<QueueLabels, Histogram, fn() -> Histogram>,
    work_duration: Family<QueueLabels, Histogram, fn() -> Histogram>,
    retries: Family<QueueLabels, Counter>,
    queue: Mutex<WorkQueue>,
}

impl std::fmt::Debug for RuntimeMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeMetrics").finish_non_exhaustive()
    }
}

const C: ControllerLabels = ControllerLabels {
    controller: CONTROLLER_NAME,
};
const Q: QueueLabels = QueueLabels {
    name: CONTROLLER_NAME,
    controller: CONTROLLER_NAME,
};
const D: DepthLabels = DepthLabels {
    name: CONTROLLER_NAME,
    controller: CONTROLLER_NAME,
    priority: "",
};

impl RuntimeMetrics {
    /// Registers every family on `registry` (which must carry no prefix) with its series at zero.
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let m = Self {
            reconcile_total: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_time: Family::new_with_constructor(|| Histogram::new(RECONCILE_TIME_BUCKETS)),
            max_concurrent: Family::default(),
            active_workers: Family::default(),
            depth: Family::default(),
            adds: Family::default(),
            queue_duration: Family::new_with_constructor(queue_histogram),
            work_duration: Family::new_with_constructor(queue_histogram),
            retries: Family::default(),
            queue: Mutex::new(WorkQueue::default()),
        };
        registry.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            m.reconcile_total.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            m.reconcile_errors.clone(),
        );
        registry.register_with_unit(
            "controller_runtime_reconcile_time",
            "Length of time per reconciliation per controller",
            Unit::Seconds,
            m.reconcile_time.clone(),
        );
        registry.register(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            m.max_concurrent.clone(),
        );
        registry.register(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            m.active_workers.clone(),
        );
        registry.register(
            "workqueue_depth",
            "Current depth of workqueue",
            m.depth.clone(),
        );
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            m.adds.clone(),
        );
        registry.register_with_unit(
            "workqueue_queue_duration",
            "How long in seconds an item stays in workqueue before being requested",
            Unit::Seconds,
            m.queue_duration.clone(),
        );
        registry.register_with_unit(
            "workqueue_work_duration",
            "How long in seconds processing an item from workqueue takes",
            Unit::Seconds,
            m.work_duration.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            m.retries.clone(),
        );
        for &result in ReconcileResult::ALL {
            let _ = m.reconcile_total.get_or_create(&ResultLabels {
                controller: CONTROLLER_NAME,
                result,
            });
        }
        let _ = m.reconcile_errors.get_or_create(&C);
        let _ = m.reconcile_time.get_or_create(&C);
        let _ = m.max_concurrent.get_or_create(&C);
        let _ = m.active_workers.get_or_create(&C);
        let _ = m.depth.get_or_create(&D);
        let _ = m.adds.get_or_create(&Q);
        let _ = m.queue_duration.get_or_create(&Q);
        let _ = m.work_duration.get_or_create(&Q);
        let _ = m.retries.get_or_create(&Q);
        m
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, WorkQueue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn apply(&self, e: QueueEffects) {
        if e.adds > 0 {
            self.adds.get_or_create(&Q).inc_by(e.adds);
        }
        if let Some(waited) = e.waited {
            self.queue_duration.get_or_create(&Q).observe(waited);
        }
    }

    /// Sets `controller_runtime_max_concurrent_reconciles` (the controller's worker count).
    pub(crate) fn set_max_concurrent_reconciles(&self, n: usize) {
        self.max_concurrent
            .get_or_create(&C)
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// A watch event or requeue triggers a reconcile of the object `key`, due `after` from now.
    pub(crate) fn triggered(&self, key: &str, after: Duration) {
        let effects = self.queue().add(key, Instant::now(), after);
        self.apply(effects);
    }

    /// A reconcile of `key` starts: observes its time in the queue and counts an active worker.
    pub(crate) fn reconcile_started(&self, key: &str) {
        let effects = self.queue().start(key, Instant::now());
        self.apply(effects);
        self.active_workers.get_or_create(&C).inc();
    }

    /// A reconcile of `key` that started `elapsed` ago ended with `result`; `requeue_after` is
    /// when it asked to run again (kube-runtime has no immediate requeue: a zero delay is one).
    pub(crate) fn reconcile_finished(
        &self,
        key: &str,
        elapsed: Duration,
        result: ReconcileResult,
        requeue_after: Option<Duration>,
    ) {
        self.queue().done(key);
        self.active_workers.get_or_create(&C).dec();
        let secs = elapsed.as_secs_f64();
        self.reconcile_time.get_or_create(&C).observe(secs);
        self.work_duration.get_or_create(&Q).observe(secs);
        self.reconcile_total
            .get_or_create(&ResultLabels {
                controller: CONTROLLER_NAME,
                result,
            })
            .inc();
        if result == ReconcileResult::error {
            self.reconcile_errors.get_or_create(&C).inc();
        }
        if let Some(after) = requeue_after {
            self.triggered(key, after);
        }
    }

    /// The error policy requeues `key` after `after` (a rate-limited retry in client-go terms).
    pub(crate) fn retried(&self, key: &str, after: Duration) {
        self.retries.get_or_create(&Q).inc();
        self.triggered(key, after);
    }

    /// Brings `workqueue_depth` up to date and counts delayed requeues that fell due (call before
    /// encoding).
    pub(crate) fn refresh(&self) {
        let (depth, newly_due) = self.queue().depth(Instant::now());
        self.depth.get_or_create(&D).set(depth);
        if newly_due > 0 {
            self.adds.get_or_create(&Q).inc_by(newly_due);
        }
    }
}

/// Runs one reconcile of `key` (the future `reconcile`) and records it in the controller-runtime
/// families: time in the queue, active workers, duration, result, and the requeue it asks for.
/// A reconcile dropped before it finishes (shutdown) frees its worker and records no result.
///
/// # Errors
/// The reconcile's own error, unchanged.
pub(crate) async fn observe_reconcile<F, E>(
    metrics: &RuntimeMetrics,
    key: String,
    reconcile: F,
) -> Result<kube::runtime::controller::Action, E>
where
    F: Future<Output = Result<kube::runtime::controller::Action, E>>,
{
    struct Running<'a> {
        metrics: &'a RuntimeMetrics,
        key: String,
        start: Instant,
        ended: bool,
    }
    impl Drop for Running<'_> {
        fn drop(&mut self) {
            if !self.ended {
                self.metrics.queue().done(&self.key);
                self.metrics.active_workers.get_or_create(&C).dec();
            }
        }
    }
    metrics.reconcile_started(&key);
    let mut run = Running {
        metrics,
        key,
        start: Instant::now(),
        ended: false,
    };
    let out = reconcile.await;
    let (result, after) = match &out {
        Ok(action) => match action_requeue_after(action) {
            None => (ReconcileResult::success, None),
            Some(d) if d.is_zero() => (ReconcileResult::requeue, Some(d)),
            Some(d) => (ReconcileResult::requeue_after, Some(d)),
        },
        Err(_) => (ReconcileResult::error, None),
    };
    run.ended = true;
    metrics.reconcile_finished(&run.key, run.start.elapsed(), result, after);
    out
}

/// The delay of a kube-runtime `Action`: `None` for `await_change`, `Some` for `requeue`.
/// kube keeps the field private; its `Debug` output (`Action { requeue_after: Some(5s) }`) is
/// the only window, and a unit test pins the format so a kube upgrade that changes it fails loudly.
pub(crate) fn action_requeue_after(action: &kube::runtime::controller::Action) -> Option<Duration> {
    let text = format!("{action:?}");
    let inner = text.split("Some(").nth(1)?.split(')').next()?;
    parse_debug_duration(inner)
}

/// Parses `Duration`'s `Debug` form: `1.5s`, `300ms`, `20µs`, `7ns`.
fn parse_debug_duration(s: &str) -> Option<Duration> {
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (num, unit) = s.split_at(split);
    let value: f64 = num.parse().ok()?;
    let secs = match unit {
        "s" => value,
        "ms" => value / 1e3,
        "µs" => value / 1e6,
        "ns" => value / 1e9,
        _ => return None,
    };
    Some(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::controller::Action;

    #[test]
    fn requeue_delay_is_read_from_an_action() {
        assert_eq!(action_requeue_after(&Action::await_change()), None);
        for d in [
            Duration::from_secs(5),
            Duration::from_millis(1500),
            Duration::from_millis(300),
            Duration::from_micros(20),
            Duration::from_secs(300),
        ] {
            let got = action_requeue_after(&Action::requeue(d)).expect("a delay");
            assert!(
                got.abs_diff(d) < Duration::from_nanos(10),
                "{d:?} read as {got:?}"
            );
        }
    }

    #[test]
    fn an_object_waiting_is_queued_once() {
        let t0 = Instant::now();
        let mut q = WorkQueue::default();
        assert_eq!(q.add("a", t0, Duration::ZERO).adds, 1);
        assert_eq!(q.add("a", t0, Duration::ZERO).adds, 0);
        assert_eq!(q.add("b", t0, Duration::ZERO).adds, 1);
        assert_eq!(q.depth(t0).0, 2);
        let e = q.start("a", t0 + Duration::from_millis(40));
        assert_eq!(e.adds, 0);
        assert!((e.waited.unwrap() - 0.04).abs() < 1e-9);
        assert_eq!(q.depth(t0).0, 1);
    }

    #[test]
    fn a_trigger_during_a_reconcile_waits_for_it_to_end() {
        let t0 = Instant::now();
        let mut q = WorkQueue::default();
        q.add("a", t0, Duration::ZERO);
        q.start("a", t0);
        // Triggered while running: counted, but not in the queue until the reconcile ends.
        assert_eq!(q.add("a", t0, Duration::ZERO).adds, 1);
        assert_eq!(q.depth(t0).0, 0);
        q.done("a");
        assert_eq!(q.depth(t0).0, 1);
    }

    #[test]
    fn a_delayed_requeue_is_an_add_when_it_falls_due() {
        let t0 = Instant::now();
        let mut q = WorkQueue::default();
        assert_eq!(q.add("a", t0, Duration::from_secs(5)).adds, 0);
        assert_eq!(q.depth(t0 + Duration::from_secs(1)), (0, 0));
        let t6 = t0 + Duration::from_secs(6);
        assert_eq!(q.depth(t6), (1, 1));
        // Counted once only.
        assert_eq!(q.depth(t6), (1, 0));
        let e = q.start("a", t6);
        assert_eq!(e.adds, 0);
        assert!((e.waited.unwrap() - 1.0).abs() < 1e-9);
        // A watch event before the delay is over makes it due at once, as one add.
        q.done("a");
        q.add("a", t6, Duration::from_secs(5));
        assert_eq!(q.add("a", t6, Duration::ZERO).adds, 1);
        assert_eq!(q.depth(t6), (1, 0));
        // A delay that ran out unobserved is counted when the reconcile starts.
        q.start("a", t6);
        q.done("a");
        q.add("a", t6, Duration::from_secs(1));
        let e = q.start("a", t6 + Duration::from_secs(3));
        assert_eq!(e.adds, 1);
        assert!((e.waited.unwrap() - 2.0).abs() < 1e-9);
    }

    #[test]
    fn an_unseen_trigger_counts_as_an_add_at_start() {
        let t0 = Instant::now();
        let mut q = WorkQueue::default();
        assert_eq!(
            q.start("x", t0),
            QueueEffects {
                adds: 1,
                waited: Some(0.0)
            }
        );
    }
}

//! Prometheus metrics of the operator, encoded as OpenMetrics text for `GET /metrics`.
//!
//! Our own families carry the `nmo_` prefix. Counter names are registered without `_total`:
//! prometheus-client appends that suffix itself when encoding, so `reconciles` is exposed as
//! `nmo_reconciles_total`. Beside them, [`runtime`] exports the controller-runtime families
//! (`controller_runtime_*`, `workqueue_*`) that upstream's dashboards and alerts read, under
//! upstream's names and labels; [`secure`] serves `/metrics` over HTTPS with upstream's
//! authentication and authorization (`docs/compat.md §10`).
//!
//! The registry is shared as `Arc<Metrics>`; every recording method takes `&self` and is cheap
//! (atomics behind a read lock), so it may be called from any task.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use crate::api::MaintenancePhase;

/// Declares the values of one metric label as an enum whose variants are spelled exactly as they
/// are exported (prometheus-client's `EncodeLabelValue` derive writes the variant's name), with
/// `ALL` listing every variant once, for creating the series at zero.
macro_rules! label_values {
    ($(#[$meta:meta])* $vis:vis enum $name:ident { $($(#[$vmeta:meta])* $variant:ident,)+ }) => {
        $(#[$meta])*
        // Spelled as exported, whatever Rust's naming conventions say.
        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        #[derive(
            Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash,
            prometheus_client::encoding::EncodeLabelValue,
        )]
        $vis enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every value, in declaration order.
            $vis const ALL: &'static [$name] = &[$($name::$variant,)+];
        }
    };
}

pub(crate) mod runtime;
pub(crate) mod secure;

/// The content type of [`Metrics::encode`]'s output, for the `Content-Type` header of
/// `GET /metrics`.
pub(crate) const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

label_values! {
    /// The `error` label of `nmo_reconcile_failures_total`: which step of a reconcile failed
    /// (the controller's `Error::metric_label`). Every value exists from start-up at zero.
    pub(crate) enum ReconcileErrorKind {
        /// The NodeMaintenance's node does not exist.
        node_not_found,
        /// Reading or patching the node.
        node,
        /// Taking the node out of maintenance after the medik8s lease was lost.
        stop_after_lease_loss,
        /// The medik8s lease.
        lease,
        /// Listing or evicting the node's pods.
        drain,
        /// A write to the NodeMaintenance's metadata (finalizer, annotation).
        finalizer,
        /// Writing the NodeMaintenance's status.
        status,
        /// The reconcile did not finish in time.
        timeout,
    }
}

label_values! {
    /// The `result` label of `nmo_evictions_total`: how the API server answered one eviction
    /// request. Every value exists from start-up at zero.
    pub(crate) enum EvictionResult {
        /// 2xx: the API server accepted the eviction.
        evicted,
        /// 404, or the pod was replaced by a same-named one (UID precondition failed).
        gone,
        /// 429 from a PodDisruptionBudget.
        blocked_pdb,
        /// 429 for another reason.
        too_many_requests,
        /// Anything else.
        error,
    }
}

label_values! {
    /// The `result` label of `nmo_admission_requests_total`.
    pub(crate) enum AdmissionResult {
        /// The review was answered `allowed: true`.
        allowed,
        /// The review was answered with a denial.
        denied,
        /// The request was not a decodable AdmissionReview.
        invalid,
    }
}

/// The `operation` label of the admission families: the review's operation, or `UNKNOWN`
/// for a request too broken to say (never the request's own text: each distinct value
/// would be a new series, held forever).
#[allow(clippy::upper_case_acronyms)] // spelled as exported
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, prometheus_client::encoding::EncodeLabelValue,
)]
pub(crate) enum AdmissionOperation {
    /// `CREATE`.
    CREATE,
    /// `UPDATE`.
    UPDATE,
    /// `DELETE`.
    DELETE,
    /// `CONNECT`.
    CONNECT,
    /// Not one of the four.
    UNKNOWN,
}

label_values! {
    /// The `reason` label of `nmo_maintenance_blocked_pods`: the `reason` of a
    /// `status.blockers[]` entry, spelled as `kubectl describe nm` shows it, or `Other` for a
    /// reason this build does not know (so the label set stays bounded).
    pub(crate) enum BlockerReason {
        /// An eviction was refused with 429 by a PodDisruptionBudget.
        PodDisruptionBudget,
        /// The API server refuses to evict a pod that several budgets select.
        MultiplePodDisruptionBudgets,
        /// The pod's namespace is terminating.
        NamespaceTerminating,
        /// Evicted, waiting for the pod to go.
        Terminating,
        /// Terminating for longer than its grace period plus a margin.
        StuckTerminating,
        /// Another 429.
        TooManyRequests,
        /// A responder (KubeVirt, the descheduler's contract) is evacuating the pod: a live
        /// migration in flight.
        Evacuating,
        /// KubeVirt refuses: the VMI must live-migrate and cannot.
        NotMigratable,
        /// Any other eviction error.
        EvictionError,
        /// Labelled `wait-completed`: the drain waits until the pod finishes.
        WaitingForCompletion,
        /// An opt-out annotation holds the pod until the drain deadline
        /// (`--honor-opt-out-annotations`).
        OptedOut,
        /// Every pod is gone; a VolumeAttachment still names the node (`waitForVolumeDetach`).
        VolumeAttached,
        /// Every pod is gone; the node's VolumeAttachments could not be read
        /// (`waitForVolumeDetach`).
        VolumeAttachmentsUnread,
        /// `surge: RolloutRestart`: the pod's Deployment was restarted; waiting for it to
        /// replace the pod.
        Surging,
        /// `surge: RolloutRestart`: the pod's Deployment cannot surge (Recreate, maxSurge 0,
        /// paused).
        CannotSurge,
        /// `surge: RolloutRestart`: the restarted Deployment's rollout cannot progress.
        SurgeStuck,
        /// A reason not listed above.
        Other,
    }
}

impl BlockerReason {
    /// The label value for a `status.blockers[].reason` text.
    pub(crate) fn of(reason: &str) -> Self {
        Self::ALL
            .iter()
            .copied()
            .find(|r| format!("{r:?}") == reason)
            .unwrap_or(Self::Other)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BlockedLabels {
    nodemaintenance: String,
    node: String,
    reason: BlockerReason,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MaintenanceLabels {
    nodemaintenance: String,
    node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    error: ReconcileErrorKind,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    phase: MaintenancePhase,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: EvictionResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AdmissionLabels {
    operation: AdmissionOperation,
    result: AdmissionResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    operation: AdmissionOperation,
}

/// Reconcile durations: 5 ms .. ~82 s (15 buckets, factor 2). A reconcile that waits on the API
/// server is tens of milliseconds; one that evicts a batch of pods can take seconds.
fn reconcile_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

/// Admission latencies: 1 ms .. ~4 s (13 buckets, factor 2); the API server gives up after the
/// webhook's `timeoutSeconds` (15 s).
fn admission_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 13))
}

/// Drain durations: 1 s .. ~9 h (16 buckets, factor 2); a drain blocked by a
/// PodDisruptionBudget can last for hours.
fn drain_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 16))
}

/// The operator's metric families (prefix `nmo`).
///
/// | family (as encoded) | type | labels |
/// |---|---|---|
/// | `nmo_reconciles_total` | counter | — |
/// | `nmo_reconcile_failures_total` | counter | `error` |
/// | `nmo_reconcile_duration_seconds` | histogram | — |
/// | `nmo_maintenances` | gauge | `phase` |
/// | `nmo_maintenances_queued` | gauge | — |
/// | `nmo_maintenances_paused` | gauge | — |
/// | `nmo_evictions_total` | counter | `result` |
/// | `nmo_drain_duration_seconds` | histogram | — |
/// | `nmo_admission_requests_total` | counter | `operation`, `result` |
/// | `nmo_admission_duration_seconds` | histogram | `operation` |
/// | `nmo_maintenance_blocked_pods` | gauge | `nodemaintenance`, `node`, `reason` |
/// | `nmo_maintenance_evacuating_pods` | gauge | `nodemaintenance`, `node` |
/// | `nmo_lease_losses_total` | counter | — |
///
/// `nmo_maintenance_blocked_pods` has a series only while a Running maintenance reports
/// blockers of that reason (one series per maintenance and reason, at most
/// [`BlockerReason::ALL`] per maintenance); it is removed when the blockers clear, the phase
/// changes or the maintenance is deleted, so the alerts' `for:` measures how long it has been
/// blocked. `nmo_maintenance_evacuating_pods` (the migrations in flight: the planned
/// `status.evacuatingPods`, which counts every `Evacuating` pod, also those past the cap of
/// `status.blockers`) follows the same rule: one series per Running maintenance with pods
/// evacuating, removed when none is left, the phase changes or the maintenance is deleted.
pub(crate) struct Metrics {
    registry: Registry,
    runtime: runtime::RuntimeMetrics,
    reconciles: Counter,
    reconcile_failures: Family<ErrorLabels, Counter>,
    reconcile_duration: Histogram,
    maintenances: Family<PhaseLabels, Gauge>,
    queued: Gauge,
    paused: Gauge,
    evictions: Family<ResultLabels, Counter>,
    drain_duration: Histogram,
    admission_requests: Family<AdmissionLabels, Counter>,
    admission_duration: Family<OperationLabels, Histogram, fn() -> Histogram>,
    blocked_pods: Family<BlockedLabels, Gauge>,
    /// The `blocked_pods` series of each maintenance, by name, for removing them.
    blocked_series: Mutex<HashMap<String, Vec<BlockedLabels>>>,
    evacuating_pods: Family<MaintenanceLabels, Gauge>,
    /// The `evacuating_pods` series of each maintenance, by name, for removing it.
    evacuating_series: Mutex<HashMap<String, MaintenanceLabels>>,
    lease_losses: Counter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates the registry with every family registered (all at zero).
    pub(crate) fn new() -> Self {
        let mut root = Registry::default();
        let registry = root.sub_registry_with_prefix("nmo");
        let reconciles = Counter::default();
        registry.register(
            "reconciles",
            "Reconcile runs of NodeMaintenance objects",
            reconciles.clone(),
        );
        let reconcile_failures = Family::<ErrorLabels, Counter>::default();
        registry.register(
            "reconcile_failures",
            "Reconcile runs that ended in an error, by error kind",
            reconcile_failures.clone(),
        );
        let reconcile_duration = reconcile_histogram();
        registry.register_with_unit(
            "reconcile_duration",
            "Duration of one reconcile run",
            Unit::Seconds,
            reconcile_duration.clone(),
        );
        let maintenances = Family::<PhaseLabels, Gauge>::default();
        registry.register(
            "maintenances",
            "NodeMaintenance objects by status phase",
            maintenances.clone(),
        );
        let queued = Gauge::default();
        registry.register(
            "maintenances_queued",
            "Maintenances whose evictions wait for a slot of --max-parallel-drains",
            queued.clone(),
        );
        let paused = Gauge::default();
        registry.register(
            "maintenances_paused",
            "Maintenances not Succeeded whose evictions are paused (the paused knob)",
            paused.clone(),
        );
        let evictions = Family::<ResultLabels, Counter>::default();
        registry.register(
            "evictions",
            "Pod eviction attempts by result (evicted, gone, blocked_pdb, too_many_requests, error)",
            evictions.clone(),
        );
        let drain_duration = drain_histogram();
        registry.register_with_unit(
            "drain_duration",
            "Time from the start of a drain until the node had no evictable pods left",
            Unit::Seconds,
            drain_duration.clone(),
        );
        let admission_requests = Family::<AdmissionLabels, Counter>::default();
        registry.register(
            "admission_requests",
            "Admission reviews of NodeMaintenance objects by operation and result (allowed, denied, invalid)",
            admission_requests.clone(),
        );
        let admission_duration =
            Family::<OperationLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                admission_histogram,
            );
        registry.register_with_unit(
            "admission_duration",
            "Time to answer one admission review",
            Unit::Seconds,
            admission_duration.clone(),
        );
        let blocked_pods = Family::<BlockedLabels, Gauge>::default();
        registry.register(
            "maintenance_blocked_pods",
            "Pods a Running NodeMaintenance cannot evict yet, by blocker reason (status.blockers)",
            blocked_pods.clone(),
        );
        let evacuating_pods = Family::<MaintenanceLabels, Gauge>::default();
        registry.register(
            "maintenance_evacuating_pods",
            "Pods of a Running NodeMaintenance that their responder is evacuating: live migrations in flight (status.evacuatingPods)",
            evacuating_pods.clone(),
        );
        let lease_losses = Counter::default();
        registry.register(
            "lease_losses",
            "Maintenances ended because the medik8s lease could not be extended",
            lease_losses.clone(),
        );
        // Families with labels are only encoded once a series exists. Series with a known,
        // bounded label set start at zero so dashboards and `rate()` see them from the start.
        for &result in EvictionResult::ALL {
            let _ = evictions.get_or_create(&ResultLabels { result });
        }
        for &error in ReconcileErrorKind::ALL {
            let _ = reconcile_failures.get_or_create(&ErrorLabels { error });
        }
        for &phase in MaintenancePhase::ALL {
            let _ = maintenances.get_or_create(&PhaseLabels { phase });
        }
        // The webhook is registered for these two operations only.
        for operation in [AdmissionOperation::CREATE, AdmissionOperation::UPDATE] {
            for &result in AdmissionResult::ALL {
                let _ = admission_requests.get_or_create(&AdmissionLabels { operation, result });
            }
            let _ = admission_duration.get_or_create(&OperationLabels { operation });
        }
        let runtime = runtime::RuntimeMetrics::register(&mut root);
        Self {
            registry: root,
            runtime,
            reconciles,
            reconcile_failures,
            reconcile_duration,
            maintenances,
            queued,
            paused,
            evictions,
            drain_duration,
            admission_requests,
            admission_duration,
            blocked_pods,
            blocked_series: Mutex::default(),
            evacuating_pods,
            evacuating_series: Mutex::default(),
            lease_losses,
        }
    }

    /// The controller-runtime families (`controller_runtime_*`, `workqueue_*`).
    pub(crate) fn runtime(&self) -> &runtime::RuntimeMetrics {
        &self.runtime
    }

    /// Counts one reconcile run now and returns a guard that observes the run's duration (in
    /// seconds) into `nmo_reconcile_duration_seconds` when dropped. Keep the guard alive for the
    /// whole reconcile.
    pub(crate) fn reconcile(&self) -> ReconcileTimer {
        self.reconciles.inc();
        ReconcileTimer {
            histogram: self.reconcile_duration.clone(),
            start: Instant::now(),
        }
    }

    /// Counts one failed reconcile of kind `error`.
    pub(crate) fn reconcile_failure(&self, error: ReconcileErrorKind) {
        self.reconcile_failures
            .get_or_create(&ErrorLabels { error })
            .inc();
    }

    /// Sets the number of NodeMaintenance objects currently in `phase` (an object without a
    /// phase yet is counted by the caller as `Running`, `docs/compat.md §10`).
    pub(crate) fn set_maintenances(&self, phase: MaintenancePhase, count: i64) {
        self.maintenances
            .get_or_create(&PhaseLabels { phase })
            .set(count);
    }

    /// Sets the numbers of maintenances queued for a drain slot and paused.
    pub(crate) fn set_waiting(&self, queued: i64, paused: i64) {
        self.queued.set(queued);
        self.paused.set(paused);
    }

    /// Counts one eviction attempt that ended with `result`.
    pub(crate) fn eviction(&self, result: &EvictionResult) {
        self.evictions
            .get_or_create(&ResultLabels { result: *result })
            .inc();
    }

    /// Observes the duration (seconds) of a completed drain.
    pub(crate) fn drain_duration(&self, seconds: f64) {
        self.drain_duration.observe(seconds);
    }

    /// Counts one admission review of `operation` with `result` and observes its latency in
    /// seconds.
    pub(crate) fn admission(
        &self,
        operation: AdmissionOperation,
        result: AdmissionResult,
        seconds: f64,
    ) {
        self.admission_requests
            .get_or_create(&AdmissionLabels { operation, result })
            .inc();
        self.admission_duration
            .get_or_create(&OperationLabels { operation })
            .observe(seconds);
    }

    /// Sets `nmo_maintenance_blocked_pods` of the maintenance `name` (on `node`) to its
    /// `blockers` (the `reason` of each `status.blockers[]` entry): one series per reason with
    /// the number of pods, and none for a reason no longer present. Pass no reasons when the
    /// maintenance is not Running or has no blockers.
    pub(crate) fn set_blockers<'a>(
        &self,
        name: &str,
        node: &str,
        reasons: impl IntoIterator<Item = &'a str>,
    ) {
        let mut counts: HashMap<BlockerReason, i64> = HashMap::new();
        for r in reasons {
            *counts.entry(BlockerReason::of(r)).or_default() += 1;
        }
        let mut series = self
            .blocked_series
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let new: Vec<BlockedLabels> = counts
            .keys()
            .map(|&reason| BlockedLabels {
                nodemaintenance: name.to_string(),
                node: node.to_string(),
                reason,
            })
            .collect();
        for old in series.remove(name).unwrap_or_default() {
            if !new.contains(&old) {
                self.blocked_pods.remove(&old);
            }
        }
        for labels in &new {
            self.blocked_pods
                .get_or_create(labels)
                .set(counts[&labels.reason]);
        }
        if !new.is_empty() {
            series.insert(name.to_string(), new);
        }
    }

    /// Sets `nmo_maintenance_evacuating_pods` of the maintenance `name` (on `node`) to `pods`,
    /// the pods being evacuated (`status.evacuatingPods`); `0` removes its series. Pass `0` when
    /// the maintenance is not Running.
    pub(crate) fn set_evacuating(&self, name: &str, node: &str, pods: i64) {
        let mut series = self
            .evacuating_series
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let labels = MaintenanceLabels {
            nodemaintenance: name.to_string(),
            node: node.to_string(),
        };
        if let Some(old) = series.remove(name)
            && (old != labels || pods == 0)
        {
            self.evacuating_pods.remove(&old);
        }
        if pods > 0 {
            self.evacuating_pods.get_or_create(&labels).set(pods);
            series.insert(name.to_string(), labels);
        }
    }

    /// Removes every `nmo_maintenance_blocked_pods` and `nmo_maintenance_evacuating_pods`
    /// series of the maintenance `name`.
    pub(crate) fn forget_maintenance(&self, name: &str) {
        self.set_blockers(name, "", []);
        self.set_evacuating(name, "", 0);
    }

    /// Counts one maintenance ended because its medik8s lease could not be extended.
    pub(crate) fn lease_lost(&self) {
        self.lease_losses.inc();
    }

    /// Encodes every family as OpenMetrics text (ending in `# EOF`); serve it with
    /// [`OPENMETRICS_CONTENT_TYPE`].
    pub(crate) fn encode(&self) -> String {
        self.runtime.refresh();
        let mut out = String::new();
        // Writing into a String cannot fail; an error here would be a prometheus-client bug.
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("encoding metrics into a String");
        out
    }
}

/// Drop guard returned by [`Metrics::reconcile`]: observes the elapsed time in seconds into
/// `nmo_reconcile_duration_seconds` when dropped. Owns a handle to the histogram, so it may be
/// held across `.await` points and outlive the borrow of [`Metrics`].
#[must_use = "the duration is observed when the guard is dropped"]
pub(crate) struct ReconcileTimer {
    histogram: Histogram,
    start: Instant,
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        self.histogram.observe(self.start.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests;

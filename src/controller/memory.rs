//! What a restart forgets: the little a pass remembers from earlier passes, read into the
//! observation so that every decision built on it is made (and unit-tested) by the planner.
//!
//! - per NodeMaintenance, [`Memory`]: consecutive failed reconciles (the error back-off) and
//!   waits for a lease we never held (the lease back-off);
//! - per process, [`StatusSchema`]: which status fields the installed CRD keeps (upstream's
//!   prunes our additions), so a status that differs only in pruned fields is not written again;
//! - per node, the drain's memory ([`DrainMemory`]: each pod's retry, the evictions in flight,
//!   the refusals that hold many pods, the first listing, the replacements awaited), read into
//!   every drain round's observation and written by the answers as they arrive;
//! - per NodeMaintenance, [`OwnWrites`]: the resourceVersion of our last status write, so that
//!   its own watch event does not start another pass.
//!
//! A restart forgets all of it, and that is safe: the back-offs start over, the schema is probed
//! again, a refused pod is asked once more, and a budget's pods are held from its status.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::api::NodeMaintenanceStatus;
use crate::drain::DrainMemory;

/// What the passes of one NodeMaintenance remember of each other.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Memory {
    /// Reconciles that failed in a row (reset by a success).
    pub failures: u32,
    /// Waits in a row for a lease we never held (reset when the lease is ours).
    pub lease_waits: u32,
    /// Whether the last pass found the maintenance paused (`crate::policy`), for its one event
    /// on a CRD that prunes the `DrainPaused` condition (upstream's); `None` before the first.
    pub paused: Option<bool>,
    /// Whether the last pass found the drain's deadline passed (and so announced it), for its
    /// one event; `None` before the first pass of this process, which then reads the `Drained`
    /// condition's reason.
    pub deadline_announced: Option<bool>,
    /// Whether the last pass found the maintenance queued for a drain slot (`super::queue`):
    /// the end of any pass wakes it once a slot is its; `None` before the first pass.
    pub queued: Option<bool>,
}

/// What a plan does to the memory of its NodeMaintenance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Remember {
    /// Keep it as it is.
    Same,
    /// Replace it.
    Set(Memory),
    /// Drop it: the NodeMaintenance is gone.
    Forget,
}

/// The memory of every NodeMaintenance, the learnt status schema and the drain's memory of
/// every node (one per controller).
#[derive(Debug, Default)]
pub(crate) struct Memories {
    objects: Mutex<HashMap<String, Memory>>,
    schema: Mutex<StatusSchema>,
    drain: DrainMemory,
    own: OwnWrites,
}

impl Memories {
    /// Empty memories that record the controller's status writes in `own`.
    pub(crate) fn with_own_writes(own: OwnWrites) -> Self {
        Memories {
            own,
            ..Memories::default()
        }
    }

    /// Where the status writes are recorded for the NodeMaintenance watch.
    pub(crate) fn own_writes(&self) -> &OwnWrites {
        &self.own
    }

    /// The memory of NodeMaintenance `name` (default when it has none).
    pub(crate) fn of(&self, name: &str) -> Memory {
        lock(&self.objects).get(name).copied().unwrap_or_default()
    }

    /// Applies what a plan decided for `name`.
    pub(crate) fn apply(&self, name: &str, remember: Remember) {
        let mut objects = lock(&self.objects);
        match remember {
            Remember::Same => {}
            Remember::Set(m) if m == Memory::default() => {
                objects.remove(name);
            }
            Remember::Set(m) => {
                objects.insert(name.to_owned(), m);
            }
            Remember::Forget => {
                objects.remove(name);
            }
        }
    }

    /// Counts a failed reconcile of `name`; returns the failures in a row, this one included.
    pub(crate) fn failed(&self, name: &str) -> u32 {
        let mut objects = lock(&self.objects);
        let m = objects.entry(name.to_owned()).or_default();
        m.failures = m.failures.saturating_add(1);
        m.failures
    }

    /// Clears the failure count of `name` after a successful reconcile.
    pub(crate) fn succeeded(&self, name: &str) {
        let mut objects = lock(&self.objects);
        if let Some(m) = objects.get_mut(name) {
            m.failures = 0;
            if *m == Memory::default() {
                objects.remove(name);
            }
        }
    }

    /// The drain's memory, shared with the drain that reads and writes it.
    pub(crate) fn drain(&self) -> DrainMemory {
        self.drain.clone()
    }

    /// The status schema learnt so far.
    pub(crate) fn schema(&self) -> StatusSchema {
        lock(&self.schema).clone()
    }

    /// Learns from a status write (or dry run) of `sent` answered with `stored`, and logs the
    /// fields newly found pruned.
    pub(crate) fn learn(
        &self,
        sent: &NodeMaintenanceStatus,
        stored: Option<&NodeMaintenanceStatus>,
    ) {
        let fresh = lock(&self.schema).learn(sent, stored);
        if !fresh.is_empty() {
            tracing::info!(fields = %fresh.join(","), "the API server prunes these status fields (upstream's CRD schema); they are not compared");
        }
    }
}

/// The resourceVersion each NodeMaintenance had after our last status write to it that must
/// not start a pass (one of progress only, `plan::write::wakes`), shared by the act (which
/// records) and the NodeMaintenance watch (which asks). Cheap to clone.
///
/// The watch event of such a write carries nothing the pass that wrote it did not decide, and
/// that pass already said when to come back (`plan::Requeue`). Let it trigger a pass
/// and a drain that waits for its pods to terminate lists every pod of the node after each of
/// its own progress writes: at 3,000 pods three full lists a second, which slowed the API server
/// that deletes the pods (`cargo bench --bench maintenance -- drainrate`). The identity is the
/// API server's: the resourceVersion of the write's answer, which its watch event carries; any
/// other change (spec, metadata, a status written by someone else) triggers as before, and a
/// relist triggers every object.
#[derive(Clone, Debug, Default)]
pub(crate) struct OwnWrites(Arc<Mutex<HashMap<String, String>>>);

impl OwnWrites {
    /// Records that our status write left NodeMaintenance `name` at `resource_version` (`None`:
    /// a write whose event starts a pass; the last one recorded is forgotten).
    pub(crate) fn wrote(&self, name: &str, resource_version: Option<&str>) {
        let mut own = lock(&self.0);
        match resource_version {
            Some(rv) => own.insert(name.to_owned(), rv.to_owned()),
            None => own.remove(name),
        };
    }

    /// Whether the watched version `resource_version` of `name` is our last status write's
    /// (asked once per event: a match is forgotten).
    pub(crate) fn is_own(&self, name: &str, resource_version: Option<&str>) -> bool {
        let mut own = lock(&self.0);
        let matched =
            resource_version.is_some() && own.get(name).map(String::as_str) == resource_version;
        if matched {
            own.remove(name);
        }
        matched
    }

    /// Forgets `name` (deleted).
    pub(crate) fn forget(&self, name: &str) {
        lock(&self.0).remove(name);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Back-off after the `failures`-th failed reconcile in a row (1 for the first): 1 s doubling
/// per failure up to `max` (controller-runtime's per-item exponential limiter has the same
/// shape).
pub(crate) fn error_backoff(failures: u32, max: Duration) -> Duration {
    Duration::from_secs(1)
        .saturating_mul(2u32.saturating_pow(failures.saturating_sub(1).min(16)))
        .min(max)
}

/// What the API server keeps of the status fields, as far as seen: a field sent and read back
/// is kept, one sent and missing from the answer is pruned (upstream's CRD lacks our additions).
/// Fields never sent yet are unknown; a write carrying one is preceded by a dry run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct StatusSchema {
    /// Fields (JSON names) the API server was seen to keep.
    pub kept: std::collections::BTreeSet<String>,
    /// Fields (JSON names) the API server was seen to prune.
    pub pruned: std::collections::BTreeSet<String>,
}

fn field_names(status: &NodeMaintenanceStatus) -> Vec<String> {
    serde_json::to_value(status)
        .ok()
        .and_then(|v| v.as_object().map(|m| m.keys().cloned().collect()))
        .unwrap_or_default()
}

impl StatusSchema {
    /// Every status field's JSON name: those [`probe`](Self::probe) sets.
    pub(crate) fn fields() -> Vec<String> {
        field_names(&Self::probe(jiff::Timestamp::UNIX_EPOCH))
    }

    /// The pruned fields, for [`needs_write`].
    pub(crate) fn pruned(&self) -> Vec<String> {
        self.pruned.iter().cloned().collect()
    }

    /// Whether `status` sets a field whose fate is not known yet.
    pub(crate) fn has_unknown(&self, status: &NodeMaintenanceStatus) -> bool {
        field_names(status)
            .iter()
            .any(|f| !self.kept.contains(f) && !self.pruned.contains(f))
    }

    /// Learns from a write of `sent` answered with `stored`; returns the fields newly found
    /// pruned.
    pub(crate) fn learn(
        &mut self,
        sent: &NodeMaintenanceStatus,
        stored: Option<&NodeMaintenanceStatus>,
    ) -> Vec<String> {
        let stored = stored.map(field_names).unwrap_or_default();
        let mut fresh = Vec::new();
        for f in field_names(sent) {
            if stored.contains(&f) {
                self.kept.insert(f);
            } else if self.pruned.insert(f.clone()) {
                fresh.push(f);
            }
        }
        fresh
    }
}

impl StatusSchema {
    /// A status with every field set to a value every CRD version accepts: the body of the dry
    /// run that tells which fields the installed CRD keeps, before the first write needs to know.
    /// It must set every field: [`fields`](Self::fields) reads them from it, and the status
    /// patch nulls those it does not send.
    pub(crate) fn probe(now: jiff::Timestamp) -> NodeMaintenanceStatus {
        let time = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::from_second(now.as_second()).unwrap_or(now),
        );
        NodeMaintenanceStatus {
            phase: Some(crate::api::MaintenancePhase::Running),
            drain_progress: Some(0),
            last_update: Some(time.clone()),
            last_error: Some(String::new()),
            pending_pods: Some(Vec::new()),
            pending_pods_refs: Some(Vec::new()),
            total_pods: Some(0),
            eviction_pods: Some(0),
            error_on_lease_count: Some(0),
            blockers: Some(Vec::new()),
            evacuating_pods: Some(0),
            drain_start_time: Some(time.clone()),
            drain_deadline: Some(time),
            on_timeout: Some(crate::api::OnTimeout::Wait),
            observed_generation: Some(0),
            conditions: Some(Vec::new()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_version_our_status_write_left_is_our_own_and_only_once() {
        let own = OwnWrites::default();
        assert!(!own.is_own("a", Some("5")), "nothing written yet");
        own.wrote("a", Some("7"));
        assert!(
            !own.is_own("a", Some("6")),
            "an earlier change is someone else's"
        );
        assert!(!own.is_own("b", Some("7")), "another object");
        assert!(!own.is_own("a", None));
        assert!(own.is_own("a", Some("7")));
        assert!(!own.is_own("a", Some("7")), "a match is forgotten");
        own.wrote("a", Some("9"));
        own.forget("a");
        assert!(!own.is_own("a", Some("9")), "forgotten with the object");
    }

    #[test]
    fn error_backoff_doubles_from_one_second_to_the_cap() {
        let max = Duration::from_secs(300);
        let got: Vec<u64> = (1..=10).map(|n| error_backoff(n, max).as_secs()).collect();
        assert_eq!(got, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300]);
        assert_eq!(error_backoff(u32::MAX, max), max);
    }

    #[test]
    fn the_probe_sets_every_status_field() {
        let probe = StatusSchema::probe(jiff::Timestamp::UNIX_EPOCH);
        let mut schema = StatusSchema::default();
        assert!(schema.has_unknown(&probe));
        schema.learn(&probe, Some(&probe));
        assert!(!schema.has_unknown(&probe));
        assert_eq!(field_names(&probe).len(), 16);
    }

    #[test]
    fn memory_is_dropped_when_back_to_default() {
        let m = Memories::default();
        assert_eq!(m.failed("a"), 1);
        assert_eq!(m.failed("a"), 2);
        m.succeeded("a");
        assert_eq!(m.of("a"), Memory::default());
        m.apply(
            "a",
            Remember::Set(Memory {
                failures: 0,
                lease_waits: 3,
                paused: None,
                deadline_announced: None,
                queued: None,
            }),
        );
        assert_eq!(m.of("a").lease_waits, 3);
        m.apply("a", Remember::Forget);
        assert!(lock(&m.objects).is_empty());
    }
}

//! What every pass shares: the [`Context`] (clients, caches, metrics, memory) and the
//! [`Error`] of a pass, whose text is what `status.lastError` says.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::Store;

use super::memory;
use crate::api::NodeMaintenance;
use crate::drain::{DrainError, Drainer};
use crate::lease::{LeaseError, NodeLeases};
use crate::metrics::{Metrics, ReconcileErrorKind};
use crate::node::NodeError;
use kube::runtime::reflector::ObjectRef;

/// The events' reporting controller (upstream's recorder name, docs/compat.md §4).
pub(crate) const REPORTER: &str = "NodeMaintenance";
/// Longest back-off after repeated reconcile errors of one object.
pub(crate) const MAX_ERROR_BACKOFF: Duration = Duration::from_secs(300);

/// Errors of one reconcile. Each displays the text written to `status.lastError`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// Entering, leaving or handing over the node failed (`nodes "<n>" not found`,
    /// `patching node taints failed: <err>`, or the raw GET error).
    #[error("{0}")]
    Node(#[from] NodeError),
    /// Leaving maintenance after the lease was lost for good failed (upstream's text).
    #[error("failed to uncordon upon failure to obtain owned lease: {0}")]
    StopAfterLeaseLoss(#[source] NodeError),
    /// Reading the node failed.
    #[error("{0}")]
    GetNode(#[source] kube::Error),
    /// Requesting or invalidating the lease failed with an API error (not AlreadyHeld).
    #[error("{0}")]
    Lease(#[from] LeaseError),
    /// A drain pass could not list the node's pods or look up a DaemonSet.
    #[error("{0}")]
    Drain(#[from] DrainError),
    /// Counting the pods for the status initialisation failed (upstream's text plus the cause).
    #[error("failed to get pods for eviction while initializing status: {0}")]
    InitStatus(#[source] DrainError),
    /// Adding the finalizer failed (409 when the object changed meanwhile). The raw API error,
    /// as upstream's `lastError` (docs/compat.md §5).
    #[error("{0}")]
    AddFinalizer(#[source] kube::Error),
    /// Removing the finalizer failed; the raw API error, as upstream's.
    #[error("{0}")]
    RemoveFinalizer(#[source] kube::Error),
    /// A required write of the NodeMaintenance's annotations failed: clearing the record of a
    /// node left when `spec.nodeName` changed (recording the node entered is best effort).
    #[error("failed to record the node entered for maintenance: {0}")]
    RecordEnteredNode(#[source] kube::Error),
    /// Deleting the NodeMaintenance once it expired (`expireAfter`) failed.
    #[error("failed to delete the expired NodeMaintenance: {0}")]
    Expire(#[source] kube::Error),
    /// Writing the status failed (409 when the object changed since it was read).
    #[error("failed to update NodeMaintenance status: {0}")]
    Status(#[source] kube::Error),
    /// The reconcile did not finish within [`RECONCILE_TIMEOUT`] (the API server kept answering
    /// 429/5xx, which the client retries); it is retried with backoff, so no worker is held.
    #[error("reconcile did not finish within {} s; retrying", .0.as_secs())]
    Timeout(Duration),
}

/// Upper bound of one reconcile. A pass makes a handful of API calls; only a struggling API
/// server (the client's own 429/503/504 retries) makes one last this long.
pub(crate) const RECONCILE_TIMEOUT: Duration = Duration::from_secs(60);

impl Error {
    /// The `error` label of `nmo_reconcile_failures_total`.
    pub(crate) fn metric_label(&self) -> ReconcileErrorKind {
        match self {
            Error::Node(_) | Error::GetNode(_) => ReconcileErrorKind::node,
            Error::StopAfterLeaseLoss(_) => ReconcileErrorKind::stop_after_lease_loss,
            Error::Lease(_) => ReconcileErrorKind::lease,
            Error::Drain(_) | Error::InitStatus(_) => ReconcileErrorKind::drain,
            // Every write to the NodeMaintenance's metadata.
            Error::AddFinalizer(_)
            | Error::RemoveFinalizer(_)
            | Error::RecordEnteredNode(_)
            | Error::Expire(_) => ReconcileErrorKind::finalizer,
            Error::Status(_) => ReconcileErrorKind::status,
            Error::Timeout(_) => ReconcileErrorKind::timeout,
        }
    }

    /// A 409 on the NodeMaintenance itself: our copy was stale. The watch delivers the new
    /// version at once, so a quick retry is right and there is nothing to tell the user.
    /// A 422 Invalid is not stale: it is a bug in what we wrote, and retrying at once would only
    /// repeat it (see [`Error::invalid_fields`]).
    pub(crate) fn is_stale_object(&self) -> bool {
        match self {
            Error::Status(e)
            | Error::AddFinalizer(e)
            | Error::RemoveFinalizer(e)
            | Error::RecordEnteredNode(e)
            | Error::Expire(e) => {
                matches!(e, kube::Error::Api(s) if s.is_conflict())
            }
            _ => false,
        }
    }

    /// The API server's answer when this error is one, whichever write or read it came from
    /// (status, node patch, finalizer, lease).
    pub(crate) fn api_status(&self) -> Option<&kube::core::Status> {
        let source = match self {
            Error::Node(NodeError::Patch(e))
            | Error::StopAfterLeaseLoss(NodeError::Patch(e))
            | Error::GetNode(e)
            | Error::AddFinalizer(e)
            | Error::RemoveFinalizer(e)
            | Error::RecordEnteredNode(e)
            | Error::Expire(e)
            | Error::Status(e)
            | Error::Lease(
                LeaseError::Api(e) | LeaseError::GetNamespace(e) | LeaseError::CreateNamespace(e),
            ) => e,
            _ => return None,
        };
        match source {
            kube::Error::Api(status) => Some(status),
            _ => None,
        }
    }

    /// For a 422 Invalid answer to any of our writes: the fields the API server names (from
    /// `details.causes[].field`, else parsed from the message `... is invalid: <field>: ...`),
    /// possibly empty. `None` for every other error.
    pub(crate) fn invalid_fields(&self) -> Option<Vec<String>> {
        invalid_fields_of(self.api_status()?)
    }
}

/// For a 422 Invalid answer: the fields the API server names (`details.causes[].field`, else
/// parsed from the message `... is invalid: <field>: ...`), possibly empty; `None` for any other
/// answer.
pub(crate) fn invalid_fields_of(status: &kube::core::Status) -> Option<Vec<String>> {
    if status.code != 422 {
        return None;
    }
    let mut fields: Vec<String> = status
        .details
        .iter()
        .flat_map(|d| d.causes.iter())
        .map(|c| c.field.clone())
        .filter(|f| !f.is_empty())
        .collect();
    if fields.is_empty()
        && let Some((_, rest)) = status.message.split_once(" is invalid: ")
    {
        fields.extend(
            rest.split(", ")
                .filter_map(|part| part.split_once(": ").map(|(f, _)| f.trim().to_owned()))
                .filter(|f| !f.is_empty() && !f.contains(' ')),
        );
    }
    fields.dedup();
    Some(fields)
}

/// Shared state of all reconciles.
pub(crate) struct Context {
    /// All NodeMaintenances.
    pub nms: Api<NodeMaintenance>,
    /// All Nodes.
    pub nodes: Api<Node>,
    /// The drain.
    pub drainer: Drainer,
    /// The medik8s leases.
    pub leases: NodeLeases,
    /// Event recorder (reporting controller `NodeMaintenance`).
    pub recorder: Recorder,
    /// The recorder's `reportingInstance`, for the events written without it (names too long
    /// for its event names, `act::event_name`).
    pub reporter_instance: Option<String>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// The controller's NodeMaintenance cache.
    pub store: Store<NodeMaintenance>,
    /// True while the NodeMaintenance watch is delivering: set when it has listed everything
    /// (the cache is complete) or delivers an event, cleared by a watch error or the start of a
    /// relist (the cache may then miss changes, e.g. a deletion, until the watch is back).
    pub nms_synced: tokio::sync::watch::Receiver<bool>,
    /// What a restart forgets: per-object back-off counters and the learnt status schema, read
    /// into every pass's observation (`memory.rs`).
    pub memory: memory::Memories,
    /// The operator's defaults of the drain knobs (`crate::policy`).
    pub policy: crate::policy::Defaults,
    /// The cluster-wide drain budget (`--max-parallel-drains`), when one is set.
    pub drain_budget: Option<DrainBudget>,
    /// The process's Node watch: the drain's gate reads whether a node is going down.
    pub node_cache: crate::watch::nodes::NodeCache,
    /// Starts a pass of a NodeMaintenance outside its watch: an eviction of its drain answered.
    pub wake: futures::channel::mpsc::UnboundedSender<ObjectRef<NodeMaintenance>>,
}

impl Context {
    /// Sets `nmo_maintenances{phase}` from the cache.
    pub(super) fn update_phase_gauges(&self) {
        let all = self.store.state();
        for (phase, count) in phase_counts(
            all.iter()
                .map(|nm| nm.status.as_ref().and_then(|s| s.phase)),
        ) {
            self.metrics.set_maintenances(phase, count);
        }
        let now = jiff::Timestamp::now();
        let active: Vec<&NodeMaintenance> = all
            .iter()
            .map(AsRef::as_ref)
            .filter(|nm| {
                super::queue::active(nm, &super::plan::timeline::holds)
                    && crate::policy::drains(nm, &self.policy, now)
            })
            .collect();
        let paused = active
            .iter()
            .filter(|nm| crate::policy::resolve(nm, &self.policy).0.paused)
            .count();
        let queued = self.drain_budget.as_ref().map_or(0, |b| {
            active.len()
                - super::queue::admitted(
                    active.iter().copied(),
                    &b.slots(),
                    |n| b.budgets_of(n),
                    &super::plan::timeline::holds,
                )
                .len()
        });
        self.metrics.set_waiting(
            i64::try_from(queued).unwrap_or(i64::MAX),
            i64::try_from(paused).unwrap_or(i64::MAX),
        );
    }

    /// Wakes the maintenances that hold a slot of the drain budget now but whose last pass found
    /// them queued: a slot freed (a maintenance released its node, failed or is being deleted),
    /// and the next one starts at once rather than at its next periodic pass. Called after every
    /// pass.
    pub(super) fn wake_admitted(&self) {
        let Some(budget) = &self.drain_budget else {
            return;
        };
        let all = self.store.state();
        let drains = all
            .iter()
            .map(AsRef::as_ref)
            .filter(|nm| crate::policy::drains(nm, &self.policy, jiff::Timestamp::now()));
        let admitted = super::queue::admitted(
            drains,
            &budget.slots(),
            |n| budget.budgets_of(n),
            &super::plan::timeline::holds,
        );
        for name in admitted {
            if self.memory.of(&name).queued == Some(true) {
                let _ = self.wake.unbounded_send(ObjectRef::new(&name));
            }
        }
    }
}

/// NodeMaintenances per phase, every phase present. An object without a phase yet (created,
/// not reconciled) counts as `Running`, the phase its first reconcile gives it as upstream's
/// does: a `phase=""` series would read in PromQL as a series without the label
/// (`docs/compat.md §10`).
pub(super) fn phase_counts(
    phases: impl IntoIterator<Item = Option<crate::api::MaintenancePhase>>,
) -> Vec<(crate::api::MaintenancePhase, i64)> {
    use crate::api::MaintenancePhase;
    let mut counts: Vec<(MaintenancePhase, i64)> =
        MaintenancePhase::ALL.iter().map(|&p| (p, 0)).collect();
    for phase in phases {
        let phase = phase.unwrap_or(MaintenancePhase::Running);
        if let Some((_, n)) = counts.iter_mut().find(|(p, _)| *p == phase) {
            *n += 1;
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_maintenance_without_a_phase_counts_as_running() {
        use crate::api::MaintenancePhase::{Failed, Running, Succeeded};
        assert_eq!(
            phase_counts([None, Some(Running), Some(Failed), None]),
            vec![(Running, 3), (Succeeded, 0), (Failed, 1)]
        );
        assert_eq!(
            phase_counts([]),
            vec![(Running, 0), (Succeeded, 0), (Failed, 0)]
        );
    }

    fn status(code: u16, message: &str, causes: &[&str]) -> kube::core::Status {
        serde_json::from_value(serde_json::json!({
            "code": code,
            "message": message,
            "reason": if code == 409 { "Conflict" } else { "Invalid" },
            "details": {"causes": causes.iter().map(|f| serde_json::json!({"field": f, "reason": "FieldValueInvalid"})).collect::<Vec<_>>()},
        }))
        .unwrap()
    }

    #[test]
    fn an_invalid_answer_names_its_fields_and_is_not_stale() {
        let s = status(
            422,
            "whatever",
            &["status.phase", "status.phase", "status.totalpods"],
        );
        assert_eq!(
            invalid_fields_of(&s),
            Some(vec![
                "status.phase".to_string(),
                "status.totalpods".to_string()
            ])
        );
        let from_message = status(
            422,
            r#"NodeMaintenance.nodemaintenance.medik8s.io "a" is invalid: status.drainProgress: Invalid value: "x": must be an integer"#,
            &[],
        );
        assert_eq!(
            invalid_fields_of(&from_message),
            Some(vec!["status.drainProgress".to_string()])
        );
        assert_eq!(invalid_fields_of(&status(409, "conflict", &[])), None);
        let err = Error::Status(kube::Error::Api(Box::new(s)));
        assert!(!err.is_stale_object(), "a 422 is retried with back-off");
        assert!(err.invalid_fields().is_some());
        let conflict = Error::Status(kube::Error::Api(Box::new(status(409, "c", &[]))));
        assert!(conflict.is_stale_object() && conflict.invalid_fields().is_none());
        let node = Error::Node(NodeError::Patch(kube::Error::Api(Box::new(status(
            422,
            "x",
            &["metadata.labels"],
        )))));
        assert_eq!(
            node.invalid_fields(),
            Some(vec!["metadata.labels".to_string()])
        );
    }
}

/// The drain budgets and what they are a share of.
#[derive(Clone)]
pub(crate) struct DrainBudget {
    /// `--max-parallel-drains`.
    pub limit: Option<crate::policy::DrainLimit>,
    /// `--max-parallel-drains-for`, in flag order.
    pub per: Vec<crate::policy::NodeBudget>,
    /// The process's Node watch (a percentage is of the nodes it holds, or selects), which
    /// records the node budgets that select each node.
    pub nodes: crate::watch::nodes::NodeCache,
}

impl DrainBudget {
    /// The budgets' slots now.
    pub(crate) fn slots(&self) -> super::queue::Slots {
        super::queue::Slots {
            all: self.limit.map(|l| {
                (
                    l.slots(self.nodes.len()),
                    format!("--max-parallel-drains={l}"),
                )
            }),
            per: self
                .per
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    let selected = self.nodes.count(|e| e.budgets & (1 << i) != 0);
                    (
                        b.limit.slots(selected),
                        format!("--max-parallel-drains-for={}={}", b.text, b.limit),
                    )
                })
                .collect(),
        }
    }

    /// The node budgets that select node `name` (a bit each); none for a node not cached.
    pub(crate) fn budgets_of(&self, name: &str) -> u32 {
        self.nodes.get(name).map_or(0, |e| e.budgets)
    }
}

//! The drain: which pods leave a node in maintenance, in which order, and one non-blocking
//! eviction pass (the rules for cluster admins: `docs/drain-contract.md`).
//!
//! The pod selection mirrors upstream NMO's settings of the kubectl drain library
//! (`k8s.io/kubectl/pkg/drain`: `Force`, `DeleteEmptyDirData`, `IgnoreAllDaemonSets`, grace period
//! -1, eviction API only), applied in kubectl's filter order. What differs is the shape: upstream
//! blocks its only worker for up to 30 s per pass, retrying 429s in a tight loop; a pass here
//! evicts what it can, records why every other pod is still on the node, and returns. The
//! controller requeues and runs the next pass.
//!
//! Modules by concern, in layers (a file uses only files below it; this one only names them):
//! `consts.rs` (the vocabulary: limits, annotations, reasons), `disposition.rs` (the decision
//! types) and `error.rs` (a failed pass) at the bottom; `pod.rs`, the slim pod the list is read
//! into; `rules.rs` finds a pod's drain rule, `opt_out.rs` is the chain's last link, `decide.rs`
//! decides one pod; `answer.rs` reads one eviction answer; `report.rs` is what a round
//! reports; `memory.rs` is each node's memory between rounds; `round.rs` plans a round and
//! settles its answers into a report and the next memory (pure); `send.rs` records a round and
//! sends its evictions and deletions; `act.rs` ([`Drainer`]) runs a round: observes the pods,
//! each read under a deadline, decides, then acts. The size bounds of everything written are
//! `crate::bounds`.
//!
//! Defaults, documented because kubectl's own defaults are different (each would abort the drain),
//! and our deliberate differences from upstream (`docs/compat.md §7`, `docs/design.md §2`):
//! - DaemonSet-managed pods stay (the DaemonSet would recreate them anyway), unless the
//!   maintenance's `daemonSets` knob says `EvictLast` ([`daemon_sets`]). A pod counts as
//!   DaemonSet-managed only when its controller reference is of group `apps`, kind `DaemonSet`,
//!   and the DaemonSet of that name has the reference's UID; a pod whose DaemonSet is gone (or
//!   replaced by a same-named one) is evicted.
//! - Mirror (static) pods stay, since the API server cannot delete them.
//! - Every other pod that was on the node before the drain started is evicted, whatever it
//!   tolerates (upstream's rule). Only a pod that arrived after the drain started and tolerates
//!   both maintenance taints is kept: it is a replacement that can only come back
//!   ([`Arrival::arrived_after`]).
//! - Finished pods stay (kubectl and upstream delete them): they run nothing, and their record
//!   is kept for the Job or admin that reads it.
//! - Pods using emptyDir and pods without a controller are evicted.
//! - Eviction goes in [`Stage`] order: ordinary pods first, system-critical pods once no ordinary
//!   pod is left, the operator's own pod (`POD_NAME`/`POD_NAMESPACE`) last, so the drain never
//!   stops half-way and the webhook is not left without a running pod after the node reboots.
//! - A refused eviction is retried per pod, no sooner than [`EVICTION_RETRY_INTERVAL`] later,
//!   whatever triggers the next pass, unless the PodDisruptionBudget that refused it changed
//!   since, as its watch saw ([`Budget::relief_after`]).

mod act;
pub(crate) mod answer;
pub(crate) mod budget;
pub(crate) mod cancel;
pub(crate) mod consts;
pub(crate) mod daemon_sets;
pub(crate) mod deadline;
pub(crate) mod decide;
pub(crate) mod disposition;
mod error;
pub(crate) mod gate;
mod gone;
pub(crate) mod memory;
pub(crate) mod migration;
pub(crate) mod opt_out;
pub(crate) mod pod;
mod preview;
pub(crate) mod report;
pub(crate) mod requester;
pub(crate) mod responders;
pub(crate) mod round;
pub(crate) mod rules;
mod send;
pub(crate) mod surge;
mod surge_io;
pub(crate) mod volume_detach;

pub(crate) use act::Drainer;
pub(crate) use budget::{Budget, BudgetWatch, Relief};
pub(crate) use consts::*;
pub(crate) use decide::*;
pub(crate) use disposition::*;
pub(crate) use error::DrainError;
pub(crate) use memory::*;
pub(crate) use report::{DrainReport, Survey};
pub(crate) use send::SendClients;

#[cfg(test)]
pub(crate) mod tests;

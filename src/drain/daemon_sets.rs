//! DaemonSet pods last (`daemonSets: EvictLast`; `docs/drain-contract.md` "DaemonSet pods
//! last"; issue 47 item 3). By default (`Ignore`, upstream's and kubectl's
//! `--ignore-daemonsets`) the pods of an existing DaemonSet stay on the node
//! ([`Disposition::SkipDaemonSet`](super::Disposition::SkipDaemonSet)), so log shippers, CNI
//! and GPU agents are killed mid-write when the node goes down. Under `EvictLast` they go
//! through the same chain as every other pod ([`super::decide()`]) and are evicted, through the
//! Eviction API (budgets respected), in [`Stage::DaemonSet`]: once every ordinary pod has left
//! the node, before the system-critical pods and the operator's own pod (the stage is
//! [`super::decide::stage`]'s).
//!
//! [`Stage::DaemonSet`]: super::disposition::Stage::DaemonSet
//!
//! What the chain already says for them, unchanged: a mirror or finished pod stays; a pod's
//! own drain label (`skip`, `wait-completed`) and a drain rule that skips or waits for it
//! decide; an opt-out annotation holds it. One that comes back because its DaemonSet tolerates
//! both maintenance taints (`medik8s.io/drain` and `node.kubernetes.io/unschedulable`, which the
//! DaemonSet controller adds to every DaemonSet pod) arrived after the drain started and is
//! kept, by name ([`Disposition::KeepReplacement`](super::Disposition::KeepReplacement)); one
//! that does not tolerate `medik8s.io/drain` is not recreated on the node by the DaemonSet
//! controller. Nothing is remembered: each round decides from the pods' owner references and
//! creation timestamps. Pure.

use super::consts::reason;
use super::disposition::DrainOptions;
use crate::api::DaemonSets;

/// Whether the drain takes the pods of an existing DaemonSet (`EvictLast`); `false`: they stay
/// (`Ignore`).
pub(crate) fn drained(options: &DrainOptions) -> bool {
    options.daemon_sets == DaemonSets::EvictLast
}

/// The blocker's reason and text of a DaemonSet pod waiting for its turn
/// ([`Stage::DaemonSet`](super::disposition::Stage::DaemonSet)).
/// No counts, so it does not change from pass to pass.
pub(crate) fn waiting() -> (&'static str, String) {
    (
        reason::DAEMON_SET,
        "DaemonSet pod (daemonSets: EvictLast): evicted once every other evictable pod has left \
         the node, before the system-critical pods"
            .to_string(),
    )
}

#[cfg(test)]
mod tests;

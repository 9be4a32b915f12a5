//! The pre-drain hooks in a maintenance pass (`crate::policy::pre_drain_hooks`,
//! `docs/drain-contract.md` §12): the `PreDrainHooks` condition naming the owners that hold the
//! drain, the Node's `DrainInProgress` while they do, and whether the pass may record the drain's
//! start. The hold itself is the pass's: a hooked maintenance ends its pass at the queue step as
//! a paused one does (`DrainPolicy::holds_evictions`), with its node entered. Pure.

use super::condition::{Stamp, condition, set_condition};
use crate::api::NodeMaintenanceStatus;
use crate::node::conditions::Lifecycle;

/// Condition type: `True` (reason [`HELD`]) while a pre-drain hook is present, naming the
/// owners; `False` (reason [`RELEASED`]) once the last is removed. Written only once a hook was
/// seen, so a maintenance that never had one keeps upstream's status.
pub(crate) const PRE_DRAIN_HOOKS: &str = "PreDrainHooks";
/// Reason of [`PRE_DRAIN_HOOKS`] `True`.
pub(crate) const HELD: &str = "HooksPresent";
/// Reason of [`PRE_DRAIN_HOOKS`] `False`.
pub(crate) const RELEASED: &str = "HooksRemoved";
/// Reason of the Node's `DrainInProgress=False` while a hook holds the drain.
pub(crate) const NODE_REASON: &str = "PreDrainHooks";

/// `status` with [`PRE_DRAIN_HOOKS`] for `hooks` (the owners, in name order): `True` naming
/// each while any is present, `False` once none is and the condition was there.
pub(crate) fn status(
    status: &NodeMaintenanceStatus,
    hooks: &[String],
    at: Stamp,
) -> NodeMaintenanceStatus {
    let mut s = status.clone();
    if !hooks.is_empty() {
        let message = format!(
            "the drain waits for the pre-drain hooks of {} (annotations {}<owner>): the node is \
             cordoned and tainted, no pod is evicted and the drain's deadline does not count \
             until each owner removes its annotation",
            crate::policy::pre_drain_hooks::named(hooks),
            crate::policy::pre_drain_hooks::PRE_DRAIN_HOOK_PREFIX,
        );
        set_condition(&mut s, PRE_DRAIN_HOOKS, true, HELD, message, at);
    } else if condition(status, PRE_DRAIN_HOOKS).is_some() {
        let message = "no pre-drain hook holds the drain";
        set_condition(&mut s, PRE_DRAIN_HOOKS, false, RELEASED, message, at);
    }
    s
}

/// `l` with `DrainInProgress=False` (reason [`NODE_REASON`]) while `hooks` hold a drain it
/// would otherwise say is in progress.
pub(crate) fn lifecycle(mut l: Lifecycle, hooks: &[String]) -> Lifecycle {
    if !hooks.is_empty() && l.draining.0 {
        l.draining = (false, NODE_REASON);
    }
    l
}

/// Whether a pass may record the drain's start (`timeline::start_record`): it `drains` (stage
/// Drain, a slot held, not Succeeded) and no hook holds it. A held drain has not started, so its
/// deadline (`drainTimeout`, from the start on the node) counts from the pass after the last
/// hook is removed: an admin reads the deadline as the time the evictions may take.
pub(crate) fn may_start(drains: bool, hooks: &[String]) -> bool {
    drains && hooks.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Stage;

    fn t(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    /// A status written at `t(s)` of generation 1.
    fn at(s: i64) -> Stamp {
        Stamp {
            generation: Some(1),
            now: t(s),
        }
    }

    fn hooks(owners: &[&str]) -> Vec<String> {
        owners.iter().map(|o| o.to_string()).collect()
    }

    #[test]
    fn the_status_names_the_hooks_that_hold_and_says_when_the_last_is_gone() {
        let none = NodeMaintenanceStatus::default();
        // Never hooked: upstream's status, no condition.
        assert_eq!(status(&none, &[], at(0)), none);
        let both = status(&none, &hooks(&["backup", "rook-ceph"]), at(0));
        let c = condition(&both, PRE_DRAIN_HOOKS).unwrap();
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", HELD));
        assert!(
            c.message.contains("\"backup\", \"rook-ceph\""),
            "{}",
            c.message
        );
        let one = status(&both, &hooks(&["rook-ceph"]), at(5));
        let c = condition(&one, PRE_DRAIN_HOOKS).unwrap();
        assert_eq!(c.status, "True");
        assert!(
            c.message.contains("\"rook-ceph\"") && !c.message.contains("backup"),
            "{}",
            c.message
        );
        // Still held since t(0): one transition.
        assert_eq!(c.last_transition_time.0, t(0));
        let gone = status(&one, &[], at(9));
        let c = condition(&gone, PRE_DRAIN_HOOKS).unwrap();
        assert_eq!(
            (
                c.status.as_str(),
                c.reason.as_str(),
                c.last_transition_time.0
            ),
            ("False", RELEASED, t(9))
        );
    }

    #[test]
    fn a_hooked_drain_neither_starts_nor_shows_in_progress() {
        assert!(may_start(true, &[]));
        assert!(!may_start(true, &hooks(&["a"])));
        assert!(!may_start(false, &[]));
        let draining = Lifecycle::of(Stage::Drain, true, false, false);
        assert!(draining.draining.0);
        let held = lifecycle(draining, &hooks(&["a"]));
        assert_eq!(held.draining, (false, NODE_REASON));
        // Entered all the same: the node is in maintenance.
        assert_eq!(held.in_progress, draining.in_progress);
        assert_eq!(lifecycle(draining, &[]), draining);
        // Stage Cordon says what it said.
        let cordon = Lifecycle::of(Stage::Cordon, true, false, false);
        assert_eq!(lifecycle(cordon, &hooks(&["a"])), cordon);
    }
}

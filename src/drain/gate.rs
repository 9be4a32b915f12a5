//! Whether a maintenance may still send the evictions and forced deletions its round decided
//! (`docs/drain-contract.md` §4 and §10 `paused`, `stage`). A round decides from the object it
//! was given; its requests are then sent each on its own, waiting for one of the process's
//! slots, up to a webhook's answer later. Right before each is sent, the executor asks
//! [`may_send`] about the maintenance as the controller's cache holds it then, so that a
//! deletion, a pause, an abort at the deadline (`onTimeout: Abort`), a pre-drain hook or a move
//! out of the stage `Drain` written meanwhile stops the requests not yet sent (the cache sees a
//! write within moments: none starts 2 s after it), and so does the node going down
//! ([`node_shutdown`], as the process's Node watch holds the node). Pure.

pub(crate) mod node_shutdown;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::api::{NodeMaintenance, Stage};
use crate::policy::Defaults;

/// What a request sent on its own (an eviction, a forced DELETE, the watch of pods going) needs
/// from the maintenance it belongs to.
#[derive(Clone)]
pub(crate) struct Standing {
    /// The maintenance's UID (with the drain's start, what `surge` records on a Deployment it
    /// restarts: [`super::surge::record`]).
    pub uid: Option<String>,
    /// Whether the maintenance may still send: [`may_send`] on the object the controller's cache
    /// holds when asked, right before each request is sent.
    pub may_send: Arc<dyn Fn() -> Result<(), Halt> + Send + Sync>,
    /// Wakes the maintenance's next pass: an answer arrived.
    pub wake: Arc<dyn Fn() + Send + Sync>,
}

impl Standing {
    /// Why nothing more may be sent now (`None`: it may): the controller stopped (`stopped`
    /// cancelled), or [`Self::may_send`]'s halt.
    pub(crate) fn halted(&self, stopped: &CancellationToken) -> Option<Halt> {
        if stopped.is_cancelled() {
            return Some(Halt::Stopped);
        }
        (self.may_send)().err()
    }
}

/// Why a maintenance may no longer send what its round decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Halt {
    /// The cache no longer holds it, or holds another object under its name (another UID).
    #[error("the maintenance is gone")]
    Gone,
    /// It is being deleted (`deletionTimestamp` set).
    #[error("the maintenance is being deleted")]
    Deleting,
    /// Its drain was aborted at its deadline (`onTimeout: Abort`): its status records
    /// `Aborted=True` (`controller::plan::abort`).
    #[error("the maintenance's drain was aborted at its deadline")]
    Aborted,
    /// Its `paused` knob resolves to true (annotation, spec, flag).
    #[error("the maintenance is paused")]
    Paused,
    /// A pre-drain hook holds it (`crate::policy::pre_drain_hooks`): one added after the drain
    /// started, on a cluster whose webhook did not refuse it.
    #[error("a pre-drain hook holds the maintenance")]
    Hooked,
    /// Its `stage` knob resolves to a stage short of `Drain`.
    #[error("the maintenance is in stage {0:?}, not Drain")]
    Stage(Stage),
    /// Its node's `GracefulNodeShutdownInProgress` condition is True ([`node_shutdown`]).
    #[error("the node has GracefulNodeShutdownInProgress=True")]
    NodeShuttingDown,
    /// Not of the maintenance: the controller stopped (shutdown, leadership lost), so the
    /// executor sends nothing more.
    #[error("the controller stopped")]
    Stopped,
}

/// Whether the maintenance whose round decided a request (UID `uid`) may send it, given
/// `current`, the object of its name as the controller's cache holds it now (`None`: not held),
/// and the operator's `defaults` (the knobs' flags): it is held with the same UID, is not
/// being deleted, its drain was not aborted (its status), is not paused, no pre-drain hook holds
/// it and its stage is `Drain`, each knob resolved as the pass resolves it
/// ([`crate::policy::resolve`]: a refused value falls back as if absent), and its node is not
/// going down (`node_down`: the node watch's entry says `GracefulNodeShutdownInProgress=True`).
///
/// # Errors
/// The first [`Halt`] that applies, in the order above.
pub(crate) fn may_send(
    uid: Option<&str>,
    current: Option<&NodeMaintenance>,
    defaults: &Defaults,
    node_down: bool,
) -> Result<(), Halt> {
    let Some(nm) = current.filter(|o| o.metadata.uid.as_deref() == uid) else {
        return Err(Halt::Gone);
    };
    if nm.metadata.deletion_timestamp.is_some() {
        return Err(Halt::Deleting);
    }
    if crate::api::condition::aborted(nm) {
        return Err(Halt::Aborted);
    }
    let (policy, _) = crate::policy::resolve(nm, defaults);
    if policy.paused {
        return Err(Halt::Paused);
    }
    if !policy.hooks.is_empty() {
        return Err(Halt::Hooked);
    }
    if policy.stage != Stage::Drain {
        return Err(Halt::Stage(policy.stage));
    }
    if node_down {
        return Err(Halt::NodeShuttingDown);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn nm(uid: &str) -> NodeMaintenance {
        let mut nm = NodeMaintenance::new(
            "nm",
            crate::api::NodeMaintenanceSpec {
                node_name: "n1".into(),
                reason: Some("r".into()),
                ..Default::default()
            },
        );
        nm.metadata.uid = Some(uid.into());
        nm
    }

    #[test]
    fn a_maintenance_sends_only_while_it_stands_unpaused_in_stage_drain() {
        let d = Defaults::default();
        let current = nm("u1");
        assert_eq!(may_send(Some("u1"), Some(&current), &d, false), Ok(()));
        // Gone, or a successor under its name.
        assert_eq!(may_send(Some("u1"), None, &d, false), Err(Halt::Gone));
        assert_eq!(
            may_send(Some("u0"), Some(&current), &d, false),
            Err(Halt::Gone)
        );
        // Being deleted.
        let mut deleting = nm("u1");
        deleting.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        assert_eq!(
            may_send(Some("u1"), Some(&deleting), &d, false),
            Err(Halt::Deleting)
        );
        // Aborted at its deadline (recorded in status), whatever its knobs say now.
        let mut aborted = nm("u1");
        let at = crate::api::condition::Stamp {
            generation: None,
            now: jiff::Timestamp::UNIX_EPOCH,
        };
        let status = aborted.status.get_or_insert_default();
        crate::api::condition::set_condition(
            status,
            crate::api::condition::ABORTED,
            true,
            crate::api::condition::DRAIN_ABORTED,
            "aborted",
            at,
        );
        assert_eq!(
            may_send(Some("u1"), Some(&aborted), &d, false),
            Err(Halt::Aborted)
        );
        // Its abort ended (a stage short of Cordon): it sends again once back in Drain.
        crate::api::condition::set_condition(
            aborted.status.get_or_insert_default(),
            crate::api::condition::ABORTED,
            false,
            crate::api::condition::ABORT_ENDED,
            "ended",
            at,
        );
        assert_eq!(may_send(Some("u1"), Some(&aborted), &d, false), Ok(()));
        // Paused by the spec, by the annotation (which wins), or by the flag.
        let mut paused = nm("u1");
        paused.spec.knobs.paused = Some(true);
        assert_eq!(
            may_send(Some("u1"), Some(&paused), &d, false),
            Err(Halt::Paused)
        );
        paused
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(crate::policy::PAUSED_ANNOTATION.into(), "false".into());
        assert_eq!(may_send(Some("u1"), Some(&paused), &d, false), Ok(()));
        let flag = Defaults {
            paused: true,
            ..Defaults::default()
        };
        assert_eq!(
            may_send(Some("u1"), Some(&current), &flag, false),
            Err(Halt::Paused)
        );
        // A refused value falls back as if absent (here: not paused).
        let mut typo = nm("u1");
        typo.metadata
            .annotations
            .get_or_insert_default()
            .insert(crate::policy::PAUSED_ANNOTATION.into(), "yes".into());
        assert_eq!(may_send(Some("u1"), Some(&typo), &d, false), Ok(()));
        // Moved short of Drain, by the spec or the annotation.
        for stage in [Stage::Idle, Stage::Cordon, Stage::Preflight] {
            let mut back = nm("u1");
            back.spec.knobs.stage = Some(stage);
            assert_eq!(
                may_send(Some("u1"), Some(&back), &d, false),
                Err(Halt::Stage(stage))
            );
        }
        let mut annotated = nm("u1");
        annotated
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(crate::policy::STAGE_ANNOTATION.into(), "Idle".into());
        assert_eq!(
            may_send(Some("u1"), Some(&annotated), &d, false),
            Err(Halt::Stage(Stage::Idle))
        );
        // The node going down halts a maintenance that would send; the halts of the
        // maintenance itself come first.
        assert_eq!(
            may_send(Some("u1"), Some(&current), &d, true),
            Err(Halt::NodeShuttingDown)
        );
        assert_eq!(
            may_send(Some("u1"), Some(&annotated), &d, true),
            Err(Halt::Stage(Stage::Idle))
        );
    }

    #[test]
    fn a_pre_drain_hook_stops_what_a_round_decided_until_its_owner_removes_it() {
        let d = Defaults::default();
        let mut hooked = nm("u1");
        let hook = |o: &str| {
            format!(
                "{}{o}",
                crate::policy::pre_drain_hooks::PRE_DRAIN_HOOK_PREFIX
            )
        };
        let annotations = hooked.metadata.annotations.get_or_insert_default();
        annotations.insert(hook("rook-ceph"), String::new());
        annotations.insert(hook("backup"), String::new());
        assert_eq!(
            may_send(Some("u1"), Some(&hooked), &d, false),
            Err(Halt::Hooked)
        );
        let annotations = hooked.metadata.annotations.get_or_insert_default();
        annotations.remove(&hook("rook-ceph"));
        assert_eq!(
            may_send(Some("u1"), Some(&hooked), &d, false),
            Err(Halt::Hooked)
        );
        let annotations = hooked.metadata.annotations.get_or_insert_default();
        annotations.remove(&hook("backup"));
        assert_eq!(may_send(Some("u1"), Some(&hooked), &d, false), Ok(()));
    }
}

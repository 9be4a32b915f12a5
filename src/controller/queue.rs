//! The cluster-wide drain budget (`--max-parallel-drains`, `docs/drain-contract.md` §10): at most
//! that many nodes out of service for a drain at once. A maintenance holds its slot from its
//! drain's start until its node is released (deleted, or moved to a stage short of Drain),
//! Succeeded or not ([`Holds`], `plan::timeline::holds_slot`); the others wait in creation order
//! (name as tie-break, so a new leader computes the same queue) without touching their nodes.
//! Pure: a view across every maintenance in the controller's cache, read into each pass's
//! observation ([`place`]); the pass of a queued maintenance leaves its node in service, and the
//! end of any pass wakes the maintenances a freed slot let through ([`admitted`]).

use kube::ResourceExt;

use crate::api::{MaintenancePhase, NodeMaintenance};

/// Where one maintenance stands in the drain budgets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// It holds a slot of every budget that applies: its drain runs.
    Draining,
    /// Its evictions wait, `position` (1-based) in the queue.
    Queued {
        /// 1 for the next to start.
        position: usize,
        /// The first budget that is full for it (`--max-parallel-drains=2`).
        full: String,
    },
}

/// The slots of the budgets now: `--max-parallel-drains` (`None`: unlimited) and each node
/// budget's (`--max-parallel-drains-for`), with their names for the status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Slots {
    /// The cluster-wide budget's slots and its flag as given.
    pub all: Option<(usize, String)>,
    /// Each node budget's slots and its flag as given, in flag order (bit `i` of a node's
    /// [`crate::watch::nodes::NodeEntry::budgets`]).
    pub per: Vec<(usize, String)>,
}

/// Whether a maintenance holds its slot now: its drain started and its node is not released
/// (`plan::timeline::holds_slot` of what the NodeMaintenance records).
pub(crate) type Holds<'f> = &'f dyn Fn(&NodeMaintenance) -> bool;

/// Whether `nm` takes part in the budget: not being deleted (its deletion pass releases the
/// node), and not Failed (it evicts nothing; one that recovers takes its place again); a
/// Succeeded one only while it `holds` its slot (its node is still out of service).
pub(crate) fn active(nm: &NodeMaintenance, holds: Holds<'_>) -> bool {
    let phase = nm.status.as_ref().and_then(|s| s.phase);
    nm.metadata.deletion_timestamp.is_none()
        && match phase {
            Some(MaintenancePhase::Failed) => false,
            Some(MaintenancePhase::Succeeded) => holds(nm),
            _ => true,
        }
}

/// The active maintenances of `all` in queue order: those that hold their slot first (a slot is
/// never taken back from a node out of service), then creation time, then name. `me`, when
/// given, takes part while Failed too ([`place`]).
fn in_order<'a>(
    all: impl IntoIterator<Item = &'a NodeMaintenance>,
    me: Option<&str>,
    holds: Holds<'_>,
) -> Vec<&'a NodeMaintenance> {
    let recovering = |nm: &NodeMaintenance| {
        me.is_some_and(|me| nm.name_any() == me)
            && nm.metadata.deletion_timestamp.is_none()
            && nm.status.as_ref().and_then(|s| s.phase) == Some(MaintenancePhase::Failed)
    };
    let mut active: Vec<&NodeMaintenance> = all
        .into_iter()
        .filter(|nm| active(nm, holds) || recovering(nm))
        .collect();
    active.sort_by(|a, b| {
        let created = |nm: &NodeMaintenance| nm.metadata.creation_timestamp.as_ref().map(|t| t.0);
        holds(b)
            .cmp(&holds(a))
            .then_with(|| created(a).cmp(&created(b)))
            .then_with(|| a.name_any().cmp(&b.name_any()))
    });
    active
}

/// The queue: the active maintenances in queue order, each admitted when every budget that
/// applies to it (the cluster-wide one, and each node budget whose bit `budgets_of` its
/// `spec.nodeName` has) still has a free slot, which it then takes; otherwise it waits, with the
/// first budget that was full. A maintenance blocked by one node budget does not hold back a
/// younger one of other nodes.
fn queue<'a>(
    all: impl IntoIterator<Item = &'a NodeMaintenance>,
    me: Option<&str>,
    slots: &Slots,
    budgets_of: impl Fn(&str) -> u32,
    holds: Holds<'_>,
) -> Vec<(String, Option<String>)> {
    let mut used_all = 0;
    let mut used = vec![0usize; slots.per.len()];
    let mut out = Vec::new();
    for nm in in_order(all, me, holds) {
        let mask = budgets_of(&nm.spec.node_name);
        let mine = || (0..slots.per.len()).filter(move |i| mask & (1 << i) != 0);
        let full = match &slots.all {
            Some((n, name)) if used_all >= *n => Some(name.clone()),
            _ => mine()
                .find(|&i| used[i] >= slots.per[i].0)
                .map(|i| slots.per[i].1.clone()),
        };
        if full.is_none() {
            used_all += 1;
            for i in mine() {
                used[i] += 1;
            }
        }
        out.push((nm.name_any(), full));
    }
    out
}

/// The place of maintenance `name` among `all` under `slots` ([`queue`]), with `name` taking part
/// even while Failed (its pass is about to make it Running again: a node that came back, a
/// deadline edited away), so that it never drains outside the budget; `None` when it is
/// Succeeded and released its slot, being deleted or not in `all`.
pub(crate) fn place<'a>(
    all: impl IntoIterator<Item = &'a NodeMaintenance>,
    name: &str,
    slots: &Slots,
    budgets_of: impl Fn(&str) -> u32,
    holds: Holds<'_>,
) -> Option<Place> {
    let q = queue(all, Some(name), slots, budgets_of, holds);
    let mut position = 0;
    for (n, full) in q {
        if full.is_some() {
            position += 1;
        }
        if n == name {
            return Some(match full {
                None => Place::Draining,
                Some(full) => Place::Queued { position, full },
            });
        }
    }
    None
}

/// The names of the maintenances that hold their slots among `all` under `slots`.
pub(crate) fn admitted<'a>(
    all: impl IntoIterator<Item = &'a NodeMaintenance>,
    slots: &Slots,
    budgets_of: impl Fn(&str) -> u32,
    holds: Holds<'_>,
) -> Vec<String> {
    queue(all, None, slots, budgets_of, holds)
        .into_iter()
        .filter(|(_, full)| full.is_none())
        .map(|(n, _)| n)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{NodeMaintenanceSpec, NodeMaintenanceStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn nm(name: &str, created: i64, phase: Option<MaintenancePhase>) -> NodeMaintenance {
        let mut nm = NodeMaintenance::new(
            name,
            NodeMaintenanceSpec {
                node_name: format!("node-{name}"),
                ..NodeMaintenanceSpec::default()
            },
        );
        nm.metadata.creation_timestamp = Some(Time(
            jiff::Timestamp::from_second(1_800_000_000 + created).unwrap(),
        ));
        nm.status = phase.map(|p| NodeMaintenanceStatus {
            phase: Some(p),
            ..NodeMaintenanceStatus::default()
        });
        nm
    }

    /// No maintenance holds a slot from an earlier drain.
    const NONE: Holds<'static> = &|_| false;

    fn slots(all: usize) -> Slots {
        Slots {
            all: Some((all, format!("--max-parallel-drains={all}"))),
            per: Vec::new(),
        }
    }

    #[test]
    fn the_oldest_active_maintenances_drain_and_the_rest_wait_in_creation_order() {
        use MaintenancePhase::*;
        let all = [
            nm("e", 5, Some(Running)),
            nm("done", 0, Some(Succeeded)),
            nm("b", 2, Some(Running)),
            nm("failed", 1, Some(Failed)),
            nm("d", 3, None),
            nm("c", 3, Some(Running)),
            nm("a", 2, Some(Running)),
        ];
        let none = |_: &str| 0;
        // Active in order: a, b (created at 2, by name), c, d (at 3, by name), e.
        assert_eq!(admitted(&all, &slots(2), none, NONE), ["a", "b"]);
        assert_eq!(
            place(&all, "b", &slots(2), none, NONE),
            Some(Place::Draining)
        );
        let queued = |position| {
            Some(Place::Queued {
                position,
                full: "--max-parallel-drains=2".into(),
            })
        };
        assert_eq!(place(&all, "c", &slots(2), none, NONE), queued(1));
        assert_eq!(place(&all, "d", &slots(2), none, NONE), queued(2));
        assert_eq!(place(&all, "e", &slots(2), none, NONE), queued(3));
        assert_eq!(place(&all, "done", &slots(2), none, NONE), None);
        // A Failed one's own pass sees it take its place (created at 1, it would drain): it is
        // about to be Running again, and must not drain outside the budget.
        assert_eq!(
            place(&all, "failed", &slots(2), none, NONE),
            Some(Place::Draining)
        );
        // A slot frees (a Succeeds, b is being deleted): c and d start.
        let mut freed = all.clone();
        freed[6].status.as_mut().unwrap().phase = Some(Succeeded);
        freed[2].metadata.deletion_timestamp = freed[2].metadata.creation_timestamp.clone();
        assert_eq!(admitted(&freed, &slots(2), none, NONE), ["c", "d"]);
        assert_eq!(
            place(&freed, "e", &slots(2), none, NONE),
            Some(Place::Queued {
                position: 1,
                full: "--max-parallel-drains=2".into(),
            })
        );
    }

    #[test]
    fn a_node_budget_holds_back_its_own_nodes_only() {
        use MaintenancePhase::*;
        // Storage nodes (bit 0) drain one at a time, everything three at a time.
        let all = [
            nm("s1", 1, Some(Running)),
            nm("s2", 2, Some(Running)),
            nm("w1", 3, Some(Running)),
            nm("s3", 4, Some(Running)),
            nm("w2", 5, Some(Running)),
            nm("w3", 6, Some(Running)),
        ];
        let storage = |node: &str| u32::from(node.starts_with("node-s"));
        let budgets = Slots {
            all: Some((3, "--max-parallel-drains=3".into())),
            per: vec![(1, "--max-parallel-drains-for=storage=1".into())],
        };
        assert_eq!(admitted(&all, &budgets, storage, NONE), ["s1", "w1", "w2"]);
        assert_eq!(
            place(&all, "s2", &budgets, storage, NONE),
            Some(Place::Queued {
                position: 1,
                full: "--max-parallel-drains-for=storage=1".into(),
            })
        );
        assert_eq!(
            place(&all, "w3", &budgets, storage, NONE),
            Some(Place::Queued {
                position: 3,
                full: "--max-parallel-drains=3".into(),
            })
        );
        // Without the cluster-wide budget, only the storage nodes wait.
        let per_only = Slots {
            all: None,
            ..budgets
        };
        assert_eq!(
            admitted(&all, &per_only, storage, NONE),
            ["s1", "w1", "w2", "w3"]
        );
    }

    #[test]
    fn a_slot_is_held_until_the_node_is_released_and_never_taken_back() {
        use MaintenancePhase::*;
        // a Succeeded and still holds its node; b drains; c, older than both, waits.
        let all = [
            nm("a", 2, Some(Succeeded)),
            nm("b", 3, Some(Running)),
            nm("c", 1, Some(Running)),
            nm("d", 4, Some(Running)),
        ];
        let held = |names: &'static [&'static str]| {
            move |nm: &NodeMaintenance| names.contains(&nm.name_any().as_str())
        };
        let holds = held(&["a", "b"]);
        assert_eq!(admitted(&all, &slots(2), |_| 0, &holds), ["a", "b"]);
        assert_eq!(
            place(&all, "c", &slots(2), |_| 0, &holds),
            Some(Place::Queued {
                position: 1,
                full: "--max-parallel-drains=2".into(),
            })
        );
        // a's node released (moved to Idle, or deleted): c, the oldest waiting, starts.
        let holds = held(&["b"]);
        assert_eq!(admitted(&all, &slots(2), |_| 0, &holds), ["b", "c"]);
        assert_eq!(place(&all, "a", &slots(2), |_| 0, &holds), None);
        // Without any slot held, creation order alone (the queue before any drain started).
        assert_eq!(admitted(&all, &slots(2), |_| 0, NONE), ["c", "b"]);
    }
}

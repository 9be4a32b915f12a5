//! The cluster-wide drain budget (`--max-parallel-drains`, `docs/drain-contract.md` §10): at most
//! that many maintenances evict at once; the others are entered (cordoned, tainted, labelled,
//! leased) at once and only their evictions wait, in creation order (name as tie-break, so a new
//! leader computes the same queue). Pure: a view across every maintenance in the controller's
//! cache, read into each pass's observation ([`place`]); the pass of a queued maintenance runs
//! no drain round, and the end of any pass wakes the maintenances a freed slot let through
//! ([`admitted`]).

use kube::ResourceExt;

use crate::api::{MaintenancePhase, NodeMaintenance};

/// Where one maintenance stands in the drain budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// It holds a slot: its drain runs.
    Draining,
    /// Its evictions wait: `position` (1-based) among the `queued`, behind `slots` draining.
    Queued {
        /// 1 for the next to start.
        position: usize,
        /// How many wait.
        queued: usize,
        /// The slots (all taken).
        slots: usize,
    },
}

/// Whether `nm` takes part in the budget: not being deleted, and neither Succeeded nor Failed
/// (a Failed maintenance evicts nothing; one that recovers takes its place again).
pub(crate) fn active(nm: &NodeMaintenance) -> bool {
    let phase = nm.status.as_ref().and_then(|s| s.phase);
    nm.metadata.deletion_timestamp.is_none()
        && !matches!(
            phase,
            Some(MaintenancePhase::Succeeded | MaintenancePhase::Failed)
        )
}

/// The active maintenances of `all` in queue order: creation time, then name.
fn in_order<'a>(all: impl IntoIterator<Item = &'a NodeMaintenance>) -> Vec<&'a NodeMaintenance> {
    let mut active: Vec<&NodeMaintenance> = all.into_iter().filter(|nm| active(nm)).collect();
    active.sort_by(|a, b| {
        let created = |nm: &NodeMaintenance| nm.metadata.creation_timestamp.as_ref().map(|t| t.0);
        created(a)
            .cmp(&created(b))
            .then_with(|| a.name_any().cmp(&b.name_any()))
    });
    active
}

/// The place of maintenance `name` among `all` with `slots` slots: the first `slots` active
/// maintenances in queue order drain, the others wait. `None` when `name` is not active.
pub(crate) fn place<'a>(
    all: impl IntoIterator<Item = &'a NodeMaintenance>,
    name: &str,
    slots: usize,
) -> Option<Place> {
    let order = in_order(all);
    let index = order.iter().position(|nm| nm.name_any() == name)?;
    Some(if index < slots {
        Place::Draining
    } else {
        Place::Queued {
            position: index - slots + 1,
            queued: order.len() - slots,
            slots,
        }
    })
}

/// The names of the maintenances that hold a slot among `all` with `slots` slots.
pub(crate) fn admitted<'a>(
    all: impl IntoIterator<Item = &'a NodeMaintenance>,
    slots: usize,
) -> Vec<String> {
    in_order(all)
        .into_iter()
        .take(slots)
        .map(ResourceExt::name_any)
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
        // Active in order: a, b (created at 2, by name), c, d (at 3, by name), e.
        assert_eq!(admitted(&all, 2), ["a", "b"]);
        assert_eq!(place(&all, "b", 2), Some(Place::Draining));
        let queued = |position| {
            Some(Place::Queued {
                position,
                queued: 3,
                slots: 2,
            })
        };
        assert_eq!(place(&all, "c", 2), queued(1));
        assert_eq!(place(&all, "d", 2), queued(2));
        assert_eq!(place(&all, "e", 2), queued(3));
        assert_eq!(place(&all, "done", 2), None);
        assert_eq!(place(&all, "failed", 2), None);
        // A slot frees (a Succeeds, b is being deleted): c and d start.
        let mut freed = all.clone();
        freed[6].status.as_mut().unwrap().phase = Some(Succeeded);
        freed[2].metadata.deletion_timestamp = freed[2].metadata.creation_timestamp.clone();
        assert_eq!(admitted(&freed, 2), ["c", "d"]);
        assert_eq!(
            place(&freed, "e", 2),
            Some(Place::Queued {
                position: 1,
                queued: 1,
                slots: 2
            })
        );
    }
}

//! Per-node reservations of admitted CREATEs that the NodeMaintenance cache does not show yet
//! (`docs/design.md §4`).
//!
//! Between the moment the webhook admits a CREATE and the moment the watch delivers the new
//! object, the cache cannot see it; a second CREATE for the same node in that window must still be
//! refused. A reservation covers exactly that window. It ends when the cache shows the object
//! (created, changed or already deleted: from then on the cache speaks for the node), or when a
//! live check finds that the object does not exist (the request failed later in the API server's
//! chain, or the object is gone). It never ends by a timer alone, so it cannot outlive a deleted
//! object, and it never lingers after one.

use std::collections::HashMap;
use std::time::Duration;

/// How long after admission a reservation whose object the cache has not shown is checked live:
/// the watch normally delivers a new object within milliseconds, so by then a missing object
/// means the request failed. Checks repeat, doubling up to [`CONFIRM_MAX_INTERVAL`], while the
/// object exists but the cache still does not show it (a watch that is reconnecting).
pub(crate) const CONFIRM_AFTER: Duration = Duration::from_secs(1);
/// Longest interval between two live checks of one reservation.
pub(crate) const CONFIRM_MAX_INTERVAL: Duration = Duration::from_secs(8);

/// One admitted CREATE not yet shown by the cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reservation {
    /// Name of the admitted NodeMaintenance (empty when the request carried none).
    pub nm_name: String,
    /// Identifies this reservation, so a late check never ends a newer one.
    pub token: u64,
    /// How often the same object was admitted again while reserved (a client retrying); a live
    /// check that started before the latest of these proves nothing about it.
    pub renewals: u64,
}

/// The reservations of one replica, by node name. Pure bookkeeping; the webhook holds it behind
/// one mutex together with its cache reads, so that checking and reserving is one atomic step.
#[derive(Debug, Default)]
pub(crate) struct Reservations {
    by_node: HashMap<String, Reservation>,
    next_token: u64,
}

impl Reservations {
    /// Whether `node` is reserved by a CREATE of another object than `nm_name`. A client
    /// retrying the same object is not refused by its own earlier admission (the API server
    /// refuses a real duplicate name with AlreadyExists); an empty name identifies nothing, so it
    /// never exempts itself.
    pub(crate) fn reserved_for_other(&self, node: &str, nm_name: &str) -> bool {
        self.by_node
            .get(node)
            .is_some_and(|r| nm_name.is_empty() || r.nm_name != nm_name)
    }

    /// Reserves `node` for the admitted `nm_name`. Returns the token of a new reservation, or
    /// `None` when the same object already holds the node (a retry): that reservation is renewed
    /// and keeps its live check.
    pub(crate) fn reserve(&mut self, node: &str, nm_name: &str) -> Option<u64> {
        if let Some(r) = self.by_node.get_mut(node)
            && r.nm_name == nm_name
            && !nm_name.is_empty()
        {
            r.renewals += 1;
            return None;
        }
        self.next_token += 1;
        self.by_node.insert(
            node.to_string(),
            Reservation {
                nm_name: nm_name.to_string(),
                token: self.next_token,
                renewals: 0,
            },
        );
        Some(self.next_token)
    }

    /// The renewal count of reservation `token` of `node`, while it is held.
    pub(crate) fn renewals(&self, node: &str, token: u64) -> Option<u64> {
        self.by_node
            .get(node)
            .filter(|r| r.token == token)
            .map(|r| r.renewals)
    }

    /// The cache shows NodeMaintenance `nm_name` for `node` (added, changed or deleted): the
    /// reservation it stands for ends. A reservation without a name ends when the cache shows any
    /// NodeMaintenance for its node; one for another node, or another object, is left alone
    /// (an object of the same name for another node is not this CREATE's). Returns whether one
    /// ended.
    pub(crate) fn observed(&mut self, nm_name: &str, node: &str) -> bool {
        let ends = self
            .by_node
            .get(node)
            .is_some_and(|r| r.nm_name == nm_name || r.nm_name.is_empty());
        if ends {
            self.by_node.remove(node);
        }
        ends
    }

    /// Ends the reservation `token` of `node` (its object was found not to exist by a check that
    /// started when the reservation had `renewals` renewals); a newer reservation of the node, or
    /// one renewed since, is left alone. Returns whether it ended.
    pub(crate) fn release(&mut self, node: &str, token: u64, renewals: u64) -> bool {
        if self.renewals(node, token) == Some(renewals) {
            self.by_node.remove(node);
            true
        } else {
            false
        }
    }

    /// Every reservation, by node (for the relist check and diagnostics).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&String, &Reservation)> {
        self.by_node.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Reservations {
        /// Whether the reservation `token` of `node` is still held.
        pub(crate) fn holds(&self, node: &str, token: u64) -> bool {
            self.by_node.get(node).is_some_and(|r| r.token == token)
        }

        /// The number of reservations held.
        pub(crate) fn len(&self) -> usize {
            self.by_node.len()
        }

        /// Whether no reservation is held.
        pub(crate) fn is_empty(&self) -> bool {
            self.by_node.is_empty()
        }
    }

    #[test]
    fn a_reservation_refuses_other_objects_until_the_cache_shows_its_own() {
        let mut r = Reservations::default();
        r.reserve("node-a", "nm-1");
        assert!(r.reserved_for_other("node-a", "nm-2"));
        // The same object retried is not refused by its own reservation.
        assert!(!r.reserved_for_other("node-a", "nm-1"));
        assert!(!r.reserved_for_other("node-b", "nm-2"));
        // Another object showing up, or an object of the same name for another node (a create
        // that then failed with AlreadyExists), changes nothing.
        assert!(!r.observed("nm-9", "node-b"));
        assert!(!r.observed("nm-1", "node-b"));
        assert!(r.reserved_for_other("node-a", "nm-2"));
        // The cache shows nm-1 (created, or created and already deleted): it speaks for node-a.
        assert!(r.observed("nm-1", "node-a"));
        assert!(!r.reserved_for_other("node-a", "nm-2"));
        assert!(r.is_empty());
    }

    #[test]
    fn an_unnamed_reservation_never_exempts_and_ends_with_any_object_for_its_node() {
        let mut r = Reservations::default();
        r.reserve("node-c", "");
        assert!(r.reserved_for_other("node-c", ""));
        assert!(!r.observed("nm-x", "node-d"));
        assert!(r.observed("generated-abcde", "node-c"));
    }

    #[test]
    fn a_late_check_never_ends_a_newer_or_renewed_reservation() {
        let mut r = Reservations::default();
        let old = r.reserve("node-a", "nm-1").unwrap();
        r.observed("nm-1", "node-a");
        let new = r.reserve("node-a", "nm-1").unwrap();
        assert!(!r.release("node-a", old, 0));
        assert!(r.holds("node-a", new));
        // A retry of the same object renews the reservation instead of starting another check.
        let seen = r.renewals("node-a", new).unwrap();
        assert_eq!(r.reserve("node-a", "nm-1"), None);
        assert!(!r.release("node-a", new, seen));
        assert!(r.release("node-a", new, seen + 1));
        assert_eq!(r.len(), 0);
        // An unnamed object is never "the same object".
        assert!(r.reserve("node-b", "").is_some());
        assert!(r.reserve("node-b", "").is_some());
    }
}

//! Per-node reservations of admitted CREATEs that the NodeMaintenance LIST may not show yet.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// How long an admitted CREATE keeps its node reserved when the object does not show up in the
/// LIST (it may have been rejected later in the API server's chain, or not be visible yet).
pub const PENDING_TTL: Duration = Duration::from_secs(30);

/// Admitted CREATEs that the NodeMaintenance LIST may not show yet, by node name.
#[derive(Debug, Default)]
pub struct PendingCreates {
    entries: HashMap<String, (String, Instant)>,
}

impl PendingCreates {
    /// Forgets entries older than [`PENDING_TTL`] and entries whose object is now listed (the LIST
    /// then speaks for them). `listed` holds the names of listed NodeMaintenances.
    pub fn prune(&mut self, listed: &HashSet<String>, now: Instant) {
        self.entries.retain(|_, (nm, at)| {
            now.saturating_duration_since(*at) < PENDING_TTL && !listed.contains(nm)
        });
    }

    /// Nodes reserved by a pending CREATE other than one for `nm_name` itself (a client retrying
    /// the same object must not be refused by its own earlier admission; the API server refuses a
    /// real duplicate name with AlreadyExists).
    pub fn reserved_nodes(&self, nm_name: &str) -> impl Iterator<Item = &String> {
        self.entries
            .iter()
            // An empty name (generateName not yet resolved) identifies nothing, so it never
            // exempts itself.
            .filter(move |(_, (nm, _))| nm_name.is_empty() || nm != nm_name)
            .map(|(node, _)| node)
    }

    /// Reserves `node` for the admitted `nm_name`.
    pub fn record(&mut self, node: &str, nm_name: &str, now: Instant) {
        self.entries
            .insert(node.to_string(), (nm_name.to_string(), now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_creates_reserve_until_listed_or_expired() {
        let t0 = Instant::now();
        let mut p = PendingCreates::default();
        p.record("node-a", "nm-1", t0);
        let none = HashSet::new();
        p.prune(&none, t0 + Duration::from_secs(1));
        assert_eq!(p.reserved_nodes("nm-2").collect::<Vec<_>>(), vec!["node-a"]);
        // The same object retried is not refused by its own reservation.
        assert_eq!(p.reserved_nodes("nm-1").count(), 0);
        let mut unnamed = PendingCreates::default();
        unnamed.record("node-c", "", t0);
        assert_eq!(unnamed.reserved_nodes("").count(), 1);
        // Listed: the LIST speaks for it now.
        p.prune(&["nm-1".to_string()].into(), t0 + Duration::from_secs(2));
        assert_eq!(p.reserved_nodes("nm-2").count(), 0);
        // Expired.
        p.record("node-b", "nm-3", t0);
        p.prune(&none, t0 + PENDING_TTL);
        assert_eq!(p.reserved_nodes("nm-4").count(), 0);
    }
}

//! What a watch must not lose when it starts over (`docs/design.md §7`): the controller's, the
//! admission caches' and the Node watch's.
//!
//! A watch that was away (API server restarted, a 410 Expired, a 403 while the restarted API
//! server's RBAC caches fill) resumes with a relist, and a relist delivers only the objects that
//! exist: an object deleted while the watch was away simply is not in it, and kube's watcher emits
//! no deletion for it. [`RelistTracker`] remembers what the watch knew, so that at the end of a
//! relist the objects it no longer contains are reported as deleted. Changes made meanwhile to
//! objects that still exist arrive as the relist's own events.
//!
//! A watch error is also never passed on to the `Controller`: it would back off its whole trigger
//! stream (every watch at once, on top of each watch's own back-off), so one failing watch would
//! silence the others, and the two back-offs compound to a minute or more after a short outage.
//! Each watch retries on its own [`watch_backoff`] and the error is logged here ([`log_error`]).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use kube::runtime::watcher;

/// First delay of a watch's back-off after an error.
pub(crate) const WATCH_BACKOFF_MIN: Duration = Duration::from_millis(500);
/// Longest delay of a watch's back-off (before jitter, which adds up to as much again): a watch
/// of the operator's own objects is one cheap request, and while it is away every deletion of a
/// NodeMaintenance waits for it. client-go's reflector uses 30 s.
pub(crate) const WATCH_BACKOFF_MAX: Duration = Duration::from_secs(4);

/// Back-off of one of the process's watches after an error: from [`WATCH_BACKOFF_MIN`]
/// doubling up to [`WATCH_BACKOFF_MAX`], each delay plus a random jitter of up to itself; reset
/// by the next event the watch delivers.
pub(crate) fn watch_backoff() -> watcher::ExponentialBackoff {
    backon::ExponentialBuilder::default()
        .with_min_delay(WATCH_BACKOFF_MIN)
        .with_max_delay(WATCH_BACKOFF_MAX)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .into()
}

/// One item of a kube watcher stream.
pub(crate) type WatchItem<K> = Result<watcher::Event<K>, watcher::Error>;

/// Logs a watch error of the watch named `what` and drops it; passes events through unchanged.
/// The watch itself retries after its back-off (403 while a restarted API server's RBAC is not
/// yet synced, 410 Expired and a relist, connection refused while it is away).
pub(crate) fn log_error<K>(
    what: &'static str,
) -> impl FnMut(WatchItem<K>) -> std::future::Ready<Option<WatchItem<K>>> {
    move |ev| {
        std::future::ready(match ev {
            Ok(ev) => Some(Ok(ev)),
            Err(e) => {
                tracing::warn!(watch = what, error = %e, "watch failed; retrying after back-off");
                None
            }
        })
    }
}

/// Whether a reflector's store holds every object after `ev`: `Some(false)` when a relist
/// starts (kube's `Init`: deletions made while the watch was away are only known at its end),
/// `Some(true)` at its end (`InitDone`), `None` (unchanged) otherwise, a watch error included.
/// kube's watcher resumes from the last resourceVersion after a failed or ended watch; after a
/// 410 Expired, a failed list or an object without a resourceVersion it relists, through
/// `Init` once its back-off has passed (`kube-runtime` 5, `watcher::step_trampolined`). Until
/// then, and through an outage the watcher resumes from, the store is stale but kept marked
/// complete: the API server's answers still decide.
pub(crate) fn complete_after<K>(ev: &WatchItem<K>) -> Option<bool> {
    match ev {
        Ok(watcher::Event::Init) => Some(false),
        Ok(watcher::Event::InitDone) => Some(true),
        _ => None,
    }
}

/// The objects one watch knows, by name, each with a value `V` (what the controller needs to
/// act on the object's deletion), and which of them the relist in progress has delivered.
#[derive(Debug)]
pub(crate) struct RelistTracker<V> {
    known: HashMap<String, V>,
    relisted: Option<HashSet<String>>,
}

impl<V> Default for RelistTracker<V> {
    fn default() -> Self {
        Self {
            known: HashMap::new(),
            relisted: None,
        }
    }
}

impl<V> RelistTracker<V> {
    /// Feeds one watch event. `value` gives an object's value; `name` its name. Returns the
    /// objects that the relist just completed (on `InitDone`) no longer contains, with their last
    /// value: they were deleted while the watch was away. Empty for every other event, and for
    /// the first list of the watch (nothing was known before it).
    pub(crate) fn observe<K>(
        &mut self,
        event: &watcher::Event<K>,
        name: impl Fn(&K) -> String,
        value: impl Fn(&K) -> V,
    ) -> Vec<(String, V)> {
        match event {
            watcher::Event::Init => {
                self.relisted = Some(HashSet::new());
            }
            watcher::Event::InitApply(obj) => {
                let n = name(obj);
                if let Some(seen) = self.relisted.as_mut() {
                    seen.insert(n.clone());
                }
                self.known.insert(n, value(obj));
            }
            watcher::Event::Apply(obj) => {
                self.known.insert(name(obj), value(obj));
            }
            watcher::Event::Delete(obj) => {
                self.known.remove(&name(obj));
            }
            watcher::Event::InitDone => {
                let Some(seen) = self.relisted.take() else {
                    return Vec::new();
                };
                let gone: Vec<String> = self
                    .known
                    .keys()
                    .filter(|k| !seen.contains(*k))
                    .cloned()
                    .collect();
                return gone
                    .into_iter()
                    .filter_map(|k| self.known.remove(&k).map(|v| (k, v)))
                    .collect();
            }
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use watcher::Event;

    type Obj = (&'static str, u32);

    fn feed(t: &mut RelistTracker<u32>, ev: Event<Obj>) -> Vec<(String, u32)> {
        let mut gone = t.observe(&ev, |o| o.0.to_string(), |o| o.1);
        gone.sort();
        gone
    }

    #[test]
    fn a_store_is_incomplete_from_a_relists_start_to_its_end_not_after_an_error() {
        let ev = |e: Event<Obj>| complete_after(&Ok(e));
        assert_eq!(ev(Event::Init), Some(false));
        assert_eq!(ev(Event::InitApply(("a", 1))), None);
        assert_eq!(ev(Event::InitDone), Some(true));
        assert_eq!(ev(Event::Apply(("a", 2))), None);
        assert_eq!(ev(Event::Delete(("a", 2))), None);
        // A failed watch is resumed from its resourceVersion; an error that relists (a 410, a
        // failed list) comes back through Init.
        let failed: WatchItem<Obj> = Err(watcher::Error::WatchFailed(
            kube::Error::LinesCodecMaxLineLengthExceeded,
        ));
        assert_eq!(complete_after(&failed), None);
        let relists: WatchItem<Obj> = Err(watcher::Error::NoResourceVersion);
        assert_eq!(complete_after(&relists), None);
    }

    #[test]
    fn a_relist_reports_what_vanished_while_the_watch_was_away() {
        let mut t = RelistTracker::default();
        // The first list: nothing known before, nothing vanished.
        assert!(feed(&mut t, Event::Init).is_empty());
        feed(&mut t, Event::InitApply(("a", 1)));
        feed(&mut t, Event::InitApply(("b", 2)));
        assert!(feed(&mut t, Event::InitDone).is_empty());
        feed(&mut t, Event::Apply(("c", 3)));
        feed(&mut t, Event::Apply(("a", 4)));
        // Deletions the watch saw are not reported again.
        feed(&mut t, Event::Delete(("b", 2)));
        // Away: c deleted, d created, a changed. The relist has a and d only.
        feed(&mut t, Event::Init);
        feed(&mut t, Event::InitApply(("a", 5)));
        feed(&mut t, Event::InitApply(("d", 6)));
        assert_eq!(feed(&mut t, Event::InitDone), vec![("c".to_string(), 3)]);
        // A relist cut short (error after Init) and started over: only the complete one counts.
        feed(&mut t, Event::Init);
        feed(&mut t, Event::InitApply(("a", 5)));
        feed(&mut t, Event::Init);
        feed(&mut t, Event::InitApply(("d", 6)));
        feed(&mut t, Event::InitApply(("a", 5)));
        assert!(feed(&mut t, Event::InitDone).is_empty());
        // An empty relist: everything vanished.
        feed(&mut t, Event::Init);
        assert_eq!(
            feed(&mut t, Event::InitDone),
            vec![("a".to_string(), 5), ("d".to_string(), 6)]
        );
    }

    #[test]
    fn the_watch_backoff_stays_short() {
        let mut b = watch_backoff();
        let delays: Vec<Duration> = (&mut b).take(12).collect();
        assert!(delays[0] >= WATCH_BACKOFF_MIN && delays[0] <= 2 * WATCH_BACKOFF_MIN);
        assert!(delays.iter().all(|d| *d <= 2 * WATCH_BACKOFF_MAX));
        assert!(delays[11] >= WATCH_BACKOFF_MAX);
        kube::runtime::utils::Backoff::reset(&mut b);
        assert!(b.next().unwrap() <= 2 * WATCH_BACKOFF_MIN);
    }
}

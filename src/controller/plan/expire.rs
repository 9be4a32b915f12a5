//! `expireAfter` ([`PassStep::Expire`](super::maintenance::PassStep)): this drain's end plus
//! `expireAfter`, the NodeMaintenance deletes itself (its deletion pass restores the node); until
//! then the pass comes back when it is due.

use std::time::Duration;

use super::pass::{Flow, Pass};
use super::status::{PlannedEvent, Requeue, Step, event};
use super::timeline::{self, Timeline};
use super::write::Write;

impl Pass<'_> {
    pub(super) fn expire(&mut self) -> Flow {
        let Some(after) = self.drain_policy.expire_after else {
            return Flow::Continue(());
        };
        // This drain's end plus `expireAfter` (`timeline::expires`).
        let at = self.server_now();
        let t = Timeline::of(&self.o.nm, &self.status, self.node, self.place.as_ref(), at);
        let Some(expires) = timeline::expires(&t, after) else {
            return Flow::Continue(());
        };
        let left = expires.duration_since(self.server_now());
        if left.is_positive() {
            // Back a second after it expires: the API server's clock counts whole seconds.
            let until = left + jiff::SignedDuration::from_secs(1);
            self.due = Duration::try_from(until).ok();
            return Flow::Continue(());
        }
        let message = format!(
            "Succeeded at {}, expired after {} (expireAfter): deleting the NodeMaintenance; the \
             node is restored",
            t.drain_ended.unwrap_or(expires),
            jiff::SignedDuration::try_from(after).unwrap_or_default()
        );
        let e = PlannedEvent::normal((event::EXPIRED, &message));
        let status = self.status.clone();
        self.w.status(&status);
        self.w.events(vec![e], self.node);
        self.w.push(Write::DeleteMaintenance {
            uid: self.o.nm.metadata.uid.clone(),
        });
        Flow::Break(self.end_remembering(Step::quiet(status, Requeue::Never)))
    }
}

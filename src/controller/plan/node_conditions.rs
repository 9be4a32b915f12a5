//! The Node's lifecycle conditions (the `nodeConditions` knob, `crate::node::conditions`),
//! written on transitions ([`PassStep::NodeConditions`](super::maintenance::PassStep)).

use super::maintenance::{PassStep, steps};
use super::pass::{Flow, Pass};
use super::write::Write;
use crate::api::MaintenancePhase;

impl Pass<'_> {
    pub(super) fn node_conditions(&mut self) -> Flow {
        use crate::node::conditions::{Lifecycle, pass_patch};
        let p = &self.drain_policy;
        let wanted = p.node_conditions.then(|| {
            let held = !self.waits && !self.aborted && steps(p.stage).contains(&PassStep::Enter);
            let succeeded = self.status.phase == Some(MaintenancePhase::Succeeded);
            let l = Lifecycle::of(p.stage, held, succeeded, self.window.is_some());
            super::pre_drain_hooks::lifecycle(l, &p.hooks)
        });
        if let Some(patch) = self
            .node
            .and_then(|n| pass_patch(n, &self.name, wanted, self.now))
        {
            let name = self.node_name().to_owned();
            self.w.push(Write::NodeConditions { name, patch });
        }
        Flow::Continue(())
    }
}

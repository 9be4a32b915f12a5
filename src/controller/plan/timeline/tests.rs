//! The four timeline questions as tables across stage changes: each row is the record a
//! sequence of passes leaves (the node's start annotation, the conditions), built by the same
//! step functions the pass uses ([`start_record`], [`release`], `set_condition`).

use std::time::Duration;

use super::*;
use crate::controller::plan::slot::queued;

fn t(s: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_second(1_800_000_000 + s).unwrap()
}

/// A status written at `t(s)` of generation 1.
fn stamp(s: i64) -> Stamp {
    Stamp {
        generation: Some(1),
        now: t(s),
    }
}

/// One maintenance's record as passes leave it, moved by the moments a pass records.
#[derive(Clone, Default)]
struct Record {
    status: NodeMaintenanceStatus,
    /// The node's `drain-started` annotation.
    start: Option<jiff::Timestamp>,
    place: Option<Place>,
}

impl Record {
    /// A pass in stage `drains` (Drain with a slot) or not, at `at`, on a node entered already
    /// (`entering`: afresh in this pass).
    fn enter(mut self, drains: bool, entering: bool, at: i64) -> Self {
        set_condition(
            &mut self.status,
            condition::CORDONED,
            true,
            "NodeCordoned",
            "",
            stamp(at),
        );
        let recorded = if entering { None } else { self.start };
        let drains = drains && self.status.phase != Some(MaintenancePhase::Succeeded);
        match start_record(drains, entering, recorded, t(at)) {
            StartRecord::Set(s) => self.start = Some(s),
            StartRecord::Clear => self.start = None,
            StartRecord::Keep => {}
        }
        self
    }

    fn cordon(self, at: i64) -> Self {
        let entering = !self.entered();
        self.enter(false, entering, at)
    }

    fn drain(self, at: i64) -> Self {
        let entering = !self.entered();
        let queued = matches!(self.place, Some(Place::Queued { .. }));
        self.enter(!queued, entering, at)
    }

    fn entered(&self) -> bool {
        condition(&self.status, condition::CORDONED).is_some_and(|c| c.status == "True")
    }

    /// Stage Idle: the node released (its record, the start among it, removed on exit).
    fn idle(mut self, at: i64) -> Self {
        self.status = release(&self.status, stamp(at));
        set_condition(
            &mut self.status,
            condition::CORDONED,
            false,
            condition::RELEASED,
            "",
            stamp(at),
        );
        self.status.phase = Some(MaintenancePhase::Running);
        self.start = None;
        self
    }

    fn succeed(mut self, at: i64) -> Self {
        self.status.phase = Some(MaintenancePhase::Succeeded);
        set_condition(
            &mut self.status,
            condition::DRAINED,
            true,
            "AllPodsEvicted",
            "",
            stamp(at),
        );
        self
    }

    /// Moved out of Succeeded by a stage short of Drain (`staged`: phase Running).
    fn running(mut self) -> Self {
        self.status.phase = Some(MaintenancePhase::Running);
        self
    }

    fn queued(mut self, at: i64) -> Self {
        let place = Place::Queued {
            position: 1,
            full: "--max-parallel-drains=1".into(),
        };
        let (s, _) = queued(&self.status, Some(&place), None, stamp(at));
        self.status = s;
        self.place = Some(place);
        self
    }

    fn dequeued(mut self, at: i64) -> Self {
        let (s, _) = queued(&self.status, Some(&Place::Draining), None, stamp(at));
        self.status = s;
        self.place = Some(Place::Draining);
        self
    }

    /// Paused and resumed: the policy's conditions only; nothing on the timeline moves.
    fn paused(self) -> Self {
        self
    }

    fn timeline(&self, now: i64) -> Timeline {
        let mut node = Node::default();
        if let Some(s) = self.start {
            node.annotations_mut()
                .insert(crate::node::DRAIN_STARTED_ANNOTATION.into(), s.to_string());
        }
        let nm = NodeMaintenance::new("nm", Default::default());
        Timeline::of(&nm, &self.status, Some(&node), self.place.as_ref(), t(now))
    }
}

fn new() -> Record {
    Record::default()
}

/// (what happened, the record, when it is read) -> deadline start, arrival.
#[test]
fn the_deadline_and_the_arrival_count_from_this_drains_start() {
    let rows: Vec<(&str, Record, Option<i64>)> = vec![
        ("created in Drain at 0", new().drain(0), Some(0)),
        ("Cordon at 0, not yet Drain", new().cordon(0), None),
        (
            "Cordon at 0, Drain at 50",
            new().cordon(0).drain(50),
            Some(50),
        ),
        (
            "Cordon at 0, Drain at 50, a later pass",
            new().cordon(0).drain(50).drain(60),
            Some(50),
        ),
        (
            "Drain at 0, Cordon at 30, Drain at 60 (never left)",
            new().drain(0).cordon(30).drain(60),
            Some(0),
        ),
        (
            "Drain at 0, Idle at 30, Drain at 60",
            new().drain(0).idle(30).drain(60),
            Some(60),
        ),
        (
            "Drain at 0, Idle at 30 (released)",
            new().drain(0).idle(30),
            None,
        ),
        (
            "Drain at 0, paused and resumed at 20, 40",
            new().drain(0).paused().drain(20).paused().drain(40),
            Some(0),
        ),
        (
            "queued at 0 (entered, waiting)",
            new().queued(0).drain(0),
            None,
        ),
        (
            "queued at 0, slot at 30",
            new().queued(0).drain(0).dequeued(30).drain(30),
            Some(30),
        ),
        (
            "Succeeded, Idle, Drain at 100",
            new().drain(0).succeed(10).idle(30).drain(100),
            Some(100),
        ),
    ];
    for (what, record, want) in rows {
        let tl = record.timeline(200);
        let want = want.map(t);
        assert_eq!(deadline_start(&tl), want, "deadline start: {what}: {tl:?}");
        let arrival_want = if tl.queued { tl.drain_started } else { want };
        assert_eq!(arrival(&tl), arrival_want, "arrival: {what}: {tl:?}");
    }
    // A node entered while queued by a version that recorded the start at entry: the slot's
    // moment is the later one, for both.
    let mut legacy = new().queued(0);
    legacy.start = Some(t(0));
    let legacy = legacy.dequeued(30);
    assert_eq!(deadline_start(&legacy.timeline(40)), Some(t(30)));
    assert_eq!(arrival(&legacy.timeline(40)), Some(t(30)));
}

/// (what happened, the record) -> when it expires with expireAfter 60s.
#[test]
fn expiry_counts_from_this_drains_success() {
    let after = Duration::from_secs(60);
    let rows: Vec<(&str, Record, Option<i64>)> = vec![
        ("Drain at 0, not Succeeded", new().drain(0), None),
        ("Succeeded at 10", new().drain(0).succeed(10), Some(70)),
        (
            "Succeeded at 10, Idle at 30",
            new().drain(0).succeed(10).idle(30),
            None,
        ),
        (
            "Succeeded at 10, Idle at 30, Drain at 75, not yet Succeeded",
            new().drain(0).succeed(10).idle(30).drain(75),
            None,
        ),
        (
            "Succeeded at 10, Idle at 30, Drain at 75, Succeeded at 80",
            new().drain(0).succeed(10).idle(30).drain(75).succeed(80),
            Some(140),
        ),
        (
            "Succeeded at 10, Cordon at 30, Drain at 75, Succeeded at 76 (same drain)",
            new()
                .drain(0)
                .succeed(10)
                .running()
                .cordon(30)
                .drain(75)
                .succeed(76),
            Some(70),
        ),
        (
            "Succeeded at 10, paused",
            new().drain(0).succeed(10).paused(),
            Some(70),
        ),
        (
            "queued, slot at 30, Succeeded at 40",
            new().queued(0).drain(0).dequeued(30).drain(30).succeed(40),
            Some(100),
        ),
    ];
    for (what, record, want) in rows {
        let tl = record.timeline(200);
        assert_eq!(expires(&tl, after), want.map(t), "{what}: {tl:?}");
    }
}

/// (what happened, the record) -> whether it holds a drain slot.
#[test]
fn a_slot_is_held_from_the_drains_start_until_the_node_is_released() {
    let rows: Vec<(&str, Record, bool)> = vec![
        ("Cordon", new().cordon(0), false),
        ("Drain", new().drain(0), true),
        ("Cordon, then Drain", new().cordon(0).drain(50), true),
        (
            "Drain, Succeeded (node still cordoned)",
            new().drain(0).succeed(10),
            true,
        ),
        (
            "Drain, Succeeded, Idle (released)",
            new().drain(0).succeed(10).idle(30),
            false,
        ),
        (
            "Drain, Idle, Drain",
            new().drain(0).idle(30).drain(60),
            true,
        ),
        ("Drain, paused", new().drain(0).paused(), true),
        ("queued", new().queued(0).drain(0), false),
        (
            "queued, then its slot",
            new().queued(0).drain(0).dequeued(30).drain(30),
            true,
        ),
    ];
    for (what, record, want) in rows {
        let tl = record.timeline(200);
        assert_eq!(holds_slot(&tl), want, "{what}: {tl:?}");
    }
}

/// The enter step's record: set when the drain starts, kept while it goes on, cleared when a
/// pass that does not drain enters afresh; applied to the entry's patch or as one of its own.
#[test]
fn the_start_is_recorded_when_the_drain_starts() {
    use StartRecord::*;
    let now = t(5) + jiff::SignedDuration::from_millis(700);
    // (drains, entering, recorded) -> record
    let rows = [
        ((true, true, None), Set(t(5))),
        ((true, true, Some(t(1))), Set(t(5))),
        ((true, false, None), Set(t(5))),
        ((true, false, Some(t(1))), Keep),
        ((false, true, None), Clear),
        ((false, true, Some(t(1))), Clear),
        ((false, false, None), Keep),
        ((false, false, Some(t(1))), Keep),
    ];
    for ((drains, entering, recorded), want) in rows {
        assert_eq!(
            start_record(drains, entering, recorded, now),
            want,
            "drains {drains}, entering {entering}, recorded {recorded:?}"
        );
    }
    let mut node = Node::default();
    node.metadata.resource_version = Some("7".into());
    let key = crate::node::DRAIN_STARTED_ANNOTATION;
    assert_eq!(
        with_start(&node, None, Set(t(5))),
        Some(
            serde_json::json!({"metadata": {"resourceVersion": "7", "annotations": {key: t(5).to_string()}}})
        )
    );
    assert_eq!(with_start(&node, None, Keep), None);
    assert_eq!(with_start(&node, None, Clear), None, "nothing to clear");
    let entry =
        serde_json::json!({"metadata": {"resourceVersion": "7"}, "spec": {"unschedulable": true}});
    node.annotations_mut().insert(key.into(), t(1).to_string());
    let cleared = with_start(&node, Some(entry.clone()), Clear).unwrap();
    assert_eq!(
        cleared["metadata"]["annotations"][key],
        serde_json::Value::Null
    );
    assert_eq!(cleared["spec"], entry["spec"]);
}

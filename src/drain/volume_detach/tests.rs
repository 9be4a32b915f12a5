//! The wait's pure decision: which attachments block, and what the bound does.

use std::time::Duration;

use k8s_openapi::api::storage::v1::VolumeAttachment;

use super::*;
use crate::api::MaintenancePhase;

fn t(s: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_second(1_800_000_000 + s).unwrap()
}

fn va(name: &str, node: &str, pv: &str) -> VolumeAttachment {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"attacher": "csi.example.com", "nodeName": node,
                 "source": {"persistentVolumeName": pv}}
    }))
    .unwrap()
}

fn policy(wait: u64, on_timeout: OnTimeout) -> DrainPolicy {
    DrainPolicy {
        wait_for_volume_detach: Some(Duration::from_secs(wait)),
        on_timeout,
        deadline_start: Some(t(0)),
        ..DrainPolicy::default()
    }
}

#[test]
fn only_the_nodes_attachments_block_each_named_with_its_volume() {
    let all = [
        va("b", "n1", "pv-b"),
        va("x", "n2", "pv-x"),
        va("a", "n1", "pv-a"),
    ];
    let o = Observed {
        attachments: on_node(&all, "n1"),
        ..Observed::default()
    };
    let b = blockers(&o, "n1");
    let names: Vec<_> = b
        .iter()
        .map(|b| (b.name.as_str(), b.reason.as_str()))
        .collect();
    assert_eq!(names, [("a", VOLUME_ATTACHED), ("b", VOLUME_ATTACHED)]);
    let msg = b[0].message.as_deref().unwrap();
    assert!(
        msg.contains("pv-a") && msg.contains("csi.example.com") && msg.contains("n1"),
        "{msg}"
    );
    assert!(b.iter().all(|b| b.namespace.is_empty()));
}

#[test]
fn a_kept_pods_volume_does_not_block_an_unknown_one_does() {
    let mut attachments = on_node(
        &[
            va("a", "n1", "pv-a"),
            va("b", "n1", "pv-b"),
            va("c", "n1", "pv-c"),
        ],
        "n1",
    );
    // pv-a is bound to a claim a kept pod mounts; pv-b to another claim; pv-c unread.
    attachments[0].claim = Some("kube-system/ds-data".into());
    attachments[1].claim = Some("app/gone".into());
    let o = Observed {
        attachments,
        kept_claims: ["kube-system/ds-data".to_string()].into(),
        ..Observed::default()
    };
    let names: Vec<_> = blockers(&o, "n1").into_iter().map(|b| b.name).collect();
    assert_eq!(names, ["b", "c"]);
}

#[test]
fn the_kept_pods_claims_are_their_pvc_and_ephemeral_volumes_while_they_run() {
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"containers": [], "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-0"}},
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
            {"name": "cfg", "configMap": {"name": "c"}}
        ]},
        "status": {"phase": "Running"}
    }))
    .unwrap();
    let claims: Vec<_> = claims_of(&pod).collect();
    assert_eq!(claims, ["ns/data-0", "ns/p-scratch"]);
    assert!(not_finished(&pod));
    let mut done = pod.clone();
    done.status.as_mut().unwrap().phase = Some("Succeeded".into());
    assert!(!not_finished(&done));
}

#[test]
fn unread_attachments_block_never_read_as_detached() {
    let o = Observed {
        unread: Some("forbidden".into()),
        ..Observed::default()
    };
    let b = blockers(&o, "n1");
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].reason, ATTACHMENTS_UNREAD);
    assert!(matches!(
        verdict(b, &policy(60, OnTimeout::Wait), t(1)),
        Verdict::Wait { .. }
    ));
}

#[test]
fn nothing_attached_is_detached_whatever_the_bound() {
    for on in [OnTimeout::Wait, OnTimeout::Fail, OnTimeout::SkipStuck] {
        assert_eq!(
            verdict(Vec::new(), &policy(10, on), t(100)),
            Verdict::Detached
        );
    }
}

#[test]
fn the_bound_counts_from_the_drains_start_then_on_timeout_applies() {
    let left = || {
        let o = Observed {
            attachments: on_node(&[va("a", "n1", "pv-a")], "n1"),
            ..Observed::default()
        };
        blockers(&o, "n1")
    };
    assert_eq!(bound(&policy(10, OnTimeout::Fail)), Some(t(10)));
    // Before the bound: waits, whatever onTimeout.
    for on in [
        OnTimeout::Wait,
        OnTimeout::Fail,
        OnTimeout::SkipStuck,
        OnTimeout::ForceDelete,
    ] {
        assert_eq!(
            verdict(left(), &policy(10, on), t(9)),
            Verdict::Wait {
                blockers: left(),
                overdue: false
            },
            "{on}"
        );
    }
    assert_eq!(
        verdict(left(), &policy(10, OnTimeout::Wait), t(10)),
        Verdict::Wait {
            blockers: left(),
            overdue: true
        }
    );
    assert_eq!(
        verdict(left(), &policy(10, OnTimeout::Fail), t(10)),
        Verdict::Fail(left())
    );
    assert_eq!(
        verdict(left(), &policy(10, OnTimeout::SkipStuck), t(10)),
        Verdict::Skip(left())
    );
    assert_eq!(
        verdict(left(), &policy(10, OnTimeout::ForceDelete), t(11)),
        Verdict::Skip(left())
    );
    // No drain start known: no bound, so it waits.
    let mut unstarted = policy(10, OnTimeout::Fail);
    unstarted.deadline_start = None;
    assert!(matches!(
        verdict(left(), &unstarted, t(1000)),
        Verdict::Wait { overdue: false, .. }
    ));
}

#[test]
fn failed_by_the_wait_stays_failed_until_the_policy_lifts_it() {
    let status = crate::api::NodeMaintenanceStatus {
        phase: Some(MaintenancePhase::Failed),
        last_error: Some(format!("{FAILED_PREFIX} (...)")),
        ..Default::default()
    };
    assert!(failed(&status, &policy(10, OnTimeout::Fail), t(10)));
    // A longer bound, another onTimeout, or the knob off resumes it.
    assert!(!failed(&status, &policy(60, OnTimeout::Fail), t(10)));
    assert!(!failed(&status, &policy(10, OnTimeout::Wait), t(10)));
    let mut off = policy(10, OnTimeout::Fail);
    off.wait_for_volume_detach = None;
    assert!(!failed(&status, &off, t(10)));
    // Failed for another reason is not this wait's.
    let other = crate::api::NodeMaintenanceStatus {
        last_error: Some("lease lost".into()),
        ..status
    };
    assert!(!failed(&other, &policy(10, OnTimeout::Fail), t(10)));
}

#[test]
fn wait_for_volume_detach_is_read_as_every_knob_and_refused_by_name() {
    use crate::knobs::DEFAULT_DETACH_BOUND as DEFAULT_BOUND;
    use crate::policy::{Defaults, WAIT_FOR_VOLUME_DETACH_ANNOTATION, resolve};
    let nm = |spec: Option<&str>, annotation: Option<&str>| {
        let mut nm = crate::api::NodeMaintenance::new(
            "nm",
            crate::api::NodeMaintenanceSpec {
                node_name: "n1".into(),
                ..Default::default()
            },
        );
        nm.spec.knobs.wait_for_volume_detach = spec.map(Into::into);
        if let Some(a) = annotation {
            nm.annotations_mut()
                .insert(WAIT_FOR_VOLUME_DETACH_ANNOTATION.into(), a.into());
        }
        nm
    };
    let off = Defaults::default();
    let flag = Defaults {
        wait_for_volume_detach: Some(Duration::from_secs(60)),
        ..Defaults::default()
    };
    let min = |m: u64| Some(Duration::from_secs(m * 60));
    // (spec, annotation, defaults) -> bound, refused
    for (spec, annotation, defaults, bound, refused) in [
        (None, None, &off, None, false),
        (None, None, &flag, min(1), false),
        (Some("2m"), None, &off, min(2), false),
        (Some("true"), None, &off, Some(DEFAULT_BOUND), false),
        (Some("2m"), Some("10m"), &off, min(10), false),
        (None, Some("false"), &flag, None, false),
        (Some("false"), None, &flag, None, false),
        (None, Some("soon"), &flag, min(1), true),
        (Some(""), None, &off, None, true),
        (Some("0s"), None, &off, None, true),
    ] {
        let (p, invalid) = resolve(&nm(spec, annotation), defaults);
        assert_eq!(
            (p.wait_for_volume_detach, !invalid.is_empty()),
            (bound, refused),
            "{spec:?} {annotation:?} {defaults:?}"
        );
    }
    let (_, invalid) = resolve(&nm(None, Some("soon")), &off);
    assert_eq!(
        invalid[0].to_string(),
        "nodemaintenance.medik8s.io/waitForVolumeDetach has the invalid value \"soon\" for the \
         knob waitForVolumeDetach (accepted: true, false, or a positive duration bound such as 5m)"
    );
    // The strict annotation list knows it: not refused as an unknown annotation.
    let (_, invalid) = resolve(&nm(None, Some("5m")), &off);
    assert!(invalid.is_empty(), "{invalid:?}");
}

#[test]
fn the_blocker_reasons_are_known_to_the_blocked_pods_metric() {
    use crate::metrics::BlockerReason;
    assert_eq!(
        BlockerReason::of(VOLUME_ATTACHED),
        BlockerReason::VolumeAttached
    );
    assert_eq!(
        BlockerReason::of(ATTACHMENTS_UNREAD),
        BlockerReason::VolumeAttachmentsUnread
    );
}

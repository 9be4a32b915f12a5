//! The common opt-out annotations (`docs/drain-contract.md` §1 "Opt-out annotations"; issue 47
//! item 4): a pod annotated `karpenter.sh/do-not-disrupt: "true"` (Karpenter) or
//! `cluster-autoscaler.kubernetes.io/safe-to-evict: "false"` (the Cluster Autoscaler) is not
//! evicted while the maintenance waits for it, until the drain deadline, whose `onTimeout` then
//! applies to it as to any pod. Opt-in: `--honor-opt-out-annotations` (off by default, as
//! upstream, which evicts such pods).
//!
//! What counts is what its owner reads: exactly `"true"` for `do-not-disrupt`
//! (Karpenter compares `== "true"`), exactly `"false"` for `safe-to-evict` (the Cluster
//! Autoscaler compares `== "false"`). The other value the owner knows (`"false"`, `"true"`) says
//! the pod may go, silently; any other value (`"yes"`, `"True"`, `""`) is ignored with a warning
//! naming the annotation, as an unknown value of a drain label is.
//!
//! Where it sits in the pod's decision ([`super::decide()`], its last link): only a pod the drain would
//! evict is held. A DaemonSet, mirror or finished pod stays as before; a pod's own drain label
//! (`skip`, `wait-completed`) and a drain rule that skips or waits for it decide first (neither
//! evicts it; [`super::decide::apply_rule`]); a replacement that is kept stays kept. Pure.

pub(crate) use super::pod::opt_out_marks::{DO_NOT_DISRUPT, SAFE_TO_EVICT, Said, marks};

use super::consts::reason;
use super::disposition::{Disposition, Stage};
use super::pod::DrainPod;
use crate::api::{OnTimeout, PodBlocker, PodReference};

/// The annotation that holds `pod`, the first of [`DO_NOT_DISRUPT`] and [`SAFE_TO_EVICT`] that
/// does.
pub(crate) fn holding(pod: &DrainPod) -> Option<&'static str> {
    let m = pod.metadata.marks.opt_out;
    [
        (m.do_not_disrupt, DO_NOT_DISRUPT),
        (m.safe_to_evict, SAFE_TO_EVICT),
    ]
    .into_iter()
    .find(|(said, _)| *said == Said::Holds)
    .map(|(_, name)| name)
}

/// `disposition` (what the rest of [`super::decide()`]'s chain decided for `pod`) with the opt-outs honoured when `honor`
/// (`--honor-opt-out-annotations`): a pod up for eviction that one of them holds is
/// [`Disposition::OptedOut`] in its stage; an annotation of an unknown value adds its warning to
/// the eviction's. Anything else, and everything when `!honor`, stays as decided.
pub(crate) fn apply(disposition: Disposition, pod: &DrainPod, honor: bool) -> Disposition {
    let Disposition::Evict {
        mut warnings,
        stage,
    } = disposition
    else {
        return disposition;
    };
    if !honor {
        return Disposition::Evict { warnings, stage };
    }
    if let Some(annotation) = holding(pod) {
        return Disposition::OptedOut { annotation, stage };
    }
    let m = pod.metadata.marks.opt_out;
    for (said, name, accepted) in [
        (
            m.do_not_disrupt,
            DO_NOT_DISRUPT,
            "\"true\" (holds the pod) and \"false\"",
        ),
        (
            m.safe_to_evict,
            SAFE_TO_EVICT,
            "\"false\" (holds the pod) and \"true\"",
        ),
    ] {
        if said == Said::Unknown {
            warnings.push(format!("annotation {name} ignored (accepted: {accepted})"));
        }
    }
    Disposition::Evict { warnings, stage }
}

/// The round's pods with the deadline applied to the opted-out ones: once it has passed
/// (`overdue`, [`crate::policy::DrainPolicy::overdue`]) with `ForceDelete`, they are evictable
/// pods of their stage like any other (so deleted); under `Wait`, `Fail` and `SkipStuck`, which
/// change nothing for a pod that is not terminating, they stay held.
pub(crate) fn at_deadline(
    pods: Vec<(DrainPod, Disposition)>,
    overdue: Option<OnTimeout>,
) -> Vec<(DrainPod, Disposition)> {
    if overdue != Some(OnTimeout::ForceDelete) {
        return pods;
    }
    pods.into_iter()
        .map(|(pod, d)| match d {
            Disposition::OptedOut { stage, .. } => (pod, evict(stage)),
            d => (pod, d),
        })
        .collect()
}

fn evict(stage: Stage) -> Disposition {
    Disposition::Evict {
        warnings: Vec::new(),
        stage,
    }
}

/// The blocker of a pod an opt-out `annotation` holds ([`Disposition::OptedOut`]). The text has
/// no times, so it does not change from pass to pass.
pub(crate) fn held(pod: &PodReference, annotation: &str) -> PodBlocker {
    let value = if annotation == DO_NOT_DISRUPT {
        "true"
    } else {
        "false"
    };
    PodBlocker::of(
        pod,
        reason::OPTED_OUT,
        format!(
            "annotated {annotation}={value} (--honor-opt-out-annotations): not evicted; held \
             until the drain deadline, whose onTimeout then applies to it"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::{Arrival, DrainOptions};

    fn pod(annotations: &[(&str, &str)]) -> DrainPod {
        let mut p = DrainPod::default();
        p.metadata.name = "p".into();
        p.metadata.namespace = "ns".into();
        let map = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        p.metadata.marks.opt_out = marks(&map);
        p
    }

    fn on() -> DrainOptions {
        DrainOptions {
            honor_opt_out: true,
            ..DrainOptions::default()
        }
    }

    fn decide(p: &DrainPod, o: &DrainOptions) -> Disposition {
        crate::drain::decide(p, None, o, &Arrival::default(), None)
    }

    const ORDINARY: Stage = Stage::Ordinary(0);

    #[test]
    fn each_annotation_holds_a_pod_with_its_owners_value() {
        for (k, v) in [(DO_NOT_DISRUPT, "true"), (SAFE_TO_EVICT, "false")] {
            assert_eq!(
                decide(&pod(&[(k, v)]), &on()),
                Disposition::OptedOut {
                    annotation: k,
                    stage: ORDINARY
                },
                "{k}={v}"
            );
        }
        let both = pod(&[(SAFE_TO_EVICT, "false"), (DO_NOT_DISRUPT, "true")]);
        assert_eq!(
            holding(&both),
            Some(DO_NOT_DISRUPT),
            "named: the first that holds"
        );
        assert!(
            Disposition::OptedOut {
                annotation: DO_NOT_DISRUPT,
                stage: ORDINARY
            }
            .drains()
        );
    }

    #[test]
    fn other_values_let_the_pod_go_and_unknown_ones_are_named_in_a_warning() {
        for (k, v, warned) in [
            (DO_NOT_DISRUPT, "false", false),
            (DO_NOT_DISRUPT, "yes", true),
            (DO_NOT_DISRUPT, "True", true),
            (DO_NOT_DISRUPT, "", true),
            (SAFE_TO_EVICT, "true", false),
            (SAFE_TO_EVICT, "no", true),
        ] {
            let Disposition::Evict { warnings, stage } = decide(&pod(&[(k, v)]), &on()) else {
                panic!("{k}={v:?} must be evicted");
            };
            assert_eq!(stage, ORDINARY);
            assert_eq!(
                warnings
                    .iter()
                    .any(|w| w.contains(k) && w.contains("ignored")),
                warned,
                "{k}={v:?}: {warnings:?}"
            );
        }
    }

    #[test]
    fn without_the_flag_every_annotated_pod_is_evicted_as_upstream_does() {
        let off = DrainOptions::default();
        let plain = decide(&pod(&[]), &off);
        assert!(plain.evicts());
        for (k, v) in [(DO_NOT_DISRUPT, "true"), (SAFE_TO_EVICT, "false")] {
            assert_eq!(decide(&pod(&[(k, v)]), &off), plain, "{k}={v}");
        }
        assert_eq!(
            decide(&pod(&[(DO_NOT_DISRUPT, "yes")]), &off),
            plain,
            "no warning either: the annotation is not read"
        );
    }

    #[test]
    fn a_pods_own_label_and_what_is_not_evicted_anyway_decide_first() {
        let mut skip = pod(&[(DO_NOT_DISRUPT, "true")]);
        skip.metadata
            .labels
            .insert(crate::drain::DRAIN_LABEL.into(), "skip".into());
        assert!(matches!(
            decide(&skip, &on()),
            Disposition::SkipByRule { .. }
        ));
        let mut finished = pod(&[(DO_NOT_DISRUPT, "true")]);
        finished.status.phase = Some("Succeeded".into());
        assert_eq!(decide(&finished, &on()), Disposition::SkipFinished);
        let mut critical = pod(&[(SAFE_TO_EVICT, "false")]);
        critical.spec.priority = Some(crate::drain::SYSTEM_CRITICAL_PRIORITY);
        assert_eq!(
            decide(&critical, &on()),
            Disposition::OptedOut {
                annotation: SAFE_TO_EVICT,
                stage: Stage::Critical
            },
            "held in its stage, which applies at the deadline"
        );
    }

    #[test]
    fn a_drain_rule_decides_before_the_opt_outs_and_its_order_is_the_held_pods_stage() {
        use crate::api::{DrainBehavior, DrainRule};
        let rule = |behavior, order| DrainRule {
            behavior,
            order,
            ..DrainRule::default()
        };
        let held = pod(&[(DO_NOT_DISRUPT, "true")]);
        let with =
            |r: &DrainRule| crate::drain::decide(&held, None, &on(), &Arrival::default(), Some(r));
        assert_eq!(
            with(&rule(DrainBehavior::Skip, None)),
            Disposition::SkipByRule {
                label: crate::drain::DRAIN_RULES
            }
        );
        assert_eq!(
            with(&rule(DrainBehavior::WaitCompleted, None)),
            Disposition::WaitCompleted {
                label: crate::drain::DRAIN_RULES
            }
        );
        assert_eq!(
            with(&rule(DrainBehavior::Drain, Some(5))),
            Disposition::OptedOut {
                annotation: DO_NOT_DISRUPT,
                stage: Stage::Ordinary(5)
            },
            "held, in the stage the rule's order gives it at the deadline"
        );
    }

    #[test]
    fn after_the_deadline_only_force_delete_releases_a_held_pod() {
        let held = || {
            vec![(
                pod(&[(DO_NOT_DISRUPT, "true")]),
                Disposition::OptedOut {
                    annotation: DO_NOT_DISRUPT,
                    stage: ORDINARY,
                },
            )]
        };
        for overdue in [
            None,
            Some(OnTimeout::Wait),
            Some(OnTimeout::Fail),
            Some(OnTimeout::SkipStuck),
        ] {
            assert_eq!(at_deadline(held(), overdue), held(), "{overdue:?}");
        }
        assert_eq!(
            at_deadline(held(), Some(OnTimeout::ForceDelete))[0].1,
            evict(ORDINARY)
        );
        let b = held_blocker();
        assert_eq!(b.reason, "OptedOut");
        let m = b.message.unwrap();
        assert!(
            m.contains("karpenter.sh/do-not-disrupt=true") && m.contains("deadline"),
            "{m}"
        );
    }

    #[test]
    fn the_pod_list_reads_the_values_and_keeps_the_other_annotations_out() {
        let p: DrainPod = serde_json::from_value(serde_json::json!({"metadata": {
            "annotations": {DO_NOT_DISRUPT: "yes", SAFE_TO_EVICT: "false", "other": "x"}
        }}))
        .unwrap();
        assert_eq!(
            p.metadata.marks.opt_out,
            super::super::pod::opt_out_marks::OptOutMarks {
                do_not_disrupt: Said::Unknown,
                safe_to_evict: Said::Holds
            }
        );
        assert_eq!(holding(&p), Some(SAFE_TO_EVICT));
    }

    fn held_blocker() -> PodBlocker {
        held(
            &PodReference {
                namespace: "ns".into(),
                name: "p".into(),
            },
            DO_NOT_DISRUPT,
        )
    }
}

//! A maintenance's drain rules (`spec.drainRules`, `docs/drain-contract.md` §1 "A pod's own
//! rule"), after Cluster API's MachineDrainRule: the first rule whose pod and namespace
//! selectors select a pod says whether it is drained (in which order), skipped or waited for.
//! A pod's own drain label wins ([`super::pod_rule`]). Pure: the pod's decision
//! ([`super::decide::decide`]) applies the rule [`matching`] finds for it with the labels of the
//! pod's namespace ([`super::decide::apply_rule`]).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::consts::DRAIN_RULES;
use super::consts::reason;
use super::pod::DrainPod;
use crate::api::{DrainRule, PodBlocker, PodReference};

/// Why a pod is kept or waited for, as status and events say it: `labelled <label>=<value>`
/// for a pod's own label, `selected by spec.drainRules (<value>)` for a rule.
pub(crate) fn says(label: &str, value: &str) -> String {
    if label == DRAIN_RULES {
        format!("selected by {DRAIN_RULES} ({value})")
    } else {
        format!("labelled {label}={value}")
    }
}

/// The first of `rules` that selects `pod` in a namespace labelled `namespace_labels` (`None`:
/// not read, which only rules without a namespace selector can match). A rule with no selector,
/// or with a selector of no entry, selects nothing: the policy refuses such rules
/// (`policy::strict`), and one that got here anyway must not read as "every pod".
pub(crate) fn matching<'a>(
    rules: &'a [DrainRule],
    pod: &DrainPod,
    namespace_labels: Option<&BTreeMap<String, String>>,
) -> Option<&'a DrainRule> {
    let empty = |s: &LabelSelector| {
        s.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
            && s.match_expressions.as_ref().is_none_or(Vec::is_empty)
    };
    rules.iter().find(|r| {
        let selectors = [&r.pod_selector, &r.namespace_selector];
        if selectors.iter().all(|s| s.is_none()) || selectors.into_iter().flatten().any(empty) {
            return false;
        }
        let pods = r
            .pod_selector
            .as_ref()
            .is_none_or(|s| selector_matches(s, &pod.metadata.labels));
        let namespaces = match (&r.namespace_selector, namespace_labels) {
            (None, _) => true,
            (Some(s), Some(labels)) => selector_matches(s, labels),
            (Some(_), None) => false,
        };
        pods && namespaces
    })
}

/// Whether a label selector selects a pod with `labels` (policy/v1 semantics: an empty selector
/// selects everything, an absent one nothing; the caller handles the absent case). A selector
/// kube cannot evaluate (an unknown operator, `In` without values) selects nothing.
pub(crate) fn selector_matches(
    selector: &LabelSelector,
    labels: &std::collections::BTreeMap<String, String>,
) -> bool {
    use kube::core::{Selector, SelectorExt};
    Selector::try_from(selector.clone()).is_ok_and(|s| s.matches(labels))
}

/// Whether any of `rules` needs the labels of the pods' namespaces.
pub(crate) fn need_namespaces(rules: &[DrainRule]) -> bool {
    rules.iter().any(|r| r.namespace_selector.is_some())
}

/// The status entry of a pod its drain label keeps ([`Disposition::SkipByRule`]).
pub(crate) fn skipped_by_rule(pod: &PodReference, label: &str) -> PodBlocker {
    PodBlocker::of(
        pod,
        reason::SKIPPED,
        format!("not evicted: {}", says(label, "skip")),
    )
}

/// The blocker of a pod its drain label says to wait for ([`Disposition::WaitCompleted`]).
pub(crate) fn waiting_for_completion(pod: &PodReference, label: &str) -> PodBlocker {
    PodBlocker::of(
        pod,
        reason::WAITING_FOR_COMPLETION,
        format!(
            "{}: not evicted; the drain waits until it finishes",
            says(label, "wait-completed")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::DrainBehavior;
    use crate::drain::consts::DRAIN_LABEL;
    use crate::drain::decide::apply_rule as apply;
    use crate::drain::{Disposition, DrainOptions, Stage};

    fn pod(labels: &[(&str, &str)]) -> DrainPod {
        let mut p = DrainPod::default();
        p.metadata.name = "p".into();
        p.metadata.namespace = "ns".into();
        p.metadata.labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        p
    }

    fn selector(k: &str, v: &str) -> Option<LabelSelector> {
        Some(LabelSelector {
            match_labels: Some([(k.to_string(), v.to_string())].into()),
            ..LabelSelector::default()
        })
    }

    fn evict() -> Disposition {
        Disposition::Evict {
            warnings: Vec::new(),
            stage: Stage::Ordinary(0),
        }
    }

    #[test]
    fn the_first_matching_rule_applies_and_a_pods_own_label_wins() {
        let rules = vec![
            DrainRule {
                pod_selector: selector("app", "db"),
                behavior: DrainBehavior::Drain,
                order: Some(2),
                ..DrainRule::default()
            },
            DrainRule {
                namespace_selector: selector("team", "batch"),
                behavior: DrainBehavior::WaitCompleted,
                ..DrainRule::default()
            },
            DrainRule {
                pod_selector: selector("app", "cache"),
                behavior: DrainBehavior::Skip,
                ..DrainRule::default()
            },
        ];
        let batch: BTreeMap<String, String> = [("team".to_string(), "batch".to_string())].into();
        let opts = DrainOptions::default();
        let decide = |p: &DrainPod, ns: Option<&BTreeMap<String, String>>| {
            apply(evict(), matching(&rules, p, ns), p, &opts)
        };
        assert_eq!(
            decide(&pod(&[("app", "db")]), Some(&batch)),
            Disposition::Evict {
                warnings: Vec::new(),
                stage: Stage::Ordinary(2)
            },
            "the first rule wins over the namespace's"
        );
        assert_eq!(
            decide(&pod(&[("app", "job")]), Some(&batch)),
            Disposition::WaitCompleted { label: DRAIN_RULES }
        );
        assert_eq!(
            decide(&pod(&[("app", "job")]), None),
            evict(),
            "a namespace selector needs the namespace's labels"
        );
        assert_eq!(
            decide(&pod(&[("app", "cache")]), None),
            Disposition::SkipByRule { label: DRAIN_RULES }
        );
        assert_eq!(
            decide(&pod(&[("app", "cache"), (DRAIN_LABEL, "3")]), None),
            evict(),
            "the pod's own label (here its order, as classify decided it) wins"
        );
        assert_eq!(
            apply(Disposition::SkipDaemonSet, rules.get(2), &pod(&[]), &opts),
            Disposition::SkipDaemonSet
        );
        assert!(need_namespaces(&rules) && !need_namespaces(&rules[..1]));
    }

    #[test]
    fn a_rule_without_a_selector_or_with_an_empty_one_selects_nothing() {
        let rules = |pod_selector, namespace_selector| {
            vec![DrainRule {
                pod_selector,
                namespace_selector,
                behavior: DrainBehavior::Skip,
                ..DrainRule::default()
            }]
        };
        let labels: BTreeMap<String, String> = [("team".to_string(), "a".to_string())].into();
        let p = pod(&[("app", "db")]);
        for r in [
            rules(None, None),
            rules(Some(LabelSelector::default()), None),
            rules(selector("app", "db"), Some(LabelSelector::default())),
        ] {
            assert_eq!(matching(&r, &p, Some(&labels)), None, "{r:?}");
        }
        assert!(matching(&rules(selector("app", "db"), None), &p, Some(&labels)).is_some());
    }
}

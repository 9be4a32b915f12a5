//! Strict reading of the knob annotations (`docs/drain-contract.md` §10, "Strict input"): an
//! annotation of the knobs' group that names no knob is refused by name, never ignored. The
//! strict reading of the drain rules is theirs (`crate::knobs`). Pure.

use kube::ResourceExt;

use crate::api::NodeMaintenance;
use crate::knobs::{DrainKnobs, PREFIX};

/// The annotations the operator itself writes on a NodeMaintenance in its group (the record of
/// the node it entered, the legacy drain start): known, so never refused.
const OPERATOR_ANNOTATIONS: [&str; 4] = [
    crate::api::ENTERED_NODE_ANNOTATION,
    crate::api::ENTERED_NODE_PROVIDER_ID_ANNOTATION,
    crate::api::ENTERED_NODE_UID_ANNOTATION,
    crate::api::DRAIN_STARTED_ANNOTATION,
];

/// The annotations of `nm` in the group `nodemaintenance.medik8s.io/` that are neither a knob's
/// ([`DrainKnobs::ALL`]) nor one the operator writes: `(name, value)` in name order. A typo such
/// as `nodemaintenance.medik8s.io/pause` would otherwise be ignored and the maintenance drain
/// what it was meant to hold.
pub(crate) fn unknown_annotations(nm: &NodeMaintenance) -> Vec<(&String, &String)> {
    let known = |k: &str| {
        DrainKnobs::ALL.iter().any(|knob| knob.annotation == k) || OPERATOR_ANNOTATIONS.contains(&k)
    };
    nm.annotations()
        .iter()
        .filter(|(k, _)| k.starts_with(PREFIX) && !known(k))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knobs::KNOBS_ACCEPTED;
    use crate::policy::{DRAIN_RULES_ANNOTATION, Defaults, resolve};

    #[test]
    fn an_unknown_annotation_of_the_group_is_found_and_the_operators_own_are_not() {
        let mut nm = NodeMaintenance::new("nm", Default::default());
        for (k, v) in [
            ("nodemaintenance.medik8s.io/pause", "true"),
            ("nodemaintenance.medik8s.io/paused", "true"),
            (crate::api::ENTERED_NODE_ANNOTATION, "n1"),
            (crate::api::DRAIN_STARTED_ANNOTATION, "2026-01-01T00:00:00Z"),
            ("example.com/pause", "true"),
        ] {
            nm.annotations_mut().insert(k.into(), v.into());
        }
        let unknown = unknown_annotations(&nm);
        assert_eq!(
            unknown,
            [(
                &"nodemaintenance.medik8s.io/pause".to_string(),
                &"true".to_string()
            )]
        );
    }

    /// The issue's inputs (Cluster API's MachineDrainRule shape, a label map as podSelector),
    /// by annotation and as the API server leaves them in the spec, each with an unknown value
    /// and an empty rule: refused naming the path and the key, and the default (no rule: every
    /// pod evicted) applies, never "every pod selected by a Skip rule".
    #[test]
    fn a_rule_that_cannot_be_read_is_refused_by_name_and_the_default_applies() {
        let defaults = Defaults::default();
        let annotated = |text: &str| {
            let mut nm = NodeMaintenance::new("nm", Default::default());
            nm.annotations_mut()
                .insert(DRAIN_RULES_ANNOTATION.into(), text.into());
            nm
        };
        let in_spec = |text: &str| {
            let mut nm = NodeMaintenance::new("nm", Default::default());
            nm.spec.knobs.drain_rules = Some(serde_json::from_str(text).unwrap());
            nm
        };
        // (object, the start of the refusal)
        for (nm, refused) in [
            (
                annotated(r#"[{"selector": {"matchLabels": {"app": "db"}}, "behavior": "Skip"}]"#),
                r#"nodemaintenance.medik8s.io/drainRules[0].selector: unknown field "selector""#,
            ),
            (
                annotated(r#"[{"podSelector": {"app": "db"}, "behavior": "Skip"}]"#),
                r#"nodemaintenance.medik8s.io/drainRules[0].podSelector.app: unknown field "app""#,
            ),
            (
                annotated(
                    r#"[{"podSelector": {"matchLabels": {"app": "db"}}, "behavior": "Keep"}]"#,
                ),
                r#"nodemaintenance.medik8s.io/drainRules[0].behavior: unknown variant "Keep""#,
            ),
            (
                annotated("[{}]"),
                r#"nodemaintenance.medik8s.io/drainRules[0]: missing field "behavior""#,
            ),
            // The two inputs in the spec, once pruned by the API server.
            (
                in_spec(r#"[{"behavior": "Skip"}]"#),
                "spec.drainRules[0]: the rule has neither podSelector nor namespaceSelector",
            ),
            (
                in_spec(r#"[{"podSelector": {}, "behavior": "Skip"}]"#),
                "spec.drainRules[0].podSelector: the selector has no matchLabels",
            ),
        ] {
            let (p, invalid) = resolve(&nm, &defaults);
            assert!(p.drain_rules.is_empty(), "the default applies: {p:?}");
            let said = invalid.first().map(ToString::to_string).unwrap_or_default();
            assert!(said.starts_with(refused), "{said}\nexpected: {refused}");
            assert_eq!(invalid[0].knob, "drainRules");
        }
        let (p, invalid) = resolve(
            &annotated(r#"[{"podSelector": {"matchLabels": {"app": "db"}}, "behavior": "Skip"}]"#),
            &defaults,
        );
        assert_eq!((p.drain_rules.len(), invalid), (1, Vec::new()), "valid");
    }

    #[test]
    fn an_unknown_knob_annotation_is_refused_by_name() {
        let mut nm = NodeMaintenance::new("nm", Default::default());
        nm.annotations_mut()
            .insert("nodemaintenance.medik8s.io/pause".into(), "true".into());
        let (p, invalid) = resolve(&nm, &Defaults::default());
        assert!(!p.paused);
        // The list of knobs itself is pinned once, by `knobs::tests`.
        assert_eq!(
            invalid[0].to_string(),
            format!(
                "nodemaintenance.medik8s.io/pause: unknown annotation of the drain policy (no \
                 knob has this name) (value \"true\"; accepted: {})",
                *KNOBS_ACCEPTED
            )
        );
        for knob in DrainKnobs::ALL {
            let name = knob.annotation.strip_prefix(PREFIX).unwrap();
            assert!(KNOBS_ACCEPTED.contains(name), "{name}");
        }
    }
}

//! Drain rules (`drainRules`, after Cluster API's MachineDrainRule) and their strict reading
//! (`docs/drain-contract.md` §10, "Strict input"): an unknown key, an unknown value, a wrong
//! type or empty required text is refused with its path and the offending key or value, never
//! read as "select everything" or "nothing".
//!
//! Two forms reach the operator. The JSON text of the annotation `nodemaintenance.medik8s.io/
//! drainRules` (and `--drain-rules`) is read with serde's `deny_unknown_fields` at every depth
//! (the rule, its selectors, their requirements), so `selector` or a label map under
//! `podSelector` is named. `spec.drainRules` arrives already pruned by the API server's
//! structural schema: a key it does not know is gone (with kubectl's default
//! `--validate=strict` the API server refuses it itself; a client that leaves field validation
//! at the server's default `Warn` only gets a warning). What pruning leaves is a rule with no
//! selector, or a selector with no entry, both of which would select every pod, so
//! [`check_rules`] refuses them in both forms: a rule selects the pods its selectors name, and
//! an empty selector is no selection. Pure.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One drain rule (`spec.drainRules`), after Cluster API's MachineDrainRule.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrainRule {
    /// The pods it selects by their labels (at least one matchLabels or matchExpressions entry);
    /// absent: every pod, if namespaceSelector is set (a rule needs one of the two).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<LabelSelector>,
    /// The pods it selects by their namespace's labels (at least one matchLabels or
    /// matchExpressions entry); absent: every namespace, if podSelector is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Drain (evict, in `order`), Skip (never evicted, reported as kept) or WaitCompleted
    /// (never evicted; the drain waits until the pod finishes).
    pub behavior: DrainBehavior,
    /// The drain order of the pods it selects (Drain only): every pod of a lower order leaves
    /// before one of a higher order is evicted; 0 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<i32>,
}

/// What a drain rule does with the pods it selects.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum DrainBehavior {
    /// Evicted, in the rule's order.
    #[default]
    Drain,
    /// Never evicted; reported as kept.
    Skip,
    /// Never evicted; the drain waits until the pod finishes.
    WaitCompleted,
}

/// One rule as the JSON text may spell it: exactly [`DrainRule`]'s keys.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Rule {
    #[serde(default)]
    pod_selector: Option<Selector>,
    #[serde(default)]
    namespace_selector: Option<Selector>,
    behavior: DrainBehavior,
    #[serde(default)]
    order: Option<i32>,
}

/// A label selector as the JSON text may spell it: exactly `LabelSelector`'s keys (k8s-openapi's
/// own type ignores any other, which is how `podSelector: {app: db}` became "every pod").
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Selector {
    #[serde(default)]
    match_labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    match_expressions: Option<Vec<Requirement>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Requirement {
    key: String,
    operator: String,
    #[serde(default)]
    values: Option<Vec<String>>,
}

impl From<Selector> for LabelSelector {
    fn from(s: Selector) -> Self {
        LabelSelector {
            match_labels: s.match_labels,
            match_expressions: s.match_expressions.map(|e| {
                e.into_iter()
                    .map(|r| LabelSelectorRequirement {
                        key: r.key,
                        operator: r.operator,
                        values: r.values,
                    })
                    .collect()
            }),
        }
    }
}

/// Reads drain rules from JSON `text` written at `source` (the annotation's name, or
/// `--drain-rules`): a list of rules with exactly the keys of [`DrainRule`] at every depth, then
/// [`check_rules`].
///
/// # Errors
/// What is wrong and where, as `<source><path>: <problem>`: `…drainRules[0]: unknown field
/// "selector", expected one of "podSelector", "namespaceSelector", "behavior", "order"`, an
/// unknown variant of `behavior`, a wrong type, text that is no JSON list.
pub fn parse_rules(text: &str, source: &str) -> Result<Vec<DrainRule>, String> {
    let de = &mut serde_json::Deserializer::from_str(text);
    let rules: Vec<Rule> = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        // serde_json's own text, with its backticks as quotes and without the position in the
        // text (the path says where).
        let mut problem = inner.to_string().replace('`', "\"");
        if let Some(at) = problem.rfind(" at line ") {
            problem.truncate(at);
        }
        match path.as_str() {
            "." => format!("{source}: {problem}"),
            p if p.starts_with('[') => format!("{source}{p}: {problem}"),
            p => format!("{source}.{p}: {problem}"),
        }
    })?;
    let rules: Vec<DrainRule> = rules
        .into_iter()
        .map(|r| DrainRule {
            pod_selector: r.pod_selector.map(Into::into),
            namespace_selector: r.namespace_selector.map(Into::into),
            behavior: r.behavior,
            order: r.order,
        })
        .collect();
    check_rules(&rules, source)?;
    Ok(rules)
}

/// Checks that every rule of `rules`, read at `source` (`spec.drainRules`, the annotation,
/// `--drain-rules`), selects what it names: at least one selector, each with at least one
/// entry, no empty label key, and requirements with a known operator and values where it needs
/// them (none where it takes none).
///
/// # Errors
/// The first problem, as `<source>[<i>](.<selector>…): <problem>`.
pub fn check_rules(rules: &[DrainRule], source: &str) -> Result<(), String> {
    for (i, rule) in rules.iter().enumerate() {
        let at = format!("{source}[{i}]");
        if rule.pod_selector.is_none() && rule.namespace_selector.is_none() {
            return Err(format!(
                "{at}: the rule has neither podSelector nor namespaceSelector, so it would \
                 select every pod; give at least one (a key of another name, such as \
                 selector, is not read: the API server drops it from spec.drainRules)"
            ));
        }
        for (name, selector) in [
            ("podSelector", &rule.pod_selector),
            ("namespaceSelector", &rule.namespace_selector),
        ] {
            if let Some(s) = selector {
                check_selector(s, &format!("{at}.{name}"))?;
            }
        }
    }
    Ok(())
}

fn check_selector(s: &LabelSelector, at: &str) -> Result<(), String> {
    let labels = s.match_labels.as_ref().map_or(0, BTreeMap::len);
    let expressions = s.match_expressions.as_ref().map_or(0, Vec::len);
    if labels + expressions == 0 {
        return Err(format!(
            "{at}: the selector has no matchLabels or matchExpressions entry, so it would select \
             every pod; labels go under matchLabels ({{\"matchLabels\": {{\"app\": \"db\"}}}}), \
             a key of another name is not read (the API server drops it from spec.drainRules)"
        ));
    }
    if s.match_labels.iter().flatten().any(|(k, _)| k.is_empty()) {
        return Err(format!("{at}.matchLabels: a label key is empty"));
    }
    for (j, r) in s.match_expressions.iter().flatten().enumerate() {
        let at = format!("{at}.matchExpressions[{j}]");
        let values = r.values.as_ref().map_or(0, Vec::len);
        if r.key.is_empty() {
            return Err(format!("{at}.key: the label key is empty"));
        }
        match (r.operator.as_str(), values) {
            ("In" | "NotIn", 0) => {
                return Err(format!(
                    "{at}.values: operator {} needs at least one value",
                    r.operator
                ));
            }
            ("Exists" | "DoesNotExist", 1..) => {
                return Err(format!(
                    "{at}.values: operator {} takes no values",
                    r.operator
                ));
            }
            ("In" | "NotIn" | "Exists" | "DoesNotExist", _) => {}
            (other, _) => {
                return Err(format!(
                    "{at}.operator: unknown value {other:?}, expected one of In, NotIn, Exists, \
                     DoesNotExist"
                ));
            }
        }
    }
    // The evaluator's own check, the last word on what it can evaluate.
    kube::core::Selector::try_from(s.clone())
        .map(|_| ())
        .map_err(|e| format!("{at}: the selector cannot be evaluated: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const AT: &str = "nodemaintenance.medik8s.io/drainRules";

    #[test]
    fn rules_text_is_read_strictly_at_every_depth() {
        // (input, the start of the refusal): each names the path and the key or value.
        for (text, refused) in [
            // Cluster API's MachineDrainRule shape.
            (
                r#"[{"selector": {"matchLabels": {"app": "db"}}, "behavior": "Skip"}]"#,
                r#"nodemaintenance.medik8s.io/drainRules[0].selector: unknown field "selector", expected one of "podSelector", "namespaceSelector", "behavior", "order""#,
            ),
            // A label map where the selector goes.
            (
                r#"[{"podSelector": {"app": "db"}, "behavior": "Skip"}]"#,
                r#"nodemaintenance.medik8s.io/drainRules[0].podSelector.app: unknown field "app", expected "matchLabels" or "matchExpressions""#,
            ),
            (
                r#"[{"podSelector": {"matchLabels": {"app": "db"}}, "behavior": "Keep"}]"#,
                r#"nodemaintenance.medik8s.io/drainRules[0].behavior: unknown variant "Keep", expected one of "Drain", "Skip", "WaitCompleted""#,
            ),
            (
                r#"[{}]"#,
                r#"nodemaintenance.medik8s.io/drainRules[0]: missing field "behavior""#,
            ),
            (
                r#"[{"behavior": "Skip"}]"#,
                "nodemaintenance.medik8s.io/drainRules[0]: the rule has neither podSelector nor namespaceSelector",
            ),
            (
                r#"[{"podSelector": {}, "behavior": "Skip"}]"#,
                "nodemaintenance.medik8s.io/drainRules[0].podSelector: the selector has no matchLabels or matchExpressions entry",
            ),
            (
                r#"[{"podSelector": {"matchLabels": {"app": "db"}}, "behavior": "Drain", "order": "2"}]"#,
                r#"nodemaintenance.medik8s.io/drainRules[0].order: invalid type: string "2", expected i32"#,
            ),
            (
                r#"[{"podSelector": {"matchExpressions": [{"key": "app", "operator": "In", "value": ["db"]}]}, "behavior": "Skip"}]"#,
                r#"nodemaintenance.medik8s.io/drainRules[0].podSelector.matchExpressions[0].value: unknown field "value""#,
            ),
            (
                r#"[{"podSelector": {"matchExpressions": [{"key": "app", "operator": "in", "values": ["db"]}]}, "behavior": "Skip"}]"#,
                r#"nodemaintenance.medik8s.io/drainRules[0].podSelector.matchExpressions[0].operator: unknown value "in""#,
            ),
            (
                r#"[{"namespaceSelector": {"matchExpressions": [{"key": "", "operator": "Exists"}]}, "behavior": "Skip"}]"#,
                "nodemaintenance.medik8s.io/drainRules[0].namespaceSelector.matchExpressions[0].key: the label key is empty",
            ),
            (
                r#"[{"podSelector": {"matchLabels": {"app": "db"}}, "behavior": "Drain"}, {"namespaceSelector": {"matchLabels": {}}, "behavior": "Skip"}]"#,
                "nodemaintenance.medik8s.io/drainRules[1].namespaceSelector: the selector has no",
            ),
            (
                r#"{"podSelector": {"matchLabels": {"app": "db"}}, "behavior": "Skip"}"#,
                "nodemaintenance.medik8s.io/drainRules: invalid type: map, expected a sequence",
            ),
            (
                "",
                "nodemaintenance.medik8s.io/drainRules: EOF while parsing a value",
            ),
        ] {
            let err = parse_rules(text, AT).expect_err(text);
            assert!(
                err.starts_with(refused),
                "{text}\n{err}\nexpected: {refused}"
            );
        }
    }

    #[test]
    fn valid_rules_text_reads_as_the_rules() {
        let rules = parse_rules(
            r#"[{"podSelector": {"matchLabels": {"app": "db"}}, "behavior": "Skip"},
                {"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "In", "values": ["batch"]}]},
                 "podSelector": {"matchExpressions": [{"key": "job", "operator": "Exists"}]},
                 "behavior": "WaitCompleted"},
                {"podSelector": {"matchLabels": {"tier": "web"}}, "behavior": "Drain", "order": 2}]"#,
            AT,
        )
        .unwrap();
        assert_eq!(rules.len(), 3);
        assert_eq!(rules[0].behavior, DrainBehavior::Skip);
        assert_eq!(
            rules[1]
                .namespace_selector
                .as_ref()
                .unwrap()
                .match_expressions
                .as_ref()
                .unwrap()[0]
                .values,
            Some(vec!["batch".to_string()])
        );
        assert_eq!(rules[2].order, Some(2));
        assert_eq!(parse_rules("[]", AT), Ok(Vec::new()), "no rules");
    }

    #[test]
    fn pruned_spec_rules_that_would_select_every_pod_are_refused() {
        // What the API server leaves of the issue's two inputs in spec.drainRules.
        let pruned: Vec<DrainRule> = serde_json::from_str(
            r#"[{"behavior": "Skip"}, {"podSelector": {}, "behavior": "Skip"}]"#,
        )
        .unwrap();
        let err = check_rules(&pruned[..1], "spec.drainRules").unwrap_err();
        assert!(
            err.starts_with(
                "spec.drainRules[0]: the rule has neither podSelector nor namespaceSelector"
            ),
            "{err}"
        );
        let err = check_rules(&pruned[1..], "spec.drainRules").unwrap_err();
        assert!(
            err.starts_with("spec.drainRules[0].podSelector: the selector has no matchLabels"),
            "{err}"
        );
        let ok: Vec<DrainRule> = serde_json::from_str(
            r#"[{"podSelector": {"matchLabels": {"app": "db"}}, "behavior": "Skip"}]"#,
        )
        .unwrap();
        assert_eq!(check_rules(&ok, "spec.drainRules"), Ok(()));
    }
}

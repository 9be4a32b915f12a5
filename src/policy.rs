//! The drain policy of one maintenance: each knob resolved from, in this order, its annotation
//! `nodemaintenance.medik8s.io/<knob>` on the NodeMaintenance (never pruned, so it works on
//! upstream's CRD), its field in our CRD's `spec`, and the operator's flag (the cluster default).
//! Without any of them, behaviour is upstream's (`docs/drain-contract.md` §10).
//!
//! Pure: the controller resolves the policy into each pass's observation, the webhook refuses
//! an invalid value, and on a cluster without the webhook an invalid value is reported in status
//! and the default applies.

use kube::ResourceExt;

use crate::api::NodeMaintenance;

/// Annotation of the `paused` knob: `"true"` or `"false"`.
pub const PAUSED_ANNOTATION: &str = "nodemaintenance.medik8s.io/paused";

/// The operator's defaults of the knobs (its flags).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Defaults {
    /// `--drain-paused`: every maintenance starts with its evictions paused.
    pub paused: bool,
}

/// The knobs of one maintenance, resolved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrainPolicy {
    /// No new eviction is sent; cordon, taints, label and lease are kept (ours; Cluster API and
    /// kured pause by annotation too).
    pub paused: bool,
}

/// A knob whose value was refused, as the webhook denial and the status say it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{source_name} has the invalid value {value:?} for the knob {knob} (accepted: {accepted})")]
pub struct InvalidKnob {
    /// The knob (`paused`).
    pub knob: &'static str,
    /// Where the value was read (the annotation's name).
    pub source_name: &'static str,
    /// The value.
    pub value: String,
    /// The accepted values.
    pub accepted: &'static str,
}

fn boolean(
    nm: &NodeMaintenance,
    knob: &'static str,
    annotation: &'static str,
    invalid: &mut Vec<InvalidKnob>,
) -> Option<bool> {
    let value = nm.annotations().get(annotation)?;
    match value.as_str() {
        "true" => Some(true),
        "false" => Some(false),
        other => {
            invalid.push(InvalidKnob {
                knob,
                source_name: annotation,
                value: other.to_string(),
                accepted: "true, false",
            });
            None
        }
    }
}

/// The policy of `nm` under `defaults`: annotation, else spec, else flag, per knob; and the
/// annotations whose values were refused (each knob then falls back as if it were absent).
pub fn resolve(nm: &NodeMaintenance, defaults: &Defaults) -> (DrainPolicy, Vec<InvalidKnob>) {
    let mut invalid = Vec::new();
    let paused = boolean(nm, "paused", PAUSED_ANNOTATION, &mut invalid)
        .or(nm.spec.paused)
        .unwrap_or(defaults.paused);
    (DrainPolicy { paused }, invalid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NodeMaintenanceSpec;

    fn nm(spec: Option<bool>, annotation: Option<&str>) -> NodeMaintenance {
        let mut nm = NodeMaintenance::new(
            "nm",
            NodeMaintenanceSpec {
                node_name: "n1".into(),
                paused: spec,
                ..NodeMaintenanceSpec::default()
            },
        );
        if let Some(a) = annotation {
            nm.annotations_mut()
                .insert(PAUSED_ANNOTATION.into(), a.into());
        }
        nm
    }

    #[test]
    fn the_annotation_wins_over_the_spec_and_the_spec_over_the_flag() {
        let off = Defaults { paused: false };
        let on = Defaults { paused: true };
        // (spec, annotation, flag) -> paused, refused
        for (spec, annotation, defaults, paused, refused) in [
            (None, None, off, false, false),
            (None, None, on, true, false),
            (Some(true), None, off, true, false),
            (Some(false), None, on, false, false),
            (Some(false), Some("true"), off, true, false),
            (Some(true), Some("false"), on, false, false),
            (Some(true), Some("yes"), off, true, true),
            (None, Some("TRUE"), off, false, true),
        ] {
            let (policy, invalid) = resolve(&nm(spec, annotation), &defaults);
            assert_eq!(
                (policy.paused, !invalid.is_empty()),
                (paused, refused),
                "{spec:?} {annotation:?} {defaults:?}"
            );
        }
        let (_, invalid) = resolve(&nm(None, Some("yes")), &off);
        assert_eq!(
            invalid[0].to_string(),
            "nodemaintenance.medik8s.io/paused has the invalid value \"yes\" for the knob paused \
             (accepted: true, false)"
        );
    }
}

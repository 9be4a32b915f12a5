//! The opt-out annotations as the pod list reads them ([`read`]): which are on a pod and what
//! their values say. A leaf of `pod.rs`, which reads them into the slim pod; `opt_out.rs`
//! decides with them.

/// Karpenter's pod annotation: `"true"` says the pod must not be disrupted.
pub(crate) const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
/// The Cluster Autoscaler's pod annotation: `"false"` says the pod must not be evicted.
pub(crate) const SAFE_TO_EVICT: &str = "cluster-autoscaler.kubernetes.io/safe-to-evict";

/// What one opt-out annotation of a pod says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Said {
    /// Not on the pod.
    #[default]
    Absent,
    /// The value that opts out (`do-not-disrupt: "true"`, `safe-to-evict: "false"`).
    Holds,
    /// The other value the annotation's owner knows: the pod may go.
    Releases,
    /// A value its owner does not know: ignored, with a warning.
    Unknown,
}

/// The opt-out annotations of a pod, read when the pod is ([`read`]); their values are not kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct OptOutMarks {
    /// [`DO_NOT_DISRUPT`].
    pub do_not_disrupt: Said,
    /// [`SAFE_TO_EVICT`].
    pub safe_to_evict: Said,
}

/// Records annotation `key` = `value` in `marks` when it is one of the opt-outs; `false` for any
/// other key (left to the caller).
pub(crate) fn read(marks: &mut OptOutMarks, key: &str, value: &str) -> bool {
    let (slot, holds, releases) = match key {
        DO_NOT_DISRUPT => (&mut marks.do_not_disrupt, "true", "false"),
        SAFE_TO_EVICT => (&mut marks.safe_to_evict, "false", "true"),
        _ => return false,
    };
    *slot = if value == holds {
        Said::Holds
    } else if value == releases {
        Said::Releases
    } else {
        Said::Unknown
    };
    true
}

/// The marks of a pod's whole annotation map (the webhook's pods, read as `k8s_openapi` pods).
pub(crate) fn marks(annotations: &std::collections::BTreeMap<String, String>) -> OptOutMarks {
    let mut marks = OptOutMarks::default();
    for (k, v) in annotations {
        read(&mut marks, k, v);
    }
    marks
}

//! Size bounds on everything a maintenance writes, so no API or etcd size limit can refuse a
//! write and freeze the maintenance (`docs/drain-contract.md §5`). The limits they keep under:
//! an object in etcd at most 1.5 MiB (`--max-request-bytes` of etcd, the API server's default),
//! a node's annotations together at most 256 KiB (apimachinery's `TotalAnnotationSizeLimitB`),
//! an `events.k8s.io/v1` Event's `note` at most 1 KiB.
//!
//! Every list of the status is capped, and the `Drained` condition's message says how many pods
//! the lists left out; every message is cut to a length, at a character boundary, with a marker
//! that says how much was cut. Ours: upstream writes every pending pod and error into the status
//! unbounded, and copies nothing onto the node.

/// The reason annotation on the node (`spec.reason`, which has no length limit): at most this
/// many bytes, a 64th of what all annotations of a node may take together.
pub(crate) const MAX_REASON_ANNOTATION: usize = 4096;
/// `status.blockers`: at most this many entries (those that block first, `drain::report::cap_blockers`).
pub(crate) const MAX_BLOCKERS: usize = 50;
/// `status.pendingPods` and `status.pendingPodsRefs`: at most this many entries each.
pub(crate) const MAX_PENDING: usize = 200;
/// One blocker's message: at most this many bytes (a webhook's refusal can be any length).
pub(crate) const MAX_BLOCKER_MESSAGE: usize = 512;
/// `status.lastError`: at most this many distinct errors, then `... and N more`.
pub(crate) const MAX_ERRORS: usize = 10;
/// One error text inside `lastError`: at most this many bytes.
pub(crate) const MAX_ERROR: usize = 1024;
/// A condition's message: at most this many bytes (metav1.Condition allows 32 KiB).
pub(crate) const MAX_CONDITION_MESSAGE: usize = 4096;
/// Kept pods named in the `Drained` condition's message, then `and N more`.
pub(crate) const MAX_NAMED_KEPT: usize = 10;
/// An event's note: the API server refuses more than 1 KiB.
pub(crate) const MAX_EVENT_NOTE: usize = 1024;

/// `text` cut to at most `max` bytes at a character boundary; a cut text ends with
/// `... (N bytes cut)` and is still at most `max` bytes. `max` below 32 cuts without a marker.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    // Room for the marker: the cut count has at most as many digits as the text's length.
    let marker_len = " ... ( bytes cut)".len() + text.len().to_string().len();
    let keep = if max >= 32 {
        max.saturating_sub(marker_len)
    } else {
        max
    };
    let mut end = keep;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    if max < 32 {
        return text[..end].to_string();
    }
    format!("{} ... ({} bytes cut)", &text[..end], text.len() - end)
}

/// Like [`truncate`], for an optional text.
pub(crate) fn truncate_opt(text: Option<&str>, max: usize) -> Option<String> {
    text.map(|t| truncate(t, max))
}

/// At most [`MAX_PENDING`] of `items` (already in their order), and how many were left out.
pub(crate) fn cap_pending<T: Clone>(items: &[T]) -> (Vec<T>, usize) {
    let kept = items.iter().take(MAX_PENDING).cloned().collect();
    (kept, items.len().saturating_sub(MAX_PENDING))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_the_bound_and_character_boundaries() {
        assert_eq!(truncate("short", 10), "short");
        let long = "é".repeat(3000); // 6000 bytes
        for max in [32, 33, 100, 4096] {
            let t = truncate(&long, max);
            assert!(t.len() <= max, "{max}: {}", t.len());
            assert!(t.ends_with("bytes cut)"), "{t}");
        }
        let t = truncate(&long, 100);
        let cut: usize = t
            .rsplit_once(" ... (")
            .and_then(|(_, r)| r.split(' ').next()?.parse().ok())
            .unwrap();
        assert_eq!(
            t.len() - " ... ( bytes cut)".len() - cut.to_string().len() + cut,
            6000
        );
        assert_eq!(truncate(&long, 5), "éé");
        assert_eq!(truncate_opt(None, 5), None);
    }
}

//! Pre-drain hooks (`docs/drain-contract.md` §12): an annotation
//! `pre-drain.hook.nodemaintenance.medik8s.io/<owner>` on a NodeMaintenance holds its drain
//! until the owner (a storage or application operator: Rook lowering its Ceph budgets, KEP-5683
//! user story 6) removes it, as Cluster API's `pre-drain.delete.hook.machine.cluster.x-k8s.io/
//! <owner>` holds a Machine's drain. While any is present the node is entered as in stage Drain
//! (cordon, taints, lease, label) and nothing is evicted or force-deleted; the drain has not
//! started, so its deadline does not count and no start is recorded on the node.
//!
//! Read from the object on every pass (no memory): a restart, a pause or a stage change finds
//! the hooks where their owners left them. Pure.

use kube::ResourceExt;

use crate::api::NodeMaintenance;

/// The prefix of a pre-drain hook's annotation; the owner follows the slash.
pub const PRE_DRAIN_HOOK_PREFIX: &str = "pre-drain.hook.nodemaintenance.medik8s.io/";
/// The domain every annotation of ours ends in before its slash: an annotation under a
/// subdomain of it that is not [`PRE_DRAIN_HOOK_PREFIX`] is a typo of a hook
/// (`pre-drain.hooks.…`, `predrain.hook.…`); any other domain is not ours to judge.
const DOMAIN: &str = "nodemaintenance.medik8s.io";
/// What is accepted under a subdomain of [`DOMAIN`].
pub(crate) const HOOKS_ACCEPTED: &str =
    "pre-drain.hook.nodemaintenance.medik8s.io/<owner>, the owner not empty";

/// The owners of the pre-drain hooks on `nm` (the text after [`PRE_DRAIN_HOOK_PREFIX`]), in
/// name order. An empty owner (refused by the webhook, and by the API server's own annotation
/// rules) is listed as `""`: a hook that cannot be named still holds, never lets the drain go.
pub fn owners(nm: &NodeMaintenance) -> Vec<String> {
    nm.annotations()
        .keys()
        .filter_map(|k| k.strip_prefix(PRE_DRAIN_HOOK_PREFIX))
        .map(str::to_owned)
        .collect()
}

/// The annotations of `nm` under a subdomain of `nodemaintenance.medik8s.io` that are refused,
/// with why, in name order: a hook with an empty owner, and any other prefix ending in
/// `.nodemaintenance.medik8s.io` (a near-miss of [`PRE_DRAIN_HOOK_PREFIX`], which would
/// otherwise be ignored and the drain go ahead unheld). `nodemaintenance.medik8s.io/` itself is
/// the knobs' group ([`super::strict::unknown_annotations`]).
pub(crate) fn refused(nm: &NodeMaintenance) -> Vec<(&String, &String, String)> {
    let subdomain = format!(".{DOMAIN}");
    nm.annotations()
        .iter()
        .filter_map(|(k, v)| {
            let why = match k.strip_prefix(PRE_DRAIN_HOOK_PREFIX) {
                Some("") => {
                    format!("{k}: a pre-drain hook's owner is empty (nothing after the slash)")
                }
                Some(_) => return None,
                None if k
                    .split_once('/')
                    .is_some_and(|(p, _)| p.ends_with(&subdomain)) =>
                {
                    format!(
                        "{k}: unknown annotation under {DOMAIN} (a pre-drain hook is \
                         {PRE_DRAIN_HOOK_PREFIX}<owner>)"
                    )
                }
                None => return None,
            };
            Some((k, v, why))
        })
        .collect()
}

/// The hooks `new` carries that `old` did not, by owner in name order: what an UPDATE adds.
pub(crate) fn added(old: &NodeMaintenance, new: &NodeMaintenance) -> Vec<String> {
    let before = owners(old);
    owners(new)
        .into_iter()
        .filter(|o| !before.contains(o))
        .collect()
}

/// The webhook's rule for an UPDATE that `added` hooks (by owner, [`added`]): refused once the
/// drain started (`started`: the start recorded on the node for this maintenance, the API
/// server's time, whole seconds), since a hook holds what comes before the first eviction and
/// the evictions are already under way; hooks present from before stay, and removing one is
/// always allowed.
///
/// # Errors
/// The denial's text, naming the first annotation added and the start.
pub(crate) fn may_add(added: &[String], started: Option<jiff::Timestamp>) -> Result<(), String> {
    match (added.first(), started) {
        (Some(owner), Some(at)) => Err(format!(
            "{PRE_DRAIN_HOOK_PREFIX}{owner}: a pre-drain hook cannot be added once the drain has \
             started (at {at}, the node's {}): the evictions are under way; add hooks when \
             creating the maintenance, or while it stays short of its drain (stage Cordon)",
            crate::api::DRAIN_STARTED_ANNOTATION
        )),
        _ => Ok(()),
    }
}

/// The hooks as the status and the denial name them: `"rook-ceph", "backup"` quoted in name
/// order.
pub(crate) fn named(owners: &[String]) -> String {
    owners
        .iter()
        .map(|o| format!("{o:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nm(annotations: &[(&str, &str)]) -> NodeMaintenance {
        let mut nm = NodeMaintenance::new("nm", Default::default());
        nm.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        nm
    }

    #[test]
    fn hooks_are_read_by_owner_and_near_misses_in_our_domain_are_refused_by_name() {
        let hooked = nm(&[
            ("pre-drain.hook.nodemaintenance.medik8s.io/rook-ceph", ""),
            ("pre-drain.hook.nodemaintenance.medik8s.io/backup", "x"),
            ("nodemaintenance.medik8s.io/paused", "false"),
            ("pre-drain.delete.hook.machine.cluster.x-k8s.io/capi", ""),
        ]);
        assert_eq!(owners(&hooked), ["backup", "rook-ceph"]);
        assert!(refused(&hooked).is_empty());
        assert_eq!(owners(&nm(&[])), Vec::<String>::new());
        // Typos within our domain are named; other domains are not ours to judge.
        let typos = nm(&[
            ("pre-drain.hooks.nodemaintenance.medik8s.io/x", ""),
            ("predrain.hook.nodemaintenance.medik8s.io/y", ""),
            ("pre-drain.hook.nodemaintenance.medik8s.io/", ""),
            ("pre-drain.hook.example.com/z", ""),
            ("xnodemaintenance.medik8s.io/w", ""),
        ]);
        let names: Vec<&str> = refused(&typos).iter().map(|(k, _, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "pre-drain.hook.nodemaintenance.medik8s.io/",
                "pre-drain.hooks.nodemaintenance.medik8s.io/x",
                "predrain.hook.nodemaintenance.medik8s.io/y",
            ]
        );
        let why: Vec<String> = refused(&typos).into_iter().map(|(_, _, w)| w).collect();
        assert!(why[0].contains("owner is empty"), "{why:?}");
        assert!(why[1].starts_with("pre-drain.hooks.nodemaintenance.medik8s.io/x: unknown"));
        // The empty owner still holds: it is a hook, only unnamed.
        assert_eq!(owners(&typos), [""]);
    }

    #[test]
    fn an_update_adds_the_hooks_the_old_object_did_not_carry() {
        let old = nm(&[("pre-drain.hook.nodemaintenance.medik8s.io/a", "")]);
        let new = nm(&[
            ("pre-drain.hook.nodemaintenance.medik8s.io/a", "changed"),
            ("pre-drain.hook.nodemaintenance.medik8s.io/b", ""),
        ]);
        assert_eq!(added(&old, &new), ["b"]);
        assert!(added(&new, &old).is_empty(), "a removal adds nothing");
        assert!(added(&new, &new).is_empty());
        assert_eq!(named(&owners(&new)), "\"a\", \"b\"");
        // Before the drain started anything may be added; after, an addition is refused by
        // name, while keeping or removing hooks stays allowed.
        let at: jiff::Timestamp = "2026-12-05T04:00:00Z".parse().unwrap();
        assert_eq!(may_add(&added(&old, &new), None), Ok(()));
        let denied = may_add(&added(&old, &new), Some(at)).unwrap_err();
        assert!(
            denied.starts_with(
                "pre-drain.hook.nodemaintenance.medik8s.io/b: a pre-drain hook \
                                cannot be added once the drain has started (at 2026-12-05T04:00:00Z"
            ),
            "{denied}"
        );
        assert_eq!(may_add(&added(&new, &old), Some(at)), Ok(()));
        assert_eq!(may_add(&added(&new, &new), Some(at)), Ok(()));
    }
}

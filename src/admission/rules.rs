//! The pure admission rules: upstream's CREATE and UPDATE checks and their denial texts.

use crate::api::{NodeMaintenance, NodeNameError};

/// Why a NodeMaintenance is not admitted. The display text is the denial message returned with
/// code 403 (kubectl prints `admission webhook "vnodemaintenance.kb.io" denied the request:
/// <text>`). Every text and how it relates to upstream's is listed in `docs/compat.md §6`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Denial {
    /// CREATE for a node that does not exist (upstream check 1, exact text).
    #[error("invalid nodeName, no node with name {0} found")]
    NodeNotFound(String),
    /// Another NodeMaintenance already targets the node (upstream check 2, exact text).
    #[error("invalid nodeName, a NodeMaintenance for node {0} already exists")]
    AlreadyExists(String),
    /// The node hosts an etcd member whose loss would break quorum (upstream check 3, exact text).
    #[error(
        "can not put master/control-plane node into maintenance at this moment, disrupting node {0} will violate etcd quorum"
    )]
    EtcdQuorum(String),
    /// UPDATE changing `spec.nodeName` (upstream's UPDATE check, exact text).
    #[error("updating spec.NodeName isn't allowed")]
    NodeNameChanged,
    /// The live lookup of a node missing from the cache failed for a reason other than NotFound
    /// (upstream check 1e, exact prefix).
    #[error(
        "could not get node for validating spec.NodeName, please try again: could not get node: {0}"
    )]
    NodeLookup(String),
    /// The watch caches have not synced yet, so there is nothing to decide from (upstream's
    /// check 2e prefix; upstream's cached client waits for its own sync the same way).
    #[error(
        "could not list NodeMaintenances for validating spec.NodeName, please try again: the webhook's watch caches have not synced yet"
    )]
    NotSynced,
    /// The etcd guard budget's selector cannot be evaluated (upstream returns the raw error).
    #[error("could not check the etcd quorum for node {node}, please try again: {error}")]
    QuorumLookup {
        /// The node.
        node: String,
        /// Why the check could not be made.
        error: String,
    },
    /// `spec.nodeName` is empty: no node has that name. Upstream's text, then why.
    #[error("invalid nodeName, no node with name  found (spec.nodeName is empty)")]
    EmptyNodeName,
    /// `spec.nodeName` is not a DNS-1123 subdomain, so no Node can have that name. Upstream's
    /// text, then why.
    #[error(
        "invalid nodeName, no node with name {0} found (a node name is a lowercase DNS-1123 subdomain)"
    )]
    MalformedNodeName(String),
    /// A drain knob's annotation has a value the operator refuses (ours, `crate::policy`).
    #[error("{0}")]
    InvalidKnob(String),
    /// An UPDATE adds a pre-drain hook after the drain started (ours,
    /// `crate::policy::pre_drain_hooks::may_add`).
    #[error("{0}")]
    HookAfterDrainStart(String),
    /// Whether the drain started could not be read for an UPDATE that adds a pre-drain hook.
    #[error(
        "could not check whether the drain started, for the pre-drain hook added, please try again: {0}"
    )]
    DrainStartLookup(String),
    /// `onTimeout: ForceDelete` asked while the operator's ServiceAccount may not delete pods
    /// (ours; its SelfSubjectAccessReview said so).
    #[error(
        "onTimeout ForceDelete needs the operator's ServiceAccount to be allowed to delete pods, \
         and it is not: apply manifests/overlays/force-delete (or the chart value \
         forceDelete.enabled=true), or choose Wait, Fail, SkipStuck or Abort"
    )]
    ForceDeleteNotPermitted,
    /// The SelfSubjectAccessReview behind [`Denial::ForceDeleteNotPermitted`] failed.
    #[error(
        "could not check whether the operator may delete pods for onTimeout ForceDelete, please try again: {0}"
    )]
    PermissionLookup(String),
    /// The review carried no object to validate.
    #[error("the admission request has no {0} to validate")]
    MissingObject(&'static str),
}

/// Checks that `name` can be a Node name ([`crate::api::validate_node_name`], the rule the
/// controller applies too). A name that cannot be a node's is answered like a missing node,
/// with upstream's text first (`docs/compat.md §6`).
///
/// # Errors
/// [`Denial::EmptyNodeName`] or [`Denial::MalformedNodeName`].
pub(crate) fn validate_node_name(name: &str) -> Result<(), Denial> {
    match crate::api::validate_node_name(name) {
        Ok(()) => Ok(()),
        Err(NodeNameError::Empty) => Err(Denial::EmptyNodeName),
        Err(NodeNameError::TooLong | NodeNameError::Malformed) => {
            Err(Denial::MalformedNodeName(name.to_string()))
        }
    }
}

/// What the CREATE decision needs to know, observed in upstream's order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct CreateFacts {
    /// A Node named `spec.nodeName` exists.
    pub node_exists: bool,
    /// Another NodeMaintenance targets the node (cached, or admitted and not yet cached).
    pub already_maintained: bool,
    /// Putting the node into maintenance keeps etcd quorum (true for non-members).
    pub quorum_safe: bool,
}

/// Decides a CREATE: valid name, node exists, no other NodeMaintenance for the node, etcd quorum
/// kept; the first failing check wins (upstream's order, `docs/compat.md §6`).
///
/// # Errors
/// The [`Denial`] of the first failing check.
pub(crate) fn validate_create(nm: &NodeMaintenance, facts: &CreateFacts) -> Result<(), Denial> {
    let node = nm.spec.node_name.as_str();
    validate_node_name(node)?;
    if !facts.node_exists {
        return Err(Denial::NodeNotFound(node.to_string()));
    }
    if facts.already_maintained {
        return Err(Denial::AlreadyExists(node.to_string()));
    }
    if !facts.quorum_safe {
        return Err(Denial::EtcdQuorum(node.to_string()));
    }
    validate_knobs(nm)
}

/// Refuses a drain knob's annotation of a value the operator does not accept, naming the knob and
/// the accepted values (`docs/drain-contract.md` §10); without the webhook, the controller says
/// the same in status and applies the default.
///
/// # Errors
/// [`Denial::InvalidKnob`].
pub(crate) fn validate_knobs(nm: &NodeMaintenance) -> Result<(), Denial> {
    let (_, invalid) = crate::policy::resolve(nm, &crate::policy::Defaults::default());
    match invalid.first() {
        Some(knob) => Err(Denial::InvalidKnob(knob.to_string())),
        None => Ok(()),
    }
}

/// Decides an UPDATE: `spec.nodeName` is immutable; reason, metadata and finalizer edits are
/// allowed (`docs/compat.md §6`); a drain knob's annotation set to a refused value is denied.
/// Reads nothing but the two objects.
///
/// # Errors
/// [`Denial::NodeNameChanged`], [`Denial::InvalidKnob`].
pub(crate) fn validate_update(old: &NodeMaintenance, new: &NodeMaintenance) -> Result<(), Denial> {
    if old.spec.node_name != new.spec.node_name {
        return Err(Denial::NodeNameChanged);
    }
    // Only a value being set is judged: an object that already carries a refused value (written
    // while the webhook was away) must still take the controller's own writes, its finalizer's
    // removal included.
    let defaults = crate::policy::Defaults::default();
    let (_, before) = crate::policy::resolve(old, &defaults);
    let (_, after) = crate::policy::resolve(new, &defaults);
    match after.into_iter().find(|k| !before.contains(k)) {
        Some(knob) => Err(Denial::InvalidKnob(knob.to_string())),
        None => Ok(()),
    }
}

/// Whether admitting `new` (over `old`, for an UPDATE) newly asks `onTimeout: ForceDelete` of
/// its own (annotation or spec; the operator's flag is not the object's request), so the webhook
/// must check that the operator may delete pods.
pub(crate) fn asks_force_delete(old: Option<&NodeMaintenance>, new: &NodeMaintenance) -> bool {
    let defaults = crate::policy::Defaults::default();
    let asks = |nm: &NodeMaintenance| {
        crate::policy::resolve(nm, &defaults).0.on_timeout == crate::api::OnTimeout::ForceDelete
    };
    asks(new) && !old.is_some_and(asks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NodeMaintenanceSpec;

    fn nm(name: &str, node: &str) -> NodeMaintenance {
        let mut nm = NodeMaintenance::new(
            name,
            NodeMaintenanceSpec {
                node_name: node.into(),
                reason: None,
                ..Default::default()
            },
        );
        nm.metadata.uid = Some("uid".into());
        nm
    }

    fn facts(node_exists: bool, already_maintained: bool, quorum_safe: bool) -> CreateFacts {
        CreateFacts {
            node_exists,
            already_maintained,
            quorum_safe,
        }
    }

    #[test]
    fn create_denials_use_upstreams_exact_strings_in_order() {
        let m = nm("nm-1", "node-a");
        assert_eq!(
            validate_create(&m, &facts(false, true, false))
                .unwrap_err()
                .to_string(),
            "invalid nodeName, no node with name node-a found"
        );
        assert_eq!(
            validate_create(&m, &facts(true, true, false))
                .unwrap_err()
                .to_string(),
            "invalid nodeName, a NodeMaintenance for node node-a already exists"
        );
        assert_eq!(
            validate_create(&m, &facts(true, false, false))
                .unwrap_err()
                .to_string(),
            "can not put master/control-plane node into maintenance at this moment, disrupting node node-a will violate etcd quorum"
        );
        assert_eq!(validate_create(&m, &facts(true, false, true)), Ok(()));
    }

    #[test]
    fn update_only_refuses_a_node_name_change() {
        let old = nm("nm-1", "node-a");
        let mut new = old.clone();
        new.spec.reason = Some("kernel upgrade".into());
        new.metadata.finalizers = Some(vec!["foregroundDeleteNodeMaintenance".into()]);
        assert_eq!(validate_update(&old, &new), Ok(()));
        new.spec.node_name = "new-node-name".into();
        assert_eq!(
            validate_update(&old, &new).unwrap_err().to_string(),
            "updating spec.NodeName isn't allowed"
        );
    }

    #[test]
    fn a_refused_knob_value_is_denied_when_set_and_an_existing_one_blocks_no_write() {
        use kube::ResourceExt;
        let paused = |value: &str| {
            let mut m = nm("nm-1", "node-a");
            m.annotations_mut()
                .insert(crate::policy::PAUSED_ANNOTATION.into(), value.into());
            m
        };
        let denied = validate_create(&paused("yes"), &facts(true, false, true)).unwrap_err();
        assert_eq!(
            denied.to_string(),
            "nodemaintenance.medik8s.io/paused has the invalid value \"yes\" for the knob paused \
             (accepted: true, false)"
        );
        assert_eq!(
            validate_create(&paused("true"), &facts(true, false, true)),
            Ok(())
        );
        // Set by an UPDATE: denied; already there (the webhook was away): the controller's
        // finalizer removal still goes through.
        assert!(validate_update(&paused("true"), &paused("maybe")).is_err());
        let mut done = paused("maybe");
        done.metadata.finalizers = None;
        assert_eq!(validate_update(&paused("maybe"), &done), Ok(()));
    }

    #[test]
    fn names_no_node_can_have_get_upstreams_not_found_text_first() {
        let err = validate_create(&nm("x", ""), &facts(true, false, true)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid nodeName, no node with name  found (spec.nodeName is empty)"
        );
        // Upstream's own end-to-end input: upper case, so not a DNS-1123 name.
        assert_eq!(
            validate_node_name("doesNotExist").unwrap_err().to_string(),
            "invalid nodeName, no node with name doesNotExist found (a node name is a lowercase DNS-1123 subdomain)"
        );
        for bad in [
            "Node-A",
            "node_a",
            "-node",
            "node-",
            "a..b",
            ".a",
            &"a".repeat(254),
        ] {
            let err = validate_node_name(bad).unwrap_err();
            assert!(
                err.to_string()
                    .starts_with(&format!("invalid nodeName, no node with name {bad} found")),
                "{bad}: {err}"
            );
        }
        for good in [
            "node-a",
            "ip-10-0-0-1.ec2.internal",
            "a",
            "0",
            &"a".repeat(63),
        ] {
            assert_eq!(validate_node_name(good), Ok(()), "{good}");
        }
    }

    #[test]
    fn force_delete_is_checked_when_newly_asked_and_a_bad_deadline_is_refused() {
        use crate::api::OnTimeout;
        use kube::ResourceExt;
        let plain = nm("nm", "n1");
        let mut asks = plain.clone();
        asks.spec.knobs.on_timeout = Some(OnTimeout::ForceDelete);
        let mut by_annotation = plain.clone();
        by_annotation.annotations_mut().insert(
            crate::policy::ON_TIMEOUT_ANNOTATION.into(),
            "ForceDelete".into(),
        );
        assert!(asks_force_delete(None, &asks));
        assert!(asks_force_delete(None, &by_annotation));
        assert!(asks_force_delete(Some(&plain), &by_annotation));
        assert!(!asks_force_delete(None, &plain));
        // Already asked: the controller's own writes are not checked again.
        assert!(!asks_force_delete(Some(&asks), &asks));
        let mut bad = plain.clone();
        bad.spec.knobs.drain_timeout = Some("10 parsecs".into());
        let denied = validate_update(&plain, &bad).unwrap_err();
        assert!(denied.to_string().contains("spec.drainTimeout"), "{denied}");
        assert_eq!(validate_update(&bad, &bad), Ok(()));
    }
}

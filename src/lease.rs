//! The medik8s per-node lease: `coordination.k8s.io/v1` Lease `node-<node>` in the lease
//! namespace (default `medik8s-leases`), held by `node-maintenance` for 3600 s while a node is in
//! maintenance. NHC and SNR use the same lease name and namespace, so a valid lease held by them
//! means "remediation in progress" and blocks maintenance, and ours blocks remediation
//! (docs/compat.md §3).
//!
//! Semantics mirror medik8s `common` `pkg/lease` (`RequestLease`, `InvalidateLease`) with two
//! changes: a valid lease of ours is renewed only when less than 3/4 of [`LEASE_DURATION`] remains
//! (upstream renews on every call), so a reconcile every few minutes renews well before expiry
//! without writing on every pass; and another holder's lease renewed "in the future" (clock
//! skew) is respected, not taken over ([`is_valid`]; docs/compat.md §3).
//!
//! Everything but the reads of [`NodeLeases`] is pure: [`request`] and [`invalidation`] turn the
//! lease as read into the complete write (create, replace with its resourceVersion, delete with
//! its uid and resourceVersion) that the controller's executor sends; a write that meets a
//! concurrent one fails its precondition and the next pass reads the lease again.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::Client;
use kube::api::Api;

/// `spec.holderIdentity` of our leases (upstream NMO's identity).
pub(crate) const LEASE_HOLDER: &str = "node-maintenance";
/// `spec.leaseDurationSeconds` of our leases: 3600 s.
pub(crate) const LEASE_DURATION: Duration = Duration::from_secs(3600);
/// Lease namespace when `--lease-namespace`/`LEASE_NAMESPACE` is unset or empty (medik8s
/// default; parsed by [`crate::config::parse_lease_namespace`]).
pub(crate) const DEFAULT_LEASE_NAMESPACE: &str = "medik8s-leases";
/// A valid lease of ours is renewed once this much of [`LEASE_DURATION`] has elapsed since its
/// last renewal (900 s, i.e. when less than 3/4 of the duration remains). Callers should reconcile
/// a node in maintenance at least this often.
pub(crate) const RENEW_AFTER: Duration = Duration::from_secs(LEASE_DURATION.as_secs() / 4);

/// The lease name for `node`: lower-cased `node-<node>`, as medik8s names it (`<kind>-<name>`).
pub(crate) fn lease_name(node: &str) -> String {
    format!("node-{node}").to_lowercase()
}

/// Longest object name the API server accepts for a Lease (a DNS-1123 subdomain): 253.
pub(crate) const MAX_LEASE_NAME: usize = 253;
/// Longest node name whose lease name `node-<node>` fits in [`MAX_LEASE_NAME`]: 248.
pub(crate) const MAX_LEASED_NODE_NAME: usize = MAX_LEASE_NAME - "node-".len();

/// Why `node` (a valid Node name, up to 253 characters) cannot have a medik8s lease, if it
/// cannot: its lease name `node-<node>` would be longer than [`MAX_LEASE_NAME`], so every create
/// is refused with 422. medik8s common derives the name the same way and has no other, so
/// NodeHealthCheck and Self Node Remediation can hold no lease for such a node either; a name
/// derived otherwise (shortened, hashed) is one no peer would look for, and maintaining the node
/// under it would let a remediation run during the drain. Such a node is therefore not
/// maintained: the NodeMaintenance fails with this text and nothing is touched
/// (`docs/drain-contract.md` §7).
pub(crate) fn lease_name_error(node: &str) -> Option<String> {
    let len = "node-".len() + node.len();
    (len > MAX_LEASE_NAME).then(|| {
        format!(
            "its medik8s lease name node-<nodeName> would have {len} characters, more than the \
             {MAX_LEASE_NAME} a Lease name may have (node names of at most \
             {MAX_LEASED_NODE_NAME} characters can be leased), so NodeHealthCheck and Self Node \
             Remediation could not see the maintenance"
        )
    })
}

/// Whether `lease` exists and its holder is us (`node-maintenance`), whatever its times.
pub(crate) fn held_by_us(lease: Option<&Lease>) -> bool {
    lease
        .and_then(|l| l.spec.as_ref())
        .and_then(|s| s.holder_identity.as_deref())
        == Some(LEASE_HOLDER)
}

/// What a lease request stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LeaseOutcome {
    /// Our lease was updated: renewed, re-armed after expiry, or completed (missing renew time or
    /// duration).
    Renewed,
    /// A lapsed lease of another holder (e.g. NHC) was taken over; `leaseTransitions` +1.
    TakenOver,
}

/// What [`plan_request`] decided.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum LeasePlan {
    /// Create the lease with this spec.
    Create(LeaseSpec),
    /// Replace the existing lease's spec with `spec` (owner references are set by the caller).
    Update {
        /// The full new spec.
        spec: LeaseSpec,
        /// [`LeaseOutcome::Renewed`] or [`LeaseOutcome::TakenOver`].
        outcome: LeaseOutcome,
    },
    /// Ours, valid and not due: no write.
    Current,
    /// Held by another identity and valid (`unknown` when the holder is unset).
    AlreadyHeld {
        /// The other holder's identity.
        holder: String,
    },
}

/// Whether another holder's lease spec still holds the node at `now`: it has a renew time and a
/// duration, and `renewTime + duration` is not in the past (`docs/drain-contract.md` §8).
///
/// A `renewTime` in the future counts as held: the holder's clock runs ahead of ours (skew), and
/// by its clock the lease was renewed just now. It stays held until `renewTime` is in the past
/// by more than the duration, so the lease is valid by either clock. medik8s common's
/// `isValidLease` also calls a lease renewed in the future invalid, so upstream (and a peer on
/// a slower clock) takes over a lease its holder renewed a moment ago: the node is drained
/// under a remediation. Ours deliberately differs (`docs/compat.md` §3).
pub(crate) fn is_valid(spec: &LeaseSpec, now: Timestamp) -> bool {
    match (&spec.renew_time, spec.lease_duration_seconds) {
        (Some(MicroTime(renew)), Some(seconds)) => expiry(*renew, seconds) >= now,
        _ => false,
    }
}

/// Decides what requesting the lease means given the lease found (`None`: no lease) at `now`.
///
/// medik8s common's `RequestLease` table (docs/compat.md §3):
/// - no lease: create (holder, 3600 s, acquire = renew = now, transitions 0);
/// - ours with renew time or duration unset: update and set acquire time and transitions +1;
/// - ours and lapsed (`renew + duration < now`): update; acquire time and transitions +1 only if
///   the acquire time was unset;
/// - ours and valid: update only when the lease expires before `now + 3/4 × 3600 s` (our change,
///   see the module doc) or its renew time lies in the future (others would consider it invalid);
///   otherwise [`LeasePlan::Current`];
/// - another holder's, valid by [`is_valid`] (a renew time in the future counts as held; upstream
///   takes such a lease over): [`LeasePlan::AlreadyHeld`];
/// - another holder's, lapsed: take over (acquire = now, transitions +1 or 1).
///
/// Every update sets holder `node-maintenance`, duration 3600 and `renewTime = now`.
pub(crate) fn plan_request(existing: Option<&Lease>, now: Timestamp) -> LeasePlan {
    let Some(lease) = existing else {
        return LeasePlan::Create(LeaseSpec {
            holder_identity: Some(LEASE_HOLDER.to_owned()),
            lease_duration_seconds: Some(duration_seconds()),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(0),
            ..LeaseSpec::default()
        });
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let ours = spec.holder_identity.as_deref() == Some(LEASE_HOLDER);
    let (set_acquire, outcome) = if ours {
        match (&spec.renew_time, spec.lease_duration_seconds) {
            (Some(MicroTime(renew)), Some(seconds)) => {
                let expires = expiry(*renew, seconds);
                if expires < now {
                    (spec.acquire_time.is_none(), LeaseOutcome::Renewed)
                } else if *renew > now || expires < now + renewal_window() {
                    (false, LeaseOutcome::Renewed)
                } else {
                    return LeasePlan::Current;
                }
            }
            _ => (true, LeaseOutcome::Renewed),
        }
    } else if is_valid(&spec, now) {
        return LeasePlan::AlreadyHeld {
            holder: spec.holder_identity.unwrap_or_else(|| "unknown".to_owned()),
        };
    } else {
        (true, LeaseOutcome::TakenOver)
    };
    let mut spec = spec;
    if set_acquire {
        spec.acquire_time = Some(MicroTime(now));
        spec.lease_transitions = Some(spec.lease_transitions.map_or(1, |t| t.saturating_add(1)));
    }
    spec.holder_identity = Some(LEASE_HOLDER.to_owned());
    spec.lease_duration_seconds = Some(duration_seconds());
    spec.renew_time = Some(MicroTime(now));
    LeasePlan::Update { spec, outcome }
}

/// The write that requesting `node`'s lease (found as `existing`) at `now` needs, following
/// [`plan_request`]. `node_uid` (the Node's `metadata.uid`) makes the Node the lease's owner so
/// the lease is garbage-collected with it; `None` keeps existing owner references.
pub(crate) fn request(
    node: &str,
    node_uid: Option<&str>,
    existing: Option<&Lease>,
    now: Timestamp,
) -> LeaseRequest {
    match plan_request(existing, now) {
        LeasePlan::Current => LeaseRequest::Current,
        LeasePlan::AlreadyHeld { holder } => LeaseRequest::AlreadyHeld { holder },
        LeasePlan::Update { spec, .. } => {
            let mut lease = existing.cloned().unwrap_or_default();
            if let Some(owner) = node_owner(node, node_uid) {
                lease.metadata.owner_references = Some(vec![owner]);
            }
            lease.spec = Some(spec);
            LeaseRequest::Replace(Box::new(lease))
        }
        LeasePlan::Create(spec) => LeaseRequest::Create(Box::new(Lease {
            metadata: ObjectMeta {
                name: Some(lease_name(node)),
                owner_references: node_owner(node, node_uid).map(|o| vec![o]),
                ..ObjectMeta::default()
            },
            spec: Some(spec),
        })),
    }
}

/// What [`request`] decided: the lease to create or to put in place of the one read (its
/// resourceVersion is the replace's precondition), or why nothing is written.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum LeaseRequest {
    /// Create this lease.
    Create(Box<Lease>),
    /// Replace the lease read with this one.
    Replace(Box<Lease>),
    /// Ours, valid and not due: no write.
    Current,
    /// Held by another identity and valid.
    AlreadyHeld {
        /// The other holder's identity (`unknown` when unset).
        holder: String,
    },
}

/// What giving up a lease (upstream's `InvalidateLease`) means for the lease read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Invalidation {
    /// There is none: nothing to do.
    Nothing,
    /// Another identity holds it (a remediation): left alone, as upstream does on stop.
    HeldByOther(String),
    /// Ours: delete it, preconditioned on the uid and resourceVersion read, so a lease taken
    /// over in between stays.
    Delete {
        /// Its name.
        name: String,
        /// Its `metadata.uid`.
        uid: Option<String>,
        /// Its `metadata.resourceVersion`.
        resource_version: Option<String>,
    },
}

/// Decides how to give up `lease` (as read; `None`: there is none).
pub(crate) fn invalidation(lease: Option<&Lease>) -> Invalidation {
    let Some(lease) = lease else {
        return Invalidation::Nothing;
    };
    if let Some(holder) = lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| *h != LEASE_HOLDER)
    {
        return Invalidation::HeldByOther(holder.to_owned());
    }
    Invalidation::Delete {
        name: lease.metadata.name.clone().unwrap_or_default(),
        uid: lease.metadata.uid.clone(),
        resource_version: lease.metadata.resource_version.clone(),
    }
}

fn duration_seconds() -> i32 {
    LEASE_DURATION.as_secs() as i32
}

/// 3/4 of the requested duration: a valid lease of ours expiring sooner than this is renewed.
fn renewal_window() -> SignedDuration {
    SignedDuration::from_secs((LEASE_DURATION - RENEW_AFTER).as_secs() as i64)
}

fn expiry(renew: Timestamp, seconds: i32) -> Timestamp {
    let bound = if seconds >= 0 {
        Timestamp::MAX
    } else {
        Timestamp::MIN
    };
    renew
        .saturating_add(SignedDuration::from_secs(i64::from(seconds)))
        .unwrap_or(bound)
}

/// Errors of [`NodeLeases`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum LeaseError {
    /// Another identity holds a valid lease (request) or holds the lease at all (invalidate).
    /// Text is medik8s common's `AlreadyHeldError`, which NMO embeds in its `lastError`.
    #[error("can't update or invalidate the lease because it is held by different owner: {holder}")]
    AlreadyHeld {
        /// The other holder's identity (`unknown` when unset).
        holder: String,
    },
    /// Reading the lease namespace failed (upstream's wrap text).
    #[error("couldn't get lease namespace: {0}")]
    GetNamespace(#[source] kube::Error),
    /// Creating the missing lease namespace failed (upstream's wrap text).
    #[error("couldn't create lease namespace: {0}")]
    CreateNamespace(#[source] kube::Error),
    /// Any other API error on the lease (including a 409 Conflict on replace or delete); raw
    /// text, as upstream reports it.
    #[error("{0}")]
    Api(#[source] kube::Error),
}

/// Reads the per-node medik8s leases of one namespace; every write is planned ([`request`],
/// [`invalidation`]) and sent by the controller's executor through [`NodeLeases::api`].
#[derive(Clone)]
pub(crate) struct NodeLeases {
    client: Client,
    namespace: String,
}

impl NodeLeases {
    /// Leases live in `namespace` (`--lease-namespace`, [`crate::config::Config::lease_namespace`]). No I/O until the first request.
    pub(crate) fn new(client: Client, namespace: String) -> Self {
        Self { client, namespace }
    }

    /// Reads the lease of `node` (`None`: there is none, also when its namespace is missing),
    /// without writing anything.
    ///
    /// # Errors
    /// [`LeaseError::Api`] when the read fails.
    pub(crate) async fn get(&self, node: &str) -> Result<Option<Lease>, LeaseError> {
        match self.api().get_opt(&lease_name(node)).await {
            Ok(l) => Ok(l),
            Err(kube::Error::Api(s)) if s.is_not_found() => Ok(None),
            Err(e) => Err(LeaseError::Api(e)),
        }
    }

    /// Whether the lease namespace exists (medik8s common creates it when missing).
    ///
    /// # Errors
    /// [`LeaseError::GetNamespace`] when the read fails.
    pub(crate) async fn namespace_exists(&self) -> Result<bool, LeaseError> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let found = api
            .get_metadata_opt(&self.namespace)
            .await
            .map_err(LeaseError::GetNamespace)?;
        Ok(found.is_some())
    }

    /// The namespace's name.
    pub(crate) fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The leases of the namespace.
    pub(crate) fn api(&self) -> Api<Lease> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }
}

/// `[{apiVersion: v1, kind: Node, name, uid}]`: the Node owns the lease (GC'd with it).
fn node_owner(node: &str, uid: Option<&str>) -> Option<OwnerReference> {
    uid.map(|uid| OwnerReference {
        api_version: "v1".to_owned(),
        kind: "Node".to_owned(),
        name: node.to_owned(),
        uid: uid.to_owned(),
        ..OwnerReference::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).unwrap()
    }

    const NOW: i64 = 10_000;

    fn lease(
        holder: Option<&str>,
        renew: Option<i64>,
        duration: Option<i32>,
        acquire: Option<i64>,
        transitions: Option<i32>,
    ) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some("node-worker-1".into()),
                resource_version: Some("7".into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                renew_time: renew.map(|s| MicroTime(t(s))),
                lease_duration_seconds: duration,
                acquire_time: acquire.map(|s| MicroTime(t(s))),
                lease_transitions: transitions,
                ..LeaseSpec::default()
            }),
        }
    }

    fn update(plan: LeasePlan) -> (LeaseSpec, LeaseOutcome) {
        match plan {
            LeasePlan::Update { spec, outcome } => (spec, outcome),
            other => panic!("expected Update, got {other:?}"),
        }
    }

    /// The fields every update writes: holder, 3600 s and renewTime = now.
    fn assert_refreshed(spec: &LeaseSpec) {
        assert_eq!(spec.holder_identity.as_deref(), Some(LEASE_HOLDER));
        assert_eq!(spec.lease_duration_seconds, Some(3600));
        assert_eq!(spec.renew_time, Some(MicroTime(t(NOW))));
    }

    #[test]
    fn create_a_new_lease() {
        let LeasePlan::Create(spec) = plan_request(None, t(NOW)) else {
            panic!("expected Create");
        };
        assert_eq!(
            spec,
            LeaseSpec {
                holder_identity: Some("node-maintenance".into()),
                lease_duration_seconds: Some(3600),
                acquire_time: Some(MicroTime(t(NOW))),
                renew_time: Some(MicroTime(t(NOW))),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }
        );
    }

    #[test]
    fn fail_to_update_a_valid_lease_with_a_different_holder() {
        let nhc = lease(
            Some("NodeHealthCheck-nhc"),
            Some(NOW - 10),
            Some(360),
            Some(NOW - 10),
            Some(0),
        );
        assert_eq!(
            plan_request(Some(&nhc), t(NOW)),
            LeasePlan::AlreadyHeld {
                holder: "NodeHealthCheck-nhc".into()
            }
        );
        let anonymous = lease(None, Some(NOW - 10), Some(360), None, None);
        assert_eq!(
            plan_request(Some(&anonymous), t(NOW)),
            LeasePlan::AlreadyHeld {
                holder: "unknown".into()
            }
        );
        let text = LeaseError::AlreadyHeld {
            holder: "NodeHealthCheck-nhc".into(),
        }
        .to_string();
        assert_eq!(
            text,
            "can't update or invalidate the lease because it is held by different owner: NodeHealthCheck-nhc"
        );
    }

    #[test]
    fn take_over_a_foreign_lease_with_full_init() {
        // Nothing but a holder: invalid (no renew time, no duration), so taken over.
        let bare = lease(Some("other"), None, None, None, None);
        let (spec, outcome) = update(plan_request(Some(&bare), t(NOW)));
        assert_eq!(outcome, LeaseOutcome::TakenOver);
        assert_refreshed(&spec);
        assert_eq!(spec.acquire_time, Some(MicroTime(t(NOW))));
        assert_eq!(spec.lease_transitions, Some(1));
    }

    #[test]
    fn expired_foreign_lease_is_taken_over_with_a_transition() {
        let expired = lease(
            Some("other"),
            Some(NOW - 400),
            Some(300),
            Some(NOW - 900),
            Some(3),
        );
        let (spec, outcome) = update(plan_request(Some(&expired), t(NOW)));
        assert_eq!(outcome, LeaseOutcome::TakenOver);
        assert_refreshed(&spec);
        assert_eq!(spec.acquire_time, Some(MicroTime(t(NOW))));
        assert_eq!(spec.lease_transitions, Some(4));
    }

    #[test]
    fn foreign_lease_renewed_in_the_future_is_held_until_it_lapses_by_our_clock() {
        // NodeHealthCheck's clock runs 120 s ahead of ours: its renewTime is in our future.
        let nhc = |renew: i64, duration: i32| {
            lease(
                Some("NodeHealthCheck-nhc"),
                Some(renew),
                Some(duration),
                Some(renew),
                Some(0),
            )
        };
        let held = LeasePlan::AlreadyHeld {
            holder: "NodeHealthCheck-nhc".into(),
        };
        assert_eq!(plan_request(Some(&nhc(NOW + 120, 360)), t(NOW)), held);
        // Far in the future, and a duration shorter than the skew: still held.
        assert_eq!(plan_request(Some(&nhc(NOW + 7200, 60)), t(NOW)), held);
        // Held until renewTime is in the past by more than the duration.
        assert_eq!(plan_request(Some(&nhc(NOW - 360, 360)), t(NOW)), held);
        let (_, outcome) = update(plan_request(Some(&nhc(NOW - 361, 360)), t(NOW)));
        assert_eq!(outcome, LeaseOutcome::TakenOver);
    }

    #[test]
    fn validity_boundaries() {
        let spec = lease(None, Some(NOW - 100), Some(100), None, None)
            .spec
            .unwrap();
        assert!(
            is_valid(&spec, t(NOW)),
            "expiring exactly now is still valid"
        );
        assert!(!is_valid(&spec, t(NOW + 1)));
        assert!(is_valid(&spec, t(NOW - 100)), "renewed exactly now");
        assert!(
            is_valid(&spec, t(NOW - 101)),
            "renewed in the future: the holder's clock is ahead"
        );
        let no_duration = lease(None, Some(NOW), None, None, None).spec.unwrap();
        assert!(!is_valid(&no_duration, t(NOW)));
    }

    #[test]
    fn own_lease_with_nil_renew_or_duration_is_updated_with_acquire_and_transition() {
        for own in [
            lease(
                Some(LEASE_HOLDER),
                None,
                Some(3600),
                Some(NOW - 50),
                Some(2),
            ),
            lease(
                Some(LEASE_HOLDER),
                Some(NOW - 50),
                None,
                Some(NOW - 50),
                Some(2),
            ),
        ] {
            let (spec, outcome) = update(plan_request(Some(&own), t(NOW)));
            assert_eq!(outcome, LeaseOutcome::Renewed);
            assert_refreshed(&spec);
            assert_eq!(spec.acquire_time, Some(MicroTime(t(NOW))));
            assert_eq!(spec.lease_transitions, Some(3));
        }
    }

    #[test]
    fn own_lease_with_zero_duration_or_zero_renew_time_is_expired_and_extended() {
        let zero_duration = lease(
            Some(LEASE_HOLDER),
            Some(NOW - 1),
            Some(0),
            Some(NOW - 1),
            Some(0),
        );
        let (spec, outcome) = update(plan_request(Some(&zero_duration), t(NOW)));
        assert_eq!(outcome, LeaseOutcome::Renewed);
        assert_refreshed(&spec);
        assert_eq!(
            spec.acquire_time,
            Some(MicroTime(t(NOW - 1))),
            "acquire kept"
        );
        assert_eq!(spec.lease_transitions, Some(0));

        // Go's zero time (year 1) as the renew time.
        let mut zero_renew = lease(Some(LEASE_HOLDER), None, Some(3600), None, None);
        zero_renew.spec.as_mut().unwrap().renew_time =
            Some(MicroTime("0001-01-01T00:00:00Z".parse().unwrap()));
        let (spec, outcome) = update(plan_request(Some(&zero_renew), t(NOW)));
        assert_eq!(outcome, LeaseOutcome::Renewed);
        assert_refreshed(&spec);
        assert_eq!(spec.acquire_time, Some(MicroTime(t(NOW))));
        assert_eq!(spec.lease_transitions, Some(1));
    }

    #[test]
    fn modified_duration_on_an_expired_own_lease_is_reset_to_3600() {
        let short = lease(
            Some(LEASE_HOLDER),
            Some(NOW - 20),
            Some(10),
            Some(NOW - 20),
            Some(1),
        );
        let (spec, outcome) = update(plan_request(Some(&short), t(NOW)));
        assert_eq!(outcome, LeaseOutcome::Renewed);
        assert_refreshed(&spec);
        assert_eq!(spec.lease_transitions, Some(1));
    }

    #[test]
    fn expired_own_lease_sets_acquire_time_only_when_it_was_nil() {
        let with_acquire = lease(
            Some(LEASE_HOLDER),
            Some(NOW - 4000),
            Some(3600),
            Some(NOW - 5000),
            Some(2),
        );
        let (spec, _) = update(plan_request(Some(&with_acquire), t(NOW)));
        assert_refreshed(&spec);
        assert_eq!(spec.acquire_time, Some(MicroTime(t(NOW - 5000))));
        assert_eq!(spec.lease_transitions, Some(2));

        let without_acquire = lease(Some(LEASE_HOLDER), Some(NOW - 4000), Some(3600), None, None);
        let (spec, outcome) = update(plan_request(Some(&without_acquire), t(NOW)));
        assert_eq!(outcome, LeaseOutcome::Renewed);
        assert_refreshed(&spec);
        assert_eq!(spec.acquire_time, Some(MicroTime(t(NOW))));
        assert_eq!(spec.lease_transitions, Some(1));
    }

    #[test]
    fn own_valid_lease_is_renewed_only_when_less_than_three_quarters_remain() {
        // Renewed 900 s ago: exactly 2700 s (3/4) remain -> not yet due.
        let fresh = lease(
            Some(LEASE_HOLDER),
            Some(NOW - 900),
            Some(3600),
            Some(NOW - 900),
            Some(0),
        );
        assert_eq!(plan_request(Some(&fresh), t(NOW)), LeasePlan::Current);
        let just_renewed = lease(
            Some(LEASE_HOLDER),
            Some(NOW),
            Some(3600),
            Some(NOW),
            Some(0),
        );
        assert_eq!(
            plan_request(Some(&just_renewed), t(NOW)),
            LeasePlan::Current
        );

        // Renewed 901 s ago: less than 3/4 remain -> renew, keep acquire and transitions.
        let due = lease(
            Some(LEASE_HOLDER),
            Some(NOW - 901),
            Some(3600),
            Some(NOW - 5000),
            Some(2),
        );
        let (spec, outcome) = update(plan_request(Some(&due), t(NOW)));
        assert_eq!(outcome, LeaseOutcome::Renewed);
        assert_refreshed(&spec);
        assert_eq!(spec.acquire_time, Some(MicroTime(t(NOW - 5000))));
        assert_eq!(spec.lease_transitions, Some(2));

        // A shortened but still valid own lease expiring within the window is renewed too.
        let short = lease(
            Some(LEASE_HOLDER),
            Some(NOW - 10),
            Some(60),
            Some(NOW - 10),
            Some(0),
        );
        let (spec, _) = update(plan_request(Some(&short), t(NOW)));
        assert_refreshed(&spec);

        // A long own lease that still covers the window is left alone, like upstream.
        let long = lease(
            Some(LEASE_HOLDER),
            Some(NOW - 1000),
            Some(7200),
            Some(NOW - 1000),
            Some(0),
        );
        assert_eq!(plan_request(Some(&long), t(NOW)), LeasePlan::Current);
    }

    #[test]
    fn own_lease_renewed_in_the_future_is_refreshed() {
        let future = lease(
            Some(LEASE_HOLDER),
            Some(NOW + 30),
            Some(3600),
            Some(NOW - 100),
            Some(0),
        );
        let (spec, outcome) = update(plan_request(Some(&future), t(NOW)));
        assert_eq!(outcome, LeaseOutcome::Renewed);
        assert_refreshed(&spec);
        assert_eq!(
            spec.acquire_time,
            Some(MicroTime(t(NOW - 100))),
            "acquire kept"
        );
        assert_eq!(spec.lease_transitions, Some(0));
    }

    #[test]
    fn a_node_name_whose_lease_name_is_too_long_cannot_be_leased() {
        assert_eq!(lease_name_error(&"a".repeat(248)), None);
        assert_eq!(lease_name(&"a".repeat(248)).len(), 253);
        let err = lease_name_error(&"a".repeat(249)).unwrap();
        assert!(err.contains("would have 254 characters"), "{err}");
        let err = lease_name_error(&"a".repeat(251)).unwrap();
        assert!(
            err.contains("would have 256 characters, more than the 253 a Lease name may have"),
            "{err}"
        );
    }

    #[test]
    fn lease_name_and_namespace_defaults() {
        assert_eq!(lease_name("Worker-1"), "node-worker-1");
        assert_eq!(RENEW_AFTER, Duration::from_secs(900));
        assert_eq!(DEFAULT_LEASE_NAMESPACE, "medik8s-leases");
    }

    #[test]
    fn node_owner_reference_names_the_node() {
        assert_eq!(node_owner("w", None), None);
        let owner = node_owner("w", Some("uid-1")).unwrap();
        assert_eq!(
            serde_json::to_value(&owner).unwrap(),
            serde_json::json!({"apiVersion": "v1", "kind": "Node", "name": "w", "uid": "uid-1"})
        );
    }
}

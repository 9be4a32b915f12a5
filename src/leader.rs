//! Leader election on the coordination.k8s.io Lease `135b1886.medik8s.io` (upstream's election
//! ID, nmo-compat.md §12) in the operator namespace, through the `kube-lease-manager` crate.
//!
//! Timing mirrors controller-runtime's defaults (lease 15 s, renew deadline 10 s, retry 2 s):
//! the holder renews every 2 s (kube-lease-manager renews `grace` seconds before expiry, so
//! grace = 15 − 2 = 13 s), and the Lease client has 3 s connect/read/write timeouts, so a renewal
//! that cannot complete fails before anyone else may take the Lease over.
//!
//! Loss of leadership is final for this process: as with controller-runtime (which exits with
//! "leader election lost"), [`LeaderElection`] reports [`LeaderError::Lost`] and the caller stops
//! the controller at once and exits non-zero, so Kubernetes restarts the pod as a fresh standby.
//! A renewal error while leading counts as lost: the process cannot prove it still holds the
//! Lease, and another replica may take it over once 15 s have passed since the last renewal.
//!
//! On shutdown the Lease is released (holder cleared), and a standby, which re-reads the Lease
//! every 2 s, takes over within one retry period instead of waiting for the lease to expire.

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Upstream's leader-election ID, used as the Lease name.
pub const LEADER_ELECTION_ID: &str = "135b1886.medik8s.io";
/// Lease duration: a holder that stops renewing loses the Lease after this many seconds.
pub const LEASE_DURATION_SECONDS: u64 = 15;
/// Interval between renewals while leading (controller-runtime's retry period).
pub const RETRY_PERIOD_SECONDS: u64 = 2;
/// Time allowed for each phase (connect, write, read) of one Lease request. A renewal that
/// starts [`RETRY_PERIOD_SECONDS`] after the last one therefore fails at the latest
/// 2 + 3 × 3 = 11 s after it, before the 15 s lease could be taken over.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// Time allowed to release the Lease on shutdown before giving up (the Lease then expires).
pub const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);
// Renew every retry period; a renewal that hangs in connect, write and read still fails before
// the lease duration has passed since the last successful renewal, so no other replica can hold
// the Lease while this one still believes it leads.
const _: () = assert!(
    RETRY_PERIOD_SECONDS < LEASE_DURATION_SECONDS
        && RETRY_PERIOD_SECONDS + 3 * REQUEST_TIMEOUT.as_secs() < LEASE_DURATION_SECONDS
);

/// Field manager of the Lease writes.
pub const FIELD_MANAGER: &str = "node-maintenance-operator";
/// Pause after an election error while not leading, before campaigning again.
const STANDBY_RETRY: Duration = Duration::from_secs(2);

/// Errors of leader election.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The Lease could not be read or created at start-up (RBAC, namespace missing, API down).
    #[error("leader election: cannot set up Lease {namespace}/{name}: {source}")]
    Setup {
        /// Namespace of the Lease.
        namespace: String,
        /// Name of the Lease.
        name: String,
        /// What the API answered.
        #[source]
        source: LeaseManagerError,
    },
    /// This replica led and then lost (or could no longer renew) the Lease.
    #[error("leader election lost: {0}")]
    Lost(String),
}

/// A running election: [`LeaderElection::is_leader`] follows the Lease, and the background task
/// ends when leadership is lost or the shutdown future completes.
#[derive(Debug)]
pub struct LeaderElection {
    leader: watch::Receiver<bool>,
    task: JoinHandle<Result<(), LeaderError>>,
    identity: String,
}

impl LeaderElection {
    /// The identity written as `holderIdentity`.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// A receiver that is `true` while this replica holds the Lease.
    pub fn is_leader(&self) -> watch::Receiver<bool> {
        self.leader.clone()
    }

    /// Waits until this replica holds the Lease. Returns `false` when the election ended first
    /// (shutdown, or the task stopped).
    pub async fn acquired(&mut self) -> bool {
        self.leader.wait_for(|v| *v).await.is_ok()
    }

    /// Waits for the election task: `Ok(())` after a shutdown (Lease released when held),
    /// [`LeaderError::Lost`] when leadership was lost.
    pub async fn wait(self) -> Result<(), LeaderError> {
        match self.task.await {
            Ok(r) => r,
            Err(e) => Err(LeaderError::Lost(format!("election task failed: {e}"))),
        }
    }
}

/// The identity of this replica: `POD_NAME` (else `HOSTNAME`, else the kernel host name) plus
/// `_` and a random suffix, as controller-runtime does (hostname + `_` + UUID), so a restarted
/// container with the same pod name never mistakes the old holder for itself.
pub fn identity() -> String {
    let host = std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "node-maintenance-operator".to_string());
    format!("{host}_{}", random_suffix())
}

/// 16 hex digits from the process's random hashing keys (std seeds `RandomState` from the OS
/// RNG), which is enough to tell two incarnations of one pod apart without another dependency.
fn random_suffix() -> String {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    format!("{:016x}", h.finish())
}

/// What the election loop does after `changed()` reports, given whether this replica led
/// before. Pure, so the loss rules are testable without a cluster.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Publish the new state and keep campaigning.
    Publish(bool),
    /// Leadership is gone: publish `false` and end with [`LeaderError::Lost`].
    Lost(String),
    /// Not leading and the API failed: wait and campaign again.
    RetryStandby,
}

fn step(was_leader: bool, outcome: Result<bool, String>) -> Step {
    match (was_leader, outcome) {
        (true, Ok(false)) => Step::Lost("the Lease is held by another replica".to_string()),
        (true, Err(e)) => Step::Lost(format!("renewing the Lease failed: {e}")),
        (_, Ok(now)) => Step::Publish(now),
        (false, Err(_)) => Step::RetryStandby,
    }
}

/// Builds a client for the Lease: no 429/503 retry layer and short timeouts, so a renewal either
/// completes or fails inside the renew deadline instead of hanging past the Lease's expiry.
pub fn lease_client(mut config: kube::Config) -> Result<Client, kube::Error> {
    config.default_retry = false;
    config.connect_timeout = Some(REQUEST_TIMEOUT);
    config.read_timeout = Some(REQUEST_TIMEOUT);
    config.write_timeout = Some(REQUEST_TIMEOUT);
    config.reset_reader_on_write = true;
    Client::try_from(config)
}

/// Starts campaigning for the Lease `namespace/135b1886.medik8s.io` as `identity`.
///
/// Reads the Lease, creating it when absent, before returning, so RBAC or namespace problems
/// surface at start-up. The returned election runs in a background task until `shutdown`
/// completes (then the Lease is released if held, within [`RELEASE_TIMEOUT`]) or leadership is
/// lost.
///
/// # Errors
/// [`LeaderError::Setup`] when the Lease cannot be read or created.
pub async fn start(
    client: Client,
    namespace: &str,
    identity: String,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<LeaderElection, LeaderError> {
    let manager = build(&client, namespace, &identity).await?;
    let (tx, rx) = watch::channel(false);
    let lease = Api::<Lease>::namespaced(client.clone(), namespace);
    let rebuild = {
        let namespace = namespace.to_string();
        let identity = identity.clone();
        move || {
            let (client, namespace, identity) =
                (client.clone(), namespace.clone(), identity.clone());
            async move { build(&client, &namespace, &identity).await }
        }
    };
    let task = tokio::spawn(campaign(
        manager,
        rebuild,
        lease,
        tx,
        identity.clone(),
        shutdown,
    ));
    Ok(LeaderElection {
        leader: rx,
        task,
        identity,
    })
}

async fn build(
    client: &Client,
    namespace: &str,
    identity: &str,
) -> Result<LeaseManager, LeaderError> {
    LeaseManagerBuilder::new(client.clone(), LEADER_ELECTION_ID)
        .with_namespace(namespace)
        .with_identity(identity)
        .with_duration(LEASE_DURATION_SECONDS)
        .with_grace(LEASE_DURATION_SECONDS - RETRY_PERIOD_SECONDS)
        .with_field_manager(FIELD_MANAGER)
        .build()
        .await
        .map_err(|source| LeaderError::Setup {
            namespace: namespace.to_string(),
            name: LEADER_ELECTION_ID.to_string(),
            source,
        })
}

/// Whether a Lease read by a standby is free to take: no holder (released on shutdown), or
/// not renewed within its duration. Pure, for the standby's handover check.
fn takeable(lease: &Lease, now: jiff::Timestamp) -> bool {
    let Some(spec) = &lease.spec else { return true };
    if spec.holder_identity.as_deref().is_none_or(str::is_empty) {
        return true;
    }
    match (&spec.renew_time, spec.lease_duration_seconds) {
        // Checked: `Timestamp + SignedDuration` panics past jiff's range, and any client that
        // may write this Lease could set a renewTime near year 9999 with a long duration. An
        // expiry beyond the range never comes.
        (Some(renew), Some(secs)) => renew
            .0
            .checked_add(jiff::SignedDuration::from_secs(i64::from(secs)))
            .is_ok_and(|expiry| expiry < now),
        _ => true,
    }
}

/// Polls the Lease every [`RETRY_PERIOD_SECONDS`] and returns once it is free to take.
/// kube-lease-manager's standby sleeps until the holder's lease would expire and so does not see
/// a release; this check lets a standby take over within one retry period of the leader
/// stepping down (controller-runtime's standby also retries every 2 s).
async fn handover(lease: &Api<Lease>) {
    loop {
        tokio::time::sleep(Duration::from_secs(RETRY_PERIOD_SECONDS)).await;
        if let Ok(Some(l)) = lease.get_opt(LEADER_ELECTION_ID).await
            && takeable(&l, jiff::Timestamp::now())
        {
            return;
        }
    }
}

enum Wake {
    Shutdown,
    Changed(Result<bool, String>),
    Handover,
}

async fn campaign<R, F>(
    mut manager: LeaseManager,
    rebuild: R,
    lease: Api<Lease>,
    tx: watch::Sender<bool>,
    identity: String,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), LeaderError>
where
    R: Fn() -> F,
    F: Future<Output = Result<LeaseManager, LeaderError>>,
{
    let mut shutdown = std::pin::pin!(shutdown);
    let mut leading = false;
    loop {
        let wake = tokio::select! {
            biased;
            () = &mut shutdown => Wake::Shutdown,
            r = manager.changed() => Wake::Changed(r.map_err(|e| e.to_string())),
            () = handover(&lease), if !leading => Wake::Handover,
        };
        let outcome = match wake {
            Wake::Shutdown => break,
            Wake::Changed(outcome) => outcome,
            Wake::Handover => {
                // A fresh manager reads the Lease on its first `changed()` and claims it.
                match rebuild().await {
                    Ok(m) => manager = m,
                    Err(e) => {
                        tracing::warn!(error = %e, "leader election: re-reading the released Lease failed")
                    }
                }
                continue;
            }
        };
        match step(leading, outcome) {
            Step::Publish(now) => {
                if now != leading {
                    if now {
                        tracing::info!(lease = LEADER_ELECTION_ID, %identity, "successfully acquired lease");
                    } else {
                        tracing::info!(lease = LEADER_ELECTION_ID, %identity, "lease not held");
                    }
                }
                leading = now;
                tx.send_replace(now);
            }
            Step::Lost(why) => {
                tx.send_replace(false);
                tracing::error!(lease = LEADER_ELECTION_ID, %identity, reason = %why, "leader election lost");
                return Err(LeaderError::Lost(why));
            }
            Step::RetryStandby => {
                tracing::warn!(
                    lease = LEADER_ELECTION_ID,
                    "leader election: Lease API error while standing by; retrying"
                );
                tokio::select! {
                    biased;
                    () = &mut shutdown => break,
                    () = tokio::time::sleep(STANDBY_RETRY) => {}
                }
            }
        }
    }
    // Shutdown: stop claiming leadership first, then hand the Lease over.
    tx.send_replace(false);
    if leading {
        match tokio::time::timeout(RELEASE_TIMEOUT, manager.release()).await {
            Ok(Ok(())) => tracing::info!(lease = LEADER_ELECTION_ID, "released leader Lease"),
            Ok(Err(e)) => {
                tracing::warn!(lease = LEADER_ELECTION_ID, error = %e, "releasing the leader Lease failed; it expires in 15 s")
            }
            Err(_) => {
                tracing::warn!(
                    lease = LEADER_ELECTION_ID,
                    "releasing the leader Lease timed out; it expires in 15 s"
                )
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn losing_or_failing_to_renew_is_final() {
        assert!(matches!(step(true, Ok(false)), Step::Lost(_)));
        assert!(
            matches!(step(true, Err("timeout".into())), Step::Lost(m) if m.contains("timeout"))
        );
    }

    #[test]
    fn standby_keeps_campaigning() {
        assert_eq!(step(false, Err("503".into())), Step::RetryStandby);
        assert_eq!(step(false, Ok(true)), Step::Publish(true));
        assert_eq!(step(false, Ok(false)), Step::Publish(false));
        assert_eq!(step(true, Ok(true)), Step::Publish(true));
    }

    #[test]
    fn standby_takes_released_or_expired_leases_only() {
        use k8s_openapi::api::coordination::v1::LeaseSpec;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
        let now: jiff::Timestamp = "2026-01-01T00:00:30Z".parse().unwrap();
        let lease = |holder: Option<&str>, renewed: &str| Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                renew_time: Some(MicroTime(renewed.parse().unwrap())),
                lease_duration_seconds: Some(15),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        };
        assert!(!takeable(&lease(Some("a_1"), "2026-01-01T00:00:20Z"), now));
        assert!(takeable(&lease(Some("a_1"), "2026-01-01T00:00:10Z"), now));
        assert!(takeable(&lease(None, "2026-01-01T00:00:29Z"), now));
        assert!(takeable(&lease(Some(""), "2026-01-01T00:00:29Z"), now));
        assert!(takeable(&Lease::default(), now));
        let mut far = lease(Some("a_1"), "9999-12-30T00:00:00Z");
        far.spec.as_mut().unwrap().lease_duration_seconds = Some(i32::MAX);
        assert!(
            !takeable(&far, now),
            "an expiry past jiff's range must not panic"
        );
    }

    #[test]
    fn identities_differ_per_incarnation() {
        let a = identity();
        let b = identity();
        assert_ne!(a, b);
        let (host, suffix) = a.rsplit_once('_').unwrap();
        assert!(!host.is_empty());
        assert_eq!(suffix.len(), 16);
    }
}

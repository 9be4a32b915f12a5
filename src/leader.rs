//! Leader election on the coordination.k8s.io/v1 Lease `135b1886.medik8s.io` (upstream's election
//! ID, `docs/compat.md §9`) in the operator namespace, interoperable with client-go's
//! `tools/leaderelection` so that a Go replica and a Rust replica can share the Lease during a
//! rolling switch.
//!
//! The rules are client-go's (`docs/design.md §5`):
//! - every write of the Lease is an update guarded by the resourceVersion that was read (or a
//!   create when it is absent), so of two candidates acting on the same observation one gets a
//!   409 Conflict;
//! - a holder's lease is judged expired from the time *this process* observed the record last
//!   change, on the local monotonic clock, plus the record's `leaseDurationSeconds`; the remote
//!   `renewTime` is never compared with the local wall clock;
//! - timings are controller-runtime's defaults: lease 15 s, renew deadline 10 s, retry 2 s.
//!
//! A leader that has not renewed within [`RENEW_DEADLINE`] of the start of its last successful
//! renewal has lost: [`Leadership::may_write`] turns false at that instant (checked on the
//! monotonic clock, so it holds even before the election task has run after a stall, e.g.
//! SIGSTOP), the term token is cancelled, which aborts the controller, and [`WriteFence`] refuses
//! every mutating request of the controller's clients. A competitor can take the Lease over no
//! earlier than [`LEASE_DURATION`] after it observed our last renewal, 5 s later.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Upstream's leader-election ID, used as the Lease name.
pub(crate) const LEADER_ELECTION_ID: &str = "135b1886.medik8s.io";
/// How long a competitor waits, after it last saw the record change, before taking the Lease
/// over (controller-runtime's `LeaseDuration` default). Written as `leaseDurationSeconds`.
pub(crate) const LEASE_DURATION: Duration = Duration::from_secs(15);
/// How long a leader keeps trying to renew, counted from the start of its last successful
/// renewal, before it stops leading (controller-runtime's `RenewDeadline` default).
pub(crate) const RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// Pause between two attempts, standing by or renewing (controller-runtime's `RetryPeriod`).
pub(crate) const RETRY_PERIOD: Duration = Duration::from_secs(2);
/// Time allowed to release the Lease on shutdown (the Lease then expires on its own).
pub(crate) const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);
// client-go refuses configurations where a leader could still believe it leads once a
// competitor may take over; the same inequalities hold here.
const _: () = assert!(
    RENEW_DEADLINE.as_secs() < LEASE_DURATION.as_secs()
        && RETRY_PERIOD.as_secs() < RENEW_DEADLINE.as_secs()
);

/// Field manager of the Lease writes.
pub(crate) const FIELD_MANAGER: &str = "node-maintenance-operator";

/// Errors of leader election.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The Lease could not be read at start-up (RBAC, namespace missing, API down).
    #[error("leader election: cannot read Lease {namespace}/{name}: {source}")]
    Setup {
        /// Namespace of the Lease.
        namespace: String,
        /// Name of the Lease.
        name: String,
        /// What the API answered.
        #[source]
        source: kube::Error,
    },
    /// This replica led and then lost (or could no longer renew) the Lease.
    #[error("leader election lost: {0}")]
    Lost(String),
}

/// The identity written as `holderIdentity`: the host name (the pod name in a pod), `_`, and a
/// random UUID, as controller-runtime builds it (`os.Hostname()` + `_` + UUID). A restarted
/// container keeps its pod name but never mistakes the old holder for itself.
pub(crate) fn identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "node-maintenance-operator".to_string());
    format!("{host}_{}", uuid_v4())
}

/// A random (version 4) UUID in its 8-4-4-4-12 text form.
fn uuid_v4() -> String {
    let mut b = [0u8; 16];
    // The OS RNG only fails on exotic platforms; a zero UUID still differs by host name and the
    // resourceVersion guard keeps two equal identities from both writing.
    let _ = getrandom::fill(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// What this process last saw of the Lease: the record (the Lease spec) and when, on the local
/// monotonic clock, it last changed. client-go's `observedRecord`/`observedTime`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Observed {
    /// The Lease spec as read (or as written by us).
    pub record: LeaseSpec,
    /// When this process first saw `record` (or wrote it).
    pub since: Instant,
}

impl Observed {
    /// Folds a fresh read into the observation: the clock restarts only when the record differs
    /// from the one seen before (client-go compares the raw record the same way).
    pub(crate) fn update(previous: Option<Self>, record: LeaseSpec, now: Instant) -> Self {
        match previous {
            Some(p) if p.record == record => p,
            _ => Observed { record, since: now },
        }
    }

    /// Whether the observed holder's term runs past `now`: observed + `leaseDurationSeconds`
    /// (a missing or negative duration counts as zero, so such a record is free to take).
    pub(crate) fn valid_at(&self, now: Instant) -> bool {
        let secs = self
            .record
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .unwrap_or(0);
        self.since
            .checked_add(Duration::from_secs(secs))
            .is_none_or(|end| end > now)
    }

    fn holder(&self) -> &str {
        self.record.holder_identity.as_deref().unwrap_or("")
    }
}

/// What one election attempt does, decided from the observation alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// No Lease exists: create it naming us.
    Create,
    /// The Lease is free (no holder, or its holder's term ran out): take it over.
    Acquire,
    /// We hold the Lease: renew it.
    Renew,
    /// Another holder's term is running: wait.
    StandBy {
        /// The current holder.
        holder: String,
    },
    /// We led and cannot any more: the renew deadline passed, or the record names someone else.
    Lost(String),
}

/// The election decision (client-go's `tryAcquireOrRenew`, plus the renew deadline that
/// client-go enforces around it).
///
/// `observed` is the latest observation (`None` when the Lease does not exist), `leading_until`
/// is the end of our current term on the monotonic clock (`None` when standing by).
pub(crate) fn decide(
    observed: Option<&Observed>,
    identity: &str,
    leading_until: Option<Instant>,
    now: Instant,
) -> Decision {
    if let Some(until) = leading_until
        && now >= until
    {
        return Decision::Lost(format!(
            "the Lease was not renewed within the renew deadline ({}s)",
            RENEW_DEADLINE.as_secs()
        ));
    }
    let Some(observed) = observed else {
        return match leading_until {
            Some(_) => Decision::Lost("the Lease was deleted".to_string()),
            None => Decision::Create,
        };
    };
    let holder = observed.holder();
    if holder == identity {
        return Decision::Renew;
    }
    if leading_until.is_some() {
        return Decision::Lost(format!("the Lease is now held by {holder:?}"));
    }
    if !holder.is_empty() && observed.valid_at(now) {
        return Decision::StandBy {
            holder: holder.to_string(),
        };
    }
    Decision::Acquire
}

/// The record to write for `decision` (client-go's `LeaderElectionRecord` on a Lease): a renewal
/// keeps `acquireTime` and `leaseTransitions`; a takeover counts one more transition.
/// `None` for [`Decision::StandBy`] and [`Decision::Lost`], which write nothing.
pub(crate) fn next_record(
    decision: &Decision,
    previous: Option<&LeaseSpec>,
    identity: &str,
    now: jiff::Timestamp,
) -> Option<LeaseSpec> {
    let transitions = previous.and_then(|p| p.lease_transitions).unwrap_or(0);
    let (acquire_time, transitions) = match decision {
        Decision::Create => (MicroTime(now), 0),
        Decision::Acquire => (MicroTime(now), transitions.saturating_add(1)),
        Decision::Renew => (
            previous
                .and_then(|p| p.acquire_time.clone())
                .unwrap_or(MicroTime(now)),
            transitions,
        ),
        Decision::StandBy { .. } | Decision::Lost(_) => return None,
    };
    Some(LeaseSpec {
        holder_identity: Some(identity.to_string()),
        lease_duration_seconds: Some(LEASE_DURATION.as_secs() as i32),
        acquire_time: Some(acquire_time),
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(transitions),
        ..LeaseSpec::default()
    })
}

/// The record that gives the Lease up (client-go's `release`): no holder, a 1 s duration, the
/// transitions kept, so a standby takes over at its next attempt.
pub(crate) fn released_record(previous: &LeaseSpec, now: jiff::Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(String::new()),
        lease_duration_seconds: Some(1),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        lease_transitions: previous.lease_transitions,
        ..LeaseSpec::default()
    }
}

/// This replica's standing, shared by the election task, the controller's clients
/// ([`WriteFence`]) and the probes.
#[derive(Debug)]
pub(crate) struct Leadership {
    base: Instant,
    /// End of the current term in nanoseconds after `base`; 0 when not leading.
    until: AtomicU64,
    term: CancellationToken,
}

impl Leadership {
    fn new() -> Self {
        Leadership {
            base: Instant::now(),
            until: AtomicU64::new(0),
            term: CancellationToken::new(),
        }
    }

    /// Whether a write on behalf of the leader may start now: leading, and the renew deadline
    /// of the last successful renewal not reached on the monotonic clock.
    pub(crate) fn may_write(&self) -> bool {
        let until = self.until.load(Ordering::Acquire);
        until != 0
            && !self.term.is_cancelled()
            && u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX) < until
    }

    /// Cancelled when this replica stops leading (loss, or shutdown).
    pub(crate) fn term(&self) -> CancellationToken {
        self.term.clone()
    }

    fn lead_until(&self, until: Instant) {
        let nanos = u64::try_from(until.saturating_duration_since(self.base).as_nanos())
            .unwrap_or(u64::MAX)
            .max(1);
        self.until.store(nanos, Ordering::Release);
    }

    fn stop(&self) {
        self.until.store(0, Ordering::Release);
        self.term.cancel();
    }
}

/// A tower layer for the controller's Kubernetes clients: refuses every mutating request (POST,
/// PUT, PATCH, DELETE) unless [`Leadership::may_write`] holds at the moment the request is
/// dispatched. Reads pass, so watches keep working; a refused write surfaces as a
/// `kube::Error::Service` carrying [`NotLeading`].
#[derive(Clone, Debug)]
pub(crate) struct WriteFence(Arc<Leadership>);

/// The error of a write refused by [`WriteFence`].
#[derive(Debug, thiserror::Error)]
#[error("not leading: write refused (or abandoned unanswered) after leadership ended")]
pub(crate) struct NotLeading;

impl<S> tower::Layer<S> for WriteFence {
    type Service = Fenced<S>;
    fn layer(&self, inner: S) -> Fenced<S> {
        Fenced {
            inner,
            leadership: self.0.clone(),
        }
    }
}

/// The service built by [`WriteFence`].
#[derive(Clone, Debug)]
pub(crate) struct Fenced<S> {
    inner: S,
    leadership: Arc<Leadership>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, B> tower::Service<http::Request<B>> for Fenced<S>
where
    S: tower::Service<http::Request<B>>,
    S::Error: Into<BoxError>,
    S::Response: Send + 'static,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let mutating = !matches!(
            *req.method(),
            http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
        );
        if !mutating {
            let fut = self.inner.call(req);
            return Box::pin(async move { fut.await.map_err(Into::into) });
        }
        let (method, uri) = (req.method().clone(), req.uri().clone());
        if !self.leadership.may_write() {
            tracing::warn!(%method, %uri, "write refused: not leading");
            return Box::pin(std::future::ready(Err(NotLeading.into())));
        }
        // Checked again at every poll, before the inner future runs: a write can wait between
        // this call and its bytes reaching the API server (token refresh, a new connection's
        // handshake), and a process stopped there (SIGSTOP, a stalled node) would otherwise send
        // it on resuming, after a competitor took over. A write abandoned once its bytes left
        // may still have been served; the term is over and the process exits either way.
        let leadership = self.leadership.clone();
        let mut fut = Box::pin(self.inner.call(req));
        Box::pin(std::future::poll_fn(move |cx| {
            if !leadership.may_write() {
                tracing::warn!(%method, %uri, "write refused: not leading (term ended before it was answered)");
                return Poll::Ready(Err(NotLeading.into()));
            }
            fut.as_mut().poll(cx).map_err(Into::into)
        }))
    }
}

/// A running election. The background task campaigns every [`RETRY_PERIOD`] until it holds the
/// Lease, then renews it until shutdown ([`LeaderElection::release`]) or loss.
#[derive(Debug)]
pub(crate) struct LeaderElection {
    leadership: Arc<Leadership>,
    leader: watch::Receiver<bool>,
    stop: CancellationToken,
    task: JoinHandle<Result<(), LeaderError>>,
}

impl LeaderElection {
    /// The shared standing, for [`Leadership::may_write`] and [`Leadership::term`].
    pub(crate) fn leadership(&self) -> Arc<Leadership> {
        self.leadership.clone()
    }

    /// The layer that fences the controller's writes to this replica's term.
    pub(crate) fn fence(&self) -> WriteFence {
        WriteFence(self.leadership.clone())
    }

    /// Waits until this replica holds the Lease. `false` when the election ended first.
    pub(crate) async fn acquired(&mut self) -> bool {
        self.leader.wait_for(|v| *v).await.is_ok()
    }

    /// Stops campaigning: the term ends, and the Lease is released when this replica still
    /// holds it. Call it only once nothing acts on the term any more.
    ///
    /// # Errors
    /// [`LeaderError::Lost`] when leadership had been lost before.
    pub(crate) async fn release(self) -> Result<(), LeaderError> {
        self.stop.cancel();
        match self.task.await {
            Ok(r) => r,
            Err(e) => Err(LeaderError::Lost(format!("election task failed: {e}"))),
        }
    }
}

/// Builds a client for the Lease: no 429/503 retry layer and timeouts shorter than the renew
/// deadline, so one renewal cannot hang past the point where the term must end.
///
/// # Errors
/// As [`crate::client::builder`].
pub(crate) fn lease_client(mut config: kube::Config) -> Result<Client, kube::Error> {
    let t = Some(Duration::from_secs(3));
    config.default_retry = false;
    config.connect_timeout = t;
    config.read_timeout = t;
    config.write_timeout = t;
    config.reset_reader_on_write = true;
    crate::client::client(config)
}

/// Starts campaigning for the Lease `namespace/135b1886.medik8s.io` as `identity`.
///
/// Reads the Lease once before returning, so RBAC or namespace problems surface at start-up.
///
/// # Errors
/// [`LeaderError::Setup`] when the Lease cannot be read.
pub(crate) async fn start(
    client: Client,
    namespace: &str,
    identity: String,
) -> Result<LeaderElection, LeaderError> {
    let api = Api::<Lease>::namespaced(client, namespace);
    api.get_opt(LEADER_ELECTION_ID)
        .await
        .map_err(|source| LeaderError::Setup {
            namespace: namespace.to_string(),
            name: LEADER_ELECTION_ID.to_string(),
            source,
        })?;
    let leadership = Arc::new(Leadership::new());
    let (tx, rx) = watch::channel(false);
    let stop = CancellationToken::new();
    let elector = Elector {
        api,
        identity,
        observed: None,
        leadership: leadership.clone(),
        leader: tx,
    };
    let task = tokio::spawn(elector.campaign(stop.clone()));
    Ok(LeaderElection {
        leadership,
        leader: rx,
        stop,
        task,
    })
}

struct Elector {
    api: Api<Lease>,
    identity: String,
    observed: Option<Observed>,
    leadership: Arc<Leadership>,
    leader: watch::Sender<bool>,
}

/// Wall-clock form of a monotonic instant, for the log lines that mark a term's bounds.
fn wall(at: Instant) -> jiff::Timestamp {
    let now = Instant::now();
    let sys = if at <= now {
        SystemTime::now() - (now - at)
    } else {
        SystemTime::now() + (at - now)
    };
    jiff::Timestamp::try_from(sys).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}

impl Elector {
    async fn campaign(mut self, stop: CancellationToken) -> Result<(), LeaderError> {
        let mut leading_until: Option<Instant> = None;
        let mut first = true;
        loop {
            if !first {
                tokio::select! {
                    biased;
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(RETRY_PERIOD) => {}
                }
            }
            first = false;
            let start = Instant::now();
            // An attempt never runs past the end of the term (a hung request must not keep a
            // stale leader alive); standing by, it gets a renew deadline's worth.
            let budget =
                leading_until.map_or(RENEW_DEADLINE, |u| u.saturating_duration_since(start));
            let attempt = tokio::select! {
                biased;
                () = stop.cancelled() => break,
                r = tokio::time::timeout(budget, self.attempt(leading_until)) => r,
            };
            match attempt {
                Ok(Ok(Some(Decision::Create | Decision::Acquire | Decision::Renew))) => {
                    let until = start + RENEW_DEADLINE;
                    self.leadership.lead_until(until);
                    if leading_until.is_none() {
                        tracing::info!(
                            lease = LEADER_ELECTION_ID,
                            identity = %self.identity,
                            leading_since = %jiff::Timestamp::now(),
                            "successfully acquired lease; started leading"
                        );
                        self.leader.send_replace(true);
                    }
                    leading_until = Some(until);
                }
                Ok(Ok(Some(Decision::Lost(why)))) => return Err(self.lost(leading_until, why)),
                Ok(Ok(_)) => {}
                // A 409 only says another candidate wrote first; anything else (RBAC, API down)
                // an operator of the cluster needs to see.
                Ok(Err(kube::Error::Api(s))) if s.is_conflict() || s.is_already_exists() => {
                    tracing::debug!(
                        lease = LEADER_ELECTION_ID,
                        "Lease changed under this attempt (409)"
                    )
                }
                Ok(Err(e)) => {
                    tracing::warn!(lease = LEADER_ELECTION_ID, error = %e, "leader election attempt failed")
                }
                Err(_) => {
                    tracing::debug!(
                        lease = LEADER_ELECTION_ID,
                        "leader election attempt timed out"
                    )
                }
            }
            if let Some(until) = leading_until
                && Instant::now() >= until
            {
                return Err(self.lost(
                    leading_until,
                    format!(
                        "the Lease was not renewed within the renew deadline ({}s)",
                        RENEW_DEADLINE.as_secs()
                    ),
                ));
            }
        }
        // Shutdown: the caller has stopped everything that acted on the term.
        let was_leading = leading_until.is_some_and(|u| Instant::now() < u);
        self.leadership.stop();
        self.leader.send_replace(false);
        if was_leading {
            tracing::info!(
                lease = LEADER_ELECTION_ID,
                identity = %self.identity,
                leading_until = %jiff::Timestamp::now(),
                "stopped leading (shutdown)"
            );
            match tokio::time::timeout(RELEASE_TIMEOUT, self.release()).await {
                Ok(Ok(())) => tracing::info!(lease = LEADER_ELECTION_ID, "released leader Lease"),
                Ok(Err(e)) => {
                    tracing::warn!(lease = LEADER_ELECTION_ID, error = %e, "releasing the leader Lease failed; it expires in 15 s")
                }
                Err(_) => tracing::warn!(
                    lease = LEADER_ELECTION_ID,
                    "releasing the leader Lease timed out; it expires in 15 s"
                ),
            }
        } else if leading_until.is_some() {
            return Err(self.lost(
                leading_until,
                "the renew deadline passed before shutdown".to_string(),
            ));
        }
        Ok(())
    }

    /// Ends the term. `leading_until` (the renew deadline of the last successful renewal) is
    /// logged as the end: no write of ours could start after it ([`WriteFence`]), even when the
    /// process only notices later (after a stall).
    fn lost(&mut self, leading_until: Option<Instant>, why: String) -> LeaderError {
        self.leadership.stop();
        self.leader.send_replace(false);
        let end = leading_until
            .map(|u| u.min(Instant::now()))
            .map_or_else(jiff::Timestamp::now, wall);
        tracing::error!(
            lease = LEADER_ELECTION_ID,
            identity = %self.identity,
            leading_until = %end,
            reason = %why,
            "leader election lost; stopped leading"
        );
        LeaderError::Lost(why)
    }

    /// One attempt (client-go's `tryAcquireOrRenew`): read, decide, write guarded by the read's
    /// resourceVersion. `Ok(Some(decision))` names what was done; a write that failed (409
    /// Conflict: someone else wrote first) is an `Err`.
    async fn attempt(
        &mut self,
        leading_until: Option<Instant>,
    ) -> Result<Option<Decision>, kube::Error> {
        let current = self.api.get_opt(LEADER_ELECTION_ID).await?;
        let now = Instant::now();
        self.observed = current.as_ref().map(|l| {
            Observed::update(
                self.observed.take(),
                l.spec.clone().unwrap_or_default(),
                now,
            )
        });
        let decision = decide(self.observed.as_ref(), &self.identity, leading_until, now);
        let Some(record) = next_record(
            &decision,
            self.observed.as_ref().map(|o| &o.record),
            &self.identity,
            jiff::Timestamp::now(),
        ) else {
            if let Decision::StandBy { holder } = &decision {
                tracing::trace!(%holder, "Lease held by another replica");
            }
            return Ok(Some(decision));
        };
        let pp = PostParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PostParams::default()
        };
        match current {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(LEADER_ELECTION_ID.to_string()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(record.clone()),
                };
                self.api.create(&pp, &lease).await?;
            }
            Some(mut lease) => {
                // `replace` sends the metadata as read, resourceVersion included: the API server
                // answers 409 if anyone wrote since.
                lease.spec = Some(record.clone());
                self.api.replace(LEADER_ELECTION_ID, &pp, &lease).await?;
            }
        }
        self.observed = Some(Observed {
            record,
            since: Instant::now(),
        });
        Ok(Some(decision))
    }

    async fn release(&mut self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(LEADER_ELECTION_ID).await? else {
            return Ok(());
        };
        let spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        lease.spec = Some(released_record(&spec, jiff::Timestamp::now()));
        let pp = PostParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PostParams::default()
        };
        self.api.replace(LEADER_ELECTION_ID, &pp, &lease).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: &str, secs: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.to_string()),
            lease_duration_seconds: Some(secs),
            renew_time: Some(MicroTime("2026-01-01T00:00:00Z".parse().unwrap())),
            acquire_time: Some(MicroTime("2026-01-01T00:00:00Z".parse().unwrap())),
            lease_transitions: Some(3),
            ..LeaseSpec::default()
        }
    }

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn expiry_counts_from_when_the_record_last_changed_here() {
        let t0 = Instant::now();
        let o = Observed::update(None, spec("go_1", 15), t0);
        // The same record read again later does not restart the clock.
        let o = Observed::update(Some(o), spec("go_1", 15), t0 + s(10));
        assert_eq!(o.since, t0);
        assert!(o.valid_at(t0 + s(14)));
        assert!(!o.valid_at(t0 + s(15)));
        // A renewal (any change of the record) restarts it, whatever renewTime says.
        let mut renewed = spec("go_1", 15);
        renewed.renew_time = Some(MicroTime("2000-01-01T00:00:00Z".parse().unwrap()));
        let o = Observed::update(Some(o), renewed, t0 + s(12));
        assert_eq!(o.since, t0 + s(12));
        assert!(o.valid_at(t0 + s(26)));
    }

    #[test]
    fn remote_wall_clock_is_ignored() {
        // A renewTime far in the past (skewed clock) does not make a live holder's lease expired.
        let t0 = Instant::now();
        let mut old = spec("go_1", 15);
        old.renew_time = Some(MicroTime("1990-01-01T00:00:00Z".parse().unwrap()));
        let o = Observed::update(None, old, t0);
        assert_eq!(
            decide(Some(&o), "rs_1", None, t0 + s(1)),
            Decision::StandBy {
                holder: "go_1".into()
            }
        );
        // Nor does one far in the future keep a dead holder alive.
        let mut future = spec("go_1", 15);
        future.renew_time = Some(MicroTime("2999-01-01T00:00:00Z".parse().unwrap()));
        let o = Observed::update(None, future, t0);
        assert_eq!(
            decide(Some(&o), "rs_1", None, t0 + s(16)),
            Decision::Acquire
        );
    }

    #[test]
    fn standby_decisions() {
        let t0 = Instant::now();
        assert_eq!(decide(None, "rs_1", None, t0), Decision::Create);
        let held = Observed::update(None, spec("go_1", 15), t0);
        assert!(matches!(
            decide(Some(&held), "rs_1", None, t0 + s(14)),
            Decision::StandBy { .. }
        ));
        assert_eq!(
            decide(Some(&held), "rs_1", None, t0 + s(15)),
            Decision::Acquire
        );
        // Released (empty holder): take it at once.
        let released = Observed::update(None, spec("", 1), t0);
        assert_eq!(decide(Some(&released), "rs_1", None, t0), Decision::Acquire);
        // A record naming us (our write whose answer we missed) is ours to renew.
        let ours = Observed::update(None, spec("rs_1", 15), t0);
        assert_eq!(decide(Some(&ours), "rs_1", None, t0), Decision::Renew);
        // No duration: nothing to wait for.
        let mut nodur = spec("go_1", 15);
        nodur.lease_duration_seconds = None;
        let o = Observed::update(None, nodur, t0);
        assert_eq!(decide(Some(&o), "rs_1", None, t0), Decision::Acquire);
    }

    #[test]
    fn leader_decisions() {
        let t0 = Instant::now();
        let ours = Observed::update(None, spec("rs_1", 15), t0);
        let until = Some(t0 + RENEW_DEADLINE);
        assert_eq!(
            decide(Some(&ours), "rs_1", until, t0 + s(2)),
            Decision::Renew
        );
        // The renew deadline passes before the lease could expire for anyone else.
        assert!(matches!(
            decide(Some(&ours), "rs_1", until, t0 + s(10)),
            Decision::Lost(m) if m.contains("renew deadline")
        ));
        let taken = Observed::update(None, spec("go_1", 15), t0 + s(3));
        assert!(matches!(
            decide(Some(&taken), "rs_1", until, t0 + s(4)),
            Decision::Lost(m) if m.contains("go_1")
        ));
        assert!(matches!(
            decide(None, "rs_1", until, t0 + s(4)),
            Decision::Lost(_)
        ));
    }

    #[test]
    fn records_written() {
        let now: jiff::Timestamp = "2026-01-01T00:01:00Z".parse().unwrap();
        let prev = spec("go_1", 15);
        let took = next_record(&Decision::Acquire, Some(&prev), "rs_1", now).unwrap();
        assert_eq!(took.holder_identity.as_deref(), Some("rs_1"));
        assert_eq!(took.lease_transitions, Some(4));
        assert_eq!(took.lease_duration_seconds, Some(15));
        assert_eq!(took.acquire_time, Some(MicroTime(now)));
        let mine = spec("rs_1", 15);
        let renewed = next_record(&Decision::Renew, Some(&mine), "rs_1", now).unwrap();
        assert_eq!(renewed.acquire_time, mine.acquire_time);
        assert_eq!(renewed.lease_transitions, Some(3));
        assert_eq!(renewed.renew_time, Some(MicroTime(now)));
        let created = next_record(&Decision::Create, None, "rs_1", now).unwrap();
        assert_eq!(created.lease_transitions, Some(0));
        assert!(
            next_record(&Decision::StandBy { holder: "x".into() }, None, "rs_1", now).is_none()
        );
        let released = released_record(&mine, now);
        assert_eq!(released.holder_identity.as_deref(), Some(""));
        assert_eq!(released.lease_duration_seconds, Some(1));
        assert_eq!(released.lease_transitions, Some(3));
    }

    #[test]
    fn fence_closes_at_the_renew_deadline() {
        let l = Leadership::new();
        assert!(!l.may_write(), "not leading yet");
        l.lead_until(Instant::now() + s(60));
        assert!(l.may_write());
        l.lead_until(Instant::now());
        assert!(!l.may_write(), "deadline reached");
        l.lead_until(Instant::now() + s(60));
        l.stop();
        assert!(!l.may_write() && l.term().is_cancelled());
    }

    #[tokio::test]
    async fn fenced_client_refuses_writes_outside_the_term() {
        use tower::{Layer, ServiceExt};
        let leadership = Arc::new(Leadership::new());
        let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = sent.clone();
        let inner = tower::service_fn(move |_req: http::Request<()>| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, std::convert::Infallible>(http::Response::new(())) }
        });
        let svc = WriteFence(leadership.clone()).layer(inner);
        let req = |m: http::Method| http::Request::builder().method(m).body(()).unwrap();
        let call = |m| svc.clone().oneshot(req(m));

        assert!(call(http::Method::GET).await.is_ok(), "reads always pass");
        for m in [
            http::Method::POST,
            http::Method::PATCH,
            http::Method::PUT,
            http::Method::DELETE,
        ] {
            let err = call(m).await.unwrap_err();
            assert!(err.is::<NotLeading>());
        }
        assert_eq!(
            sent.load(Ordering::SeqCst),
            1,
            "no refused write reached the API"
        );

        leadership.lead_until(Instant::now() + s(60));
        assert!(call(http::Method::PATCH).await.is_ok());
        leadership.stop();
        assert!(call(http::Method::PATCH).await.is_err(), "term over");
        assert!(call(http::Method::GET).await.is_ok());
        assert_eq!(sent.load(Ordering::SeqCst), 3);
    }

    /// A write that waits inside the client stack (a connection's handshake) while the term
    /// ends is abandoned at its next poll, before the inner service goes on with it: what a
    /// process stopped mid-write and resumed after a competitor took over would otherwise send.
    #[tokio::test]
    async fn a_write_still_waiting_when_the_term_ends_is_abandoned_unsent() {
        use tower::{Layer, ServiceExt};
        let leadership = Arc::new(Leadership::new());
        let gate = Arc::new(tokio::sync::Notify::new());
        let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (g, counter) = (gate.clone(), sent.clone());
        let inner = tower::service_fn(move |_req: http::Request<()>| {
            let (g, counter) = (g.clone(), counter.clone());
            async move {
                g.notified().await;
                counter.fetch_add(1, Ordering::SeqCst);
                Ok::<_, std::convert::Infallible>(http::Response::new(()))
            }
        });
        let svc = WriteFence(leadership.clone()).layer(inner);
        leadership.lead_until(Instant::now() + s(60));
        let patch = http::Request::builder()
            .method(http::Method::PATCH)
            .body(())
            .unwrap();
        let pending = tokio::spawn(svc.oneshot(patch));
        tokio::task::yield_now().await;
        assert!(!pending.is_finished(), "the write waits on its connection");
        leadership.stop();
        gate.notify_one();
        let err = pending.await.unwrap().unwrap_err();
        assert!(err.is::<NotLeading>(), "{err}");
        assert_eq!(
            sent.load(Ordering::SeqCst),
            0,
            "the abandoned write was not sent"
        );
    }

    #[test]
    fn identities_look_like_controller_runtimes() {
        let a = identity();
        let b = identity();
        assert_ne!(a, b);
        let (host, uuid) = a.rsplit_once('_').unwrap();
        assert!(!host.is_empty());
        let groups: Vec<usize> = uuid.split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12]);
        assert_eq!(&uuid[14..15], "4");
    }
}

//! The health probes: `/healthz`, and `/readyz` with its rule.

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::sync::watch;

/// Inputs of the `/readyz` decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReadinessInputs {
    /// The webhook server is serving with a loaded certificate.
    pub cert_loaded: bool,
    /// The admission caches have synced (every replica serves the webhook): NodeMaintenances
    /// and the quorum inputs; not the Node cache (see [`readiness`]).
    pub admission_synced: bool,
}

/// The `/readyz` rule, the same on every replica, leader, standby or without election: ready
/// when the webhook serves with a loaded certificate and its admission caches have synced, so
/// that it never decides from an empty cache. (Upstream's `/readyz` is a plain ping,
/// docs/compat.md §8.)
///
/// Two waits are left out on purpose (`docs/design.md §4`, "Readiness"). The process's Node
/// watch: its first list is the one start-up step that grows with the cluster (5,000 Nodes are
/// tens of MB for the API server to encode); until it has listed, a CREATE reads the nodes it
/// decides on (the target, and on the quorum path the etcd members' nodes) from the API server,
/// one GET each, never from the partial cache. The controller's NodeMaintenance watch: nothing
/// routes to the controller, it reconciles only what its own watch listed, and that watch only
/// starts once the webhook serves, so waiting for its consistent list added its round trips (4
/// to 12 ms in `cargo bench --bench scale`) to every start; with leader election, as shipped, a
/// new replica is a standby whose readiness never included it.
///
/// # Errors
/// The reason for not being ready, one line, for the 503 body.
pub(crate) fn readiness(i: ReadinessInputs) -> Result<(), &'static str> {
    if !i.cert_loaded {
        return Err("webhook server has no certificate loaded (or is shutting down)");
    }
    if !i.admission_synced {
        return Err("admission caches have not synced yet");
    }
    Ok(())
}

#[derive(Clone)]
pub(super) struct ProbeState {
    pub(super) webhook: nmo_webhook::Readiness,
    pub(super) admission_synced: watch::Receiver<bool>,
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(s): State<ProbeState>) -> impl IntoResponse {
    let inputs = ReadinessInputs {
        cert_loaded: s.webhook.cert_loaded(),
        admission_synced: *s.admission_synced.borrow(),
    };
    match readiness(inputs) {
        Ok(()) => (StatusCode::OK, "ok".to_string()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}")),
    }
}

pub(super) fn probe_router(state: ProbeState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_needs_a_certificate_and_synced_admission_caches() {
        let i = |cert_loaded, admission_synced| ReadinessInputs {
            cert_loaded,
            admission_synced,
        };
        assert_eq!(readiness(i(true, true)), Ok(()));
        assert_eq!(
            readiness(i(true, false)),
            Err("admission caches have not synced yet")
        );
        assert!(readiness(i(false, true)).is_err());
        assert!(readiness(i(false, false)).is_err());
    }
}

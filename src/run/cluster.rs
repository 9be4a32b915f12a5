//! How the process reaches the cluster: the client configuration, the controller's clients,
//! and the start-up check that NodeMaintenance is served.

use std::path::Path;

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::error::RunError;
use crate::client::Http;
use crate::leader;

/// Where the client configuration comes from, in the order tried (controller-runtime's order):
/// `--kubeconfig`, then `$KUBECONFIG`, then the in-cluster service account, then
/// `~/.kube/config`.
///
/// # Errors
/// [`RunError::KubeConfig`] naming the file or source and the reason.
pub(super) async fn kube_config(flag: Option<&Path>) -> Result<kube::Config, RunError> {
    let opts = KubeConfigOptions::default();
    let (source, kubeconfig) = match flag {
        Some(path) => (
            format!("--kubeconfig {}", path.display()),
            Kubeconfig::read_from(path).map(Some),
        ),
        // kube reads `$KUBECONFIG` itself (a path list, merged as kubectl does); asking it
        // first keeps controller-runtime's order, in which the variable wins over the
        // in-cluster account.
        None => ("KUBECONFIG".to_string(), Kubeconfig::from_env()),
    };
    let unusable = |e| RunError::KubeConfig(format!("cannot use {source}: {e}"));
    if let Some(kc) = kubeconfig.map_err(unusable)? {
        return kube::Config::from_custom_kubeconfig(kc, &opts)
            .await
            .map_err(unusable);
    }
    match kube::Config::incluster() {
        Ok(c) => Ok(c),
        Err(in_cluster) => kube::Config::from_kubeconfig(&opts).await.map_err(|e| {
            RunError::KubeConfig(format!(
                "no Kubernetes configuration: not running in a cluster ({in_cluster}) and no usable ~/.kube/config ({e}); pass --kubeconfig or set KUBECONFIG"
            ))
        }),
    }
}

/// The controller's Kubernetes clients (admission has its own, unfenced: every replica serves
/// the webhook).
pub(super) struct Clients {
    /// The controller's reads and writes; with leader election its writes are fenced to the term
    /// ([`leader::WriteFence`]).
    pub(super) controller: Client,
    /// The drain's evictions (HTTP/2) and forced deletions (HTTP/1.1): no 429 retry layer, so a
    /// PodDisruptionBudget refusal surfaces at once (fenced like `controller`).
    pub(super) send: crate::drain::SendClients,
}

impl Clients {
    pub(super) fn new(
        cfg: &kube::Config,
        fence: Option<&leader::WriteFence>,
    ) -> Result<Self, RunError> {
        let build = |cfg: kube::Config, versions| -> Result<Client, RunError> {
            let builder = crate::client::builder(cfg, versions)
                .map_err(RunError::Client)?
                .with_layer(&tower::util::MapRequestLayer::new(user_agent));
            Ok(match fence {
                Some(f) => builder.with_layer(f).build(),
                None => builder.build(),
            })
        };
        let mut no_retry = cfg.clone();
        no_retry.default_retry = false;
        Ok(Clients {
            controller: build(cfg.clone(), Http::One)?,
            send: crate::drain::SendClients {
                evictions: build(no_retry.clone(), Http::Two)?,
                others: build(no_retry, Http::One)?,
            },
        })
    }
}

/// Names the controller's requests `node-maintenance-operator/<version>`: the API server derives
/// the managedFields manager of a write from the User-Agent when no fieldManager is given, so the
/// operator's changes to Nodes and NodeMaintenances are attributed to `node-maintenance-operator`.
fn user_agent<B>(mut req: http::Request<B>) -> http::Request<B> {
    req.headers_mut().insert(
        http::header::USER_AGENT,
        http::HeaderValue::from_static(concat!(
            "node-maintenance-operator/",
            env!("CARGO_PKG_VERSION")
        )),
    );
    req
}

/// Checks that the API server serves NodeMaintenance: one read of the discovery document of
/// `nodemaintenance.medik8s.io/v1beta1`, which the API server answers from memory. (A list
/// of the resource, even of one object, is a consistent read: kube sends no
/// `resourceVersion=0` with a `limit`, and the API server then waits for its watch cache to
/// catch up with etcd, up to 13 ms of a start at 5,000 nodes.)
///
/// # Errors
/// [`RunError::CrdMissing`] when the group version is not served (404) or is served without
/// `nodemaintenances`; any other answer is left to the watches to retry.
pub(super) async fn require_crd(client: &Client) -> Result<(), RunError> {
    use kube::Resource as _;
    let group_version = crate::api::NodeMaintenance::api_version(&());
    let plural = crate::api::NodeMaintenance::plural(&());
    match client.list_api_group_resources(&group_version).await {
        Ok(list) if !list.resources.iter().any(|r| r.name == plural) => Err(RunError::CrdMissing),
        // The code, not kube's `Status::is_not_found`: for a group it does not serve, the
        // API server answers a plain-text `404 page not found`, which kube turns into a
        // Status without the `NotFound` reason that `is_not_found` reads.
        Err(kube::Error::Api(status)) if status.code == 404 => Err(RunError::CrdMissing),
        _ => Ok(()),
    }
}

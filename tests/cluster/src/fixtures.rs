//! Fixtures shared by the end-to-end tests and the benchmarks: the manifests installed and the
//! operator's ServiceAccount ([`Installed`]), the benches' cluster ([`bench_cluster`]), the
//! operator started and registered as the API server's webhook, many kwok nodes at once.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PostParams};

use crate::operator::{
    Operator, OperatorOptions, ServiceAccountRef, install_manifests, register_webhook,
    service_account_kubeconfig,
};
use crate::{Cluster, ClusterError, Options};

/// The repository's `manifests/` installed on a cluster, and the operator's ServiceAccount with a
/// kubeconfig of its own: an operator started from [`Installed::options`] runs with exactly the
/// shipped RBAC, so every run also proves it.
#[derive(Clone, Debug)]
pub struct Installed {
    /// The ServiceAccount the manifests' Deployment runs as.
    pub account: ServiceAccountRef,
    /// A kubeconfig authenticating as that ServiceAccount.
    pub kubeconfig: PathBuf,
    /// The operator binary to start.
    pub binary: PathBuf,
}

impl Installed {
    /// Installs `manifests` (the CRD, RBAC and namespace; not the Deployment) on `cluster` and
    /// writes the ServiceAccount's kubeconfig; `binary` is the operator to start later.
    ///
    /// # Errors
    /// `kubectl apply` or the token request failed.
    pub fn new(
        cluster: &Cluster,
        manifests: &Path,
        binary: impl Into<PathBuf>,
    ) -> Result<Self, ClusterError> {
        let account = install_manifests(cluster, manifests)?;
        let kubeconfig = service_account_kubeconfig(cluster, &account)?;
        Ok(Self {
            account,
            kubeconfig,
            binary: binary.into(),
        })
    }

    /// Options to start the operator named `name` as the ServiceAccount, with `POD_NAMESPACE`
    /// set to its namespace as the manifests' Deployment sets it. Callers add flags and
    /// variables of their own.
    pub fn options(&self, name: &str) -> OperatorOptions {
        let mut opts = OperatorOptions::new(&self.binary);
        opts.name = name.to_string();
        opts.kubeconfig = Some(self.kubeconfig.clone());
        opts.env
            .push(("POD_NAMESPACE".into(), self.account.namespace.clone()));
        opts
    }
}

/// The benchmarks' cluster: one control-plane node, no worker (the benches create kwok nodes
/// of their own), the API server's audit log written with `audit_policy` when given, and
/// `manifests` installed for `binary`.
///
/// # Errors
/// The cluster did not start, or the manifests could not be installed.
pub fn bench_cluster(
    audit_policy: Option<String>,
    manifests: &Path,
    binary: impl Into<PathBuf>,
) -> Result<(Cluster, Installed), ClusterError> {
    let cluster = Cluster::start(Options {
        workers: 0,
        control_planes: 1,
        audit_policy,
    })?;
    let installed = Installed::new(&cluster, manifests, binary)?;
    Ok((cluster, installed))
}

/// A dry-run CREATE for a node that does not exist: denied with upstream's text only by our
/// webhook, so its answer proves the API server calls the registered webhook.
const WEBHOOK_PROBE: &str = r#"{"apiVersion":"nodemaintenance.medik8s.io/v1beta1","kind":"NodeMaintenance",
    "metadata":{"name":"webhook-probe"},"spec":{"nodeName":"webhook-probe-no-such-node"}}"#;

/// Waits up to `limit` until the API server calls the registered webhook (as upstream's e2e
/// BeforeSuite does).
///
/// # Errors
/// [`ClusterError::NotReady`] with the last answer seen.
pub fn wait_for_webhook(cluster: &Cluster, limit: Duration) -> Result<(), ClusterError> {
    let deadline = Instant::now() + limit;
    loop {
        let seen = match cluster.kubectl_run(
            &["create", "--dry-run=server", "-f", "-"],
            Some(WEBHOOK_PROBE),
        ) {
            Ok(out) => format!("unexpectedly admitted: {out}"),
            Err(e) => e.to_string(),
        };
        if seen.contains("no node with name webhook-probe-no-such-node found") {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(ClusterError::NotReady {
                what: "the API server calling the webhook".into(),
                seconds: limit.as_secs(),
                log: "(kubectl)".into(),
                tail: seen,
            });
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Starts the operator ([`Operator::start`]: ready on `/readyz`), registers it as the
/// ValidatingWebhookConfiguration and waits until the API server calls it.
///
/// # Errors
/// The operator did not start, or the registration or the first call failed.
pub fn start_registered(
    cluster: &Cluster,
    opts: &OperatorOptions,
) -> Result<Operator, ClusterError> {
    let op = Operator::start(cluster, opts)?;
    register_webhook(cluster, op.webhook_port)?;
    wait_for_webhook(cluster, Duration::from_secs(60))?;
    Ok(op)
}

/// Creates kwok-managed worker nodes `names` (kwok reports them Ready within seconds), with the
/// extra `labels`, 16 creates in flight at a time. Nodes that already exist are left as they
/// are.
///
/// # Errors
/// The first refusal other than AlreadyExists.
pub async fn create_kwok_nodes(
    client: &kube::Client,
    names: &[String],
    labels: &[(&str, &str)],
) -> Result<(), kube::Error> {
    let api = Api::<Node>::all(client.clone());
    futures::stream::iter(names.iter().map(|name| {
        let mut all_labels = serde_json::Map::new();
        for (k, v) in [
            ("kubernetes.io/hostname", name.as_str()),
            ("kubernetes.io/os", "linux"),
            ("kubernetes.io/arch", "amd64"),
            ("type", "kwok"),
        ]
        .into_iter()
        .chain(labels.iter().copied())
        {
            all_labels.insert(k.into(), v.into());
        }
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": name,
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": all_labels,
            },
            "status": {
                "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "1000"},
                "capacity": {"cpu": "64", "memory": "256Gi", "pods": "1000"}
            }
        }))
        .expect("a valid Node");
        let api = api.clone();
        async move {
            match api.create(&PostParams::default(), &node).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(()),
                Err(e) => Err(e),
            }
        }
    }))
    .buffer_unordered(16)
    .try_collect::<Vec<()>>()
    .await
    .map(|_| ())
}

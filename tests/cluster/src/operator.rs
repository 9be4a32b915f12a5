//! Running the operator binary against a [`Cluster`]: CRD installed, webhook serving pair issued
//! by the cluster's CA, the ValidatingWebhookConfiguration registered by URL with a `caBundle`
//! (docs/design.md §7), and readiness awaited on `/readyz`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine;

use crate::{Child, Cluster, ClusterError, free_ports, http_get};

/// The webhook path upstream registers (docs/compat.md §6).
pub const WEBHOOK_PATH: &str = "/validate-nodemaintenance-medik8s-io-v1beta1-nodemaintenance";

/// How to start one operator process.
#[derive(Clone, Debug)]
pub struct OperatorOptions {
    /// The operator executable.
    pub binary: PathBuf,
    /// Name used for the log file and messages; distinct per replica.
    pub name: String,
    /// Kubeconfig the operator uses; the admin one when `None`.
    pub kubeconfig: Option<PathBuf>,
    /// Pass `--leader-elect=true`.
    pub leader_elect: bool,
    /// More flags, appended last.
    pub extra_args: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
}

impl OperatorOptions {
    /// Defaults for `binary`: admin kubeconfig, no leader election, name `operator`.
    pub fn new(binary: impl Into<PathBuf>) -> Self {
        Self {
            binary: binary.into(),
            name: "operator".into(),
            kubeconfig: None,
            leader_elect: false,
            extra_args: Vec::new(),
            env: Vec::new(),
        }
    }
}

/// A running operator process, stopped (SIGTERM, then SIGKILL) when dropped.
pub struct Operator {
    child: Child,
    /// Port of the TLS webhook service on 127.0.0.1.
    pub webhook_port: u16,
    /// Port of the plain-HTTP metrics endpoint.
    pub metrics_port: u16,
    /// Port of the health probes.
    pub probe_port: u16,
}

impl Operator {
    /// Issues a webhook pair for 127.0.0.1 into `<cluster dir>/<name>-certs/apiserver.{crt,key}`,
    /// starts the operator on free ports, and waits up to 60 s for `/readyz`.
    ///
    /// # Errors
    /// The process exits or never becomes ready; the error carries its log tail.
    pub fn start(cluster: &Cluster, opts: &OperatorOptions) -> Result<Operator, ClusterError> {
        let cert_dir = cluster.dir().join(format!("{}-certs", opts.name));
        std::fs::create_dir_all(&cert_dir).map_err(|source| ClusterError::Io {
            context: "creating the webhook cert dir".into(),
            source,
        })?;
        let pair = cluster
            .ca()
            .issue_server(&["localhost"], &["127.0.0.1".parse().unwrap()])?;
        for (file, content) in [
            ("apiserver.crt", &pair.cert_pem),
            ("apiserver.key", &pair.key_pem),
        ] {
            std::fs::write(cert_dir.join(file), content).map_err(|source| ClusterError::Io {
                context: format!("writing {file}"),
                source,
            })?;
        }
        let ports = free_ports(3)?;
        let kubeconfig = opts
            .kubeconfig
            .clone()
            .unwrap_or_else(|| cluster.kubeconfig().to_path_buf());
        let mut cmd = Command::new(&opts.binary);
        cmd.args([
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--webhook-cert-path={}", cert_dir.display()),
            format!("--webhook-bind-address=127.0.0.1:{}", ports[0]),
            format!("--metrics-bind-address=127.0.0.1:{}", ports[1]),
            format!("--health-probe-bind-address=127.0.0.1:{}", ports[2]),
            format!("--leader-elect={}", opts.leader_elect),
        ]);
        cmd.args(&opts.extra_args);
        cmd.env(
            "RUST_LOG",
            std::env::var("NMO_TEST_LOG").unwrap_or_else(|_| "info".into()),
        );
        for (k, v) in &opts.env {
            cmd.env(k, v);
        }
        let child = cluster.spawn(&opts.name, cmd)?;
        let mut op = Operator {
            child,
            webhook_port: ports[0],
            metrics_port: ports[1],
            probe_port: ports[2],
        };
        op.wait_ready(Duration::from_secs(60))?;
        Ok(op)
    }

    /// Waits until `/readyz` answers 200.
    ///
    /// # Errors
    /// The process exited, or `limit` passed; with the log tail.
    pub fn wait_ready(&mut self, limit: Duration) -> Result<(), ClusterError> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.exited() {
                return Err(ClusterError::Exited {
                    name: self.child.name().into(),
                    status: status.to_string(),
                    log: self.child.log_path().display().to_string(),
                    tail: self.child.log_tail(40),
                });
            }
            if self
                .probe("/readyz")
                .is_some_and(|r| r.starts_with("HTTP/1.1 200") || r.starts_with("HTTP/1.0 200"))
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(ClusterError::NotReady {
                    what: format!("{} /readyz", self.child.name()),
                    seconds: limit.as_secs(),
                    log: self.child.log_path().display().to_string(),
                    tail: self.child.log_tail(40),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// GET on the probe port; the raw HTTP response.
    pub fn probe(&self, path: &str) -> Option<String> {
        http_get(("127.0.0.1", self.probe_port), path)
    }

    /// The metrics exposition text (body only).
    pub fn metrics(&self) -> Option<String> {
        let raw = http_get(("127.0.0.1", self.metrics_port), "/metrics")?;
        raw.split_once("\r\n\r\n").map(|(_, body)| body.to_string())
    }

    /// The process, to signal, kill or read its log.
    pub fn process(&mut self) -> &mut Child {
        &mut self.child
    }

    /// The operator's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.child.log_path()).unwrap_or_default()
    }
}

/// Registers the validating webhook `vnodemaintenance.kb.io` at
/// `https://127.0.0.1:<port>` + [`WEBHOOK_PATH`], trusting the cluster's CA, with upstream's
/// settings (failurePolicy Fail, sideEffects None, timeoutSeconds 15, CREATE and UPDATE).
///
/// # Errors
/// kubectl's error.
pub fn register_webhook(cluster: &Cluster, port: u16) -> Result<(), ClusterError> {
    let ca = base64::engine::general_purpose::STANDARD.encode(cluster.ca().cert_pem());
    let manifest = format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: node-maintenance-operator-validating-webhook-configuration
webhooks:
- name: vnodemaintenance.kb.io
  admissionReviewVersions: ["v1"]
  sideEffects: None
  failurePolicy: Fail
  timeoutSeconds: 15
  clientConfig:
    url: https://127.0.0.1:{port}{WEBHOOK_PATH}
    caBundle: {ca}
  rules:
  - apiGroups: ["nodemaintenance.medik8s.io"]
    apiVersions: ["v1beta1"]
    resources: ["nodemaintenances"]
    operations: ["CREATE", "UPDATE"]
    scope: "*"
"#
    );
    cluster.kubectl_run(&["apply", "-f", "-"], Some(&manifest))?;
    Ok(())
}

/// The kinds of `manifests/` that the tests install: everything the operator needs to run as
/// its ServiceAccount, but not the Deployment, Services or webhook configuration, which the
/// tests replace with a local process and a URL registration.
pub const INSTALLED_KINDS: &[&str] = &[
    "Namespace",
    "CustomResourceDefinition",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
];

/// The ServiceAccount the manifests declare: `(namespace, name)`.
#[derive(Clone, Debug)]
pub struct ServiceAccountRef {
    /// Namespace of the ServiceAccount (the operator's namespace).
    pub namespace: String,
    /// Name of the ServiceAccount.
    pub name: String,
}

/// Renders `manifests/` with `kubectl kustomize`, applies the [`INSTALLED_KINDS`], waits for the
/// CRD, and returns the ServiceAccount the operator runs as.
///
/// # Errors
/// kubectl's errors; a rendering without exactly one ServiceAccount.
pub fn install_manifests(
    cluster: &Cluster,
    manifests: &Path,
) -> Result<ServiceAccountRef, ClusterError> {
    let rendered = cluster.kubectl_run(&["kustomize", &manifests.display().to_string()], None)?;
    let mut keep = Vec::new();
    let mut accounts = Vec::new();
    for doc in rendered.split("\n---\n") {
        let kind = doc
            .lines()
            .find_map(|l| l.strip_prefix("kind: "))
            .unwrap_or("")
            .trim();
        if !INSTALLED_KINDS.contains(&kind) {
            continue;
        }
        if kind == "ServiceAccount" {
            let meta = |key: &str| {
                doc.lines()
                    .skip_while(|l| !l.starts_with("metadata:"))
                    .find_map(|l| {
                        l.strip_prefix(&format!("  {key}: "))
                            .map(|v| v.trim().to_string())
                    })
                    .unwrap_or_default()
            };
            accounts.push(ServiceAccountRef {
                namespace: meta("namespace"),
                name: meta("name"),
            });
        }
        keep.push(doc.trim_start_matches("---\n").to_string());
    }
    let [account] =
        <[ServiceAccountRef; 1]>::try_from(accounts).map_err(|found| ClusterError::Kubectl {
            args: format!("kustomize {}", manifests.display()),
            stderr: format!("expected exactly one ServiceAccount, found {found:?}"),
        })?;
    cluster.kubectl_run(
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        Some(&keep.join("\n---\n")),
    )?;
    cluster.kubectl_run(
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/nodemaintenances.nodemaintenance.medik8s.io",
        ],
        None,
    )?;
    Ok(account)
}

/// A kubeconfig that authenticates as `account` (a client certificate for
/// `system:serviceaccount:<ns>:<name>` in group `system:serviceaccounts`, which RBAC treats exactly
/// as the ServiceAccount), so the operator has only what the manifests grant.
///
/// # Errors
/// Certificate or file errors.
pub fn service_account_kubeconfig(
    cluster: &Cluster,
    account: &ServiceAccountRef,
) -> Result<PathBuf, ClusterError> {
    cluster.write_user_kubeconfig(
        &format!("sa-{}", account.name),
        &format!(
            "system:serviceaccount:{}:{}",
            account.namespace, account.name
        ),
        "system:serviceaccounts",
    )
}

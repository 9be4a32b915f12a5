//! KubeVirt without a hypervisor, with real API machinery, for the evacuation tests
//! (`tests/evacuation.rs`) and the `evacuating` benchmark (`benches/maintenance.rs`): KubeVirt's
//! `VirtualMachineInstance` and `VirtualMachineInstanceMigration` CRDs
//! (`tests/fixtures/kubevirt-crds.yaml`, [`install_crds`]), the stand-in
//! (`tests/cluster/kubevirt-standin`, Go, client-go; [`Standin`]) registered as the validating
//! webhook on `pods/eviction` of the namespaces labelled [`NAMESPACE_LABEL`], where it answers
//! as virt-api's pod eviction admitter does and plays the migration controller, and running VMIs
//! with their launcher pods ([`vm`]).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use crate::{Child, Cluster, ClusterError};

/// The label (value `on`) of the namespaces whose evictions the stand-in answers.
pub const NAMESPACE_LABEL: &str = "e2e-kubevirt";
/// The Service name the stand-in's serving certificate is issued for
/// (`<name>.default.svc`), for a `subresources.kubevirt.io/v1` APIService in `default`.
pub const SUBRESOURCES_SERVICE: &str = "kubevirt-standin";
/// A launcher pod's own migration time (a Go duration), overriding the stand-in's.
pub const MIGRATION_TIME_ANNOTATION: &str = "e2e.medik8s.io/migration-time";

/// Applies KubeVirt's VMI and migration CRDs (`tests/fixtures/kubevirt-crds.yaml`) and waits
/// until both are Established. Start the operator afterwards: it discovers KubeVirt at start.
///
/// # Errors
/// kubectl's, naming the command.
pub fn install_crds(cluster: &Cluster) -> Result<(), ClusterError> {
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/kubevirt-crds.yaml");
    cluster.kubectl_run(&["apply", "-f", &crds.display().to_string()], None)?;
    cluster.kubectl_run(
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/virtualmachineinstances.kubevirt.io",
            "crd/virtualmachineinstancemigrations.kubevirt.io",
        ],
        None,
    )?;
    Ok(())
}

/// The stand-in process, a component of its cluster (stopped with it), with its webhook
/// registered as the ValidatingWebhookConfiguration `kubevirt-standin`.
pub struct Standin {
    _child: Mutex<Child>,
    /// Its HTTPS port on 127.0.0.1 (the webhook, and `subresources.kubevirt.io/v1`).
    pub port: u16,
    /// The CA of its serving certificate (PEM).
    pub ca_pem: String,
    log: PathBuf,
}

impl Standin {
    /// Builds the stand-in (`build-kubevirt-standin.sh`, cached), starts it on a free port with
    /// a serving certificate for 127.0.0.1 and [`SUBRESOURCES_SERVICE`], each migration taking
    /// `migration_time` (a Go duration; [`MIGRATION_TIME_ANNOTATION`] overrides it per pod),
    /// waits until it listens (30 s) and registers its webhook (`failurePolicy: Fail`).
    ///
    /// # Errors
    /// The build, the certificate, the process or the registration failed; a stand-in that does
    /// not listen in 30 s, with its log.
    ///
    /// # Panics
    /// When the build script fails ([`crate::go_tool`]).
    pub async fn start(cluster: &Cluster, migration_time: &str) -> Result<Standin> {
        let bin = crate::go_tool("build-kubevirt-standin.sh");
        let ca = nmo_certs::Ca::new("kubevirt-standin-ca")?;
        // The aggregation layer checks the certificate for the Service's DNS name.
        let pair = ca.issue_server(
            &[&format!("{SUBRESOURCES_SERVICE}.default.svc")],
            &["127.0.0.1".parse()?],
        )?;
        let dir = cluster.dir().join("kubevirt-standin");
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("tls.crt"), &pair.cert_pem)?;
        std::fs::write(dir.join("tls.key"), &pair.key_pem)?;
        let port = crate::free_ports(1)?[0];
        let mut cmd = std::process::Command::new(bin);
        cmd.arg(format!("--kubeconfig={}", cluster.kubeconfig().display()))
            .arg(format!("--addr=127.0.0.1:{port}"))
            .arg(format!("--cert={}", dir.join("tls.crt").display()))
            .arg(format!("--key={}", dir.join("tls.key").display()))
            .arg(format!("--migration-time={migration_time}"));
        let child = cluster.spawn("kubevirt-standin", cmd)?;
        let log = child.log_path().to_path_buf();
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            ensure!(
                Instant::now() < deadline,
                "the stand-in did not listen: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        use base64::Engine;
        let config: ValidatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": {"name": "kubevirt-standin"},
            "webhooks": [{
                "name": "virt-launcher-eviction-interceptor.kubevirt.io",
                "clientConfig": {
                    "url": format!("https://127.0.0.1:{port}/evict"),
                    "caBundle": base64::engine::general_purpose::STANDARD.encode(ca.cert_pem()),
                },
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                           "resources": ["pods/eviction"], "scope": "Namespaced"}],
                "namespaceSelector": {"matchLabels": {NAMESPACE_LABEL: "on"}},
                "failurePolicy": "Fail",
                "sideEffects": "NoneOnDryRun",
                "timeoutSeconds": 10,
                "admissionReviewVersions": ["v1"]
            }]
        }))?;
        Api::<ValidatingWebhookConfiguration>::all(cluster.client().await)
            .create(&PostParams::default(), &config)
            .await
            .context("registering the stand-in's webhook")?;
        Ok(Standin {
            _child: Mutex::new(child),
            port,
            ca_pem: ca.cert_pem().to_string(),
            log,
        })
    }

    /// Its log: one JSON line per admission and step.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The lines of its log whose `event` is `event` (`admission`, `evacuation`, `migration`,
    /// `deleted`, `cancel`, `error`), in order.
    pub fn events(&self, event: &str) -> Vec<serde_json::Value> {
        self.log()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["event"] == event)
            .collect()
    }
}

/// Labels namespace `ns` so the stand-in answers the evictions of its pods.
///
/// # Errors
/// The API server's.
pub async fn label_namespace(client: &kube::Client, ns: &str) -> Result<(), kube::Error> {
    Api::<Namespace>::all(client.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {NAMESPACE_LABEL: "on"}}})),
        )
        .await
        .map(|_| ())
}

/// The `VirtualMachineInstance`s of namespace `ns`.
pub fn vmi_api(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "kubevirt.io",
        "v1",
        "VirtualMachineInstance",
    ));
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// A running VMI `name` on `node` with eviction strategy `LiveMigrate`, live-migratable or not
/// (its `LiveMigratable` condition), and its launcher pod `virt-launcher-<name>` (label
/// `kubevirt.io=virt-launcher`, controlled by the VMI, no grace period) whose migration takes
/// `migration_time` (a Go duration). Returns the pod's name.
///
/// # Errors
/// The API server's.
pub async fn vm(
    client: &kube::Client,
    ns: &str,
    name: &str,
    node: &str,
    migratable: bool,
    migration_time: &str,
) -> Result<String, kube::Error> {
    let api = vmi_api(client, ns);
    let vmi: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": name},
        "spec": {"evictionStrategy": "LiveMigrate", "domain": {"devices": {}}}
    }))
    .expect("a VMI");
    let vmi = api.create(&PostParams::default(), &vmi).await?;
    let condition = if migratable {
        json!({"type": "LiveMigratable", "status": "True"})
    } else {
        json!({"type": "LiveMigratable", "status": "False", "reason": "DisksNotLiveMigratable"})
    };
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"nodeName": node, "phase": "Running",
                                        "conditions": [condition]}})),
    )
    .await?;
    let pod = format!("virt-launcher-{name}");
    let launcher: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": pod,
            "labels": {"app": pod, "kubevirt.io": "virt-launcher"},
            "annotations": {MIGRATION_TIME_ANNOTATION: migration_time},
            "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                                 "name": name, "uid": vmi.metadata.uid,
                                 "controller": true, "blockOwnerDeletion": true}]
        },
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]
        }
    }))
    .expect("a launcher pod");
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &launcher)
        .await?;
    Ok(pod)
}

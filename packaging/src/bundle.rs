//! Renders the OLM bundle (`bundle/`, `bundle.Dockerfile`) from the same sources as the
//! kustomize install: the output of `kubectl kustomize manifests/overlays/monitoring/secure` and
//! `manifests/crd.yaml`. There is one definition of the RBAC, the Deployment and the webhook
//! registration (under `manifests/`); this module only re-shapes it into OLM's terms, so the two
//! ways of installing cannot drift apart (`tests/bundle.rs` checks both the files and the
//! equivalence). `packaging/src/bin/bundlegen.rs` writes the files; see `docs/compat.md §11`.
//!
//! The mapping, and the only differences from the kustomize rendering:
//!
//! - The Deployment goes into the ClusterServiceVersion's install strategy unchanged except that
//!   Secret volumes and their mounts are dropped: OLM issues the webhook serving pair itself and
//!   mounts it at `/apiserver.local.config/certificates`, the operator's default
//!   `--webhook-cert-path`.
//! - Roles bound to the Deployment's ServiceAccount in the Deployment's namespace become
//!   `permissions`; ClusterRoles bound to it become `clusterPermissions`. A Role in another
//!   namespace (the medik8s leases, events in `default`) cannot be expressed by OLM, which
//!   creates namespaced permissions only in the install namespace, so its rules become cluster
//!   wide `clusterPermissions` (the same verbs on the same resources, in every namespace).
//! - The ValidatingWebhookConfiguration becomes a `webhookdefinitions` entry; OLM creates the
//!   webhook Service (`<deployment>-service`) from its `containerPort`/`targetPort`, taken from
//!   the Service the configuration points at.
//! - Namespaces are not shipped (OLM installs into a namespace the admin chooses; the operator
//!   creates the medik8s lease namespace when missing). Unbound ClusterRoles (the metrics reader)
//!   and the remaining Services (metrics) are shipped as plain bundle manifests, and so are the
//!   monitoring objects (PrometheusRule, ServiceMonitor, the dashboard ConfigMap) and bindings
//!   for other accounts (Prometheus' metrics reader).
//! - The uncordon-warning ValidatingAdmissionPolicy and its binding are not shipped: a
//!   registry+v1 bundle carries only a fixed list of kinds, and these are not among them
//!   (docs/compat.md §2).
//! - The file-based catalog (`catalog/`) is rendered from the same CSV ([`catalog`]).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value, json};

/// OLM package name of the bundle (distinct from upstream's `node-maintenance-operator`, so
/// both can sit in one catalog; the CRD and every in-cluster name are upstream's).
pub const PACKAGE: &str = "node-maintenance-operator-rs";
/// The bundle's only channel, also its default channel.
pub(crate) const CHANNEL: &str = "stable";
/// Oldest Kubernetes the CSV admits: every API the operator calls is GA there (policy/v1
/// evictions and PodDisruptionBudgets, events.k8s.io/v1, coordination.k8s.io/v1) and Pod Security
/// admission's `restricted` level, which the pod spec meets, is enforced.
pub const MIN_KUBE_VERSION: &str = "1.25.0";
/// Where the rendered manifests come from, for messages and the generated files' headers: the
/// metrics-secure install with its monitoring (alerts, ServiceMonitor, dashboard).
pub const SOURCE_OVERLAY: &str = "manifests/overlays/monitoring/secure";
/// The bundle image the catalog points at (`bundle.Dockerfile`), tagged `v<version>`.
pub const BUNDLE_IMAGE: &str = "quay.io/medik8s/node-maintenance-operator-rs-bundle";
/// This project's source repository, the root Cargo.toml's `[workspace.package] repository`
/// (the one setting, inherited by this crate and the operator's; a placeholder until the project
/// has a public host): the CSV's `repository` annotation and its
/// "Source Code" link, the chart's `home` and `sources`, and the prefix of the alerts' runbook
/// links ([`runbook_url`]).
pub const REPOSITORY: &str = env!("CARGO_PKG_REPOSITORY");

/// The runbook link of `alert`: its page under `docs/runbooks/` in [`REPOSITORY`].
pub fn runbook_url(alert: &str) -> String {
    format!("{REPOSITORY}/blob/main/docs/runbooks/{alert}.md")
}

/// The namespace OperatorHub suggests, upstream's: the one the other medik8s operators share on
/// OpenShift.
pub const SUGGESTED_NAMESPACE: &str = "openshift-workload-availability";

/// The annotation keys of `metadata/annotations.yaml`, which `bundle.Dockerfile` repeats as
/// image labels (OLM reads either).
pub(crate) fn bundle_annotations() -> Vec<(&'static str, &'static str)> {
    vec![
        (
            "operators.operatorframework.io.bundle.mediatype.v1",
            "registry+v1",
        ),
        (
            "operators.operatorframework.io.bundle.manifests.v1",
            "manifests/",
        ),
        (
            "operators.operatorframework.io.bundle.metadata.v1",
            "metadata/",
        ),
        ("operators.operatorframework.io.bundle.package.v1", PACKAGE),
        ("operators.operatorframework.io.bundle.channels.v1", CHANNEL),
        (
            "operators.operatorframework.io.bundle.channel.default.v1",
            CHANNEL,
        ),
    ]
}

/// Errors of [`render`]; each names the object or field that does not fit the mapping.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// The input is not a YAML stream of objects.
    #[error("cannot parse the rendered manifests: {0}")]
    Parse(String),
    /// The input does not have the shape the mapping needs.
    #[error("{0}")]
    Shape(String),
}

fn shape(msg: impl Into<String>) -> BundleError {
    BundleError::Shape(msg.into())
}

/// One generated file: its path relative to the repository root and its content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleFile {
    /// Path relative to the repository root, e.g. `bundle/metadata/annotations.yaml`.
    pub path: String,
    /// The file's text.
    pub content: String,
}

/// Parses a multi-document YAML stream into its non-empty documents.
///
/// # Errors
/// [`BundleError::Parse`] with the parser's message.
pub fn parse_documents(text: &str) -> Result<Vec<Value>, BundleError> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).map_err(|e| BundleError::Parse(e.to_string())))
        .filter(|v| !matches!(v, Ok(Value::Null)))
        .collect()
}

fn kind(doc: &Value) -> &str {
    doc["kind"].as_str().unwrap_or_default()
}

fn name(doc: &Value) -> &str {
    doc["metadata"]["name"].as_str().unwrap_or_default()
}

fn namespace(doc: &Value) -> &str {
    doc["metadata"]["namespace"].as_str().unwrap_or_default()
}

fn one<'a>(docs: &'a [Value], k: &str) -> Result<&'a Value, BundleError> {
    let found: Vec<&Value> = docs.iter().filter(|d| kind(d) == k).collect();
    match found.as_slice() {
        [d] => Ok(d),
        other => Err(shape(format!(
            "expected exactly one {k} in the rendered manifests, found {}",
            other.len()
        ))),
    }
}

/// The Deployment's pod spec as OLM installs it: Secret volumes and their mounts removed (OLM
/// mounts its own serving pair for the webhook).
pub(crate) fn olm_deployment_spec(deployment: &Value) -> Value {
    let mut spec = deployment["spec"].clone();
    let pod = &mut spec["template"]["spec"];
    let secret_volumes: Vec<String> = pod["volumes"]
        .as_array()
        .map(|v| {
            v.iter()
                .filter(|v| v.get("secret").is_some())
                .filter_map(|v| v["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    // `get_mut`, not indexing: `IndexMut` would insert a null for an absent field.
    if let Some(volumes) = pod.get_mut("volumes").and_then(Value::as_array_mut) {
        volumes.retain(|v| v.get("secret").is_none());
    }
    for list in ["containers", "initContainers"] {
        if let Some(containers) = pod.get_mut(list).and_then(Value::as_array_mut) {
            for c in containers {
                if let Some(mounts) = c.get_mut("volumeMounts").and_then(Value::as_array_mut) {
                    mounts.retain(|m| {
                        !secret_volumes
                            .iter()
                            .any(|s| m["name"].as_str() == Some(s.as_str()))
                    });
                }
            }
        }
    }
    spec
}

/// Whether the binding `b` names the ServiceAccount `account` (`namespace`, `name`).
fn binds(b: &Value, account: (&str, &str)) -> bool {
    b["subjects"].as_array().is_some_and(|s| {
        s.iter().any(|s| {
            s["kind"].as_str() == Some("ServiceAccount")
                && s["name"].as_str() == Some(account.1)
                && s["namespace"].as_str() == Some(account.0)
        })
    })
}

/// RBAC of the rendered manifests, split the way OLM grants it (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct SplitRbac {
    /// Rules for the install namespace (CSV `permissions`).
    pub permissions: Vec<Value>,
    /// Cluster-wide rules (CSV `clusterPermissions`).
    pub cluster_permissions: Vec<Value>,
    /// ClusterRoles bound to nobody, shipped as plain bundle objects.
    pub unbound_cluster_roles: Vec<Value>,
}

/// RBAC of the rendered manifests for `account` (`namespace`, `name`), split the way OLM grants
/// it. See the module documentation for the rule.
///
/// # Errors
/// A binding that names a missing role; a Role that nothing binds to the account.
pub(crate) fn split_rbac(docs: &[Value], account: (&str, &str)) -> Result<SplitRbac, BundleError> {
    let binds_account = |b: &Value| binds(b, account);
    let role = |k: &str, ns: &str, n: &str| {
        docs.iter()
            .find(|d| kind(d) == k && name(d) == n && (k == "ClusterRole" || namespace(d) == ns))
            .ok_or_else(|| shape(format!("binding refers to a missing {k} {ns}/{n}")))
    };
    let rules = |r: &Value| r["rules"].as_array().cloned().unwrap_or_default();
    let mut permissions = Vec::new();
    let mut cluster = Vec::new();
    let mut bound = Vec::new();
    for b in docs.iter().filter(|d| binds_account(d)) {
        let ref_kind = b["roleRef"]["kind"].as_str().unwrap_or_default();
        let ref_name = b["roleRef"]["name"].as_str().unwrap_or_default();
        let r = role(ref_kind, namespace(b), ref_name)?;
        bound.push((
            ref_kind.to_string(),
            namespace(r).to_string(),
            ref_name.to_string(),
        ));
        match (kind(b), ref_kind) {
            ("RoleBinding", "Role") if namespace(b) == account.0 => permissions.extend(rules(r)),
            // A Role elsewhere, or a ClusterRole bound in one namespace: OLM can only grant it
            // cluster wide.
            ("RoleBinding" | "ClusterRoleBinding", _) => cluster.extend(rules(r)),
            (other, _) => return Err(shape(format!("unexpected binding kind {other}"))),
        }
    }
    let mut unbound = Vec::new();
    for r in docs
        .iter()
        .filter(|d| matches!(kind(d), "Role" | "ClusterRole"))
    {
        let key = (
            kind(r).to_string(),
            namespace(r).to_string(),
            name(r).to_string(),
        );
        if bound.contains(&key) {
            continue;
        }
        if kind(r) == "Role" {
            return Err(shape(format!(
                "Role {}/{} is bound to nothing; OLM cannot ship a namespaced Role on its own",
                namespace(r),
                name(r)
            )));
        }
        unbound.push(r.clone());
    }
    Ok(SplitRbac {
        permissions,
        cluster_permissions: cluster,
        unbound_cluster_roles: unbound,
    })
}

/// Splits `drainProgress` into `Drain Progress` (an OLM display name). Upstream's `totalpods`
/// is the one field whose JSON name hides its word boundary.
fn display_name(field: &str) -> String {
    if field == "totalpods" {
        return "Total Pods".into();
    }
    let mut out = String::new();
    for (i, c) in field.chars().enumerate() {
        if i == 0 {
            out.extend(c.to_uppercase());
        } else if c.is_uppercase() {
            out.push(' ');
            out.push(c);
        } else {
            out.push(c);
        }
    }
    out
}

/// OLM descriptors of the top-level properties of `spec` or `status` in the CRD's served
/// version: path, display name, and the schema's own description.
fn descriptors(schema: &Value, part: &str) -> Vec<Value> {
    schema["properties"][part]["properties"]
        .as_object()
        .map(|props| {
            props
                .iter()
                .map(|(field, s)| {
                    json!({
                        "path": field,
                        "displayName": display_name(field),
                        "description": s["description"].as_str().unwrap_or_default(),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// An icon of our own (a node with a wrench), as SVG.
const ICON_SVG: &str = r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 64 64"><rect x="6" y="10" width="52" height="36" rx="4" fill="#326ce5"/><rect x="12" y="16" width="40" height="6" rx="2" fill="#fff"/><rect x="12" y="26" width="40" height="6" rx="2" fill="#fff"/><path d="M40 38l10 10a4 4 0 0 1-6 6L34 44a9 9 0 1 1 6-6z" fill="#f5a623" stroke="#222" stroke-width="2"/><rect x="20" y="50" width="24" height="6" rx="2" fill="#326ce5"/></svg>"##;

/// The ClusterServiceVersion, as a JSON value.
///
/// # Errors
/// [`BundleError::Shape`] when the rendered manifests lack a piece the CSV needs (exactly one
/// Deployment, CRD version, ValidatingWebhookConfiguration, the Service it points at).
pub(crate) fn cluster_service_version(
    docs: &[Value],
    crd: &Value,
    version: &str,
) -> Result<Value, BundleError> {
    use base64::Engine;
    let deployment = one(docs, "Deployment")?;
    let dep_name = name(deployment);
    let dep_ns = namespace(deployment);
    let pod = &deployment["spec"]["template"]["spec"];
    let account = pod["serviceAccountName"]
        .as_str()
        .ok_or_else(|| shape("the Deployment names no serviceAccountName"))?;
    let SplitRbac {
        permissions,
        cluster_permissions,
        ..
    } = split_rbac(docs, (dep_ns, account))?;
    let image = pod["containers"][0]["image"].as_str().unwrap_or_default();

    let versions = crd["spec"]["versions"]
        .as_array()
        .ok_or_else(|| shape("the CRD has no versions"))?;
    let served = versions
        .iter()
        .find(|v| v["storage"].as_bool() == Some(true))
        .ok_or_else(|| shape("the CRD has no storage version"))?;
    let crd_kind = crd["spec"]["names"]["kind"].as_str().unwrap_or_default();
    let schema = &served["schema"]["openAPIV3Schema"];
    let owned = json!({
        "name": crd["metadata"]["name"],
        "version": served["name"],
        "kind": crd_kind,
        "displayName": display_name(crd_kind),
        "description": schema["description"],
        // The native resources the controller works with, at the API versions it calls. Naming
        // Event and PodDisruptionBudget at v1 is also what tells operator-framework's removed-API
        // check that the RBAC rules for them are not about the v1beta1 APIs removed in 1.25.
        "resources": [
            {"kind": "Node", "name": "nodes", "version": "v1"},
            {"kind": "Pod", "name": "pods", "version": "v1"},
            {"kind": "PodDisruptionBudget", "name": "poddisruptionbudgets", "version": "v1"},
            {"kind": "Lease", "name": "leases", "version": "v1"},
            {"kind": "Event", "name": "events", "version": "v1"},
        ],
        "specDescriptors": descriptors(schema, "spec"),
        "statusDescriptors": descriptors(schema, "status"),
    });

    let vwc = one(docs, "ValidatingWebhookConfiguration")?;
    let mut webhooks = Vec::new();
    for w in vwc["webhooks"].as_array().into_iter().flatten() {
        let svc_ref = &w["clientConfig"]["service"];
        let svc = docs
            .iter()
            .find(|d| {
                kind(d) == "Service"
                    && Some(name(d)) == svc_ref["name"].as_str()
                    && Some(namespace(d)) == svc_ref["namespace"].as_str()
            })
            .ok_or_else(|| shape(format!("webhook {} points at a missing Service", w["name"])))?;
        let port = svc_ref["port"].as_u64().unwrap_or(443);
        let svc_port = svc["spec"]["ports"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["port"].as_u64() == Some(port)))
            .ok_or_else(|| shape(format!("Service {} has no port {port}", name(svc))))?;
        webhooks.push(json!({
            "type": "ValidatingAdmissionWebhook",
            "generateName": w["name"],
            "deploymentName": dep_name,
            "containerPort": port,
            "targetPort": svc_port["targetPort"],
            "webhookPath": svc_ref["path"],
            "admissionReviewVersions": w["admissionReviewVersions"],
            "sideEffects": w["sideEffects"],
            "failurePolicy": w["failurePolicy"],
            "timeoutSeconds": w["timeoutSeconds"],
            "rules": w["rules"],
        }));
    }

    let sample = json!([{
        "apiVersion": format!("{}/{}", crd["spec"]["group"].as_str().unwrap_or_default(), served["name"].as_str().unwrap_or_default()),
        "kind": crd_kind,
        "metadata": {"name": "nodemaintenance-sample"},
        "spec": {"nodeName": "node02", "reason": "Test node maintenance"},
    }]);
    let mut install_modes = Vec::new();
    for (mode, supported) in [
        ("OwnNamespace", false),
        ("SingleNamespace", false),
        ("MultiNamespace", false),
        ("AllNamespaces", true),
    ] {
        install_modes.push(json!({"type": mode, "supported": supported}));
    }
    let grant = |rules: Vec<Value>| {
        if rules.is_empty() {
            json!([])
        } else {
            json!([{"serviceAccountName": account, "rules": rules}])
        }
    };
    Ok(json!({
        "apiVersion": "operators.coreos.com/v1alpha1",
        "kind": "ClusterServiceVersion",
        "metadata": {
            "name": format!("{PACKAGE}.v{version}"),
            "annotations": {
                "alm-examples": serde_json::to_string_pretty(&sample).expect("JSON"),
                "capabilities": "Basic Install",
                "categories": "OpenShift Optional",
                "containerImage": image,
                "description": "Keeps a node cordoned, tainted and drained while a NodeMaintenance exists; a drop-in for the medik8s Node Maintenance Operator.",
                "repository": REPOSITORY,
                "support": "Medik8s",
                // Every earlier version of this package upgrades straight to this one.
                "olm.skipRange": format!("<{version}"),
                "operatorframework.io/suggested-namespace": SUGGESTED_NAMESPACE,
                // Upstream's template, plus the label that lets OpenShift's cluster monitoring
                // read the bundle's ServiceMonitor and PrometheusRule in an openshift-* namespace.
                "operatorframework.io/suggested-namespace-template": serde_json::to_string(&json!({
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {
                        "name": SUGGESTED_NAMESPACE,
                        "annotations": {"openshift.io/node-selector": ""},
                        "labels": {"openshift.io/cluster-monitoring": "true"},
                    },
                })).expect("JSON"),
                // OpenShift's infrastructure features (upstream declares the same keys): the one
                // image is listed in relatedImages, so mirroring works disconnected; no proxy
                // settings are read; rustls/ring is not a FIPS-validated module; no cloud token.
                "features.operators.openshift.io/disconnected": "true",
                "features.operators.openshift.io/fips-compliant": "false",
                "features.operators.openshift.io/proxy-aware": "false",
                "features.operators.openshift.io/tls-profiles": "true",
                "features.operators.openshift.io/token-auth-aws": "false",
                "features.operators.openshift.io/token-auth-azure": "false",
                "features.operators.openshift.io/token-auth-gcp": "false",
            },
        },
        "spec": {
            "displayName": "Node Maintenance Operator (Rust)",
            "description": concat!(
                "Puts a node into maintenance for as long as a NodeMaintenance object names it: ",
                "the node is cordoned, tainted `medik8s.io/drain:NoSchedule`, excluded from ",
                "remediation and drained through the Eviction API, honouring ",
                "PodDisruptionBudgets. Deleting the NodeMaintenance restores the node as it was.\n\n",
                "It serves the same API (`nodemaintenance.medik8s.io/v1beta1`), finalizer, taints, ",
                "lease and events as the medik8s Node Maintenance Operator, so NodeHealthCheck and ",
                "other tooling keep working. Metrics are served over HTTPS on port 8443 to ",
                "clients whose token may GET `/metrics` (bind the `metrics-reader` ClusterRole).\n"
            ),
            "version": version,
            "minKubeVersion": MIN_KUBE_VERSION,
            "maturity": "alpha",
            "keywords": ["medik8s", "node-maintenance", "drain", "cordon"],
            "links": [
                {"name": "Source Code", "url": REPOSITORY},
            ],
            "maintainers": [{"name": "Medik8s Team", "email": "medik8s@googlegroups.com"}],
            "provider": {"name": "Medik8s", "url": "https://github.com/medik8s"},
            "icon": [{
                "base64data": base64::engine::general_purpose::STANDARD.encode(ICON_SVG),
                "mediatype": "image/svg+xml",
            }],
            "installModes": install_modes,
            "customresourcedefinitions": {"owned": [owned]},
            "install": {
                "strategy": "deployment",
                "spec": {
                    "deployments": [{
                        "name": dep_name,
                        "label": deployment["metadata"]["labels"],
                        "spec": olm_deployment_spec(deployment),
                    }],
                    "permissions": grant(permissions),
                    "clusterPermissions": grant(cluster_permissions),
                },
            },
            "webhookdefinitions": webhooks,
            "relatedImages": [{"name": "manager", "image": image}],
        },
    }))
}

/// A bundle manifest for a plain object: the object without its namespace (OLM creates it in
/// the install namespace).
fn plain_object(doc: &Value) -> Value {
    let mut d = doc.clone();
    if let Some(meta) = d["metadata"].as_object_mut() {
        meta.remove("namespace");
    }
    d
}

/// operator-sdk's file name for a bundle object: `<name>_<group>_<version>_<kind>.yaml`.
fn object_file_name(doc: &Value) -> String {
    let api = doc["apiVersion"].as_str().unwrap_or_default();
    let (group, ver) = api.split_once('/').unwrap_or(("", api));
    let group = if group.is_empty() {
        String::new()
    } else {
        format!("{group}_")
    };
    format!(
        "{}_{group}{ver}_{}.yaml",
        name(doc),
        kind(doc).to_lowercase()
    )
}

fn to_yaml(v: &Value) -> String {
    serde_yaml::to_string(v).expect("a JSON value serializes to YAML")
}

/// Renders every bundle file from `rendered` (the output of `kubectl kustomize
/// manifests/overlays/monitoring/secure`), `crd_yaml` (the text of `manifests/crd.yaml`, shipped
/// verbatim) and the operator `version` (semver, e.g. `0.1.0`).
///
/// # Errors
/// [`BundleError`] when the input cannot be parsed or does not fit the mapping.
pub fn render(
    rendered: &str,
    crd_yaml: &str,
    version: &str,
) -> Result<Vec<BundleFile>, BundleError> {
    let docs = parse_documents(rendered)?;
    let crd = parse_documents(crd_yaml)?
        .into_iter()
        .next()
        .ok_or_else(|| shape("manifests/crd.yaml is empty"))?;
    let crd_name = crd["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let csv = cluster_service_version(&docs, &crd, version)?;
    let deployment = one(&docs, "Deployment")?;
    let account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .unwrap_or_default();
    let unbound = split_rbac(&docs, (namespace(deployment), account))?.unbound_cluster_roles;
    let vwc = one(&docs, "ValidatingWebhookConfiguration")?;
    let webhook_services: Vec<&str> = vwc["webhooks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| w["clientConfig"]["service"]["name"].as_str())
        .collect();

    let mut files = vec![
        BundleFile {
            path: format!("bundle/manifests/{PACKAGE}.clusterserviceversion.yaml"),
            content: to_yaml(&csv),
        },
        BundleFile {
            path: format!("bundle/manifests/{crd_name}.yaml"),
            content: crd_yaml.to_string(),
        },
    ];
    let mut extra: BTreeMap<String, Value> = BTreeMap::new();
    for svc in docs
        .iter()
        .filter(|d| kind(d) == "Service" && !webhook_services.contains(&name(d)))
    {
        extra.insert(object_file_name(svc), plain_object(svc));
    }
    for role in &unbound {
        extra.insert(object_file_name(role), plain_object(role));
    }
    // Monitoring (OLM ships these kinds as they are): alerts, ServiceMonitor, dashboard, and
    // the bindings that are not the operator's own (Prometheus' metrics reader).
    for doc in docs.iter().filter(|d| {
        matches!(kind(d), "PrometheusRule" | "ServiceMonitor" | "ConfigMap")
            || (kind(d) == "ClusterRoleBinding" && !binds(d, (namespace(deployment), account)))
    }) {
        extra.insert(object_file_name(doc), plain_object(doc));
    }
    for (file, doc) in extra {
        files.push(BundleFile {
            path: format!("bundle/manifests/{file}"),
            content: to_yaml(&doc),
        });
    }
    let annotations: Map<String, Value> = bundle_annotations()
        .into_iter()
        .map(|(k, v)| (k.to_string(), Value::from(v)))
        .collect();
    files.push(BundleFile {
        path: "bundle/metadata/annotations.yaml".into(),
        content: to_yaml(&json!({"annotations": annotations})),
    });
    let mut dockerfile = String::from(
        "# The OLM bundle image: `docker build -f bundle.Dockerfile -t <bundle image> .`\n\
         # Generated by `cargo run -p nmo-packaging --bin bundlegen`; labels repeat bundle/metadata/annotations.yaml.\n\
         FROM scratch\n\n",
    );
    for (k, v) in bundle_annotations() {
        dockerfile.push_str(&format!("LABEL {k}={v}\n"));
    }
    dockerfile.push_str("\nCOPY bundle/manifests /manifests/\nCOPY bundle/metadata /metadata/\n");
    files.push(BundleFile {
        path: "bundle.Dockerfile".into(),
        content: dockerfile,
    });
    files.extend(catalog(&csv, &crd, version));
    Ok(files)
}

/// Where the file-based catalog lives: `catalog/<package>/catalog.yaml`.
pub const CATALOG_DIR: &str = "catalog";

/// The file-based catalog (for an OLM v1 `ClusterCatalog`) of this bundle: the `olm.package`, its `stable` channel with this version (upgrading from
/// every earlier one: the CSV's `olm.skipRange`) and the `olm.bundle` at [`BUNDLE_IMAGE`],
/// with the properties `opm render` gives a registry+v1 bundle (`olm.package`, `olm.gvk` of
/// each owned CRD, `olm.csv.metadata`) and its related images. `catalog.Dockerfile` builds it
/// into an image (`operators.operatorframework.io.index.configs.v1` label).
pub(crate) fn catalog(csv: &Value, crd: &Value, version: &str) -> Vec<BundleFile> {
    let csv_name = csv["metadata"]["name"].clone();
    let bundle_image = format!("{BUNDLE_IMAGE}:v{version}");
    let spec = &csv["spec"];
    let package = json!({
        "schema": "olm.package",
        "name": PACKAGE,
        "defaultChannel": CHANNEL,
        "icon": spec["icon"][0],
        "description": spec["description"],
    });
    let channel = json!({
        "schema": "olm.channel",
        "package": PACKAGE,
        "name": CHANNEL,
        "entries": [{"name": csv_name, "skipRange": csv["metadata"]["annotations"]["olm.skipRange"]}],
    });
    let mut properties = vec![json!({
        "type": "olm.package",
        "value": {"packageName": PACKAGE, "version": version},
    })];
    for v in crd["spec"]["versions"].as_array().into_iter().flatten() {
        properties.push(json!({
            "type": "olm.gvk",
            "value": {"group": crd["spec"]["group"], "kind": crd["spec"]["names"]["kind"], "version": v["name"]},
        }));
    }
    // `opm render`'s olm.csv.metadata: the CSV's annotations and descriptive fields, without
    // the install strategy.
    let mut meta = Map::new();
    meta.insert("annotations".into(), csv["metadata"]["annotations"].clone());
    for k in [
        "apiservicedefinitions",
        "customresourcedefinitions",
        "description",
        "displayName",
        "installModes",
        "keywords",
        "links",
        "maintainers",
        "maturity",
        "minKubeVersion",
        "provider",
    ] {
        if let Some(v) = spec.get(k) {
            let key = match k {
                "apiservicedefinitions" => "apiServiceDefinitions",
                "customresourcedefinitions" => "crdDescriptions",
                other => other,
            };
            meta.insert(key.into(), v.clone());
        }
    }
    properties.push(json!({"type": "olm.csv.metadata", "value": meta}));
    let mut related = vec![json!({"name": "", "image": bundle_image})];
    related.extend(
        spec["relatedImages"]
            .as_array()
            .cloned()
            .unwrap_or_default(),
    );
    let bundle = json!({
        "schema": "olm.bundle",
        "name": csv_name,
        "package": PACKAGE,
        "image": bundle_image,
        "properties": properties,
        "relatedImages": related,
    });
    let mut text = String::from(
        "# The file-based catalog of the bundle in bundle/; generated by `cargo run -p nmo-packaging --bin bundlegen`.\n",
    );
    // No `---` before the first document: opm reads a comment-only document as an object
    // without a schema.
    for (i, doc) in [package, channel, bundle].iter().enumerate() {
        if i > 0 {
            text.push_str("---\n");
        }
        text.push_str(&to_yaml(doc));
    }
    let dockerfile = format!(
        "# The file-based catalog image: `docker build -f catalog.Dockerfile -t <catalog image> .`\n\
         # Generated by `cargo run -p nmo-packaging --bin bundlegen`. OLM v1 unpacks the directory the label names.\n\
         FROM scratch\n\n\
         ADD {CATALOG_DIR} /configs\n\
         LABEL operators.operatorframework.io.index.configs.v1=/configs\n"
    );
    vec![
        BundleFile {
            path: format!("{CATALOG_DIR}/{PACKAGE}/catalog.yaml"),
            content: text,
        },
        BundleFile {
            path: "catalog.Dockerfile".into(),
            content: dockerfile,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_split_camel_case() {
        assert_eq!(display_name("drainProgress"), "Drain Progress");
        assert_eq!(display_name("pendingPodsRefs"), "Pending Pods Refs");
        assert_eq!(display_name("totalpods"), "Total Pods");
        assert_eq!(display_name("NodeMaintenance"), "Node Maintenance");
    }

    #[test]
    fn secret_volumes_and_only_they_are_dropped_for_olm() {
        let dep = json!({"spec": {"template": {"spec": {
            "containers": [{"name": "m", "volumeMounts": [
                {"name": "cert", "mountPath": "/c"}, {"name": "tmp", "mountPath": "/tmp"}]}],
            "volumes": [{"name": "cert", "secret": {"secretName": "s"}}, {"name": "tmp", "emptyDir": {}}]
        }}}});
        let spec = olm_deployment_spec(&dep);
        let pod = &spec["template"]["spec"];
        assert_eq!(pod["volumes"], json!([{"name": "tmp", "emptyDir": {}}]));
        assert_eq!(
            pod["containers"][0]["volumeMounts"],
            json!([{"name": "tmp", "mountPath": "/tmp"}])
        );
        // Nothing is added (an absent initContainers stays absent).
        assert!(pod.get("initContainers").is_none());
    }

    #[test]
    fn roles_in_other_namespaces_become_cluster_wide_and_unbound_roles_are_refused() {
        let docs = parse_documents(
            r#"
kind: Role
metadata: {name: own, namespace: op}
rules: [{apiGroups: [a], resources: [r1], verbs: [get]}]
---
kind: RoleBinding
metadata: {name: own, namespace: op}
roleRef: {kind: Role, name: own}
subjects: [{kind: ServiceAccount, name: sa, namespace: op}]
---
kind: Role
metadata: {name: far, namespace: other}
rules: [{apiGroups: [b], resources: [r2], verbs: [create]}]
---
kind: RoleBinding
metadata: {name: far, namespace: other}
roleRef: {kind: Role, name: far}
subjects: [{kind: ServiceAccount, name: sa, namespace: op}]
---
kind: ClusterRole
metadata: {name: reader}
rules: [{nonResourceURLs: [/metrics], verbs: [get]}]
"#,
        )
        .unwrap();
        let split = split_rbac(&docs, ("op", "sa")).unwrap();
        assert_eq!(split.permissions[0]["resources"], json!(["r1"]));
        assert_eq!(split.cluster_permissions[0]["resources"], json!(["r2"]));
        assert_eq!(split.unbound_cluster_roles[0]["metadata"]["name"], "reader");

        let mut lonely = docs.clone();
        lonely.retain(|d| !(kind(d) == "RoleBinding" && name(d) == "far"));
        let err = split_rbac(&lonely, ("op", "sa")).unwrap_err().to_string();
        assert!(err.contains("other/far"), "{err}");
    }
}

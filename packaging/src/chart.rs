//! Renders the Helm chart (`charts/node-maintenance-operator/`) from the kustomize renderings of
//! `manifests/` and its overlays, so the chart and the kustomize install cannot drift apart:
//! with default values the chart renders exactly `kubectl kustomize manifests/` plus the webhook's
//! serving pair, which the chart makes itself when cert-manager is off, and each value
//! switches on what the matching overlay adds (`tests/chart.rs` runs the real `helm template`
//! against every rendering). `packaging/src/bin/chartgen.rs` writes the files; see `docs/compat.md §11`.
//!
//! The mapping:
//!
//! - Every object of `manifests/` is a template, the CRD goes to `crds/` (Helm installs it
//!   first and never templates it).
//! - Objects that an overlay adds are wrapped in the value that selects it: `metrics.mode:
//!   secure` (`overlays/metrics-secure`), `certManager.enabled` (`overlays/cert-manager`),
//!   `monitoring.enabled` (`overlays/monitoring`, or `overlays/monitoring/secure` with secure
//!   metrics), `forceDelete.enabled` (`overlays/force-delete`), `kubevirt.enabled`
//!   (`overlays/kubevirt`).
//! - Fields that an overlay patches are templated in place: the Deployment's args and ports and
//!   the metrics Service's ports (metrics mode), the webhook configuration's annotations
//!   (cert-manager). The uncordon-warning ValidatingAdmissionPolicy and its binding render only
//!   on Kubernetes 1.30 and later, where that API is served. `image`, `replicas` and `leaderElection.enabled` template the Deployment,
//!   and `namespace` replaces the operator namespace everywhere.
//! - With `certManager.enabled` false (the default) the webhook configuration's template also
//!   renders the serving Secret the Deployment mounts, with a pair the chart generates, and its
//!   CA as the `caBundle` (`generated_pair_template`).
//! - `{{`/`}}` in the manifests (Prometheus and Grafana templates) are escaped for Helm.
//! - Beyond the manifests, `helm install` refuses the placeholder image of `manifests/` and prints
//!   `NOTES.txt` (`chart/install.rs`). Chart.yaml names no `kubeVersion` (it says why): helm
//!   checks it against its own default version under `helm template`.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::bundle::{BundleError, BundleFile, MIN_KUBE_VERSION, REPOSITORY, parse_documents};

mod install;

/// Where the chart lives, relative to the repository root.
pub const CHART_DIR: &str = "charts/node-maintenance-operator";

/// The operator namespace of `manifests/`, which the `namespace` value replaces.
const NAMESPACE: &str = "node-maintenance-operator-system";

/// The condition under which the chart renders the ValidatingAdmissionPolicy and its binding:
/// a server that serves `admissionregistration.k8s.io/v1` policies (GA in Kubernetes 1.30).
const VAP_SERVED: &str = "semverCompare \">=1.30.0-0\" .Capabilities.KubeVersion.Version";

/// The kustomize renderings the chart is made of (each the output of `kubectl kustomize <dir>`).
#[derive(Debug, Clone)]
pub struct Renderings {
    /// `manifests/` (CRD included).
    pub default: String,
    /// `manifests/overlays/metrics-secure`.
    pub metrics_secure: String,
    /// `manifests/overlays/cert-manager`.
    pub cert_manager: String,
    /// `manifests/overlays/monitoring`.
    pub monitoring: String,
    /// `manifests/overlays/monitoring/secure`.
    pub monitoring_secure: String,
    /// `manifests/overlays/force-delete`.
    pub force_delete: String,
    /// `manifests/overlays/kubevirt`.
    pub kubevirt: String,
}

impl Renderings {
    /// The overlay directories, in field order, relative to the repository root.
    pub const DIRS: [&'static str; 7] = [
        "manifests",
        "manifests/overlays/metrics-secure",
        "manifests/overlays/cert-manager",
        "manifests/overlays/monitoring",
        "manifests/overlays/monitoring/secure",
        "manifests/overlays/force-delete",
        "manifests/overlays/kubevirt",
    ];

    /// Builds the renderings with `kustomize(dir)` for each of [`Self::DIRS`].
    ///
    /// # Errors
    /// The first error `kustomize` returns.
    pub fn with<E>(mut kustomize: impl FnMut(&str) -> Result<String, E>) -> Result<Self, E> {
        Ok(Self {
            default: kustomize(Self::DIRS[0])?,
            metrics_secure: kustomize(Self::DIRS[1])?,
            cert_manager: kustomize(Self::DIRS[2])?,
            monitoring: kustomize(Self::DIRS[3])?,
            monitoring_secure: kustomize(Self::DIRS[4])?,
            force_delete: kustomize(Self::DIRS[5])?,
            kubevirt: kustomize(Self::DIRS[6])?,
        })
    }
}

fn shape(msg: impl Into<String>) -> BundleError {
    BundleError::Shape(msg.into())
}

type Key = (String, String, String);

fn key(d: &Value) -> Key {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (
        s(&d["kind"]),
        s(&d["metadata"]["namespace"]),
        s(&d["metadata"]["name"]),
    )
}

fn by_key(text: &str) -> Result<BTreeMap<Key, Value>, BundleError> {
    Ok(parse_documents(text)?
        .into_iter()
        .map(|d| (key(&d), d))
        .collect())
}

/// Escapes Helm's delimiters in `text`, so that Prometheus' and Grafana's own `{{ }}` come out
/// of `helm template` unchanged.
fn escape_helm(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(['{', '}']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(after) = tail.strip_prefix("{{") {
            out.push_str(r#"{{ "{{" }}"#);
            rest = after;
        } else if let Some(after) = tail.strip_prefix("}}") {
            out.push_str(r#"{{ "}}" }}"#);
            rest = after;
        } else {
            out.push_str(&tail[..1]);
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

fn to_yaml(v: &Value) -> String {
    serde_yaml::to_string(v).expect("a JSON value serializes to YAML")
}

/// One list item as YAML lines at `indent` (`- ` first).
fn item_lines(v: &Value, indent: &str) -> String {
    let text = to_yaml(&json!([v]));
    text.lines()
        .map(|l| format!("{indent}{l}\n"))
        .collect::<String>()
}

/// A YAML list whose items differ between the plain and the secure metrics rendering: equal
/// items as they are, differing ones under `if eq .Values.metrics.mode "secure"`, items only
/// the secure rendering has under that condition alone. `wrap` may put an item of the plain
/// list under a condition of its own (for `--leader-elect`).
fn mode_list(
    plain: &[Value],
    secure: &[Value],
    indent: &str,
    wrap: impl Fn(&Value) -> Option<&'static str>,
) -> Result<String, BundleError> {
    if secure.len() < plain.len() {
        return Err(shape("the secure rendering removes list items"));
    }
    let mut out = String::new();
    for (i, s) in secure.iter().enumerate() {
        let lines = item_lines(s, indent);
        match plain.get(i) {
            Some(p) if p == s => match wrap(p) {
                Some(cond) => out.push_str(&format!(
                    "{indent}{{{{- if {cond} }}}}\n{lines}{indent}{{{{- end }}}}\n"
                )),
                None => out.push_str(&lines),
            },
            Some(p) => out.push_str(&format!(
                "{indent}{{{{- if eq .Values.metrics.mode \"secure\" }}}}\n{lines}{indent}{{{{- else }}}}\n{}{indent}{{{{- end }}}}\n",
                item_lines(p, indent)
            )),
            None => out.push_str(&format!(
                "{indent}{{{{- if eq .Values.metrics.mode \"secure\" }}}}\n{lines}{indent}{{{{- end }}}}\n"
            )),
        }
    }
    Ok(out)
}

/// Replaces the list item line `- <marker>` of `text` with `block(indent)`.
fn replace_item(
    text: &str,
    marker: &str,
    block: impl FnOnce(&str) -> Result<String, BundleError>,
) -> Result<String, BundleError> {
    let line = text
        .lines()
        .find(|l| l.trim() == format!("- {marker}"))
        .ok_or_else(|| shape(format!("marker {marker} not found")))?;
    let indent = &line[..line.len() - line.trim_start().len()];
    Ok(text.replacen(&format!("{line}\n"), &block(indent)?, 1))
}

fn object_file(doc: &Value) -> String {
    let (kind, ns, name) = key(doc);
    let ns = if ns.is_empty() {
        String::new()
    } else {
        format!("{}-", ns.trim_start_matches("node-maintenance-operator-"))
    };
    let name = name.trim_start_matches("node-maintenance-operator-");
    format!("templates/{}-{ns}{name}.yaml", kind.to_lowercase())
}

fn wrapped(cond: &str, body: &str) -> String {
    format!("{{{{- if {cond} }}}}\n{body}{{{{- end }}}}\n")
}

fn deployment_template(plain: &Value, secure: &Value) -> Result<String, BundleError> {
    let mut d = plain.clone();
    let image = plain["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .ok_or_else(|| shape("the Deployment has no image"))?;
    if image.rsplit_once(':').is_none() {
        return Err(shape("the Deployment's image has no tag"));
    }
    let c = &mut d["spec"]["template"]["spec"]["containers"][0];
    c["image"] = json!("__NMO_IMAGE__");
    c["args"] = json!(["__NMO_ARGS__"]);
    c["ports"] = json!(["__NMO_PORTS__"]);
    d["spec"]["replicas"] = json!("__NMO_REPLICAS__");
    let list = |v: &Value, k: &str| v["spec"]["template"]["spec"]["containers"][0][k].clone();
    let arr = |v: Value| v.as_array().cloned().unwrap_or_default();
    let text = escape_helm(&to_yaml(&d));
    let text = text
        .replace(
            "image: __NMO_IMAGE__",
            "image: {{ printf \"%s:%s\" .Values.image.repository .Values.image.tag }}",
        )
        .replace(
            "replicas: __NMO_REPLICAS__",
            "replicas: {{ .Values.replicas }}",
        );
    let text = replace_item(&text, "__NMO_ARGS__", |indent| {
        mode_list(
            &arr(list(plain, "args")),
            &arr(list(secure, "args")),
            indent,
            |a| (a == "--leader-elect").then_some(".Values.leaderElection.enabled"),
        )
    })?;
    replace_item(&text, "__NMO_PORTS__", |indent| {
        mode_list(
            &arr(list(plain, "ports")),
            &arr(list(secure, "ports")),
            indent,
            |_| None,
        )
    })
}

fn service_template(plain: &Value, secure: &Value) -> Result<String, BundleError> {
    let mut d = plain.clone();
    d["spec"]["ports"] = json!(["__NMO_PORTS__"]);
    let arr = |v: &Value| v["spec"]["ports"].as_array().cloned().unwrap_or_default();
    replace_item(&escape_helm(&to_yaml(&d)), "__NMO_PORTS__", |indent| {
        mode_list(&arr(plain), &arr(secure), indent, |_| None)
    })
}

/// Annotation on the chart's generated serving Secret: when its certificate expires (RFC 3339,
/// UTC), so that `helm upgrade` keeps the pair until [`RENEW_BEFORE`] of that and replaces it
/// then (sprig cannot read a certificate's dates).
const CERT_NOT_AFTER_ANNOTATION: &str = "nodemaintenance.medik8s.io/webhook-cert-not-after";
/// Days the chart's serving certificate (and its CA) are valid.
const CERT_DAYS: u32 = 365;
/// How long before expiry `helm upgrade` replaces the chart's serving pair (a Go duration).
const RENEW_BEFORE: &str = "720h";

/// With `certManager.enabled` false, the webhook's serving pair in Secret `secret` (keys
/// `tls.crt`, `tls.key`, `ca.crt`, as cert-manager writes them) made by the chart itself: a CA and
/// a certificate for `<service>.<namespace>.svc[.cluster.local]` from sprig's genCA and
/// genSignedCert, kept across `helm upgrade` (`lookup`) until [`RENEW_BEFORE`] of its expiry.
/// Sets `$caBundle` (base64), which the webhook configuration in the same file reads.
fn generated_pair_template(secret: &str, service: &str) -> String {
    format!(
        r#"{{{{- $caBundle := "" }}}}
{{{{- if not .Values.certManager.enabled }}}}
{{{{- $host := printf "{service}.%s.svc" .Values.namespace }}}}
{{{{- $existing := lookup "v1" "Secret" .Values.namespace "{secret}" }}}}
{{{{- $notAfter := dig "metadata" "annotations" "{CERT_NOT_AFTER_ANNOTATION}" "" $existing }}}}
{{{{- $renewBy := dateInZone "2006-01-02T15:04:05Z" (now | dateModify "+{RENEW_BEFORE}") "UTC" }}}}
{{{{- $crt := "" }}}}
{{{{- $key := "" }}}}
{{{{- if and $notAfter (lt $renewBy $notAfter) (hasKey (dig "data" dict $existing) "ca.crt") }}}}
{{{{- $crt = index $existing.data "tls.crt" }}}}
{{{{- $key = index $existing.data "tls.key" }}}}
{{{{- $caBundle = index $existing.data "ca.crt" }}}}
{{{{- else }}}}
{{{{- $ca := genCA "node-maintenance-operator-webhook-ca" {CERT_DAYS} }}}}
{{{{- $pair := genSignedCert $host nil (list $host (printf "%s.cluster.local" $host)) {CERT_DAYS} $ca }}}}
{{{{- $crt = $pair.Cert | b64enc }}}}
{{{{- $key = $pair.Key | b64enc }}}}
{{{{- $caBundle = $ca.Cert | b64enc }}}}
{{{{- $notAfter = dateInZone "2006-01-02T15:04:05Z" (now | dateModify "+{hours}h") "UTC" }}}}
{{{{- end }}}}
apiVersion: v1
kind: Secret
metadata:
  name: {secret}
  namespace: {{{{ .Values.namespace }}}}
  labels:
    node-maintenance-operator: ""
  annotations:
    {CERT_NOT_AFTER_ANNOTATION}: {{{{ $notAfter | quote }}}}
type: kubernetes.io/tls
data:
  tls.crt: {{{{ $crt }}}}
  tls.key: {{{{ $key }}}}
  ca.crt: {{{{ $caBundle }}}}
---
{{{{- end }}}}
"#,
        hours = CERT_DAYS * 24,
    )
}

/// The webhook configuration, with the annotations cert-manager's overlay adds under
/// `certManager.enabled`, and otherwise the chart's own serving pair in Secret `secret`
/// ([`generated_pair_template`]) with its CA as every webhook's `caBundle`.
fn webhook_template(
    plain: &Value,
    cert_manager: &Value,
    secret: &str,
) -> Result<String, BundleError> {
    if plain["metadata"].get("annotations").is_some() {
        return Err(shape("the webhook configuration already has annotations"));
    }
    let annotations = &cert_manager["metadata"]["annotations"];
    let mut d = plain.clone();
    d["metadata"]["annotations"] = json!("__NMO_ANNOTATIONS__");
    let webhooks = d["webhooks"]
        .as_array_mut()
        .ok_or_else(|| shape("the webhook configuration has no webhooks"))?;
    let mut services = std::collections::BTreeSet::new();
    for w in webhooks.iter_mut() {
        let config = &mut w["clientConfig"];
        if config.get("caBundle").is_some() {
            return Err(shape("the webhook configuration already has a caBundle"));
        }
        services.insert(
            config["service"]["name"]
                .as_str()
                .ok_or_else(|| shape("a webhook is not served by a Service"))?
                .to_string(),
        );
        config["caBundle"] = json!("__NMO_CA_BUNDLE__");
    }
    let [service] = <[String; 1]>::try_from(services.into_iter().collect::<Vec<_>>())
        .map_err(|found| shape(format!("webhooks served by several Services: {found:?}")))?;
    let text = escape_helm(&to_yaml(&d));
    let line = text
        .lines()
        .find(|l| l.trim() == "annotations: __NMO_ANNOTATIONS__")
        .ok_or_else(|| shape("annotation marker not found"))?;
    let indent = &line[..line.len() - line.trim_start().len()];
    let inner: String = to_yaml(annotations)
        .lines()
        .map(|l| format!("{indent}  {l}\n"))
        .collect();
    let mut text = text.replacen(
        &format!("{line}\n"),
        &format!(
            "{indent}{{{{- if .Values.certManager.enabled }}}}\n{indent}annotations:\n{inner}{indent}{{{{- end }}}}\n"
        ),
        1,
    );
    while let Some(line) = text
        .lines()
        .find(|l| l.trim() == "caBundle: __NMO_CA_BUNDLE__")
        .map(str::to_string)
    {
        let indent = &line[..line.len() - line.trim_start().len()];
        text = text.replacen(
            &format!("{line}\n"),
            &format!(
                "{indent}{{{{- if not .Values.certManager.enabled }}}}\n{indent}caBundle: {{{{ $caBundle }}}}\n{indent}{{{{- end }}}}\n"
            ),
            1,
        );
    }
    Ok(format!(
        "{}{text}",
        generated_pair_template(secret, &service)
    ))
}

/// A Namespace the chart creates unless it exists already and is not this release's: the lease
/// namespace `medik8s-leases` is shared with the other medik8s operators, and Helm refuses to
/// install over an object it does not own (`kubectl apply` adopts it). `helm template` has no
/// cluster to look at, so it renders the Namespace as kustomize does. Once created by this
/// release it stays in the release, so an upgrade never deletes it.
fn namespace_template(doc: &Value, name: &str) -> String {
    // The operator namespace is the `namespace` value (replaced in text everywhere else).
    let name = if name == NAMESPACE {
        ".Values.namespace".to_string()
    } else {
        format!("\"{name}\"")
    };
    format!(
        "{{{{- $existing := lookup \"v1\" \"Namespace\" \"\" {name} }}}}\n\
         {{{{- if or (not $existing) (eq (dig \"metadata\" \"annotations\" \"meta.helm.sh/release-name\" \"\" $existing) .Release.Name) }}}}\n\
         {}{{{{- end }}}}\n",
        escape_helm(&to_yaml(doc))
    )
}

fn values_yaml(image: &str) -> String {
    let (repo, tag) = image.rsplit_once(':').unwrap_or((image, "latest"));
    format!(
        "# Values of the node-maintenance-operator chart. With these defaults the chart renders exactly
# `kubectl kustomize manifests/`, plus the webhook's serving pair (tests/chart.rs).

# The operator's namespace (created by the chart; pass the same to `helm install -n`).
namespace: {NAMESPACE}

# The operator image. No image is published yet: {repo} is a placeholder, which
# `helm install` refuses. Build the repository's Dockerfile, push it, and set both (README, Image).
image:
  repository: {repo}
  tag: {tag}

# Replicas of the operator; every replica serves the webhook, the leader reconciles.
replicas: 1

leaderElection:
  # --leader-elect: needed with more than one replica.
  enabled: true

metrics:
  # plain: HTTP on :8080 for anyone who can reach it (manifests/).
  # secure: HTTPS on :8443, every scrape authenticated and authorized against the API server
  # (manifests/overlays/metrics-secure); bind scrapers to ClusterRole
  # node-maintenance-operator-metrics-reader.
  mode: plain

certManager:
  # Have cert-manager issue the webhook's serving pair and inject its caBundle
  # (manifests/overlays/cert-manager). Off: the chart makes a CA and a serving pair itself
  # (Secret webhook-server-cert) and injects the caBundle; `helm upgrade` keeps them until 30
  # days before they expire (after a year), then replaces both.
  enabled: false

monitoring:
  # The PrometheusRule (alerts, runbooks in docs/runbooks/), a ServiceMonitor for the selected
  # metrics endpoint and the Grafana dashboard ConfigMap (manifests/overlays/monitoring); needs
  # the Prometheus Operator's CRDs.
  enabled: false

forceDelete:
  # Let the operator delete pods (manifests/overlays/force-delete), which onTimeout ForceDelete
  # needs; without it the webhook refuses a NodeMaintenance that asks for ForceDelete.
  enabled: false

kubevirt:
  # Let the operator read KubeVirt's VMIs and migrations (manifests/overlays/kubevirt), to show
  # the migration behind each evacuating virt-launcher pod, and cancel the evacuations off a node
  # whose maintenance is deleted; only useful where KubeVirt runs.
  enabled: false
"
    )
}

const VALUES_SCHEMA: &str = r#"{
  "$schema": "http://json-schema.org/draft-07/schema#",
  "type": "object",
  "additionalProperties": false,
  "required": ["namespace", "image", "replicas", "leaderElection", "metrics", "certManager", "monitoring", "forceDelete", "kubevirt"],
  "properties": {
    "namespace": {"type": "string", "minLength": 1},
    "image": {
      "type": "object",
      "additionalProperties": false,
      "required": ["repository", "tag"],
      "properties": {"repository": {"type": "string", "minLength": 1}, "tag": {"type": "string", "minLength": 1}}
    },
    "replicas": {"type": "integer", "minimum": 0},
    "leaderElection": {"type": "object", "additionalProperties": false, "properties": {"enabled": {"type": "boolean"}}},
    "metrics": {"type": "object", "additionalProperties": false, "properties": {"mode": {"enum": ["plain", "secure"]}}},
    "certManager": {"type": "object", "additionalProperties": false, "properties": {"enabled": {"type": "boolean"}}},
    "monitoring": {"type": "object", "additionalProperties": false, "properties": {"enabled": {"type": "boolean"}}},
    "forceDelete": {"type": "object", "additionalProperties": false, "properties": {"enabled": {"type": "boolean"}}},
    "kubevirt": {"type": "object", "additionalProperties": false, "properties": {"enabled": {"type": "boolean"}}}
  }
}
"#;

/// Renders every chart file (paths relative to the repository root) from the kustomize
/// renderings `r` and the operator `version` (semver, the chart's version and appVersion).
///
/// # Errors
/// [`BundleError`] when a rendering cannot be parsed or an overlay changes something the
/// mapping does not know how to template (the message names it).
pub fn render(r: &Renderings, version: &str) -> Result<Vec<BundleFile>, BundleError> {
    let d = by_key(&r.default)?;
    let s = by_key(&r.metrics_secure)?;
    let c = by_key(&r.cert_manager)?;
    let m = by_key(&r.monitoring)?;
    let ms = by_key(&r.monitoring_secure)?;
    let f = by_key(&r.force_delete)?;
    let kv = by_key(&r.kubevirt)?;
    let mut files: BTreeMap<String, String> = BTreeMap::new();
    let mut add = |doc: &Value, body: String| -> Result<(), BundleError> {
        let path = object_file(doc);
        if files.insert(path.clone(), body).is_some() {
            return Err(shape(format!("two objects map to {path}")));
        }
        Ok(())
    };
    let mut image = String::new();
    // The Secret the Deployment mounts as its webhook serving pair.
    let serving_secret = d
        .iter()
        .find(|(k, _)| k.0 == "Deployment")
        .and_then(|(_, dep)| {
            dep["spec"]["template"]["spec"]["volumes"]
                .as_array()?
                .iter()
                .find(|v| v["name"] == "cert")?["secret"]["secretName"]
                .as_str()
                .map(str::to_string)
        })
        .ok_or_else(|| shape("the Deployment mounts no Secret as volume `cert`"))?;
    for (k, doc) in &d {
        let other = |set: &BTreeMap<Key, Value>| set.get(k).cloned();
        let body = match k.0.as_str() {
            "CustomResourceDefinition" => {
                // Helm applies crds/ verbatim: `namespace` could not reach it.
                if to_yaml(doc).contains(NAMESPACE) {
                    return Err(shape("the CRD names the operator namespace"));
                }
                continue;
            }
            "Deployment" => {
                image = doc["spec"]["template"]["spec"]["containers"][0]["image"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let secure =
                    other(&s).ok_or_else(|| shape("secure rendering lacks the Deployment"))?;
                deployment_template(doc, &secure)?
            }
            // admissionregistration.k8s.io/v1 policies exist from Kubernetes 1.30 on; the chart
            // supports older servers, which simply go without the warning.
            "ValidatingAdmissionPolicy" | "ValidatingAdmissionPolicyBinding" => {
                wrapped(VAP_SERVED, &escape_helm(&to_yaml(doc)))
            }
            "ValidatingWebhookConfiguration" => {
                let cm =
                    other(&c).ok_or_else(|| shape("cert-manager rendering lacks the webhook"))?;
                webhook_template(doc, &cm, &serving_secret)?
            }
            _ => match other(&s) {
                Some(secure) if &secure != doc => {
                    if k.0 != "Service" {
                        return Err(shape(format!("metrics-secure changes {k:?}")));
                    }
                    service_template(doc, &secure)?
                }
                _ if k.0 == "Namespace" => namespace_template(doc, &k.2),
                _ => escape_helm(&to_yaml(doc)),
            },
        };
        for (name, set) in [
            ("cert-manager", &c),
            ("monitoring", &m),
            ("force-delete", &f),
            ("kubevirt", &kv),
        ] {
            if k.0 != "ValidatingWebhookConfiguration" && set.get(k) != Some(doc) {
                return Err(shape(format!("the {name} overlay changes {k:?}")));
            }
        }
        add(doc, body)?;
    }
    for (k, doc) in s.iter().filter(|(k, _)| !d.contains_key(*k)) {
        if ms.get(k) != Some(doc) {
            return Err(shape(format!("monitoring/secure changes {k:?}")));
        }
        add(
            doc,
            wrapped(
                "eq .Values.metrics.mode \"secure\"",
                &escape_helm(&to_yaml(doc)),
            ),
        )?;
    }
    for (_, doc) in c.iter().filter(|(k, _)| !d.contains_key(*k)) {
        add(
            doc,
            wrapped(".Values.certManager.enabled", &escape_helm(&to_yaml(doc))),
        )?;
    }
    for (_, doc) in f.iter().filter(|(k, _)| !d.contains_key(*k)) {
        add(
            doc,
            wrapped(".Values.forceDelete.enabled", &escape_helm(&to_yaml(doc))),
        )?;
    }
    for (_, doc) in kv.iter().filter(|(k, _)| !d.contains_key(*k)) {
        add(
            doc,
            wrapped(".Values.kubevirt.enabled", &escape_helm(&to_yaml(doc))),
        )?;
    }
    // Monitoring objects: the same in both metrics modes, or one per mode (the ServiceMonitor).
    let plain_only: Vec<(&Key, &Value)> = m.iter().filter(|(k, _)| !d.contains_key(*k)).collect();
    let secure_only: Vec<(&Key, &Value)> = ms.iter().filter(|(k, _)| !s.contains_key(*k)).collect();
    let mut per_mode: BTreeMap<String, String> = BTreeMap::new();
    for (k, doc) in &plain_only {
        let body = escape_helm(&to_yaml(doc));
        match secure_only.iter().find(|(k2, _)| k2 == k) {
            Some((_, sdoc)) if sdoc == doc => {
                add(doc, wrapped(".Values.monitoring.enabled", &body))?
            }
            _ => {
                per_mode.insert(
                    object_file(doc),
                    wrapped(
                        ".Values.monitoring.enabled }}\n{{- if eq .Values.metrics.mode \"plain\"",
                        &format!("{body}{{{{- end }}}}\n"),
                    ),
                );
            }
        }
    }
    for (k, doc) in &secure_only {
        let same = plain_only.iter().any(|(k2, d2)| k2 == k && d2 == doc);
        if same {
            continue;
        }
        let body = escape_helm(&to_yaml(doc));
        let block = wrapped(
            ".Values.monitoring.enabled }}\n{{- if eq .Values.metrics.mode \"secure\"",
            &format!("{body}{{{{- end }}}}\n"),
        );
        let path = object_file(doc);
        let text = match per_mode.remove(&path) {
            Some(plain) => format!("{plain}---\n{block}"),
            None => block,
        };
        per_mode.insert(path, text);
    }
    for (path, text) in per_mode {
        if files.insert(path.clone(), text).is_some() {
            return Err(shape(format!("two objects map to {path}")));
        }
    }
    if image.is_empty() {
        return Err(shape("the default rendering has no Deployment"));
    }
    let crd = d
        .iter()
        .find(|(k, _)| k.0 == "CustomResourceDefinition")
        .map(|(_, v)| v)
        .ok_or_else(|| shape("the default rendering has no CRD"))?;
    let crd_name = crd["metadata"]["name"].as_str().unwrap_or_default();
    let certificate = c
        .keys()
        .find(|k| k.0 == "Certificate")
        .map(|k| k.2.clone())
        .ok_or_else(|| shape("the cert-manager rendering has no Certificate"))?;
    let deployment = d
        .keys()
        .find(|k| k.0 == "Deployment")
        .map(|k| k.2.clone())
        .unwrap_or_default();
    let (placeholder, _) = image
        .rsplit_once(':')
        .ok_or_else(|| shape("the Deployment's image has no tag"))?;
    let mut out = vec![
        BundleFile {
            path: format!("{CHART_DIR}/Chart.yaml"),
            content: format!(
                "# Generated by `cargo run -p nmo-packaging --bin chartgen` from manifests/ (packaging/src/chart.rs); do not edit.\n\
                 apiVersion: v2\n\
                 name: node-maintenance-operator\n\
                 description: Keeps a node cordoned, tainted and drained while a NodeMaintenance exists; a drop-in for the medik8s Node Maintenance Operator.\n\
                 type: application\n\
                 version: {version}\n\
                 appVersion: \"{version}\"\n\
                 # No kubeVersion: helm checks it against the Kubernetes version it renders for, which\n\
                 # for `helm template` without --kube-version is helm's own default (v1.20 for a helm\n\
                 # built without release flags), so a floor refused the default render. The oldest\n\
                 # Kubernetes supported is {MIN_KUBE_VERSION} (the OLM bundle's minKubeVersion; README).\n\
                 keywords: [medik8s, node-maintenance, drain, cordon]\n\
                 home: {REPOSITORY}\n\
                 sources: [\"{REPOSITORY}\"]\n"
            ),
        },
        BundleFile {
            path: format!("{CHART_DIR}/values.yaml"),
            content: values_yaml(&image),
        },
        BundleFile {
            path: format!("{CHART_DIR}/values.schema.json"),
            content: VALUES_SCHEMA.to_string(),
        },
        BundleFile {
            path: format!("{CHART_DIR}/crds/{crd_name}.yaml"),
            content: to_yaml(crd),
        },
        BundleFile {
            path: format!("{CHART_DIR}/{}", install::CHECKS_FILE),
            content: install::checks_template(placeholder),
        },
        BundleFile {
            path: format!("{CHART_DIR}/{}", install::NOTES_FILE),
            content: install::notes(&install::Names {
                deployment: &deployment,
                serving_secret: &serving_secret,
                certificate: &certificate,
                crd: crd_name,
                not_after_annotation: CERT_NOT_AFTER_ANNOTATION,
            }),
        },
    ];
    for (path, body) in files {
        let body = body.replace(NAMESPACE, "{{ .Values.namespace }}");
        out.push(BundleFile {
            path: format!("{CHART_DIR}/{path}"),
            content: format!(
                "# Generated by `cargo run -p nmo-packaging --bin chartgen` from manifests/; do not edit.\n{body}"
            ),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helm_delimiters_are_escaped_and_nothing_else() {
        assert_eq!(escape_helm("a {b} c"), "a {b} c");
        assert_eq!(
            escape_helm("{{ $labels.node }}"),
            r#"{{ "{{" }} $labels.node {{ "}}" }}"#
        );
        assert_eq!(escape_helm("{{{x}}}"), r#"{{ "{{" }}{x{{ "}}" }}}"#);
    }

    #[test]
    fn lists_differing_by_mode_become_conditions() {
        let plain = [json!("--a"), json!("--m=:8080")];
        let secure = [json!("--a"), json!("--m=:8443"), json!("--s")];
        let out = mode_list(&plain, &secure, "  ", |a| {
            (a == "--a").then_some(".Values.x")
        })
        .unwrap();
        assert_eq!(
            out,
            "  {{- if .Values.x }}\n  - --a\n  {{- end }}\n  {{- if eq .Values.metrics.mode \"secure\" }}\n  - --m=:8443\n  {{- else }}\n  - --m=:8080\n  {{- end }}\n  {{- if eq .Values.metrics.mode \"secure\" }}\n  - --s\n  {{- end }}\n"
        );
    }
}

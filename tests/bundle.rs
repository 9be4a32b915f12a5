//! The OLM bundle: the files on disk are exactly what `bundlegen` renders from `manifests/`
//! today, the ClusterServiceVersion's Deployment, RBAC and webhook are those of the kustomize
//! rendering (checked field by field, not through the renderer), and operator-framework's own
//! validators (`tests/cluster/olm-validate`) report neither an error nor a warning.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use nmo_packaging::bundle::{self, PACKAGE, SOURCE_OVERLAY};
use serde_json::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `kubectl kustomize <dir>` with kubectl from the test control plane's cache.
fn kustomize(dir: &str) -> String {
    let bins = nmo_devcluster::ensure_binaries().expect("control plane binaries");
    let out = Command::new(bins.join("bin/kubectl"))
        .args(["kustomize", &root().join(dir).display().to_string()])
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl kustomize {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn csv() -> Value {
    let path = root().join(format!(
        "bundle/manifests/{PACKAGE}.clusterserviceversion.yaml"
    ));
    serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

/// Every file under `bundle/` and `catalog/` plus both Dockerfiles, relative to the repository root.
fn files_on_disk() -> BTreeSet<String> {
    fn walk(dir: &Path, out: &mut BTreeSet<String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.insert(
                    p.strip_prefix(Path::new(env!("CARGO_MANIFEST_DIR")))
                        .unwrap()
                        .display()
                        .to_string(),
                );
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(&root().join("bundle"), &mut out);
    walk(&root().join(bundle::CATALOG_DIR), &mut out);
    out.insert("bundle.Dockerfile".into());
    out.insert("catalog.Dockerfile".into());
    out
}

#[test]
fn bundle_files_are_what_bundlegen_renders() {
    let crd = std::fs::read_to_string(root().join("manifests/crd.yaml")).unwrap();
    let files = bundle::render(&kustomize(SOURCE_OVERLAY), &crd, env!("CARGO_PKG_VERSION"))
        .expect("the manifests render into a bundle");
    let regen = format!(
        "regenerate with\n\n    kubectl kustomize {SOURCE_OVERLAY} | cargo run -p nmo-packaging --bin bundlegen\n"
    );
    let rendered: BTreeSet<String> = files.iter().map(|f| f.path.clone()).collect();
    assert_eq!(
        rendered,
        files_on_disk(),
        "the bundle's file list is stale; {regen}"
    );
    for f in files {
        let on_disk = std::fs::read_to_string(root().join(&f.path)).unwrap_or_default();
        assert!(on_disk == f.content, "{} is out of date; {regen}", f.path);
    }
}

#[test]
fn csv_deployment_rbac_and_webhook_equal_the_kustomize_rendering() {
    let docs = bundle::parse_documents(&kustomize(SOURCE_OVERLAY)).unwrap();
    let csv = csv();
    let install = &csv["spec"]["install"]["spec"];

    // Deployment: identical but for the Secret volume (OLM mounts its own serving pair).
    let [dep] = <[&Value; 1]>::try_from(of_kind(&docs, "Deployment")).unwrap();
    let [csv_dep] =
        <[Value; 1]>::try_from(install["deployments"].as_array().unwrap().clone()).unwrap();
    assert_eq!(csv_dep["name"], dep["metadata"]["name"]);
    assert_eq!(csv_dep["label"], dep["metadata"]["labels"]);
    let mut want = dep["spec"].clone();
    let pod = &mut want["template"]["spec"];
    let cert_volumes: Vec<Value> = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v.get("secret").is_some())
        .cloned()
        .collect();
    assert_eq!(cert_volumes.len(), 1, "{cert_volumes:?}");
    pod["volumes"]
        .as_array_mut()
        .unwrap()
        .retain(|v| v.get("secret").is_none());
    pod["containers"][0]["volumeMounts"]
        .as_array_mut()
        .unwrap()
        .retain(|m| m["name"] != cert_volumes[0]["name"]);
    assert_eq!(csv_dep["spec"], want);
    // OLM's own mount must land where the operator looks by default.
    let args: Vec<&str> = csv_dep["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        !args.iter().any(|a| a.starts_with("--webhook-cert-path")),
        "{args:?}"
    );
    assert!(args.contains(&"--metrics-secure"), "{args:?}");
    assert!(args.contains(&"--metrics-bind-address=:8443"), "{args:?}");

    // RBAC: every (scope, group, resource, verb) granted to the ServiceAccount, where the scope
    // is the operator's namespace or the cluster. OLM grants namespaced permissions only in the
    // install namespace, so a Role elsewhere must appear cluster wide.
    let account = dep["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .unwrap();
    let operator_ns = dep["metadata"]["namespace"].as_str().unwrap();
    type Grant = (String, String, String, String);
    let expand = |scope: &str, rules: &Value, out: &mut BTreeSet<Grant>| {
        for r in rules.as_array().unwrap() {
            let list = |k: &str| -> Vec<String> {
                r[k].as_array()
                    .map(|a| a.iter().map(|x| x.as_str().unwrap().to_string()).collect())
                    .unwrap_or_else(|| vec![String::new()])
            };
            let resources = if r.get("nonResourceURLs").is_some() {
                list("nonResourceURLs")
            } else {
                list("resources")
            };
            for g in list("apiGroups") {
                for res in &resources {
                    for v in list("verbs") {
                        out.insert((scope.into(), g.clone(), res.clone(), v));
                    }
                }
            }
        }
    };
    let mut from_manifests = BTreeSet::new();
    for b in docs.iter().filter(|d| {
        matches!(
            d["kind"].as_str(),
            Some("RoleBinding" | "ClusterRoleBinding")
        )
    }) {
        let subject_is_ours = b["subjects"].as_array().unwrap().iter().any(|s| {
            s["kind"] == "ServiceAccount" && s["name"] == account && s["namespace"] == operator_ns
        });
        if !subject_is_ours {
            continue;
        }
        let role = docs
            .iter()
            .find(|d| {
                d["kind"] == b["roleRef"]["kind"]
                    && d["metadata"]["name"] == b["roleRef"]["name"]
                    && (d["kind"] == "ClusterRole"
                        || d["metadata"]["namespace"] == b["metadata"]["namespace"])
            })
            .unwrap();
        let scope = if b["kind"] == "RoleBinding" && b["metadata"]["namespace"] == operator_ns {
            "namespace"
        } else {
            "cluster"
        };
        expand(scope, &role["rules"], &mut from_manifests);
    }
    let mut from_csv = BTreeSet::new();
    for (field, scope) in [
        ("permissions", "namespace"),
        ("clusterPermissions", "cluster"),
    ] {
        for p in install[field].as_array().unwrap() {
            assert_eq!(p["serviceAccountName"], account, "{field}");
            expand(scope, &p["rules"], &mut from_csv);
        }
    }
    assert_eq!(from_csv, from_manifests);
    for needed in [
        ("cluster", "authentication.k8s.io", "tokenreviews", "create"),
        (
            "cluster",
            "authorization.k8s.io",
            "subjectaccessreviews",
            "create",
        ),
        ("namespace", "coordination.k8s.io", "leases", "update"),
    ] {
        let g = (
            needed.0.to_string(),
            needed.1.to_string(),
            needed.2.to_string(),
            needed.3.to_string(),
        );
        assert!(from_csv.contains(&g), "{g:?} missing from the CSV");
    }

    // Webhook: the registration's settings, and OLM's Service maps the port the registration
    // calls to the container's webhook port.
    let [vwc] = <[&Value; 1]>::try_from(of_kind(&docs, "ValidatingWebhookConfiguration")).unwrap();
    let [w] = <[Value; 1]>::try_from(vwc["webhooks"].as_array().unwrap().clone()).unwrap();
    let [d] = <[Value; 1]>::try_from(
        csv["spec"]["webhookdefinitions"]
            .as_array()
            .unwrap()
            .clone(),
    )
    .unwrap();
    assert_eq!(d["type"], "ValidatingAdmissionWebhook");
    assert_eq!(d["generateName"], w["name"]);
    assert_eq!(d["deploymentName"], dep["metadata"]["name"]);
    assert_eq!(d["webhookPath"], w["clientConfig"]["service"]["path"]);
    for k in [
        "admissionReviewVersions",
        "sideEffects",
        "failurePolicy",
        "timeoutSeconds",
        "rules",
    ] {
        assert_eq!(d[k], w[k], "{k}");
    }
    assert_eq!(d["containerPort"], w["clientConfig"]["service"]["port"]);
    let webhook_port = dep["spec"]["template"]["spec"]["containers"][0]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "webhook-server")
        .unwrap()["containerPort"]
        .clone();
    assert_eq!(d["targetPort"], webhook_port);
    assert_eq!(d["targetPort"], 9443);

    // Owned CRD, install modes, minimum version.
    let owned = &csv["spec"]["customresourcedefinitions"]["owned"][0];
    assert_eq!(owned["name"], "nodemaintenances.nodemaintenance.medik8s.io");
    assert_eq!(owned["version"], "v1beta1");
    assert_eq!(owned["displayName"], "Node Maintenance");
    let paths = |k: &str| -> Vec<String> {
        owned[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                assert!(
                    d["displayName"].as_str().is_some_and(|s| !s.is_empty()),
                    "{d}"
                );
                d["path"].as_str().unwrap().to_string()
            })
            .collect()
    };
    assert_eq!(
        paths("specDescriptors"),
        [
            "daemonSets",
            "drainRules",
            "drainTimeout",
            "expireAfter",
            "nodeConditions",
            "nodeName",
            "onTimeout",
            "paused",
            "reason",
            "stage",
            "startAt",
            "surge",
            "waitForVolumeDetach"
        ]
    );
    let status = paths("statusDescriptors");
    for field in ["phase", "drainProgress", "lastError", "errorOnLeaseCount"] {
        assert!(status.iter().any(|p| p == field), "{field} in {status:?}");
    }
    let modes: Vec<(String, bool)> = csv["spec"]["installModes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["type"].as_str().unwrap().to_string(),
                m["supported"].as_bool().unwrap(),
            )
        })
        .collect();
    assert!(modes.contains(&("AllNamespaces".into(), true)), "{modes:?}");
    assert_eq!(modes.iter().filter(|m| m.1).count(), 1, "{modes:?}");
    assert_eq!(csv["spec"]["minKubeVersion"], bundle::MIN_KUBE_VERSION);

    // The CRD is manifests/crd.yaml itself.
    assert_eq!(
        std::fs::read_to_string(
            root().join("bundle/manifests/nodemaintenances.nodemaintenance.medik8s.io.yaml")
        )
        .unwrap(),
        std::fs::read_to_string(root().join("manifests/crd.yaml")).unwrap()
    );
}

/// Builds (once, cached under `$HOME`) and returns operator-framework's validator.
fn olm_validate() -> PathBuf {
    nmo_devcluster::go_tool("build-olm-validate.sh")
}

#[test]
fn operator_framework_validators_report_nothing() {
    let out = Command::new(olm_validate())
        .arg(root().join("bundle"))
        .output()
        .expect("olm-validate runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(": 0 findings"),
        "operator-framework's validators found problems in bundle/:\n{stdout}{stderr}"
    );
    assert!(
        stdout.contains(&format!("CSV {PACKAGE}.v{}", env!("CARGO_PKG_VERSION"))),
        "{stdout}"
    );
}

/// The validator really fails on a broken bundle: one without a CSV version and with an
/// unknown install mode (so the test above cannot pass vacuously).
#[test]
fn the_validator_fails_a_broken_bundle() {
    // Not tempdir()'s `.tmp` prefix: the bundle loader skips hidden directories.
    let tmp = tempfile::Builder::new()
        .prefix("broken-bundle")
        .tempdir()
        .unwrap();
    for dir in ["manifests", "metadata"] {
        std::fs::create_dir_all(tmp.path().join(dir)).unwrap();
        for e in std::fs::read_dir(root().join("bundle").join(dir))
            .unwrap()
            .flatten()
        {
            std::fs::copy(e.path(), tmp.path().join(dir).join(e.file_name())).unwrap();
        }
    }
    let mut broken = csv();
    broken["spec"]["minKubeVersion"] = Value::from("not-a-version");
    broken["spec"]["icon"] = Value::Null;
    std::fs::write(
        tmp.path()
            .join(format!("manifests/{PACKAGE}.clusterserviceversion.yaml")),
        serde_yaml::to_string(&broken).unwrap(),
    )
    .unwrap();
    let out = Command::new(olm_validate())
        .arg(tmp.path())
        .output()
        .expect("olm-validate runs");
    let stdout = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{stdout}");
    assert!(stdout.contains("MinKubeVersion"), "{stdout}");
    assert!(stdout.contains("Icon not specified"), "{stdout}");
}

/// Builds (once, cached under `$HOME`) and returns operator-registry's opm.
fn opm() -> PathBuf {
    nmo_devcluster::go_tool("build-opm.sh")
}

fn opm_validate(dir: &Path) -> (bool, String) {
    let out = Command::new(opm())
        .arg("validate")
        .arg(dir)
        .output()
        .expect("opm runs");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// `opm validate catalog/` passes. The long form: opm's cold build takes about 15 minutes on a
/// loaded 2-core machine, so libtest reports this test as ignored (with the reason) unless run
/// with `-- --include-ignored`.
#[test]
#[ignore = "long form: needs opm (cold build about 15 min); run with -- --include-ignored"]
fn the_catalog_passes_opm_validate() {
    let (ok, text) = opm_validate(&root().join(bundle::CATALOG_DIR));
    assert!(ok, "opm validate catalog/:\n{text}");
}

/// The catalog is the bundle's: its package, channel and bundle name this CSV, its image and
/// properties (no tool needed).
#[test]
fn the_catalog_describes_the_bundle() {
    let docs = bundle::parse_documents(
        &std::fs::read_to_string(root().join(format!("catalog/{PACKAGE}/catalog.yaml"))).unwrap(),
    )
    .unwrap();
    let schema = |s: &str| -> Vec<&Value> { docs.iter().filter(|d| d["schema"] == s).collect() };
    let csv = csv();
    let version = env!("CARGO_PKG_VERSION");
    let [package] = <[&Value; 1]>::try_from(schema("olm.package")).unwrap();
    assert_eq!(package["name"], PACKAGE);
    assert_eq!(package["defaultChannel"], "stable");
    let [channel] = <[&Value; 1]>::try_from(schema("olm.channel")).unwrap();
    assert_eq!(channel["entries"][0]["name"], csv["metadata"]["name"]);
    assert_eq!(channel["entries"][0]["skipRange"], format!("<{version}"));
    let [b] = <[&Value; 1]>::try_from(schema("olm.bundle")).unwrap();
    assert_eq!(b["name"], csv["metadata"]["name"]);
    assert_eq!(b["image"], format!("{}:v{version}", bundle::BUNDLE_IMAGE));
    let props = b["properties"].as_array().unwrap();
    let prop = |t: &str| props.iter().find(|p| p["type"] == t).map(|p| &p["value"]);
    assert_eq!(
        prop("olm.package").unwrap(),
        &serde_json::json!({"packageName": PACKAGE, "version": version})
    );
    assert_eq!(prop("olm.gvk").unwrap()["kind"], "NodeMaintenance");
    assert_eq!(
        prop("olm.csv.metadata").unwrap()["annotations"],
        csv["metadata"]["annotations"]
    );
    let images: Vec<&Value> = b["relatedImages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| &i["image"])
        .collect();
    assert!(images.contains(&&b["image"]), "{images:?}");
    assert!(
        images.contains(&&csv["spec"]["relatedImages"][0]["image"]),
        "{images:?}"
    );
}

/// opm really fails a broken catalog: a channel entry naming a bundle that does not exist.
#[test]
#[ignore = "long form: needs opm (cold build about 15 min); run with -- --include-ignored"]
fn opm_validate_fails_a_broken_catalog() {
    let tmp = tempfile::Builder::new()
        .prefix("broken-catalog")
        .tempdir()
        .unwrap();
    let dir = tmp.path().join(PACKAGE);
    std::fs::create_dir_all(&dir).unwrap();
    let text = std::fs::read_to_string(root().join(format!("catalog/{PACKAGE}/catalog.yaml")))
        .unwrap()
        .replacen(
            &format!("- name: {PACKAGE}.v"),
            &format!("- name: {PACKAGE}.vmissing-"),
            1,
        );
    std::fs::write(dir.join("catalog.yaml"), text).unwrap();
    let (ok, text) = opm_validate(tmp.path());
    assert!(!ok, "a broken catalog passed:\n{text}");
    assert!(text.contains("not found in any channel entries"), "{text}");
}

/// The CSV carries the OLM and OpenShift metadata upstream's does, where it applies: the
/// suggested namespace (upstream's), a skipRange, relatedImages with the operator image, and
/// the `features.operators.openshift.io` annotations; the bundle ships the monitoring kit.
#[test]
fn csv_carries_upstreams_olm_metadata_and_the_monitoring_kit() {
    let csv = csv();
    let a = &csv["metadata"]["annotations"];
    assert_eq!(
        a["operatorframework.io/suggested-namespace"],
        bundle::SUGGESTED_NAMESPACE
    );
    let template: Value = serde_json::from_str(
        a["operatorframework.io/suggested-namespace-template"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(template["kind"], "Namespace");
    assert_eq!(template["metadata"]["name"], bundle::SUGGESTED_NAMESPACE);
    assert_eq!(
        template["metadata"]["annotations"]["openshift.io/node-selector"],
        ""
    );
    assert_eq!(
        a["olm.skipRange"],
        format!("<{}", env!("CARGO_PKG_VERSION"))
    );
    for (k, v) in [
        ("disconnected", "true"),
        ("fips-compliant", "false"),
        ("proxy-aware", "false"),
        ("tls-profiles", "true"),
        ("token-auth-aws", "false"),
        ("token-auth-azure", "false"),
        ("token-auth-gcp", "false"),
    ] {
        assert_eq!(a[format!("features.operators.openshift.io/{k}")], v, "{k}");
    }
    let image =
        csv["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"]["containers"]
            [0]["image"]
            .clone();
    assert_eq!(a["containerImage"], image);
    // The source and repository links name this project (Cargo.toml's `repository`), not
    // upstream's repository.
    assert_eq!(a["repository"], bundle::REPOSITORY);
    assert_eq!(
        csv["spec"]["links"],
        serde_json::json!([{"name": "Source Code", "url": bundle::REPOSITORY}])
    );
    assert!(!bundle::REPOSITORY.contains("medik8s/node-maintenance-operator"));
    assert_eq!(
        csv["spec"]["relatedImages"],
        serde_json::json!([{"name": "manager", "image": image}])
    );
    let files = files_on_disk();
    for f in [
        "bundle/manifests/node-maintenance-operator-alerts_monitoring.coreos.com_v1_prometheusrule.yaml",
        "bundle/manifests/node-maintenance-operator-metrics-monitor_monitoring.coreos.com_v1_servicemonitor.yaml",
        "bundle/manifests/node-maintenance-operator-metrics-reader-prometheus_rbac.authorization.k8s.io_v1_clusterrolebinding.yaml",
        "bundle/manifests/node-maintenance-operator-dashboard_v1_configmap.yaml",
    ] {
        assert!(files.contains(f), "{f} missing from {files:?}");
    }
}

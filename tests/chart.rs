//! The Helm chart (`charts/node-maintenance-operator/`): the files are exactly what `chartgen`
//! renders from `manifests/` today; `helm template` with default values renders exactly the
//! objects of `kubectl kustomize manifests/`, and each value renders exactly its overlay;
//! `helm lint` passes (and refuses a value outside the schema); and the chart installs on the
//! real control plane in a server-side dry run (`helm install --dry-run=server`, and its
//! objects applied with `kubectl apply --dry-run=server`).
//!
//! helm is built from the Go module proxy by `tests/cluster/build-helm.sh` (cached under
//! `$HOME`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use nmo_devcluster::Cluster;
use nmo_packaging::bundle::{self, parse_documents};
use nmo_packaging::chart::{self, CHART_DIR, Renderings};
use serde_json::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn kubectl() -> PathBuf {
    nmo_devcluster::ensure_binaries()
        .expect("control plane binaries")
        .join("bin/kubectl")
}

fn kustomize(dir: &str) -> String {
    let out = Command::new(kubectl())
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

/// Builds (once, cached under `$HOME`) and returns helm.
fn helm_bin() -> PathBuf {
    nmo_devcluster::go_tool("build-helm.sh")
}

/// helm with its caches and configuration in a directory of its own.
fn helm(args: &[&str]) -> (bool, String, String) {
    static HOME: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let home = HOME.get_or_init(|| tempfile::tempdir().unwrap()).path();
    let out = Command::new(helm_bin())
        .args(args)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .expect("helm runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The local control plane's version (`tests/cluster/versions.sh`), for `helm template` and
/// `helm lint` (which otherwise assume the Kubernetes that helm was built against, v1.20
/// without release ldflags).
fn kube_version() -> &'static str {
    static VERSION: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(nmo_devcluster::versions::kube);
    &VERSION
}

/// The image an install names (`--set`): the chart refuses its placeholder default at install
/// (nothing is published there), and on kwok no image is pulled anyway.
const IMAGE: &str = "image.repository=registry.example/node-maintenance-operator";

fn chart_path() -> String {
    root().join(CHART_DIR).display().to_string()
}

type Objects = BTreeMap<(String, String, String), Value>;

fn objects(text: &str) -> Objects {
    parse_documents(text)
        .unwrap()
        .into_iter()
        .map(|d| {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (
                (
                    s(&d["kind"]),
                    s(&d["metadata"]["namespace"]),
                    s(&d["metadata"]["name"]),
                ),
                d,
            )
        })
        .collect()
}

/// `helm template` of the chart with `--set` values `sets`, CRDs included.
fn template(sets: &[&str]) -> Objects {
    let path = chart_path();
    let mut args = vec![
        "template",
        "nmo",
        path.as_str(),
        "--include-crds",
        "--kube-version",
        kube_version(),
    ];
    for s in sets {
        args.extend(["--set", s]);
    }
    let (ok, out, err) = helm(&args);
    assert!(ok, "helm template {sets:?}: {err}");
    objects(&out)
}

fn assert_same(what: &str, got: &Objects, want: &Objects) {
    let g: BTreeSet<_> = got.keys().collect();
    let w: BTreeSet<_> = want.keys().collect();
    assert_eq!(g, w, "{what}: the chart renders other objects");
    for (k, v) in want {
        assert_eq!(&got[k], v, "{what}: {k:?} differs");
    }
}

#[test]
fn chart_files_are_what_chartgen_renders() {
    let files = chart::render(
        &Renderings::with(|d| Ok::<_, ()>(kustomize(d))).unwrap(),
        env!("CARGO_PKG_VERSION"),
    )
    .expect("the manifests render into a chart");
    let regen =
        "regenerate with\n\n    KUBECTL=<kubectl> cargo run -p nmo-packaging --bin chartgen\n";
    let mut on_disk = BTreeSet::new();
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
    // The chart's source links name this project (Cargo.toml's `repository`).
    let meta: Value = serde_yaml::from_str(
        &files
            .iter()
            .find(|f| f.path == format!("{CHART_DIR}/Chart.yaml"))
            .expect("Chart.yaml")
            .content,
    )
    .unwrap();
    assert_eq!(meta["home"], bundle::REPOSITORY);
    assert_eq!(meta["sources"], serde_json::json!([bundle::REPOSITORY]));
    walk(&root().join(CHART_DIR), &mut on_disk);
    let rendered: BTreeSet<String> = files.iter().map(|f| f.path.clone()).collect();
    assert_eq!(rendered, on_disk, "the chart's file list is stale; {regen}");
    for f in files {
        let disk = std::fs::read_to_string(root().join(&f.path)).unwrap_or_default();
        assert!(disk == f.content, "{} is out of date; {regen}", f.path);
    }
}

/// The Secret the Deployment mounts as the webhook's serving pair.
const SERVING_SECRET: &str = "webhook-server-cert";

/// Takes the chart's generated serving pair out of a default rendering: the Secret, and the
/// `caBundle` of every webhook, after checking that each webhook trusts the Secret's CA. What
/// remains is what kustomize renders.
fn without_generated_pair(mut got: Objects) -> Objects {
    let key = (
        "Secret".to_string(),
        "node-maintenance-operator-system".to_string(),
        SERVING_SECRET.to_string(),
    );
    let secret = got
        .remove(&key)
        .expect("the chart renders the serving Secret");
    assert_eq!(secret["type"], "kubernetes.io/tls");
    let data = &secret["data"];
    for k in ["tls.crt", "tls.key", "ca.crt"] {
        assert!(
            data[k].as_str().is_some_and(|v| v.len() > 100),
            "{k}: {data}"
        );
    }
    let vwc = got
        .iter_mut()
        .find(|(k, _)| k.0 == "ValidatingWebhookConfiguration")
        .unwrap()
        .1;
    for w in vwc["webhooks"].as_array_mut().unwrap() {
        let config = w["clientConfig"].as_object_mut().unwrap();
        assert_eq!(config.remove("caBundle").as_ref(), Some(&data["ca.crt"]));
    }
    got
}

/// Default values: exactly `kubectl kustomize manifests/` and the generated serving pair. Each
/// value: exactly its overlay (plus the CRD, which the overlays leave to `manifests/crd.yaml`).
#[test]
fn the_chart_renders_what_kustomize_renders() {
    let default = objects(&kustomize("manifests"));
    assert_same(
        "default values",
        &without_generated_pair(template(&[])),
        &default,
    );
    let crd: Objects = default
        .iter()
        .filter(|(k, _)| k.0 == "CustomResourceDefinition")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(crd.len(), 1);
    for (sets, dir) in [
        (
            &["metrics.mode=secure"][..],
            "manifests/overlays/metrics-secure",
        ),
        (
            &["certManager.enabled=true"][..],
            "manifests/overlays/cert-manager",
        ),
        (
            &["monitoring.enabled=true"][..],
            "manifests/overlays/monitoring",
        ),
        (
            &["monitoring.enabled=true", "metrics.mode=secure"][..],
            "manifests/overlays/monitoring/secure",
        ),
        (
            &["forceDelete.enabled=true"][..],
            "manifests/overlays/force-delete",
        ),
        (
            &["kubevirt.enabled=true"][..],
            "manifests/overlays/kubevirt",
        ),
    ] {
        let mut want = objects(&kustomize(dir));
        want.extend(crd.clone());
        let got = if sets.contains(&"certManager.enabled=true") {
            template(sets)
        } else {
            without_generated_pair(template(sets))
        };
        assert_same(dir, &got, &want);
    }

    // The other values reach the Deployment.
    let got = template(&[
        "image.repository=registry.example/nmo",
        "image.tag=v9",
        "replicas=3",
        "leaderElection.enabled=false",
        "namespace=ops",
    ]);
    let dep = got
        .iter()
        .find(|(k, _)| k.0 == "Deployment")
        .map(|(k, v)| (k.clone(), v.clone()))
        .unwrap();
    assert_eq!(dep.0.1, "ops");
    let spec = &dep.1["spec"];
    assert_eq!(spec["replicas"], 3);
    let c = &spec["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "registry.example/nmo:v9");
    assert!(
        !c["args"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "--leader-elect"),
        "{}",
        c["args"]
    );
    // The namespace value moves every object of the operator's namespace and what names it.
    assert!(
        got.keys().all(|k| k.1.is_empty() || ["ops", "medik8s-leases", "default"].contains(&k.1.as_str())),
        "{:?}",
        got.keys().collect::<Vec<_>>()
    );
    let vwc = got
        .iter()
        .find(|(k, _)| k.0 == "ValidatingWebhookConfiguration")
        .unwrap()
        .1;
    assert_eq!(
        vwc["webhooks"][0]["clientConfig"]["service"]["namespace"],
        "ops"
    );
}

/// `helm template` with no flag at all (default values, helm's default Kubernetes version: v1.20
/// for a helm built without release flags, as ours) renders the chart, prints nothing on stderr,
/// and leaves the placeholder image to an install, which has a cluster to refuse it on
/// (`helm_install_alone_gives_a_working_webhook`).
#[test]
fn helm_template_with_default_flags_renders_without_a_warning() {
    let (ok, out, err) = helm(&["template", "nmo", &chart_path()]);
    assert!(ok, "helm template with default flags failed:\n{err}");
    assert_eq!(err.trim(), "", "helm template printed on stderr");
    let rendered = objects(&out);
    let want = objects(&kustomize("manifests"));
    for kind in [
        "Deployment",
        "ValidatingWebhookConfiguration",
        "ClusterRole",
    ] {
        assert!(
            rendered.keys().any(|k| k.0 == kind),
            "no {kind} rendered:\n{out}"
        );
    }
    // The Deployment is kustomize's, the placeholder image included.
    let deployment = |o: &Objects| {
        o.iter()
            .find(|(k, _)| k.0 == "Deployment")
            .map(|(_, v)| v.clone())
            .unwrap()
    };
    assert_eq!(deployment(&rendered), deployment(&want));
}

#[test]
fn helm_lint_passes_and_refuses_values_outside_the_schema() {
    let path = chart_path();
    for sets in [
        "metrics.mode=plain",
        "metrics.mode=secure,monitoring.enabled=true,certManager.enabled=true",
    ] {
        let (ok, out, err) = helm(&[
            "lint",
            "--strict",
            "--kube-version",
            kube_version(),
            &path,
            "--set",
            sets,
        ]);
        assert!(
            ok && out.contains("0 chart(s) failed"),
            "helm lint {sets}:\n{out}{err}"
        );
    }
    let (ok, out, err) = helm(&[
        "lint",
        "--kube-version",
        kube_version(),
        &path,
        "--set",
        "metrics.mode=insecure",
    ]);
    assert!(!ok, "a bad metrics mode passed lint:\n{out}{err}");
    assert!(
        format!("{out}{err}").contains("/metrics/mode"),
        "{out}{err}"
    );
}

/// Installs the Prometheus Operator's ServiceMonitor and PrometheusRule CRDs
/// (`tests/cluster/fetch-prometheus-operator-crds.sh`) and waits until they are served.
fn install_monitoring_crds(cluster: &Cluster) {
    let script = root().join("tests/cluster/fetch-prometheus-operator-crds.sh");
    let out = Command::new("bash")
        .arg(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("bash runs");
    assert!(out.status.success(), "{} failed", script.display());
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    cluster
        .kubectl_run(&["apply", "--server-side", "-f", &dir], None)
        .unwrap();
    for crd in ["servicemonitors", "prometheusrules"] {
        cluster
            .kubectl_run(
                &[
                    "wait",
                    "--for=condition=Established",
                    "--timeout=120s",
                    &format!("crd/{crd}.monitoring.coreos.com"),
                ],
                None,
            )
            .unwrap();
    }
}

/// `helm install --dry-run=server` against the local control plane, over namespaces that
/// exist already without Helm's ownership (as another medik8s operator leaves
/// `medik8s-leases`); the objects it would create validated by the API server
/// (`kubectl apply --dry-run=server`), for plain and secure metrics, with monitoring (against
/// the Prometheus Operator's real CRDs); and the monitoring overlays applied the same way.
#[test]
fn the_chart_installs_on_the_control_plane_in_a_server_side_dry_run() {
    let cluster = Cluster::shared();
    install_monitoring_crds(cluster);
    // A dry run creates no namespace, so the namespaced objects need theirs to exist.
    for ns in ["node-maintenance-operator-system", "medik8s-leases"] {
        cluster
            .kubectl_run(&["create", "namespace", ns], None)
            .unwrap();
    }
    let kubeconfig = cluster.kubeconfig().display().to_string();
    let path = chart_path();
    for dir in [
        "manifests/overlays/monitoring",
        "manifests/overlays/monitoring/secure",
    ] {
        let out = cluster
            .kubectl_run(
                &[
                    "apply",
                    "--dry-run=server",
                    "-k",
                    &root().join(dir).display().to_string(),
                ],
                None,
            )
            .unwrap_or_else(|e| panic!("{dir}: {e}"));
        for kind in [
            "prometheusrule.monitoring.coreos.com/node-maintenance-operator-alerts",
            "servicemonitor.monitoring.coreos.com/node-maintenance-operator-metrics-monitor",
            "configmap/node-maintenance-operator-dashboard",
        ] {
            assert!(out.contains(kind), "{dir}: {kind} not applied:\n{out}");
        }
    }
    for sets in [
        "metrics.mode=plain",
        "metrics.mode=secure",
        "metrics.mode=plain,monitoring.enabled=true",
        "metrics.mode=secure,monitoring.enabled=true",
    ] {
        let (ok, out, err) = helm(&[
            "install",
            "nmo",
            &path,
            "--dry-run=server",
            "--kubeconfig",
            &kubeconfig,
            "--set",
            sets,
            "--set",
            IMAGE,
        ]);
        assert!(ok, "helm install --dry-run=server {sets}:\n{out}{err}");
        assert!(out.contains("STATUS: pending-install"), "{out}");
        // The existing namespaces are left alone, everything else is installed.
        assert!(!out.contains("kind: Namespace"), "{out}");
        assert!(out.contains("kind: Deployment"), "{out}");

        let (ok, rendered, err) = helm(&[
            "template",
            "nmo",
            &path,
            "--include-crds",
            "--kube-version",
            kube_version(),
            "--set",
            sets,
        ]);
        assert!(ok, "{err}");
        let applied = cluster
            .kubectl_run(&["apply", "--dry-run=server", "-f", "-"], Some(&rendered))
            .unwrap_or_else(|e| panic!("{sets}: the API server refused the chart: {e}"));
        for kind in [
            "customresourcedefinition.apiextensions.k8s.io/nodemaintenances.nodemaintenance.medik8s.io",
            "deployment.apps/node-maintenance-operator-controller-manager",
            "validatingwebhookconfiguration.admissionregistration.k8s.io/",
        ] {
            assert!(applied.contains(kind), "{kind} not applied:\n{applied}");
        }
        if sets.contains("monitoring") {
            assert!(
                applied.contains("servicemonitor.monitoring.coreos.com/"),
                "{applied}"
            );
        }
    }
}

/// Reads Secret `name` of `ns`: its `data`, base64-decoded.
fn secret_data(cluster: &Cluster, ns: &str, name: &str) -> BTreeMap<String, Vec<u8>> {
    use base64::Engine;
    let out = cluster
        .kubectl_run(&["get", "secret", "-n", ns, name, "-o", "json"], None)
        .unwrap_or_else(|e| panic!("Secret {ns}/{name}: {e}"));
    let secret: Value = serde_json::from_str(&out).unwrap();
    secret["data"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            let b = base64::engine::general_purpose::STANDARD
                .decode(v.as_str().unwrap())
                .unwrap();
            (k.clone(), b)
        })
        .collect()
}

/// kubectl create of a NodeMaintenance `name` for `node`: Ok(stdout) or Err(stderr).
fn create_nm(cluster: &Cluster, name: &str, node: &str) -> Result<String, String> {
    let nm = format!(
        "apiVersion: nodemaintenance.medik8s.io/v1beta1\nkind: NodeMaintenance\nmetadata:\n  name: {name}\nspec:\n  nodeName: {node}\n  reason: chart e2e\n"
    );
    cluster
        .kubectl_run(&["create", "-f", "-"], Some(&nm))
        .map_err(|e| e.to_string())
}

/// Polls `check` every 500 ms for up to `limit`; panics with `what` and the last thing seen.
fn wait_until<T>(
    what: &str,
    limit: std::time::Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = std::time::Instant::now() + limit;
    loop {
        match check() {
            Ok(v) => return v,
            Err(seen) if std::time::Instant::now() > deadline => {
                panic!("timed out after {limit:?} waiting for {what}; last seen: {seen}")
            }
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(500)),
        }
    }
}

/// `helm install` with default values (cert-manager off) on the local control plane gives a
/// working webhook: the chart's own serving pair, its CA injected as the `caBundle`, and
/// nothing made by hand. The operator image cannot run here, so the operator binary runs
/// locally as the chart's ServiceAccount, serving the Secret's pair on 127.0.0.1:443, and the
/// webhook Service is pointed at it (ExternalName `localhost`; the API server still verifies
/// the certificate for `<service>.<namespace>.svc`). A NodeMaintenance of a node that does not
/// exist is refused by the webhook, a valid one Succeeds; `helm upgrade` keeps the same pair and
/// the webhook keeps working; an upgrade within 30 days of the pair's expiry replaces it, with
/// the new CA as the `caBundle`, and the operator (which reloads its certificate files) serves
/// the new pair.
#[test]
fn helm_install_alone_gives_a_working_webhook() {
    const NS: &str = "node-maintenance-operator-system";
    const LIMIT: std::time::Duration = std::time::Duration::from_secs(120);
    let cluster = Cluster::start(nmo_devcluster::Options {
        workers: 1,
        control_planes: 0,
        audit_policy: None,
    })
    .unwrap_or_else(|e| panic!("the local control plane did not start: {e}"));
    let node = cluster.nodes()[0].clone();
    let kubeconfig = cluster.kubeconfig().display().to_string();
    let path = chart_path();
    // With default values the image is the unpublished placeholder: refused, with the value to
    // set and where the README says how, and nothing installed.
    let (ok, out, err) = helm(&["install", "nmo", &path, "--kubeconfig", &kubeconfig]);
    assert!(
        !ok,
        "helm install with the placeholder image was not refused:\n{out}{err}"
    );
    for needle in ["image.repository", "placeholder", "Dockerfile", "README"] {
        assert!(
            err.contains(needle),
            "the refusal does not say {needle:?}:\n{err}"
        );
    }
    let (ok, releases, err) = helm(&["list", "-q", "--all", "--kubeconfig", &kubeconfig]);
    assert!(
        ok && releases.trim().is_empty(),
        "after a refusal: {releases}{err}"
    );
    assert!(
        cluster
            .kubectl_run(&["get", "namespace", NS], None)
            .is_err(),
        "the refused install created {NS}"
    );

    let (ok, out, err) = helm(&[
        "install",
        "nmo",
        &path,
        "--kubeconfig",
        &kubeconfig,
        "--set",
        IMAGE,
    ]);
    assert!(ok, "helm install:\n{out}{err}");
    // The API server's warnings (a deprecated node label, ...) reach helm's stderr.
    assert_eq!(err.trim(), "", "helm install printed warnings");
    // NOTES.txt: what to check after install.
    for needle in [
        "kubectl -n node-maintenance-operator-system rollout status deployment/node-maintenance-operator-controller-manager",
        "kubectl -n node-maintenance-operator-system get secret webhook-server-cert",
        "kubectl get crd nodemaintenances.nodemaintenance.medik8s.io",
        "kubectl nm list",
    ] {
        assert!(
            out.contains(needle),
            "the NOTES do not say {needle:?}:\n{out}"
        );
    }
    let pair = secret_data(&cluster, NS, SERVING_SECRET);

    let cert_dir = cluster.dir().join("chart-operator-certs");
    std::fs::create_dir_all(&cert_dir).unwrap();
    for k in ["tls.crt", "tls.key"] {
        std::fs::write(cert_dir.join(k), &pair[k]).unwrap();
    }
    cluster
        .kubectl_run(
            &[
                "patch",
                "service",
                "-n",
                NS,
                "node-maintenance-operator-webhook-service",
                "--type=merge",
                "-p",
                r#"{"spec":{"type":"ExternalName","externalName":"localhost","clusterIP":null,"clusterIPs":null,"selector":null}}"#,
            ],
            None,
        )
        .unwrap_or_else(|e| panic!("pointing the webhook Service at loopback: {e}"));
    let account = nmo_devcluster::operator::ServiceAccountRef {
        namespace: NS.into(),
        name: "node-maintenance-operator-controller-manager".into(),
    };
    let sa_kubeconfig =
        nmo_devcluster::operator::service_account_kubeconfig(&cluster, &account).unwrap();
    let ports = nmo_devcluster::free_ports(2).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_node-maintenance-operator"));
    cmd.args([
        format!("--kubeconfig={}", sa_kubeconfig.display()),
        format!("--webhook-cert-path={}", cert_dir.display()),
        "--webhook-cert-name=tls.crt".into(),
        "--webhook-cert-key=tls.key".into(),
        // The port the chart's webhook configuration names on the Service.
        "--webhook-bind-address=127.0.0.1:443".into(),
        format!("--metrics-bind-address=127.0.0.1:{}", ports[0]),
        format!("--health-probe-bind-address=127.0.0.1:{}", ports[1]),
        "--leader-elect=false".into(),
    ])
    .env("POD_NAMESPACE", NS);
    let operator = cluster.spawn("chart-operator", cmd).unwrap();
    let log = cluster.dir().join("chart-operator.log");
    let log_tail = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_until("the operator ready", LIMIT, || {
        nmo_devcluster::http_get(("127.0.0.1", ports[1]), "/readyz")
            .filter(|r| r.starts_with("HTTP/1.1 200") || r.starts_with("HTTP/1.0 200"))
            .ok_or_else(log_tail)
    });

    let refused = |name: &str| {
        let typo = format!("{node}-typo");
        wait_until(
            "the webhook refusing a typo'd node",
            LIMIT,
            || match create_nm(&cluster, name, &typo) {
                Ok(out) => Err(format!("admitted: {out}")),
                Err(e) if e.contains(&format!("no node with name {typo} found")) => Ok(()),
                Err(e) => Err(e),
            },
        )
    };
    let succeeds = |name: &str| {
        create_nm(&cluster, name, &node).unwrap_or_else(|e| panic!("creating {name}: {e}"));
        wait_until(&format!("{name} Succeeded"), LIMIT, || {
            let phase = cluster
                .kubectl_run(
                    &[
                        "get",
                        "nodemaintenance",
                        name,
                        "-o",
                        "jsonpath={.status.phase}",
                    ],
                    None,
                )
                .map_err(|e| e.to_string())?;
            (phase == "Succeeded")
                .then_some(())
                .ok_or_else(|| format!("phase {phase:?}; operator log:\n{}", log_tail()))
        });
        cluster
            .kubectl_run(&["delete", "nodemaintenance", name, "--wait=true"], None)
            .unwrap_or_else(|e| panic!("deleting {name}: {e}"));
    };
    refused("chart-typo");
    succeeds("chart-valid");

    let (ok, out, err) = helm(&[
        "upgrade",
        "nmo",
        &path,
        "--kubeconfig",
        &kubeconfig,
        "--set",
        IMAGE,
    ]);
    assert!(ok, "helm upgrade:\n{out}{err}");
    assert_eq!(
        secret_data(&cluster, NS, SERVING_SECRET),
        pair,
        "helm upgrade replaced a serving pair far from expiry"
    );
    refused("chart-typo-after-upgrade");
    succeeds("chart-valid-after-upgrade");

    // Within 30 days of its expiry, an upgrade replaces the pair and injects the new CA.
    let soon = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_hours(24))
        .unwrap()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    cluster
        .kubectl_run(
            &[
                "annotate",
                "secret",
                "-n",
                NS,
                SERVING_SECRET,
                "--overwrite",
                &format!("nodemaintenance.medik8s.io/webhook-cert-not-after={soon}"),
            ],
            None,
        )
        .unwrap();
    let (ok, out, err) = helm(&[
        "upgrade",
        "nmo",
        &path,
        "--kubeconfig",
        &kubeconfig,
        "--set",
        IMAGE,
    ]);
    assert!(ok, "helm upgrade:\n{out}{err}");
    let renewed = secret_data(&cluster, NS, SERVING_SECRET);
    assert_ne!(
        renewed["tls.crt"], pair["tls.crt"],
        "a pair close to expiry was kept"
    );
    assert_ne!(renewed["ca.crt"], pair["ca.crt"]);
    let ca_bundle = cluster
        .kubectl_run(
            &[
                "get",
                "validatingwebhookconfiguration",
                "node-maintenance-operator-validating-webhook-configuration",
                "-o",
                "jsonpath={.webhooks[0].clientConfig.caBundle}",
            ],
            None,
        )
        .unwrap();
    use base64::Engine;
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(ca_bundle.trim())
            .unwrap(),
        renewed["ca.crt"],
        "the caBundle is the new CA"
    );
    for k in ["tls.crt", "tls.key"] {
        std::fs::write(cert_dir.join(k), &renewed[k]).unwrap();
    }
    refused("chart-typo-after-renewal");
    drop(operator);
}

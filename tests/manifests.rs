//! Static checks of `manifests/`: the Deployment's hardening and probes, that its args are flags
//! the binary accepts, the webhook registration, that the RBAC has no wildcard and exactly the
//! rules the code's API calls need, the metrics-secure overlay, and that every pod spec we ship
//! (kustomize renderings and the OLM bundle) passes OpenShift's restricted-v2 rules and selects
//! no deprecated node label. One test is live: `kubectl apply -k manifests/` on the local control
//! plane prints no warning. The end-to-end suite proves the same RBAC is sufficient by running
//! the operator as the ServiceAccount.

use std::collections::BTreeSet;
use std::path::Path;

use clap::Parser;
use node_maintenance_operator::config::{BindAddress, Config};
use serde::Deserialize;
use serde_yaml::Value;

fn docs(file: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("manifests/base")
        .join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{file}: {e}")))
        .filter(|v| !v.is_null())
        .collect()
}

fn by_kind(file: &str, kind: &str) -> Vec<Value> {
    docs(file)
        .into_iter()
        .filter(|d| d["kind"].as_str() == Some(kind))
        .collect()
}

fn strs(v: &Value) -> Vec<String> {
    v.as_sequence()
        .map(|s| {
            s.iter()
                .map(|x| x.as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn deployment_is_hardened_and_probed() {
    let [dep] = <[Value; 1]>::try_from(by_kind("manager.yaml", "Deployment")).unwrap();
    let pod = &dep["spec"]["template"]["spec"];
    assert_eq!(
        pod["serviceAccountName"].as_str(),
        Some("controller-manager")
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"].as_bool(), Some(true));
    let [c] = <[Value; 1]>::try_from(pod["containers"].as_sequence().unwrap().clone()).unwrap();
    assert_eq!(c["name"].as_str(), Some("manager"));
    let sc = &c["securityContext"];
    assert_eq!(sc["runAsNonRoot"].as_bool(), Some(true));
    assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(strs(&sc["capabilities"]["drop"]), ["ALL"]);
    assert_eq!(
        sc["seccompProfile"]["type"].as_str(),
        Some("RuntimeDefault")
    );

    assert_eq!(
        c["livenessProbe"]["httpGet"]["path"].as_str(),
        Some("/healthz")
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"]["path"].as_str(),
        Some("/readyz")
    );
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(c[probe]["httpGet"]["port"].as_u64(), Some(8081), "{probe}");
    }
    let r = &c["resources"];
    assert_eq!(r["requests"]["cpu"].as_str(), Some("100m"));
    assert_eq!(r["requests"]["memory"].as_str(), Some("20Mi"));
    assert_eq!(r["limits"]["cpu"].as_str(), Some("200m"));
    assert_eq!(r["limits"]["memory"].as_str(), Some("64Mi"));

    let env: BTreeSet<String> = c["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect();
    for name in ["POD_NAME", "POD_NAMESPACE", "LEASE_NAMESPACE"] {
        assert!(env.contains(name), "env {name} missing: {env:?}");
    }

    // The args are flags the binary accepts, and the probe port matches them.
    let args = strs(&c["args"]);
    let config = Config::try_parse_from(std::iter::once("manager".to_string()).chain(args))
        .unwrap_or_else(|e| panic!("Deployment args rejected: {e}"));
    assert!(config.leader_elect);
    assert_eq!(
        config.health_probe_bind_address,
        BindAddress::Listen("0.0.0.0:8081".parse().unwrap())
    );
    assert_eq!(config.webhook_bind_address.port(), 9443);

    // The certificate Secret is mounted whole (no subPath, so rotations show up) at the
    // operator's fallback directory.
    let mounts = c["volumeMounts"].as_sequence().unwrap();
    let cert = mounts
        .iter()
        .find(|m| m["name"].as_str() == Some("cert"))
        .expect("cert mount");
    assert_eq!(
        cert["mountPath"].as_str(),
        Some("/tmp/k8s-webhook-server/serving-certs")
    );
    assert!(cert.get("subPath").is_none(), "{cert:?}");
    let volumes = pod["volumes"].as_sequence().unwrap();
    let secret = volumes
        .iter()
        .find(|v| v["name"].as_str() == Some("cert"))
        .expect("cert volume");
    assert_eq!(
        secret["secret"]["secretName"].as_str(),
        Some("webhook-server-cert")
    );
}

#[test]
fn webhook_registration_matches_upstream() {
    let [vwc] =
        <[Value; 1]>::try_from(by_kind("webhook.yaml", "ValidatingWebhookConfiguration")).unwrap();
    let [w] = <[Value; 1]>::try_from(vwc["webhooks"].as_sequence().unwrap().clone()).unwrap();
    assert_eq!(w["name"].as_str(), Some("vnodemaintenance.kb.io"));
    assert_eq!(w["failurePolicy"].as_str(), Some("Fail"));
    assert_eq!(w["sideEffects"].as_str(), Some("None"));
    assert_eq!(w["timeoutSeconds"].as_u64(), Some(15));
    assert_eq!(strs(&w["admissionReviewVersions"]), ["v1"]);
    let svc = &w["clientConfig"]["service"];
    assert_eq!(svc["name"].as_str(), Some("webhook-service"));
    assert_eq!(
        svc["path"].as_str(),
        Some(node_maintenance_operator::admission::WEBHOOK_PATH)
    );
    let [rule] = <[Value; 1]>::try_from(w["rules"].as_sequence().unwrap().clone()).unwrap();
    assert_eq!(strs(&rule["operations"]), ["CREATE", "UPDATE"]);
    assert_eq!(strs(&rule["resources"]), ["nodemaintenances"]);
    assert_eq!(strs(&rule["apiGroups"]), ["nodemaintenance.medik8s.io"]);

    let services = by_kind("services.yaml", "Service");
    let webhook = services
        .iter()
        .find(|s| s["metadata"]["name"].as_str() == Some("webhook-service"))
        .expect("webhook-service");
    let [port] =
        <[Value; 1]>::try_from(webhook["spec"]["ports"].as_sequence().unwrap().clone()).unwrap();
    assert_eq!(port["port"].as_u64(), Some(443));
    assert_eq!(port["targetPort"].as_u64(), Some(9443));
}

/// `(namespace or "*cluster*", apiGroup, resource, verb)` for every rule of the Roles and
/// ClusterRoles in rbac.yaml.
fn grants() -> BTreeSet<(String, String, String, String)> {
    let mut out = BTreeSet::new();
    for d in docs("rbac.yaml") {
        let scope = match d["kind"].as_str() {
            Some("ClusterRole") => "*cluster*".to_string(),
            Some("Role") => d["metadata"]["namespace"].as_str().unwrap().to_string(),
            _ => continue,
        };
        for rule in d["rules"].as_sequence().unwrap() {
            for g in strs(&rule["apiGroups"]) {
                for r in strs(&rule["resources"]) {
                    for v in strs(&rule["verbs"]) {
                        out.insert((scope.clone(), g.clone(), r.clone(), v));
                    }
                }
            }
        }
    }
    out
}

#[test]
fn rbac_has_no_wildcard_and_exactly_the_needed_rules() {
    let g = grants();
    assert!(
        !g.iter()
            .any(|(_, a, b, c)| a == "*" || b == "*" || c == "*"),
        "wildcard in {g:?}"
    );
    let cluster = "*cluster*";
    let mut want = BTreeSet::new();
    let mut add = |scope: &str, group: &str, res: &str, verbs: &[&str]| {
        for v in verbs {
            want.insert((
                scope.to_string(),
                group.to_string(),
                res.to_string(),
                v.to_string(),
            ));
        }
    };
    let nm = "nodemaintenance.medik8s.io";
    add(
        cluster,
        nm,
        "nodemaintenances",
        &["get", "list", "watch", "patch", "delete"],
    );
    add(cluster, nm, "nodemaintenances/status", &["patch"]);
    add(cluster, "", "nodes", &["get", "list", "watch", "patch"]);
    add(cluster, "", "nodes/status", &["patch"]);
    add(cluster, "", "pods", &["get", "list", "watch"]);
    add(cluster, "", "pods/eviction", &["create"]);
    add(cluster, "apps", "daemonsets", &["get"]);
    add(cluster, "apps", "replicasets", &["get", "list", "watch"]);
    // surge: RolloutRestart reads a pod's Deployment and patches its template (a rollout restart).
    add(cluster, "apps", "deployments", &["get", "patch"]);
    add(
        cluster,
        "policy",
        "poddisruptionbudgets",
        &["list", "watch"],
    );
    add(
        cluster,
        "lifecycle.k8s.io",
        "evictions",
        &["get", "list", "watch"],
    );
    add(cluster, "", "namespaces", &["get", "create"]);
    // waitForVolumeDetach reads the node's attachments and their volumes' claims, never writes.
    add(
        cluster,
        "storage.k8s.io",
        "volumeattachments",
        &["get", "list", "watch"],
    );
    add(cluster, "", "persistentvolumes", &["get"]);
    add(
        cluster,
        "config.openshift.io",
        "apiservers",
        &["get", "list", "watch"],
    );
    add(
        "node-maintenance-operator-system",
        "coordination.k8s.io",
        "leases",
        // Leader election updates the Lease guarded by its resourceVersion (docs/compat.md §9).
        &["get", "create", "update"],
    );
    add(
        "medik8s-leases",
        "coordination.k8s.io",
        "leases",
        &["get", "create", "update", "delete"],
    );
    add("default", "events.k8s.io", "events", &["create", "patch"]);
    let missing: Vec<_> = want.difference(&g).collect();
    let extra: Vec<_> = g.difference(&want).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing {missing:?}\nextra {extra:?}"
    );
}

#[test]
fn every_role_is_bound_to_the_service_account() {
    let d = docs("rbac.yaml");
    let roles: BTreeSet<(String, String)> = d
        .iter()
        .filter(|x| matches!(x["kind"].as_str(), Some("Role" | "ClusterRole")))
        .map(|x| {
            (
                x["kind"].as_str().unwrap().to_string(),
                x["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let bound: BTreeSet<(String, String)> = d
        .iter()
        .filter(|x| {
            matches!(
                x["kind"].as_str(),
                Some("RoleBinding" | "ClusterRoleBinding")
            )
        })
        .inspect(|b| {
            let [s] = <[Value; 1]>::try_from(b["subjects"].as_sequence().unwrap().clone()).unwrap();
            assert_eq!(s["kind"].as_str(), Some("ServiceAccount"));
            assert_eq!(s["name"].as_str(), Some("controller-manager"));
            assert_eq!(
                s["namespace"].as_str(),
                Some("node-maintenance-operator-system")
            );
        })
        .map(|b| {
            (
                b["roleRef"]["kind"].as_str().unwrap().to_string(),
                b["roleRef"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(roles, bound);
}

/// `kubectl kustomize <dir>` (kubectl from the test control plane's cache), parsed.
fn kustomize(dir: &str) -> Vec<Value> {
    let bins = nmo_devcluster::ensure_binaries().expect("control plane binaries");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(bins.join("bin/kubectl"))
        .args(["kustomize", &root.join(dir).display().to_string()])
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl kustomize {dir}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_yaml::Deserializer::from_str(&String::from_utf8_lossy(&out.stdout))
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{dir}: {e}")))
        .filter(|v| !v.is_null())
        .collect()
}

/// Breaches of OpenShift's `restricted-v2` SCC (and Pod Security `restricted`) in one pod spec:
/// root allowed, a fixed UID, GID or fsGroup (the SCC assigns them from the namespace's range
/// and refuses a pod that pins one outside it), capabilities not dropped to nothing, privilege
/// escalation, privileged containers, host namespaces, ports or paths, and a seccomp profile
/// other than RuntimeDefault.
fn restricted_v2_breaches(pod: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let psc = &pod["securityContext"];
    for field in ["runAsUser", "runAsGroup", "fsGroup", "supplementalGroups"] {
        if !psc[field].is_null() {
            out.push(format!("pod securityContext.{field} is fixed"));
        }
    }
    for field in ["hostNetwork", "hostPID", "hostIPC"] {
        if pod[field].as_bool() == Some(true) {
            out.push(format!("pod {field}"));
        }
    }
    for v in pod["volumes"].as_sequence().into_iter().flatten() {
        if !v["hostPath"].is_null() {
            out.push(format!("hostPath volume {:?}", v["name"]));
        }
    }
    let containers = ["initContainers", "containers"]
        .iter()
        .flat_map(|k| pod[*k].as_sequence().cloned().unwrap_or_default());
    for c in containers {
        let name = c["name"].as_str().unwrap_or_default().to_string();
        let sc = &c["securityContext"];
        for field in ["runAsUser", "runAsGroup"] {
            if !sc[field].is_null() {
                out.push(format!("{name}: securityContext.{field} is fixed"));
            }
        }
        let non_root = sc["runAsNonRoot"]
            .as_bool()
            .or(psc["runAsNonRoot"].as_bool());
        if non_root != Some(true) {
            out.push(format!("{name}: runAsNonRoot is not true"));
        }
        if sc["allowPrivilegeEscalation"].as_bool() != Some(false) {
            out.push(format!("{name}: allowPrivilegeEscalation is not false"));
        }
        if sc["privileged"].as_bool() == Some(true) {
            out.push(format!("{name}: privileged"));
        }
        if strs(&sc["capabilities"]["drop"]) != ["ALL"] {
            out.push(format!("{name}: capabilities.drop is not [ALL]"));
        }
        let added = strs(&sc["capabilities"]["add"]);
        if added.iter().any(|a| a != "NET_BIND_SERVICE") {
            out.push(format!("{name}: capabilities added {added:?}"));
        }
        let seccomp = sc["seccompProfile"]["type"]
            .as_str()
            .or(psc["seccompProfile"]["type"].as_str());
        if seccomp != Some("RuntimeDefault") {
            out.push(format!(
                "{name}: seccompProfile is {seccomp:?}, not RuntimeDefault"
            ));
        }
        for p in c["ports"].as_sequence().into_iter().flatten() {
            if !p["hostPort"].is_null() {
                out.push(format!("{name}: hostPort {:?}", p["hostPort"]));
            }
        }
    }
    out
}

#[test]
fn restricted_v2_check_catches_what_openshift_refuses() {
    let pinned: Value = serde_yaml::from_str(
        r#"
securityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: RuntimeDefault}}
containers:
- name: manager
  securityContext:
    allowPrivilegeEscalation: true
    runAsGroup: 65532
    capabilities: {drop: [NET_RAW]}
"#,
    )
    .unwrap();
    let found = restricted_v2_breaches(&pinned);
    for needle in [
        "pod securityContext.runAsUser",
        "manager: securityContext.runAsGroup",
        "allowPrivilegeEscalation",
        "capabilities.drop",
    ] {
        assert!(
            found.iter().any(|f| f.contains(needle)),
            "{needle} not reported in {found:?}"
        );
    }
    let root: Value = serde_yaml::from_str("containers: [{name: c}]").unwrap();
    let found = restricted_v2_breaches(&root);
    assert!(
        found.iter().any(|f| f.contains("runAsNonRoot")),
        "{found:?}"
    );
    assert!(
        found.iter().any(|f| f.contains("seccompProfile")),
        "{found:?}"
    );
}

/// Every pod spec we ship, named by where it comes from: the Deployment of the base and of the
/// seven overlays (kustomize renderings) and of the OLM bundle's CSV.
fn shipped_pod_specs() -> Vec<(String, Value)> {
    let mut specs: Vec<(String, Value)> = Vec::new();
    for dir in [
        "manifests",
        "manifests/overlays/cert-manager",
        "manifests/overlays/metrics-secure",
        "manifests/overlays/monitoring",
        "manifests/overlays/monitoring/secure",
        "manifests/overlays/network-policy",
        "manifests/overlays/force-delete",
        "manifests/overlays/kubevirt",
    ] {
        for d in kustomize(dir) {
            if d["kind"].as_str() == Some("Deployment") {
                specs.push((
                    format!(
                        "{dir}: {}",
                        d["metadata"]["name"].as_str().unwrap_or_default()
                    ),
                    d["spec"]["template"]["spec"].clone(),
                ));
            }
        }
    }
    let csv_path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "bundle/manifests/{}.clusterserviceversion.yaml",
        nmo_packaging::bundle::PACKAGE
    ));
    let csv: Value = serde_yaml::from_str(&std::fs::read_to_string(&csv_path).unwrap()).unwrap();
    for d in csv["spec"]["install"]["spec"]["deployments"]
        .as_sequence()
        .unwrap()
    {
        specs.push((
            format!("CSV: {}", d["name"].as_str().unwrap_or_default()),
            d["spec"]["template"]["spec"].clone(),
        ));
    }
    // Every Deployment of the base, the seven overlays and the bundle.
    assert_eq!(
        specs.len(),
        9,
        "{:?}",
        specs.iter().map(|s| &s.0).collect::<Vec<_>>()
    );
    specs
}

/// The node labels the API server warns about when a pod spec selects them (Kubernetes
/// `pkg/api/node/util.go`, v1.36): each with the label to use instead.
const DEPRECATED_NODE_LABELS: [(&str, &str); 6] = [
    ("beta.kubernetes.io/arch", "kubernetes.io/arch"),
    ("beta.kubernetes.io/os", "kubernetes.io/os"),
    (
        "failure-domain.beta.kubernetes.io/region",
        "topology.kubernetes.io/region",
    ),
    (
        "failure-domain.beta.kubernetes.io/zone",
        "topology.kubernetes.io/zone",
    ),
    (
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
    ),
    (
        "node-role.kubernetes.io/master",
        "node-role.kubernetes.io/control-plane",
    ),
];

/// The deprecated node labels a pod spec selects, where the API server looks for them:
/// `nodeSelector` keys and the node affinity's required and preferred terms. Tolerations are not
/// label selectors (a taint key is not a node label) and the API server does not warn about them.
fn deprecated_node_label_uses(pod: &Value) -> Vec<String> {
    let mut keys: Vec<(String, String)> = Vec::new();
    if let Some(m) = pod["nodeSelector"].as_mapping() {
        for k in m.keys() {
            keys.push(("nodeSelector".into(), k.as_str().unwrap_or_default().into()));
        }
    }
    let affinity = &pod["affinity"]["nodeAffinity"];
    let required = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        .as_sequence()
        .cloned()
        .unwrap_or_default();
    let preferred: Vec<Value> = affinity["preferredDuringSchedulingIgnoredDuringExecution"]
        .as_sequence()
        .map(|p| p.iter().map(|t| t["preference"].clone()).collect())
        .unwrap_or_default();
    for (what, terms) in [("required", required), ("preferred", preferred)] {
        for term in terms {
            for e in term["matchExpressions"].as_sequence().into_iter().flatten() {
                keys.push((
                    format!("nodeAffinity {what}"),
                    e["key"].as_str().unwrap_or_default().into(),
                ));
            }
        }
    }
    keys.into_iter()
        .filter_map(|(place, key)| {
            DEPRECATED_NODE_LABELS
                .iter()
                .find(|(old, _)| *old == key)
                .map(|(old, new)| format!("{place}: {old} (use {new})"))
        })
        .collect()
}

#[test]
fn the_deprecated_label_check_sees_affinity_and_node_selector() {
    let pod: Value = serde_yaml::from_str(
        r#"
nodeSelector: {beta.kubernetes.io/os: linux}
affinity:
  nodeAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 1
      preference:
        matchExpressions: [{key: node-role.kubernetes.io/master, operator: Exists}]
tolerations: [{key: node-role.kubernetes.io/master, operator: Exists, effect: NoSchedule}]
"#,
    )
    .unwrap();
    assert_eq!(
        deprecated_node_label_uses(&pod),
        [
            "nodeSelector: beta.kubernetes.io/os (use kubernetes.io/os)",
            "nodeAffinity preferred: node-role.kubernetes.io/master (use node-role.kubernetes.io/control-plane)",
        ]
    );
}

/// No pod spec we ship selects a node label the API server warns about (issue 48: `kubectl apply
/// -k` and `helm install` printed one for `node-role.kubernetes.io/master`); the live check is
/// `kubectl_apply_of_the_manifests_prints_no_warning`.
#[test]
fn no_shipped_pod_spec_selects_a_deprecated_node_label() {
    let uses: Vec<String> = shipped_pod_specs()
        .iter()
        .flat_map(|(what, pod)| {
            deprecated_node_label_uses(pod)
                .into_iter()
                .map(move |u| format!("{what}: {u}"))
        })
        .collect();
    assert!(uses.is_empty(), "{uses:#?}");
}

/// `kubectl apply -k manifests/` against the real API server (this test binary's own control
/// plane, which nothing else here uses: the webhook it registers has no operator behind it) prints
/// nothing on stderr, where kubectl shows the API server's warnings (`Warning: ...`), neither
/// when it creates the objects nor when it applies them again.
#[test]
fn kubectl_apply_of_the_manifests_prints_no_warning() {
    let cluster = nmo_devcluster::Cluster::shared();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests");
    for round in ["create", "apply again"] {
        let out = cluster
            .kubectl()
            .args(["apply", "-k", &dir.display().to_string()])
            .output()
            .expect("kubectl runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{round}: kubectl apply -k manifests/ failed:\n{stdout}{stderr}"
        );
        assert!(
            stdout.contains("deployment.apps/node-maintenance-operator-controller-manager"),
            "{round}: {stdout}"
        );
        assert_eq!(
            stderr.trim(),
            "",
            "{round}: kubectl apply -k manifests/ printed warnings"
        );
    }
}

/// The README's way to name a built image with kustomize (section "Image": a kustomization of
/// one's own over `manifests/` with `images:`) renders the Deployment with that image.
#[test]
fn the_readmes_kustomize_image_override_names_the_image() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let marker = "# my-install/kustomization.yaml\n";
    let start = readme
        .find(marker)
        .expect("the README shows my-install/kustomization.yaml")
        + marker.len();
    let block: String = readme[start..]
        .lines()
        .take_while(|l| l.trim() != "```")
        .map(|l| format!("{}\n", l.strip_prefix("  ").unwrap_or(l)))
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("my-install");
    std::fs::create_dir(&dir).unwrap();
    // `../manifests` from a folder beside manifests/; here the folder is a temporary one, and
    // kustomize takes only relative paths: up to `/`, then down to manifests/.
    assert!(block.contains("- ../manifests\n"), "{block}");
    let up = "../".repeat(dir.components().count() - 1);
    let down = root.join("manifests");
    let down = down.strip_prefix("/").expect("an absolute path");
    let text = block.replace("- ../manifests\n", &format!("- {up}{}\n", down.display()));
    std::fs::write(dir.join("kustomization.yaml"), &text).unwrap();
    let bins = nmo_devcluster::ensure_binaries().expect("control plane binaries");
    let out = std::process::Command::new(bins.join("bin/kubectl"))
        .args(["kustomize", &dir.display().to_string()])
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl kustomize of the README's kustomization:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<Value> =
        serde_yaml::Deserializer::from_str(&String::from_utf8_lossy(&out.stdout))
            .map(|d| Value::deserialize(d).unwrap())
            .filter(|v| !v.is_null())
            .collect();
    let images: Vec<&str> = docs
        .iter()
        .filter(|d| d["kind"].as_str() == Some("Deployment"))
        .filter_map(|d| d["spec"]["template"]["spec"]["containers"][0]["image"].as_str())
        .collect();
    assert_eq!(
        images,
        ["registry.example.com/nmo/node-maintenance-operator:v0.1.0"]
    );
}

#[test]
fn every_shipped_pod_spec_passes_restricted_v2() {
    let specs = shipped_pod_specs();
    let breaches: Vec<String> = specs
        .iter()
        .flat_map(|(what, pod)| {
            restricted_v2_breaches(pod)
                .into_iter()
                .map(move |b| format!("{what}: {b}"))
        })
        .collect();
    assert!(breaches.is_empty(), "{breaches:#?}");
}

#[test]
fn dockerfile_runs_as_a_numeric_non_root_user() {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Dockerfile")).unwrap();
    let user = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("USER "))
        .next_back()
        .expect("a USER line");
    // The kubelet can only verify runAsNonRoot against a numeric UID.
    let uid: u32 = user
        .split(':')
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("USER {user:?} is not numeric"));
    assert_ne!(uid, 0, "USER is root");
}

#[test]
fn metrics_secure_overlay_serves_https_on_8443_with_token_auth_rbac() {
    let docs = kustomize("manifests/overlays/metrics-secure");
    let dep = docs
        .iter()
        .find(|d| d["kind"].as_str() == Some("Deployment"))
        .unwrap();
    let c = &dep["spec"]["template"]["spec"]["containers"][0];
    let config =
        Config::try_parse_from(std::iter::once("manager".to_string()).chain(strs(&c["args"])))
            .unwrap_or_else(|e| panic!("overlay args rejected: {e}"));
    assert!(config.metrics_secure);
    assert_eq!(
        config.metrics_bind_address,
        BindAddress::Listen("0.0.0.0:8443".parse().unwrap())
    );
    let ports: Vec<(String, u64)> = c["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["containerPort"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(ports.contains(&("https".into(), 8443)), "{ports:?}");
    let svc = docs
        .iter()
        .find(|d| {
            d["metadata"]["name"].as_str()
                == Some("node-maintenance-operator-controller-manager-metrics-service")
        })
        .unwrap();
    assert_eq!(svc["spec"]["ports"][0]["port"].as_u64(), Some(8443));
    assert_eq!(svc["spec"]["ports"][0]["targetPort"].as_u64(), Some(8443));

    let rules = |name: &str| -> Vec<Value> {
        docs.iter()
            .find(|d| {
                d["kind"].as_str() == Some("ClusterRole")
                    && d["metadata"]["name"].as_str() == Some(name)
            })
            .unwrap_or_else(|| panic!("ClusterRole {name}"))["rules"]
            .as_sequence()
            .unwrap()
            .clone()
    };
    let mut auth = BTreeSet::new();
    for r in rules("node-maintenance-operator-metrics-auth-role") {
        for g in strs(&r["apiGroups"]) {
            for res in strs(&r["resources"]) {
                for v in strs(&r["verbs"]) {
                    auth.insert((g.clone(), res.clone(), v));
                }
            }
        }
    }
    let want: BTreeSet<(String, String, String)> = [
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
    ]
    .iter()
    .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
    .collect();
    assert_eq!(auth, want);
    let reader = rules("node-maintenance-operator-metrics-reader");
    assert_eq!(reader.len(), 1);
    assert_eq!(strs(&reader[0]["nonResourceURLs"]), ["/metrics"]);
    assert_eq!(strs(&reader[0]["verbs"]), ["get"]);
    // The auth role is the operator's; the reader role is for scrapers and bound by the admin.
    let bound: Vec<&str> = docs
        .iter()
        .filter(|d| d["kind"].as_str() == Some("ClusterRoleBinding"))
        .filter_map(|d| d["roleRef"]["name"].as_str())
        .collect();
    assert!(
        bound.contains(&"node-maintenance-operator-metrics-auth-role"),
        "{bound:?}"
    );
    assert!(
        !bound.contains(&"node-maintenance-operator-metrics-reader"),
        "{bound:?}"
    );
}

/// The NetworkPolicy overlay: it selects the operator's pods, restricts ingress only (egress to
/// the API server stays open), admits the webhook port only from the API server's addresses
/// (and OpenShift's host-network group) and the metrics ports only from Prometheus pods, and
/// leaves no other port or source open.
#[test]
fn network_policy_admits_only_the_api_server_and_scrapers() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/overlays/network-policy");
    let k: Value =
        serde_yaml::from_str(&std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap())
            .unwrap();
    assert_eq!(strs(&k["resources"]), ["../../base", "networkpolicy.yaml"]);
    let np: Value =
        serde_yaml::from_str(&std::fs::read_to_string(dir.join("networkpolicy.yaml")).unwrap())
            .unwrap();
    assert_eq!(np["kind"].as_str(), Some("NetworkPolicy"));
    assert_eq!(
        np["metadata"]["namespace"].as_str(),
        Some("node-maintenance-operator-system")
    );
    let spec = &np["spec"];
    assert_eq!(strs(&spec["policyTypes"]), ["Ingress"]);

    // It selects exactly the Deployment's pods.
    let [dep] = <[Value; 1]>::try_from(by_kind("manager.yaml", "Deployment")).unwrap();
    let pod_labels = &dep["spec"]["template"]["metadata"]["labels"];
    let selector = spec["podSelector"]["matchLabels"].as_mapping().unwrap();
    assert!(!selector.is_empty());
    for (key, value) in selector {
        let key = key.as_str().unwrap();
        // The base adds node-maintenance-operator="" to every pod template.
        let on_pod = pod_labels[key]
            .as_str()
            .or((key == "node-maintenance-operator").then_some(""));
        assert_eq!(on_pod, value.as_str(), "selector {key}");
    }

    let port_of = |name: &str| -> u64 {
        dep["spec"]["template"]["spec"]["containers"][0]["ports"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|p| p["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no container port {name}"))["containerPort"]
            .as_u64()
            .unwrap()
    };
    let rules = spec["ingress"].as_sequence().unwrap();
    assert_eq!(rules.len(), 2, "{rules:?}");
    let ports = |r: &Value| -> Vec<u64> {
        r["ports"]
            .as_sequence()
            .expect("every rule names its ports")
            .iter()
            .map(|p| {
                assert_eq!(p["protocol"].as_str(), Some("TCP"));
                p["port"].as_u64().unwrap()
            })
            .collect()
    };
    let sources = |r: &Value| -> Vec<Value> {
        let from = r["from"]
            .as_sequence()
            .expect("every rule names its sources")
            .clone();
        assert!(!from.is_empty(), "an empty `from` admits everyone");
        from
    };
    // The webhook: only an ipBlock (the API server) and OpenShift's host-network group.
    let webhook = &rules[0];
    assert_eq!(ports(webhook), [port_of("webhook-server")]);
    for s in sources(webhook) {
        if let Some(cidr) = s["ipBlock"]["cidr"].as_str() {
            assert!(!cidr.ends_with("/0"), "the webhook is open to {cidr}");
            assert!(s["ipBlock"].get("except").is_none());
        } else {
            assert_eq!(
                s["namespaceSelector"]["matchLabels"]
                    .as_mapping()
                    .map(|m| m.keys().filter_map(|k| k.as_str()).collect::<Vec<_>>()),
                Some(vec!["policy-group.network.openshift.io/host-network"]),
                "{s:?}"
            );
            assert!(s.get("podSelector").is_none());
        }
    }
    // Metrics: the plain port of manifests/ and the secure one of the overlay, from Prometheus
    // pods in the monitoring namespaces only (namespace AND pod selector in one peer).
    let metrics = &rules[1];
    assert_eq!(ports(metrics), [port_of("http-metrics"), 8443]);
    for s in sources(metrics) {
        assert!(s.get("ipBlock").is_none(), "{s:?}");
        assert_eq!(
            s["podSelector"]["matchLabels"]["app.kubernetes.io/name"].as_str(),
            Some("prometheus"),
            "{s:?}"
        );
        let ns = &s["namespaceSelector"]["matchExpressions"][0];
        assert_eq!(ns["key"].as_str(), Some("kubernetes.io/metadata.name"));
        assert_eq!(ns["operator"].as_str(), Some("In"));
        assert!(strs(&ns["values"]).contains(&"openshift-monitoring".to_string()));
    }
    // Nothing admits the health port from elsewhere (probes come from the node).
    assert!(rules.iter().all(|r| !ports(r).contains(&8081)));
}

//! Evacuation-aware drain, end to end (`docs/drain-contract.md` §4a): KubeVirt's answers to the
//! eviction of a virt-launcher pod, and the descheduler's `request-evict-only` contract, read as
//! progress or as a hard blocker, against the real API server.
//!
//! No hypervisor: KubeVirt's `VirtualMachineInstance` and `VirtualMachineInstanceMigration` CRDs
//! (`tests/fixtures/kubevirt-crds.yaml`) and a stand-in (`tests/cluster/kubevirt-standin`, Go,
//! client-go) that is registered as a validating webhook on `pods/eviction` and answers as
//! virt-api's pod eviction admitter does (its texts, 429, the VMI's `status.evacuationNodeName`),
//! creates the migration, and deletes the launcher pod once the "migration" is over
//! (`nmo_devcluster::kubevirt`, shared with `benches/maintenance.rs`' `evacuating` scenario).

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use nmo_devcluster::kubevirt::{self, SUBRESOURCES_SERVICE, Standin, vmi_api};
use node_maintenance_operator::api::{MaintenancePhase, NodeMaintenanceStatus};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(120);
/// How long the stand-in's migration (or evacuation) takes before the pod is deleted: long
/// enough for several passes (and several refusals of the pod that cannot migrate) to happen
/// meanwhile, short of the evacuation's 30 s retry.
const MIGRATION_TIME: &str = "15s";

/// The cluster with KubeVirt's CRDs, `manifests/overlays/kubevirt` installed, and one operator
/// started after both (it discovers KubeVirt at start).
fn env() -> &'static OperatorEnv {
    static ENV: std::sync::OnceLock<OperatorEnv> = std::sync::OnceLock::new();
    ENV.get_or_init(|| {
        let cluster = Cluster::shared();
        kubevirt::install_crds(cluster).unwrap();
        let installed = installed(cluster);
        nmo_devcluster::operator::install_manifests(
            cluster,
            &manifests_dir().join("overlays/kubevirt"),
        )
        .unwrap();
        let opts = installed.options("operator");
        let operator = fixtures::start_registered(cluster, &opts)
            .unwrap_or_else(|e| panic!("operator did not start: {e}"));
        OperatorEnv {
            cluster,
            operator: std::sync::Mutex::new(operator),
            installed,
        }
    })
}

static STANDIN: tokio::sync::OnceCell<Standin> = tokio::sync::OnceCell::const_new();

/// The stand-in, started once per test binary with its webhook registered.
async fn standin() -> &'static Standin {
    STANDIN
        .get_or_init(|| async {
            Standin::start(env().cluster, MIGRATION_TIME)
                .await
                .unwrap_or_else(|e| panic!("the KubeVirt stand-in did not start: {e:#}"))
        })
        .await
}

/// The stand-in's log: one JSON line per admission and step.
fn log() -> String {
    STANDIN.get().map(Standin::log).unwrap_or_default()
}

/// The stand-in's answers to evictions of `ns/pod`.
fn admissions(ns: &str, pod: &str) -> Vec<serde_json::Value> {
    let pod = format!("{ns}/{pod}");
    STANDIN
        .get()
        .map(|s| s.events("admission"))
        .unwrap_or_default()
        .into_iter()
        .filter(|v| v["pod"] == pod)
        .collect()
}

/// A namespace whose evictions the stand-in answers.
async fn kubevirt_namespace(client: &kube::Client, prefix: &str) -> String {
    let ns = namespace(client, prefix).await;
    kubevirt::label_namespace(client, &ns).await.unwrap();
    ns
}

/// A running VMI `name` on `node` with eviction strategy `LiveMigrate`, live-migratable or not,
/// and its launcher pod (`virt-launcher-<name>`, controlled by it). Returns the pod's name.
async fn vm(client: &kube::Client, ns: &str, name: &str, node: &str, migratable: bool) -> String {
    vm_taking(client, ns, name, node, migratable, MIGRATION_TIME).await
}

/// [`vm`] whose migration takes `migration_time` (a Go duration).
async fn vm_taking(
    client: &kube::Client,
    ns: &str,
    name: &str,
    node: &str,
    migratable: bool,
    migration_time: &str,
) -> String {
    kubevirt::vm(client, ns, name, node, migratable, migration_time)
        .await
        .unwrap_or_else(|e| panic!("creating VM {ns}/{name}: {e}"))
}

fn blocker_reason(s: &NodeMaintenanceStatus, pod: &str) -> Option<String> {
    s.blockers
        .iter()
        .flatten()
        .find(|b| b.name == pod)
        .map(|b| b.reason.clone())
}

async fn gone(client: &kube::Client, ns: &str, pod: &str) {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    wait_for(&format!("pod {ns}/{pod} gone"), LIMIT, || async {
        match pods.get_opt(pod).await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(p) => Err(format!("{:?}", p.metadata.annotations)),
        }
    })
    .await;
}

#[tokio::test]
async fn a_migrating_vm_is_progress_and_one_that_cannot_migrate_blocks_with_one_warning() {
    let env = env();
    standin().await;
    let client = env.cluster.client().await;
    let node = worker_nodes(env.cluster, &client, "evac-vm", 1)
        .await
        .remove(0);
    let ns = kubevirt_namespace(&client, "evac-vm").await;
    let migrating = vm(&client, &ns, "vm-a", &node, true).await;
    let pinned = vm(&client, &ns, "vm-b", &node, false).await;
    let nm = unique("evac-vm");
    nm::create(&client, &nm, &node).await;

    // Both shown, each for what it is; only the VM that cannot migrate is an error.
    let seen = nm::wait_status(
        &client,
        &nm,
        "Evacuating and NotMigratable blockers",
        LIMIT,
        |s| {
            blocker_reason(s, &migrating).as_deref() == Some("Evacuating")
                && blocker_reason(s, &pinned).as_deref() == Some("NotMigratable")
        },
    )
    .await;
    let status = seen.status.unwrap();
    let last_error = status.last_error.clone().unwrap_or_default();
    assert!(
        last_error.contains(&pinned) && !last_error.contains(&migrating),
        "lastError names the VM that cannot migrate and not the migrating one: {last_error}"
    );
    let evacuating = status
        .blockers
        .iter()
        .flatten()
        .find(|b| b.name == migrating)
        .unwrap();
    assert!(
        evacuating
            .message
            .as_deref()
            .unwrap_or_default()
            .contains(&format!(
                "Eviction triggered evacuation of VMI \"{ns}/vm-a\""
            )),
        "{evacuating:?}"
    );
    // The stand-in marked the VMI and started its migration, as KubeVirt does.
    let vmi = vmi_api(&client, &ns).get("vm-a").await.unwrap();
    assert_eq!(vmi.data["status"]["evacuationNodeName"], json!(node));
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "kubevirt.io",
        "v1",
        "VirtualMachineInstanceMigration",
    ));
    let migrations = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &ar)
        .list(&ListParams::default().labels("kubevirt.io/vmi-name=vm-a"))
        .await
        .unwrap();
    assert_eq!(migrations.items.len(), 1, "one migration for vm-a");
    // The blocker names the VMI and its migration, as the migration controller moves it on;
    // the status counts the migration in flight, and `kubectl get nm -o wide` shows it.
    let migration = migrations.items[0].metadata.name.clone().unwrap();
    let seen = nm::wait_status(&client, &nm, "the migration in the blocker", LIMIT, |s| {
        s.blockers.iter().flatten().any(|b| {
            b.name == migrating
                && b.virtual_machine_instance.as_deref() == Some("vm-a")
                && b.migration.as_deref() == Some(migration.as_str())
                && b.migration_phase.as_deref() == Some("Running")
                && b.migration_start_time.is_some()
        })
    })
    .await;
    assert_eq!(seen.status.as_ref().unwrap().evacuating_pods, Some(1));
    // The gauge of migrations in flight says the same (set by the pass that wrote the status).
    let series =
        format!("nmo_maintenance_evacuating_pods{{nodemaintenance=\"{nm}\",node=\"{node}\"}}");
    let evacuating = || {
        let m = env.operator.lock().unwrap().metrics().unwrap_or_default();
        let value = m
            .lines()
            .find_map(|l| l.strip_prefix(series.as_str())?.trim().parse::<f64>().ok());
        (value, m)
    };
    wait_for("the evacuating gauge at 1", Duration::from_secs(10), || {
        let (value, m) = evacuating();
        async move {
            if value == Some(1.0) {
                Ok(())
            } else {
                Err(m
                    .lines()
                    .filter(|l| l.contains("evacuating") || l.contains("blocked"))
                    .collect::<Vec<_>>()
                    .join("\n"))
            }
        }
    })
    .await;
    let wide = env
        .cluster
        .kubectl_run(&["get", "nm", &nm, "-o", "wide"], None)
        .unwrap();
    // Columns are aligned; other cells (lastError) hold spaces.
    let mut lines = wide.lines();
    let at = lines.next().unwrap().find("MIGRATING").expect(&wide);
    let row = lines.next().unwrap();
    assert_eq!(row.get(at..).map(str::trim), Some("1"), "{wide}");
    // The pinned VM's blocker names no migration.
    let pinned_blocker = seen
        .status
        .unwrap()
        .blockers
        .unwrap()
        .into_iter()
        .find(|b| b.name == pinned)
        .unwrap();
    assert_eq!(pinned_blocker.migration, None);

    // The migrating VM leaves; the maintenance stays Running on the other one.
    gone(&client, &ns, &migrating).await;
    let after = nm::wait_status(
        &client,
        &nm,
        "only the VM that cannot migrate pending",
        LIMIT,
        |s| {
            s.pending_pods.as_deref() == Some(std::slice::from_ref(&pinned))
                && blocker_reason(s, &pinned).as_deref() == Some("NotMigratable")
        },
    )
    .await;
    let after = after.status.unwrap();
    assert_eq!(after.phase, Some(MaintenancePhase::Running));
    assert_eq!(
        after.evacuating_pods, None,
        "no migration in flight any more"
    );
    wait_for("the evacuating gauge gone", Duration::from_secs(10), || {
        let (value, m) = evacuating();
        async move {
            if value.is_none_or(|v| v == 0.0) {
                Ok(())
            } else {
                Err(m)
            }
        }
    })
    .await;
    // Asked about the pinned VM several times meanwhile; one Warning, naming the VMI.
    let refusals = admissions(&ns, &pinned)
        .into_iter()
        .filter(|a| a["allowed"] == false)
        .count();
    assert!(refusals >= 2, "the pinned VM was asked again: {}", log());
    let warnings: Vec<_> = nm::event_summary(&client, &nm)
        .await
        .into_iter()
        .filter(|e| e.1 == "PodNotMigratable")
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let (kind, _, message, count) = &warnings[0];
    assert_eq!((kind.as_str(), *count), ("Warning", 1), "{message}");
    assert!(
        message.contains(
            "VMI vm-b is configured with an eviction strategy but is not live-migratable"
        ),
        "{message}"
    );
    // An evacuation is asked once: its retry (30 s) is longer than the migration.
    let asked = admissions(&ns, &migrating);
    assert_eq!(asked.len(), 1, "{asked:?}");
    nm::delete_and_wait_restored(&client, &nm, &node).await;
}

#[tokio::test]
async fn a_request_evict_only_pod_is_evacuating_until_it_leaves() {
    let env = env();
    standin().await;
    let client = env.cluster.client().await;
    let node = worker_nodes(env.cluster, &client, "evac-only", 1)
        .await
        .remove(0);
    let ns = kubevirt_namespace(&client, "evac-only").await;
    let pod = "moved-by-responder";
    bare_pod(
        &client,
        &ns,
        pod,
        &node,
        json!({"metadata": {"annotations": {
            "descheduler.alpha.kubernetes.io/request-evict-only": ""}}}),
    )
    .await;
    let nm = unique("evac-only");
    nm::create(&client, &nm, &node).await;
    let seen = nm::wait_status(&client, &nm, "the pod Evacuating", LIMIT, |s| {
        blocker_reason(s, pod).as_deref() == Some("Evacuating")
    })
    .await;
    assert_eq!(seen.status.as_ref().unwrap().last_error, None);
    // Evacuating, never an error, until it has left; then the maintenance succeeds.
    let api = Api::<node_maintenance_operator::api::NodeMaintenance>::all(client.clone());
    let done = wait_for(
        "the pod gone and the maintenance Succeeded",
        LIMIT,
        || async {
            let s = api
                .get(&nm)
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            if s.last_error.is_some() || blocker_reason(&s, pod).is_some_and(|r| r != "Evacuating")
            {
                return Ok(Err(format!("{s:?}")));
            }
            if s.phase == Some(MaintenancePhase::Succeeded) {
                return Ok(Ok(()));
            }
            Err(format!("{s:?}"))
        },
    )
    .await;
    if let Err(s) = done {
        panic!("the evacuating pod was shown as something else: {s}");
    }
    let asked = admissions(&ns, pod);
    assert_eq!(asked.len(), 1, "{asked:?}");
    nm::delete_and_wait_restored(&client, &nm, &node).await;
}

#[tokio::test]
async fn a_migration_its_responder_reports_in_progress_is_asked_once_however_long_it_takes() {
    let env = env();
    standin().await;
    let client = env.cluster.client().await;
    let node = worker_nodes(env.cluster, &client, "evac-long", 1)
        .await
        .remove(0);
    let ns = kubevirt_namespace(&client, "evac-long").await;
    // Longer than the evacuation's retry (30 s): the launcher carries the in-progress
    // annotation meanwhile, so it is not asked again.
    let pod = vm_taking(&client, &ns, "vm-long", &node, true, "45s").await;
    let nm = unique("evac-long");
    nm::create(&client, &nm, &node).await;
    nm::wait_status(&client, &nm, "the pod Evacuating", LIMIT, |s| {
        blocker_reason(s, &pod).as_deref() == Some("Evacuating")
    })
    .await;
    let done = nm::wait_phase(&client, &nm, MaintenancePhase::Succeeded, LIMIT).await;
    assert_eq!(done.status.unwrap().last_error, None);
    let asked = admissions(&ns, &pod);
    assert_eq!(asked.len(), 1, "asked once in 45 s of migration: {asked:?}");
    nm::delete_and_wait_restored(&client, &nm, &node).await;
}

/// `docs/drain-contract.md` §4a (issue 46 item 11): a VM whose evacuation migration fails.
/// The test plays KubeVirt's migration controller: the stand-in's migration is marked `Failed`
/// and the next one created `Pending` (its back-off). While no migration runs, the launcher's
/// blocker is `MigrationFailed` naming the failed migration (and the next, `Pending`),
/// `lastError` names it, and one `PodMigrationFailed` Warning is recorded per failed migration;
/// once the next one runs the pod is `Evacuating` again.
#[tokio::test]
async fn a_failed_migration_is_named_with_one_warning_each_until_the_next_one_runs() {
    let env = env();
    standin().await;
    let client = env.cluster.client().await;
    let node = worker_nodes(env.cluster, &client, "evac-fail", 1)
        .await
        .remove(0);
    let ns = kubevirt_namespace(&client, "evac-fail").await;
    // Its migration would run for ten minutes: this test ends it.
    let launcher = vm_taking(&client, &ns, "vm-f", &node, true, "10m").await;
    let nm = unique("evac-fail");
    nm::create(&client, &nm, &node).await;
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "kubevirt.io",
        "v1",
        "VirtualMachineInstanceMigration",
    ));
    let migrations = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &ar);
    let first = wait_for("the stand-in's migration running", LIMIT, || async {
        let list = migrations
            .list(&ListParams::default().labels("kubevirt.io/vmi-name=vm-f"))
            .await
            .map_err(|e| e.to_string())?;
        list.items
            .iter()
            .find(|m| m.data["status"]["phase"] == "Running")
            .and_then(|m| m.metadata.name.clone())
            .ok_or_else(|| format!("{} migrations, none Running", list.items.len()))
    })
    .await;
    let set_phase = |name: String, phase: &'static str| {
        let migrations = migrations.clone();
        async move {
            let patch = json!({"status": {"phase": phase}});
            migrations
                .patch_status(&name, &Default::default(), &kube::api::Patch::Merge(&patch))
                .await
                .unwrap_or_else(|e| panic!("migration {name} to {phase}: {e}"));
        }
    };
    // KubeVirt's answer to a failure: Failed, and the next one created after its back-off.
    let fail_and_retry = |failed: String, next: &'static str| {
        let migrations = migrations.clone();
        async move {
            set_phase(failed, "Failed").await;
            let obj: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                "metadata": {"name": next, "labels": {"kubevirt.io/vmi-name": "vm-f"}},
                "spec": {"vmiName": "vm-f"}
            }))
            .unwrap();
            migrations
                .create(&PostParams::default(), &obj)
                .await
                .unwrap();
            set_phase(next.to_string(), "Pending").await;
        }
    };
    let warnings = || async {
        nm::events(&client, "NodeMaintenance", &nm)
            .await
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("PodMigrationFailed"))
            .map(|e| e.message.unwrap_or_default())
            .collect::<Vec<_>>()
    };
    let held_by = |failed: String, next: &'static str| {
        let launcher = launcher.clone();
        move |s: &NodeMaintenanceStatus| {
            let b = s.blockers.iter().flatten().find(|b| b.name == launcher);
            b.is_some_and(|b| {
                b.reason == "MigrationFailed"
                    && b.migration.as_deref() == Some(next)
                    && b.migration_phase.as_deref() == Some("Pending")
                    && b.message.as_deref().unwrap_or_default().contains(&failed)
            }) && s
                .last_error
                .as_deref()
                .unwrap_or_default()
                .contains(&failed)
        }
    };
    fail_and_retry(first.clone(), "retry-1").await;
    nm::wait_status(
        &client,
        &nm,
        "the failed migration named",
        LIMIT,
        held_by(first.clone(), "retry-1"),
    )
    .await;
    wait_for("one Warning for the failed migration", LIMIT, || async {
        let w = warnings().await;
        (w.len() == 1 && w[0].contains(&first))
            .then_some(())
            .ok_or(format!("{w:?}"))
    })
    .await;
    fail_and_retry("retry-1".to_string(), "retry-2").await;
    nm::wait_status(
        &client,
        &nm,
        "the second failure named",
        LIMIT,
        held_by("retry-1".into(), "retry-2"),
    )
    .await;
    wait_for("one Warning per failed migration", LIMIT, || async {
        let w = warnings().await;
        let failed = |m: &str| {
            let named = format!("live migration {m} of");
            w.iter().filter(|n| n.contains(&named)).count() == 1
        };
        let each = failed(&first) && failed("retry-1");
        (w.len() == 2 && each).then_some(()).ok_or(format!("{w:?}"))
    })
    .await;
    set_phase("retry-2".to_string(), "Running").await;
    let seen = nm::wait_status(
        &client,
        &nm,
        "Evacuating again once the next runs",
        LIMIT,
        |s| blocker_reason(s, &launcher).as_deref() == Some("Evacuating"),
    )
    .await;
    let status = seen.status.unwrap();
    assert!(
        !status
            .last_error
            .as_deref()
            .unwrap_or_default()
            .contains("live migration"),
        "the failure leaves lastError once the next migration runs: {:?}",
        status.last_error
    );
    assert_eq!(
        warnings().await.len(),
        2,
        "no Warning for a running migration"
    );
    nm::delete_and_wait_restored(&client, &nm, &node).await;
}

/// The event with `reason` about NodeMaintenance `nm` (which may be gone by now: events outlive
/// it), its message and time.
async fn event_of(client: &kube::Client, nm: &str, reason: &str) -> Option<(String, String)> {
    nm::events(client, "NodeMaintenance", nm)
        .await
        .into_iter()
        .find(|e| e.reason.as_deref() == Some(reason))
        .map(|e| {
            let at = e.event_time.map(|t| t.0.to_string()).unwrap_or_default();
            (e.message.unwrap_or_default(), at)
        })
}

/// Serves the stand-in's `subresources.kubevirt.io/v1` on the API server's aggregation layer: an
/// ExternalName Service `localhost` (the API server dials `localhost:<APIService port>`, the
/// stand-in's port, as nmo_devcluster points webhook Services at local processes) and the
/// APIService; waits until the API server finds it Available.
async fn serve_subresources(client: &kube::Client, standin: &Standin) {
    use base64::Engine;
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
    let pp = PostParams::default();
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": SUBRESOURCES_SERVICE},
        "spec": {"type": "ExternalName", "externalName": "localhost"}
    }))
    .unwrap();
    Api::<Service>::namespaced(client.clone(), "default")
        .create(&pp, &service)
        .await
        .unwrap();
    let apiservice: APIService = serde_json::from_value(json!({
        "metadata": {"name": "v1.subresources.kubevirt.io"},
        "spec": {
            "group": "subresources.kubevirt.io", "version": "v1",
            "service": {"namespace": "default", "name": SUBRESOURCES_SERVICE,
                        "port": standin.port},
            "caBundle": base64::engine::general_purpose::STANDARD.encode(&standin.ca_pem),
            "groupPriorityMinimum": 1000, "versionPriority": 15
        }
    }))
    .unwrap();
    let api = Api::<APIService>::all(client.clone());
    api.create(&pp, &apiservice).await.unwrap();
    wait_for(
        "APIService v1.subresources.kubevirt.io Available",
        LIMIT,
        || async {
            let s = api
                .get("v1.subresources.kubevirt.io")
                .await
                .map_err(|e| e.to_string())?;
            let conditions = s.status.and_then(|s| s.conditions).unwrap_or_default();
            if conditions
                .iter()
                .any(|c| c.type_ == "Available" && c.status == "True")
            {
                Ok(())
            } else {
                Err(format!("{conditions:?}"))
            }
        },
    )
    .await;
}

/// The stand-in's record of the `evacuate/cancel` requests it received for `ns/vmi`.
fn cancels(ns: &str, vmi: &str) -> Vec<serde_json::Value> {
    let vmi = format!("{ns}/{vmi}");
    STANDIN
        .get()
        .map(|s| s.events("cancel"))
        .unwrap_or_default()
        .into_iter()
        .filter(|v| v["vmi"] == vmi)
        .collect()
}

/// A VM migrating off a fresh node under a maintenance, then the maintenance deleted and the
/// node restored. Returns `(node, namespace, NodeMaintenance)`.
async fn delete_mid_migration(
    client: &kube::Client,
    prefix: &str,
    vm: &str,
) -> (String, String, String) {
    let node = worker_nodes(env().cluster, client, prefix, 1)
        .await
        .remove(0);
    let ns = kubevirt_namespace(client, prefix).await;
    // Longer than the test: the migration is still on when the maintenance is deleted.
    let pod = vm_taking(client, &ns, vm, &node, true, "300s").await;
    let nm = unique(prefix);
    nm::create(client, &nm, &node).await;
    nm::wait_status(client, &nm, "the pod Evacuating", LIMIT, |s| {
        blocker_reason(s, &pod).as_deref() == Some("Evacuating")
    })
    .await;
    let vmi = vmi_api(client, &ns).get(vm).await.unwrap();
    assert_eq!(vmi.data["status"]["evacuationNodeName"], json!(node));
    nm::delete_and_wait_restored(client, &nm, &node).await;
    (node, ns, nm)
}

/// The time the node was uncordoned (its `UncordonNode` event).
async fn uncordoned_at(client: &kube::Client, node: &str) -> jiff::Timestamp {
    nm::events(client, "Node", node)
        .await
        .into_iter()
        .find(|e| e.reason.as_deref() == Some("UncordonNode"))
        .and_then(|e| e.event_time.map(|t| t.0.to_string()))
        .expect("an UncordonNode event about the node")
        .parse()
        .unwrap()
}

/// One test, in two steps, since the APIService registered in the second is the whole cluster's.
#[tokio::test]
async fn deleting_the_maintenance_mid_migration_restores_the_node_then_cancels_the_evacuation_where_offered()
 {
    let env = env();
    let standin = standin().await;
    let client = env.cluster.client().await;

    // Without subresources.kubevirt.io: the migration continues, and an event says so.
    let (node, ns, nm) = delete_mid_migration(&client, "evac-abort", "vm-abort").await;
    let (message, said_at) = wait_for(
        "the EvacuationContinues event",
        Duration::from_secs(30),
        || async {
            match event_of(&client, &nm, "EvacuationContinues").await {
                Some(e) => Ok(e),
                None => Err(format!("{:?}", nm::event_summary(&client, &nm).await)),
            }
        },
    )
    .await;
    assert!(
        message.contains(&format!("The migration of VMI {ns}/vm-abort continues")),
        "{message}"
    );
    let uncordoned = uncordoned_at(&client, &node).await;
    let said_at: jiff::Timestamp = said_at.parse().unwrap();
    assert!(
        uncordoned <= said_at,
        "restored first: uncordoned at {uncordoned}, the migration's event at {said_at}"
    );
    let summary = nm::event_summary(&client, &nm).await;
    let about: Vec<_> = summary
        .iter()
        .filter(|e| e.1.starts_with("Evacuation"))
        .collect();
    assert_eq!(about.len(), 1, "once per VMI: {summary:?}");
    let vmi = vmi_api(&client, &ns).get("vm-abort").await.unwrap();
    assert_eq!(
        vmi.data["status"]["evacuationNodeName"],
        json!(node),
        "the migration goes on"
    );
    assert!(cancels(&ns, "vm-abort").is_empty(), "{}", log());

    // With it: cancelled within 10 s of the node being restored, and an event says so.
    serve_subresources(&client, standin).await;
    let (node, ns, nm) = delete_mid_migration(&client, "evac-cancel", "vm-cancel").await;
    let received = wait_for(
        "the stand-in received evacuate/cancel",
        Duration::from_secs(10),
        || async {
            let seen = cancels(&ns, "vm-cancel");
            if seen.is_empty() {
                Err(log())
            } else {
                Ok(seen)
            }
        },
    )
    .await;
    assert_eq!(received.len(), 1, "{received:?}");
    assert_eq!(received[0]["method"], "PUT", "{received:?}");
    assert_eq!(
        received[0]["body"]["kind"], "EvacuateCancelOptions",
        "{received:?}"
    );
    // Through the aggregation layer, as the operator's ServiceAccount (the overlay's grant).
    assert_eq!(
        received[0]["user"],
        "system:serviceaccount:node-maintenance-operator-system:node-maintenance-operator-controller-manager",
        "{received:?}"
    );
    let (message, said_at) = wait_for(
        "the EvacuationCancelled event",
        Duration::from_secs(30),
        || async {
            match event_of(&client, &nm, "EvacuationCancelled").await {
                Some(e) => Ok(e),
                None => Err(format!("{:?}", nm::event_summary(&client, &nm).await)),
            }
        },
    )
    .await;
    assert_eq!(
        message,
        format!("Cancelled the evacuation of VMI {ns}/vm-cancel")
    );
    let uncordoned = uncordoned_at(&client, &node).await;
    let said_at: jiff::Timestamp = said_at.parse().unwrap();
    assert!(
        uncordoned <= said_at,
        "restored first: uncordoned at {uncordoned}, cancelled at {said_at}"
    );
    let vmi = vmi_api(&client, &ns).get("vm-cancel").await.unwrap();
    assert_eq!(
        vmi.data["status"]["evacuationNodeName"],
        serde_json::Value::Null,
        "KubeVirt's mark cleared by the cancel"
    );
}

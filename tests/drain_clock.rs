//! The drain's judgement of arrival uses one clock, the API server's (`docs/drain-contract.md`
//! §2): with the operator's own clock 30 s behind the API server's (a VM restored from a
//! snapshot, a broken NTP), pods that were on the node before the maintenance are evicted, never
//! taken for replacements.
//!
//! The operator of this binary runs with libfaketime (Debian's `libfaketime`, which `.ci/run`
//! installs) shifting its wall clock alone: the control plane keeps the machine's clock.

mod common;

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use nmo_devcluster::operator::Operator;
use node_maintenance_operator::api::MaintenancePhase;
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(120);
/// Debian's libfaketime, preloaded into the operator alone.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

struct Env {
    cluster: Cluster,
    _operator: Mutex<Operator>,
}

/// A cluster of its own, and one operator whose wall clock runs 30 s behind the machine's (the
/// monotonic clock is left alone, as a wall-clock step leaves it).
fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        assert!(
            std::path::Path::new(LIBFAKETIME).exists(),
            "{LIBFAKETIME} is missing: install Debian's libfaketime (`.ci/run` does)"
        );
        let cluster = Cluster::start(nmo_devcluster::Options {
            workers: 0,
            control_planes: 1,
            audit_policy: None,
        })
        .unwrap_or_else(|e| panic!("the local control plane did not start: {e}"));
        let installed = installed(&cluster);
        let mut opts = installed.options("operator-behind");
        opts.env.extend([
            ("LD_PRELOAD".to_string(), LIBFAKETIME.to_string()),
            ("FAKETIME".to_string(), "-30s".to_string()),
            ("FAKETIME_DONT_FAKE_MONOTONIC".to_string(), "1".to_string()),
            ("FAKETIME_DONT_RESET".to_string(), "1".to_string()),
        ]);
        let operator = fixtures::start_registered(&cluster, &opts)
            .unwrap_or_else(|e| panic!("operator did not start: {e}"));
        Env {
            cluster,
            _operator: Mutex::new(operator),
        }
    })
}

async fn tolerating_pod(
    client: &kube::Client,
    ns: &str,
    name: &str,
    node: &str,
    owner: Option<serde_json::Value>,
) {
    let mut pod = json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]
        }
    });
    if let Some(o) = owner {
        pod["metadata"]["ownerReferences"] = json!([o]);
    }
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(pod).unwrap(),
        )
        .await
        .unwrap_or_else(|e| panic!("creating pod {ns}/{name}: {e}"));
}

/// `docs/drain-contract.md` §2, the field case: the operator 30 s behind the API server; a
/// KubeVirt launcher pod and a bare pod, both tolerating every taint and on the node before the
/// maintenance, are evicted (an operator that stamped the start with its own clock took them for
/// replacements, kept them, and succeeded with the VM still on the node), and the maintenance
/// Succeeds only once they are gone.
#[tokio::test]
async fn pods_there_before_are_evicted_whatever_the_operators_clock() {
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("clock");
    let node = worker_nodes(&env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "clock").await;
    let vmi = virtual_machine_instance(&client, &ns, "vm1").await;
    tolerating_pod(
        &client,
        &ns,
        "virt-launcher-vm1",
        &node,
        Some(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "name": "vm1",
            "uid": vmi, "controller": true, "blockOwnerDeletion": true
        })),
    )
    .await;
    tolerating_pod(&client, &ns, "bare", &node, None).await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    for p in ["virt-launcher-vm1", "bare"] {
        wait_for(&format!("{p} Running"), LIMIT, || async {
            match pods.get_opt(p).await.map_err(|e| e.to_string())? {
                Some(pod) if running(&pod) => Ok(()),
                other => Err(format!("{:?}", other.map(|p| p.status))),
            }
        })
        .await;
    }

    let name = unique("nm-clock");
    nm::create(&client, &name, &node).await;
    let done = nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    for p in ["virt-launcher-vm1", "bare"] {
        let left = pods.get_opt(p).await.unwrap();
        assert!(
            left.is_none(),
            "{p} was on the node before the maintenance: it must be gone at Succeeded; {:?}; {:?}",
            left.map(|p| p.metadata.deletion_timestamp),
            done.status
        );
    }
    let s = done.status.unwrap();
    assert_eq!(s.eviction_pods, Some(2), "{s:?}");
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

//! Scale benchmark: the operator on a cluster of 5,000 realistic Node objects
//! (`docs/design.md §7`).
//!
//! # Command
//!
//! ```text
//! cargo bench --bench scale                  # 18 -> 1,000 -> 5,000 nodes (about 10 min on 2 cores)
//! BENCH_SCALE_NODES=2000 cargo bench --bench scale   # a smaller top size (at least 1,050)
//! NMO_UPSTREAM_MANAGER=<manager> cargo bench --bench scale   # upstream's start and memory beside ours
//! BENCH_SCALE_ONLY=start cargo bench --bench scale   # only start-to-ready and idle memory (about 4 min)
//! BENCH_SCALE_RUST_LOG=debug cargo bench --bench scale   # keep the log of ours' last start per size
//! ```
//!
//! `BENCH_SCALE_ONLY=start` builds the same cluster at the same sizes (work nodes and their pods
//! included) but measures only start-to-ready and idle memory, ours and (with
//! `NMO_UPSTREAM_MANAGER`) upstream's: no admission, no maintenances, no drain budget.
//! `BENCH_SCALE_RUST_LOG=<filter>` runs ours' timed starts with that `RUST_LOG` (default `warn`)
//! and copies each size's last start's log to `$CARGO_TARGET_DIR/bench-scale-<nodes>.log`: the
//! timestamps of its start-up steps.
//!
//! The local control plane (`nmo-devcluster`) runs with an audit policy that records every
//! request of the `system:serviceaccounts` group, which here only the operator is in (every
//! control-plane component is `system:masters`). The operator is the release build, running as
//! the ServiceAccount of `manifests/`, leader election off.
//!
//! Nodes: besides kwok's control-plane node, `scale-<i>` Node objects of about 9 KB each (40
//! container images with a digest and a tag name each, five conditions, nodeInfo, addresses,
//! capacity, 15 labels), like a kubelet's registration. No kubelet heartbeats them, so they are
//! created already NotReady (Ready `Unknown`, `unreachable` taints), as the node-lifecycle
//! controller would leave them; otherwise it would rewrite all of them at once 40 s in, in the
//! middle of a measurement. 50 kwok nodes (`work-<i>`), which kwok keeps Ready, carry 20 bare
//! pods each for the maintenances.
//!
//! # Figures, at 18, 1,000 and 5,000 nodes
//!
//! - **start-to-ready**: spawn of the process to `/readyz` 200 (ours: the webhook serving with its
//!   certificate and the admission caches listed, the Node watch's list not awaited;
//!   `src/run.rs`, `readiness`), polled every 2 ms, median of [`STARTS`] starts, once the control plane has
//!   settled after the nodes were created (its processes below 0.5 cores over a second, at most
//!   60 s; the wait and the CPU are printed): right after thousands of creates kube-apiserver is
//!   still busy sending them to its other watchers. With `NMO_UPSTREAM_MANAGER`, upstream's
//!   manager is started the same number of times in the same run, alternating with ours (ours,
//!   upstream, ours, ...), and timed the same way: spawn to its `/readyz` (on its
//!   `--health-probe-bind-address`) answering 200. Upstream's `/readyz` is controller-runtime's
//!   `healthz.Ping`, which answers 200 as soon as the probe server listens, before its caches
//!   have listed anything; it runs as the admin (as `benches/admission.rs` runs it), leader
//!   election off, its webhook on :9443 with a serving pair in a temporary directory
//!   (`$TMPDIR/k8s-webhook-server/serving-certs`).
//! - **idle RSS**: `VmRSS` 5 s after ready, nothing to do, and `VmHWM` then (the peak of the
//!   start, the initial lists included); both of the last start, ours and upstream's.
//! - **admission**: AdmissionReviews (CREATE of a NodeMaintenance for a Ready node) posted to the
//!   operator's webhook over 8 TLS keep-alive connections for 5 s after a 1 s warm-up: p50, p99,
//!   requests/s.
//! - at 18 and at the top size, **requests per maintenance**: the operator's API requests, by
//!   verb and resource, from the audit log (every request received between the first create and
//!   2 s after the last NodeMaintenance is gone), divided by the number of maintenances: one
//!   20-pod maintenance at 18 nodes, 50 concurrent 20-pod maintenances at the top size.
//! - at the top size, **RSS during the 50 maintenances**: highest `VmRSS` sampled every 50 ms from
//!   the first create until all are Succeeded, and `VmHWM` after.
//! - at the top size, **the drain budget** (`docs/drain-contract.md` §10): a fresh operator with
//!   `--max-parallel-drains=10` and 500 maintenances. Eleven more kwok nodes (`work-50` ..
//!   `work-60`): ten with one bare pod each, held by a PodDisruptionBudget of its own
//!   (`maxUnavailable: 0`, observed by the disruption controller: `currentHealthy` 1), one with a
//!   pod no budget holds (`scale-queue/free`). The 500 NodeMaintenances `queue-000` ..
//!   `queue-499` are created one after the other, so name order is creation order (the creation
//!   time has whole seconds; the name breaks ties): the ten held nodes, the free one (the first
//!   to wait), then 489 big nodes. Figures:
//!   - **first create -> all cordoned** (every target's `spec.unschedulable` as a Node watch
//!     delivers it) and **-> 490 `DrainQueued=True` + 10 held** ("settled": each queued one's
//!     message with its `position <p> in the queue`, the ten Running with a `PodDisruptionBudget` blocker
//!     and not queued; the list polled every 500 ms); the time the creates took, informative.
//!     How many queue messages name the final length (`of 490`) is printed in the progress.
//!   - **API requests to enter one queued maintenance**: the operator's requests (audit log)
//!     received from the first create until settled about a queued maintenance (its object, its
//!     node, its lease `node-<node>`, a pod list of its node), by verb and resource, divided by
//!     490.
//!   - **RSS**: idle (5 s after ready, before the first create), peak while the 500 are
//!     entered (first create until settled), and peak and mean over the next 30 s, with 490
//!     waiting; `VmRSS` sampled every 50 ms. The window's peak minus idle is printed (the goal:
//!     flat), and `VmRSS` 2 s after the 500 are gone, which tells memory the process kept from
//!     the bursts apart from what the 500 objects hold.
//!   - **CPU with 490 queued**: `utime + stime` (`/proc/<pid>/stat`) over the same 30 s, per
//!     second of wall time and per reconcile pass (`nmo_reconciles_total` from the metrics
//!     endpoint before and after), with the operator's API requests received in the window
//!     (audit log), by what they are about (a held maintenance, a queued one, other). The CPU
//!     also pays for the watches, so per pass it is an upper bound.
//!   - **freed slot -> next maintenance's first eviction**: the budget of `queue-000` is
//!     deleted; to the first eviction of `scale-queue/free` as the API server received it
//!     (`requestReceivedTimestamp` of its audit event; the policy records evictions at
//!     ResponseComplete, which carries that time) from `queue-000` `Succeeded` as a watch of this
//!     process saw it (the goal: under 1 s), and from the deletion's answer (which includes
//!     `queue-000`'s own drain: its pod's accepted eviction and its `Succeeded`, both also
//!     printed from the deletion). No eviction of the free pod may come before the deletion
//!     (checked).
//!
//!   Then the 500 are deleted and waited for, and the namespace and the eleven nodes deleted
//!   (about a minute and a half for the whole part on 2 cores, at 1,050 nodes). No variable
//!   sizes or skips it; `BENCH_SCALE_NODES` below 1,050 is refused, so there are always at least
//!   489 big nodes for it.
//!
//! Targets (issue "Chaos and scale"): at 5,000 nodes, idle RSS <= 24 MiB and within 8 MiB of the
//! 18-node figure; <= 40 MiB during the 50 maintenances; start-to-ready <= 1 s; admission within
//! 20 % of the 1,000-node figure; requests per maintenance independent of the node count. With
//! 490 maintenances queued: RSS flat (the window's peak near idle), and a freed slot's next
//! maintenance evicting under 1 s after the one ahead Succeeded.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use futures::{StreamExt, stream};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use nmo_devcluster::audit::{AuditCursor, AuditEvent, requests_policy};
use nmo_devcluster::fixtures::{Installed, bench_cluster};
use nmo_devcluster::measure::{
    CONTROL_PLANE, Started, cpu_seconds, proc_status, start_operator_timed, wait_until_quiet,
};
use nmo_devcluster::operator::{self, ServiceAccountRef, WEBHOOK_PATH};
use nmo_devcluster::{Cluster, http_get};
use node_maintenance_operator::api::{MaintenancePhase, NodeMaintenance};
use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
use serde_json::json;

const OPERATOR_BIN: &str = env!("CARGO_BIN_EXE_node-maintenance-operator");
const MIB: f64 = 1024.0 * 1024.0;
const LIMIT: Duration = Duration::from_secs(600);
const WORK_NODES: usize = 50;
const PODS_PER_NODE: usize = 20;
const NS: &str = "scale";
/// The drain budget at the top size: `--max-parallel-drains`.
const SLOTS: usize = 10;
/// The maintenances behind it: [`SLOTS`] held, the rest queued.
const QUEUED: usize = 500;
/// The namespace of the pods and budgets of the drain-budget measurement.
const QUEUE_NS: &str = "scale-queue";
/// The pod of the first queued maintenance's node, which no budget holds.
const FREE_POD: &str = "free";
/// How long the queued steady state is measured.
const WINDOW: Duration = Duration::from_secs(30);
/// CPU use (in cores, all of [`CONTROL_PLANE`] together, over one second) below which the
/// control plane counts as settled.
const QUIET_CORES: f64 = 0.5;
/// Starts per size and process, of which the median start-to-ready is reported.
const STARTS: usize = 5;

struct Bench {
    cluster: Cluster,
    account: ServiceAccountRef,
    kubeconfig: PathBuf,
    cert_dir: PathBuf,
    client: kube::Client,
    big_nodes: usize,
    rows: Vec<(String, String, String)>,
    started: Instant,
    /// `BENCH_SCALE_ONLY=start`: start-to-ready and idle memory only.
    only_start: bool,
    /// `NMO_UPSTREAM_MANAGER`: upstream's manager, started beside ours.
    upstream: Option<PathBuf>,
    /// `BENCH_SCALE_RUST_LOG`: `RUST_LOG` of ours' timed starts, whose logs are then kept.
    rust_log: Option<String>,
    /// `BENCH_SCALE_ARGS`: more flags of ours on every start, split at spaces (e.g.
    /// `--pod-warnings=false`, to tell the admission pod cache's share of the memory).
    extra_args: Vec<String>,
}

#[tokio::main]
async fn main() -> Result<()> {
    let top: usize = std::env::var("BENCH_SCALE_NODES")
        .ok()
        .map(|v| v.parse())
        .transpose()
        .context("BENCH_SCALE_NODES is a number")?
        .unwrap_or(5000);
    if top < 1000 + WORK_NODES {
        bail!("BENCH_SCALE_NODES must be at least {}", 1000 + WORK_NODES);
    }
    let only_start = match std::env::var("BENCH_SCALE_ONLY").ok().as_deref() {
        None | Some("") => false,
        Some("start") => true,
        Some(other) => bail!("BENCH_SCALE_ONLY={other}: the only part known is `start`"),
    };
    let mut b = Bench::new().await?;
    b.only_start = only_start;
    b.upstream = std::env::var_os("NMO_UPSTREAM_MANAGER").map(PathBuf::from);
    b.rust_log = std::env::var("BENCH_SCALE_RUST_LOG")
        .ok()
        .filter(|v| !v.is_empty());
    b.extra_args = std::env::var("BENCH_SCALE_ARGS")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let one = b.work_nodes(0..1).await?;
    b.pods(&one).await?;
    // 18 nodes: the control-plane node, one work node, 16 big ones.
    b.grow(16).await?;
    b.measure_idle("18 nodes").await?;
    if !only_start {
        b.requests_per_maintenance("18 nodes", &one).await?;
    }
    b.grow(1000 - 2 - b.big_nodes).await?;
    b.measure_idle("1000 nodes").await?;
    let work = b.work_nodes(1..WORK_NODES).await?;
    b.pods(&work).await?;
    b.grow(top - 1 - WORK_NODES - b.big_nodes).await?;
    let label = format!("{top} nodes");
    b.measure_idle(&label).await?;
    if !only_start {
        let mut all = one.clone();
        all.extend(work);
        b.requests_per_maintenance(&label, &all).await?;
        b.queued_maintenances(&label).await?;
    }

    let report = b.report();
    print!("{report}");
    let out = target_dir().join(if only_start {
        "bench-scale-start.txt"
    } else {
        "bench-scale.txt"
    });
    std::fs::write(&out, &report).with_context(|| format!("writing {}", out.display()))?;
    b.progress(&format!("done; table written to {}", out.display()));
    Ok(())
}

/// Where the tables and logs go: `$CARGO_TARGET_DIR`, else the crate's `target/`.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/target")))
}

/// A Node object as a kubelet registers it: about 9 KB of JSON.
fn big_node(i: usize) -> serde_json::Value {
    let name = format!("scale-{i}");
    let zone = ["a", "b", "c"][i % 3];
    let images: Vec<serde_json::Value> = (0..40)
        .map(|k| {
            let digest: String =
                format!("{:016x}", ((i as u64 + 1) * 0x9e37_79b9_7f4a_7c15) ^ k).repeat(4);
            json!({
                "names": [
                    format!("registry.example.com/platform/component-{k}@sha256:{digest}"),
                    format!("registry.example.com/platform/component-{k}:v1.{k}.{}", i % 7),
                ],
                "sizeBytes": 10_000_000 + k * 1_234_567,
            })
        })
        .collect();
    let cond = |t: &str, s: &str, reason: &str| {
        json!({
            "type": t, "status": s, "reason": reason,
            "message": format!("kubelet reports {t} is {s}"),
            "lastHeartbeatTime": "2026-01-01T00:00:00Z",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        })
    };
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "m6i.4xlarge",
                "beta.kubernetes.io/instance-type": "m6i.4xlarge",
                "topology.kubernetes.io/region": "eu-west-1",
                "topology.kubernetes.io/zone": format!("eu-west-1{zone}"),
                "failure-domain.beta.kubernetes.io/region": "eu-west-1",
                "failure-domain.beta.kubernetes.io/zone": format!("eu-west-1{zone}"),
                "node-role.kubernetes.io/worker": "",
                "pool": format!("pool-{}", i % 20),
                "team": format!("team-{}", i % 50),
                "scale-bench": "true",
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {
            "podCIDR": format!("10.{}.{}.0/24", 100 + i / 256 % 100, i % 256),
            "providerID": format!("aws:///eu-west-1{zone}/i-{i:017x}"),
            "taints": [
                {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
            ],
        },
        "status": {
            "capacity": {"cpu": "16", "memory": "65023012Ki", "pods": "110", "ephemeral-storage": "104845292Ki"},
            "allocatable": {"cpu": "15890m", "memory": "62186020Ki", "pods": "110", "ephemeral-storage": "96625420711"},
            "conditions": [
                cond("MemoryPressure", "Unknown", "NodeStatusUnknown"),
                cond("DiskPressure", "Unknown", "NodeStatusUnknown"),
                cond("PIDPressure", "Unknown", "NodeStatusUnknown"),
                cond("Ready", "Unknown", "NodeStatusUnknown"),
                cond("NetworkUnavailable", "False", "RouteCreated"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": format!("10.1.{}.{}", i / 256 % 256, i % 256)},
                {"type": "Hostname", "address": name},
                {"type": "InternalDNS", "address": format!("{name}.eu-west-1.compute.internal")},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": format!("{:032x}", i as u128 * 7919),
                "systemUUID": format!("ec2{:029x}", i),
                "bootID": format!("{:08x}-0000-4000-8000-{:012x}", i, i),
                "kernelVersion": "6.1.112-124.190.amzn2023.x86_64",
                "osImage": "Amazon Linux 2023.6.20241031",
                "containerRuntimeVersion": "containerd://1.7.23",
                "kubeletVersion": "v1.36.0",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": images,
        },
    })
}

impl Bench {
    async fn new() -> Result<Bench> {
        let started = Instant::now();
        let manifests = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/manifests"));
        let (
            cluster,
            Installed {
                account,
                kubeconfig,
                ..
            },
        ) = bench_cluster(
            Some(requests_policy(&["system:serviceaccounts"])),
            &manifests,
            OPERATOR_BIN,
        )?;
        let cert_dir = cluster.dir().join("scale-certs");
        std::fs::create_dir_all(&cert_dir)?;
        let pair = cluster
            .ca()
            .issue_server(&["localhost"], &[IpAddr::V4(Ipv4Addr::LOCALHOST)])?;
        std::fs::write(cert_dir.join("apiserver.crt"), &pair.cert_pem)?;
        std::fs::write(cert_dir.join("apiserver.key"), &pair.key_pem)?;
        let client = cluster.client().await;
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}}))?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await?;
        Ok(Bench {
            cluster,
            account,
            kubeconfig,
            cert_dir,
            client,
            big_nodes: 0,
            rows: Vec::new(),
            started,
            only_start: false,
            upstream: None,
            rust_log: None,
            extra_args: Vec::new(),
        })
    }

    fn progress(&self, msg: &str) {
        eprintln!("[{:6.1} s] {msg}", self.started.elapsed().as_secs_f64());
    }

    fn row(&mut self, size: &str, figure: &str, value: String) {
        self.progress(&format!("{size}: {figure} = {value}"));
        self.rows.push((size.into(), figure.into(), value));
    }

    /// Adds `n` big nodes, 32 creates in flight.
    async fn grow(&mut self, n: usize) -> Result<()> {
        let from = self.big_nodes;
        let nodes = Api::<Node>::all(self.client.clone());
        let t0 = Instant::now();
        let bytes = AtomicU64::new(0);
        let results: Vec<Result<()>> = stream::iter(from..from + n)
            .map(|i| {
                let nodes = nodes.clone();
                let bytes = &bytes;
                async move {
                    let node: Node = serde_json::from_value(big_node(i))?;
                    bytes.fetch_add(serde_json::to_vec(&node)?.len() as u64, Ordering::Relaxed);
                    nodes
                        .create(&PostParams::default(), &node)
                        .await
                        .with_context(|| format!("creating node scale-{i}"))?;
                    Ok(())
                }
            })
            .buffer_unordered(32)
            .collect()
            .await;
        results.into_iter().collect::<Result<Vec<()>>>()?;
        self.big_nodes += n;
        self.progress(&format!(
            "created {n} nodes ({} in all, {:.1} KB each) in {:.1} s",
            self.big_nodes,
            bytes.load(Ordering::Relaxed) as f64 / n.max(1) as f64 / 1000.0,
            t0.elapsed().as_secs_f64()
        ));
        Ok(())
    }

    /// Creates kwok nodes `work-<i>` and waits until they are Ready.
    async fn work_nodes(&self, range: std::ops::Range<usize>) -> Result<Vec<String>> {
        let names: Vec<String> = range.map(|i| format!("work-{i}")).collect();
        for n in &names {
            self.cluster.create_node(n, false)?;
        }
        for n in &names {
            self.wait(&format!("{n} Ready"), || async {
                self.cluster
                    .node_ready(n)
                    .then_some(())
                    .ok_or(anyhow::anyhow!("not ready"))
            })
            .await?;
        }
        Ok(names)
    }

    /// Puts [`PODS_PER_NODE`] bare pods on each node and waits until they all run.
    async fn pods(&self, nodes: &[String]) -> Result<()> {
        let pods = Api::<Pod>::namespaced(self.client.clone(), NS);
        let specs: Vec<(String, String)> = nodes
            .iter()
            .flat_map(|n| (0..PODS_PER_NODE).map(move |k| (n.clone(), format!("{n}-p{k}"))))
            .collect();
        let results: Vec<Result<()>> = stream::iter(specs)
            .map(|(node, name)| {
                let pods = pods.clone();
                async move {
                    let pod: Pod = serde_json::from_value(json!({
                        "metadata": {"name": name, "labels": {"node": node}},
                        "spec": {
                            "nodeName": node,
                            "terminationGracePeriodSeconds": 0,
                            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]
                        }
                    }))?;
                    pods.create(&PostParams::default(), &pod).await?;
                    Ok(())
                }
            })
            .buffer_unordered(32)
            .collect()
            .await;
        results.into_iter().collect::<Result<Vec<()>>>()?;
        let want = nodes.len() * PODS_PER_NODE;
        self.wait(&format!("{want} pods Running"), || async {
            let list = pods.list(&ListParams::default()).await?;
            let running = list
                .items
                .iter()
                .filter(|p| {
                    nodes.iter().any(|n| {
                        p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(n.as_str())
                    }) && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                })
                .count();
            (running == want)
                .then_some(())
                .ok_or(anyhow::anyhow!("{running} Running"))
        })
        .await
    }

    async fn wait<T, F, Fut>(&self, what: &str, check: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        self.wait_every(what, Duration::from_millis(100), check)
            .await
    }

    /// [`Bench::wait`], checking every `every` (a list of hundreds of objects is not free for
    /// the control plane the operator shares the cores with).
    async fn wait_every<T, F, Fut>(&self, what: &str, every: Duration, mut check: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let deadline = Instant::now() + LIMIT;
        loop {
            match check().await {
                Ok(v) => return Ok(v),
                Err(e) if Instant::now() > deadline => bail!("timed out waiting for {what}: {e}"),
                Err(_) => tokio::time::sleep(every).await,
            }
        }
    }

    fn start(&self, name: &str) -> Result<Started> {
        self.start_with(name, &[])
    }

    /// [`Bench::start`] with more flags.
    fn start_with(&self, name: &str, args: &[&str]) -> Result<Started> {
        let extra = self.extra_args.iter().map(String::as_str);
        let args: Vec<&str> = args.iter().copied().chain(extra).collect();
        Ok(start_operator_timed(
            &self.cluster,
            name,
            OPERATOR_BIN.as_ref(),
            &self.kubeconfig,
            &self.cert_dir,
            &[("POD_NAMESPACE", &self.account.namespace)],
            &args,
            Duration::from_secs(60),
        )?)
    }

    /// Starts upstream's manager (`NMO_UPSTREAM_MANAGER`) as `benches/admission.rs` runs it (as
    /// the admin, leader election off, webhook on :9443 with the serving pair in a temporary
    /// directory) and polls its `/readyz` every 2 ms, as [`start_operator_timed`] polls ours.
    fn start_upstream(&self, manager: &std::path::Path, name: &str) -> Result<Started> {
        let tmp = self.cluster.dir().join("upstream-tmp");
        let certs = tmp.join("k8s-webhook-server/serving-certs");
        if !certs.join("tls.key").exists() {
            std::fs::create_dir_all(&certs)?;
            let pair = self
                .cluster
                .ca()
                .issue_server(&["localhost"], &[IpAddr::V4(Ipv4Addr::LOCALHOST)])?;
            std::fs::write(certs.join("tls.crt"), &pair.cert_pem)?;
            std::fs::write(certs.join("tls.key"), &pair.key_pem)?;
        }
        let ports = nmo_devcluster::free_ports(2)?;
        let mut cmd = std::process::Command::new(manager);
        cmd.args([
            format!("--kubeconfig={}", self.cluster.kubeconfig().display()),
            format!("--metrics-bind-address=127.0.0.1:{}", ports[0]),
            format!("--health-probe-bind-address=127.0.0.1:{}", ports[1]),
            "--leader-elect=false".into(),
        ])
        .env("TMPDIR", &tmp)
        .env("OPERATOR_NAMESPACE", "node-maintenance-operator-system");
        let t0 = Instant::now();
        let mut child = self.cluster.spawn(name, cmd)?;
        loop {
            // Go answers in the request's protocol version.
            if http_get(("127.0.0.1", ports[1]), "/readyz")
                .is_some_and(|r| r.split(' ').nth(1) == Some("200"))
            {
                return Ok(Started {
                    child,
                    ready_after: t0.elapsed(),
                    ports: [9443, ports[0], ports[1]],
                });
            }
            if let Some(status) = child.exited() {
                bail!("{name} exited ({status}):\n{}", child.log_tail(30));
            }
            if t0.elapsed() > Duration::from_secs(60) {
                bail!("{name} not ready after 60 s:\n{}", child.log_tail(30));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Start-to-ready (median of [`STARTS`]) and idle memory of fresh operators, ours and
    /// upstream's (with `NMO_UPSTREAM_MANAGER`), their starts alternating; then, unless
    /// `BENCH_SCALE_ONLY=start`, admission on ours.
    async fn measure_idle(&mut self, size: &str) -> Result<()> {
        // Just after thousands of Node creates, kube-apiserver is still sending them to its
        // other watchers (scheduler, controller-manager, kwok) for seconds; a start measured
        // then times that backlog, not the operator. Measure on a settled control plane.
        let pids = CONTROL_PLANE
            .iter()
            .map(|c| Ok(self.cluster.component_pid(c)?))
            .collect::<Result<Vec<u32>>>()?;
        let (waited, cores) = tokio::task::block_in_place(|| {
            wait_until_quiet(&pids, QUIET_CORES, Duration::from_secs(60))
        });
        self.progress(&format!(
            "{size}: control plane at {cores:.2} cores after waiting {:.0} s to settle",
            waited.as_secs_f64()
        ));
        let env: Vec<(&str, &str)> = match &self.rust_log {
            Some(filter) => vec![
                ("POD_NAMESPACE", &self.account.namespace),
                ("RUST_LOG", filter),
            ],
            None => vec![("POD_NAMESPACE", &self.account.namespace)],
        };
        let extra: Vec<&str> = self.extra_args.iter().map(String::as_str).collect();
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        let (mut last, mut last_upstream) = (None, None);
        for i in 0..STARTS {
            let name = format!("op-{}-{i}", self.big_nodes);
            let mut s = tokio::task::block_in_place(|| {
                Ok::<_, anyhow::Error>(start_operator_timed(
                    &self.cluster,
                    &name,
                    OPERATOR_BIN.as_ref(),
                    &self.kubeconfig,
                    &self.cert_dir,
                    &env,
                    &extra,
                    Duration::from_secs(60),
                )?)
            })?;
            ours.push(s.ready_after.as_secs_f64() * 1000.0);
            if i + 1 < STARTS {
                s.child.stop(Duration::from_secs(5));
            } else {
                last = Some(s);
            }
            if let Some(m) = self.upstream.clone() {
                let name = format!("upstream-{}-{i}", self.big_nodes);
                let mut u = tokio::task::block_in_place(|| self.start_upstream(&m, &name))?;
                theirs.push(u.ready_after.as_secs_f64() * 1000.0);
                if i + 1 < STARTS {
                    u.child.stop(Duration::from_secs(5));
                } else {
                    last_upstream = Some(u);
                }
            }
        }
        let mut op = last.expect("STARTS > 0");
        let median = |v: &[f64]| {
            let mut v = v.to_vec();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let list = |v: &[f64]| {
            v.iter()
                .map(|ms| format!("{ms:.0}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut value = format!("ours {:.0} ms ({})", median(&ours), list(&ours));
        if !theirs.is_empty() {
            let _ = write!(
                value,
                "; upstream {:.0} ms ({}); ours / upstream {:.2}",
                median(&theirs),
                list(&theirs),
                median(&ours) / median(&theirs)
            );
        }
        self.row(
            size,
            &format!("start-to-ready, median of {STARTS} (each start)"),
            value,
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
        let memory = |pid: u32| -> Result<String> {
            let rss = proc_status(pid, "VmRSS").context("process gone")? as f64 / MIB;
            let hwm = proc_status(pid, "VmHWM").context("process gone")? as f64 / MIB;
            Ok(format!("{rss:.1} MiB (peak {hwm:.1})"))
        };
        let mut value = format!("ours {}", memory(op.child.pid())?);
        if let Some(mut u) = last_upstream {
            let _ = write!(value, "; upstream {}", memory(u.child.pid())?);
            u.child.stop(Duration::from_secs(5));
        }
        self.row(size, "idle RSS 5 s after ready (VmHWM)", value);
        if self.rust_log.is_some() {
            let out = target_dir().join(format!("bench-scale-{}.log", self.big_nodes));
            std::fs::copy(op.child.log_path(), &out)
                .with_context(|| format!("copying the log to {}", out.display()))?;
            self.progress(&format!(
                "{size}: ours' last start logged to {}",
                out.display()
            ));
        }
        if !self.only_start {
            let (p50, p99, rps, failed) = admission(&self.cluster, op.ports[0], "work-0").await?;
            self.row(
                size,
                "admission (8 keep-alive connections)",
                format!("p50 {p50:.2} ms, p99 {p99:.2} ms, {rps:.0} requests/s, {failed} failed"),
            );
        }
        op.child.stop(Duration::from_secs(5));
        Ok(())
    }

    /// One NodeMaintenance per node in `nodes`, all at once; RSS sampled until all Succeeded;
    /// requests per maintenance from the audit log over the whole lifecycle.
    async fn requests_per_maintenance(&mut self, size: &str, nodes: &[String]) -> Result<()> {
        let op = tokio::task::block_in_place(|| self.start(&format!("op-m-{}", self.big_nodes)))?;
        let pid = op.child.pid();
        operator::register_webhook(&self.cluster, op.ports[0])?;
        let mut cursor = AuditCursor::at_end(self.cluster.audit_log_path());
        tokio::time::sleep(Duration::from_secs(2)).await;
        let _ = cursor.read()?;
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(0));
        let sampler = {
            let (stop, peak) = (stop.clone(), peak.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Some(rss) = proc_status(pid, "VmRSS") {
                        peak.fetch_max(rss, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        };
        let window_start = jiff::Timestamp::now();
        let t0 = Instant::now();
        let nms = Api::<NodeMaintenance>::all(self.client.clone());
        for n in nodes {
            let nm: NodeMaintenance = serde_json::from_value(json!({
                "apiVersion": "nodemaintenance.medik8s.io/v1beta1",
                "kind": "NodeMaintenance",
                "metadata": {"name": format!("{n}-nm")},
                "spec": {"nodeName": n, "reason": "scale bench"}
            }))?;
            nms.create(&PostParams::default(), &nm).await?;
        }
        self.wait(
            &format!("{} maintenances Succeeded", nodes.len()),
            || async {
                let list = nms.list(&ListParams::default()).await?;
                let done = list
                    .items
                    .iter()
                    .filter(|nm| {
                        nm.status.as_ref().and_then(|s| s.phase)
                            == Some(MaintenancePhase::Succeeded)
                    })
                    .count();
                (done == nodes.len())
                    .then_some(())
                    .ok_or(anyhow::anyhow!("{done} Succeeded"))
            },
        )
        .await?;
        let took = t0.elapsed();
        stop.store(true, Ordering::Relaxed);
        sampler.join().expect("sampler");
        let hwm = proc_status(pid, "VmHWM").unwrap_or(0) as f64 / MIB;
        self.row(
            size,
            &format!(
                "{} maintenances x {PODS_PER_NODE} pods: create -> all Succeeded",
                nodes.len()
            ),
            format!("{:.1} s", took.as_secs_f64()),
        );
        self.row(
            size,
            "RSS during the maintenances (peak sample / VmHWM)",
            format!(
                "{:.1} / {hwm:.1} MiB",
                peak.load(Ordering::Relaxed) as f64 / MIB
            ),
        );
        for n in nodes {
            nms.delete(&format!("{n}-nm"), &DeleteParams::default())
                .await?;
        }
        self.wait("NodeMaintenances gone", || async {
            let left = nms.list(&ListParams::default()).await?.items.len();
            (left == 0)
                .then_some(())
                .ok_or(anyhow::anyhow!("{left} left"))
        })
        .await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let window_end = jiff::Timestamp::now();
        let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
        for ev in cursor.read()? {
            if ev.user.starts_with("system:serviceaccount:")
                && ev.received >= window_start
                && ev.received <= window_end
            {
                *by_kind.entry(ev.verb_resource()).or_default() += 1;
            }
        }
        let total: usize = by_kind.values().sum();
        let per = |c: usize| c as f64 / nodes.len() as f64;
        let detail = by_kind
            .iter()
            .map(|(k, c)| format!("{k} {:.1}", per(*c)))
            .collect::<Vec<_>>()
            .join(", ");
        self.row(
            size,
            "API requests per maintenance",
            format!("{:.1} ({detail})", per(total)),
        );
        drop(op);
        // The pods were evicted: put them back for the next size.
        self.pods(nodes).await
    }

    /// At the top size: [`QUEUED`] maintenances behind `--max-parallel-drains=`[`SLOTS`] (see the
    /// module documentation, "the drain budget").
    async fn queued_maintenances(&mut self, size: &str) -> Result<()> {
        let client = self.client.clone();
        let need = QUEUED - SLOTS - 1;
        if self.big_nodes < need {
            self.grow(need - self.big_nodes).await?;
        }
        let held_nodes = self.work_nodes(WORK_NODES..WORK_NODES + SLOTS).await?;
        let free_node = self
            .work_nodes(WORK_NODES + SLOTS..WORK_NODES + SLOTS + 1)
            .await?
            .remove(0);
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": QUEUE_NS}}))?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await?;
        let pods = Api::<Pod>::namespaced(client.clone(), QUEUE_NS);
        let mut specs: Vec<(String, &str)> = held_nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (format!("held-{i}"), n.as_str()))
            .collect();
        specs.push((FREE_POD.into(), free_node.as_str()));
        for (name, node) in &specs {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"app": name}},
                "spec": {
                    "nodeName": node,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]
                }
            }))?;
            pods.create(&PostParams::default(), &pod).await?;
        }
        let pdbs = Api::<PodDisruptionBudget>::namespaced(client.clone(), QUEUE_NS);
        for i in 0..SLOTS {
            let pdb: PodDisruptionBudget = serde_json::from_value(json!({
                "metadata": {"name": format!("held-{i}")},
                "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": format!("held-{i}")}}}
            }))?;
            pdbs.create(&PostParams::default(), &pdb).await?;
        }
        // Each budget observed by the disruption controller with its pod healthy: it refuses.
        self.wait(&format!("{SLOTS} budgets holding their pod"), || async {
            let list = pdbs.list(&ListParams::default()).await?;
            let holding = list
                .items
                .iter()
                .filter(|p| {
                    p.status.as_ref().is_some_and(|s| {
                        s.observed_generation == p.metadata.generation
                            && s.current_healthy == Some(1)
                            && s.disruptions_allowed == Some(0)
                    })
                })
                .count();
            (holding == SLOTS)
                .then_some(())
                .ok_or(anyhow::anyhow!("{holding} holding"))
        })
        .await?;

        let flag = format!("--max-parallel-drains={SLOTS}");
        let op = tokio::task::block_in_place(|| {
            self.start_with(&format!("op-q-{}", self.big_nodes), &[&flag])
        })?;
        let pid = op.child.pid();
        let metrics_port = op.ports[1];
        operator::register_webhook(&self.cluster, op.ports[0])?;
        tokio::time::sleep(Duration::from_secs(5)).await;
        let idle = proc_status(pid, "VmRSS").context("operator gone")?;
        let samples: Arc<Mutex<Vec<(Instant, u64)>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = {
            let (stop, samples) = (stop.clone(), samples.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Some(rss) = proc_status(pid, "VmRSS") {
                        samples.lock().expect("samples").push((Instant::now(), rss));
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        };

        // Creation order: the held nodes, the free one, then big nodes; names in that order.
        let names: Vec<String> = (0..QUEUED).map(|i| format!("queue-{i:03}")).collect();
        let targets: Vec<String> = held_nodes
            .iter()
            .cloned()
            .chain([free_node.clone()])
            .chain((0..need).map(|i| format!("scale-{i}")))
            .collect();
        let mut left: std::collections::HashSet<String> = targets.iter().cloned().collect();
        let cordoned = watch_until(Api::<Node>::all(client.clone()), None, move |n: &Node| {
            if n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
                left.remove(&n.name_any());
            }
            left.is_empty()
        })
        .await?;
        // What each of the operator's requests is about: a held maintenance or a queued one (its
        // object, its node, its lease, its pod), or neither.
        let mut about: BTreeMap<String, &str> = BTreeMap::new();
        for (i, (name, node)) in names.iter().zip(&targets).enumerate() {
            let class = if i < SLOTS { "held" } else { "queued" };
            for key in [name.clone(), node.clone(), format!("node-{node}")] {
                about.insert(key, class);
            }
        }
        for (name, _) in &specs {
            about.insert(
                name.clone(),
                if name == FREE_POD { "queued" } else { "held" },
            );
        }
        let mut audit = AuditCursor::at_end(self.cluster.audit_log_path());
        let nms = Api::<NodeMaintenance>::all(client.clone());
        let t0 = Instant::now();
        let entry_start = jiff::Timestamp::now();
        for (name, node) in names.iter().zip(&targets) {
            let nm: NodeMaintenance = serde_json::from_value(json!({
                "apiVersion": "nodemaintenance.medik8s.io/v1beta1",
                "kind": "NodeMaintenance",
                "metadata": {"name": name},
                "spec": {"nodeName": node, "reason": "scale bench: drain budget"}
            }))?;
            nms.create(&PostParams::default(), &nm).await?;
        }
        let creates = t0.elapsed();
        let (cordoned_at, _) = tokio::time::timeout(LIMIT, cordoned)
            .await
            .context("timed out waiting for every node cordoned")???;
        let all_cordoned = cordoned_at.duration_since(t0);
        let queued = QUEUED - SLOTS;
        let final_length = self
            .wait_every(
                &format!("{queued} DrainQueued and {SLOTS} held"),
                Duration::from_millis(500),
                || async {
                    let list = nms.list(&ListParams::default()).await?;
                    let by_name: BTreeMap<String, &NodeMaintenance> =
                        list.items.iter().map(|nm| (nm.name_any(), nm)).collect();
                    let (mut held, mut waiting, mut final_length) = (0, 0, 0);
                    for (i, name) in names.iter().enumerate() {
                        let Some(nm) = by_name.get(name) else {
                            continue;
                        };
                        if i < SLOTS {
                            held += usize::from(
                                nm.status
                                    .iter()
                                    .flat_map(|s| s.blockers.iter().flatten())
                                    .any(|b| b.reason == "PodDisruptionBudget")
                                    && queue_message(nm).is_none(),
                            );
                        } else if let Some(message) = queue_message(nm)
                            && message.contains(&format!("position {} in the queue", i - SLOTS + 1))
                        {
                            waiting += 1;
                            final_length +=
                                usize::from(message.contains(&format!(" of {queued};")));
                        }
                    }
                    (held == SLOTS && waiting == queued)
                        .then_some(final_length)
                        .ok_or(anyhow::anyhow!("{held} held, {waiting} queued"))
                },
            )
            .await?;
        let settled = t0.elapsed();
        let entry_end = jiff::Timestamp::now();
        self.progress(&format!(
            "{size}: {final_length} of the {queued} queue messages name the final length \
             ({queued}); the others the length when last written"
        ));

        // 30 s with 490 waiting: memory, CPU, reconcile passes, API requests.
        let reconciles = || {
            tokio::task::block_in_place(|| reconciles_total(metrics_port))
                .context("nmo_reconciles_total")
        };
        // The free pod's evictions seen before its slot was freed (there must be none).
        let mut early: Vec<jiff::Timestamp> = Vec::new();
        let mut evictions_of_free = |events: &[AuditEvent]| {
            early.extend(
                events
                    .iter()
                    .filter(|e| is_eviction_of(e, FREE_POD))
                    .map(|e| e.received),
            );
        };
        let events = audit.read()?;
        evictions_of_free(&events);
        let entry = by_class(&events, &about, entry_start, entry_end);
        let (r0, cpu0, w0) = (
            reconciles()?,
            cpu_seconds(pid).context("operator gone")?,
            Instant::now(),
        );
        let window_start = jiff::Timestamp::now();
        tokio::time::sleep(WINDOW).await;
        let (r1, cpu1, wall) = (
            reconciles()?,
            cpu_seconds(pid).context("operator gone")?,
            w0.elapsed(),
        );
        let window_end = jiff::Timestamp::now();
        let events = audit.read()?;
        evictions_of_free(&events);
        let window = by_class(&events, &about, window_start, window_end);
        let (entry_peak, window_peak, window_mean) = {
            let samples = samples.lock().expect("samples");
            let entering: Vec<u64> = samples
                .iter()
                .filter(|(t, _)| *t >= t0 && *t < w0)
                .map(|s| s.1)
                .collect();
            let window: Vec<u64> = samples
                .iter()
                .filter(|(t, _)| *t >= w0 && *t <= w0 + wall)
                .map(|s| s.1)
                .collect();
            if window.is_empty() {
                bail!("no RSS sample in the window");
            }
            (
                entering.iter().copied().max().unwrap_or(0),
                window.iter().copied().max().unwrap_or(0),
                window.iter().sum::<u64>() as f64 / window.len() as f64,
            )
        };
        let passes = r1 - r0;
        let cpu_ms = (cpu1 - cpu0) * 1000.0;
        let requests: usize = window.values().flat_map(|k| k.values()).sum();
        let detail = window
            .iter()
            .map(|(class, kinds)| {
                let kinds = kinds
                    .iter()
                    .map(|(k, c)| format!("{k} {c}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                format!("{class}: {kinds}")
            })
            .collect::<Vec<_>>()
            .join("; ");
        let entered = entry.get("queued").cloned().unwrap_or_default();
        let per_queued = |c: usize| c as f64 / queued as f64;
        let entry_detail = entered
            .iter()
            .map(|(k, c)| format!("{k} {:.1}", per_queued(*c)))
            .collect::<Vec<_>>()
            .join(", ");

        // Free a slot: the first maintenance's budget goes; the 11th starts.
        let succeeded = watch_until(
            nms.clone(),
            Some(format!("metadata.name={}", names[0])),
            |nm: &NodeMaintenance| {
                nm.status.as_ref().and_then(|s| s.phase) == Some(MaintenancePhase::Succeeded)
            },
        )
        .await?;
        evictions_of_free(&audit.read()?);
        if !early.is_empty() {
            bail!("{FREE_POD} was evicted while its maintenance was queued: {early:?}");
        }
        pdbs.delete("held-0", &DeleteParams::default()).await?;
        let deleted = jiff::Timestamp::now();
        let (_, succeeded_at) = tokio::time::timeout(LIMIT, succeeded)
            .await
            .with_context(|| format!("timed out waiting for {} Succeeded", names[0]))???;
        let deadline = Instant::now() + LIMIT;
        let mut after: Vec<AuditEvent> = Vec::new();
        let first_eviction = loop {
            after.extend(audit.read()?);
            if let Some(t) = after
                .iter()
                .filter(|e| is_eviction_of(e, FREE_POD))
                .map(|e| e.received)
                .min()
            {
                break t;
            }
            if Instant::now() > deadline {
                bail!("no eviction of {QUEUE_NS}/{FREE_POD} in the audit log");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let ms = |from: jiff::Timestamp| first_eviction.duration_since(from).as_secs_f64() * 1000.0;
        let (after_delete, after_succeeded) = (ms(deleted), ms(succeeded_at));
        // queue-000's own drain: its pod's accepted eviction after the deletion.
        let own = after
            .iter()
            .filter(|e| is_eviction_of(e, "held-0") && (200..300).contains(&e.code))
            .map(|e| e.received)
            .min()
            .context("no accepted eviction of held-0 in the audit log")?;
        let own_ms = own.duration_since(deleted).as_secs_f64() * 1000.0;
        let succeeded_ms = succeeded_at.duration_since(deleted).as_secs_f64() * 1000.0;
        let eleventh = &names[SLOTS];
        self.wait(&format!("{eleventh} Succeeded"), || async {
            let phase = nms.get(eleventh).await?.status.and_then(|s| s.phase);
            (phase == Some(MaintenancePhase::Succeeded))
                .then_some(())
                .ok_or(anyhow::anyhow!("{phase:?}"))
        })
        .await?;
        stop.store(true, Ordering::Relaxed);
        sampler.join().expect("sampler");

        // Leave the cluster as it was for whatever follows.
        let t = Instant::now();
        let results: Vec<Result<()>> = stream::iter(&names)
            .map(|name| {
                let nms = nms.clone();
                async move {
                    nms.delete(name, &DeleteParams::default()).await?;
                    Ok(())
                }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        results.into_iter().collect::<Result<Vec<()>>>()?;
        self.wait_every(
            &format!("{QUEUED} NodeMaintenances gone"),
            Duration::from_millis(500),
            || async {
                let left = nms.list(&ListParams::default()).await?.items.len();
                (left == 0)
                    .then_some(())
                    .ok_or(anyhow::anyhow!("{left} left"))
            },
        )
        .await?;
        self.progress(&format!(
            "{size}: {QUEUED} maintenances deleted and gone in {:.1} s",
            t.elapsed().as_secs_f64()
        ));
        tokio::time::sleep(Duration::from_secs(2)).await;
        let gone = proc_status(pid, "VmRSS").context("operator gone")?;
        drop(op);
        Api::<Namespace>::all(client.clone())
            .delete(QUEUE_NS, &DeleteParams::default())
            .await?;
        let nodes = Api::<Node>::all(client);
        for n in held_nodes.iter().chain([&free_node]) {
            nodes.delete(n, &DeleteParams::default()).await?;
        }
        self.row(
            size,
            &format!(
                "{QUEUED} maintenances, --max-parallel-drains={SLOTS}: first create -> all \
                 cordoned / {queued} DrainQueued + {SLOTS} held"
            ),
            format!(
                "{:.1} s / {:.1} s (the {QUEUED} creates, one by one: {:.1} s)",
                all_cordoned.as_secs_f64(),
                settled.as_secs_f64(),
                creates.as_secs_f64()
            ),
        );
        self.row(
            size,
            "API requests to enter one queued maintenance (first create -> settled)",
            format!("{:.1} ({entry_detail})", per_queued(entered.values().sum())),
        );
        self.row(
            size,
            &format!(
                "RSS idle / peak entering {QUEUED} / {queued} queued ({} s: peak, mean)",
                WINDOW.as_secs()
            ),
            format!(
                "{:.1} / {:.1} / {:.1}, {:.1} MiB (peak {:+.1} MiB over idle; {:.1} MiB once \
                 the {QUEUED} are gone)",
                idle as f64 / MIB,
                entry_peak as f64 / MIB,
                window_peak as f64 / MIB,
                window_mean / MIB,
                (window_peak as f64 - idle as f64) / MIB,
                gone as f64 / MIB
            ),
        );
        self.row(
            size,
            &format!("CPU with {queued} queued ({} s)", WINDOW.as_secs()),
            format!(
                "{:.1} ms/s, {} ms per reconcile ({passes:.0} reconciles; {requests} API \
                 requests, by what about: {detail})",
                cpu_ms / wall.as_secs_f64(),
                if passes > 0.0 {
                    format!("{:.2}", cpu_ms / passes)
                } else {
                    "-".into()
                },
            ),
        );
        self.row(
            size,
            "freed slot -> next maintenance's first eviction (API server)",
            format!(
                "{after_succeeded:.0} ms after #1 Succeeded (watch); {after_delete:.0} ms after \
                 the budget's deletion (#1's accepted eviction {own_ms:.0} ms, Succeeded \
                 {succeeded_ms:.0} ms after it)"
            ),
        );

        Ok(())
    }

    fn report(&self) -> String {
        let w0 = self.rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
        let w1 = self.rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
        let mut out = String::from("\nscale benchmark (operator on the local control plane)\n");
        for (size, figure, value) in &self.rows {
            let _ = writeln!(out, "{size:w0$}  {figure:w1$}  {value}");
        }
        out
    }
}

/// The message of `nm`'s `DrainQueued=True` condition, if it has one.
fn queue_message(nm: &NodeMaintenance) -> Option<String> {
    nm.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .find(|c| c.type_ == "DrainQueued" && c.status == "True")
        .map(|c| c.message.clone())
}

/// The operator's requests in `events` received between `from` and `to`, counted by what they
/// are about (`about`: object name to class; a pod list by the node of its field selector;
/// `other` when neither) and by verb and resource.
fn by_class(
    events: &[AuditEvent],
    about: &BTreeMap<String, &str>,
    from: jiff::Timestamp,
    to: jiff::Timestamp,
) -> BTreeMap<String, BTreeMap<String, usize>> {
    let mut counts: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for e in events {
        if !e.user.starts_with("system:serviceaccount:") || e.received < from || e.received > to {
            continue;
        }
        let node = ["spec.nodeName%3D", "spec.nodeName="].iter().find_map(|k| {
            let rest = &e.uri[e.uri.find(k)? + k.len()..];
            Some(&rest[..rest.find(['&', ',']).unwrap_or(rest.len())])
        });
        let key = if e.name.is_empty() {
            node.unwrap_or("")
        } else {
            &e.name
        };
        let class = about.get(key).copied().unwrap_or("other");
        *counts
            .entry(class.to_string())
            .or_default()
            .entry(e.verb_resource())
            .or_default() += 1;
    }
    counts
}

/// Whether `e` is the operator's eviction of pod `pod` of [`QUEUE_NS`].
fn is_eviction_of(e: &AuditEvent, pod: &str) -> bool {
    e.subresource == "eviction"
        && e.namespace == QUEUE_NS
        && e.name == pod
        && e.user.starts_with("system:serviceaccount:")
}

/// `nmo_reconciles_total` of the operator whose metrics are on `port`.
fn reconciles_total(port: u16) -> Option<f64> {
    let raw = http_get(("127.0.0.1", port), "/metrics")?;
    raw.lines()
        .find_map(|l| l.strip_prefix("nmo_reconciles_total "))?
        .trim()
        .parse()
        .ok()
}

/// Watches `api` (`fields`: a field selector) from now, in a task of its own, until `done` says
/// so of an object it delivered; the task answers when (the monotonic and the wall clock).
async fn watch_until<K, F>(
    api: Api<K>,
    fields: Option<String>,
    mut done: F,
) -> Result<tokio::task::JoinHandle<Result<(Instant, jiff::Timestamp)>>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    F: FnMut(&K) -> bool + Send + 'static,
{
    let mut version = api
        .list_metadata(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .context("a list without a resourceVersion")?;
    Ok(tokio::spawn(async move {
        loop {
            let mut params = WatchParams::default().timeout(290);
            if let Some(f) = &fields {
                params = params.fields(f);
            }
            let mut events = api.watch(&params, &version).await?.boxed();
            while let Some(event) = events.next().await {
                match event? {
                    WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => {
                        if let Some(v) = o.meta().resource_version.clone() {
                            version = v;
                        }
                        if done(&o) {
                            return Ok((Instant::now(), jiff::Timestamp::now()));
                        }
                    }
                    WatchEvent::Bookmark(b) => version = b.metadata.resource_version,
                    WatchEvent::Error(e) => bail!("watch: {e:?}"),
                }
            }
        }
    }))
}

fn review(uid: &str, node: &str) -> Bytes {
    Bytes::from(
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": {"group": "nodemaintenance.medik8s.io", "version": "v1beta1", "kind": "NodeMaintenance"},
                "resource": {"group": "nodemaintenance.medik8s.io", "version": "v1beta1", "resource": "nodemaintenances"},
                "name": format!("bench-{uid}"),
                "operation": "CREATE",
                "userInfo": {"username": "admin"},
                "dryRun": true,
                "object": {
                    "apiVersion": "nodemaintenance.medik8s.io/v1beta1",
                    "kind": "NodeMaintenance",
                    "metadata": {"name": format!("bench-{uid}")},
                    "spec": {"nodeName": node, "reason": "bench"}
                }
            }
        })
        .to_string(),
    )
}

/// Posts CREATE reviews to the webhook at `port` over 8 TLS keep-alive connections for 5 s
/// (after 1 s of warm-up): p50 and p99 in ms, requests/s, failed requests (non-200 or not
/// allowed).
async fn admission(cluster: &Cluster, port: u16, node: &str) -> Result<(f64, f64, f64, u64)> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(cluster.ca().cert_pem().as_bytes()) {
        roots.add(c?)?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let measure = Duration::from_secs(5);
    let measure_from = Instant::now() + Duration::from_secs(1);
    let end = measure_from + measure;
    let mut tasks = Vec::new();
    for c in 0..8 {
        let connector = connector.clone();
        let node = node.to_string();
        tasks.push(tokio::spawn(async move {
            let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
            tcp.set_nodelay(true)?;
            let name = ServerName::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST).into());
            let tls = connector.connect(name, tcp).await?;
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
            tokio::spawn(conn);
            let (mut latencies, mut failed, mut i) = (Vec::new(), 0u64, 0u64);
            while Instant::now() < end {
                i += 1;
                let req = http::Request::post(WEBHOOK_PATH)
                    .header("host", "127.0.0.1")
                    .header("content-type", "application/json")
                    .body(Full::new(review(&format!("c{c}-{i}"), &node)))?;
                let t0 = Instant::now();
                let ok = async {
                    sender.ready().await.ok()?;
                    let resp = sender.send_request(req).await.ok()?;
                    let status = resp.status();
                    let body = resp.into_body().collect().await.ok()?.to_bytes();
                    let allowed = serde_json::from_slice::<serde_json::Value>(&body)
                        .ok()?
                        .pointer("/response/allowed")?
                        .as_bool()?;
                    (status == 200 && allowed).then_some(())
                }
                .await
                .is_some();
                if t0 >= measure_from {
                    if ok {
                        latencies.push(t0.elapsed().as_secs_f64() * 1000.0);
                    } else {
                        failed += 1;
                    }
                }
            }
            anyhow::Ok((latencies, failed))
        }));
    }
    let (mut all, mut failed) = (Vec::new(), 0);
    for t in tasks {
        let (l, f) = t.await??;
        all.extend(l);
        failed += f;
    }
    if all.is_empty() {
        bail!("no admission request succeeded ({failed} failed)");
    }
    all.sort_by(f64::total_cmp);
    let pct = |p: f64| all[((all.len() as f64 * p).ceil() as usize).clamp(1, all.len()) - 1];
    Ok((
        pct(0.50),
        pct(0.99),
        all.len() as f64 / measure.as_secs_f64(),
        failed,
    ))
}

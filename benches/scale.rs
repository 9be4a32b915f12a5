//! Scale benchmark: the operator on a cluster of 5,000 realistic Node objects
//! (`docs/design.md §7`).
//!
//! # Command
//!
//! ```text
//! cargo bench --bench scale                  # 18 -> 1,000 -> 5,000 nodes (about 10 min on 2 cores)
//! BENCH_SCALE_NODES=2000 cargo bench --bench scale   # a smaller top size
//! ```
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
//! - **start-to-ready**: spawn of the process to `/readyz` 200 (webhook serving, NodeMaintenance
//!   and Node watches listed), polled every 2 ms, median of 3 starts, once the control plane has
//!   settled after the nodes were created (its processes below 0.5 cores over a second, at most
//!   60 s; the wait and the CPU are printed): right after thousands of creates kube-apiserver is
//!   still busy sending them to its other watchers.
//! - **idle RSS**: `VmRSS` 5 s after ready, nothing to do.
//! - **admission**: AdmissionReviews (CREATE of a NodeMaintenance for a Ready node) posted to the
//!   operator's webhook over 8 TLS keep-alive connections for 5 s after a 1 s warm-up: p50, p99,
//!   requests/s.
//! - at 18 and at the top size, **requests per maintenance**: the operator's API requests, by
//!   verb and resource, from the audit log (every request received between the first create and
//!   2 s after the last NodeMaintenance is gone), divided by the number of maintenances: one
//!   20-pod maintenance at 18 nodes, 50 concurrent 20-pod maintenances at the top size.
//! - at the top size, **RSS during the 50 maintenances**: highest `VmRSS` sampled every 50 ms from
//!   the first create until all are Succeeded, and `VmHWM` after.
//!
//! Targets (issue "Chaos and scale"): at 5,000 nodes, idle RSS <= 24 MiB and within 8 MiB of the
//! 18-node figure; <= 40 MiB during the 50 maintenances; start-to-ready <= 1 s; admission within
//! 20 % of the 1,000-node figure; requests per maintenance independent of the node count.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use futures::{StreamExt, stream};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use nmo_devcluster::Cluster;
use nmo_devcluster::audit::{AuditCursor, requests_policy};
use nmo_devcluster::fixtures::{Installed, bench_cluster};
use nmo_devcluster::measure::{Started, proc_status, start_operator_timed, wait_until_quiet};
use nmo_devcluster::operator::{self, ServiceAccountRef, WEBHOOK_PATH};
use node_maintenance_operator::api::{MaintenancePhase, NodeMaintenance};
use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
use serde_json::json;

const OPERATOR_BIN: &str = env!("CARGO_BIN_EXE_node-maintenance-operator");
const MIB: f64 = 1024.0 * 1024.0;
const LIMIT: Duration = Duration::from_secs(600);
const WORK_NODES: usize = 50;
const PODS_PER_NODE: usize = 20;
const NS: &str = "scale";
/// The control plane's processes, whose CPU use must settle before start-to-ready is measured.
const CONTROL_PLANE: [&str; 5] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
];
/// CPU use (in cores, all of [`CONTROL_PLANE`] together, over one second) below which the
/// control plane counts as settled.
const QUIET_CORES: f64 = 0.5;

struct Bench {
    cluster: Cluster,
    account: ServiceAccountRef,
    kubeconfig: PathBuf,
    cert_dir: PathBuf,
    client: kube::Client,
    big_nodes: usize,
    rows: Vec<(String, String, String)>,
    started: Instant,
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
    let mut b = Bench::new().await?;
    let one = b.work_nodes(0..1).await?;
    b.pods(&one).await?;
    // 18 nodes: the control-plane node, one work node, 16 big ones.
    b.grow(16).await?;
    b.measure_idle("18 nodes").await?;
    b.requests_per_maintenance("18 nodes", &one).await?;
    b.grow(1000 - 2 - b.big_nodes).await?;
    b.measure_idle("1000 nodes").await?;
    let work = b.work_nodes(1..WORK_NODES).await?;
    b.pods(&work).await?;
    b.grow(top - 1 - WORK_NODES - b.big_nodes).await?;
    let label = format!("{top} nodes");
    b.measure_idle(&label).await?;
    let mut all = one.clone();
    all.extend(work);
    b.requests_per_maintenance(&label, &all).await?;

    let report = b.report();
    print!("{report}");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/target")));
    let out = target.join("bench-scale.txt");
    std::fs::write(&out, &report).with_context(|| format!("writing {}", out.display()))?;
    b.progress(&format!("done; table written to {}", out.display()));
    Ok(())
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

    async fn wait<T, F, Fut>(&self, what: &str, mut check: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let deadline = Instant::now() + LIMIT;
        loop {
            match check().await {
                Ok(v) => return Ok(v),
                Err(e) if Instant::now() > deadline => bail!("timed out waiting for {what}: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    fn start(&self, name: &str) -> Result<Started> {
        Ok(start_operator_timed(
            &self.cluster,
            name,
            OPERATOR_BIN.as_ref(),
            &self.kubeconfig,
            &self.cert_dir,
            &[("POD_NAMESPACE", &self.account.namespace)],
            Duration::from_secs(60),
        )?)
    }

    /// Start-to-ready (median of 3), idle RSS and admission figures of a fresh operator.
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
        let mut ready = Vec::new();
        let mut last = None;
        for i in 0..3 {
            let mut s =
                tokio::task::block_in_place(|| self.start(&format!("op-{}-{i}", self.big_nodes)))?;
            ready.push(s.ready_after.as_secs_f64() * 1000.0);
            if i < 2 {
                s.child.stop(Duration::from_secs(5));
            } else {
                last = Some(s);
            }
        }
        let mut op = last.expect("three starts");
        ready.sort_by(f64::total_cmp);
        self.row(
            size,
            "start-to-ready (median of 3)",
            format!("{:.0} ms", ready[1]),
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
        let pid = op.child.pid();
        let rss = proc_status(pid, "VmRSS").context("operator gone")? as f64 / MIB;
        self.row(size, "idle RSS", format!("{rss:.1} MiB"));
        let (p50, p99, rps, failed) = admission(&self.cluster, op.ports[0], "work-0").await?;
        self.row(
            size,
            "admission (8 keep-alive connections)",
            format!("p50 {p50:.2} ms, p99 {p99:.2} ms, {rps:.0} requests/s, {failed} failed"),
        );
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

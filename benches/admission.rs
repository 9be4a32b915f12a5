//! Admission benchmark of the running operator on the real local control plane, with the real
//! rules: the webhook decides from its watch caches with 1,000 nodes and 100 NodeMaintenances
//! present.
//!
//! # Command
//!
//! ```text
//! cargo bench --bench admission
//! BENCH_SECONDS=10 cargo bench --bench admission     # measured seconds per run (default 5)
//! NMO_UPSTREAM_MANAGER=<manager> cargo bench --bench admission   # upstream's rows too
//! ```
//!
//! Prerequisite of the outside client's rows: `wrk` on the `PATH` (Debian/Ubuntu:
//! `apt-get install wrk`). Without it those rows are skipped with a note saying so.
//!
//! The operator is the release build of this package (`CARGO_BIN_EXE_node-maintenance-operator`)
//! running as the ServiceAccount of `manifests/`, leader election off, its webhook registered
//! with the API server. The harness posts AdmissionReviews to the operator's webhook port as the
//! API server would (HTTP/1.1 over TLS 1.3, keep-alive, one request at a time per connection)
//! with 4 and then 16 connections, 1 s warm-up, then `BENCH_SECONDS` measured, for:
//!
//! - **CREATE allowed**: a worker node that no NodeMaintenance targets (the same object each
//!   time, as a client retrying: one reservation, renewed);
//! - **CREATE denied (duplicate)**: a node one of the 100 NodeMaintenances targets;
//! - **CREATE control-plane (quorum)**: the cluster's only control-plane node, denied by
//!   upstream's fake etcd quorum guard (`openshift-etcd/etcd-quorum-guard`, maxUnavailable 0,
//!   which the bench creates; `docs/drain-contract.md` §9);
//! - **UPDATE (finalizer)**: oldObject without, object with the finalizer.
//!
//! Each answer is checked (`allowed` as expected); requests/s count the checked answers. The
//! same four requests are then sent by an **outside client**, as a user's API server is one: a
//! separate load-generator process, `wrk -t1 -c4 --latency` (one thread, 4 keep-alive
//! connections, HTTPS to the webhook port, a Lua script posting the AdmissionReview as
//! `application/json`), 1 s warm-up (a run of its own), then `BENCH_SECONDS` measured. wrk
//! cannot check bodies: its rows count what is not a 2xx as failed, and rely on the
//! in-process rows just before them for the answers being right. Its latencies are wrk's own
//! (write of the request to the parsed answer, µs resolution); `client CPU µs/req` is wrk's
//! CPU (user + system) per answer, or the in-process driver's thread's. The
//! p99 target is read at 4 connections (the API server's usual handful of keep-alive
//! connections to a webhook); 16 shows the same under more concurrency. `op CPU µs/req` is the
//! operator's CPU time (all threads, `/proc/<pid>/stat`, 10 ms ticks) divided by the requests
//! answered in the same time: the in-process driver's warm-up and measured time (it counts the
//! answers of both), wrk's measured run alone (its warm-up is a run of its own, not counted):
//! the figure that does not depend on what else runs on the machine.
//!
//! # The harness's own noise, and what was removed
//!
//! Client, operator and control plane share the machine's 2 cores, so whatever else runs
//! during a row delays the operator's answers. Two sources were the harness's own doing and are
//! gone:
//!
//! - **Node heartbeats.** Only the nodes the scenarios name (`bench-n-0000`, the maintained one
//!   of the duplicate row, and `bench-n-0999`, the allowed row's worker) are kwok nodes, Ready,
//!   with node leases renewed as kubelets do. The other 998 are Node objects of the same shape
//!   as kwok writes them, in the state the node-lifecycle controller leaves an unreachable node
//!   (Ready `Unknown`, `unreachable` taints), like `benches/scale.rs` uses: nothing writes them
//!   during the measurement. With all 1,000 kwok-managed, kwok renewed 100 node leases per
//!   second, which cost kube-apiserver, etcd and kwok together about 40 % of one core for the
//!   whole measurement: 4-connection p99 1.5-2.6 ms with them, 0.5-1.5 ms with kwok paused,
//!   same build, same load around. A real cluster has the same lease traffic, but on control
//!   plane machines of its own; the issue asks for the nodes to be present.
//! - **The client's threads.** The load driver (`nmo_devcluster::load`) runs every connection
//!   on one thread of its own; a multi-threaded tokio client woke its own workers for every
//!   request (about 12,700 context switches/s at 20,000 requests/s) and put two more runnable
//!   threads next to the operator's.
//!
//! # Memory
//!
//! `VmRSS` of the operator, split into `RssAnon` (heap and stacks: what caches and state cost)
//! and `RssFile` (pages of the executable, read in as code paths first run: shared and clean),
//! and its open sockets (listeners, watches, pooled connections to the API server), at: idle with the control plane's own node; with the 1,000 nodes; with the 100
//! NodeMaintenances run and settled; after the load; and for a fresh operator started with
//! everything present. A second replica started with leader election while the election Lease
//! is held by a replica that does not exist never starts its controller, but runs the
//! admission caches as every replica does: its growth from idle to 1,000 nodes and 100
//! NodeMaintenances is what the caches cost, apart from the controller's maintenance work.
//! Targets on the 2-core development machine: CREATE allowed >= 16,000 requests/s with
//! p99 <= 1 ms at 4 connections; the caches' RSS growth <= 4 MiB at 1,000 nodes. The harness
//! and the operator share the machine's cores, as do the control plane's components.
//!
//! `BENCH_PODS=5000` adds one more fresh start of a replica not leading, after that many pods
//! were created (bound to the nodes kwok does not manage, so they stay scheduled and
//! `Pending`): the memory of the webhook's pod cache (the CREATE warnings') and start-to-ready
//! with them present.
//!
//! Progress goes to stderr; the table goes to stdout and to `target/bench-admission.txt`.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use nmo_devcluster::Cluster;
use nmo_devcluster::fixtures::{bench_cluster, create_kwok_nodes, start_registered};
use nmo_devcluster::load::{LoadOptions, drive};
use nmo_devcluster::measure::{cpu_seconds, open_sockets, proc_status};
use nmo_devcluster::operator::{self, Operator};
use node_maintenance_operator::admission::WEBHOOK_PATH;
use node_maintenance_operator::api::{MaintenancePhase, NodeMaintenance};
use serde_json::json;

const OPERATOR_BIN: &str = env!("CARGO_BIN_EXE_node-maintenance-operator");
const NODES: usize = 1000;
const MAINTENANCES: usize = 100;
const MIB: f64 = 1024.0 * 1024.0;
const CONTROL_PLANE_NODE: &str = "kwok-control-plane-0";
/// Upstream's fake etcd quorum guard for plain Kubernetes (its end-to-end suite's
/// `test/manifests/fake-etcd-quorum-guard.yaml`): refuses every control-plane node.
const FAKE_QUORUM_GUARD: &str = r#"apiVersion: v1
kind: Namespace
metadata:
  name: openshift-etcd
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  namespace: openshift-etcd
  name: etcd-quorum-guard
spec:
  maxUnavailable: 0
  selector:
    matchLabels:
      app: fake-etcd-quorum-guard
"#;
/// Header of the request rows, ours and upstream's.
const ROWS_HEADER: &str = "| operator | client | request | connections | requests/s | p50 ms | p99 ms | max ms | op CPU µs/req | client CPU µs/req | failed |\n|---|---|---|---|---|---|---|---|---|---|---|";
/// Connections of the outside client's rows: the API server's usual handful.
const OUTSIDE_CONNECTIONS: usize = 4;

fn node_name(i: usize) -> String {
    format!("bench-n-{i:04}")
}

/// The nodes the scenarios name: kwok keeps them Ready with node leases.
fn kwok_managed(i: usize) -> bool {
    i == 0 || i == NODES - 1
}

/// A Node as kwok initialises it (conditions, addresses, nodeInfo, capacity), in the state the
/// node-lifecycle controller leaves a node whose kubelet stopped reporting: Ready `Unknown` and
/// the `unreachable` taints. Created so, nothing rewrites it later.
fn static_node(name: &str) -> Node {
    let cond = |t: &str| {
        json!({
            "type": t, "status": "Unknown", "reason": "NodeStatusUnknown",
            "message": "Kubelet stopped posting node status.",
            "lastHeartbeatTime": "2026-01-01T00:00:00Z",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        })
    };
    let conditions: Vec<serde_json::Value> = [
        "Ready",
        "MemoryPressure",
        "DiskPressure",
        "PIDPressure",
        "NetworkUnavailable",
    ]
    .into_iter()
    .map(cond)
    .collect();
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                "bench": "admission",
            },
        },
        "spec": {
            "taints": [
                {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute",
                 "timeAdded": "2026-01-01T00:00:00Z"},
            ],
        },
        "status": {
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": "10.0.0.2"},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "1000"},
            "capacity": {"cpu": "64", "memory": "256Gi", "pods": "1000"},
            "nodeInfo": {
                "architecture": "amd64", "bootID": "", "containerRuntimeVersion": "kwok-v0.8.0",
                "kernelVersion": "kwok-v0.8.0", "kubeProxyVersion": "kwok-v0.8.0",
                "kubeletVersion": "kwok-v0.8.0", "machineID": "", "operatingSystem": "linux",
                "osImage": "", "systemUUID": "",
            },
            "phase": "Running",
        },
    }))
    .expect("a valid Node")
}

/// The `NODES` bench nodes: [`kwok_managed`] ones through kwok, the others as [`static_node`].
async fn create_nodes(client: &kube::Client) -> Result<()> {
    let (managed, other): (Vec<usize>, Vec<usize>) = (0..NODES).partition(|i| kwok_managed(*i));
    let managed: Vec<String> = managed.into_iter().map(node_name).collect();
    create_kwok_nodes(client, &managed, &[("bench", "admission")]).await?;
    let api = Api::<Node>::all(client.clone());
    futures::stream::iter(other.into_iter().map(|i| {
        let api = api.clone();
        async move {
            match api
                .create(&PostParams::default(), &static_node(&node_name(i)))
                .await
            {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                Err(e) => Err(e),
            }
        }
    }))
    .buffer_unordered(16)
    .try_collect::<Vec<()>>()
    .await?;
    Ok(())
}

fn nm_json(name: &str, node: &str, finalizers: &[&str]) -> serde_json::Value {
    json!({
        "apiVersion": "nodemaintenance.medik8s.io/v1beta1",
        "kind": "NodeMaintenance",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "finalizers": finalizers},
        "spec": {"nodeName": node, "reason": "bench"}
    })
}

fn review(operation: &str, object: serde_json::Value, old: Option<serde_json::Value>) -> Bytes {
    let name = object["metadata"]["name"].clone();
    Bytes::from(
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "5b3d0b2a-0000-4000-8000-000000000000",
                "kind": {"group": "nodemaintenance.medik8s.io", "version": "v1beta1", "kind": "NodeMaintenance"},
                "resource": {"group": "nodemaintenance.medik8s.io", "version": "v1beta1", "resource": "nodemaintenances"},
                "name": name,
                "operation": operation,
                "userInfo": {"username": "bench"},
                "object": object,
                "oldObject": old,
                "dryRun": false
            }
        })
        .to_string(),
    )
}

struct Scenario {
    name: &'static str,
    body: Bytes,
    allowed: bool,
    /// Whether upstream's manager answers the same (`docs/compat.md §6`), so its answers are
    /// checked too.
    upstream_same: bool,
}

fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "CREATE allowed (worker)",
            body: review(
                "CREATE",
                nm_json("bench-allowed", &node_name(NODES - 1), &[]),
                None,
            ),
            allowed: true,
            upstream_same: true,
        },
        Scenario {
            name: "CREATE denied (duplicate)",
            body: review("CREATE", nm_json("bench-dup", &node_name(0), &[]), None),
            allowed: false,
            upstream_same: true,
        },
        Scenario {
            name: "CREATE control-plane (quorum)",
            body: review("CREATE", nm_json("bench-cp", CONTROL_PLANE_NODE, &[]), None),
            allowed: false,
            // Upstream judges quorum on OpenShift only.
            upstream_same: false,
        },
        Scenario {
            name: "UPDATE (finalizer)",
            body: review(
                "UPDATE",
                nm_json(
                    "bench-nm-0001",
                    &node_name(1),
                    &["foregroundDeleteNodeMaintenance"],
                ),
                Some(nm_json("bench-nm-0001", &node_name(1), &[])),
            ),
            allowed: true,
            upstream_same: true,
        },
    ]
}

fn rss(pid: u32) -> f64 {
    proc_status(pid, "VmRSS").unwrap_or(0) as f64 / MIB
}

/// The operator's memory at one moment: `VmRSS` split into its anonymous part (heap, stacks:
/// what caches and state cost) and its file-backed part (the executable's code and data pages,
/// paged in as code paths first run; shared and clean), plus its open sockets.
struct Memory {
    rss: f64,
    anon: f64,
    file: f64,
    sockets: String,
}

impl Memory {
    fn of(pid: u32) -> Self {
        let mib = |f| proc_status(pid, f).unwrap_or(0) as f64 / MIB;
        Self {
            rss: mib("VmRSS"),
            anon: mib("RssAnon"),
            file: mib("RssFile"),
            sockets: sockets(pid),
        }
    }

    fn row(&self, what: &str) -> String {
        format!(
            "| {what} | {:.1} | {:.1} | {:.1} | {} |",
            self.rss, self.anon, self.file, self.sockets
        )
    }

    fn brief(&self) -> String {
        format!(
            "RSS {:.1} MiB (anon {:.1}, file {:.1}), {} open sockets",
            self.rss, self.anon, self.file, self.sockets
        )
    }
}

/// Makes the leader-election Lease held, for an hour, by a replica that does not exist, so that
/// an operator started with `--leader-elect=true` stays a follower.
async fn hold_leader_lease(client: &kube::Client, namespace: &str) -> Result<()> {
    let now = MicroTime(jiff::Timestamp::now());
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some("135b1886.medik8s.io".into()),
            namespace: Some(namespace.into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("bench-absent-leader".into()),
            lease_duration_seconds: Some(3600),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            ..LeaseSpec::default()
        }),
    };
    Api::<Lease>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &lease)
        .await?;
    Ok(())
}

fn sockets(pid: u32) -> String {
    open_sockets(pid).map_or_else(|| "?".into(), |n| n.to_string())
}

/// The 1-minute load average, as `/proc/loadavg` prints it.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split(' ').next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

fn progress(started: Instant, msg: &str) {
    eprintln!("[{:6.1} s] {msg}", started.elapsed().as_secs_f64());
}

/// Runs every scenario against the webhook on `port` of process `pid` and appends the rows;
/// `check` says whether answers must match the expected `allowed`.
#[allow(clippy::too_many_arguments)]
async fn measure(
    who: &str,
    pid: u32,
    port: u16,
    ca_pem: &str,
    seconds: u64,
    ours: bool,
    out: &mut String,
    started: Instant,
) -> Result<()> {
    for connections in [4, 16] {
        for s in scenarios() {
            let opts = LoadOptions {
                addr: ([127, 0, 0, 1], port).into(),
                ca_pem: ca_pem.to_string(),
                path: WEBHOOK_PATH.to_string(),
                connections,
                warmup: Duration::from_secs(1),
                measure: Duration::from_secs(seconds),
            };
            let cpu_before = cpu_seconds(pid);
            let r = drive(
                &opts,
                s.body.clone(),
                (ours || s.upstream_same).then_some(s.allowed),
            )
            .await
            .map_err(anyhow::Error::msg)?;
            let cpu_us = match (cpu_before, cpu_seconds(pid)) {
                (Some(a), Some(b)) => format!("{:.1}", (b - a) * 1e6 / r.total.max(1) as f64),
                _ => "?".into(),
            };
            let row = format!(
                "| {who} | in-process | {} | {connections} | {:.0} | {:.3} | {:.3} | {:.3} | {cpu_us} | {:.1} | {} |",
                s.name,
                r.requests_per_second,
                r.p50_ms,
                r.p99_ms,
                r.max_ms,
                r.client_cpu_us_per_request,
                r.failed
            );
            progress(started, &row);
            progress(started, &format!("  load average {}", load_average()));
            if let Some(f) = &r.first_failure {
                progress(started, &format!("  first unexpected answer: {f}"));
            }
            writeln!(out, "{row}")?;
        }
    }
    // The same requests from a separate process, as the API server sends them: the in-process
    // rows above have checked the answers, wrk counts what is not a 2xx.
    let Some(wrk) = wrk_version() else {
        let note = "outside client not measured: wrk is not installed (Debian/Ubuntu: `apt-get install wrk`)";
        progress(started, note);
        writeln!(out, "\n{note}")?;
        return Ok(());
    };
    for s in scenarios() {
        let (r, op_cpu) =
            wrk_run(pid, port, &s.body, OUTSIDE_CONNECTIONS, seconds, started).await?;
        let cpu_us = match op_cpu {
            Some(cpu) => format!("{:.1}", cpu * 1e6 / r.total.max(1) as f64),
            None => "?".into(),
        };
        let row = format!(
            "| {who} | wrk | {} | {OUTSIDE_CONNECTIONS} | {:.0} | {:.3} | {:.3} | {:.3} | {cpu_us} | {:.1} | {} |",
            s.name,
            r.requests_per_second,
            r.p50_ms,
            r.p99_ms,
            r.max_ms,
            r.client_cpu_us_per_request,
            r.failed
        );
        progress(started, &row);
        progress(
            started,
            &format!("  {wrk}; load average {}", load_average()),
        );
        writeln!(out, "{row}")?;
    }
    Ok(())
}

/// wrk's version line, `None` when wrk cannot be run.
fn wrk_version() -> Option<String> {
    // `wrk -v` prints its version and usage, and exits 1.
    let out = std::process::Command::new("wrk").arg("-v").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    Some(text.lines().next().unwrap_or("wrk").trim().to_string())
}

/// The wrk script of one row: every request a POST of `body` as JSON to the webhook path, and
/// at the end one line of figures for [`parse_wrk`] (latencies in µs, duration in µs).
fn wrk_script(body: &[u8]) -> String {
    let body = String::from_utf8_lossy(body);
    assert!(!body.contains("]==]"), "the body ends the Lua long string");
    format!(
        r#"wrk.method = "POST"
wrk.path = "{WEBHOOK_PATH}"
wrk.headers["Content-Type"] = "application/json"
wrk.body = [==[{body}]==]
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("nmo-wrk requests=%d duration_us=%d non2xx=%d errors=%d p50_us=%d p99_us=%d max_us=%d\n",
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99), latency.max))
end
"#
    )
}

/// The figures of the `nmo-wrk` line [`wrk_script`] prints: answers, failures (not 2xx, or a
/// socket error or timeout), and the report's rates and latencies.
fn parse_wrk(output: &str) -> Option<nmo_devcluster::load::LoadReport> {
    let line = output.lines().find(|l| l.starts_with("nmo-wrk "))?;
    let field = |name: &str| -> Option<f64> {
        line.split(' ')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))?
            .parse()
            .ok()
    };
    let requests = field("requests")?;
    let failed = field("non2xx")? + field("errors")?;
    let ok = (requests - field("non2xx")?).max(0.0);
    Some(nmo_devcluster::load::LoadReport {
        ok: ok as u64,
        failed: failed as u64,
        requests_per_second: ok / (field("duration_us")? / 1e6),
        p50_ms: field("p50_us")? / 1e3,
        p99_ms: field("p99_us")? / 1e3,
        max_ms: field("max_us")? / 1e3,
        first_failure: None,
        total: requests as u64,
        client_cpu_us_per_request: 0.0,
    })
}

/// One outside-client row: wrk, one thread, `connections` keep-alive connections over TLS to
/// the webhook on `port`, 1 s of warm-up (a run of its own, not counted), then `seconds`
/// measured. `total` of the report counts the measured run's answers; the second value is the
/// CPU seconds of process `pid` (the operator) over that run only, read just before wrk's
/// measured run starts and after it is reaped (`None` when `/proc` could not be read). The
/// client's CPU is wrk's (user + system, all threads).
async fn wrk_run(
    pid: u32,
    port: u16,
    body: &[u8],
    connections: usize,
    seconds: u64,
    started: Instant,
) -> Result<(nmo_devcluster::load::LoadReport, Option<f64>)> {
    let dir = tempfile::tempdir()?;
    let script = dir.path().join("review.lua");
    std::fs::write(&script, wrk_script(body))?;
    let url = format!("https://127.0.0.1:{port}{WEBHOOK_PATH}");
    let run = move |secs: u64| -> Result<(String, f64)> {
        use std::io::Read as _;
        let mut child = std::process::Command::new("wrk")
            .args(["-t1", &format!("-c{connections}"), &format!("-d{secs}s")])
            .arg("-s")
            .arg(&script)
            .arg("--latency")
            .arg(&url)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .context("starting wrk")?;
        let mut text = String::new();
        child
            .stdout
            .take()
            .context("wrk's stdout")?
            .read_to_string(&mut text)?;
        // Reaped here rather than by `Child::wait`, for its CPU time.
        let mut status = 0;
        // SAFETY: an all-zero rusage is a valid value to be overwritten.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `child` is our unreaped child; both pointers are to valid, writable values.
        let reaped = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
        if reaped < 0 {
            bail!("waiting for wrk: {}", std::io::Error::last_os_error());
        }
        if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
            bail!("wrk failed (wait status {status}): {text}");
        }
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        Ok((text, secs(usage.ru_utime) + secs(usage.ru_stime)))
    };
    // The warm-up's figures are not used.
    let _ = tokio::task::spawn_blocking({
        let run = run.clone();
        move || run(1)
    })
    .await??;
    let op_before = cpu_seconds(pid);
    let (text, client_cpu) = tokio::task::spawn_blocking(move || run(seconds)).await??;
    let op_cpu = op_before.zip(cpu_seconds(pid)).map(|(a, b)| b - a);
    let mut report =
        parse_wrk(&text).with_context(|| format!("no figures in wrk's output:\n{text}"))?;
    report.client_cpu_us_per_request = client_cpu * 1e6 / report.total.max(1) as f64;
    if report.failed > 0 {
        progress(started, &format!("  wrk's report:\n{text}"));
    }
    Ok((report, op_cpu))
}

/// `BENCH_PODS`: pods to create before one more fresh start (0, the default: none).
fn pod_count() -> usize {
    std::env::var("BENCH_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Creates `n` pods bound round-robin to the nodes kwok does not manage (they stay `Pending`,
/// scheduled, so the webhook's pod cache keeps each; a container with env and resources, an
/// emptyDir and labels, as a small real pod), 16 creates in flight; then starts a fresh
/// operator and waits for its pod cache to list. Returns `n`, start to ready, its memory then
/// and its peak.
async fn fresh_with_pods(
    cluster: &Cluster,
    client: &kube::Client,
    opts: &operator::OperatorOptions,
    n: usize,
    started: Instant,
) -> Result<(usize, Duration, Memory, f64)> {
    use k8s_openapi::api::core::v1::Pod;
    let pods = Api::<Pod>::namespaced(client.clone(), "default");
    let idle: Vec<String> = (0..NODES)
        .filter(|i| !kwok_managed(*i))
        .map(node_name)
        .collect();
    futures::stream::iter(0..n)
        .map(|i| {
            let pods = pods.clone();
            let node = idle[i % idle.len()].clone();
            async move {
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("bench-pod-{i:05}"),
                                 "labels": {"app": format!("app-{}", i % 50), "tier": "web",
                                            "pod-template-hash": "5d9c8f7b6"}},
                    "spec": {
                        "nodeName": node,
                        "tolerations": [{"operator": "Exists"}],
                        "volumes": [{"name": "scratch", "emptyDir": {}}],
                        "containers": [{
                            "name": "app", "image": "registry.k8s.io/pause:3.10",
                            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]
                        }]
                    }
                }))?;
                pods.create(&PostParams::default(), &pod)
                    .await
                    .with_context(|| format!("creating pod {i}"))?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    progress(started, &format!("{n} pods created"));
    let begun = Instant::now();
    let mut op = start_registered(cluster, opts)?;
    let ready = begun.elapsed();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !op.log().contains("admission pod cache synced") {
        if Instant::now() > deadline {
            bail!("the pod cache did not list {n} pods within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pid = op.process().pid();
    let memory = Memory::of(pid);
    let hwm = proc_status(pid, "VmHWM").unwrap_or(0) as f64 / MIB;
    progress(started, &format!("with {n} pods: {}", memory.brief()));
    drop(op);
    Ok((n, ready, memory, hwm))
}

#[tokio::main]
async fn main() -> Result<()> {
    let started = Instant::now();
    let seconds: u64 = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let manifests = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/manifests"));
    let (cluster, installed) = bench_cluster(None, &manifests, OPERATOR_BIN)?;
    let client = cluster.client().await;
    let options = |name: &str| installed.options(name);
    let mut op: Operator = start_registered(&cluster, &options("operator"))?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pid = op.process().pid();
    let mem_idle = Memory::of(pid);
    progress(
        started,
        &format!("operator ready; idle {}", mem_idle.brief()),
    );
    // A second replica that never leads: the Lease is held by a replica that does not exist,
    // so its controller never starts while its admission caches (and their Node watch) run as
    // in every replica. Its growth is what the caches cost, apart from any maintenance work.
    hold_leader_lease(&client, &installed.account.namespace).await?;
    let mut follower_opts = options("operator-follower");
    follower_opts.leader_elect = true;
    let mut follower = Operator::start(&cluster, &follower_opts)?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let follower_pid = follower.process().pid();
    let follower_idle = Memory::of(follower_pid);

    create_nodes(&client).await?;
    cluster.kubectl_run(&["apply", "-f", "-"], Some(FAKE_QUORUM_GUARD))?;
    progress(started, &format!("{NODES} nodes created"));
    // The Node cache's own cost, before any maintenance work grows the heap.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mem_nodes = Memory::of(pid);
    let follower_nodes = Memory::of(follower_pid);
    progress(
        started,
        &format!(
            "with {NODES} nodes, no NodeMaintenance: {}",
            mem_nodes.brief()
        ),
    );
    let nms = Api::<NodeMaintenance>::all(client.clone());
    for i in 0..MAINTENANCES {
        let nm: NodeMaintenance =
            serde_json::from_value(nm_json(&format!("bench-nm-{i:04}"), &node_name(i), &[]))?;
        let mut nm = nm;
        nm.metadata.uid = None;
        nm.metadata.finalizers = None;
        // A node created a moment ago may still be on its way into the cache: the live lookup
        // admits it; retry only transport errors.
        let mut tries = 0;
        loop {
            match nms.create(&PostParams::default(), &nm).await {
                Ok(_) => break,
                Err(e) if tries < 5 => {
                    tries += 1;
                    progress(started, &format!("create {i} failed ({e}); retrying"));
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => bail!("creating NodeMaintenance {i}: {e}"),
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let list = nms.list(&Default::default()).await?;
        let done = list
            .items
            .iter()
            .filter(|n| {
                n.status.as_ref().and_then(|s| s.phase) == Some(MaintenancePhase::Succeeded)
            })
            .count();
        if done == MAINTENANCES {
            break;
        }
        if Instant::now() > deadline {
            bail!("only {done} of {MAINTENANCES} NodeMaintenances Succeeded after 300 s");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    progress(
        started,
        &format!("{MAINTENANCES} NodeMaintenances Succeeded"),
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mem_loaded = Memory::of(pid);
    let follower_loaded = Memory::of(follower_pid);
    if !follower.log().contains("admission caches synced") {
        bail!("the follower replica's admission caches never synced");
    }
    drop(follower);
    progress(
        started,
        &format!(
            "with {NODES} nodes and {MAINTENANCES} maintenances: {}",
            mem_loaded.brief()
        ),
    );

    let mut table = String::new();
    writeln!(
        table,
        "Admission, real rules, {NODES} nodes and {MAINTENANCES} NodeMaintenances, TLS keep-alive, {seconds} s measured per row\n"
    )?;
    writeln!(table, "{ROWS_HEADER}")?;
    let ca_pem = cluster.ca().cert_pem().to_string();
    let load_before = load_average();
    measure(
        "ours",
        pid,
        op.webhook_port,
        &ca_pem,
        seconds,
        true,
        &mut table,
        started,
    )
    .await?;
    writeln!(
        table,
        "\nload average (1 min) before / after the rows: {load_before} / {}",
        load_average()
    )?;
    let mem_after = Memory::of(pid);
    let hwm = proc_status(pid, "VmHWM").unwrap_or(0) as f64 / MIB;
    drop(op);

    let fresh_started = Instant::now();
    let mut fresh = start_registered(&cluster, &options("operator-fresh"))?;
    let fresh_ready = fresh_started.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let fresh_pid = fresh.process().pid();
    let mem_fresh = Memory::of(fresh_pid);
    let hwm_fresh = proc_status(fresh_pid, "VmHWM").unwrap_or(0) as f64 / MIB;
    drop(fresh);
    let with_pods = match pod_count() {
        0 => None,
        n => {
            // Not leading (the Lease is still held): the admission caches only, as the
            // follower rows, without the controller's work on the maintained nodes' pods.
            let mut opts = options("operator-pods");
            opts.leader_elect = true;
            Some(fresh_with_pods(&cluster, &client, &opts, n, started).await?)
        }
    };

    writeln!(table)?;
    writeln!(
        table,
        "| operator memory, MiB | VmRSS | RssAnon (heap) | RssFile (code pages) | open sockets |"
    )?;
    writeln!(table, "|---|---|---|---|---|")?;
    for (what, memory) in [
        ("idle, control-plane node only".to_string(), &mem_idle),
        (
            format!("with {NODES} nodes, no NodeMaintenance yet"),
            &mem_nodes,
        ),
        (
            format!("with {NODES} nodes and {MAINTENANCES} NodeMaintenances, settled"),
            &mem_loaded,
        ),
        ("after the load".to_string(), &mem_after),
        (
            format!("fresh start with {NODES} nodes and {MAINTENANCES} NodeMaintenances present"),
            &mem_fresh,
        ),
        (
            "replica not leading (admission caches only, no controller): idle".to_string(),
            &follower_idle,
        ),
        (format!("same, with {NODES} nodes"), &follower_nodes),
        (
            format!("same, with {NODES} nodes and {MAINTENANCES} NodeMaintenances"),
            &follower_loaded,
        ),
    ] {
        writeln!(table, "{}", memory.row(&what))?;
    }
    writeln!(
        table,
        "\nGrowth from idle (target: the caches' growth <= 4 MiB at {NODES} nodes):"
    )?;
    writeln!(
        table,
        "- the admission caches, {NODES} nodes and {MAINTENANCES} NodeMaintenances (replica not leading): VmRSS {:+.1}, RssAnon {:+.1} MiB",
        follower_loaded.rss - follower_idle.rss,
        follower_loaded.anon - follower_idle.anon
    )?;
    writeln!(
        table,
        "- the Node cache ({NODES} nodes): VmRSS {:+.1}, RssAnon {:+.1} MiB",
        mem_nodes.rss - mem_idle.rss,
        mem_nodes.anon - mem_idle.anon
    )?;
    writeln!(
        table,
        "- caches plus the controller's work for {MAINTENANCES} maintenances: VmRSS {:+.1}, RssAnon {:+.1}, RssFile {:+.1} MiB",
        mem_loaded.rss - mem_idle.rss,
        mem_loaded.anon - mem_idle.anon,
        mem_loaded.file - mem_idle.file
    )?;
    writeln!(
        table,
        "- peak (VmHWM): {hwm:.1} MiB; fresh start's peak: {hwm_fresh:.1} MiB; fresh start to ready (webhook answering): {} ms",
        fresh_ready.as_millis()
    )?;
    if let Some((n, ready, mem, hwm)) = with_pods {
        writeln!(
            table,
            "- a replica not leading, started fresh with {n} pods present as well (BENCH_PODS), once its pod cache listed: VmRSS {:.1} ({:+.1} over the replica not leading without them), RssAnon {:.1} ({:+.1}) MiB, peak {hwm:.1} MiB; start to ready {} ms",
            mem.rss,
            mem.rss - follower_loaded.rss,
            mem.anon,
            mem.anon - follower_loaded.anon,
            ready.as_millis()
        )?;
    }

    if let Some(manager) = std::env::var_os("NMO_UPSTREAM_MANAGER")
        && let Err(e) = upstream(
            &cluster,
            manager.into(),
            &ca_pem,
            seconds,
            &mut table,
            started,
        )
        .await
    {
        writeln!(table, "\nupstream manager not measured: {e:#}")?;
    }

    print!("{table}");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/target")));
    let out = target.join("bench-admission.txt");
    std::fs::write(&out, &table).with_context(|| format!("writing {}", out.display()))?;
    progress(
        started,
        &format!("done; table written to {}", out.display()),
    );
    Ok(())
}

/// Upstream's Go manager (built locally, never committed), as the admin: webhook on :9443 with the
/// serving pair at `$TMPDIR/k8s-webhook-server/serving-certs/tls.{crt,key}` (its fallback), then
/// the same scenarios. Its rules differ where `docs/compat.md §6` says so (no quorum rule off
/// OpenShift), so its answers are checked on the rows where the rules agree
/// (`Scenario::upstream_same`).
async fn upstream(
    cluster: &Cluster,
    manager: PathBuf,
    ca_pem: &str,
    seconds: u64,
    table: &mut String,
    started: Instant,
) -> Result<()> {
    let tmp = cluster.dir().join("upstream-tmp");
    let certs = tmp.join("k8s-webhook-server/serving-certs");
    std::fs::create_dir_all(&certs)?;
    let pair = cluster
        .ca()
        .issue_server(&["localhost"], &["127.0.0.1".parse()?])?;
    std::fs::write(certs.join("tls.crt"), &pair.cert_pem)?;
    std::fs::write(certs.join("tls.key"), &pair.key_pem)?;
    let ports = nmo_devcluster::free_ports(2)?;
    let mut cmd = std::process::Command::new(manager);
    cmd.args([
        format!("--kubeconfig={}", cluster.kubeconfig().display()),
        format!("--metrics-bind-address=127.0.0.1:{}", ports[0]),
        format!("--health-probe-bind-address=127.0.0.1:{}", ports[1]),
        "--leader-elect=false".into(),
    ])
    .env("TMPDIR", &tmp)
    .env("OPERATOR_NAMESPACE", "node-maintenance-operator-system");
    let mut child = cluster.spawn("upstream-manager", cmd)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    // Go answers in the request's protocol version.
    while !nmo_devcluster::http_get(("127.0.0.1", ports[1]), "/readyz")
        .is_some_and(|r| r.starts_with("HTTP/1.1 200") || r.starts_with("HTTP/1.0 200"))
    {
        if let Some(status) = child.exited() {
            bail!(
                "upstream manager exited ({status}):\n{}",
                child.log_tail(30)
            );
        }
        if Instant::now() > deadline {
            bail!(
                "upstream manager not ready after 60 s:\n{}",
                child.log_tail(30)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    operator::register_webhook(cluster, 9443)?;
    nmo_devcluster::fixtures::wait_for_webhook(cluster, Duration::from_secs(60))?;
    // Its controller takes over the maintenances first; let it settle.
    tokio::time::sleep(Duration::from_secs(10)).await;
    progress(started, "upstream manager ready");
    writeln!(table, "\n{ROWS_HEADER}")?;
    measure(
        "upstream (Go)",
        child.pid(),
        9443,
        ca_pem,
        seconds,
        false,
        table,
        started,
    )
    .await?;
    writeln!(
        table,
        "\nupstream manager VmRSS after the load: {:.1} MiB",
        rss(child.pid())
    )?;
    Ok(())
}

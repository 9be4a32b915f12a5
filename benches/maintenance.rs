//! Benchmarks of the operator binary on the real local control plane (`nmo-devcluster`): how fast
//! a NodeMaintenance drains compared with `kubectl drain`, how it scales to many nodes at once,
//! how many API requests one maintenance costs, and how much memory the operator uses.
//!
//! # Command
//!
//! ```text
//! cargo bench --bench maintenance                  # the default scenarios (about 6 min on 2 cores)
//! cargo bench --bench maintenance -- drain200 many # only these (any of drain200 many api rss bigdrain budgetheld drainrate evacuating)
//! cargo bench --bench maintenance -- bigdrain      # memory of big drains (about 10 min; not in the default set)
//! NMO_UPSTREAM_MANAGER=<manager built from upstream's source> cargo bench --bench maintenance -- bigdrain
//! cargo bench --bench maintenance -- budgetheld    # a drain held by a budget (not in the default set)
//! NMO_BUDGET_PODS=200 cargo bench --bench maintenance -- budgetheld # the same, smaller
//! NMO_UPSTREAM_MANAGER=<manager> cargo bench --bench maintenance -- budgetrelents  # a held budget lowered to allow every pod, beside a bare client
//! NMO_UPSTREAM_MANAGER=<manager> cargo bench --bench maintenance -- budgetheld
//! NMO_UPSTREAM_MANAGER=<manager> cargo bench --bench maintenance -- drainrate # a node's drain beside the floor (about 5 min)
//! NMO_RATE_PODS=200 cargo bench --bench maintenance -- drainrate             # other sizes (comma-separated)
//! NMO_RATE_TRACE=<dir> cargo bench --bench maintenance -- drainrate         # ours logs every request, copied to <dir> (no floor)
//! cargo bench --bench maintenance -- evacuating    # requests while 50 VMs migrate, beside a held budget (about 5 min)
//! NMO_EVACUATING_PODS=10 cargo bench --bench maintenance -- evacuating # the same, smaller
//! ```
//!
//! The operator is the release build of this package (`CARGO_BIN_EXE_node-maintenance-operator`),
//! running as the ServiceAccount of `manifests/` (RBAC as deployed), leader election off, with
//! its validating webhook registered; every scenario starts a fresh operator process and a fresh
//! set of kwok nodes, and removes its nodes and namespace afterwards. Progress goes to stderr;
//! the results table goes to stdout and to `target/bench-maintenance.txt`. Time figures are wall
//! clock seconds measured by this harness, polling the API every 100 ms (so ±0.1 s).
//!
//! # Figures and targets
//!
//! - **drain200**: two identical fresh nodes, 200 Running pods each (one Deployment pinned to each
//!   node by `kubernetes.io/hostname`). `ours` = from the `NodeMaintenance` create call to phase
//!   `Succeeded` on node A; `kubectl drain` = wall time of
//!   `kubectl drain B --ignore-daemonsets --delete-emptydir-data --force` (admin identity) on node
//!   B, run after A's replacement pods are all recreated (Pending) so both drains start from the
//!   same quiet state. Pods/s = 200 / time. Target: ours no slower than kubectl drain. kubectl
//!   evicts through client-go's default client-side rate limit (5 requests/s, burst 10), which
//!   the table flags when kubectl printed "client-side throttling".
//! - **many**: `1 node` = one fresh node with 20 pods, create to `Succeeded`; `20 nodes` = 20 fresh
//!   nodes x 20 pods, 20 NodeMaintenances created at once, first create to the last `Succeeded`
//!   (median and slowest single maintenance shown too). Target: 20 nodes at most 2x one node.
//!   Reference: 20 `kubectl drain`s started at once on 20 more such nodes, wall time to the last
//!   exit; it shows what the cluster itself allows, since one kwok process terminates every
//!   node's pods and one controller-manager recreates them, unlike real kubelets.
//! - **api**: the requests one isolated lifecycle (create -> `Succeeded` -> delete -> gone) of a
//!   20-pod node makes the operator send, by verb and resource. Source: the operator's own HTTP
//!   client trace (it runs with `--log-format=json` and `RUST_LOG=info,kube_client=debug`, and
//!   kube's client logs one `requesting` event per HTTP request, retries included), counted from
//!   the create to 2 s after the object is gone. Cross-check from the server side: the
//!   kube-apiserver's `apiserver_flowcontrol_dispatched_requests_total` for FlowSchema
//!   `service-accounts`, which in this cluster only the operator uses (every other component is
//!   `system:masters`, i.e. FlowSchema `exempt`). `apiserver_request_total` has no user label, so
//!   it cannot separate the operator from the controller-manager, scheduler and kwok.
//! - **rss**: `VmRSS` of the operator (from `/proc/<pid>/status`) idle (3 s after ready, nothing
//!   to do) and the highest value sampled every 50 ms during a 200-pod drain, plus `VmHWM` (the
//!   process's lifetime peak) after it, in a cluster of 10 worker nodes / 500 pods and then of 50
//!   nodes / 2,000 pods (pods spread by Deployments; a fresh operator per size). Target: at most
//!   30 MiB, and flat as the cluster grows. (The kernel's RSS counters are batched per thread,
//!   so a sample can exceed `VmHWM` by a few hundred KiB.) Start-up: spawn of the process to
//!   `/readyz` answering 200 (the webhook serves and the NodeMaintenance and Node watches have
//!   synced), polled every 2 ms, median of 5 starts. Target 200 ms excluding API latency; the API
//!   share is estimated as the time a fresh client (same ServiceAccount kubeconfig) takes to LIST
//!   NodeMaintenances and Nodes in parallel, and `own start-up` = start-up minus that floor.
//! - **bigdrain** (memory bounded by what the drain keeps, `docs/drain-contract.md` §5; only when named): peak `VmRSS` of the operator,
//!   sampled every 50 ms, (a) while draining one node of 3,000 bare pods of about 11 KB of JSON
//!   each (a padding annotation and 20 environment variables; the figure prints the measured
//!   size of one pod as the API server returns it), and (b) while 20 nodes of 110 such pods drain
//!   at once; create of the NodeMaintenance(s) to the last `Succeeded`. Each input gets a fresh
//!   operator process, started once its nodes and pods exist, so one input's memory (what its
//!   drain allocated and the allocator kept) is not counted in the next, and `before` is the
//!   fresh process's `VmRSS` with the input in the cluster. Target: both under the 64 MiB limit
//!   `manifests/` ships. With `NMO_UPSTREAM_MANAGER`, upstream's Go manager (run as the admin, as
//!   in `benches/admission.rs`, a fresh process per input as well) drains the same inputs
//!   afterwards, on fresh nodes, with our operator stopped.
//! - **budgetrelents** (a budget that comes to allow every pod is drained at the API server's
//!   pace, `docs/drain-contract.md` §1; only when named): one fresh node with N bare pods (N as
//!   `budgetheld`) under one budget of `minAvailable: N`; the NodeMaintenance is created, held,
//!   and once the budget has refused its probe the budget is patched to `minAvailable: 0`; the
//!   figure is the patch to `Succeeded`, and the eviction requests while held. Beside it the
//!   floor: with no controller running, a bare client lists N such pods on another node under a
//!   budget already at `minAvailable: 0` and evicts them all (1 and 8 in flight, each on fresh
//!   pods), to no pod left. Target: at most 1.3x the best floor. With `NMO_UPSTREAM_MANAGER`,
//!   upstream's manager runs the same held input afterwards on a fresh node, its rows beside ours.
//! - **budgetheld** (a budget that allows no disruption is asked through one pod per 5 s retry,
//!   `docs/drain-contract.md` §1; only when named): one fresh node with N bare pods (N = 2,000,
//!   `NMO_BUDGET_PODS` overrides), all selected by one PodDisruptionBudget with `minAvailable: N`,
//!   whose status counts all N healthy with `disruptionsAllowed: 0` before the NodeMaintenance
//!   is created. Counted from the API server's audit log (a run that names `budgetheld` starts
//!   the cluster with [`BUDGET_AUDIT_POLICY`]: evictions only, one `ResponseComplete` event
//!   each): the eviction requests for those pods received in the 90 s after the first one, as
//!   requests/s (target: at most 1/s on average; upstream's drain, kubectl's library, asks every
//!   pod every 5 s, N/5 per second). Then the budget is deleted and the figures are (a) delete
//!   to the first accepted eviction (an audit event with a 2xx code, by its completion time;
//!   target at most 5 s) and (b) delete to phase `Succeeded` (polled every 100 ms; target at
//!   most the reference + 5 s). Reference: an unblocked drain of N such pods on another fresh
//!   node, no budget, create to `Succeeded`. Each input (held, unblocked) gets a fresh operator
//!   process and its own node and namespace. With `NMO_UPSTREAM_MANAGER`, upstream's manager
//!   runs the same two inputs afterwards, as in `bigdrain`.
//! - **drainrate** (a node's drain at the API server's pace; only when named): for a node of 200
//!   and one of 3,000 bare pods (`NMO_RATE_PODS` for other sizes), each pod with the default
//!   grace period of 30 s, so an eviction leaves it terminating until kwok deletes it as a
//!   kubelet would. First the **floor**, with no controller running: a bare client (the
//!   operator's ServiceAccount and client stack, no logic, no retries) lists the node's pods
//!   once and evicts them all with 32, 128 and then 512 requests in flight, each on a fresh
//!   node of as many pods, and
//!   the best time from the list to no pod left (polled every 100 ms) is the floor. Then ours
//!   and (with `NMO_UPSTREAM_MANAGER`) upstream's, each a fresh process on a fresh node: create
//!   of the NodeMaintenance to phase `Succeeded` (polled every 100 ms). Nodes of up to 500 pods
//!   run each figure 3 times and show the median (the floor: the best concurrency's median). Each figure also shows,
//!   over its own time, the CPU of the control plane's processes (etcd, kube-apiserver,
//!   controller-manager, scheduler, kwok) and of the controller in cores, and the API server's
//!   requests by verb and resource (`apiserver_request_total` before and after, every client's:
//!   kwok's pod deletions and the harness's polling included). Targets: ours within 1.3x the
//!   floor and at most half of upstream's time (where the floor allows it).
//! - **evacuating** (the relaxed pace of a drain whose pods are migrating, `docs/drain-contract.md`
//!   §4a; only when named, and last, since it leaves KubeVirt's CRDs installed): the operator's
//!   requests to the API server while a node's pods migrate, beside those while a node's pods are
//!   held by a budget. KubeVirt is stood in for by `nmo_devcluster::kubevirt` (its CRDs, the
//!   operator's grant of `manifests/overlays/kubevirt`, and the stand-in answering evictions as
//!   virt-api does and playing the migration controller, each migration taking
//!   [`EVACUATION_TIME`]), as in `tests/evacuation.rs`. Node A: N launcher pods of migratable
//!   VMIs (N = 50, `NMO_EVACUATING_PODS` overrides); node B: N bare pods under one
//!   PodDisruptionBudget with `minAvailable: N` (as `budgetheld`). Each node gets a fresh
//!   operator (started after KubeVirt is installed, so both run the migration watch) and its own
//!   namespace. Counted from the API server's audit log (a run that names `evacuating` records
//!   every request of group `system:serviceaccounts`, which only the operator is in, and every
//!   eviction: `nmo_devcluster::audit::requests_policy`): the operator's requests received in
//!   the [`EVACUATING_WINDOW`] from its first eviction request, by verb and resource, watches
//!   counted apart (a watch is a long-running request, recorded when it ends); no launcher pod
//!   may leave and no held pod be evicted inside the window. Figures: requests/s of each node
//!   and their ratio (migrating / held; target at most 2: the evacuation's relaxed interval
//!   holds).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use nmo_devcluster::audit::{AuditCursor, AuditEvent, RESPONSE_COMPLETE, requests_policy};
use nmo_devcluster::fixtures::{self, Installed};
use nmo_devcluster::kubevirt::{self, Standin};
use nmo_devcluster::measure::{CONTROL_PLANE, cpu_seconds};
use nmo_devcluster::operator::{Operator, ServiceAccountRef};
use nmo_devcluster::{Cluster, free_ports, http_get};
use node_maintenance_operator::api::{MaintenancePhase, NodeMaintenance};
use serde_json::json;

/// Scenarios in the order they run.
const SCENARIOS: [&str; 9] = [
    "drain200",
    "many",
    "api",
    "rss",
    "bigdrain",
    "budgetheld",
    "budgetrelents",
    "drainrate",
    "evacuating",
];
/// The scenarios run when none is named (`bigdrain` takes longer than all of them; `budgetheld`
/// needs the audit log, which the default run does not pay for).
const DEFAULT_SCENARIOS: [&str; 4] = ["drain200", "many", "api", "rss"];
const OPERATOR_BIN: &str = env!("CARGO_BIN_EXE_node-maintenance-operator");
/// Label every bench node carries, `bench-group=<group>`, for spreading Deployments.
const GROUP_LABEL: &str = "bench-group";
const LIMIT: Duration = Duration::from_secs(300);
const MIB: f64 = 1024.0 * 1024.0;
/// The audit policy of a run that names `budgetheld`: pod evictions by anyone, at level Metadata,
/// once each (at `ResponseComplete`, with the response code). Narrower than
/// `nmo_devcluster::audit::EVICTIONS_POLICY` (no `RequestReceived` twin, no bindings), so the
/// other scenarios of the same run pay one audit write per eviction and nothing more. The log
/// is never rotated (the cursor reads one growing file); upstream's held window writes about
/// N/5 x 90 events (36,000 for 2,000 pods, some tens of MB), in the cluster's temporary directory.
const BUDGET_AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
  resources:
  - group: ""
    resources: ["pods/eviction"]
- level: None
"#;
/// The window of `budgetheld` in which the held budget's evictions are counted.
const HELD_WINDOW: Duration = Duration::from_secs(90);
/// The window of `evacuating` in which the operator's requests are counted, from its first
/// eviction request on the node.
const EVACUATING_WINDOW: Duration = Duration::from_secs(60);
/// How long each of `evacuating`'s migrations takes (a Go duration): longer than the window
/// plus the time to ask every pod, so every VM migrates for the whole window.
const EVACUATION_TIME: &str = "90s";

struct Row {
    scenario: &'static str,
    figure: String,
    value: String,
    target: String,
}

/// What `budgetheld` measures on the held node.
struct Held {
    /// Eviction requests for the held pods received in [`HELD_WINDOW`] from the first.
    asked: usize,
    /// How many different pods those requests named.
    pods_asked: usize,
    /// Seconds from the NodeMaintenance's create to the first eviction request.
    first_after_create: f64,
    /// Seconds from the budget's deletion to the first accepted eviction (its completion).
    first_accepted: f64,
    /// Seconds from the budget's deletion to phase `Succeeded`.
    succeeded: f64,
}

/// The operator's requests in `evacuating`'s window on one node ([`Bench::requests_in_window`]).
struct Requests {
    /// Requests received in the window, watches excluded.
    count: usize,
    /// Watches received in the window (recorded when they ended, by the end of the reading).
    watches: usize,
    /// `verb resource[/subresource]` -> requests, watches excluded.
    by_kind: BTreeMap<String, usize>,
}

impl Requests {
    fn per_second(&self) -> f64 {
        self.count as f64 / EVACUATING_WINDOW.as_secs_f64()
    }

    fn breakdown(&self) -> String {
        self.by_kind
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

struct Bench {
    // Declared first so it is dropped (stopped) before the cluster.
    operator: Option<Operator>,
    operator_name: String,
    cluster: Cluster,
    account: ServiceAccountRef,
    sa_kubeconfig: PathBuf,
    client: kube::Client,
    rows: Vec<Row>,
    notes: Vec<String>,
    started: Instant,
}

#[tokio::main]
async fn main() -> Result<()> {
    let mut chosen: Vec<&str> = Vec::new();
    for arg in std::env::args().skip(1).filter(|a| !a.starts_with("--")) {
        let Some(s) = SCENARIOS.iter().find(|s| **s == arg) else {
            bail!("unknown scenario {arg:?}; choose from {SCENARIOS:?}");
        };
        chosen.push(s);
    }
    if chosen.is_empty() {
        chosen = DEFAULT_SCENARIOS.to_vec();
    }
    // `requests_policy` records every eviction as well, at the stage `budgetheld` reads.
    let audit = if chosen.contains(&"evacuating") {
        Some(requests_policy(&["system:serviceaccounts"]))
    } else {
        (chosen.contains(&"budgetheld") || chosen.contains(&"budgetrelents"))
            .then(|| BUDGET_AUDIT_POLICY.to_string())
    };
    let mut bench = Bench::new(audit).await?;
    for s in SCENARIOS.iter().filter(|s| chosen.contains(s)) {
        bench.progress(&format!("scenario {s}"));
        match *s {
            "drain200" => bench.drain200().await?,
            "many" => bench.many().await?,
            "api" => bench.api().await?,
            "bigdrain" => bench.bigdrain().await?,
            "budgetheld" => bench.budgetheld().await?,
            "budgetrelents" => bench.budgetrelents().await?,
            "drainrate" => bench.drainrate().await?,
            "evacuating" => bench.evacuating().await?,
            _ => bench.rss().await?,
        }
    }
    let report = bench.report();
    print!("{report}");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/target")));
    let out = target.join("bench-maintenance.txt");
    std::fs::write(&out, &report).with_context(|| format!("writing {}", out.display()))?;
    bench.progress(&format!("done; table written to {}", out.display()));
    Ok(())
}

impl Bench {
    async fn new(audit_policy: Option<String>) -> Result<Bench> {
        let started = Instant::now();
        let manifests = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/manifests"));
        let (cluster, installed) = fixtures::bench_cluster(audit_policy, &manifests, OPERATOR_BIN)?;
        let Installed {
            account,
            kubeconfig: sa_kubeconfig,
            ..
        } = installed;
        let client = cluster.client().await;
        Ok(Bench {
            operator: None,
            operator_name: String::new(),
            cluster,
            account,
            sa_kubeconfig,
            client,
            rows: Vec::new(),
            notes: Vec::new(),
            started,
        })
    }

    fn progress(&self, msg: &str) {
        eprintln!("[{:6.1} s] {msg}", self.started.elapsed().as_secs_f64());
    }

    fn row(&mut self, scenario: &'static str, figure: &str, value: String, target: &str) {
        self.progress(&format!("{scenario}: {figure} = {value}"));
        self.rows.push(Row {
            scenario,
            figure: figure.into(),
            value,
            target: target.into(),
        });
    }

    /// Stops the running operator (only one controller may act at a time), starts a fresh one
    /// named `name` with `env` and `args`, registers its webhook and waits until it answers.
    fn restart_operator(&mut self, name: &str, env: &[(&str, &str)], args: &[&str]) -> Result<()> {
        self.operator = None;
        let mut opts = Installed {
            account: self.account.clone(),
            kubeconfig: self.sa_kubeconfig.clone(),
            binary: OPERATOR_BIN.into(),
        }
        .options(name);
        opts.env
            .extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        opts.extra_args = args.iter().map(|a| a.to_string()).collect();
        self.operator = Some(fixtures::start_registered(&self.cluster, &opts)?);
        self.operator_name = name.into();
        Ok(())
    }

    fn operator_pid(&mut self) -> u32 {
        self.operator
            .as_mut()
            .expect("operator running")
            .process()
            .pid()
    }

    /// Creates kwok nodes `<group>-<i>` for `i` in `range`, labelled `bench-group=<group>`, and
    /// waits until they are Ready without taints.
    async fn add_nodes(&self, group: &str, range: std::ops::Range<usize>) -> Result<Vec<String>> {
        let names: Vec<String> = range.map(|i| format!("{group}-{i}")).collect();
        for n in &names {
            self.cluster.create_node(n, false)?;
        }
        let mut args = vec!["label", "node", "--overwrite"];
        args.extend(names.iter().map(String::as_str));
        let label = format!("{GROUP_LABEL}={group}");
        args.push(&label);
        self.cluster.kubectl_run(&args, None)?;
        let nodes = Api::<Node>::all(self.client.clone());
        let lp = ListParams::default().labels(&label);
        self.wait(
            &format!("{} nodes of {group} Ready", names.len()),
            || async {
                let list = nodes.list(&lp).await?;
                let ready = list
                    .items
                    .iter()
                    .filter(|n| names.contains(n.metadata.name.as_ref().unwrap()))
                    .filter(|n| {
                        let s = n.spec.as_ref();
                        let st = n.status.as_ref().and_then(|s| s.conditions.as_ref());
                        s.and_then(|s| s.taints.as_ref()).is_none_or(Vec::is_empty)
                            && st.is_some_and(|c| {
                                c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                            })
                    })
                    .count();
                Ok((ready == names.len())
                    .then_some(())
                    .ok_or(format!("{ready} ready")))
            },
        )
        .await?;
        Ok(names)
    }

    async fn namespace(&self, name: &str) -> Result<()> {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await?;
        Ok(())
    }

    /// A Deployment `name` of `replicas` pause pods (label `app=<name>`) restricted to the nodes
    /// with label `key=value`.
    async fn deployment(
        &self,
        ns: &str,
        name: &str,
        replicas: i32,
        key: &str,
        value: &str,
    ) -> Result<()> {
        let d: Deployment = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "nodeSelector": {key: value},
                        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]
                    }
                }
            }
        }))?;
        Api::<Deployment>::namespaced(self.client.clone(), ns)
            .create(&PostParams::default(), &d)
            .await?;
        Ok(())
    }

    /// Waits until namespace `ns` has `n` Running pods not being deleted.
    async fn wait_running(&self, ns: &str, n: usize) -> Result<()> {
        self.wait_pods(ns, n, Some("Running")).await
    }

    /// Waits until namespace `ns` has `n` pods not being deleted, in `phase` when given. After a
    /// drain, waiting for the full count lets the controller-manager finish creating the
    /// replacements (at its 20 requests/s) so the next measurement starts from a quiet cluster.
    async fn wait_pods(&self, ns: &str, n: usize, phase: Option<&str>) -> Result<()> {
        let pods = Api::<Pod>::namespaced(self.client.clone(), ns);
        self.wait(&format!("{n} pods {phase:?} in {ns}"), || async {
            let count = pods
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .filter(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && phase.is_none_or(|ph| {
                            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some(ph)
                        })
                })
                .count();
            Ok((count == n).then_some(()).ok_or(format!("{count} pods")))
        })
        .await
    }

    /// Runs `kubectl drain <node> --ignore-daemonsets --delete-emptydir-data --force` for every
    /// node at once (admin identity) and returns the wall time until the last one exits, in
    /// seconds, and whether kubectl reported client-side throttling.
    fn kubectl_drains(&self, nodes: &[String]) -> Result<(f64, bool)> {
        let t0 = Instant::now();
        let children = nodes
            .iter()
            .map(|n| {
                self.cluster
                    .kubectl()
                    .args(["drain", n, "--ignore-daemonsets", "--delete-emptydir-data"])
                    .args(["--force", "--timeout=300s"])
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut throttled = false;
        for child in children {
            let out = child.wait_with_output()?;
            let stderr = String::from_utf8_lossy(&out.stderr);
            ensure!(out.status.success(), "kubectl drain failed: {stderr}");
            throttled |= stderr.contains("client-side throttling");
        }
        Ok((t0.elapsed().as_secs_f64(), throttled))
    }

    /// Polls `check` every 500 ms until `Ok(Ok(v))`; fails after [`LIMIT`] with the last
    /// `Ok(Err(seen))`, printing it to stderr every 10 s meanwhile.
    async fn wait<T, F, Fut>(&self, what: &str, mut check: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Result<T, String>, kube::Error>>,
    {
        let start = Instant::now();
        let mut last_print = start;
        loop {
            let seen = match check().await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(seen)) => seen,
                Err(e) => e.to_string(),
            };
            ensure!(
                start.elapsed() < LIMIT,
                "timed out waiting for {what}; last seen: {seen}"
            );
            if last_print.elapsed() > Duration::from_secs(10) {
                self.progress(&format!("waiting for {what}: {seen}"));
                last_print = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    async fn create_nm(&self, node: &str) -> Result<()> {
        let nm: NodeMaintenance = serde_json::from_value(json!({
            "apiVersion": "nodemaintenance.medik8s.io/v1beta1",
            "kind": "NodeMaintenance",
            "metadata": {"name": format!("nm-{node}")},
            "spec": {"nodeName": node, "reason": "bench"}
        }))?;
        Api::<NodeMaintenance>::all(self.client.clone())
            .create(&PostParams::default(), &nm)
            .await
            .with_context(|| format!("creating the NodeMaintenance for {node}"))?;
        Ok(())
    }

    /// Creates one NodeMaintenance per node at once and returns, per node, the time from just
    /// before the creates to phase `Succeeded` (polled every 100 ms).
    async fn maintain(&self, nodes: &[String]) -> Result<Vec<f64>> {
        let t0 = Instant::now();
        futures::future::try_join_all(nodes.iter().map(|n| self.create_nm(n))).await?;
        let api = Api::<NodeMaintenance>::all(self.client.clone());
        let mut done: BTreeMap<String, f64> = BTreeMap::new();
        let mut last_print = Instant::now();
        while done.len() < nodes.len() {
            for nm in api.list(&ListParams::default()).await?.items {
                let status = nm.status.as_ref();
                let node = &nm.spec.node_name;
                if nodes.contains(node)
                    && status.and_then(|s| s.phase) == Some(MaintenancePhase::Succeeded)
                {
                    done.entry(node.clone())
                        .or_insert_with(|| t0.elapsed().as_secs_f64());
                } else if nodes.contains(node) && last_print.elapsed() > Duration::from_secs(10) {
                    last_print = Instant::now();
                    let s = status.cloned().unwrap_or_default();
                    self.progress(&format!(
                        "{node}: phase {:?}, progress {:?}, pending {}, lastError {:?}",
                        s.phase,
                        s.drain_progress,
                        s.pending_pods.map_or(0, |p| p.len()),
                        s.last_error
                    ));
                }
            }
            ensure!(
                t0.elapsed() < LIMIT,
                "maintenances not Succeeded after {LIMIT:?}: done {done:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(nodes.iter().map(|n| done[n]).collect())
    }

    /// Deletes the NodeMaintenances of `nodes` and waits until they are gone (node restored).
    async fn end_maintenance(&self, nodes: &[String]) -> Result<()> {
        let api = Api::<NodeMaintenance>::all(self.client.clone());
        for n in nodes {
            api.delete(&format!("nm-{n}"), &DeleteParams::default())
                .await?;
        }
        self.wait("NodeMaintenances gone", || async {
            let left = api.list(&ListParams::default()).await?.items.len();
            Ok((left == 0).then_some(()).ok_or(format!("{left} left")))
        })
        .await
    }

    /// Removes a scenario's namespace and nodes. Pods are force-deleted (grace 0) because the
    /// controller-manager would delete thousands at its 20 requests/s and load the next scenario.
    async fn purge(&self, ns: &str, nodes: &[String]) -> Result<()> {
        Api::<Namespace>::all(self.client.clone())
            .delete(ns, &DeleteParams::default())
            .await?;
        let pods = Api::<Pod>::namespaced(self.client.clone(), ns);
        self.wait(&format!("pods of {ns} deleted"), || async {
            pods.delete_collection(
                &DeleteParams::default().grace_period(0),
                &ListParams::default(),
            )
            .await?;
            let left = pods.list(&ListParams::default()).await?.items.len();
            Ok((left == 0).then_some(()).ok_or(format!("{left} left")))
        })
        .await?;
        let api = Api::<Node>::all(self.client.clone());
        for n in nodes {
            api.delete(n, &DeleteParams::default()).await?;
        }
        Ok(())
    }

    async fn drain200(&mut self) -> Result<()> {
        const S: &str = "drain200";
        self.restart_operator("op-drain200", &[], &[])?;
        let nodes = self.add_nodes("d200", 0..2).await?;
        let (a, b) = (&nodes[0], &nodes[1]);
        self.namespace(S).await?;
        self.deployment(S, "a", 200, "kubernetes.io/hostname", a)
            .await?;
        self.deployment(S, "b", 200, "kubernetes.io/hostname", b)
            .await?;
        self.wait_running(S, 400).await?;

        self.progress("NodeMaintenance on node A");
        let ours = self.maintain(std::slice::from_ref(a)).await?[0];
        // A's replacements stay Pending (pinned to a cordoned node).
        self.wait_pods(S, 400, None).await?;
        self.progress("kubectl drain on node B");
        let (theirs, throttled) = self.kubectl_drains(std::slice::from_ref(b))?;

        self.row(
            S,
            "ours: create -> Succeeded",
            format!("{ours:.2} s ({:.0} pods/s)", 200.0 / ours),
            "<= kubectl drain",
        );
        self.row(
            S,
            "kubectl drain",
            format!(
                "{theirs:.2} s ({:.0} pods/s){}",
                200.0 / theirs,
                if throttled {
                    "; kubectl reported client-side throttling"
                } else {
                    ""
                }
            ),
            "",
        );
        self.row(
            S,
            "ours / kubectl",
            format!("{:.2}x", ours / theirs),
            "<= 1.00x",
        );
        self.end_maintenance(std::slice::from_ref(a)).await?;
        self.purge(S, &nodes).await
    }

    async fn many(&mut self) -> Result<()> {
        const S: &str = "many";
        self.restart_operator("op-many", &[], &[])?;
        self.namespace(S).await?;
        let one = self.add_nodes("one", 0..1).await?;
        self.deployment(S, "one", 20, "kubernetes.io/hostname", &one[0])
            .await?;
        let nodes = self.add_nodes("many", 0..20).await?;
        for n in &nodes {
            self.deployment(S, n, 20, "kubernetes.io/hostname", n)
                .await?;
        }
        // The same load for 20 kubectl drains at once: a reference for what the cluster itself
        // (kwok terminating 400 pods, the controller-manager recreating them) allows.
        let reference = self.add_nodes("ref", 0..20).await?;
        for n in &reference {
            self.deployment(S, n, 20, "kubernetes.io/hostname", n)
                .await?;
        }
        self.wait_running(S, 820).await?;

        self.progress("one NodeMaintenance, 20 pods");
        let single = self.maintain(&one).await?[0];
        self.wait_pods(S, 820, None).await?;
        self.progress("20 NodeMaintenances at once, 20 pods each");
        let mut each = self.maintain(&nodes).await?;
        each.sort_by(f64::total_cmp);
        let total = each[each.len() - 1];
        self.wait_pods(S, 820, None).await?;
        self.progress("20 kubectl drains at once, 20 pods each");
        let (kubectl, _) = self.kubectl_drains(&reference)?;
        self.row(S, "1 node x 20 pods", format!("{single:.2} s"), "");
        self.row(
            S,
            "20 nodes x 20 pods at once",
            format!("{total:.2} s (median single {:.2} s)", each[each.len() / 2]),
            "<= 2x 1 node",
        );
        self.row(
            S,
            "20 nodes / 1 node",
            format!("{:.2}x", total / single),
            "<= 2.00x",
        );
        self.row(
            S,
            "reference: 20 kubectl drains at once",
            format!("{kubectl:.2} s"),
            "",
        );
        let mut all = one.clone();
        all.extend(nodes.iter().cloned());
        self.end_maintenance(&all).await?;
        all.extend(reference);
        self.purge(S, &all).await
    }

    async fn api(&mut self) -> Result<()> {
        const S: &str = "api";
        self.restart_operator(
            "op-api",
            &[("RUST_LOG", "info,kube_client=debug")],
            &["--log-format=json"],
        )?;
        let nodes = self.add_nodes("api", 0..1).await?;
        self.namespace(S).await?;
        self.deployment(S, "w", 20, "kubernetes.io/hostname", &nodes[0])
            .await?;
        self.wait_running(S, 20).await?;
        tokio::time::sleep(Duration::from_secs(2)).await;

        let log = self.cluster.dir().join("op-api.log");
        let offset = std::fs::metadata(&log)?.len() as usize;
        let apf_before = self.apf_dispatched("service-accounts")?;
        self.maintain(&nodes).await?;
        self.end_maintenance(&nodes).await?;
        // Requests that follow the last observable change (the final status write, events).
        tokio::time::sleep(Duration::from_secs(2)).await;
        let apf = self.apf_dispatched("service-accounts")? - apf_before;
        let text = std::fs::read_to_string(&log)?;
        let mut table: BTreeMap<(String, String), u64> = BTreeMap::new();
        for line in text[offset..].lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if v["message"] != "requesting" {
                continue;
            }
            let span = &v["span"];
            let (Some(method), Some(url)) =
                (span["http.method"].as_str(), span["http.url"].as_str())
            else {
                continue;
            };
            *table.entry(classify(method, url)).or_default() += 1;
        }
        let total: u64 = table.values().sum();
        ensure!(
            total > 0,
            "no request events in {}; is kube_client debug logging on?",
            log.display()
        );
        self.row(
            S,
            "requests / maintenance (client trace)",
            total.to_string(),
            "",
        );
        self.row(
            S,
            "dispatched, FlowSchema service-accounts (apiserver)",
            format!("{apf:.0}"),
            "",
        );
        let mut note = String::from(
            "API requests of one 20-pod maintenance lifecycle, by verb and resource (client trace):\n",
        );
        for ((verb, resource), n) in &table {
            let _ = writeln!(note, "  {verb:<18} {resource:<28} {n:>5}");
        }
        self.notes.push(note);
        self.purge(S, &nodes).await
    }

    /// Sum of `apiserver_flowcontrol_dispatched_requests_total` for one FlowSchema.
    fn apf_dispatched(&self, flow_schema: &str) -> Result<f64> {
        let metrics = self
            .cluster
            .kubectl_run(&["get", "--raw", "/metrics"], None)?;
        let needle = format!("flow_schema=\"{flow_schema}\"");
        Ok(metrics
            .lines()
            .filter(|l| {
                l.starts_with("apiserver_flowcontrol_dispatched_requests_total{")
                    && l.contains(&needle)
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum())
    }

    async fn rss(&mut self) -> Result<()> {
        const S: &str = "rss";
        self.namespace(S).await?;
        let mut all_nodes = Vec::new();
        // (drain node group, spread nodes to add, spread pods to add): 10 nodes / 500 pods,
        // then 50 nodes / 2,000 pods.
        for (size, drain_group, spread, spread_pods) in
            [(10, "rss-d10", 0..9, 300), (50, "rss-d50", 9..48, 1300)]
        {
            let drain = self.add_nodes(drain_group, 0..1).await?;
            let more = self.add_nodes("rss-s", spread).await?;
            all_nodes.extend(drain.iter().cloned());
            all_nodes.extend(more);
            self.deployment(S, drain_group, 200, "kubernetes.io/hostname", &drain[0])
                .await?;
            self.deployment(
                S,
                &format!("spread{size}"),
                spread_pods,
                GROUP_LABEL,
                "rss-s",
            )
            .await?;
            let pods = if size == 10 { 500 } else { 2000 };
            self.wait_running(S, pods).await?;
            let label = format!("{size} nodes / {pods} pods");

            self.restart_operator(&format!("op-rss-{size}"), &[], &[])?;
            self.startup(&label).await?;
            tokio::time::sleep(Duration::from_secs(3)).await;
            let pid = self.operator_pid();
            let idle = proc_status(pid, "VmRSS")?;
            let stop = Arc::new(AtomicBool::new(false));
            let sampler = {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut peak = 0;
                    while !stop.load(Ordering::Relaxed) {
                        peak = peak.max(proc_status(pid, "VmRSS").unwrap_or(0));
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    peak
                })
            };
            let drain_s = self.maintain(&drain).await?[0];
            stop.store(true, Ordering::Relaxed);
            let peak = sampler.join().expect("sampler thread");
            let hwm = proc_status(pid, "VmHWM")?;
            let mib = |b: u64| format!("{:.1} MiB", b as f64 / MIB);
            self.row(
                S,
                &format!("idle RSS, {label}"),
                mib(idle),
                "<= 30 MiB, flat",
            );
            self.row(
                S,
                &format!("peak RSS in 200-pod drain, {label}"),
                format!("{} (VmHWM {}; drain {drain_s:.1} s)", mib(peak), mib(hwm)),
                "<= 30 MiB, flat",
            );
            // Restores the drained node: its Pending replacements return to it, so the cluster
            // keeps its pod count for the next size.
            self.end_maintenance(&drain).await?;
        }
        self.purge(S, &all_nodes).await
    }

    /// Creates `per_node` bare pods of about 11 KB of JSON on each of `nodes` in `ns` (32 creates
    /// in flight), waits until they run, and returns the JSON size of one as the API server
    /// returns it.
    async fn big_pods(&self, ns: &str, nodes: &[String], per_node: usize) -> Result<usize> {
        use futures::StreamExt as _;
        let pods = Api::<Pod>::namespaced(self.client.clone(), ns);
        let padding = "x".repeat(6500);
        let env: Vec<serde_json::Value> = (0..20)
            .map(|i| json!({"name": format!("BENCH_SETTING_{i:02}"), "value": format!("value-of-setting-{i:02}-{}", "v".repeat(40))}))
            .collect();
        let specs: Vec<(String, String)> = nodes
            .iter()
            .flat_map(|n| (0..per_node).map(move |i| (n.clone(), format!("{n}-p{i:04}"))))
            .collect();
        let total = specs.len();
        self.progress(&format!("creating {total} pods of about 11 KB"));
        let results: Vec<Result<(), kube::Error>> = futures::stream::iter(specs)
            .map(|(node, name)| {
                let pods = pods.clone();
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {
                        "name": name,
                        "labels": {"app": "bigdrain", "bench-node": node},
                        "annotations": {"bench.medik8s.io/padding": padding},
                    },
                    "spec": {
                        "nodeName": node,
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10", "env": env}]
                    }
                }))
                .expect("pod JSON");
                async move { pods.create(&PostParams::default(), &pod).await.map(|_| ()) }
            })
            .buffer_unordered(32)
            .collect()
            .await;
        for r in results {
            r?;
        }
        self.wait_running(ns, total).await?;
        let one = pods.list(&ListParams::default().limit(1)).await?;
        Ok(serde_json::to_vec(&one.items[0])?.len())
    }

    /// Peak `VmRSS` of process `pid` while `work` runs, sampled every 50 ms.
    async fn peak_rss_during<T>(
        pid: u32,
        work: impl Future<Output = Result<T>>,
    ) -> Result<(T, u64)> {
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut peak = 0;
                while !stop.load(Ordering::Relaxed) {
                    peak = peak.max(proc_status(pid, "VmRSS").unwrap_or(0));
                    std::thread::sleep(Duration::from_millis(50));
                }
                peak
            })
        };
        let out = work.await;
        stop.store(true, Ordering::Relaxed);
        let peak = sampler.join().expect("sampler thread");
        Ok((out?, peak))
    }

    /// Memory bounded by what the drain keeps: a 3,000-pod node, then 20 nodes x 110 pods at once, ours and
    /// (with `NMO_UPSTREAM_MANAGER`) upstream's.
    async fn bigdrain(&mut self) -> Result<()> {
        const S: &str = "bigdrain";
        let mib = |b: u64| format!("{:.1} MiB", b as f64 / MIB);
        let upstream = std::env::var_os("NMO_UPSTREAM_MANAGER").map(PathBuf::from);
        let mut runs: Vec<(&str, Option<PathBuf>)> = vec![("ours", None)];
        if let Some(m) = upstream {
            runs.push(("upstream (Go)", Some(m)));
        }
        for (who, manager) in runs {
            let tag = if manager.is_some() { "u" } else { "o" };
            for (case, nodes_n, per_node) in [
                ("1 node x 3,000 pods", 1, 3000),
                ("20 nodes x 110 pods at once", 20, 110),
            ] {
                let ns = format!("{S}-{tag}-{nodes_n}");
                self.namespace(&ns).await?;
                let nodes = self
                    .add_nodes(&format!("big{tag}{nodes_n}"), 0..nodes_n)
                    .await?;
                let size = self.big_pods(&ns, &nodes, per_node).await?;
                // A fresh process per input: the previous input's process is stopped (and its
                // memory with it) before this one starts.
                let mut child = None;
                let pid = match &manager {
                    None => {
                        self.restart_operator(&format!("op-bigdrain-{nodes_n}"), &[], &[])?;
                        self.operator_pid()
                    }
                    Some(m) => {
                        self.operator = None;
                        let c = self.start_upstream(m).await?;
                        let pid = c.pid();
                        child = Some(c);
                        pid
                    }
                };
                tokio::time::sleep(Duration::from_secs(2)).await;
                let before = proc_status(pid, "VmRSS")?;
                self.progress(&format!("{who}: draining {case}"));
                let (times, peak) = Self::peak_rss_during(pid, self.maintain(&nodes)).await?;
                let last = times.iter().copied().fold(0.0, f64::max);
                self.row(
                    S,
                    &format!("{who}: peak RSS draining {case}"),
                    format!(
                        "{} (before {}; {size} B per pod; drained in {last:.1} s)",
                        mib(peak),
                        mib(before)
                    ),
                    if manager.is_some() { "" } else { "< 64 MiB" },
                );
                self.end_maintenance(&nodes).await?;
                self.purge(&ns, &nodes).await?;
                drop(child);
            }
        }
        // The next scenario starts its own operator; this one's last process is stopped here.
        self.operator = None;
        Ok(())
    }

    /// A drain held by a PodDisruptionBudget that allows no disruption: the eviction requests
    /// while held, then the budget's deletion to the first accepted eviction and to `Succeeded`,
    /// beside an unblocked drain of as many pods; ours and (with `NMO_UPSTREAM_MANAGER`)
    /// upstream's.
    async fn budgetheld(&mut self) -> Result<()> {
        const S: &str = "budgetheld";
        let n = budget_pods()?;
        let upstream = std::env::var_os("NMO_UPSTREAM_MANAGER").map(PathBuf::from);
        let mut runs: Vec<(&str, Option<PathBuf>)> = vec![("ours", None)];
        if let Some(m) = upstream {
            runs.push(("upstream (Go)", Some(m)));
        }
        for (who, manager) in runs {
            let tag = if manager.is_some() { "u" } else { "o" };
            let ours = manager.is_none();

            // Held: N pods, one budget that allows none of them to go.
            let ns = format!("{S}-{tag}-held");
            self.namespace(&ns).await?;
            let held = self.add_nodes(&format!("bh{tag}held"), 0..1).await?;
            self.bare_pods(&ns, &held[0], n, "held").await?;
            self.held_budget(&ns, n).await?;
            let child = self
                .fresh_manager(manager.as_deref(), "op-budgetheld-held")
                .await?;
            self.progress(&format!(
                "{who}: NodeMaintenance on a node of {n} pods held by a budget"
            ));
            let h = self.held_then_relaxed(&ns, &held[0]).await?;
            self.row(
                S,
                &format!(
                    "{who}: eviction requests while held ({} s)",
                    HELD_WINDOW.as_secs()
                ),
                format!(
                    "{} ({:.2}/s; {} of {n} pods asked; first {:.1} s after create)",
                    h.asked,
                    h.asked as f64 / HELD_WINDOW.as_secs_f64(),
                    h.pods_asked,
                    h.first_after_create
                ),
                if ours { "<= 1/s on average" } else { "" },
            );
            self.row(
                S,
                &format!("{who}: budget deleted -> first accepted eviction"),
                format!("{:.2} s", h.first_accepted),
                if ours { "<= 5 s" } else { "" },
            );
            self.row(
                S,
                &format!("{who}: budget deleted -> Succeeded"),
                format!("{:.2} s", h.succeeded),
                if ours { "<= unblocked + 5 s" } else { "" },
            );
            self.end_maintenance(&held).await?;
            drop(child);
            self.purge(&ns, &held).await?;

            // Reference: the same number of pods on a fresh node, no budget.
            let ns = format!("{S}-{tag}-free");
            self.namespace(&ns).await?;
            let free = self.add_nodes(&format!("bh{tag}free"), 0..1).await?;
            self.bare_pods(&ns, &free[0], n, "free").await?;
            let child = self
                .fresh_manager(manager.as_deref(), "op-budgetheld-free")
                .await?;
            self.progress(&format!("{who}: unblocked drain of {n} pods"));
            let unblocked = self.maintain(&free).await?[0];
            self.row(
                S,
                &format!("{who}: unblocked drain of {n} pods, create -> Succeeded"),
                format!("{unblocked:.2} s"),
                "",
            );
            self.row(
                S,
                &format!("{who}: (budget deleted -> Succeeded) - unblocked"),
                format!("{:+.2} s", h.succeeded - unblocked),
                if ours { "<= +5 s" } else { "" },
            );
            self.end_maintenance(&free).await?;
            drop(child);
            self.purge(&ns, &free).await?;
        }
        // The next scenario starts its own operator; this one's last process is stopped here.
        self.operator = None;
        Ok(())
    }

    /// A held budget lowered to allow every pod, beside a bare client (the header's
    /// `budgetrelents`).
    async fn budgetrelents(&mut self) -> Result<()> {
        const S: &str = "budgetrelents";
        let n = budget_pods()?;
        // The floor first, with no controller running.
        self.operator = None;
        let mut best = f64::MAX;
        for in_flight in [1, 8] {
            let ns = format!("{S}-floor-{in_flight}");
            self.namespace(&ns).await?;
            let node = self.add_nodes(&format!("brfloor{in_flight}"), 0..1).await?;
            self.bare_pods(&ns, &node[0], n, "held").await?;
            self.held_budget(&ns, n).await?;
            self.lower_budget(&ns, 0, true).await?;
            self.progress(&format!(
                "floor: bare client evicts {n} pods under the lowered budget, {in_flight} in flight"
            ));
            let (answered, gone) = self.bare_evictions(&node[0], in_flight).await?;
            self.row(
                S,
                &format!("floor: bare client, {in_flight} in flight, {n} pods -> all gone"),
                format!("{gone:.2} s (all answered {answered:.2} s)"),
                "",
            );
            best = best.min(gone);
            self.purge(&ns, &node).await?;
        }
        // Ours, then (with `NMO_UPSTREAM_MANAGER`) upstream's, each on a fresh node.
        let mut runs: Vec<(&str, Option<PathBuf>)> = vec![("ours", None)];
        if let Some(m) = std::env::var_os("NMO_UPSTREAM_MANAGER").map(PathBuf::from) {
            runs.push(("upstream (Go)", Some(m)));
        }
        for (who, manager) in runs {
            let (tag, ours) = if manager.is_some() {
                ("u", false)
            } else {
                ("o", true)
            };
            let ns = format!("{S}-{tag}-held");
            self.namespace(&ns).await?;
            let held = self.add_nodes(&format!("brheld{tag}"), 0..1).await?;
            self.bare_pods(&ns, &held[0], n, "held").await?;
            self.held_budget(&ns, n).await?;
            let child = self
                .fresh_manager(manager.as_deref(), "op-budgetrelents")
                .await?;
            let mut audit = AuditCursor::at_end(self.cluster.audit_log_path());
            let created = Instant::now();
            self.create_nm(&held[0]).await?;
            let refused = |e: &AuditEvent| {
                e.subresource == "eviction" && e.namespace == ns && e.stage == RESPONSE_COMPLETE
            };
            let mut asked = 0;
            while asked == 0 {
                asked += audit.read()?.iter().filter(|e| refused(e)).count();
                ensure!(
                    created.elapsed() < LIMIT,
                    "{who}: no eviction asked {LIMIT:?} after the create"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            // Held a while (two retries), then lowered.
            tokio::time::sleep(Duration::from_secs(10)).await;
            asked += audit.read()?.iter().filter(|e| refused(e)).count();
            let held_for = created.elapsed().as_secs_f64();
            self.progress(&format!(
                "{who}: {n} pods held; lowering the budget to minAvailable: 0"
            ));
            self.row(
                S,
                &format!("{who}: eviction requests while held ({held_for:.0} s)"),
                format!("{asked} ({:.2}/s)", asked as f64 / held_for),
                if ours { "<= 1/s on average" } else { "" },
            );
            let lowered = Instant::now();
            self.lower_budget(&ns, 0, false).await?;
            let name = format!("nm-{}", held[0]);
            let figure = match self.succeeded_within(&name, relents_limit(ours)).await? {
                Ok(()) => {
                    let t = lowered.elapsed().as_secs_f64();
                    format!("{t:.2} s ({:.2}x the best floor)", t / best)
                }
                Err(phase) => {
                    let pods = Api::<Pod>::namespaced(self.client.clone(), &ns);
                    let left = pods.list(&ListParams::default()).await?.items.len();
                    format!(
                        "not Succeeded in {:.0} s ({phase}; {left} of {n} pods left)",
                        lowered.elapsed().as_secs_f64()
                    )
                }
            };
            self.row(
                S,
                &format!("{who}: budget lowered to minAvailable: 0 -> Succeeded, {n} pods"),
                figure,
                if ours { "<= 1.3x the best floor" } else { "" },
            );
            self.end_maintenance(&held).await?;
            drop(child);
            self.operator = None;
            self.purge(&ns, &held).await?;
        }
        Ok(())
    }

    /// Waits up to `limit` for NodeMaintenance `name` to reach `Succeeded` (polled every
    /// 100 ms, progress every 10 s): `Ok(Err(phase))` with the phase last seen when it did not.
    async fn succeeded_within(
        &self,
        name: &str,
        limit: Duration,
    ) -> Result<std::result::Result<(), String>> {
        let nms = Api::<NodeMaintenance>::all(self.client.clone());
        let start = Instant::now();
        let mut last_print = start;
        loop {
            let nm = nms.get(name).await?;
            let phase = nm.status.as_ref().and_then(|s| s.phase);
            if phase == Some(MaintenancePhase::Succeeded) {
                return Ok(Ok(()));
            }
            if start.elapsed() >= limit {
                return Ok(Err(format!("phase {phase:?}")));
            }
            if last_print.elapsed() > Duration::from_secs(10) {
                self.progress(&format!("waiting for {name} to Succeed: phase {phase:?}"));
                last_print = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Patches the budget `held` of `ns` to `minAvailable: min` (the floor's budget: at once
    /// to 0) and, for 0 with `settle`, waits until its status allows every pod the API server
    /// counts. A drain held by it does not wait: it evicts as the budget allows (upstream's
    /// asks every pod every 5 s, so the count it allows never catches up with the pods left).
    async fn lower_budget(&self, ns: &str, min: usize, settle: bool) -> Result<()> {
        let pdbs = Api::<PodDisruptionBudget>::namespaced(self.client.clone(), ns);
        let patch = json!({"spec": {"minAvailable": min}});
        pdbs.patch("held", &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        if min != 0 || !settle {
            return Ok(());
        }
        self.wait("the budget allowing every pod", || async {
            let p = pdbs.get("held").await?;
            let s = p.status.clone().unwrap_or_default();
            Ok((s.observed_generation == p.metadata.generation
                && s.disruptions_allowed == s.current_healthy
                && s.disruptions_allowed.unwrap_or(0) > 0)
                .then_some(())
                .ok_or(format!("allowed {:?}", s.disruptions_allowed)))
        })
        .await
    }

    /// The operator's requests while a node's launcher pods migrate, beside those while a node's
    /// pods are held by a budget (the header's `evacuating`).
    async fn evacuating(&mut self) -> Result<()> {
        const S: &str = "evacuating";
        let n = evacuating_pods()?;
        kubevirt::install_crds(&self.cluster)?;
        let manifests = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/manifests"));
        nmo_devcluster::operator::install_manifests(
            &self.cluster,
            &manifests.join("overlays/kubevirt"),
        )?;
        let standin = Standin::start(&self.cluster, EVACUATION_TIME).await?;

        // Node A: n migratable VMs; their migrations outlast the window.
        let ns = format!("{S}-vms");
        self.namespace(&ns).await?;
        kubevirt::label_namespace(&self.client, &ns).await?;
        let vms = self.add_nodes("evvms", 0..1).await?;
        self.progress(&format!("creating {n} VMIs and their launcher pods"));
        {
            use futures::StreamExt as _;
            let created: Vec<Result<String, kube::Error>> = futures::stream::iter(0..n)
                .map(|i| {
                    let (client, ns, node) = (&self.client, &ns, &vms[0]);
                    async move {
                        let name = format!("vm-{i:03}");
                        kubevirt::vm(client, ns, &name, node, true, EVACUATION_TIME).await
                    }
                })
                .buffer_unordered(8)
                .collect()
                .await;
            for c in created {
                c?;
            }
        }
        self.wait_running(&ns, n).await?;
        self.restart_operator("op-evacuating-vms", &[], &[])?;
        self.progress(&format!("NodeMaintenance on a node of {n} migrating VMs"));
        let migrating = self.requests_in_window(&ns, &vms[0]).await?;
        let left = standin
            .events("deleted")
            .iter()
            .filter(|e| e["pod"].as_str().is_some_and(|p| p.starts_with(&ns)))
            .count();
        ensure!(
            left == 0,
            "{left} launcher pods left inside the window: the migrations must outlast it"
        );
        let evacuations = standin.events("evacuation").len();
        ensure!(
            evacuations == n,
            "{evacuations} of {n} VMs evacuating by the window's end: {}",
            standin.log()
        );
        self.end_maintenance(&vms).await?;
        self.purge(&ns, &vms).await?;

        // Node B: n pods a budget holds.
        let ns = format!("{S}-held");
        self.namespace(&ns).await?;
        let held = self.add_nodes("evheld", 0..1).await?;
        self.bare_pods(&ns, &held[0], n, "held").await?;
        self.held_budget(&ns, n).await?;
        self.restart_operator("op-evacuating-held", &[], &[])?;
        self.progress(&format!(
            "NodeMaintenance on a node of {n} pods held by a budget"
        ));
        let budget = self.requests_in_window(&ns, &held[0]).await?;
        self.end_maintenance(&held).await?;
        self.operator = None;
        self.purge(&ns, &held).await?;
        self.cluster.kubectl_run(
            &[
                "delete",
                "validatingwebhookconfiguration",
                "kubevirt-standin",
            ],
            None,
        )?;
        drop(standin);

        let secs = EVACUATING_WINDOW.as_secs();
        for (what, r) in [
            (format!("{n} launcher pods migrating"), &migrating),
            (format!("{n} pods held by a budget"), &budget),
        ] {
            self.row(
                S,
                &format!("{what}: operator requests in {secs} s"),
                format!(
                    "{} ({:.2}/s; + {} watches)",
                    r.count,
                    r.per_second(),
                    r.watches
                ),
                "",
            );
            self.notes.push(format!(
                "evacuating, {what}, the operator's requests in {secs} s: {}\n",
                r.breakdown()
            ));
        }
        let ratio = migrating.per_second() / budget.per_second().max(f64::MIN_POSITIVE);
        self.row(
            S,
            "requests/s: migrating / held",
            format!("{ratio:.2}"),
            "<= 2",
        );
        Ok(())
    }

    /// Creates the NodeMaintenance of `node`, whose pods are in `ns`, and counts the operator's
    /// requests (its user's, in the audit log) received in [`EVACUATING_WINDOW`] from its first
    /// eviction request for a pod of `ns`. Fails when an eviction of `ns`'s pods was accepted in
    /// the window (the pods must stay for all of it).
    async fn requests_in_window(&self, ns: &str, node: &str) -> Result<Requests> {
        let user = format!(
            "system:serviceaccount:{}:{}",
            self.account.namespace, self.account.name
        );
        let mut audit = AuditCursor::at_end(self.cluster.audit_log_path());
        self.create_nm(node).await?;
        let created = Instant::now();
        let mut seen = Vec::new();
        let is_eviction = |e: &nmo_devcluster::audit::AuditEvent| {
            e.user == user && e.subresource == "eviction" && e.namespace == ns
        };
        let first = loop {
            seen.extend(audit.read()?);
            if let Some(first) = seen
                .iter()
                .filter(|e| is_eviction(e))
                .map(|e| e.received)
                .min()
            {
                break first;
            }
            ensure!(
                created.elapsed() < LIMIT,
                "no eviction for the pods of {ns} {LIMIT:?} after the create"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let end = first + EVACUATING_WINDOW;
        // 5 s past the window, so the requests received inside it are written (at their end).
        while Timestamp::now() < end + Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_secs(1)).await;
            seen.extend(audit.read()?);
        }
        let window: Vec<_> = seen
            .iter()
            .filter(|e| e.user == user && e.received >= first && e.received < end)
            .collect();
        let accepted = window
            .iter()
            .filter(|e| is_eviction(e) && (200..300).contains(&e.code))
            .count();
        ensure!(
            accepted == 0,
            "{accepted} evictions of {ns}'s pods accepted inside the window"
        );
        let (watches, others): (Vec<_>, Vec<_>) =
            window.into_iter().partition(|e| e.verb == "watch");
        let mut by_kind = BTreeMap::new();
        for e in &others {
            *by_kind.entry(e.verb_resource()).or_insert(0) += 1;
        }
        Ok(Requests {
            count: others.len(),
            watches: watches.len(),
            by_kind,
        })
    }

    /// A node's drain against the API server's own pace: for each size of [`rate_sizes`], the
    /// floor (a bare client evicting the same kind of pods, at each of [`FLOOR_CONCURRENCY`]),
    /// ours and (with `NMO_UPSTREAM_MANAGER`) upstream's, each on a fresh node of bare pods.
    async fn drainrate(&mut self) -> Result<()> {
        const S: &str = "drainrate";
        let upstream = std::env::var_os("NMO_UPSTREAM_MANAGER").map(PathBuf::from);
        let trace = std::env::var_os("NMO_RATE_TRACE").map(PathBuf::from);
        for n in rate_sizes()? {
            let repeats = rate_repeats(n);
            // The floor first, with no controller running: nothing else talks to the API server.
            self.operator = None;
            let mut best: Option<(f64, f64, usize, String)> = None;
            let floors: &[usize] = if trace.is_some() {
                &[]
            } else {
                &FLOOR_CONCURRENCY
            };
            for &c in floors {
                let mut tries = Vec::new();
                for r in 0..repeats {
                    let ns = format!("{S}-f{n}-{c}-{r}");
                    self.namespace(&ns).await?;
                    let node = self.add_nodes(&format!("rf{n}c{c}r{r}"), 0..1).await?;
                    self.bare_pods_with(&ns, &node[0], n, "rate", None).await?;
                    let load = self.load_start(None).await?;
                    let (answered, gone) = self.bare_evictions(&node[0], c).await?;
                    let load = self.load_end(load, gone).await?;
                    self.progress(&format!(
                        "floor, {n} pods, {c} in flight: all answered {answered:.2} s, all gone {gone:.2} s; {load}"
                    ));
                    tries.push((answered, gone, c, load));
                    self.purge(&ns, &node).await?;
                }
                let median = median_by(tries, |t| t.1);
                if best.as_ref().is_none_or(|b| median.1 < b.1) {
                    best = Some(median);
                }
            }
            let (answered, floor, c, load) =
                best.unwrap_or((0.0, f64::NAN, 0, "not measured while tracing".into()));
            self.row(
                S,
                &format!("floor: bare client evicts {n} pods -> all gone"),
                format!("{floor:.2} s (median of {repeats}; best of {FLOOR_CONCURRENCY:?} in flight: {c}; all answered {answered:.2} s; {load})"),
                "",
            );
            let mut runs: Vec<(&str, Option<PathBuf>)> = vec![("ours", None)];
            if let Some(m) = &upstream {
                runs.push(("upstream (Go)", Some(m.clone())));
            }
            let mut times = Vec::new();
            for (who, manager) in runs {
                let mut tries = Vec::new();
                for r in 0..repeats {
                    tries.push(
                        self.rate_run(who, manager.as_deref(), n, r, trace.as_deref())
                            .await?,
                    );
                }
                let (t, load) = median_by(tries, |t| t.0);
                times.push(t);
                self.row(
                    S,
                    &format!("{who}: {n} pods, create -> Succeeded"),
                    format!(
                        "{t:.2} s (median of {repeats}; {:.2}x the floor; {load})",
                        t / floor
                    ),
                    if manager.is_none() {
                        "<= 1.3x floor, <= 0.5x upstream"
                    } else {
                        ""
                    },
                );
            }
            if let [ours, up] = times[..] {
                self.row(
                    S,
                    &format!("ours / upstream, {n} pods"),
                    format!("{:.2}", ours / up),
                    "<= 0.5",
                );
            }
        }
        self.operator = None;
        Ok(())
    }

    /// One drain of `drainrate`: a fresh node of `n` pods, a fresh controller (ours when
    /// `manager` is `None`; with `trace`, ours logs every request and its log is copied there),
    /// create to `Succeeded` in seconds, and the load over it ([`Bench::load_end`]).
    async fn rate_run(
        &mut self,
        who: &str,
        manager: Option<&std::path::Path>,
        n: usize,
        r: usize,
        trace: Option<&std::path::Path>,
    ) -> Result<(f64, String)> {
        let tag = if manager.is_some() { "u" } else { "o" };
        let ns = format!("drainrate-{tag}{n}-{r}");
        self.namespace(&ns).await?;
        let node = self.add_nodes(&format!("r{tag}{n}r{r}"), 0..1).await?;
        self.bare_pods_with(&ns, &node[0], n, "rate", None).await?;
        let name = format!("op-drainrate-{n}-{r}");
        let child = match (manager, trace) {
            (None, Some(_)) => {
                self.restart_operator(
                    &name,
                    &[("RUST_LOG", "info,kube_client=debug")],
                    &["--log-format=json"],
                )?;
                None
            }
            _ => self.fresh_manager(manager, &name).await?,
        };
        let pid = match &child {
            Some(c) => c.pid(),
            None => self.operator_pid(),
        };
        self.progress(&format!("{who}: draining {n} pods"));
        let load = self.load_start(Some(pid)).await?;
        let t = self.maintain(&node).await?[0];
        let load = self.load_end(load, t).await?;
        self.progress(&format!("{who}: {n} pods in {t:.2} s; {load}"));
        if let (None, Some(dir)) = (manager, trace) {
            let log = self.cluster.dir().join(format!("{name}.log"));
            let to = dir.join(format!("ours-{n}-{r}.log"));
            std::fs::create_dir_all(dir)?;
            std::fs::copy(&log, &to)
                .with_context(|| format!("copying {} to {}", log.display(), to.display()))?;
            self.progress(&format!("ours's log, with every request: {}", to.display()));
        }
        self.end_maintenance(&node).await?;
        drop(child);
        self.purge(&ns, &node).await?;
        Ok((t, load))
    }

    /// What [`Bench::load_end`] needs: the CPU seconds so far of the control plane's processes
    /// and of `pid` (the controller, if any), and the API server's request counters.
    async fn load_start(&self, pid: Option<u32>) -> Result<Load> {
        let mut pids = Vec::new();
        for c in CONTROL_PLANE {
            pids.push(self.cluster.component_pid(c)?);
        }
        let cpu = |p: &u32| cpu_seconds(*p).unwrap_or(0.0);
        Ok(Load {
            control_plane: pids.iter().map(cpu).sum(),
            controller: pid.map(|p| (p, cpu(&p))),
            pids,
            requests: self.apiserver_requests().await?,
        })
    }

    /// The load since `start`, over `seconds` of wall time, in one line: cores used by the
    /// control plane and by the controller, and the API server's requests by kind (every
    /// client's: the harness polls the NodeMaintenance list, and kwok deletes the pods).
    async fn load_end(&self, start: Load, seconds: f64) -> Result<String> {
        let cpu = |p: &u32| cpu_seconds(*p).unwrap_or(0.0);
        let cp = start.pids.iter().map(cpu).sum::<f64>() - start.control_plane;
        let requests = self.apiserver_requests().await?;
        let mut delta: Vec<(String, f64)> = requests
            .into_iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v - start.requests.get(&k).copied().unwrap_or(0.0),
                )
            })
            .filter(|(k, v)| *v >= 1.0 && !k.contains("leases") && !k.contains("events"))
            .collect();
        delta.sort_by(|a, b| b.1.total_cmp(&a.1));
        let mut line = format!("control plane {:.2} cores", cp / seconds);
        if let Some((pid, before)) = start.controller {
            let _ = write!(
                line,
                ", controller {:.2} cores",
                (cpu(&pid) - before) / seconds
            );
        }
        line.push_str("; requests");
        for (k, v) in delta.iter().take(6) {
            let _ = write!(line, " {k} {v:.0}");
        }
        Ok(line)
    }

    /// `apiserver_request_total` of the API server's `/metrics`, summed by
    /// `<verb> <resource>[/<subresource>]`.
    async fn apiserver_requests(&self) -> Result<BTreeMap<String, f64>> {
        let text = self
            .client
            .request_text(http::Request::get("/metrics").body(Vec::new())?)
            .await?;
        let mut out = BTreeMap::new();
        for line in text
            .lines()
            .filter(|l| l.starts_with("apiserver_request_total{"))
        {
            let Some((labels, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let label = |name: &str| {
                labels
                    .split(&format!("{name}=\""))
                    .nth(1)
                    .and_then(|r| r.split('"').next())
                    .unwrap_or("")
                    .to_string()
            };
            let (verb, resource, sub) = (label("verb"), label("resource"), label("subresource"));
            let key = if sub.is_empty() {
                format!("{verb} {resource}")
            } else {
                format!("{verb} {resource}/{sub}")
            };
            *out.entry(key).or_insert(0.0) += value.parse::<f64>().unwrap_or(0.0);
        }
        Ok(out)
    }

    /// The floor of a drain: lists `node`'s pods once and evicts every one of them with
    /// `in_flight` requests at once as the operator's ServiceAccount (no retries, no logic:
    /// every eviction must be accepted), then polls every 100 ms until no pod is left on the
    /// node. Returns the seconds from the list to the last answer and to no pod left.
    async fn bare_evictions(&self, node: &str, in_flight: usize) -> Result<(f64, f64)> {
        use futures::StreamExt as _;
        // The operator's own client stack (TCP_NODELAY), so the floor is no slower than ours
        // for want of a socket option.
        let kc = kube::config::Kubeconfig::read_from(&self.sa_kubeconfig)?;
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
        let client = node_maintenance_operator::client::client(config)?;
        let all = Api::<Pod>::all(client.clone());
        let on_node = ListParams::default().fields(&format!("spec.nodeName={node}"));
        let t0 = Instant::now();
        let pods = all.list(&on_node).await?.items;
        let results: Vec<Result<(), kube::Error>> = futures::stream::iter(pods)
            .map(|p| {
                let api =
                    Api::<Pod>::namespaced(client.clone(), &p.namespace().unwrap_or_default());
                async move {
                    api.evict(&p.name_any(), &Default::default())
                        .await
                        .map(|_| ())
                }
            })
            .buffer_unordered(in_flight)
            .collect()
            .await;
        let answered = t0.elapsed().as_secs_f64();
        for r in results {
            r?;
        }
        let probe = on_node.clone().limit(1);
        loop {
            if all.list(&probe).await?.items.is_empty() {
                return Ok((answered, t0.elapsed().as_secs_f64()));
            }
            ensure!(
                t0.elapsed() < LIMIT,
                "pods of {node} not gone after {LIMIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops whatever controller runs and starts a fresh one: our operator named `name` when
    /// `manager` is `None`, else upstream's manager, whose process is returned (ours is kept in
    /// `self.operator`).
    async fn fresh_manager(
        &mut self,
        manager: Option<&std::path::Path>,
        name: &str,
    ) -> Result<Option<nmo_devcluster::process::Child>> {
        match manager {
            None => {
                self.restart_operator(name, &[], &[])?;
                Ok(None)
            }
            Some(m) => {
                self.operator = None;
                Ok(Some(self.start_upstream(m).await?))
            }
        }
    }

    /// Creates `n` bare pause pods `<app>-<i>` labelled `app=<app>` on `node` in `ns` (32
    /// creates in flight, no grace period) and waits until they run.
    async fn bare_pods(&self, ns: &str, node: &str, n: usize, app: &str) -> Result<()> {
        self.bare_pods_with(ns, node, n, app, Some(0)).await
    }

    /// [`Bench::bare_pods`] with `terminationGracePeriodSeconds` `grace` (`None`: the API
    /// server's default, 30 s, so an eviction leaves the pod terminating until the kubelet, here
    /// kwok, deletes it).
    async fn bare_pods_with(
        &self,
        ns: &str,
        node: &str,
        n: usize,
        app: &str,
        grace: Option<i64>,
    ) -> Result<()> {
        use futures::StreamExt as _;
        let pods = Api::<Pod>::namespaced(self.client.clone(), ns);
        self.progress(&format!("creating {n} bare pods on {node}"));
        let results: Vec<Result<(), kube::Error>> = futures::stream::iter(0..n)
            .map(|i| {
                let pods = pods.clone();
                let mut pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("{app}-{i:05}"), "labels": {"app": app}},
                    "spec": {
                        "nodeName": node,
                        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]
                    }
                }))
                .expect("pod JSON");
                pod.spec
                    .as_mut()
                    .expect("spec")
                    .termination_grace_period_seconds = grace;
                async move { pods.create(&PostParams::default(), &pod).await.map(|_| ()) }
            })
            .buffer_unordered(32)
            .collect()
            .await;
        for r in results {
            r?;
        }
        self.wait_running(ns, n).await
    }

    /// Creates the PodDisruptionBudget `held` over the `app=held` pods of `ns` with
    /// `minAvailable: n` and waits until its status counts all `n` healthy with no disruption
    /// allowed.
    async fn held_budget(&self, ns: &str, n: usize) -> Result<()> {
        let pdbs = Api::<PodDisruptionBudget>::namespaced(self.client.clone(), ns);
        let pdb: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": "held"},
            "spec": {"minAvailable": n, "selector": {"matchLabels": {"app": "held"}}}
        }))?;
        pdbs.create(&PostParams::default(), &pdb).await?;
        self.wait(&format!("the budget counting {n} pods healthy"), || async {
            let p = pdbs.get("held").await?;
            let s = p.status.clone().unwrap_or_default();
            let all = Some(n as i32);
            Ok((s.observed_generation == p.metadata.generation
                && s.current_healthy == all
                && s.desired_healthy == all
                && s.expected_pods == all
                && s.disruptions_allowed == Some(0))
            .then_some(())
            .ok_or(format!(
                "healthy {:?} of {:?}, allowed {:?}",
                s.current_healthy, s.expected_pods, s.disruptions_allowed
            )))
        })
        .await
    }

    /// Creates the NodeMaintenance of `node`, whose pods in `ns` the budget `held` holds; counts
    /// the eviction requests for them in [`HELD_WINDOW`] from the first; then deletes the budget
    /// and times the first accepted eviction and phase `Succeeded`.
    async fn held_then_relaxed(&self, ns: &str, node: &str) -> Result<Held> {
        let mut audit = AuditCursor::at_end(self.cluster.audit_log_path());
        // The evictions of `ns`'s pods appended to the log since the last read, as
        // (received, completed, code, pod).
        let mut evictions = move || -> Result<Vec<(Timestamp, Timestamp, u16, String)>> {
            Ok(audit
                .read()?
                .into_iter()
                .filter(|e| {
                    e.subresource == "eviction" && e.namespace == ns && e.stage == RESPONSE_COMPLETE
                })
                .map(|e| (e.received, e.completed, e.code, e.name))
                .collect())
        };
        let secs = |from: Timestamp, to: Timestamp| {
            (to.as_nanosecond() - from.as_nanosecond()) as f64 / 1e9
        };
        let ok = |code: u16| (200..300).contains(&code);

        let created_at = Timestamp::now();
        self.create_nm(node).await?;
        let created = Instant::now();
        let mut seen = Vec::new();
        let first = loop {
            seen.extend(evictions()?);
            if let Some(first) = seen.iter().map(|e| e.0).min() {
                break first;
            }
            ensure!(
                created.elapsed() < LIMIT,
                "no eviction for the pods of {ns} {LIMIT:?} after the create"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let end = first + HELD_WINDOW;
        // Past the window's end, 5 s more, so the answers to the requests received inside it
        // are in the log (an event is written once the answer is).
        let mut last_print = Instant::now();
        while Timestamp::now() < end + Duration::from_secs(5) {
            if last_print.elapsed() > Duration::from_secs(10) {
                last_print = Instant::now();
                self.progress(&format!(
                    "held: {} eviction requests since the first",
                    seen.len()
                ));
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            seen.extend(evictions()?);
        }
        let window: Vec<_> = seen.iter().filter(|e| e.0 >= first && e.0 < end).collect();
        let accepted = window.iter().filter(|e| ok(e.2)).count();
        ensure!(
            accepted == 0,
            "{accepted} evictions accepted while the budget allowed no disruption"
        );
        let pods_asked = window
            .iter()
            .map(|e| e.3.as_str())
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        let (asked, first_after_create) = (window.len(), secs(created_at, first));
        drop(seen);

        // The budget allows by going away, as in tests/maintenance.rs' budget test: relaxed to
        // `minAvailable: 0` instead, the disruption controller's own bookkeeping (a last pod
        // counted unhealthy) has held a pod for over a minute, which would time the budget and
        // not the drain. Deleted, every eviction from then on is allowed.
        let pdbs = Api::<PodDisruptionBudget>::namespaced(self.client.clone(), ns);
        let deleted_at = Timestamp::now();
        let deleted = Instant::now();
        pdbs.delete("held", &DeleteParams::default()).await?;
        let nms = Api::<NodeMaintenance>::all(self.client.clone());
        let (mut first_accepted, mut succeeded) = (None, None);
        while first_accepted.is_none() || succeeded.is_none() {
            if first_accepted.is_none() {
                first_accepted = evictions()?
                    .into_iter()
                    .filter(|e| ok(e.2) && e.1 >= deleted_at)
                    .map(|e| secs(deleted_at, e.1))
                    .min_by(f64::total_cmp);
            }
            if succeeded.is_none() {
                let nm = nms.get(&format!("nm-{node}")).await?;
                if nm.status.and_then(|s| s.phase) == Some(MaintenancePhase::Succeeded) {
                    succeeded = Some(deleted.elapsed().as_secs_f64());
                }
            }
            ensure!(
                deleted.elapsed() < LIMIT,
                "{LIMIT:?} after the budget's deletion: first accepted eviction \
                 {first_accepted:?} s, Succeeded {succeeded:?} s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(Held {
            asked,
            pods_asked,
            first_after_create,
            first_accepted: first_accepted.expect("loop ends when known"),
            succeeded: succeeded.expect("loop ends when known"),
        })
    }

    /// Starts upstream's Go manager (as the admin; webhook on :9443 with its fallback serving
    /// pair, as `benches/admission.rs` runs it) and registers its webhook.
    async fn start_upstream(
        &self,
        manager: &std::path::Path,
    ) -> Result<nmo_devcluster::process::Child> {
        let tmp = self.cluster.dir().join("upstream-tmp");
        let certs = tmp.join("k8s-webhook-server/serving-certs");
        std::fs::create_dir_all(&certs)?;
        let pair = self
            .cluster
            .ca()
            .issue_server(&["localhost"], &["127.0.0.1".parse()?])?;
        std::fs::write(certs.join("tls.crt"), &pair.cert_pem)?;
        std::fs::write(certs.join("tls.key"), &pair.key_pem)?;
        let ports = free_ports(2)?;
        let mut cmd = Command::new(manager);
        cmd.args([
            format!("--kubeconfig={}", self.cluster.kubeconfig().display()),
            format!("--metrics-bind-address=127.0.0.1:{}", ports[0]),
            format!("--health-probe-bind-address=127.0.0.1:{}", ports[1]),
            "--leader-elect=false".into(),
        ])
        .env("TMPDIR", &tmp)
        .env("OPERATOR_NAMESPACE", "node-maintenance-operator-system");
        let mut child = self.cluster.spawn("upstream-manager", cmd)?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while !http_get(("127.0.0.1", ports[1]), "/readyz")
            .is_some_and(|r| r.starts_with("HTTP/1.1 200") || r.starts_with("HTTP/1.0 200"))
        {
            if let Some(status) = child.exited() {
                bail!(
                    "upstream manager exited ({status}):\n{}",
                    child.log_tail(30)
                );
            }
            ensure!(
                Instant::now() < deadline,
                "upstream manager not ready after 60 s:\n{}",
                child.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        nmo_devcluster::operator::register_webhook(&self.cluster, 9443)?;
        fixtures::wait_for_webhook(&self.cluster, Duration::from_secs(60))?;
        self.progress("upstream manager ready");
        Ok(child)
    }

    /// Start-up to ready: 5 extra operator processes (next to the running one, which keeps the
    /// webhook; there is no NodeMaintenance to fight over), each polled on `/readyz` every 2 ms.
    async fn startup(&mut self, label: &str) -> Result<()> {
        let cert_dir = self
            .cluster
            .dir()
            .join(format!("{}-certs", self.operator_name));
        let mut ready = Vec::new();
        let mut floor = Vec::new();
        for i in 0..5 {
            let ports = free_ports(3)?;
            let mut cmd = Command::new(OPERATOR_BIN);
            cmd.args([
                format!("--kubeconfig={}", self.sa_kubeconfig.display()),
                format!("--webhook-cert-path={}", cert_dir.display()),
                format!("--webhook-bind-address=127.0.0.1:{}", ports[0]),
                format!("--metrics-bind-address=127.0.0.1:{}", ports[1]),
                format!("--health-probe-bind-address=127.0.0.1:{}", ports[2]),
                "--leader-elect=false".into(),
            ])
            .env("POD_NAMESPACE", &self.account.namespace)
            .env("RUST_LOG", "warn");
            let t0 = Instant::now();
            let mut child = self.cluster.spawn(&format!("startup-{i}"), cmd)?;
            loop {
                let r = http_get(("127.0.0.1", ports[2]), "/readyz");
                // The status line is `HTTP/1.0 200 OK`: http_get speaks HTTP/1.0.
                if r.as_ref()
                    .is_some_and(|r| r.split(' ').nth(1) == Some("200"))
                {
                    break;
                }
                ensure!(
                    child.exited().is_none(),
                    "start-up probe exited: {}",
                    child.log_tail(20)
                );
                ensure!(
                    t0.elapsed() < Duration::from_secs(30),
                    "not ready in 30 s; last /readyz {r:?}; log:\n{}",
                    child.log_tail(20)
                );
                std::thread::sleep(Duration::from_millis(2));
            }
            ready.push(t0.elapsed().as_secs_f64() * 1000.0);
            child.stop(Duration::from_secs(5));

            let t0 = Instant::now();
            let client = self.cluster.client_for(&self.sa_kubeconfig).await;
            let lp = ListParams::default();
            let (nms, nodes) = (
                Api::<NodeMaintenance>::all(client.clone()),
                Api::<Node>::all(client),
            );
            let (a, b) = tokio::join!(nms.list(&lp), nodes.list(&lp));
            a?;
            b?;
            floor.push(t0.elapsed().as_secs_f64() * 1000.0);
        }
        let (ready, floor) = (median(ready), median(floor));
        self.row(
            "startup",
            &format!("spawn -> /readyz 200, {label}"),
            format!("{ready:.0} ms"),
            "",
        );
        self.row(
            "startup",
            "  API floor (fresh client, LIST nm || LIST node)",
            format!("{floor:.0} ms"),
            "",
        );
        self.row(
            "startup",
            "  own start-up (difference)",
            format!("{:.0} ms", ready - floor),
            "<= 200 ms",
        );
        Ok(())
    }

    fn report(&self) -> String {
        let w = |f: fn(&Row) -> usize| self.rows.iter().map(f).max().unwrap_or(0);
        let (ws, wf, wv) = (
            w(|r| r.scenario.len()).max(8),
            w(|r| r.figure.len()),
            w(|r| r.value.len()),
        );
        let mut out = format!(
            "\nnode-maintenance-operator benchmarks ({})\n\n",
            jiff::Timestamp::now()
        );
        let _ = writeln!(
            out,
            "{:<ws$}  {:<wf$}  {:<wv$}  target",
            "scenario", "figure", "value"
        );
        for r in &self.rows {
            let _ = writeln!(
                out,
                "{:<ws$}  {:<wf$}  {:<wv$}  {}",
                r.scenario, r.figure, r.value, r.target
            );
        }
        for n in &self.notes {
            let _ = write!(out, "\n{n}");
        }
        out
    }
}

/// `(verb, resource[/subresource])` of one request, in the API server's terms (a GET is a
/// `get`, `list` or `watch`; a DELETE of a collection is `deletecollection`).
fn classify(method: &str, url: &str) -> (String, String) {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let path = path.find("/api").map_or(path, |i| &path[i..]);
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    // /api/v1/... or /apis/<group>/<version>/...
    let mut rest = if segs.first() == Some(&"api") {
        &segs[2.min(segs.len())..]
    } else {
        &segs[3.min(segs.len())..]
    };
    if rest.len() > 2 && rest[0] == "namespaces" {
        rest = &rest[2..];
    }
    let resource = match rest {
        [r, _, sub, ..] => format!("{r}/{sub}"),
        [r, ..] => r.to_string(),
        [] => "(discovery)".into(),
    };
    let named = rest.len() >= 2;
    let watch = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    let verb = match method {
        "GET" if watch => "watch",
        "GET" if named => "get",
        "GET" => "list",
        "POST" => "create",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" if named => "delete",
        "DELETE" => "deletecollection",
        other => other,
    };
    (verb.into(), resource)
}

/// A `kB` field of `/proc/<pid>/status`, in bytes ([`nmo_devcluster::measure::proc_status`]).
fn proc_status(pid: u32, field: &str) -> Result<u64> {
    nmo_devcluster::measure::proc_status(pid, field)
        .with_context(|| format!("no {field} in /proc/{pid}/status"))
}

/// How long `budgetrelents` waits for `Succeeded` after the budget is lowered: [`LIMIT`] for
/// ours; for upstream's `NMO_RELENTS_UPSTREAM_LIMIT` seconds, else 900 (its drain polls each
/// evicted pod with a GET per second through a client limited to 20 requests a second).
fn relents_limit(ours: bool) -> Duration {
    if ours {
        return LIMIT;
    }
    std::env::var("NMO_RELENTS_UPSTREAM_LIMIT")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(Duration::from_secs(900), Duration::from_secs)
}

/// Pods of `budgetheld`: `NMO_BUDGET_PODS`, else 2,000.
fn budget_pods() -> Result<usize> {
    match std::env::var("NMO_BUDGET_PODS") {
        Ok(v) => {
            let n: usize = v
                .parse()
                .with_context(|| format!("NMO_BUDGET_PODS={v:?} is not a number"))?;
            ensure!(n > 0, "NMO_BUDGET_PODS must be at least 1");
            Ok(n)
        }
        Err(_) => Ok(2000),
    }
}

/// Launcher pods (and held pods) of `evacuating`: `NMO_EVACUATING_PODS`, else 50.
fn evacuating_pods() -> Result<usize> {
    match std::env::var("NMO_EVACUATING_PODS") {
        Ok(v) => {
            let n: usize = v
                .parse()
                .with_context(|| format!("NMO_EVACUATING_PODS={v:?} is not a number"))?;
            ensure!(n > 0, "NMO_EVACUATING_PODS must be at least 1");
            Ok(n)
        }
        Err(_) => Ok(50),
    }
}

/// CPU and request counters at the start of a measured drain ([`Bench::load_start`]).
struct Load {
    pids: Vec<u32>,
    control_plane: f64,
    controller: Option<(u32, f64)>,
    requests: BTreeMap<String, f64>,
}

/// Evictions in flight at once that the floor of `drainrate` tries; the best is its figure.
const FLOOR_CONCURRENCY: [usize; 3] = [32, 128, 512];

/// Pod counts of `drainrate`'s nodes: `NMO_RATE_PODS` (comma-separated), else 200 and 3,000.
fn rate_sizes() -> Result<Vec<usize>> {
    match std::env::var("NMO_RATE_PODS") {
        Ok(v) => v
            .split(',')
            .map(|s| {
                s.trim()
                    .parse::<usize>()
                    .ok()
                    .filter(|n| *n > 0)
                    .with_context(|| format!("NMO_RATE_PODS={v:?}: {s:?} is not a pod count"))
            })
            .collect(),
        Err(_) => Ok(vec![200, 3000]),
    }
}

/// Runs of each `drainrate` figure: 3 for nodes of up to 500 pods (a run takes seconds, and a
/// single one varies by a tenth of a second with what else the two cores do), else 1.
fn rate_repeats(pods: usize) -> usize {
    if pods <= 500 { 3 } else { 1 }
}

/// The element of `v` with the median `key` (the upper one of an even count).
fn median_by<T>(mut v: Vec<T>, key: impl Fn(&T) -> f64) -> T {
    v.sort_by(|a, b| key(a).total_cmp(&key(b)));
    let mid = v.len() / 2;
    v.swap_remove(mid)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

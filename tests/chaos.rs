//! Chaos suite: many NodeMaintenance lifecycles under injected faults, judged by an invariant
//! checker (`docs/design.md §7`).
//!
//! A *round* is generated from one seed (`fastrand`, so the same seed gives the same scenario):
//! [`ROUND_NODES`] fresh kwok nodes carrying a Deployment, a StatefulSet behind a
//! PodDisruptionBudget, bare pods, DaemonSet pods and a pod held by a finalizer; one node
//! cordoned by an admin beforehand, one with an admin taint; one NodeMaintenance per node,
//! created at a random moment and deleted either at a random moment or after it succeeded; the
//! budget tightened and relaxed; an admin label added to a node in maintenance; and faults at
//! random moments: the operator SIGKILLed and restarted, the leader SIGSTOPped for longer than
//! its lease while a second replica runs, kube-apiserver killed and restarted mid-drain, etcd
//! paused, the webhook's certificate files swapped. Each node's maintenance is one lifecycle.
//!
//! The checker is fed by watches of Nodes, Pods, Leases and NodeMaintenances, and by the
//! kube-apiserver's audit log of evictions and of the scheduler's bindings. It asserts:
//! (a) no pod is evicted from a node without a NodeMaintenance;
//! (b) no pod is evicted after its NodeMaintenance's deletion (beyond [`IN_FLIGHT_GRACE`]);
//! (c) once every NodeMaintenance is gone and the operator settles, every node's
//!     unschedulable flag, taints, labels and annotations equal what they were before any
//!     maintenance (admin changes made meanwhile kept), and no medik8s lease is held by
//!     `node-maintenance`;
//! (d) no NodeMaintenance stays stuck with its finalizer;
//! (e) every maintenance whose blockers were removed reaches Succeeded, and while its phase says
//!     so its node is cordoned, carries both maintenance taints and holds no pod left to evict;
//! (f) Succeeded comes only after every pod that was on the node when the round began was
//!     evicted, as the audit log records it (a pod is excused only when its eviction was
//!     received and never answered in the log inside a kube-apiserver restart: a SIGKILLed
//!     server loses the answers it was writing); a round with maintenances and no audited
//!     eviction, or an audit log that is missing or unreadable, fails (the invariants above
//!     would hold vacuously);
//! (g) every planned fault happened (the operator died, the leader lost its term and another
//!     replica took over, kube-apiserver came back, etcd was stopped, the webhook served the new
//!     certificate); a fault that did not happen fails its round.
//! A violation prints the seed and the recorded history of the node concerned. The run ends with
//! the count of each fault kind, planned and happened.
//!
//! # Running
//!
//! ```text
//! cargo test --test chaos                                   # short form: regression seeds + fresh ones
//! NMO_CHAOS_SEED=17 cargo test --test chaos -- --nocapture  # replay one round
//! NMO_CHAOS_LIFECYCLES=300 NMO_CHAOS_SEEDS=random cargo test --test chaos -- --nocapture
//! ```
//!
//! The short form runs every seed of [`KNOWN_SEEDS`] and, beside them, one fresh (random) seed
//! for each fault kind that those seeds' rounds do not inject, and at least one fresh seed
//! whatever they inject (asserted), so every run injects every kind and tries a scenario never
//! run before; the seeds are printed first, for replay.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::*;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use nmo_devcluster::Options;
use nmo_devcluster::audit::{AuditCursor, EVICTIONS_POLICY, REQUEST_RECEIVED, RESPONSE_COMPLETE};
use nmo_devcluster::faults::{certificate_der, served_certificate, swap_serving_pair};
use nmo_devcluster::operator::{Operator, ServiceAccountRef, register_webhook};
use node_maintenance_operator::api::{MaintenancePhase, NodeMaintenance};
use serde_json::json;

/// Nodes, hence lifecycles, per round.
const ROUND_NODES: usize = 5;
/// Seeds that once broke an invariant and were fixed, replayed first by every run (regression
/// cases).
/// - 1, 6, 282221 and 651981: a leader SIGSTOPped past its lease resumed and wrote from its stale
///   cache before its elector noticed; fixed by the leader election's write fence, which refuses
///   every controller write once the renew deadline has passed on the monotonic clock
///   (`docs/design.md §5`).
/// - 708172, 336147 and 658917: after kube-apiserver was killed and restarted, the operator's
///   watches saw connection errors, 403 (RBAC not yet synced) and 410 Expired, and
///   NodeMaintenances deleted meanwhile were not reconciled within the settle time: every watch
///   error also advanced the `Controller`'s own trigger back-off (up to 30 s plus as much jitter),
///   which stops polling *all* watches while it sleeps, on top of each watch's own back-off.
///   Fixed by keeping watch errors out of the `Controller` (each watch backs off alone, at most
///   4 s plus jitter), by triggering a relist's objects only once the store holds them, and by
///   reporting what vanished during a relist as deleted. With the watches back sooner, 336147
///   then showed an eviction 2.4 s after the DELETE from a copy the away watch had not updated:
///   a drain pass now needs a copy that is not deleting, confirmed by a GET while the
///   NodeMaintenance watch is away (`docs/design.md §7`).
/// - 430447: a checker blind spot, not an operator fault. kube-scheduler bound a pod just as
///   kube-apiserver was killed, the operator evicted it 163 ms after its node's NodeMaintenance
///   was created, and the checker's pod watch, reconnecting, never saw the pod on a node, so (a)
///   found the eviction on no node. The checker now also reads the scheduler's bindings from the
///   audit log ([`EVICTIONS_POLICY`]).
const KNOWN_SEEDS: &[u64] = &[1, 6, 282_221, 651_981, 708_172, 336_147, 658_917, 430_447];
/// Seeds that break an invariant through a fault not fixed yet, with the cause. The short form
/// skips them (and names them at the end); `NMO_CHAOS_SEED=<seed>` replays one, and
/// `NMO_CHAOS_OPEN=1` adds them all to the run. When the cause is fixed, move the seed to
/// [`KNOWN_SEEDS`].
const OPEN_SEEDS: &[(u64, &str)] = &[];
/// The leader-election lease of the operator (`src/leader.rs`), which a SIGSTOP must outlast.
const LEADER_LEASE: Duration = Duration::from_secs(15);
/// How long after the DELETE of a NodeMaintenance returned an eviction of a pass that was
/// already running still counts as in flight rather than as a violation of (b): the operator
/// cannot recall a request it sent before it saw the deletion.
const IN_FLIGHT_GRACE: Duration = Duration::from_secs(2);
/// How long the webhook may take to serve a swapped certificate (it reloads on a file event; a
/// loaded 2-core machine may delay that by seconds, not by this much).
const CERT_RELOAD: Duration = Duration::from_secs(30);
/// How long a round's pods may take to run before kwok is taken for stalled and restarted (a
/// round's 20-odd pods run within a second; taking a slow start for a stall costs a restart).
const KWOK_STALL: Duration = Duration::from_secs(15);
/// Generous bound of any single wait (two shared cores, faults on).
const LIMIT: Duration = Duration::from_secs(120);
/// How long the operator may take, once every NodeMaintenance is deleted, to remove them and
/// restore every node of the round.
const SETTLE: Duration = Duration::from_secs(60);
const ADMIN_TAINT: &str = "chaos.example/admin";
const ADMIN_LABEL: &str = "chaos.example/admin-note";
const HOLD_FINALIZER: &str = "chaos.example/hold";

// ------------------------------------------------------------------------------------------
// Scenario generation (pure, deterministic per seed)
// ------------------------------------------------------------------------------------------

/// The fault kinds, in the order in which `seed % 5` picks a round's primary fault.
const FAULT_KINDS: [&str; 5] = [
    "KillOperator",
    "StopLeader",
    "RestartApiserver",
    "PauseEtcd",
    "SwapCerts",
];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    /// SIGKILL the operator, restart it after `down`.
    KillOperator { down: Duration },
    /// SIGSTOP the leader for the leader lease plus `extra`, with a second replica running.
    StopLeader { extra: Duration },
    /// SIGKILL kube-apiserver, start it again after `down`.
    RestartApiserver { down: Duration },
    /// SIGSTOP etcd for `pause`.
    PauseEtcd { pause: Duration },
    /// Replace the webhook's serving pair on disk.
    SwapCerts,
}

impl Fault {
    /// The kind's name, one of [`FAULT_KINDS`].
    fn kind(&self) -> &'static str {
        match self {
            Fault::KillOperator { .. } => FAULT_KINDS[0],
            Fault::StopLeader { .. } => FAULT_KINDS[1],
            Fault::RestartApiserver { .. } => FAULT_KINDS[2],
            Fault::PauseEtcd { .. } => FAULT_KINDS[3],
            Fault::SwapCerts => FAULT_KINDS[4],
        }
    }
}

/// A fault's kind and when it began and ended.
type FaultWindow = (&'static str, jiff::Timestamp, jiff::Timestamp);

/// Faults of this run by kind: (planned, happened).
static FAULT_COUNTS: Mutex<BTreeMap<&'static str, (usize, usize)>> = Mutex::new(BTreeMap::new());

#[derive(Clone, Debug)]
enum End {
    /// Delete this long after the create returned, whatever the phase.
    Early(Duration),
    /// Delete once Succeeded (after the blockers are removed).
    AfterSucceeded,
}

#[derive(Clone, Debug)]
struct Lifecycle {
    create_at: Duration,
    end: End,
}

#[derive(Clone, Debug)]
struct Plan {
    seed: u64,
    lifecycles: Vec<Lifecycle>,
    /// Node cordoned by an admin before the round.
    admin_cordoned: usize,
    /// Node carrying an admin taint before the round.
    admin_tainted: usize,
    /// Node that gets an admin label while in maintenance, and when.
    admin_label: (usize, Duration),
    /// Node the finalizer-held pod runs on.
    held_on: usize,
    /// Nodes with a bare pod.
    bare_on: Vec<usize>,
    /// When the budget is tightened to no disruption, if it is.
    tighten_at: Option<Duration>,
    /// When every blocker is removed (budget relaxed to all, finalizer removed).
    relax_at: Duration,
    /// The fault every round of this seed has (kinds rotate with the seed).
    primary: Fault,
    faults: Vec<(Duration, Fault)>,
}

impl Plan {
    fn leader_elect(&self) -> bool {
        self.faults
            .iter()
            .any(|(_, f)| matches!(f, Fault::StopLeader { .. }))
    }

    fn generate(seed: u64) -> Plan {
        let mut rng = fastrand::Rng::with_seed(seed);
        let ms = |rng: &mut fastrand::Rng, lo: u64, hi: u64| Duration::from_millis(rng.u64(lo..hi));
        let lifecycles = (0..ROUND_NODES)
            .map(|_| {
                let create_at = ms(&mut rng, 0, 3000);
                let end = if rng.u8(0..10) < 3 {
                    End::Early(ms(&mut rng, 200, 5000))
                } else {
                    End::AfterSucceeded
                };
                Lifecycle { create_at, end }
            })
            .collect();
        let relax_at = ms(&mut rng, 4000, 9000);
        // The primary fault rotates with the seed, so any 5 consecutive seeds cover all kinds.
        let primary = match seed % 5 {
            0 => Fault::KillOperator {
                down: ms(&mut rng, 0, 2000),
            },
            1 => Fault::StopLeader {
                extra: ms(&mut rng, 1000, 4000),
            },
            2 => Fault::RestartApiserver {
                down: ms(&mut rng, 0, 2000),
            },
            3 => Fault::PauseEtcd {
                pause: ms(&mut rng, 1000, 4000),
            },
            _ => Fault::SwapCerts,
        };
        let mut faults = vec![(ms(&mut rng, 1500, relax_at.as_millis() as u64), primary)];
        if rng.u8(0..10) < 4 {
            let second = match rng.u8(0..3) {
                0 if !matches!(primary, Fault::StopLeader { .. }) => Fault::KillOperator {
                    down: ms(&mut rng, 0, 1500),
                },
                1 => Fault::PauseEtcd {
                    pause: ms(&mut rng, 500, 2500),
                },
                _ => Fault::SwapCerts,
            };
            faults.push((
                ms(&mut rng, 500, relax_at.as_millis() as u64 + 3000),
                second,
            ));
        }
        faults.sort_by_key(|(at, _)| *at);
        Plan {
            seed,
            lifecycles,
            admin_cordoned: rng.usize(0..ROUND_NODES),
            admin_tainted: rng.usize(0..ROUND_NODES),
            admin_label: (rng.usize(0..ROUND_NODES), ms(&mut rng, 3000, 6000)),
            held_on: rng.usize(0..ROUND_NODES),
            bare_on: (0..ROUND_NODES).filter(|_| rng.bool()).collect(),
            tighten_at: (rng.u8(0..10) < 6).then(|| ms(&mut rng, 0, 3000)),
            relax_at,
            primary,
            faults,
        }
    }
}

// ------------------------------------------------------------------------------------------
// History: what every watch saw and every action did, with wall-clock times comparable to the
// audit log's (same machine clock).
// ------------------------------------------------------------------------------------------

#[derive(Default)]
struct History {
    entries: Mutex<Vec<(jiff::Timestamp, String)>>,
}

impl History {
    fn log(&self, text: impl Into<String>) {
        self.log_at(jiff::Timestamp::now(), text);
    }

    fn log_at(&self, at: jiff::Timestamp, text: impl Into<String>) {
        self.entries.lock().unwrap().push((at, text.into()));
    }

    /// Entries that mention `key`, plus every fault and operator entry, in time order.
    fn about(&self, key: &str) -> String {
        let mut entries = self.entries.lock().unwrap().clone();
        entries.sort_by_key(|(at, _)| *at);
        let mut out = String::new();
        for (at, text) in entries {
            if text.contains(key) || text.starts_with("fault") || text.starts_with("operator") {
                let _ = writeln!(out, "  {at} {text}");
            }
        }
        out
    }
}

// ------------------------------------------------------------------------------------------
// Observations the checker needs beyond the history
// ------------------------------------------------------------------------------------------

/// One incarnation of a pod name: its uid, node and when the watch first saw it.
#[derive(Clone, Debug)]
struct Incarnation {
    uid: String,
    node: String,
    seen: jiff::Timestamp,
}

#[derive(Default)]
struct Observed {
    /// `ns/name` -> incarnations in order of first sight.
    pods: Mutex<HashMap<String, Vec<Incarnation>>>,
    /// NodeMaintenance name -> when the watch saw it gone.
    nm_gone: Mutex<HashMap<String, jiff::Timestamp>>,
}

/// What the driver did to one NodeMaintenance.
#[derive(Clone, Debug, Default)]
struct NmRecord {
    node: String,
    /// Before the create request was sent.
    created: Option<jiff::Timestamp>,
    /// When the driver read the phase Succeeded (and found the node drained).
    succeeded: Option<jiff::Timestamp>,
    /// After the DELETE returned.
    deleted: Option<jiff::Timestamp>,
}

// ------------------------------------------------------------------------------------------
// Fixture
// ------------------------------------------------------------------------------------------

struct ChaosEnv {
    cluster: nmo_devcluster::Cluster,
    account: ServiceAccountRef,
    kubeconfig: std::path::PathBuf,
}

fn env() -> &'static ChaosEnv {
    static ENV: OnceLock<ChaosEnv> = OnceLock::new();
    ENV.get_or_init(|| {
        let cluster = nmo_devcluster::Cluster::start(Options {
            workers: 0,
            control_planes: 1,
            audit_policy: Some(EVICTIONS_POLICY.into()),
        })
        .unwrap_or_else(|e| panic!("the local control plane did not start: {e}"));
        let Installed {
            account,
            kubeconfig,
            ..
        } = installed(&cluster);
        ChaosEnv {
            cluster,
            account,
            kubeconfig,
        }
    })
}

/// The operator replicas of a round, by name.
struct Replicas {
    running: Vec<(String, Option<Operator>)>,
    leader_elect: bool,
    /// Start them with the JSON Node watch forced (`NMO_NODE_WATCH_ENCODING=json`).
    json_node_watch: bool,
}

impl Replicas {
    fn start(&mut self, name: &str) -> Result<(), String> {
        let e = env();
        let mut opts = operator_options(name, &e.account, &e.kubeconfig);
        opts.leader_elect = self.leader_elect;
        if self.json_node_watch {
            opts.env
                .push(("NMO_NODE_WATCH_ENCODING".into(), "json".into()));
        }
        let op = Operator::start(&e.cluster, &opts).map_err(|e| format!("{name}: {e}"))?;
        match self.running.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = Some(op),
            None => self.running.push((name.to_string(), Some(op))),
        }
        Ok(())
    }

    fn get(&mut self, name: &str) -> &mut Operator {
        self.running
            .iter_mut()
            .find(|(n, _)| n == name)
            .and_then(|(_, o)| o.as_mut())
            .expect("replica runs")
    }

    /// Points the webhook at replica `name` and waits until the API server calls it.
    fn serve_webhook(&mut self, name: &str) {
        let port = self.get(name).webhook_port;
        register_webhook(&env().cluster, port).unwrap();
        wait_for_webhook(&env().cluster);
    }

    /// The replica whose log says it acquired the leader lease (`None` while nobody leads).
    fn leader(&mut self) -> Option<String> {
        self.running.iter().find_map(|(n, o)| {
            o.as_ref()
                .filter(|o| o.log().contains("successfully acquired lease"))
                .map(|_| n.clone())
        })
    }
}

/// Retries `op` until it succeeds or `LIMIT` passes (the API server or the webhook may be down
/// for a while in a fault); returns the last error on timeout.
async fn retry<T, F, Fut>(what: &str, op: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    retry_until(Instant::now() + LIMIT, what, op).await
}

/// Retries `op` every 250 ms until it succeeds or `deadline` passes; the last error on timeout.
async fn retry_until<T, F, Fut>(deadline: Instant, what: &str, mut op: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() > deadline => return Err(format!("{what}: {e}")),
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

// ------------------------------------------------------------------------------------------
// Watches feeding the history
// ------------------------------------------------------------------------------------------

fn node_summary(n: &Node) -> String {
    let spec = n.spec.clone().unwrap_or_default();
    let taints: Vec<String> = spec
        .taints
        .unwrap_or_default()
        .iter()
        .map(|t| {
            format!(
                "{}={}:{}",
                t.key,
                t.value.clone().unwrap_or_default(),
                t.effect
            )
        })
        .collect();
    let labels: Vec<String> = n
        .labels()
        .iter()
        .filter(|(k, _)| k.contains("medik8s") || k.starts_with("chaos."))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let annotations: Vec<&String> = n
        .annotations()
        .keys()
        .filter(|k| k.contains("medik8s"))
        .collect();
    format!(
        "node {}: unschedulable={} taints={taints:?} labels={labels:?} annotations={annotations:?}",
        n.name_any(),
        spec.unschedulable.unwrap_or(false)
    )
}

fn spawn_watches(
    client: &Client,
    group: &str,
    ns: &str,
    history: Arc<History>,
    observed: Arc<Observed>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    {
        let nodes: Api<Node> = Api::all(client.clone());
        let history = history.clone();
        let cfg = watcher::Config::default().labels(&format!("nmo-test={group}"));
        tasks.push(tokio::spawn(async move {
            let mut last: HashMap<String, String> = HashMap::new();
            let mut s = watcher(nodes, cfg).backoff(watch_backoff()).boxed();
            while let Some(ev) = s.next().await {
                match ev {
                    Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) => {
                        let line = node_summary(&n);
                        if last.insert(n.name_any(), line.clone()).as_ref() != Some(&line) {
                            history.log(line);
                        }
                    }
                    Ok(watcher::Event::Delete(n)) => {
                        history.log(format!("node {} deleted", n.name_any()))
                    }
                    Ok(_) => {}
                    Err(e) => history.log(format!("watch error (nodes): {e}")),
                }
            }
        }));
    }
    {
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let history = history.clone();
        let observed = observed.clone();
        tasks.push(tokio::spawn(async move {
            let mut last: HashMap<String, String> = HashMap::new();
            let mut s = watcher(pods, watcher::Config::default())
                .backoff(watch_backoff())
                .boxed();
            while let Some(ev) = s.next().await {
                match ev {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                        let key = format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any());
                        let uid = p.uid().unwrap_or_default();
                        let node = node_of(&p).to_string();
                        if !node.is_empty() {
                            let mut pods = observed.pods.lock().unwrap();
                            let incs = pods.entry(key.clone()).or_default();
                            if !incs.iter().any(|i| i.uid == uid) {
                                incs.push(Incarnation {
                                    uid: uid.clone(),
                                    node: node.clone(),
                                    seen: jiff::Timestamp::now(),
                                });
                            }
                        }
                        let line = format!(
                            "pod {key} uid={} on {node}: phase={} deleting={}",
                            &uid[..uid.len().min(8)],
                            p.status
                                .as_ref()
                                .and_then(|s| s.phase.clone())
                                .unwrap_or_default(),
                            p.metadata.deletion_timestamp.is_some()
                        );
                        if last.insert(format!("{key}/{uid}"), line.clone()).as_ref() != Some(&line)
                        {
                            history.log(line);
                        }
                    }
                    Ok(watcher::Event::Delete(p)) => {
                        history.log(format!(
                            "pod {}/{} on {} gone",
                            p.namespace().unwrap_or_default(),
                            p.name_any(),
                            node_of(&p)
                        ));
                    }
                    Ok(_) => {}
                    Err(e) => history.log(format!("watch error (pods): {e}")),
                }
            }
        }));
    }
    {
        let nms: Api<NodeMaintenance> = Api::all(client.clone());
        let history = history.clone();
        let observed = observed.clone();
        let prefix = format!("{group}-");
        tasks.push(tokio::spawn(async move {
            let mut last: HashMap<String, String> = HashMap::new();
            let mut s = watcher(nms, watcher::Config::default())
                .backoff(watch_backoff())
                .boxed();
            while let Some(ev) = s.next().await {
                match ev {
                    Ok(watcher::Event::Apply(nm) | watcher::Event::InitApply(nm))
                        if nm.name_any().starts_with(&prefix) =>
                    {
                        let st = nm.status.clone().unwrap_or_default();
                        let line = format!(
                            "nm {} (node {}): phase={:?} progress={:?} blockers={} deleting={} finalizers={:?} lastError={:?}",
                            nm.name_any(),
                            nm.spec.node_name,
                            st.phase,
                            st.drain_progress,
                            st.blockers.as_ref().map_or(0, Vec::len),
                            nm.metadata.deletion_timestamp.is_some(),
                            nm.metadata.finalizers.clone().unwrap_or_default(),
                            st.last_error
                        );
                        if last.insert(nm.name_any(), line.clone()).as_ref() != Some(&line) {
                            history.log(line);
                        }
                    }
                    Ok(watcher::Event::Delete(nm)) if nm.name_any().starts_with(&prefix) => {
                        observed
                            .nm_gone
                            .lock()
                            .unwrap()
                            .insert(nm.name_any(), jiff::Timestamp::now());
                        history.log(format!("nm {} (node {}) gone", nm.name_any(), nm.spec.node_name));
                    }
                    Ok(_) => {}
                    Err(e) => history.log(format!("watch error (nms): {e}")),
                }
            }
        }));
    }
    {
        let leases: Api<Lease> = Api::namespaced(client.clone(), "medik8s-leases");
        let history = history.clone();
        let prefix = format!("node-{group}-");
        tasks.push(tokio::spawn(async move {
            let mut last: HashMap<String, String> = HashMap::new();
            let mut s = watcher(leases, watcher::Config::default())
                .backoff(watch_backoff())
                .boxed();
            while let Some(ev) = s.next().await {
                match ev {
                    Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l))
                        if l.name_any().starts_with(&prefix) =>
                    {
                        let spec = l.spec.clone().unwrap_or_default();
                        let line = format!(
                            "lease {}: holder={:?} duration={:?}",
                            l.name_any(),
                            spec.holder_identity,
                            spec.lease_duration_seconds
                        );
                        if last.insert(l.name_any(), line.clone()).as_ref() != Some(&line) {
                            history.log(line);
                        }
                    }
                    Ok(watcher::Event::Delete(l)) if l.name_any().starts_with(&prefix) => {
                        history.log(format!("lease {} deleted", l.name_any()));
                    }
                    Ok(_) => {}
                    Err(e) => history.log(format!("watch error (leases): {e}")),
                }
            }
        }));
    }
    tasks
}

// ------------------------------------------------------------------------------------------
// Workloads
// ------------------------------------------------------------------------------------------

async fn create_workloads(
    cluster: &Cluster,
    client: &Client,
    ns: &str,
    group: &str,
    nodes: &[String],
    plan: &Plan,
) {
    deployment(client, ns, "web", group, 2 * nodes.len() as i32, 0).await;
    let ds: k8s_openapi::api::apps::v1::DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {
                    "nodeSelector": {"nmo-test": group},
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]
                }
            }
        }
    }))
    .unwrap();
    Api::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &ds)
        .await
        .unwrap();
    let sts: k8s_openapi::api::apps::v1::StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "db"},
        "spec": {
            "replicas": 2,
            "serviceName": "db",
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {"labels": {"app": "db"}},
                "spec": {
                    "nodeSelector": {"nmo-test": group},
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]
                }
            }
        }
    }))
    .unwrap();
    Api::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &sts)
        .await
        .unwrap();
    let pdb: k8s_openapi::api::policy::v1::PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "db"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "db"}}}
    }))
    .unwrap();
    Api::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pdb)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut bare: Vec<(String, usize, bool)> = plan
        .bare_on
        .iter()
        .map(|i| (format!("solo-{i}"), *i, false))
        .collect();
    bare.push(("held".into(), plan.held_on, true));
    for (name, i, held) in bare {
        let mut pod = json!({
            "metadata": {"name": name, "labels": {"app": "bare"}},
            "spec": {
                "nodeName": nodes[i],
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]
            }
        });
        if held {
            pod["metadata"]["finalizers"] = json!([HOLD_FINALIZER]);
        }
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(pod).unwrap(),
        )
        .await
        .unwrap();
    }
    let expected = 2 * nodes.len() + nodes.len() + 2 + plan.bare_on.len() + 1;
    let all_running = || async {
        let all = pods
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let live = all.items.iter().filter(|p| running(p)).count();
        if live == expected {
            Ok(())
        } else {
            Err(format!("{live} of {} Running", all.items.len()))
        }
    };
    let what = format!("{expected} Running pods in {ns}");
    if let Err(seen) = poll_until(KWOK_STALL, all_running).await {
        // kwok (0.8) now and then stops watching pods after an API server restart or an etcd
        // pause and never resumes (see `Fault::RestartApiserver`), even when restarted right
        // after the fault. Setting up a round happens before any maintenance of it, so a
        // stalled simulator is restarted here rather than failing the whole run.
        // A component that exited (kube-scheduler does on a cache inconsistency after an API
        // server restart) is started again first, as a kubelet would. The scheduler and the
        // controller-manager can also stall there without exiting (seed 389325: 14 of 19 pods
        // Running 120 s after kwok alone was restarted), so they are restarted with kwok; none of
        // them elects a leader here, so a restart resumes at once.
        let revived = cluster.revive_exited().unwrap();
        eprintln!(
            "chaos: {what}: {seen} after {KWOK_STALL:?}; restarted {revived:?}, the scheduler, \
             the controller-manager and kwok"
        );
        for component in ["kube-scheduler", "kube-controller-manager", "kwok"] {
            tokio::task::block_in_place(|| {
                cluster.restart_component(component, Duration::ZERO, LIMIT)
            })
            .unwrap();
        }
    }
    wait_for(&what, LIMIT, all_running).await;
}

/// How long before a kube-apiserver restart's recorded start an eviction it never answered may
/// have been received and still count as in flight at the kill: the start is stamped just before
/// the SIGKILL, and an eviction takes milliseconds to serve (a second on a loaded machine).
const IN_FLIGHT_AT_KILL: jiff::SignedDuration = jiff::SignedDuration::from_secs(1);

/// Why the checker may excuse (f) for `pod` of a maintenance that said Succeeded at `succeeded`
/// without an accepted eviction of it in the audit log: kube-apiserver writes an eviction's
/// answer to the log after it answered, so a SIGKILLed server loses the answers of the requests
/// it was completing; the RequestReceived event, written before the request is served, stays.
/// Only a pod with such an unanswered eviction (in `unanswered`, name and receipt time),
/// received inside a kube-apiserver restart (from [`IN_FLIGHT_AT_KILL`] before its start to its
/// end) and before `succeeded`, is excused: returns when the eviction was received and the
/// restart's window. Any other pod of the maintenance, even one whose maintenance overlapped a
/// restart, is not.
fn excused_by_restart(
    pod: &str,
    succeeded: jiff::Timestamp,
    unanswered: &[(String, jiff::Timestamp)],
    windows: &[FaultWindow],
) -> Option<(jiff::Timestamp, (jiff::Timestamp, jiff::Timestamp))> {
    unanswered
        .iter()
        .filter(|(name, received)| name == pod && *received <= succeeded)
        .find_map(|(_, received)| {
            windows
                .iter()
                .find(|(kind, began, ended)| {
                    *kind == "RestartApiserver"
                        && *began - IN_FLIGHT_AT_KILL <= *received
                        && *received <= *ended
                })
                .map(|(_, began, ended)| (*received, (*began, *ended)))
        })
}

/// Whether an audited eviction may have evicted its pod: accepted (2xx), or of unknown outcome
/// (5xx: the server may have deleted the pod and failed the answer, as a 504 after a slow etcd
/// write does). A 4xx eviction was refused and changed nothing.
fn possibly_effective(code: u16) -> bool {
    (200..300).contains(&code) || code >= 500
}

/// Whether a drain has to evict `pod` (kubectl's drain with `--ignore-daemonsets`, as the
/// operator drains): not owned by a DaemonSet and not finished. The round's pods tolerate
/// neither maintenance taint, so none is skipped for that.
fn evictable(pod: &Pod) -> bool {
    let daemon = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.kind == "DaemonSet");
    let finished = matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    );
    !daemon && !finished
}

/// What keeps `node` from being in the state a Succeeded maintenance promises: `Ok(None)` when
/// it is cordoned, carries both maintenance taints and no pod a drain has to evict is bound to
/// it (a terminating one counts: the drain waits until it is gone); `Ok(Some(what))` names what
/// differs; `Err` when the API could not be read.
async fn drained_state(client: &Client, node: &str) -> Result<Option<String>, String> {
    let n = Api::<Node>::all(client.clone())
        .get(node)
        .await
        .map_err(|e| e.to_string())?;
    let st = node_state(&n);
    let mut wrong = Vec::new();
    if !st.unschedulable {
        wrong.push("not cordoned".to_string());
    }
    for taint in [
        "medik8s.io/drain=:NoSchedule",
        "node.kubernetes.io/unschedulable=:NoSchedule",
    ] {
        if !st.taints.contains(taint) {
            wrong.push(format!("lacks taint {taint} (has {:?})", st.taints));
        }
    }
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .map_err(|e| e.to_string())?;
    let left: Vec<String> = pods
        .iter()
        .filter(|p| evictable(p))
        .map(|p| {
            format!(
                "{}/{} (deleting={})",
                p.namespace().unwrap_or_default(),
                p.name_any(),
                p.metadata.deletion_timestamp.is_some()
            )
        })
        .collect();
    if !left.is_empty() {
        wrong.push(format!("pods left to evict: {left:?}"));
    }
    Ok((!wrong.is_empty()).then(|| wrong.join("; ")))
}

/// Polls `check` every 200 ms until it returns `Ok`, or returns its last `Err` after `limit`.
async fn poll_until<F, Fut>(limit: Duration, mut check: F) -> Result<(), String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let deadline = std::time::Instant::now() + limit;
    loop {
        match check().await {
            Ok(()) => return Ok(()),
            Err(seen) if std::time::Instant::now() > deadline => return Err(seen),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The parts of a node that (c) compares.
#[derive(Clone, Debug, PartialEq)]
struct NodeState {
    unschedulable: bool,
    taints: BTreeSet<String>,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
}

/// Taints the node-lifecycle controller adds while a kwok heartbeat is late (etcd paused, API
/// server down); they come and go with the cluster's health, not with maintenance.
fn health_taint(key: &str) -> bool {
    matches!(
        key,
        "node.kubernetes.io/not-ready" | "node.kubernetes.io/unreachable"
    )
}

fn node_state(n: &Node) -> NodeState {
    let spec = n.spec.clone().unwrap_or_default();
    NodeState {
        unschedulable: spec.unschedulable.unwrap_or(false),
        taints: spec
            .taints
            .unwrap_or_default()
            .into_iter()
            .filter(|t| !health_taint(&t.key))
            .map(|t| format!("{}={}:{}", t.key, t.value.unwrap_or_default(), t.effect))
            .collect(),
        labels: n.labels().clone(),
        annotations: n.annotations().clone(),
    }
}

// ------------------------------------------------------------------------------------------
// One round
// ------------------------------------------------------------------------------------------

struct Violation {
    invariant: &'static str,
    subject: String,
    detail: String,
}

/// Runs the round of `seed`; returns the violations found (empty: all invariants held).
async fn round(seed: u64) -> Vec<String> {
    let plan = Plan::generate(seed);
    let e = env();
    let cluster = &e.cluster;
    let client = cluster.client().await;
    let group = unique(&format!("chaos{seed}"));
    eprintln!(
        "chaos: round seed={} group={group} plan={plan:?}",
        plan.seed
    );
    let history = Arc::new(History::default());
    let observed = Arc::new(Observed::default());
    let nodes = worker_nodes(cluster, &client, &group, ROUND_NODES).await;
    let ns = namespace(&client, "chaos").await;
    let watches = spawn_watches(&client, &group, &ns, history.clone(), observed.clone());
    let node_api: Api<Node> = Api::all(client.clone());
    // A control-plane component that exited during an earlier round's faults is started again,
    // as a kubelet would, before this round depends on it.
    let revived = cluster.revive_exited().unwrap();
    if !revived.is_empty() {
        history.log(format!(
            "control-plane components restarted after exiting: {revived:?}"
        ));
    }

    cluster
        .kubectl_run(&["cordon", &nodes[plan.admin_cordoned]], None)
        .unwrap();
    cluster
        .kubectl_run(
            &[
                "taint",
                "node",
                &nodes[plan.admin_tainted],
                &format!("{ADMIN_TAINT}=keep:NoSchedule"),
            ],
            None,
        )
        .unwrap();
    create_workloads(cluster, &client, &ns, &group, &nodes, &plan).await;
    let mut expected: BTreeMap<String, NodeState> = BTreeMap::new();
    for n in &nodes {
        expected.insert(n.clone(), node_state(&node_api.get(n).await.unwrap()));
    }
    // The pods a maintenance of each node has to evict before it may say Succeeded (f).
    let mut baseline_pods: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in Api::<Pod>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        if evictable(&p) {
            baseline_pods
                .entry(node_of(&p).to_string())
                .or_default()
                .push(p.name_any());
        }
    }
    history.log(format!(
        "baseline taken for {nodes:?}; pods to evict: {baseline_pods:?}"
    ));

    let replicas = Arc::new(Mutex::new(Replicas {
        running: Vec::new(),
        leader_elect: plan.leader_elect(),
        json_node_watch: false,
    }));
    let webhook_replica = tokio::task::block_in_place(|| {
        let mut r = replicas.lock().unwrap();
        let first = format!("{group}-a");
        r.start(&first).unwrap();
        if !r.leader_elect {
            r.serve_webhook(&first);
            return first;
        }
        let second = format!("{group}-b");
        r.start(&second).unwrap();
        let deadline = Instant::now() + LIMIT;
        let leader = loop {
            if let Some(l) = r.leader() {
                break l;
            }
            assert!(Instant::now() < deadline, "no replica became leader");
            std::thread::sleep(Duration::from_millis(200));
        };
        // The webhook goes to the standby, so a SIGSTOPped leader does not also stop admission.
        let standby = if leader == first { second } else { first };
        r.serve_webhook(&standby);
        standby
    });
    history.log(format!(
        "operator replicas started; webhook served by {webhook_replica}"
    ));

    // The scenario, from t0.
    let t0 = Instant::now();
    let records: Arc<Mutex<BTreeMap<String, NmRecord>>> = Arc::default();
    let relaxed = Arc::new(tokio::sync::Notify::new());
    let relaxed_flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let violations: Arc<Mutex<Vec<Violation>>> = Arc::default();
    // Each fault's kind and when it began and ended.
    let fault_windows: Arc<Mutex<Vec<FaultWindow>>> = Arc::default();
    let mut tasks = Vec::new();

    for (i, lc) in plan.lifecycles.iter().cloned().enumerate() {
        let client = client.clone();
        let node = nodes[i].clone();
        let history = history.clone();
        let records = records.clone();
        let relaxed = relaxed.clone();
        let relaxed_flag = relaxed_flag.clone();
        let violations = violations.clone();
        tasks.push(tokio::spawn(async move {
            let name = format!("{node}-nm");
            let api = Api::<NodeMaintenance>::all(client.clone());
            tokio::time::sleep(lc.create_at.saturating_sub(t0.elapsed())).await;
            records.lock().unwrap().insert(
                name.clone(),
                NmRecord {
                    node: node.clone(),
                    created: Some(jiff::Timestamp::now()),
                    ..NmRecord::default()
                },
            );
            let created = retry(&format!("create {name}"), || async {
                match api.create(&PostParams::default(), &nm::new(&name, &node, "chaos")).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                    Err(e) => Err(e.to_string()),
                }
            })
            .await;
            if let Err(e) = created {
                history.log(format!("driver: {e}"));
                violations.lock().unwrap().push(Violation {
                    invariant: "setup",
                    subject: node.clone(),
                    detail: e,
                });
                return;
            }
            history.log(format!("driver: created nm {name} for node {node}"));
            match lc.end {
                End::Early(after) => tokio::time::sleep(after).await,
                End::AfterSucceeded => {
                    let wake = relaxed.notified();
                    if !relaxed_flag.load(std::sync::atomic::Ordering::SeqCst) {
                        wake.await;
                    }
                    let done = retry(&format!("{name} Succeeded"), || async {
                        let nm = api.get(&name).await.map_err(|e| e.to_string())?;
                        let st = nm.status.unwrap_or_default();
                        if st.phase == Some(MaintenancePhase::Succeeded) {
                            Ok(jiff::Timestamp::now())
                        } else {
                            Err(format!("{st:?}"))
                        }
                    })
                    .await;
                    match done {
                        Ok(at) => {
                            // The phase says Succeeded and only this task deletes the
                            // NodeMaintenance, so the node must be drained right now.
                            let seen = retry(&format!("node {node} read"), || {
                                drained_state(&client, &node)
                            })
                            .await;
                            history.log(format!(
                                "driver: {name} Succeeded; node {node}: {seen:?}"
                            ));
                            match seen {
                                Ok(None) => {
                                    records.lock().unwrap().get_mut(&name).unwrap().succeeded =
                                        Some(at);
                                }
                                Ok(Some(why)) | Err(why) => {
                                    violations.lock().unwrap().push(Violation {
                                        invariant: "(e) while the phase is Succeeded the node is cordoned, tainted and drained",
                                        subject: node.clone(),
                                        detail: why,
                                    });
                                }
                            }
                        }
                        Err(e) => {
                            violations.lock().unwrap().push(Violation {
                                invariant: "(e) a maintenance whose blockers were removed reaches Succeeded",
                                subject: node.clone(),
                                detail: e,
                            });
                        }
                    }
                }
            }
            let deleted = retry(&format!("delete {name}"), || async {
                match api.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                    Err(e) => Err(e.to_string()),
                }
            })
            .await;
            records.lock().unwrap().get_mut(&name).unwrap().deleted = Some(jiff::Timestamp::now());
            history.log(format!("driver: deleted nm {name} ({deleted:?})"));
        }));
    }

    {
        // Budget tightened, then every blocker removed.
        let client = client.clone();
        let ns = ns.clone();
        let history = history.clone();
        let plan = plan.clone();
        let relaxed = relaxed.clone();
        let relaxed_flag = relaxed_flag.clone();
        tasks.push(tokio::spawn(async move {
            let pdbs = Api::<k8s_openapi::api::policy::v1::PodDisruptionBudget>::namespaced(
                client.clone(),
                &ns,
            );
            let set = |max: i32| {
                let pdbs = pdbs.clone();
                async move {
                    retry("patch budget", || async {
                        pdbs.patch(
                            "db",
                            &PatchParams::default(),
                            &Patch::Merge(json!({"spec": {"maxUnavailable": max}})),
                        )
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                    })
                    .await
                }
            };
            if let Some(at) = plan.tighten_at {
                tokio::time::sleep(at.saturating_sub(t0.elapsed())).await;
                let r = set(0).await;
                history.log(format!(
                    "driver: budget db tightened to maxUnavailable 0 ({r:?})"
                ));
            }
            tokio::time::sleep(plan.relax_at.saturating_sub(t0.elapsed())).await;
            let r = set(2).await;
            history.log(format!(
                "driver: budget db relaxed to maxUnavailable 2 ({r:?})"
            ));
            // The API server refuses evictions by the budget's status, which the disruption
            // controller writes: (e)'s wait starts once the cluster allows, and the history says
            // when that was (after an API server restart it has taken minutes). A budget with no
            // healthy pod left (both evicted before the relax) allows none and holds none: its
            // status never changes, so waiting for an allowance would wait out the limit.
            let allows = retry("budget db allows evictions", || async {
                let p = pdbs.get("db").await.map_err(|e| e.to_string())?;
                let st = p.status.clone().unwrap_or_default();
                if st.observed_generation == p.metadata.generation
                    && (st.disruptions_allowed.unwrap_or(0) > 0
                        || st.current_healthy.unwrap_or(0) == 0)
                {
                    Ok(st.disruptions_allowed.unwrap_or(0))
                } else {
                    Err(format!("{st:?}"))
                }
            })
            .await;
            history.log(format!(
                "driver: budget db status after the relax: disruptionsAllowed {allows:?}"
            ));
            let pods = Api::<Pod>::namespaced(client.clone(), &ns);
            let r = retry("release held pod", || async {
                match pods
                    .patch(
                        "held",
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                    )
                    .await
                {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                    Err(e) => Err(e.to_string()),
                }
            })
            .await;
            history.log(format!(
                "driver: finalizer of pod {ns}/held removed ({r:?})"
            ));
            relaxed_flag.store(true, std::sync::atomic::Ordering::SeqCst);
            relaxed.notify_waiters();
        }));
    }

    {
        // Admin label on a node while it is in maintenance: must survive the restore.
        let (i, at) = plan.admin_label;
        let node = nodes[i].clone();
        let node_api = node_api.clone();
        let history = history.clone();
        expected
            .get_mut(&node)
            .unwrap()
            .labels
            .insert(ADMIN_LABEL.into(), "seen".into());
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(at.saturating_sub(t0.elapsed())).await;
            let r = retry("admin label", || async {
                node_api
                    .patch(
                        &node,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"labels": {ADMIN_LABEL: "seen"}}})),
                    )
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
            .await;
            history.log(format!(
                "driver: admin labelled node {node} {ADMIN_LABEL}=seen ({r:?})"
            ));
        }));
    }

    {
        // Faults, one after another.
        let history = history.clone();
        let replicas = replicas.clone();
        let faults = plan.faults.clone();
        let webhook_replica = webhook_replica.clone();
        let group = group.clone();
        let violations = violations.clone();
        let windows = fault_windows.clone();
        tasks.push(tokio::spawn(async move {
            for (at, fault) in faults {
                tokio::time::sleep(at.saturating_sub(t0.elapsed())).await;
                history.log(format!("fault: {fault:?} begins"));
                let began = jiff::Timestamp::now();
                let replicas = replicas.clone();
                let webhook_replica = webhook_replica.clone();
                let group = group.clone();
                let outcome = tokio::task::spawn_blocking(move || {
                    inject(fault, &replicas, &webhook_replica, &group)
                })
                .await
                .unwrap_or_else(|e| Err(format!("panicked: {e}")));
                history.log(format!("fault: {fault:?} ends: {outcome:?}"));
                windows
                    .lock()
                    .unwrap()
                    .push((fault.kind(), began, jiff::Timestamp::now()));
                {
                    let mut counts = FAULT_COUNTS.lock().unwrap();
                    let c = counts.entry(fault.kind()).or_default();
                    c.0 += 1;
                    c.1 += usize::from(outcome.is_ok());
                }
                if let Err(e) = outcome {
                    violations.lock().unwrap().push(Violation {
                        invariant: "(g) every planned fault happened",
                        subject: "fault".into(),
                        detail: format!("{fault:?}: {e}"),
                    });
                }
            }
        }));
    }

    for t in tasks {
        t.await.unwrap();
    }

    // Settle: every NodeMaintenance gone (d), then every node as expected (c).
    let mut found: Vec<Violation> = std::mem::take(&mut *violations.lock().unwrap());
    let nm_api = Api::<NodeMaintenance>::all(client.clone());
    let names: Vec<String> = records.lock().unwrap().keys().cloned().collect();
    // One deadline for the whole settling, so a round with several stuck nodes fails in
    // SETTLE, not in SETTLE per node.
    let settle_by = Instant::now() + SETTLE;
    for name in &names {
        let gone = retry_until(settle_by, &format!("{name} gone"), || async {
            match nm_api.get_opt(name).await.map_err(|e| e.to_string())? {
                None => Ok(()),
                Some(nm) => Err(format!(
                    "finalizers {:?}, status {:?}",
                    nm.metadata.finalizers, nm.status
                )),
            }
        })
        .await;
        if let Err(e) = gone {
            found.push(Violation {
                invariant: "(d) no NodeMaintenance stuck with a finalizer",
                subject: name.trim_end_matches("-nm").to_string(),
                detail: e,
            });
        }
    }
    let leases = Api::<Lease>::namespaced(client.clone(), "medik8s-leases");
    for n in &nodes {
        let want = expected[n].clone();
        let settled = retry_until(settle_by, &format!("node {n} restored"), || async {
            let now = node_state(&node_api.get(n).await.map_err(|e| e.to_string())?);
            let lease = leases
                .get_opt(&format!("node-{n}"))
                .await
                .map_err(|e| e.to_string())?;
            let holder = lease
                .and_then(|l| l.spec)
                .and_then(|s| s.holder_identity)
                .unwrap_or_default();
            if now == want && holder != "node-maintenance" {
                Ok(())
            } else {
                Err(format!(
                    "lease holder {holder:?}; state differs: {}",
                    diff(&want, &now)
                ))
            }
        })
        .await;
        if let Err(e) = settled {
            found.push(Violation {
                invariant: "(c) nodes restored to their state before maintenance",
                subject: n.clone(),
                detail: e,
            });
        }
    }

    // Evictions (a), (b), (f), from the audit log.
    let mut cursor = AuditCursor::new(cluster.audit_log_path());
    let audited: Vec<_> = match cursor.read() {
        Ok(all) => all.into_iter().filter(|ev| ev.namespace == ns).collect(),
        Err(e) => {
            found.push(Violation {
                invariant: "(f) the audit log can be read",
                subject: "audit".into(),
                detail: e.to_string(),
            });
            Vec::new()
        }
    };
    let evictions: Vec<_> = audited
        .iter()
        .filter(|ev| ev.subresource == "eviction" && ev.stage == RESPONSE_COMPLETE)
        .collect();
    // Evictions the API server received and never answered in its log: in flight when it was
    // killed (its RequestReceived event is written before the request is served).
    let answered: BTreeSet<&str> = evictions.iter().map(|ev| ev.audit_id.as_str()).collect();
    let unanswered: Vec<(String, jiff::Timestamp)> = audited
        .iter()
        .filter(|ev| {
            ev.subresource == "eviction"
                && ev.stage == REQUEST_RECEIVED
                && !answered.contains(ev.audit_id.as_str())
        })
        .map(|ev| (ev.name.clone(), ev.received))
        .collect();
    for (pod, at) in &unanswered {
        history.log_at(
            *at,
            format!("eviction of pod {ns}/{pod} received, its answer never audited"),
        );
    }
    let records = records.lock().unwrap().clone();
    let gone = observed.nm_gone.lock().unwrap().clone();
    let mut pods = observed.pods.lock().unwrap().clone();
    // The scheduler's bindings place a pod on its node even when the pod watch was away at the
    // time (reconnecting after a kube-apiserver restart) and never saw it there (seed 430447).
    let bindings = audited
        .iter()
        .filter(|ev| ev.subresource == "binding" && (200..300).contains(&ev.code));
    for b in bindings {
        let incs = pods
            .entry(format!("{}/{}", b.namespace, b.name))
            .or_default();
        match incs.iter_mut().find(|i| i.uid == b.request_uid) {
            Some(i) => i.seen = i.seen.min(b.received),
            None => incs.push(Incarnation {
                uid: b.request_uid.clone(),
                node: b.target.clone(),
                seen: b.received,
            }),
        }
        incs.sort_by_key(|i| i.seen);
    }
    for ev in &evictions {
        let key = format!("{}/{}", ev.namespace, ev.name);
        let node = pods
            .get(&key)
            .and_then(|incs| {
                incs.iter()
                    .rev()
                    .find(|i| i.seen <= ev.received)
                    .or(incs.first())
            })
            .map(|i| i.node.clone())
            .unwrap_or_default();
        history.log_at(
            ev.received,
            format!(
                "eviction of pod {key} on {node} by {} answered {}",
                ev.user, ev.code
            ),
        );
        if !possibly_effective(ev.code) {
            continue;
        }
        let nm = records.iter().find(|(_, r)| r.node == node);
        let in_maintenance = nm.is_some_and(|(name, r)| {
            r.created.is_some_and(|c| c <= ev.received)
                && gone.get(name).is_none_or(|g| ev.received <= *g)
        });
        if !in_maintenance {
            found.push(Violation {
                invariant: "(a) no eviction of a pod on a node without a NodeMaintenance",
                subject: node.clone(),
                detail: format!("pod {key} evicted at {}", ev.received),
            });
            continue;
        }
        if let Some((name, r)) = nm
            && let Some(deleted) = r.deleted
            && ev.received > deleted + IN_FLIGHT_GRACE
        {
            found.push(Violation {
                invariant: "(b) no eviction after the NodeMaintenance's deletion",
                subject: node.clone(),
                detail: format!(
                    "pod {key} evicted at {}, {name} deleted by {deleted}",
                    ev.received
                ),
            });
        }
    }
    if evictions.is_empty() && !records.is_empty() {
        found.push(Violation {
            invariant: "(f) a round with maintenances has audited evictions",
            subject: "audit".into(),
            detail: format!(
                "{} NodeMaintenances, {} audited requests in {ns}, none an eviction",
                records.len(),
                audited.len()
            ),
        });
    }
    let windows = fault_windows.lock().unwrap().clone();
    for (name, r) in &records {
        let Some(succeeded) = r.succeeded else {
            continue;
        };
        let missing: Vec<&String> = baseline_pods
            .get(&r.node)
            .into_iter()
            .flatten()
            .filter(|pod| {
                !evictions.iter().any(|ev| {
                    ev.name == **pod && possibly_effective(ev.code) && ev.received <= succeeded
                })
            })
            .collect();
        // Each pod on its own: a pod is excused only when its eviction was in flight when
        // kube-apiserver was killed (see `excused_by_restart`); the node check (e) still
        // applies. Every other pod of the maintenance needs its accepted eviction in the log.
        let (excused, missing): (Vec<&String>, Vec<&String>) = missing
            .into_iter()
            .partition(|pod| excused_by_restart(pod, succeeded, &unanswered, &windows).is_some());
        for pod in &excused {
            let (received, (began, ended)) =
                excused_by_restart(pod, succeeded, &unanswered, &windows).unwrap();
            history.log(format!(
                "checker: {name}: no answered eviction audited for {pod}, excused: its eviction was received at {received} and never answered, inside the kube-apiserver restart {began}..{ended}"
            ));
        }
        if !missing.is_empty() {
            found.push(Violation {
                invariant: "(f) Succeeded only after every pod of the node was evicted",
                subject: r.node.clone(),
                detail: format!(
                    "{name} Succeeded at {succeeded}; no accepted eviction audited before that for {missing:?} (excused, in flight at a kube-apiserver kill: {excused:?})"
                ),
            });
        }
    }
    history.log(format!(
        "round done in {:.1} s: {} evictions audited",
        t0.elapsed().as_secs_f64(),
        evictions.len()
    ));

    for w in watches {
        w.abort();
    }
    // Teardown: operators stopped, nodes and namespace removed.
    tokio::task::block_in_place(|| replicas.lock().unwrap().running.clear());
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let _ = pods
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await;
    let _ = cluster.kubectl_run(&["delete", "namespace", &ns, "--wait=false"], None);
    for n in &nodes {
        let _ = node_api.delete(n, &DeleteParams::default()).await;
    }

    let ended = t0.elapsed();
    eprintln!(
        "chaos: round seed={seed} ended after {:.1} s with {} violation(s), {} evictions audited \
         ({} received, {} of them never answered)",
        ended.as_secs_f64(),
        found.len(),
        evictions.len(),
        audited
            .iter()
            .filter(|ev| ev.subresource == "eviction" && ev.stage == REQUEST_RECEIVED)
            .count(),
        unanswered.len()
    );
    found
        .into_iter()
        .map(|v| {
            format!(
                "INVARIANT VIOLATED {} on {} (seed {seed}; replay: NMO_CHAOS_SEED={seed} cargo test --test chaos -- --nocapture)\n  {}\n history of {}:\n{}",
                v.invariant,
                v.subject,
                v.detail,
                v.subject,
                history.about(&v.subject)
            )
        })
        .collect()
}

fn diff(want: &NodeState, now: &NodeState) -> String {
    let mut out = Vec::new();
    if want.unschedulable != now.unschedulable {
        out.push(format!(
            "unschedulable {} (want {})",
            now.unschedulable, want.unschedulable
        ));
    }
    if want.taints != now.taints {
        out.push(format!("taints {:?} (want {:?})", now.taints, want.taints));
    }
    for (what, w, n) in [
        ("labels", &want.labels, &now.labels),
        ("annotations", &want.annotations, &now.annotations),
    ] {
        let extra: Vec<_> = n.iter().filter(|(k, v)| w.get(*k) != Some(v)).collect();
        let missing: Vec<_> = w.iter().filter(|(k, v)| n.get(*k) != Some(v)).collect();
        if !extra.is_empty() || !missing.is_empty() {
            out.push(format!("{what}: has {extra:?}, lacks {missing:?}"));
        }
    }
    out.join("; ")
}

/// Carries out one fault (blocking: processes are killed, started and awaited).
fn inject(
    fault: Fault,
    replicas: &Mutex<Replicas>,
    webhook_replica: &str,
    group: &str,
) -> Result<String, String> {
    let cluster = &env().cluster;
    match fault {
        Fault::KillOperator { down } => {
            let mut r = replicas.lock().unwrap();
            let name = format!("{group}-a");
            if let Some(s) = r.get(&name).process().exited() {
                return Err(format!(
                    "{name} had already exited ({s}) when it was to be killed"
                ));
            }
            r.get(&name).process().kill();
            std::thread::sleep(down);
            r.start(&name)?;
            if name == webhook_replica {
                r.serve_webhook(&name);
            }
            Ok(format!("{name} killed and restarted"))
        }
        Fault::StopLeader { extra } => {
            let mut r = replicas.lock().unwrap();
            let leader = r.leader().ok_or("no leader")?;
            let standby = r
                .running
                .iter()
                .map(|(n, _)| n.clone())
                .find(|n| *n != leader)
                .ok_or("no standby")?;
            let acquired = |r: &mut Replicas| {
                r.get(&standby)
                    .log()
                    .matches("successfully acquired lease")
                    .count()
            };
            let standby_terms = acquired(&mut r);
            let pid = r.get(&leader).process().pid();
            r.get(&leader).process().pause();
            std::thread::sleep(LEADER_LEASE + extra);
            r.get(&leader).process().resume();
            // A replica that finds its leadership lost exits; Kubernetes would restart it.
            let deadline = Instant::now() + Duration::from_secs(60);
            let status = loop {
                if let Some(s) = r.get(&leader).process().exited() {
                    break s.to_string();
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "{leader} (pid {pid}) still running 60 s after SIGCONT"
                    ));
                }
                std::thread::sleep(Duration::from_millis(100));
            };
            let log = r.get(&leader).log();
            if !log.contains("leader election lost") {
                return Err(format!(
                    "{leader} (pid {pid}) exited ({status}) without losing its term"
                ));
            }
            // The fault is a leader that lost its term to another replica, not one that only
            // slept: the standby must have taken over.
            let deadline = Instant::now() + Duration::from_secs(60);
            while acquired(&mut r) == standby_terms {
                if Instant::now() > deadline {
                    return Err(format!(
                        "{standby} did not take over from the stopped {leader} within 60 s"
                    ));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            r.start(&leader)?;
            Ok(format!(
                "{leader} (pid {pid}) stopped, resumed, lost its term to {standby}, exited ({status}), restarted as standby"
            ))
        }
        Fault::RestartApiserver { down } => {
            cluster
                .restart_component("kube-apiserver", down, LIMIT)
                .map_err(|e| e.to_string())?;
            // kwok (0.8) now and then stops its pod and node watches when the API server goes
            // away and never starts them again (its last log line: "Stop watch pods"); then no
            // pod on a later round's nodes becomes Running. A kubelet reconnects; restarting
            // kwok stands in for that.
            cluster
                .restart_component("kwok", Duration::ZERO, LIMIT)
                .map_err(|e| e.to_string())?;
            Ok("kube-apiserver restarted (kwok restarted after it)".into())
        }
        Fault::PauseEtcd { pause } => {
            cluster.pause_component("etcd").map_err(|e| e.to_string())?;
            let pid = cluster.component_pid("etcd").map_err(|e| e.to_string())?;
            // SIGSTOP is delivered asynchronously; the fault happened once the kernel shows the
            // process stopped ('T' in /proc/<pid>/stat).
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                let state = process_state(pid);
                if state == Some('T') {
                    break;
                }
                if Instant::now() > deadline {
                    let _ = cluster.resume_component("etcd");
                    return Err(format!("etcd (pid {pid}) not stopped: state {state:?}"));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            std::thread::sleep(pause);
            cluster
                .resume_component("etcd")
                .map_err(|e| e.to_string())?;
            Ok("etcd resumed".into())
        }
        Fault::SwapCerts => {
            let new = swap_serving_pair(cluster, webhook_replica).map_err(|e| e.to_string())?;
            let want = certificate_der(&new)?;
            let port = replicas.lock().unwrap().get(webhook_replica).webhook_port;
            // The fault happened once the webhook serves the new certificate (hot reload).
            let deadline = Instant::now() + CERT_RELOAD;
            loop {
                let served = served_certificate(cluster, port);
                if served.as_ref() == Ok(&want) {
                    return Ok(format!(
                        "serving pair of {webhook_replica} replaced and served"
                    ));
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "{webhook_replica} still did not serve the new certificate {CERT_RELOAD:?} after the swap: {}",
                        served.map_or_else(|e| e, |_| "the old certificate".into())
                    ));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// The state letter of process `pid` (`R`, `S`, `T` for stopped, ...), from `/proc/<pid>/stat`.
fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces: the state follows the last ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// The seeds to run: `NMO_CHAOS_SEED` alone; else the [`KNOWN_SEEDS`] (none with
/// `NMO_CHAOS_SEEDS=random`), the [`OPEN_SEEDS`] with `NMO_CHAOS_OPEN=1`, then one fresh seed
/// for each fault kind the seeds so far do not inject, then fresh seeds until there are enough
/// rounds for `NMO_CHAOS_LIFECYCLES` (default: no more). Fresh seeds are random, new every run,
/// and named before the run, so a violation can be replayed.
fn seeds() -> Vec<u64> {
    if let Ok(s) = std::env::var("NMO_CHAOS_SEED") {
        return vec![s.parse().expect("NMO_CHAOS_SEED is a number")];
    }
    let rounds = std::env::var("NMO_CHAOS_LIFECYCLES")
        .map(|v| {
            v.parse::<usize>()
                .expect("NMO_CHAOS_LIFECYCLES is a number")
        })
        .map_or(0, |l| l.div_ceil(ROUND_NODES).max(1));
    let random = std::env::var("NMO_CHAOS_SEEDS").is_ok_and(|v| v == "random");
    let open = std::env::var("NMO_CHAOS_OPEN").is_ok_and(|v| v == "1");
    let mut seeds: Vec<u64> = if random {
        Vec::new()
    } else {
        KNOWN_SEEDS.to_vec()
    };
    if open {
        seeds.extend(OPEN_SEEDS.iter().map(|(s, _)| *s));
    }
    add_fresh_seeds(&mut seeds, rounds, &mut fastrand::Rng::new());
    seeds
}

/// Whether `seed` is fresh: neither a regression seed nor an open one.
fn is_fresh(seed: u64) -> bool {
    !KNOWN_SEEDS.contains(&seed) && !OPEN_SEEDS.iter().any(|(o, _)| *o == seed)
}

/// Adds to `seeds` (the regression and open seeds of the run) one fresh seed for each fault kind
/// they do not inject, then one fresh seed if that added none (the given seeds plan every kind),
/// so every run tries at least one scenario never run before, then fresh seeds until there are
/// `rounds`.
fn add_fresh_seeds(seeds: &mut Vec<u64>, rounds: usize, rng: &mut fastrand::Rng) {
    let given = seeds.len();
    for kind in uninjected_kinds(seeds) {
        let residue = FAULT_KINDS.iter().position(|k| *k == kind).unwrap() as u64;
        let s = fresh_seed(rng, Some(residue), seeds);
        seeds.push(s);
    }
    if seeds.len() == given {
        let s = fresh_seed(rng, None, seeds);
        seeds.push(s);
    }
    while seeds.len() < rounds {
        let s = fresh_seed(rng, None, seeds);
        seeds.push(s);
    }
}

/// The fault kinds that no round of `seeds` plans.
fn uninjected_kinds(seeds: &[u64]) -> Vec<&'static str> {
    let planned: BTreeSet<&str> = seeds
        .iter()
        .flat_map(|s| Plan::generate(*s).faults)
        .map(|(_, f)| f.kind())
        .collect();
    FAULT_KINDS
        .into_iter()
        .filter(|k| !planned.contains(k))
        .collect()
}

/// A random seed not in `taken` nor among the known or open ones; with `residue`, one whose
/// primary fault is that kind (`seed % 5`).
fn fresh_seed(rng: &mut fastrand::Rng, residue: Option<u64>, taken: &[u64]) -> u64 {
    loop {
        let s = rng.u64(5..1_000_000);
        let s = residue.map_or(s, |r| s - s % 5 + r);
        let known = KNOWN_SEEDS.contains(&s) || OPEN_SEEDS.iter().any(|(o, _)| *o == s);
        if !known && !taken.contains(&s) {
            return s;
        }
    }
}

/// Serialises this binary's tests that use the control plane: a fault of one would be an
/// unplanned fault in the other's round.
static CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long kube-apiserver stays down in
/// [`deletions_right_after_an_api_server_restart_are_reconciled_promptly`]: long enough that
/// every watch of the operator fails many times (connection refused, then 403 while RBAC syncs,
/// then 410 Expired), as in seeds 708172, 336147 and 658917.
const API_SERVER_DOWN: Duration = Duration::from_secs(15);
/// How soon after their DELETE the NodeMaintenances of that test must be gone. Each watch retries
/// at most 4 s (plus jitter) after an error, so a few errors in a row after the restart still fit;
/// the `Controller`'s shared trigger back-off that these seeds hit slept 30 to 60 s per error.
const PROMPT_AFTER_RESTART: Duration = Duration::from_secs(40);

/// Regression for seeds 708172, 336147 and 658917, without the timing luck of a round: two
/// Succeeded NodeMaintenances deleted as soon as a restarted kube-apiserver is ready again (the
/// operator's watches still failing and backing off) are reconciled, and their nodes restored,
/// within [`PROMPT_AFTER_RESTART`]. The operator runs the JSON Node watch here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletions_right_after_an_api_server_restart_are_reconciled_promptly() {
    let _cluster = CLUSTER.lock().await;
    let e = tokio::task::block_in_place(env);
    let client = e.cluster.client().await;
    let group = unique("apirestart");
    let nodes = worker_nodes(&e.cluster, &client, &group, 2).await;
    // The Node watch in JSON (paged lists, kube's watcher): the rounds cover the protobuf watch
    // across API server restarts, this test the path of API servers before 1.32, whose relist
    // after the restart must also report what vanished.
    let mut replicas = Replicas {
        running: Vec::new(),
        leader_elect: false,
        json_node_watch: true,
    };
    let replica = format!("{group}-a");
    tokio::task::block_in_place(|| {
        replicas.start(&replica).unwrap();
        replicas.serve_webhook(&replica);
    });
    // The Node watch logs its path from its own task, which readiness does not wait for.
    wait_for("the JSON Node watch", LIMIT, || {
        let log = replicas.get(&replica).log();
        async move {
            if log.contains("Node watch: paged JSON lists") {
                Ok(())
            } else {
                Err(format!("the JSON Node watch was not used:\n{log}"))
            }
        }
    })
    .await;
    let names: Vec<String> = nodes.iter().map(|n| format!("{n}-nm")).collect();
    for (name, node) in names.iter().zip(&nodes) {
        nm::create(&client, name, node).await;
    }
    for name in &names {
        nm::wait_phase(&client, name, MaintenancePhase::Succeeded, LIMIT).await;
    }
    tokio::task::block_in_place(|| {
        e.cluster
            .restart_component("kube-apiserver", API_SERVER_DOWN, LIMIT)
            .unwrap();
    });
    let nms = Api::<NodeMaintenance>::all(client.clone());
    for name in &names {
        retry(&format!("delete {name}"), || async {
            nms.delete(name, &DeleteParams::default())
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
        .await
        .unwrap();
    }
    let deleted = Instant::now();
    for (name, node) in names.iter().zip(&nodes) {
        let left = PROMPT_AFTER_RESTART.saturating_sub(deleted.elapsed());
        nm::wait_gone(&client, name, left).await;
        wait_for(&format!("node {node} restored"), left, || {
            node::restored(&client, node)
        })
        .await;
    }
    eprintln!(
        "chaos: NodeMaintenances deleted after a kube-apiserver restart were gone and their nodes \
         restored {:.1} s after the DELETE",
        deleted.elapsed().as_secs_f64()
    );
    tokio::task::block_in_place(|| replicas.running.clear());
    let node_api: Api<Node> = Api::all(client.clone());
    for n in &nodes {
        let _ = node_api.delete(n, &DeleteParams::default()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invariants_hold_under_faults() {
    let _cluster = CLUSTER.lock().await;
    let seeds = seeds();
    let fresh: Vec<&u64> = seeds.iter().filter(|s| is_fresh(**s)).collect();
    eprintln!(
        "chaos: seeds {seeds:?} (fresh this run: {fresh:?}; replay one with NMO_CHAOS_SEED=<seed>)"
    );
    // Every run but a replay tries at least one scenario never run before.
    assert!(
        std::env::var("NMO_CHAOS_SEED").is_ok() || !fresh.is_empty(),
        "no fresh seed among {seeds:?}"
    );
    let started = Instant::now();
    tokio::task::block_in_place(env);
    let mut failures = Vec::new();
    for seed in &seeds {
        let found = round(*seed).await;
        // Printed at once too, so a long run that is cut short still shows what it found.
        for f in &found {
            eprintln!("{f}");
        }
        failures.extend(found);
    }
    eprintln!(
        "chaos: {} rounds, {} lifecycles, {:.0} s, {} violation(s)",
        seeds.len(),
        seeds.len() * ROUND_NODES,
        started.elapsed().as_secs_f64(),
        failures.len()
    );
    let counts = FAULT_COUNTS.lock().unwrap().clone();
    let line: Vec<String> = FAULT_KINDS
        .iter()
        .map(|k| {
            let (planned, happened) = counts.get(k).copied().unwrap_or_default();
            format!("{k} {happened}/{planned}")
        })
        .collect();
    eprintln!("chaos: faults happened/planned: {}", line.join(", "));
    if std::env::var("NMO_CHAOS_SEED").is_err() {
        let missing: Vec<&&str> = FAULT_KINDS
            .iter()
            .filter(|k| counts.get(*k).is_none_or(|c| c.1 == 0))
            .collect();
        assert!(
            missing.is_empty(),
            "fault kinds that never happened in this run: {missing:?} ({})",
            line.join(", ")
        );
    }
    for (seed, cause) in OPEN_SEEDS {
        if !seeds.contains(seed) {
            eprintln!("chaos: open case not run: seed {seed}: {cause}");
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn same_seed_same_scenario() {
    let a = format!("{:?}", Plan::generate(7));
    let b = format!("{:?}", Plan::generate(7));
    assert_eq!(a, b);
    assert_ne!(a, format!("{:?}", Plan::generate(8)));
    let kinds: BTreeSet<String> = (1..=5)
        .map(|s| {
            let p = Plan::generate(s);
            assert!(p.faults.iter().any(|f| f.1 == p.primary));
            let kind = format!("{:?}", p.primary);
            kind.split(' ').next().unwrap().to_string()
        })
        .collect();
    assert_eq!(
        kinds.len(),
        5,
        "five consecutive seeds, five fault kinds: {kinds:?}"
    );
    for (i, kind) in FAULT_KINDS.iter().enumerate() {
        assert_eq!(Plan::generate(10 + i as u64).primary.kind(), *kind);
    }
}

/// The short form plans every fault kind, and its fresh seeds change from run to run.
#[test]
fn the_short_form_plans_every_fault_kind() {
    let seeds: Vec<u64> = KNOWN_SEEDS.to_vec();
    let missing = uninjected_kinds(&seeds);
    let mut rng = fastrand::Rng::with_seed(1);
    let mut all = seeds.clone();
    for kind in &missing {
        let r = FAULT_KINDS.iter().position(|k| k == kind).unwrap() as u64;
        let s = fresh_seed(&mut rng, Some(r), &all);
        assert_eq!(Plan::generate(s).primary.kind(), *kind);
        all.push(s);
    }
    assert!(uninjected_kinds(&all).is_empty(), "{all:?}");
    eprintln!(
        "regression seeds plan {:?}; fresh seeds add {missing:?}",
        FAULT_KINDS
            .iter()
            .filter(|k| !missing.contains(k))
            .collect::<Vec<_>>()
    );
    let other = fresh_seed(&mut fastrand::Rng::with_seed(2), Some(0), &[]);
    assert_ne!(
        fresh_seed(&mut fastrand::Rng::with_seed(3), Some(0), &[]),
        other
    );
    // At least one fresh seed even when the given seeds plan every kind already (seeds 10 to
    // 14 have the five primary faults), and whatever the regression seeds cover.
    let mut covered: Vec<u64> = (10..15).collect();
    assert!(uninjected_kinds(&covered).is_empty());
    add_fresh_seeds(&mut covered, 0, &mut fastrand::Rng::with_seed(4));
    assert_eq!(covered.len(), 6, "{covered:?}");
    assert!(is_fresh(covered[5]) && !(10..15).contains(&covered[5]));
    let mut run = KNOWN_SEEDS.to_vec();
    add_fresh_seeds(&mut run, 0, &mut fastrand::Rng::with_seed(5));
    assert!(run.iter().any(|s| is_fresh(*s)), "{run:?}");
}

/// (f)'s waiver is per pod: only a pod whose eviction the API server received and never answered
/// in its log, inside a kube-apiserver restart, is excused; another pod of the same maintenance,
/// whose maintenance the restart overlapped, is not, nor is a pod whose unanswered eviction came
/// outside the restart.
#[test]
fn only_evictions_in_flight_at_an_api_server_kill_are_excused() {
    let t = |s: i64| jiff::Timestamp::from_second(1_800_000_000 + s).unwrap();
    let windows: Vec<FaultWindow> = vec![
        ("KillOperator", t(0), t(100)),
        ("RestartApiserver", t(10), t(14)),
    ];
    let unanswered = vec![
        ("in-flight".to_string(), t(10)),
        (
            "just-before".to_string(),
            t(10) - jiff::SignedDuration::from_millis(300),
        ),
        ("long-before".to_string(), t(5)),
        ("after".to_string(), t(20)),
    ];
    let succeeded = t(30);
    let excused = |pod: &str| excused_by_restart(pod, succeeded, &unanswered, &windows).is_some();
    assert!(excused("in-flight"));
    assert!(excused("just-before"));
    // Its maintenance overlapped the restart, but nothing says its eviction was lost.
    assert!(!excused("no-eviction-seen"));
    assert!(!excused("long-before"), "received 5 s before the kill");
    assert!(!excused("after"), "received after the restart ended");
    // An unanswered eviction during another fault excuses nothing.
    let other = vec![("in-flight".to_string(), t(50))];
    assert!(excused_by_restart("in-flight", succeeded, &other, &windows).is_none());
    // Nor one received after the maintenance said Succeeded.
    assert!(excused_by_restart("in-flight", t(9), &unanswered, &windows).is_none());
}

/// The checker's watches retry quickly (0.5 s doubling to 4 s, with jitter), so that its
/// history has no long gaps after an API server restart: with kube's default (up to 30 s plus
/// jitter) a pod scheduled and evicted while the pod watch waited was never seen on its node
/// (seed 430447; the audited bindings now cover that case too).
fn watch_backoff() -> kube::runtime::watcher::ExponentialBackoff {
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(Duration::from_secs(4))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .into()
}

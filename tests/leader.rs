//! Mixed election (`docs/compat.md §9`): the operator and a client-go elector
//! (`tests/cluster/go-elector`, client-go's `tools/leaderelection` at the control plane's
//! version) compete for the Lease `135b1886.medik8s.io`. Round after round the current leader is
//! frozen (SIGSTOP) until the other side takes over, which client-go allows only once the lease
//! duration has passed, then thawed (SIGCONT).
//!
//! Asserted from both sides' logs and from the API server: the leadership intervals never
//! overlap, and every write the operator made to a Node or a NodeMaintenance (found in the
//! objects' managedFields through a watch, by its manager `node-maintenance-operator`) lies
//! within one of its own intervals — also right after a thaw, when in-flight reconciles resume.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams};
use kube::runtime::watcher;
use nmo_devcluster::operator::{Operator, ServiceAccountRef};
use nmo_devcluster::process::Child;
use node_maintenance_operator::api::{MaintenancePhase, NodeMaintenance};

/// Rounds of freeze-and-thaw; each takes a little more than the 15 s lease duration.
/// `NMO_MIXED_ROUNDS` lowers it for a quick local run.
fn rounds() -> usize {
    std::env::var("NMO_MIXED_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20)
}
const LEASE: &str = "135b1886.medik8s.io";
const OUR_MANAGER: &str = "node-maintenance-operator";
const LIMIT: Duration = Duration::from_secs(60);

/// One leadership interval, as its holder logged it: from when it started leading to the last
/// instant it could still act as leader.
#[derive(Clone, Debug)]
struct Term {
    who: String,
    from: jiff::Timestamp,
    until: jiff::Timestamp,
}

/// A write by the operator, seen in managedFields: the object and the write's time (the API
/// server records whole seconds, truncated).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Write {
    at: jiff::Timestamp,
    object: String,
    operation: String,
    subresource: String,
}

fn go_elector() -> PathBuf {
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/cluster/build-go-elector.sh");
    let out = std::process::Command::new(&script)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} failed:\n{}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .lines()
            .last()
            .unwrap_or_default(),
    )
}

/// The value of `key=` in a text log line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let start = line.find(&format!(" {key}="))? + key.len() + 2;
    line[start..].split_whitespace().next()
}

/// Our terms from one operator process's log, and whether the last one is still open.
fn our_terms(log: &str, who: &str) -> (Vec<Term>, Option<jiff::Timestamp>) {
    let mut terms = Vec::new();
    let mut open: Option<jiff::Timestamp> = None;
    for line in log.lines() {
        if line.contains("started leading") {
            open = Some(field(line, "leading_since").unwrap().parse().unwrap());
        } else if line.contains("stopped leading") {
            let until = field(line, "leading_until").unwrap().parse().unwrap();
            let from = open.take().expect("stopped leading without having started");
            terms.push(Term {
                who: who.to_string(),
                from,
                until,
            });
        }
    }
    (terms, open)
}

/// The client-go elector's terms from its JSON lines.
fn go_terms(log: &str) -> (Vec<Term>, Option<jiff::Timestamp>) {
    let mut terms = Vec::new();
    let mut open: Option<jiff::Timestamp> = None;
    for line in log.lines().filter(|l| l.starts_with('{')) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let ts = |k: &str| -> jiff::Timestamp { v[k].as_str().unwrap().parse().unwrap() };
        match v["event"].as_str() {
            Some("started_leading") => open = Some(ts("at")),
            Some("stopped_leading") => terms.push(Term {
                who: "client-go".into(),
                from: open
                    .take()
                    .expect("stopped_leading without started_leading"),
                until: ts("until"),
            }),
            _ => {}
        }
    }
    (terms, open)
}

fn holder_of(log: &str) -> Option<String> {
    log.lines()
        .find(|l| l.contains("starting leader election"))
        .and_then(|l| field(l, "identity"))
        .map(str::to_string)
}

/// Records every managedFields time of `OUR_MANAGER` on every Node and NodeMaintenance.
fn record_writes<K>(api: Api<K>, kind: &'static str, into: Arc<Mutex<BTreeSet<Write>>>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + 'static,
{
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default()).boxed();
        while let Some(ev) = events.next().await {
            let obj = match ev {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => o,
                _ => continue,
            };
            let name = format!("{kind}/{}", obj.meta().name.clone().unwrap_or_default());
            for mf in obj.meta().managed_fields.iter().flatten() {
                if mf.manager.as_deref() != Some(OUR_MANAGER) {
                    continue;
                }
                if let Some(t) = &mf.time {
                    into.lock().unwrap().insert(Write {
                        at: t.0,
                        object: name.clone(),
                        operation: mf.operation.clone().unwrap_or_default(),
                        subresource: mf.subresource.clone().unwrap_or_default(),
                    });
                }
            }
        }
    });
}

struct Ours {
    op: Operator,
    name: String,
}

fn start_ours(
    cluster: &Cluster,
    account: &ServiceAccountRef,
    kubeconfig: &std::path::Path,
    n: usize,
) -> Ours {
    let name = format!("ours-{n}");
    let mut opts = operator_options(&name, account, kubeconfig);
    opts.leader_elect = true;
    let op =
        Operator::start(cluster, &opts).unwrap_or_else(|e| panic!("{name} did not start: {e}"));
    Ours { op, name }
}

fn signal(child: &Child, sig: i32) {
    child.signal(sig);
}

#[tokio::test]
async fn mixed_election_with_client_go_never_overlaps() {
    let cluster = Cluster::shared();
    let Installed {
        account,
        kubeconfig,
        ..
    } = installed(cluster);
    let client = cluster.client().await;
    let go_bin = go_elector();

    let writes = Arc::new(Mutex::new(BTreeSet::new()));
    record_writes(Api::<Node>::all(client.clone()), "Node", writes.clone());
    record_writes(
        Api::<NodeMaintenance>::all(client.clone()),
        "NodeMaintenance",
        writes.clone(),
    );
    let nodes = worker_nodes(cluster, &client, "mixed", 3).await;
    let leases = Api::<Lease>::namespaced(client.clone(), &account.namespace);
    let holder = || async {
        leases
            .get_opt(LEASE)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .unwrap_or_default()
    };

    let go_identity = "go-elector_mixed-election";
    let mut go_cmd = std::process::Command::new(&go_bin);
    go_cmd.args([
        format!("--kubeconfig={}", cluster.kubeconfig().display()),
        format!("--namespace={}", account.namespace),
        format!("--identity={go_identity}"),
    ]);
    let mut go = cluster.spawn("go-elector", go_cmd).unwrap();
    let go_log_path = go.log_path().to_path_buf();
    let go_log = || std::fs::read_to_string(&go_log_path).unwrap_or_default();

    // client-go leads first, so that round 0 also sees a standby of ours stop.
    wait_for("client-go to lead", LIMIT, || {
        let log = go_log();
        async move {
            if go_terms(&log).1.is_some() {
                Ok(())
            } else {
                Err(log)
            }
        }
    })
    .await;
    let mut generation = 0;
    let mut ours = start_ours(cluster, &account, &kubeconfig, generation);
    let mut retired: Vec<Ours> = Vec::new();
    let mut maintenances: Vec<String> = Vec::new();
    let mut rounds_led = (0, 0);
    let rounds = rounds();

    for round in 0..rounds {
        let our_id = holder_of(&ours.op.log()).expect("our identity is logged");
        // Whoever holds the Lease and says it leads.
        let ours_leads = wait_for(&format!("round {round}: a leader"), LIMIT, || {
            let (our_log, go_log, our_id) = (ours.op.log(), go_log(), our_id.clone());
            let holder = holder();
            async move {
                let h = holder.await;
                let our_open = our_terms(&our_log, "ours").1.is_some();
                let go_open = go_terms(&go_log).1.is_some();
                if h == our_id && our_open {
                    Ok(true)
                } else if h == go_identity && go_open {
                    Ok(false)
                } else {
                    Err(format!(
                        "holder {h:?}, ours open {our_open}, go open {go_open}"
                    ))
                }
            }
        })
        .await;

        if round == 0 {
            assert!(!ours_leads, "client-go led first");
            // A standby that is asked to stop exits 0 without ever leading.
            let mut standby = start_ours(cluster, &account, &kubeconfig, 1000);
            let status = standby.op.process().stop(Duration::from_secs(30));
            assert_eq!(
                status.and_then(|s| s.code()),
                Some(0),
                "standby on SIGTERM; log:\n{}",
                standby.op.log()
            );
            assert!(!standby.op.log().contains("started leading"));
        }
        if ours_leads {
            rounds_led.0 += 1;
            // Give the operator work so that reconciles are in flight when it is frozen: end the
            // previous maintenance (restore its node) and begin one on the other node.
            if let Some(prev) = maintenances.last() {
                let _ = Api::<NodeMaintenance>::all(client.clone())
                    .delete(prev, &DeleteParams::default())
                    .await;
            }
            let name = format!("mixed-{round}");
            // Three nodes in turn, so a node's previous maintenance has long ended.
            nm::create(&client, &name, &nodes[round / 2 % 3]).await;
            maintenances.push(name.clone());
            // Every other round, freeze it mid-reconcile at once; otherwise once it acted.
            if round % 4 == 0 {
                nm::wait_status(&client, &name, "the operator acted", LIMIT, |s| {
                    s.phase.is_some()
                })
                .await;
            }
        } else {
            rounds_led.1 += 1;
        }

        // Freeze the leader until the other side has taken over (client-go lets a candidate take
        // over only once the lease duration has passed since it saw the record change).
        if ours_leads {
            let before = go_log().matches("started_leading").count();
            signal(ours.op.process(), libc::SIGSTOP);
            wait_for(
                &format!("round {round}: client-go takes over"),
                LIMIT,
                || {
                    let n = go_log().matches("started_leading").count();
                    async move {
                        if n > before {
                            Ok(())
                        } else {
                            Err(format!("{n} terms"))
                        }
                    }
                },
            )
            .await;
            signal(ours.op.process(), libc::SIGCONT);
            // Thawed, it finds its term over and exits 1 (Kubernetes would restart it).
            let status =
                wait_for(&format!("round {round}: ours exits"), LIMIT, || {
                    let s = ours.op.process().exited();
                    let log = ours.op.log();
                    async move {
                        s.ok_or_else(|| log.lines().rev().take(5).collect::<Vec<_>>().join("\n"))
                    }
                })
                .await;
            assert_eq!(status.code(), Some(1), "log:\n{}", ours.op.log());
            assert!(ours.op.log().contains("leader election lost"));
            generation += 1;
            let next = start_ours(cluster, &account, &kubeconfig, generation);
            retired.push(std::mem::replace(&mut ours, next));
        } else {
            let our_before = our_terms(&ours.op.log(), "ours").0.len();
            let go_stops = go_log().matches("stopped_leading").count();
            signal(&go, libc::SIGSTOP);
            wait_for(&format!("round {round}: ours takes over"), LIMIT, || {
                let log = ours.op.log();
                async move {
                    let (_, open) = our_terms(&log, "ours");
                    if open.is_some() {
                        Ok(())
                    } else {
                        Err(format!("{our_before} terms, none open"))
                    }
                }
            })
            .await;
            signal(&go, libc::SIGCONT);
            wait_for(
                &format!("round {round}: client-go stops leading"),
                LIMIT,
                || {
                    let n = go_log().matches("stopped_leading").count();
                    async move {
                        if n > go_stops {
                            Ok(())
                        } else {
                            Err(format!("{n}"))
                        }
                    }
                },
            )
            .await;
        }
    }

    // The operator still does its job: client-go steps down (SIGTERM releases the Lease), ours
    // leads and completes the last maintenance.
    assert!(
        go.stop(Duration::from_secs(20))
            .is_some_and(|s| s.success())
    );
    let last = maintenances.last().unwrap().clone();
    nm::wait_phase(&client, &last, MaintenancePhase::Succeeded, LIMIT).await;
    assert_eq!(
        ours.op
            .process()
            .stop(Duration::from_secs(30))
            .and_then(|s| s.code()),
        Some(0)
    );

    // Terms of both sides, all closed by now.
    let mut terms: Vec<Term> = Vec::new();
    for o in retired.iter().chain(std::iter::once(&ours)) {
        let (t, open) = our_terms(&o.op.log(), &o.name);
        assert!(open.is_none(), "{} left a term open", o.name);
        terms.extend(t);
    }
    let our_count = terms.len();
    let (g, open) = go_terms(&go_log());
    assert!(open.is_none(), "client-go left a term open");
    terms.extend(g);
    terms.sort_by_key(|t| t.from);
    let summary = terms
        .iter()
        .map(|t| format!("{:>8} {} .. {}", t.who, t.from, t.until))
        .collect::<Vec<_>>()
        .join("\n");
    println!("terms:\n{summary}");
    for w in terms.windows(2) {
        assert!(
            w[0].until <= w[1].from,
            "overlapping terms {:?} and {:?}; all terms:\n{summary}",
            w[0],
            w[1]
        );
    }
    assert!(
        rounds_led.0 >= rounds / 2 - 1 && rounds_led.1 >= rounds / 2 - 1,
        "both sides led in turn: {rounds_led:?}"
    );
    assert!(our_count >= rounds / 2, "our terms: {our_count}");

    // Writes, as the API server recorded them. Times are whole seconds (truncated), so a write
    // at instant c in [from, until] shows as t with floor(from) <= t <= until.
    tokio::time::sleep(Duration::from_secs(2)).await; // let the watch deliver the last events
    let writes = writes.lock().unwrap().clone();
    let ours_only: Vec<&Term> = terms.iter().filter(|t| t.who != "client-go").collect();
    let outside: Vec<&Write> = writes
        .iter()
        .filter(|w| {
            !ours_only.iter().any(|t| {
                let floor = jiff::Timestamp::from_second(t.from.as_second()).unwrap();
                floor <= w.at && w.at <= t.until
            })
        })
        .collect();
    println!("{} writes by {OUR_MANAGER}", writes.len());
    assert!(
        writes.len() >= rounds / 2,
        "the operator wrote in its terms: {writes:?}"
    );
    assert!(
        outside.is_empty(),
        "writes outside our terms: {outside:#?}\nterms:\n{summary}"
    );
}

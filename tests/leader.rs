//! Mixed election (`docs/compat.md §9`): the operator and a client-go elector
//! (`tests/cluster/go-elector`, client-go's `tools/leaderelection` at the control plane's
//! version) compete for the Lease `135b1886.medik8s.io`. Round after round the current leader is
//! frozen (SIGSTOP) until the other side takes over, which client-go allows only once the lease
//! duration has passed, then thawed (SIGCONT).
//!
//! The operator has work whenever it is frozen: each round it leads it begins a maintenance of a
//! node whose pods include one behind a PodDisruptionBudget that allows no disruption, so its
//! drain keeps retrying evictions; it is frozen either at once (mid-reconcile) or once the drain
//! reported the budget (it acted), in turn.
//!
//! Asserted from both sides' logs and from the API server's audit log (every request of the
//! operator's ServiceAccount, with the instant the server received it):
//! - the leadership intervals never overlap, and each side led as often as the rounds say;
//! - every write of the operator (evictions, Node, NodeMaintenance and medik8s Lease writes,
//!   events: every POST, PUT, PATCH and DELETE but those of the election's own Lease) was
//!   received within one of its terms, at most [`IN_FLIGHT`] after its end, and none within a
//!   term of client-go — also right after a thaw, when in-flight reconciles resume;
//! - a thawed leader's write fence refused at least one write (its log says `write refused`),
//!   so the fence, not luck, kept those writes out.
//!
//! ```text
//! cargo test --test leader                        # 5 rounds (CI)
//! NMO_MIXED_ROUNDS=20 cargo test --test leader    # long form, about 7 minutes
//! ```

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, PostParams};
use nmo_devcluster::Options;
use nmo_devcluster::audit::{AuditCursor, AuditEvent, requests_policy};
use nmo_devcluster::operator::{Operator, ServiceAccountRef};
use nmo_devcluster::process::Child;
use node_maintenance_operator::api::{MaintenancePhase, NodeMaintenance};
use serde_json::json;

/// Rounds of freeze-and-thaw of the short form; each takes a little more than the 15 s lease
/// duration. `NMO_MIXED_ROUNDS` sets another count (0 and up; 20 is the long form).
const DEFAULT_ROUNDS: usize = 5;
const LEASE: &str = "135b1886.medik8s.io";
const LIMIT: Duration = Duration::from_secs(60);
/// How long after the end of a term a write of that term may still be received: one request
/// dispatched just before the renew deadline (`docs/design.md §5`). A competitor may act no
/// earlier than 5 s after it.
const IN_FLIGHT: Duration = Duration::from_secs(1);
/// How many more freeze rounds of the operator the test runs when the configured ones showed no
/// refused write (whether a thawed reconcile or the election task runs first is up to the
/// scheduler); each is counted in the summary.
const EXTRA_FENCE_ROUNDS: usize = 8;

fn rounds() -> usize {
    match std::env::var("NMO_MIXED_ROUNDS") {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("NMO_MIXED_ROUNDS={v:?} is not a count")),
        Err(_) => DEFAULT_ROUNDS,
    }
}

/// One leadership interval, as its holder logged it: from when it started leading to the last
/// instant it could still act as leader.
#[derive(Clone, Debug)]
struct Term {
    who: String,
    from: jiff::Timestamp,
    until: jiff::Timestamp,
}

/// This binary's control plane: like [`Cluster::shared`], with an audit log of every request of
/// a ServiceAccount (only the operator runs as one).
fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        Cluster::start(Options {
            workers: 0,
            control_planes: 1,
            audit_policy: Some(requests_policy(&["system:serviceaccounts"])),
        })
        .unwrap_or_else(|e| panic!("the local control plane did not start: {e}"))
    })
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
            // client-go calls OnStoppedLeading whenever `Run` returns, also when it never led
            // (stopped on SIGTERM while standing by): only a stop after a start ends a term.
            Some("stopped_leading") => {
                if let Some(from) = open.take() {
                    terms.push(Term {
                        who: "client-go".into(),
                        from,
                        until: ts("until"),
                    });
                }
            }
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

/// Whether an audited request changed something (or tried to).
fn is_write(ev: &AuditEvent) -> bool {
    matches!(
        ev.verb.as_str(),
        "create" | "update" | "patch" | "delete" | "deletecollection"
    )
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

/// A bare pod `name` bound to `node`, labelled `app=<app>`.
async fn bare_pod(pods: &Api<Pod>, name: &str, node: &str, app: &str) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]
        }
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
}

#[tokio::test]
async fn mixed_election_with_client_go_never_overlaps() {
    let cluster = cluster();
    let Installed {
        account,
        kubeconfig,
        ..
    } = installed(cluster);
    let our_user = format!(
        "system:serviceaccount:{}:{}",
        account.namespace, account.name
    );
    let client = cluster.client().await;
    let go_bin = go_elector();

    // Three nodes, each with a pod no drain may evict (a budget of no disruption), so a
    // maintenance of any of them keeps its drain retrying until the end.
    let nodes = worker_nodes(cluster, &client, "mixed", 3).await;
    let ns = namespace(&client, "mixed").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    for (i, node) in nodes.iter().enumerate() {
        bare_pod(&pods, &format!("guard-{i}"), node, &format!("guard-{i}")).await;
        wait_running(&client, &ns, &format!("guard-{i}"), 1, LIMIT).await;
        budget(
            &client,
            &ns,
            &format!("guard-{i}"),
            &format!("guard-{i}"),
            0,
            1,
        )
        .await;
    }
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
    let mut maintenances: Vec<(String, usize)> = Vec::new();
    let mut rounds_led = (0, 0);
    // Per frozen term of ours: the branch it took and the writes its fence refused.
    let mut frozen: Vec<(&str, usize)> = Vec::new();
    let rounds = rounds();
    let mut round: usize = 0;

    // The configured rounds, then, only if no thawed leader of ours had a write refused yet,
    // up to EXTRA_FENCE_ROUNDS more rounds of each side.
    loop {
        let refused_so_far = frozen.iter().map(|f| f.1).sum::<usize>();
        let extra = round.saturating_sub(rounds);
        if round >= rounds && (rounds < 2 || refused_so_far > 0 || extra >= 2 * EXTRA_FENCE_ROUNDS)
        {
            break;
        }
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
        assert_eq!(
            ours_leads,
            round % 2 == 1,
            "round {round}: the sides lead in turn, client-go first"
        );

        if round == 0 {
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
        let mut branch = "";
        if ours_leads {
            rounds_led.0 += 1;
            // Give the operator work so that reconciles are in flight when it is frozen: end the
            // previous maintenance (restore its node) and begin one on the next node, with
            // pods to evict beside the guarded one.
            if let Some((prev, _)) = maintenances.last() {
                let _ = Api::<NodeMaintenance>::all(client.clone())
                    .delete(prev, &DeleteParams::default())
                    .await;
            }
            let ours_round = rounds_led.0 - 1;
            let node_index = ours_round % nodes.len();
            for j in 0..2 {
                bare_pod(
                    &pods,
                    &format!("free-{round}-{j}"),
                    &nodes[node_index],
                    "free",
                )
                .await;
            }
            let name = format!("mixed-{round}");
            nm::create(&client, &name, &nodes[node_index]).await;
            maintenances.push((name.clone(), node_index));
            // In turn: frozen at once (mid-reconcile), or once its drain reported the budget.
            if ours_round % 2 == 0 {
                branch = "frozen at once";
            } else {
                branch = "frozen once it acted";
                nm::wait_status(
                    &client,
                    &name,
                    "the drain blocked by the budget",
                    LIMIT,
                    |s| {
                        s.blockers
                            .as_ref()
                            .is_some_and(|b| b.iter().any(|b| b.reason == "PodDisruptionBudget"))
                    },
                )
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
            let log = ours.op.log();
            assert_eq!(status.code(), Some(1), "log:\n{log}");
            assert!(log.contains("leader election lost"), "log:\n{log}");
            frozen.push((branch, log.matches("write refused: not leading").count()));
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
        round += 1;
    }
    let rounds_run = round;

    // The operator still does its job: client-go steps down (SIGTERM releases the Lease), ours
    // leads, and completes the last maintenance once its budget is gone.
    assert!(
        go.stop(Duration::from_secs(20))
            .is_some_and(|s| s.success())
    );
    let (last, last_node) = match maintenances.last() {
        Some(m) => m.clone(),
        None => {
            nm::create(&client, "mixed-final", &nodes[0]).await;
            ("mixed-final".to_string(), 0)
        }
    };
    Api::<PodDisruptionBudget>::namespaced(client.clone(), &ns)
        .delete(&format!("guard-{last_node}"), &DeleteParams::default())
        .await
        .unwrap();
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
    let go_count = g.len();
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
    // Rounds alternate, client-go first: it leads ceil(n/2) of them, ours floor(n/2). client-go
    // had one term at the start and one per round of ours; ours one per round of client-go,
    // plus the final one when the last round was its own (or there was none).
    assert_eq!(
        rounds_led,
        (rounds_run / 2, rounds_run.div_ceil(2)),
        "rounds led (ours, client-go) of {rounds_run}"
    );
    assert_eq!(go_count, 1 + rounds_run / 2, "client-go terms:\n{summary}");
    assert_eq!(
        our_count,
        rounds_run.div_ceil(2) + usize::from(rounds_run.is_multiple_of(2)),
        "our terms:\n{summary}"
    );

    // Every request of ours, as the API server recorded it. A request of our ServiceAccount made
    // after every process stopped marks the end: once it is in the log, so is everything before.
    let sentinel = format!("audit-sentinel-{}", std::process::id());
    let sa_client = {
        let kc = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .unwrap();
        kube::Client::try_from(config).unwrap()
    };
    let _ = Api::<Pod>::namespaced(sa_client, &ns).get(&sentinel).await;
    let mut cursor = AuditCursor::new(cluster.audit_log_path());
    let mut audited: Vec<AuditEvent> = Vec::new();
    let deadline = std::time::Instant::now() + LIMIT;
    while !audited.iter().any(|e| e.name == sentinel) {
        audited.extend(cursor.read().unwrap_or_else(|e| panic!("{e}")));
        assert!(
            std::time::Instant::now() < deadline,
            "the audit log did not record the sentinel request within {LIMIT:?} ({} events)",
            audited.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let writes: Vec<&AuditEvent> = audited
        .iter()
        .filter(|e| e.user == our_user && is_write(e))
        // The election's own Lease: its acquiring write precedes the term by definition.
        .filter(|e| !(e.resource == "leases" && e.name == LEASE))
        .collect();
    let ours_only: Vec<&Term> = terms.iter().filter(|t| t.who != "client-go").collect();
    let theirs: Vec<&Term> = terms.iter().filter(|t| t.who == "client-go").collect();
    let grace = jiff::SignedDuration::try_from(IN_FLIGHT).unwrap();
    let outside: Vec<String> = writes
        .iter()
        .filter(|w| {
            !ours_only
                .iter()
                .any(|t| t.from <= w.received && w.received <= t.until + grace)
                || theirs
                    .iter()
                    .any(|t| t.from <= w.received && w.received <= t.until)
        })
        .map(|w| {
            format!(
                "{} {} {} {}/{} answered {}",
                w.received,
                w.verb_resource(),
                w.uri,
                w.namespace,
                w.name,
                w.code
            )
        })
        .collect();
    let kinds = |pred: &dyn Fn(&AuditEvent) -> bool| writes.iter().filter(|w| pred(w)).count();
    let evictions = kinds(&|w| w.subresource == "eviction");
    let node_leases = kinds(&|w| w.resource == "leases" && w.namespace == "medik8s-leases");
    let events = kinds(&|w| w.resource == "events");
    let refused: usize = frozen.iter().map(|f| f.1).sum();
    println!(
        "{rounds_run} rounds ({rounds} configured); frozen terms of ours (branch, writes refused): \
         {frozen:?}; {} writes of ours audited: {evictions} evictions, {node_leases} medik8s \
         Lease writes, {events} event writes",
        writes.len()
    );
    assert!(
        outside.is_empty(),
        "writes outside our terms:\n{}\nterms:\n{summary}",
        outside.join("\n")
    );
    // The check above covers each kind of write only if the operator made some.
    assert!(
        evictions > 0 && node_leases > 0 && events > 0,
        "the operator evicted, wrote its medik8s leases and events: {evictions}, {node_leases}, \
         {events}"
    );
    if rounds >= 4 {
        let branches: std::collections::BTreeSet<&str> = frozen.iter().map(|f| f.0).collect();
        assert_eq!(branches.len(), 2, "both freeze branches ran: {frozen:?}");
    }
    if !frozen.is_empty() && rounds >= 2 {
        assert!(
            refused > 0,
            "no thawed leader of ours had a write refused by its fence in {} frozen terms \
             ({frozen:?}): the writes above stayed inside the terms without the fence being \
             shown to work",
            frozen.len()
        );
    }
}

//! The drain decided on the API server's facts, end to end (`docs/drain-contract.md` §2 and §4):
//! an eviction is awaited however long the API server takes to answer it (its admission webhooks
//! included), evictions that hang do not hold back the others, deleting the maintenance stops
//! its evictions, and a workload that tolerates the maintenance taints is evicted once while its
//! replacement is kept and named.
//!
//! The cluster of this binary records every eviction in the API server's audit log, so "evicted
//! once", "sent after the deletion" are the API server's own record, not what the operator
//! believes it sent. Slow and hung eviction webhooks are served by the test itself on loopback.

mod common;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use nmo_devcluster::audit::{AuditCursor, AuditEvent, EVICTIONS_POLICY};
use nmo_devcluster::operator::Operator;
use node_maintenance_operator::api::MaintenancePhase;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LIMIT: Duration = Duration::from_secs(120);

struct Env {
    cluster: Cluster,
    _operator: Mutex<Operator>,
}

/// One cluster with an eviction audit log, the manifests installed and one operator running
/// with its webhook registered.
fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let cluster = audited_cluster(EVICTIONS_POLICY);
        let installed = installed(&cluster);
        let opts = installed.options("operator");
        let operator = fixtures::start_registered(&cluster, &opts)
            .unwrap_or_else(|e| panic!("operator did not start: {e}"));
        Env {
            cluster,
            _operator: Mutex::new(operator),
        }
    })
}

/// How a test webhook answers an eviction's AdmissionReview.
#[derive(Clone, Copy)]
enum Answer {
    /// Allows it after this long.
    AllowAfter(Duration),
    /// Accepts the connection and never answers (the API server gives up at `timeoutSeconds`).
    Hang,
}

/// An eviction webhook served on loopback over TLS: every AdmissionReview it receives is
/// recorded (when, which pod) and answered as `answer` says.
struct TestWebhook {
    port: u16,
    ca_pem: String,
    seen: Arc<Mutex<Vec<(Instant, String)>>>,
}

impl TestWebhook {
    fn start(answer: Answer) -> Self {
        let ca = nmo_certs::Ca::new("test-webhook-ca").unwrap();
        let pair = ca
            .issue_server(&[], &["127.0.0.1".parse().unwrap()])
            .unwrap();
        use rustls::pki_types::pem::PemObject;
        let certs = rustls::pki_types::CertificateDer::pem_slice_iter(pair.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key =
            rustls::pki_types::PrivateKeyDer::from_pem_slice(pair.key_pem.as_bytes()).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen: Arc<Mutex<Vec<(Instant, String)>>> = Arc::default();
        let record = seen.clone();
        // A runtime of its own: the test's runtime ends with each test, the webhook must not.
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let mut held = Vec::new();
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        continue;
                    };
                    if matches!(answer, Answer::Hang) {
                        held.push(tcp);
                        continue;
                    }
                    let (acceptor, record) = (acceptor.clone(), record.clone());
                    tokio::spawn(async move {
                        let Ok(mut tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        while let Some(body) = read_request(&mut tls).await {
                            let review: serde_json::Value =
                                serde_json::from_slice(&body).unwrap_or_default();
                            let req = &review["request"];
                            let pod = format!(
                                "{}/{}",
                                req["namespace"].as_str().unwrap_or_default(),
                                req["name"].as_str().unwrap_or_default()
                            );
                            record.lock().unwrap().push((Instant::now(), pod));
                            if let Answer::AllowAfter(d) = answer {
                                tokio::time::sleep(d).await;
                            }
                            let reply = json!({
                                "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                "response": {"uid": req["uid"], "allowed": true}
                            })
                            .to_string();
                            let head = format!(
                                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                                reply.len()
                            );
                            if tls.write_all(head.as_bytes()).await.is_err()
                                || tls.write_all(reply.as_bytes()).await.is_err()
                            {
                                return;
                            }
                        }
                    });
                }
            });
        });
        TestWebhook {
            port,
            ca_pem: ca.cert_pem().to_string(),
            seen,
        }
    }

    /// Registers it for evictions in the namespaces labelled `e2e-webhook=<label>`.
    async fn register(
        &self,
        client: &kube::Client,
        label: &str,
        failure_policy: &str,
        timeout_seconds: i32,
    ) -> Api<ValidatingWebhookConfiguration> {
        use base64::Engine;
        let webhooks = Api::<ValidatingWebhookConfiguration>::all(client.clone());
        let config: ValidatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": {"name": label},
            "webhooks": [{
                "name": format!("{label}.e2e.medik8s.io"),
                "clientConfig": {
                    "url": format!("https://127.0.0.1:{}/evict", self.port),
                    "caBundle": base64::engine::general_purpose::STANDARD.encode(&self.ca_pem),
                },
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                           "resources": ["pods/eviction"], "scope": "Namespaced"}],
                "namespaceSelector": {"matchLabels": {"e2e-webhook": label}},
                "failurePolicy": failure_policy,
                "sideEffects": "None",
                "timeoutSeconds": timeout_seconds,
                "admissionReviewVersions": ["v1"]
            }]
        }))
        .unwrap();
        webhooks
            .create(&PostParams::default(), &config)
            .await
            .unwrap();
        webhooks
    }

    fn seen(&self) -> Vec<(Instant, String)> {
        self.seen.lock().unwrap().clone()
    }
}

/// Reads one HTTP/1.1 request's body (`None` at the end of the connection).
async fn read_request<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await.ok()?;
    Some(body)
}

/// A namespace named `<prefix>-...` (pods are listed in namespace order), labelled for the
/// test webhook `label` when given.
async fn labelled_namespace(client: &kube::Client, prefix: &str, label: Option<&str>) -> String {
    let ns = namespace(client, prefix).await;
    if let Some(label) = label {
        Api::<Namespace>::all(client.clone())
            .patch(
                &ns,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"e2e-webhook": label}}})),
            )
            .await
            .unwrap();
    }
    ns
}

/// Waits until every pod of `ns` is Running.
async fn wait_all_running(client: &kube::Client, ns: &str, n: usize) {
    let api = Api::<Pod>::namespaced(client.clone(), ns);
    wait_for(&format!("{n} pods Running in {ns}"), LIMIT, || async {
        let list = api
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())?;
        let up = list.items.iter().filter(|p| running(p)).count();
        if up == n {
            Ok(())
        } else {
            Err(format!("{up} of {n} Running"))
        }
    })
    .await;
}

/// The pods of `ns` that are gone or terminating.
async fn evicted_in(client: &kube::Client, ns: &str, names: &[String]) -> Vec<String> {
    let api = Api::<Pod>::namespaced(client.clone(), ns);
    let mut out = Vec::new();
    for n in names {
        match api.get_opt(n).await.unwrap() {
            None => out.push(n.clone()),
            Some(p) if p.metadata.deletion_timestamp.is_some() => out.push(n.clone()),
            Some(_) => {}
        }
    }
    out
}

/// The accepted evictions (2xx) the API server recorded, among `events`, of pods in `ns`.
fn accepted_in<'a>(events: &'a [AuditEvent], ns: &str) -> Vec<&'a AuditEvent> {
    events
        .iter()
        .filter(|e| {
            e.subresource == "eviction" && e.namespace == ns && (200..300).contains(&e.code)
        })
        .collect()
}

/// The message of the `Drained` condition of `nm` (empty when it has none): where the kept pods
/// are named.
fn drained_message(nm: &node_maintenance_operator::api::NodeMaintenance) -> String {
    nm.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .find(|c| c.type_ == "Drained")
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// `docs/drain-contract.md` §4: an eviction is awaited for as long as the API server takes to
/// answer it. An eviction webhook that allows after 12 s, and a hung one with
/// `failurePolicy: Ignore` and `timeoutSeconds: 15`, both let the drain finish (an operator that
/// hung up at 10 s never let it); a hung one with `failurePolicy: Fail` is named in `lastError`
/// by the API server's own answer (`failed calling webhook "…"`) until it is removed.
#[tokio::test]
async fn an_eviction_is_awaited_as_long_as_the_api_server_takes() {
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("slow");
    let node = worker_nodes(&env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let slow = TestWebhook::start(Answer::AllowAfter(Duration::from_secs(12)));
    let hung = TestWebhook::start(Answer::Hang);
    let (slow_label, ignored_label, failing_label) =
        (unique("slow"), unique("ignore"), unique("fail"));
    let slow_ns = labelled_namespace(&client, "slow", Some(&slow_label)).await;
    let ignored_ns = labelled_namespace(&client, "ignored", Some(&ignored_label)).await;
    let failing_ns = labelled_namespace(&client, "failing", Some(&failing_label)).await;
    let w1 = slow.register(&client, &slow_label, "Fail", 30).await;
    hung.register(&client, &ignored_label, "Ignore", 15).await;
    hung.register(&client, &failing_label, "Fail", 5).await;
    for ns in [&slow_ns, &ignored_ns, &failing_ns] {
        bare_pod(&client, ns, "p", &node, json!({})).await;
        wait_all_running(&client, ns, 1).await;
    }

    let name = unique("nm-slow");
    nm::create(&client, &name, &node).await;
    let failing = format!("failed calling webhook \"{failing_label}.e2e.medik8s.io\"");
    let held = nm::wait_status(
        &client,
        &name,
        "the slow and the ignored pods evicted, the failing one named by the API server's answer",
        LIMIT,
        |s| {
            s.blockers.as_ref().is_some_and(|b| {
                b.len() == 1 && b[0].name == "p" && b[0].namespace.starts_with("failing")
            }) && s
                .last_error
                .as_deref()
                .is_some_and(|e| e.contains(&failing))
        },
    )
    .await;
    let s = held.status.unwrap();
    assert_eq!(s.phase, Some(MaintenancePhase::Running));
    for ns in [&slow_ns, &ignored_ns] {
        assert_eq!(
            evicted_in(&client, ns, &["p".to_string()]).await,
            ["p"],
            "{ns}/p must be evicted: {s:?}"
        );
    }
    assert!(
        !slow.seen().is_empty(),
        "the slow webhook was asked by the API server"
    );
    w1.delete(&failing_label, &Default::default())
        .await
        .expect("failing webhook removed");
    let done = nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    assert_eq!(done.status.unwrap().last_error, None);
    w1.delete(&slow_label, &Default::default()).await.unwrap();
    w1.delete(&ignored_label, &Default::default())
        .await
        .unwrap();
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// `docs/drain-contract.md` §4: 192 pods whose evictions hang (a webhook on their namespace,
/// which sorts first), more than the 100 the process sends at once, do not hold back the 4 pods
/// of another namespace that nothing blocks: those are evicted at once, the namespaces taking
/// turns for the slots (upstream starts every eviction at once; an operator that spent its pass
/// on the hung ones evicted them 52 s later). Once the webhook's 30 s pass, the API server
/// ignores it (`failurePolicy: Ignore`) and the maintenance Succeeds (two turns of 30 s).
#[tokio::test]
async fn hung_evictions_do_not_hold_back_the_others() {
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("fair");
    let node = worker_nodes(&env.cluster, &client, &group, 1)
        .await
        .remove(0);
    // Reads each review and answers after the API server's 30 s timeout, so a turn of the
    // slots lasts longer than the 20 s the free pods are given. `Answer::Hang` never finishes
    // the TLS handshake, which the API server gives up on sooner: its turns were short enough
    // for the free pods to get a slot in time whatever the order.
    let hung = TestWebhook::start(Answer::AllowAfter(Duration::from_secs(3600)));
    let label = unique("hang");
    let hung_ns = labelled_namespace(&client, "aaa-hung", Some(&label)).await;
    let free_ns = labelled_namespace(&client, "zzz-free", None).await;
    let webhooks = hung.register(&client, &label, "Ignore", 30).await;
    for i in 0..192 {
        bare_pod(&client, &hung_ns, &format!("hung-{i:03}"), &node, json!({})).await;
    }
    let free: Vec<String> = (0..4).map(|i| format!("free-{i}")).collect();
    for p in &free {
        bare_pod(&client, &free_ns, p, &node, json!({})).await;
    }
    wait_all_running(&client, &hung_ns, 192).await;
    wait_all_running(&client, &free_ns, 4).await;

    let name = unique("nm-fair");
    let created = Instant::now();
    nm::create(&client, &name, &node).await;
    // Generous for a loaded 2-core machine, far below the 30 s the hung evictions take.
    wait_for(
        "the 4 pods nothing blocks evicted while 192 evictions hang",
        Duration::from_secs(20),
        || async {
            let gone = evicted_in(&client, &free_ns, &free).await;
            if gone.len() == free.len() {
                Ok(())
            } else {
                Err(format!(
                    "evicted so far: {gone:?}, {:?} after the maintenance was created",
                    created.elapsed()
                ))
            }
        },
    )
    .await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    webhooks.delete(&label, &Default::default()).await.unwrap();
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// `docs/drain-contract.md` §4: deleting the maintenance stops its drain. With evictions that
/// take 5 s each (a slow webhook) and 300 pods, more than the process sends at once (100), the
/// maintenance is deleted while the first are in flight: those waiting for a slot are never
/// sent, and the API server receives no eviction more than 2 s after the DELETE returned.
#[tokio::test]
async fn deleting_the_maintenance_stops_its_evictions() {
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("stop");
    let node = worker_nodes(&env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let slow = TestWebhook::start(Answer::AllowAfter(Duration::from_secs(5)));
    let label = unique("stop");
    let ns = labelled_namespace(&client, "stop", Some(&label)).await;
    let webhooks = slow.register(&client, &label, "Fail", 30).await;
    for i in 0..300 {
        bare_pod(&client, &ns, &format!("p-{i:03}"), &node, json!({})).await;
    }
    wait_all_running(&client, &ns, 300).await;
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());

    let name = unique("nm-stop");
    nm::create(&client, &name, &node).await;
    wait_for("the first eviction in flight", LIMIT, || async {
        if slow.seen().is_empty() {
            Err("no eviction reached the webhook yet".to_string())
        } else {
            Ok(())
        }
    })
    .await;
    nm::delete(&client, &name).await;
    let deleted = jiff::Timestamp::now();
    nm::wait_gone(&client, &name, LIMIT).await;
    wait_for(&format!("node {node} restored"), LIMIT, || {
        common::node::restored(&client, &node)
    })
    .await;
    // Every eviction already sent has been answered (5 s each) well within this wait, and no
    // later one may come: wait for the audit log to hold the answers of those in flight.
    let sent = slow.seen().len();
    let mut events: Vec<AuditEvent> = Vec::new();
    let deadline = Instant::now() + LIMIT;
    loop {
        events.extend(audit.read().unwrap().into_iter().filter(|e| {
            e.subresource == "eviction" && e.namespace == ns && e.stage == "ResponseComplete"
        }));
        if events.len() >= sent {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the audit log holds {} of the {sent} evictions sent",
            events.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let late: Vec<String> = events
        .iter()
        .filter(|e| e.received > deleted + jiff::SignedDuration::from_secs(2))
        .map(|e| format!("{} at {}", e.name, e.received))
        .collect();
    assert!(
        late.is_empty(),
        "evictions received more than 2 s after the DELETE returned at {deleted}: {late:?}"
    );
    assert!(
        events.len() < 300,
        "every pod was asked, so no eviction waited for a slot: the test proves nothing"
    );
    webhooks.delete(&label, &Default::default()).await.unwrap();
}

/// `docs/drain-contract.md` §4 and §10 (`paused`): writing `spec.paused: true` while 300
/// evictions wait on a webhook that answers in 5 s (more than the process sends at once, so
/// some wait for a slot) stops those not yet sent: none is received more than 2 s after the
/// pause was written (they were 2 to 8 s later before the gate, issue 46 item 3).
#[tokio::test]
async fn pausing_the_maintenance_stops_its_queued_evictions() {
    halting_stops_queued_evictions("pausehalt", json!({"spec": {"paused": true}})).await;
}

/// `docs/drain-contract.md` §4 and §10 (`stage`): as [`pausing_the_maintenance_stops_its_queued_evictions`],
/// moving the maintenance back to stage `Idle` (which restores the node) stops the evictions
/// not yet sent.
#[tokio::test]
async fn moving_the_maintenance_to_idle_stops_its_queued_evictions() {
    halting_stops_queued_evictions("idlehalt", json!({"spec": {"stage": "Idle"}})).await;
}

/// `docs/drain-contract.md` §4 ("A node going down"): as
/// [`pausing_the_maintenance_stops_its_queued_evictions`], `GracefulNodeShutdownInProgress=True`
/// written on the node's status by an admin stops the evictions not yet sent (the gate reads the
/// node from the operator's Node watch).
#[tokio::test]
async fn a_node_going_down_stops_its_queued_evictions() {
    let down = json!({"status": {"conditions": [{
        "type": "GracefulNodeShutdownInProgress", "status": "True", "reason": "AdminShutdown",
        "message": "e2e"
    }]}});
    halting_stops_queued_evictions("downhalt", down).await;
}

/// 300 pods behind an eviction webhook that allows after 5 s; once the first eviction reaches
/// it, `halt` is merged into the maintenance (a `status` patch: into its node's status, as an
/// admin writes a condition). Every eviction sent is answered, and none is
/// received (the API server's audit log) more than 2 s after the write returned.
async fn halting_stops_queued_evictions(prefix: &str, halt: serde_json::Value) {
    let env = env();
    let client = env.cluster.client().await;
    let group = unique(prefix);
    let node = worker_nodes(&env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let slow = TestWebhook::start(Answer::AllowAfter(Duration::from_secs(5)));
    let label = unique(prefix);
    let ns = labelled_namespace(&client, prefix, Some(&label)).await;
    let webhooks = slow.register(&client, &label, "Fail", 30).await;
    for i in 0..300 {
        bare_pod(&client, &ns, &format!("p-{i:03}"), &node, json!({})).await;
    }
    wait_all_running(&client, &ns, 300).await;
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());

    let name = unique(prefix);
    nm::create(&client, &name, &node).await;
    wait_for("the first eviction in flight", LIMIT, || async {
        if slow.seen().is_empty() {
            Err("no eviction reached the webhook yet".to_string())
        } else {
            Ok(())
        }
    })
    .await;
    let nms = Api::<node_maintenance_operator::api::NodeMaintenance>::all(client.clone());
    if halt.get("status").is_some() {
        // A status patch is the node's, as an admin writes a condition.
        Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
            .patch_status(&node, &PatchParams::default(), &Patch::Strategic(&halt))
            .await
            .unwrap();
    } else {
        nms.patch(&name, &PatchParams::default(), &Patch::Merge(&halt))
            .await
            .unwrap();
    }
    let halted = jiff::Timestamp::now();
    // Every eviction sent is answered 5 s after it reached the webhook, which frees its slot:
    // an eviction still queued then would be sent at once. Wait for those answers, then 3 s
    // more for such a straggler to reach the audit log.
    let mut events: Vec<AuditEvent> = Vec::new();
    let mut answered_at: Option<Instant> = None;
    wait_for("every eviction sent answered, and 3 s more", LIMIT, || {
        events.extend(audit.read().unwrap().into_iter().filter(|e| {
            e.subresource == "eviction" && e.namespace == ns && e.stage == "ResponseComplete"
        }));
        let sent = slow.seen().len();
        if events.len() < sent {
            answered_at = None;
        } else {
            answered_at.get_or_insert_with(Instant::now);
        }
        let result = match answered_at {
            Some(t) if t.elapsed() >= Duration::from_secs(3) => Ok(()),
            _ => Err(format!(
                "{} of the {sent} evictions sent answered",
                events.len()
            )),
        };
        async move { result }
    })
    .await;
    let late: Vec<String> = events
        .iter()
        .filter(|e| e.received > halted + jiff::SignedDuration::from_secs(2))
        .map(|e| format!("{} at {}", e.name, e.received))
        .collect();
    assert!(
        late.is_empty(),
        "{} evictions received more than 2 s after {halt} was written at {halted}: {late:?}",
        late.len()
    );
    assert!(
        events.len() < 300,
        "every pod was asked, so no eviction waited for a slot: the test proves nothing"
    );
    let last = events.iter().map(|e| e.received).max();
    eprintln!(
        "{halt}: {} of 300 evictions received, the last at {last:?}, the write at {halted}",
        events.len()
    );
    nm::delete_and_wait_restored(&client, &name, &node).await;
    webhooks.delete(&label, &Default::default()).await.unwrap();
}

/// `docs/drain-contract.md` §2: a one-replica Deployment that tolerates every taint and can
/// only run on the node (a Calico-style operator, a pinned agent), and a second one like it:
/// each original is evicted once, each replacement is kept and named as kept, before the
/// maintenance Succeeds (held open by [`HELD_OPEN`] until both replacements run on the node),
/// and no pod of either workload is evicted more than twice (an operator
/// that judged arrival with a 2 s margin evicted such a workload 11 times in 2 s, and
/// succeeded between two replacements without naming the one that landed).
#[tokio::test]
async fn a_tolerating_workload_is_evicted_once_and_its_replacement_kept() {
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("repl");
    let node = worker_nodes(&env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "repl").await;
    for app in ["agent", "operator"] {
        let d: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(json!({
            "metadata": {"name": app},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": app}},
                "template": {
                    "metadata": {"labels": {"app": app}},
                    "spec": {
                        "nodeSelector": {"nmo-test": group},
                        "tolerations": [{"operator": "Exists"}],
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]
                    }
                }
            }
        }))
        .unwrap();
        Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &d)
            .await
            .unwrap();
        wait_running(&client, &ns, app, 1, LIMIT).await;
    }
    let originals: Vec<Pod> = [
        pods(&client, &ns, "agent").await,
        pods(&client, &ns, "operator").await,
    ]
    .concat();
    hold_the_drain_open(&client, &ns, &node).await;
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());

    let name = unique("nm-repl");
    nm::create(&client, &name, &node).await;
    for app in ["agent", "operator"] {
        wait_for(
            &format!("{app}'s replacement Running on the node"),
            LIMIT,
            || async {
                let now = pods(&client, &ns, app).await;
                match now.as_slice() {
                    [p] if running(p)
                        && node_of(p) == node
                        && originals.iter().all(|o| o.metadata.uid != p.metadata.uid) =>
                    {
                        Ok(())
                    }
                    other => Err(format!(
                        "{:?}",
                        other
                            .iter()
                            .map(|p| (&p.metadata.name, running(p)))
                            .collect::<Vec<_>>()
                    )),
                }
            },
        )
        .await;
    }
    let_the_drain_end(&client, &ns).await;
    let done = nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let drained = drained_message(&done);
    for app in ["agent", "operator"] {
        let now = pods(&client, &ns, app).await;
        let on_node: Vec<&Pod> = now
            .iter()
            .filter(|p| node_of(p) == node && p.metadata.deletion_timestamp.is_none())
            .collect();
        assert_eq!(on_node.len(), 1, "{app}: one replacement on the node");
        let kept = on_node[0].metadata.name.clone().unwrap();
        assert!(
            drained.contains(&format!("{ns}/{kept} (ToleratesMaintenanceTaints)")),
            "{app}: the replacement on the node at Succeeded is named as kept: {drained:?}"
        );
    }
    // The API server's record of the evictions it accepted, per workload.
    let events = audit.read().unwrap();
    let accepted = accepted_in(&events, &ns);
    for app in ["agent", "operator"] {
        let n = accepted
            .iter()
            .filter(|e| e.name.starts_with(&format!("{app}-")))
            .count();
        assert!(
            (1..=2).contains(&n),
            "{app}: evicted {n} times: {:?}",
            accepted
                .iter()
                .map(|e| (&e.name, e.received))
                .collect::<Vec<_>>()
        );
    }
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// `docs/drain-contract.md` §4: a drain of 300 pods that each take their grace period to go
/// (kwok deletes them as a kubelet would) asks the API server once per pod. Answers arrive while
/// later rounds list the node; a listing taken before a pod's eviction was accepted still shows it
/// running, and asking it again would cost the API server a second eviction for nothing.
#[tokio::test]
async fn every_pod_of_a_big_drain_is_asked_once() {
    use futures::StreamExt as _;
    const PODS: usize = 300;
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("once");
    let node = worker_nodes(&env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "once").await;
    futures::stream::iter(0..PODS)
        .for_each_concurrent(16, |i| {
            let (client, ns, node) = (&client, &ns, &node);
            async move {
                let grace = json!({"spec": {"terminationGracePeriodSeconds": 30}});
                bare_pod(client, ns, &format!("p-{i:03}"), node, grace).await;
            }
        })
        .await;
    wait_all_running(&client, &ns, PODS).await;
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());

    let name = unique("nm-once");
    nm::create(&client, &name, &node).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let mut asked: std::collections::BTreeMap<String, Vec<u16>> = Default::default();
    for e in audit.read().unwrap() {
        if e.subresource == "eviction" && e.namespace == ns && e.stage == "ResponseComplete" {
            asked.entry(e.name).or_default().push(e.code);
        }
    }
    let twice: Vec<_> = asked.iter().filter(|(_, codes)| codes.len() > 1).collect();
    assert!(
        twice.is_empty(),
        "{} of {PODS} pods asked more than once ({} requests in all); the first: {:?}",
        twice.len(),
        asked.values().map(Vec::len).sum::<usize>(),
        twice.iter().take(5).collect::<Vec<_>>()
    );
    assert_eq!(asked.len(), PODS, "every pod asked");
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// `n` bare pods `held-NN` on `node` in `ns`, Running, under one PodDisruptionBudget `held`
/// (`minAvailable: n`) whose status counts them all healthy and allows no disruption; returns
/// the budgets of `ns`.
async fn held_by_one_budget(
    client: &kube::Client,
    ns: &str,
    node: &str,
    n: usize,
) -> Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> {
    for i in 0..n {
        let labels = json!({"metadata": {"labels": {"app": "held"}}});
        bare_pod(client, ns, &format!("held-{i:02}"), node, labels).await;
    }
    min_available_budget(client, ns, "held", "held", n, n).await
}

/// `docs/drain-contract.md` §1 ("Causes many pods share"): 60 pods under one
/// PodDisruptionBudget that allows no disruption, and two pods no budget covers. The two are
/// evicted at once; over the next 30 s the API server receives at most one eviction of the
/// budget's pods per 5 s retry (kubectl drain and upstream ask all 60 every 5 s: 360 requests),
/// status names the budget for a pod that was never asked, and once the budget is gone the
/// maintenance Succeeds.
#[tokio::test]
async fn a_budget_held_drain_asks_through_one_pod_and_finishes_when_the_budget_allows() {
    const HELD: usize = 60;
    // `status.blockers` lists at most 50 pods (`docs/drain-contract.md` §5).
    const LISTED_BLOCKERS: usize = 50;
    const WINDOW: Duration = Duration::from_secs(30);
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("budget");
    let node = worker_nodes(&env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "budget").await;
    for i in 0..2 {
        bare_pod(&client, &ns, &format!("free-{i}"), &node, json!({})).await;
    }
    let budgets = held_by_one_budget(&client, &ns, &node, HELD).await;
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());

    let name = unique("nm-budget");
    nm::create(&client, &name, &node).await;
    let free: Vec<String> = (0..2).map(|i| format!("free-{i}")).collect();
    wait_for("the pods no budget covers evicted", LIMIT, || async {
        let gone = evicted_in(&client, &ns, &free).await;
        if gone.len() == 2 {
            Ok(())
        } else {
            Err(format!("evicted: {gone:?}"))
        }
    })
    .await;
    let window_start = jiff::Timestamp::now();
    tokio::time::sleep(WINDOW).await;
    let window_end = jiff::Timestamp::now();
    let asked: Vec<AuditEvent> = audit
        .read()
        .unwrap()
        .into_iter()
        .filter(|e| {
            e.subresource == "eviction"
                && e.namespace == ns
                && e.stage == "ResponseComplete"
                && e.name.starts_with("held-")
                && e.received >= window_start
                && e.received <= window_end
        })
        .collect();
    // One probe per 5 s retry, and one more for where the window falls.
    let bound = (WINDOW.as_secs() / 5 + 1) as usize;
    assert!(
        asked.len() <= bound,
        "{} evictions of the budget's pods in {}s (at most {bound}); the first: {:?}",
        asked.len(),
        WINDOW.as_secs(),
        asked
            .iter()
            .take(12)
            .map(|e| (&e.name, e.code))
            .collect::<Vec<_>>()
    );
    assert!(
        !asked.is_empty(),
        "no eviction of the budget's pods at all: the budget was never asked"
    );
    let probed: std::collections::HashSet<&str> = asked.iter().map(|e| e.name.as_str()).collect();
    let nm = nm::wait_status(
        &client,
        &name,
        "held pods named with their budget",
        LIMIT,
        |s| {
            s.blockers
                .iter()
                .flatten()
                .filter(|b| b.pod_disruption_budget.as_deref() == Some("held"))
                .count()
                >= HELD.min(LISTED_BLOCKERS)
        },
    )
    .await;
    let status = nm.status.unwrap();
    let unasked = status
        .blockers
        .iter()
        .flatten()
        .find(|b| !probed.contains(b.name.as_str()))
        .expect("a held pod that was not asked in the window");
    assert_eq!(unasked.reason, "PodDisruptionBudget", "{unasked:?}");
    assert!(
        status
            .last_error
            .as_deref()
            .unwrap_or_default()
            .contains("disruption budget"),
        "lastError says why: {:?}",
        status.last_error
    );
    assert_eq!(status.phase, Some(MaintenancePhase::Running));

    budgets.delete("held", &Default::default()).await.unwrap();
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    nm::delete(&client, &name).await;
    nm::wait_gone(&client, &name, LIMIT).await;
}

/// `docs/drain-contract.md` §1 ("Causes many pods share"; issue 46 item 10): two pods under a
/// budget that allows no disruption, no eviction webhook anywhere. Once status names both with
/// the budget, every status the API server stores for the next three retries (the
/// NodeMaintenance's own watch, so no write is missed) names both with it: the probe, asked
/// again each 5 s, is not shown `Evicting` for the milliseconds of its ask, and `lastError`
/// keeps naming both.
#[tokio::test]
async fn each_held_pod_stays_named_with_its_budget_through_the_retries() {
    use futures::StreamExt;
    use kube::runtime::watcher;
    const WINDOW: Duration = Duration::from_secs(16);
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("steady");
    let node = worker_nodes(&env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "steady").await;
    let budgets = held_by_one_budget(&client, &ns, &node, 2).await;
    let name = unique("nm-steady");
    nm::create(&client, &name, &node).await;
    let both_held = |s: &node_maintenance_operator::api::NodeMaintenanceStatus| {
        let held = s
            .blockers
            .iter()
            .flatten()
            .filter(|b| b.reason == "PodDisruptionBudget")
            .filter(|b| b.pod_disruption_budget.as_deref() == Some("held"))
            .count();
        let error = s.last_error.as_deref().unwrap_or_default();
        held == 2 && error.contains("held-00") && error.contains("held-01")
    };
    nm::wait_status(
        &client,
        &name,
        "both pods named with the budget",
        LIMIT,
        |s| both_held(s),
    )
    .await;
    let api: Api<node_maintenance_operator::api::NodeMaintenance> = Api::all(client.clone());
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut seen = Vec::new();
    let mut stream = watcher::watcher(api, config).boxed();
    let _ = tokio::time::timeout(WINDOW, async {
        while let Some(Ok(event)) = stream.next().await {
            if let watcher::Event::Apply(nm) | watcher::Event::InitApply(nm) = event {
                seen.push(nm.status.unwrap_or_default());
            }
        }
    })
    .await;
    assert!(!seen.is_empty(), "the watch saw no status");
    let flipped: Vec<_> = seen
        .iter()
        .filter(|s| !both_held(s))
        .map(|s| (&s.blockers, &s.last_error))
        .collect();
    assert!(
        flipped.is_empty(),
        "{} of {} statuses in {}s do not name both pods with the budget: {flipped:?}",
        flipped.len(),
        seen.len(),
        WINDOW.as_secs()
    );
    budgets.delete("held", &Default::default()).await.unwrap();
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    nm::delete(&client, &name).await;
    nm::wait_gone(&client, &name, LIMIT).await;
}

/// `docs/drain-contract.md` §1 ("Causes many pods share"): 4 pods under a budget of
/// `minAvailable: 4`, `held-00` and `held-03` not Ready. Below its healthy count the budget
/// refuses all four, those not Ready too: `held-00`, listed first, is its probe and refused,
/// and all four are held. Lowered to `minAvailable: 2`, it still allows no disruption and
/// refuses its two Ready pods, but the API server now evicts the two that are not Ready (the
/// budget has its healthy pods): the drain asks each on its own and both go. `held-03` was
/// never the probe: held behind a Ready pod's refusal, it would stay until the budget allowed,
/// and its replacement could never become the healthy pod the budget waits for. `held-00` is
/// asked when the budget's watch sees it regain its healthy count, before the retry of its own
/// refusal would be due (`controller::triggers::budgets`; from the API server's record).
#[tokio::test]
async fn a_pod_that_is_not_ready_is_not_held_behind_its_budgets_refusal() {
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("unready");
    let node = worker_nodes(&env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "unready").await;
    let names: Vec<String> = (0..4).map(|i| format!("held-{i:02}")).collect();
    for name in &names {
        let labels = json!({"metadata": {"labels": {"app": "held"}}});
        bare_pod(&client, &ns, name, &node, labels).await;
    }
    wait_all_running(&client, &ns, names.len()).await;
    let (probe, unready) = (names[0].clone(), names[3].clone());
    for name in [&probe, &unready] {
        Api::<Pod>::namespaced(client.clone(), &ns)
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Strategic(
                    json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
                ),
            )
            .await
            .unwrap();
    }
    let budgets = min_available_budget(&client, &ns, "held", "held", 4, 2).await;
    let held_by_budget = |n: usize| {
        move |s: &node_maintenance_operator::api::NodeMaintenanceStatus| {
            s.blockers
                .iter()
                .flatten()
                .filter(|b| b.pod_disruption_budget.as_deref() == Some("held"))
                .count()
                == n
        }
    };
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());

    let name = unique("nm-unready");
    nm::create(&client, &name, &node).await;
    let nm = nm::wait_status(
        &client,
        &name,
        "all four pods held by their budget",
        LIMIT,
        held_by_budget(4),
    )
    .await;
    let blockers = nm.status.unwrap().blockers.unwrap_or_default();
    assert!(
        [&probe, &unready]
            .iter()
            .all(|p| blockers.iter().any(|b| &&b.name == p)),
        "the pods that are not Ready held too: {blockers:?}"
    );
    assert!(
        evicted_in(&client, &ns, &names).await.is_empty(),
        "a pod was evicted while its budget, below its healthy count, allowed none"
    );

    // Lowered right after one of the probe's refusals, so that the budget's change reaches the
    // drain long before that refusal's retry is due.
    let probe_asked = |events: Vec<AuditEvent>| {
        events.into_iter().filter(|e| {
            e.subresource == "eviction"
                && e.namespace == ns
                && e.name == probe
                && e.stage == "ResponseComplete"
        })
    };
    let refusals = |asked: &[AuditEvent]| asked.iter().filter(|e| e.code == 429).count();
    let mut asked: Vec<AuditEvent> = probe_asked(audit.read().unwrap()).collect();
    let refused_before = refusals(&asked);
    let deadline = Instant::now() + LIMIT;
    while refusals(&asked) == refused_before {
        assert!(
            Instant::now() < deadline,
            "{probe} not asked again within {LIMIT:?} while held: {asked:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        asked.extend(probe_asked(audit.read().unwrap()));
    }
    budgets
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"minAvailable": 2}})),
        )
        .await
        .unwrap();
    wait_budget_observed(&budgets, "held", 2).await;
    nm::wait_status(
        &client,
        &name,
        "the Ready pods held by their budget",
        LIMIT,
        held_by_budget(2),
    )
    .await;
    let both = [probe.clone(), unready.clone()];
    wait_for("the pods that are not Ready evicted", LIMIT, || async {
        match evicted_in(&client, &ns, &both).await {
            gone if gone.len() == 2 => Ok(()),
            gone => Err(format!("evicted: {gone:?}")),
        }
    })
    .await;
    assert!(
        evicted_in(&client, &ns, &names[1..3]).await.is_empty(),
        "a Ready pod was evicted while its budget allowed none"
    );
    asked.extend(probe_asked(audit.read().unwrap()));
    let refused = asked
        .iter()
        .filter(|e| e.code == 429)
        .map(|e| e.received)
        .max()
        .unwrap_or_else(|| panic!("{probe} never refused: it was not the probe; {asked:?}"));
    let accepted = asked
        .iter()
        .find(|e| e.code == 201)
        .unwrap_or_else(|| panic!("{probe}'s eviction not accepted: {asked:?}"))
        .received;
    // Its own retry comes 5 s after its refusal (tests/drain.rs measures it no sooner than
    // 4.5 s); the budget's watch asks it as soon as the budget lets it go.
    let waited = accepted.duration_since(refused);
    assert!(
        waited < jiff::SignedDuration::from_millis(4500),
        "{probe} asked {waited:#} after its refusal, at its retry: the budget regaining its \
         healthy count did not end the retry"
    );

    budgets.delete("held", &Default::default()).await.unwrap();
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    nm::delete(&client, &name).await;
    nm::wait_gone(&client, &name, LIMIT).await;
}

/// `docs/drain-contract.md` §1 ("A pod's own rule"): on one node, `app` pods with no label,
/// `db` pods of drain order 2, a `job` pod labelled `wait-completed` and a `cache` pod labelled
/// `skip`; once with this project's label, once with Cluster API's for `skip` and
/// `wait-completed`, once with no label but the maintenance's `spec.drainRules` saying the same
/// (the job's rule also selecting by its namespace's labels). The API server's record shows every `app` eviction answered before the
/// first `db` eviction arrived; the job is never evicted, the maintenance stays Running with
/// `WaitingForCompletion` until it finishes, then Succeeds; the skipped pod stays, named as
/// kept.
#[tokio::test]
async fn a_pods_drain_label_orders_skips_and_waits_for_it() {
    let env = env();
    let client = env.cluster.client().await;
    for (family, rule) in [
        ("ours", "nodemaintenance.medik8s.io/drain"),
        ("capi", "cluster.x-k8s.io/drain"),
        ("rules", ""),
    ] {
        let group = unique(&format!("rules-{family}"));
        let node = worker_nodes(&env.cluster, &client, &group, 1)
            .await
            .remove(0);
        let ns = namespace(&client, "rules").await;
        let labels = |value: Option<(&str, &str)>| match value {
            Some(_) if rule.is_empty() => json!({}),
            Some((k, v)) => json!({"metadata": {"labels": {k: v}}}),
            None => json!({}),
        };
        for i in 0..3 {
            bare_pod(&client, &ns, &format!("app-{i}"), &node, labels(None)).await;
            let order =
                Some(("nodemaintenance.medik8s.io/drain", "2")).filter(|_| !rule.is_empty());
            bare_pod(&client, &ns, &format!("db-{i}"), &node, labels(order)).await;
        }
        bare_pod(
            &client,
            &ns,
            "job",
            &node,
            labels(Some((rule, "wait-completed"))),
        )
        .await;
        bare_pod(&client, &ns, "cache", &node, labels(Some((rule, "skip")))).await;
        wait_all_running(&client, &ns, 8).await;
        let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());

        let name = unique("nm-rules");
        let mut maintenance = serde_json::to_value(nm::new(&name, &node, "e2e")).unwrap();
        if rule.is_empty() {
            maintenance["spec"]["drainRules"] = json!([
                {"podSelector": {"matchExpressions": [
                    {"key": "app", "operator": "In", "values": ["db-0", "db-1", "db-2"]}]},
                 "behavior": "Drain", "order": 2},
                {"podSelector": {"matchLabels": {"app": "job"}},
                 "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                 "behavior": "WaitCompleted"},
                {"podSelector": {"matchLabels": {"app": "cache"}}, "behavior": "Skip"},
            ]);
        }
        Api::<node_maintenance_operator::api::NodeMaintenance>::all(client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(maintenance).unwrap(),
            )
            .await
            .unwrap();
        let waiting = nm::wait_status(
            &client,
            &name,
            "only the job left, waited for",
            LIMIT,
            |s| {
                let blockers = s.blockers.iter().flatten();
                let reasons: Vec<&str> = blockers.map(|b| b.reason.as_str()).collect();
                reasons == ["WaitingForCompletion"]
            },
        )
        .await;
        let status = waiting.status.unwrap();
        assert_eq!(status.phase, Some(MaintenancePhase::Running), "{family}");
        assert_eq!(status.blockers.unwrap()[0].name, "job", "{family}");
        // Still waited for a while later, and never asked.
        tokio::time::sleep(Duration::from_secs(6)).await;
        let nm_now = Api::<node_maintenance_operator::api::NodeMaintenance>::all(client.clone())
            .get(&name)
            .await
            .unwrap();
        assert_eq!(
            nm_now.status.and_then(|s| s.phase),
            Some(MaintenancePhase::Running),
            "{family}: Running while the job runs"
        );
        // The job finishes (as its kubelet would report it).
        Api::<Pod>::namespaced(client.clone(), &ns)
            .patch_status(
                "job",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
            )
            .await
            .unwrap();
        let done = nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
        let drained = drained_message(&done);
        assert!(
            drained.contains(&format!("{ns}/cache (Skipped)")),
            "{family}: the skipped pod named as kept: {drained:?}"
        );
        let pods_api = Api::<Pod>::namespaced(client.clone(), &ns);
        for kept in ["cache", "job"] {
            let p = pods_api.get(kept).await.unwrap();
            assert!(
                p.metadata.deletion_timestamp.is_none(),
                "{family}: {kept} was not evicted"
            );
        }
        let events: Vec<AuditEvent> = audit
            .read()
            .unwrap()
            .into_iter()
            .filter(|e| {
                e.subresource == "eviction" && e.namespace == ns && e.stage == "ResponseComplete"
            })
            .collect();
        let of = |prefix: &str| -> Vec<&AuditEvent> {
            events
                .iter()
                .filter(|e| e.name.starts_with(prefix))
                .collect()
        };
        assert!(
            of("job").is_empty() && of("cache").is_empty(),
            "{family}: {events:?}"
        );
        let (apps, dbs) = (of("app-"), of("db-"));
        assert!(apps.len() >= 3 && dbs.len() >= 3, "{family}: {events:?}");
        let last_app = apps.iter().map(|e| e.completed).max().unwrap();
        let first_db = dbs.iter().map(|e| e.received).min().unwrap();
        assert!(
            last_app < first_db,
            "{family}: a db pod was asked at {first_db}, before the last app eviction was \
             answered at {last_app}"
        );
        nm::delete_and_wait_restored(&client, &name, &node).await;
    }
}

/// `docs/drain-contract.md` §10 (drain labels with `paused`): on one node a pod `first` (no
/// label) under a budget that allows nothing, `db-0` and `db-1` of drain order 2, a `job`
/// labelled `wait-completed` and a `cache` labelled `skip`. Paused while `first` is held (no
/// eviction accepted until then), the budget then removed: no eviction accepted for 5 s.
/// Unpaused: by the API server's record `first` is evicted and answered before either `db`
/// eviction arrives, every accepted eviction after the pause ended; the job is waited for
/// (`WaitingForCompletion` alone, Running 3 s later) and the cache never asked; once the job
/// finishes, Succeeded naming `cache` as kept.
#[tokio::test]
async fn drain_labels_order_skip_and_wait_hold_across_a_pause() {
    let env = env();
    let client = env.cluster.client().await;
    let started = Instant::now();
    let group = unique("rules-pause");
    let node = worker_nodes(&env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "rules-pause").await;
    let label = |v: &str| json!({"metadata": {"labels": {"nodemaintenance.medik8s.io/drain": v}}});
    bare_pod(&client, &ns, "first", &node, json!({})).await;
    bare_pod(&client, &ns, "db-0", &node, label("2")).await;
    bare_pod(&client, &ns, "db-1", &node, label("2")).await;
    bare_pod(&client, &ns, "job", &node, label("wait-completed")).await;
    bare_pod(&client, &ns, "cache", &node, label("skip")).await;
    wait_all_running(&client, &ns, 5).await;
    let budgets = min_available_budget(&client, &ns, "first", "first", 1, 1).await;
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());
    let name = unique("nm-rules-pause");
    nm::create(&client, &name, &node).await;
    nm::wait_status(&client, &name, "first held by its budget", LIMIT, |s| {
        s.blockers
            .iter()
            .flatten()
            .any(|b| b.name == "first" && b.reason == "PodDisruptionBudget")
    })
    .await;
    let nms = Api::<node_maintenance_operator::api::NodeMaintenance>::all(client.clone());
    let set_paused = |paused: bool| {
        let (nms, name) = (nms.clone(), name.clone());
        async move {
            nms.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"paused": paused}})),
            )
            .await
            .unwrap();
        }
    };
    set_paused(true).await;
    nm::wait_status(&client, &name, "DrainPaused", LIMIT, |s| {
        s.conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "DrainPaused" && c.status == "True")
    })
    .await;
    let mut events: Vec<AuditEvent> = audit.read().unwrap();
    let before_pause: Vec<String> = accepted_in(&events, &ns)
        .iter()
        .map(|e| format!("{} at {}", e.name, e.received))
        .collect();
    assert!(
        before_pause.is_empty(),
        "evictions accepted before the pause, while first was held: {before_pause:?}"
    );
    budgets.delete("first", &Default::default()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    events.extend(audit.read().unwrap());
    let paused_evictions: Vec<String> = accepted_in(&events, &ns)
        .iter()
        .map(|e| format!("{} at {}", e.name, e.received))
        .collect();
    assert!(
        paused_evictions.is_empty(),
        "evictions accepted while paused: {paused_evictions:?}"
    );

    let resumed = jiff::Timestamp::now();
    set_paused(false).await;
    let waiting = nm::wait_status(
        &client,
        &name,
        "only the job left, waited for",
        LIMIT,
        |s| {
            let reasons: Vec<&str> = s
                .blockers
                .iter()
                .flatten()
                .map(|b| b.reason.as_str())
                .collect();
            reasons == ["WaitingForCompletion"]
        },
    )
    .await;
    assert_eq!(waiting.status.unwrap().blockers.unwrap()[0].name, "job");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let now = nms.get(&name).await.unwrap();
    assert_eq!(
        now.status.and_then(|s| s.phase),
        Some(MaintenancePhase::Running),
        "Running while the job runs"
    );
    events.extend(audit.read().unwrap());
    let accepted = accepted_in(&events, &ns);
    let asked = |prefix: &str| -> Vec<&AuditEvent> {
        events
            .iter()
            .filter(|e| e.subresource == "eviction" && e.namespace == ns)
            .filter(|e| e.name.starts_with(prefix))
            .collect()
    };
    assert!(
        asked("job").is_empty() && asked("cache").is_empty(),
        "the waited-for or skipped pod was asked: {:?}",
        accepted.iter().map(|e| &e.name).collect::<Vec<_>>()
    );
    let of = |prefix: &str| -> Vec<&&AuditEvent> {
        accepted
            .iter()
            .filter(|e| e.name.starts_with(prefix))
            .collect()
    };
    let (first, dbs) = (of("first"), of("db-"));
    assert!(
        first.len() == 1 && dbs.len() == 2,
        "accepted evictions: {:?}",
        accepted.iter().map(|e| &e.name).collect::<Vec<_>>()
    );
    let first_db = dbs.iter().map(|e| e.received).min().unwrap();
    assert!(
        first[0].completed < first_db,
        "a db pod was asked at {first_db}, before first's eviction was answered at {}",
        first[0].completed
    );
    for e in &accepted {
        assert!(
            e.received > resumed,
            "{} evicted at {}, before the pause ended at {resumed}",
            e.name,
            e.received
        );
    }
    Api::<Pod>::namespaced(client.clone(), &ns)
        .patch_status(
            "job",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
        )
        .await
        .unwrap();
    let done = nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let drained = drained_message(&done);
    assert!(
        drained.contains(&format!("{ns}/cache (Skipped)")),
        "the skipped pod named as kept: {drained:?}"
    );
    nm::delete_and_wait_restored(&client, &name, &node).await;
    eprintln!("rules-pause: {:?}", started.elapsed());
}

/// `docs/drain-contract.md` §10: a maintenance held by a budget is paused by its annotation; once
/// the budget is gone, the API server still receives no eviction of its pods for 20 s, the node
/// stays cordoned and the maintenance Running with `DrainPaused`; unpaused, it Succeeds.
#[tokio::test]
async fn a_paused_maintenance_sends_no_eviction_and_resumes_when_unpaused() {
    const PODS: usize = 10;
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("pause");
    let node = worker_nodes(&env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "pause").await;
    let budgets = held_by_one_budget(&client, &ns, &node, PODS).await;
    let mut since_create = AuditCursor::at_end(env.cluster.audit_log_path());
    let name = unique("nm-pause");
    nm::create(&client, &name, &node).await;
    nm::wait_status(&client, &name, "held by the budget", LIMIT, |s| {
        s.blockers
            .iter()
            .flatten()
            .any(|b| b.reason == "PodDisruptionBudget")
    })
    .await;
    let nms = Api::<node_maintenance_operator::api::NodeMaintenance>::all(client.clone());
    let annotate = |value: &'static str| {
        let nms = nms.clone();
        let name = name.clone();
        async move {
            let patch = json!({"metadata": {"annotations": {
                node_maintenance_operator::policy::PAUSED_ANNOTATION: value
            }}});
            nms.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .unwrap();
        }
    };
    annotate("true").await;
    let paused = |s: &node_maintenance_operator::api::NodeMaintenanceStatus| {
        s.conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "DrainPaused" && c.status == "True")
    };
    nm::wait_status(&client, &name, "DrainPaused", LIMIT, paused).await;
    // Evictions sent before the pause (the budget's probes) may still be answered: wait until
    // the API server has answered every eviction it received, then watch from there.
    let mut before: Vec<AuditEvent> = Vec::new();
    wait_for(
        "every eviction sent before the pause answered",
        LIMIT,
        || {
            before.extend(
                since_create
                    .read()
                    .unwrap()
                    .into_iter()
                    .filter(|e| e.subresource == "eviction" && e.namespace == ns),
            );
            let received = before.iter().filter(|e| e.stage == "RequestReceived");
            let open: Vec<&str> = received
                .filter(|r| {
                    !before
                        .iter()
                        .any(|e| e.stage == "ResponseComplete" && e.audit_id == r.audit_id)
                })
                .map(|r| r.name.as_str())
                .collect();
            let result = if open.is_empty() {
                Ok(())
            } else {
                Err(format!("not answered yet: {open:?}"))
            };
            async move { result }
        },
    )
    .await;
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());
    budgets.delete("held", &Default::default()).await.unwrap();
    // 20 s by default; the issue's 60 s in the long form.
    let window = std::env::var("NMO_PAUSE_WINDOW")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    tokio::time::sleep(Duration::from_secs(window)).await;
    let asked: Vec<String> = audit
        .read()
        .unwrap()
        .into_iter()
        .filter(|e| e.subresource == "eviction" && e.namespace == ns)
        .map(|e| format!("{} {} at {}", e.name, e.code, e.received))
        .collect();
    assert!(asked.is_empty(), "evictions while paused: {asked:?}");
    let now = nms.get(&name).await.unwrap();
    let status = now.status.unwrap();
    assert!(paused(&status) && status.phase == Some(MaintenancePhase::Running));
    let n = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .get(&node)
        .await
        .unwrap();
    assert_eq!(
        n.spec.and_then(|s| s.unschedulable),
        Some(true),
        "cordon kept while paused"
    );
    annotate("false").await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// The drain deadline of these tests (the knob's own tests use 90 s; the path is the same).
const TIMEOUT: Duration = Duration::from_secs(15);

/// Creates NodeMaintenance `name` for `node` with `drainTimeout` [`TIMEOUT`] and `onTimeout`
/// given as the spec fields, or as the annotations when `annotated` (how they reach a cluster
/// whose CRD is upstream's, which prunes unknown spec fields).
async fn create_with_deadline(
    client: &kube::Client,
    name: &str,
    node: &str,
    on_timeout: &str,
    annotated: bool,
) -> Result<(), kube::Error> {
    let mut nm = serde_json::to_value(nm::new(name, node, "e2e")).unwrap();
    let timeout = format!("{}s", TIMEOUT.as_secs());
    if annotated {
        nm["metadata"]["annotations"] = json!({
            node_maintenance_operator::policy::DRAIN_TIMEOUT_ANNOTATION: timeout,
            node_maintenance_operator::policy::ON_TIMEOUT_ANNOTATION: on_timeout,
        });
    } else {
        nm["spec"]["drainTimeout"] = json!(timeout);
        nm["spec"]["onTimeout"] = json!(on_timeout);
    }
    Api::<node_maintenance_operator::api::NodeMaintenance>::all(client.clone())
        .create(&PostParams::default(), &serde_json::from_value(nm).unwrap())
        .await
        .map(|_| ())
}

/// `docs/drain-contract.md` §10 (`onTimeout: ForceDelete`): a 2-replica Deployment under a
/// budget with `minAvailable: 2`. Asked without the grant, the webhook refuses it naming the
/// overlay; with `manifests/overlays/force-delete` applied it is admitted, stays Running with the
/// budget's blocker until the deadline, then deletes both pods, which have no grace period of
/// their own (a Warning event each, none earlier than their 1 s before the deadline) and
/// Succeeds.
#[tokio::test]
async fn past_the_deadline_force_delete_deletes_the_pods_a_budget_holds() {
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("force");
    let node = worker_nodes(&env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "force").await;
    // No grace period of their own: ForceDelete deletes them a second ahead of the deadline,
    // with its floor of 1 s (a pod's own grace: `force_delete_gives_each_pod_its_grace_...`).
    deployment(&client, &ns, "db", &group, 2, 0).await;
    wait_all_running(&client, &ns, 2).await;
    min_available_budget(&client, &ns, "db", "db", 2, 2).await;
    let before: Vec<Pod> = pods(&client, &ns, "db").await;

    let name = unique("nm-force");
    grant_force_delete(&client, &node).await;
    wait_for("ForceDelete admitted with the grant", LIMIT, || async {
        create_with_deadline(&client, &name, &node, "ForceDelete", false)
            .await
            .map_err(|e| e.to_string())
    })
    .await;
    nm::wait_status(&client, &name, "held by the budget", LIMIT, |s| {
        s.phase == Some(MaintenancePhase::Running)
            && s.blockers
                .iter()
                .flatten()
                .any(|b| b.reason == "PodDisruptionBudget")
    })
    .await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let deadline =
        node_drain_started(&client, &node).await + jiff::SignedDuration::try_from(TIMEOUT).unwrap();
    let forced = nm::warnings(&client, &name, "PodForceDeleted").await;
    assert_eq!(forced.len(), 2, "one Warning event per pod: {forced:?}");
    for pod in &before {
        let pod_name = pod.metadata.name.as_deref().unwrap();
        assert!(
            forced.iter().any(|(m, _)| m.contains(pod_name)),
            "{pod_name} not named in {forced:?}"
        );
        let now = Api::<Pod>::namespaced(client.clone(), &ns)
            .get_opt(pod_name)
            .await
            .unwrap();
        assert!(
            now.is_none_or(|p| p.metadata.uid != pod.metadata.uid),
            "{pod_name} still there"
        );
    }
    for (message, at) in &forced {
        assert!(
            *at >= deadline - jiff::SignedDuration::from_secs(2),
            "deleted at {at}, more than its 1 s grace before the deadline {deadline}: {message}"
        );
    }
    // Deleted a second ahead with a grace of 1 s, the pods may be gone by the deadline, and
    // the maintenance Succeeded before it passed: at most one announcement.
    let exceeded = nm::warnings(&client, &name, "DrainDeadlineExceeded").await;
    assert!(exceeded.len() <= 1, "{exceeded:?}");
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// `docs/drain-contract.md` §10 (`onTimeout: ForceDelete` and grace): a database pod with a
/// 30 s grace period under a budget that allows nothing, `drainTimeout: 45s`: the forced DELETE
/// carries its whole grace (the pod's `deletionGracePeriodSeconds` is 30, where it was 1 before,
/// issue 46 item 5) and is sent its grace ahead of the deadline, so its `deletionTimestamp`
/// (the DELETE's time plus its grace, by the API server's clock) is within 3 s before the
/// deadline; one `PodForceDeleted` event; the maintenance Succeeds once the pod is gone.
#[tokio::test]
async fn force_delete_gives_each_pod_its_grace_before_the_deadline() {
    use futures::StreamExt as _;
    use kube::runtime::watcher;
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("grace");
    let node = worker_nodes(&env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "grace").await;
    let db = json!({"spec": {"terminationGracePeriodSeconds": 30}});
    let pod = bare_pod(&client, &ns, "db", &node, db).await;
    wait_all_running(&client, &ns, 1).await;
    min_available_budget(&client, &ns, "db", "db", 1, 1).await;
    grant_force_delete(&client, &node).await;
    // The pod as the API server first shows it terminating: its grace and deletion time.
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let config = watcher::Config::default().fields("metadata.name=db");
    let terminating = tokio::spawn(
        watcher::watcher(pods, config)
            .filter_map(|e| async move {
                match e {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                        let m = p.metadata;
                        m.deletion_timestamp
                            .map(|t| (t.0, m.deletion_grace_period_seconds, m.uid))
                    }
                    _ => None,
                }
            })
            .boxed()
            .into_future(),
    );
    let name = unique("nm-grace");
    let mut nm = serde_json::to_value(nm::new(&name, &node, "e2e")).unwrap();
    nm["spec"]["drainTimeout"] = json!("45s");
    nm["spec"]["onTimeout"] = json!("ForceDelete");
    let nms = Api::<node_maintenance_operator::api::NodeMaintenance>::all(client.clone());
    wait_for("ForceDelete admitted with the grant", LIMIT, || async {
        nms.create(
            &PostParams::default(),
            &serde_json::from_value(nm.clone()).unwrap(),
        )
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
    })
    .await;
    let (seen, _) = tokio::time::timeout(LIMIT, terminating)
        .await
        .expect("the pod was not deleted within the limit")
        .unwrap();
    let (deletion, grace, uid) = seen.expect("the watch of the pod ended");
    assert_eq!(uid, pod.metadata.uid, "another pod named db");
    let deadline = node_drain_started(&client, &node).await + jiff::SignedDuration::from_secs(45);
    assert_eq!(grace, Some(30), "the forced DELETE's grace period");
    let sent = deletion - jiff::SignedDuration::from_secs(30);
    eprintln!(
        "DELETE with grace {grace:?} at {sent}, its grace ends at {deletion}, deadline {deadline}"
    );
    assert!(
        deletion <= deadline && deletion >= deadline - jiff::SignedDuration::from_secs(3),
        "the DELETE was sent at {sent}: the pod's grace ends at {deletion}, the deadline is \
         {deadline}"
    );
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let forced = nm::warnings(&client, &name, "PodForceDeleted").await;
    assert_eq!(forced.len(), 1, "one Warning event: {forced:?}");
    assert!(forced[0].0.contains("grace period of 30s"), "{forced:?}");
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// `docs/drain-contract.md` §10 (`onTimeout: ForceDelete` with `paused` and deletion): two
/// nodes, each with one pod (no grace of its own) under a budget that allows nothing and a
/// maintenance with `drainTimeout` [`TIMEOUT`] and `ForceDelete`, both paused before their
/// deadlines. 4 s past the later deadline neither pod is being deleted and no `PodForceDeleted`
/// event was given. Then the first is unpaused: its pod is force-deleted (one event) and it
/// Succeeds; the second is deleted: its node is restored, its pod still there 5 s later and no
/// event names it.
#[tokio::test]
async fn force_delete_waits_out_a_pause_is_decided_on_resume_and_never_after_the_delete() {
    let env = env();
    let client = env.cluster.client().await;
    let started = Instant::now();
    let group = unique("forcepause");
    let nodes = worker_nodes(&env.cluster, &client, &group, 2).await;
    let ns = namespace(&client, "forcepause").await;
    let held = ["held-0", "held-1"];
    for (pod, node) in held.iter().zip(&nodes) {
        bare_pod(&client, &ns, pod, node, json!({})).await;
    }
    wait_all_running(&client, &ns, 2).await;
    for pod in held {
        min_available_budget(&client, &ns, pod, pod, 1, 1).await;
    }
    grant_force_delete(&client, &nodes[0]).await;
    let names = [unique("nm-forceresume"), unique("nm-forcedeleted")];
    for (name, node) in names.iter().zip(&nodes) {
        wait_for("ForceDelete admitted with the grant", LIMIT, || async {
            create_with_deadline(&client, name, node, "ForceDelete", false)
                .await
                .map_err(|e| e.to_string())
        })
        .await;
    }
    let nms = Api::<node_maintenance_operator::api::NodeMaintenance>::all(client.clone());
    let set_paused = |name: &str, paused: bool| {
        let (nms, name) = (nms.clone(), name.to_string());
        async move {
            nms.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"paused": paused}})),
            )
            .await
            .unwrap();
        }
    };
    for name in &names {
        nm::wait_status(&client, name, "held by the budget", LIMIT, |s| {
            s.blockers
                .iter()
                .flatten()
                .any(|b| b.reason == "PodDisruptionBudget")
        })
        .await;
        set_paused(name, true).await;
    }
    let mut deadlines = Vec::new();
    for (name, node) in names.iter().zip(&nodes) {
        nm::wait_status(&client, name, "DrainPaused", LIMIT, |s| {
            s.conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "DrainPaused" && c.status == "True")
        })
        .await;
        let deadline = node_drain_started(&client, node).await
            + jiff::SignedDuration::try_from(TIMEOUT).unwrap();
        // Without a grace of its own, a pod is deleted from its deadline less 1 s.
        let paused_at = jiff::Timestamp::now();
        assert!(
            paused_at < deadline - jiff::SignedDuration::from_secs(1),
            "{name} paused at {paused_at}, not before its forced deletion was due ({deadline} less              1 s): the test's premise"
        );
        deadlines.push(deadline);
    }
    let past = *deadlines.iter().max().unwrap() + jiff::SignedDuration::from_secs(4);
    let wait = past.duration_since(jiff::Timestamp::now());
    tokio::time::sleep(Duration::try_from(wait).unwrap_or_default()).await;
    let pods_api = Api::<Pod>::namespaced(client.clone(), &ns);
    for (pod, name) in held.iter().zip(&names) {
        let p = pods_api.get_opt(pod).await.unwrap();
        assert!(
            p.as_ref()
                .is_some_and(|p| p.metadata.deletion_timestamp.is_none()),
            "{pod} deleted while {name} was paused past its deadline (gone, or its deletion: \
             {:?})",
            p.map(|p| p.metadata.deletion_timestamp)
        );
        let forced = nm::warnings(&client, name, "PodForceDeleted").await;
        assert!(forced.is_empty(), "{name} while paused: {forced:?}");
    }
    let original = pods_api.get(held[1]).await.unwrap().metadata.uid;

    // Resumed: the forced DELETE is decided then. Deleted: never.
    set_paused(&names[0], false).await;
    nm::delete(&client, &names[1]).await;
    nm::wait_phase(&client, &names[0], MaintenancePhase::Succeeded, LIMIT).await;
    let forced = nm::warnings(&client, &names[0], "PodForceDeleted").await;
    assert!(
        forced.len() == 1 && forced[0].0.contains(held[0]),
        "once unpaused, one forced deletion of {}: {forced:?}",
        held[0]
    );
    let gone = pods_api.get_opt(held[0]).await.unwrap();
    assert!(
        gone.is_none_or(|p| p.metadata.deletion_timestamp.is_some()),
        "{} still there after {} Succeeded",
        held[0],
        names[0]
    );
    nm::wait_gone(&client, &names[1], LIMIT).await;
    wait_for(&format!("node {} restored", nodes[1]), LIMIT, || {
        node::restored(&client, &nodes[1])
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let p = pods_api.get_opt(held[1]).await.unwrap();
    assert!(
        p.as_ref()
            .is_some_and(|p| p.metadata.uid == original && p.metadata.deletion_timestamp.is_none()),
        "{} deleted after {} was deleted (gone, or its deletion: {:?})",
        held[1],
        names[1],
        p.map(|p| p.metadata.deletion_timestamp)
    );
    let forced = nm::warnings(&client, &names[1], "PodForceDeleted").await;
    assert!(
        forced.is_empty(),
        "{} after its deletion: {forced:?}",
        names[1]
    );
    nm::delete_and_wait_restored(&client, &names[0], &nodes[0]).await;
    eprintln!("force-pause: {:?}", started.elapsed());
}

/// Applies `manifests/overlays/force-delete/force-delete.yaml` (the ClusterRole and its binding
/// to the operator's ServiceAccount), once per test binary, after checking that the webhook
/// refuses a ForceDelete maintenance of `node` without it, naming the overlay (the tests that
/// grant it run side by side: the first one checks).
async fn grant_force_delete(client: &kube::Client, node: &str) {
    static GRANTED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    GRANTED
        .get_or_init(|| async {
            let name = unique("nm-refused");
            let refused = create_with_deadline(client, &name, node, "ForceDelete", false)
                .await
                .expect_err("ForceDelete admitted without the grant to delete pods");
            assert!(
                refused
                    .to_string()
                    .contains("manifests/overlays/force-delete"),
                "{refused}"
            );
            apply_force_delete_overlay(client).await;
        })
        .await;
}

/// `docs/drain-contract.md` §10 (`onTimeout: Fail`, set by annotations as on upstream's CRD):
/// two pods a budget holds. At the deadline the maintenance is Failed with `lastError` naming
/// both pods, and the node stays cordoned and tainted; deleting it restores the node.
#[tokio::test]
async fn past_the_deadline_fail_fails_and_keeps_the_node_cordoned() {
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("fail");
    let node = worker_nodes(&env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "fail").await;
    held_by_one_budget(&client, &ns, &node, 2).await;
    let name = unique("nm-fail");
    create_with_deadline(&client, &name, &node, "Fail", true)
        .await
        .unwrap();
    nm::wait_status(&client, &name, "Running, held by the budget", LIMIT, |s| {
        s.phase == Some(MaintenancePhase::Running)
            && s.blockers
                .iter()
                .flatten()
                .any(|b| b.reason == "PodDisruptionBudget")
    })
    .await;
    let nm = nm::wait_phase(&client, &name, MaintenancePhase::Failed, LIMIT).await;
    let error = nm.status.unwrap().last_error.unwrap_or_default();
    for pod in ["held-00", "held-01"] {
        assert!(
            error.contains(pod),
            "{pod} not named in lastError {error:?}"
        );
    }
    assert!(error.contains("drainTimeout of 15s"), "{error}");
    node::in_maintenance(&client, &node)
        .await
        .unwrap_or_else(|e| panic!("the node left maintenance on Fail: {e}"));
    assert_eq!(
        nm::warnings(&client, &name, "DrainDeadlineExceeded")
            .await
            .len(),
        1
    );
    // Still Failed at the next passes (not Running again).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let again = Api::<node_maintenance_operator::api::NodeMaintenance>::all(client.clone())
        .get(&name)
        .await
        .unwrap();
    assert_eq!(again.status.unwrap().phase, Some(MaintenancePhase::Failed));
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// `docs/drain-contract.md` §10 (`onTimeout: SkipStuck`): a pod held by a finalizer after its
/// eviction keeps the drain Running until the deadline; then it is reported as kept with reason
/// `DeletionOverdue` and the maintenance Succeeds.
#[tokio::test]
async fn past_the_deadline_skip_stuck_stops_waiting_for_a_pod_a_finalizer_holds() {
    const FINALIZER: &str = "e2e.medik8s.io/hold";
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("stuck");
    let node = worker_nodes(&env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "stuck").await;
    bare_pod(
        &client,
        &ns,
        "stuck",
        &node,
        json!({"metadata": {"finalizers": [FINALIZER]}, "spec": {"terminationGracePeriodSeconds": 2}}),
    )
    .await;
    wait_all_running(&client, &ns, 1).await;
    let name = unique("nm-stuck");
    create_with_deadline(&client, &name, &node, "SkipStuck", false)
        .await
        .unwrap();
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    wait_for(
        "the pod evicted and held by its finalizer",
        LIMIT,
        || async {
            let p = pods.get("stuck").await.map_err(|e| e.to_string())?;
            p.metadata
                .deletion_timestamp
                .map(|_| ())
                .ok_or_else(|| "not terminating yet".to_string())
        },
    )
    .await;
    let running = Api::<node_maintenance_operator::api::NodeMaintenance>::all(client.clone())
        .get(&name)
        .await
        .unwrap();
    assert_eq!(
        running.status.unwrap().phase,
        Some(MaintenancePhase::Running),
        "waits for the pod before the deadline"
    );
    let nm = nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let deadline =
        node_drain_started(&client, &node).await + jiff::SignedDuration::try_from(TIMEOUT).unwrap();
    let message = drained_message(&nm);
    assert!(
        message.contains("stuck"),
        "the kept pod is named: {message}"
    );
    let kept = nm::event_summary(&client, &name)
        .await
        .into_iter()
        .find(|e| e.1 == "PodNotEvicted" && e.2.contains("stuck"))
        .expect("a PodNotEvicted event for the stuck pod");
    assert!(kept.2.contains("SkipStuck"), "{kept:?}");
    let succeeded_at = nm
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Drained")
        .map(|c| c.last_transition_time.0)
        .unwrap();
    assert!(
        succeeded_at >= deadline,
        "Succeeded at {succeeded_at}, deadline {deadline}"
    );
    assert!(
        pods.get_opt("stuck").await.unwrap().is_some(),
        "the finalizer still holds the pod"
    );
    pods.patch(
        "stuck",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

/// `docs/drain-contract.md` §1 "Opt-out annotations": the operator of this binary runs without
/// `--honor-opt-out-annotations`, so pods annotated `karpenter.sh/do-not-disrupt: "true"` and
/// `cluster-autoscaler.kubernetes.io/safe-to-evict: "false"` are evicted as upstream evicts
/// them (the audit log), and the maintenance Succeeds.
#[tokio::test]
async fn the_opt_out_annotations_are_not_read_without_the_flag() {
    let env = env();
    let client = env.cluster.client().await;
    let group = unique("optout-off");
    let node = worker_nodes(&env.cluster, &client, &group, 1)
        .await
        .remove(0);
    let ns = namespace(&client, "optout-off").await;
    for (pod, key, value) in [
        ("dnd", "karpenter.sh/do-not-disrupt", "true"),
        (
            "ste",
            "cluster-autoscaler.kubernetes.io/safe-to-evict",
            "false",
        ),
    ] {
        let extra = json!({"metadata": {"annotations": {key: value}}});
        bare_pod(&client, &ns, pod, &node, extra).await;
    }
    wait_all_running(&client, &ns, 2).await;
    let mut audit = AuditCursor::at_end(env.cluster.audit_log_path());
    let name = unique("nm-optout-off");
    nm::create(&client, &name, &node).await;
    nm::wait_phase(&client, &name, MaintenancePhase::Succeeded, LIMIT).await;
    let events = audit.read().unwrap();
    let evicted: Vec<&str> = accepted_in(&events, &ns)
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    for pod in ["dnd", "ste"] {
        assert!(evicted.contains(&pod), "{pod} not evicted: {evicted:?}");
    }
    nm::delete_and_wait_restored(&client, &name, &node).await;
}

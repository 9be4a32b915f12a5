//! `kubectl nm`, a kubectl plugin for NodeMaintenances (installed as `kubectl-nm` on the PATH,
//! or with krew from `kubectl-nm/krew/nm.yaml`):
//!
//! - `start <node> --reason <text> [--name <nm>] [--stage <stage>] [--wait] [--timeout
//!   <duration>]` creates a NodeMaintenance (going as far as `--stage`) and, with `--wait`, prints
//!   each change of its phase and blockers until it Succeeds;
//! - `why <node|nm>` prints what keeps pods on the node: a table of pod, reason, budget, the
//!   healthy pods the budget needs and has, and when the drain is due;
//! - `stop <node> [--wait] [--timeout <duration>]` deletes the node's NodeMaintenances and, with
//!   `--wait`, returns once they are gone and the node is schedulable;
//! - `list` prints every NodeMaintenance: name, node, stage, phase, drain progress, pods pending, reason;
//! - `stage <node|nm> <stage>` moves existing maintenances to another stage, forward or back;
//! - `preflight <node> [--timeout <duration>]` creates a NodeMaintenance in stage Preflight,
//!   waits for the operator's dry-run evictions of this generation, prints the blocker table,
//!   deletes the object and waits until it is gone; [`EXIT_BLOCKED`] when something blocks.
//!
//! Exit status: [`EXIT_OK`], [`EXIT_ERROR`], [`EXIT_TIMEOUT`] (the blocker table is printed),
//! [`EXIT_BLOCKED`] (preflight), [`EXIT_REFUSED`] (the API server, i.e. its admission webhook,
//! refused the NodeMaintenance).
//! Errors are one `error: ...` line on stderr, as kubectl's; a refusal is kubectl's
//! `Error from server (<reason>): <message>`.

use std::ffi::OsString;
use std::io::Write;
use std::time::Duration;

use clap::{Parser, Subcommand};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use node_maintenance_operator::api::{
    MaintenancePhase, NodeMaintenance, NodeMaintenanceStatus, PodBlocker, Stage,
};
use node_maintenance_operator::policy::STAGE_ANNOTATION;

/// Done: the maintenance Succeeded, or the node is back.
pub const EXIT_OK: u8 = 0;
/// Any error (bad arguments, API errors, a Failed maintenance).
pub const EXIT_ERROR: u8 = 1;
/// `--timeout` passed before the wait was over.
pub const EXIT_TIMEOUT: u8 = 2;
/// `preflight`: something would keep pods on the node (the blocker table is printed).
pub const EXIT_BLOCKED: u8 = 2;
/// The API server refused to create the NodeMaintenance (its admission webhook said no).
pub const EXIT_REFUSED: u8 = 3;

#[derive(Parser, Debug)]
#[command(
    name = "kubectl nm",
    bin_name = "kubectl nm",
    about = "Start, watch, explain and stop node maintenance (NodeMaintenance objects).",
    after_help = "Exit status: 0 done (preflight: nothing blocks), 1 error, 2 timed out (blockers \
                  printed; preflight: something blocks), 3 refused at admission."
)]
struct Cli {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, global = true)]
    kubeconfig: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Put a node into maintenance: cordon, taint and drain it.
    Start {
        /// The node.
        node: String,
        /// Why (spec.reason, shown on the node).
        #[arg(long)]
        reason: String,
        /// Name of the NodeMaintenance (default: nm-<node>).
        #[arg(long)]
        name: Option<String>,
        /// How far the maintenance goes: Preflight, Idle, Cordon or Drain (the operator's
        /// default, Drain, when not given). Set as spec.stage and its annotation.
        #[arg(long, value_enum)]
        stage: Option<Stage>,
        /// Wait until the maintenance Succeeds, printing its progress and blockers (stage Drain
        /// only: the others never Succeed).
        #[arg(long)]
        wait: bool,
        /// How long --wait waits, e.g. 60s, 5m, 1h30m.
        #[arg(long, default_value = "10m", value_parser = parse_timeout)]
        timeout: Duration,
    },
    /// Explain what keeps a node's maintenance from finishing.
    Why {
        /// A node, or the name of a NodeMaintenance.
        target: String,
    },
    /// End a node's maintenance: delete its NodeMaintenances (the node is restored).
    Stop {
        /// The node.
        node: String,
        /// Wait until the NodeMaintenances are gone and the node is schedulable.
        #[arg(long)]
        wait: bool,
        /// How long --wait waits, e.g. 60s, 5m.
        #[arg(long, default_value = "10m", value_parser = parse_timeout)]
        timeout: Duration,
    },
    /// List NodeMaintenances.
    List,
    /// Move maintenances to another stage, forward or back (back from Cordon or Drain to Idle
    /// restores the node and keeps the object).
    Stage {
        /// A node, or the name of a NodeMaintenance.
        target: String,
        /// Preflight, Idle, Cordon or Drain.
        #[arg(value_enum)]
        stage: Stage,
    },
    /// Show what would block a node's drain without touching it: a NodeMaintenance in stage
    /// Preflight (dry-run evictions), deleted once it answered. Exit 0: nothing blocks; 2: the
    /// table lists what does.
    Preflight {
        /// The node.
        node: String,
        /// How long to wait for the operator's answer, e.g. 60s, 5m.
        #[arg(long, default_value = "2m", value_parser = parse_timeout)]
        timeout: Duration,
    },
}

/// Parses a Go-style duration (`60s`, `5m`, `1h30m`) as kubectl's `--timeout` takes it.
fn parse_timeout(s: &str) -> Result<Duration, String> {
    let d: jiff::SignedDuration = s
        .parse()
        .map_err(|_| format!("invalid duration {s:?} (e.g. 60s, 5m, 1h30m)"))?;
    Duration::try_from(d).map_err(|_| format!("invalid duration {s:?}: negative"))
}

/// An outcome other than success: the exit status and the line for stderr.
struct Failure(u8, String);

impl From<kube::Error> for Failure {
    fn from(e: kube::Error) -> Self {
        Failure(EXIT_ERROR, format!("error: {e}"))
    }
}

/// Runs `kubectl nm` with `args` (the program name first), writing its output to `out` and its
/// errors to `err`; returns the exit status.
pub async fn run(
    args: impl IntoIterator<Item = impl Into<OsString> + Clone>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> u8 {
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = write!(out, "{}", e.render());
                return EXIT_OK;
            }
            let _ = write!(err, "{}", e.render());
            return EXIT_ERROR;
        }
    };
    match execute(cli, out).await {
        Ok(()) => EXIT_OK,
        Err(Failure(code, line)) => {
            let _ = writeln!(err, "{line}");
            code
        }
    }
}

async fn client(kubeconfig: Option<&std::path::Path>) -> Result<kube::Client, Failure> {
    let bad = |e: &dyn std::fmt::Display| Failure(EXIT_ERROR, format!("error: {e}"));
    let config = match kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| Failure(EXIT_ERROR, format!("error: {}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(file, &Default::default())
                .await
                .map_err(|e| bad(&e))?
        }
        None => kube::Config::infer().await.map_err(|e| bad(&e))?,
    };
    kube::Client::try_from(config).map_err(Into::into)
}

async fn execute(cli: Cli, out: &mut dyn Write) -> Result<(), Failure> {
    if let Command::Start {
        stage: Some(stage),
        wait: true,
        ..
    } = &cli.command
        && *stage != Stage::Drain
    {
        return Err(Failure(
            EXIT_ERROR,
            format!(
                "error: --wait waits for Succeeded, which only stage Drain reaches, not {stage}"
            ),
        ));
    }
    let client = client(cli.kubeconfig.as_deref()).await?;
    let nms: Api<NodeMaintenance> = Api::all(client.clone());
    match cli.command {
        Command::Start {
            node,
            reason,
            name,
            stage,
            wait,
            timeout,
        } => {
            let name = name.unwrap_or_else(|| format!("nm-{node}"));
            let mut nm = NodeMaintenance::new(
                &name,
                node_maintenance_operator::api::NodeMaintenanceSpec {
                    node_name: node.clone(),
                    reason: Some(reason),
                    ..Default::default()
                },
            );
            if let Some(stage) = stage {
                set_stage(&mut nm, stage);
            }
            for warning in create(&client, &nm).await?.0 {
                let _ = writeln!(out, "Warning: {warning}");
            }
            let _ = writeln!(out, "nodemaintenance/{name} created");
            if wait {
                wait_succeeded(&nms, &name, timeout, out).await?;
            }
            Ok(())
        }
        Command::Why { target } => {
            let found = for_target(&nms, &target).await?;
            if found.is_empty() {
                return Err(Failure(
                    EXIT_ERROR,
                    format!("error: no NodeMaintenance named {target} or for node {target}"),
                ));
            }
            for nm in &found {
                let status = nm.status.clone().unwrap_or_default();
                let _ = writeln!(
                    out,
                    "nodemaintenance/{} (node {}): {}",
                    nm.metadata.name.as_deref().unwrap_or_default(),
                    nm.spec.node_name,
                    summary(&status)
                );
                let _ = write!(out, "{}", blocker_table(&status));
            }
            Ok(())
        }
        Command::Stop {
            node,
            wait,
            timeout,
        } => {
            let found: Vec<NodeMaintenance> = nms
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter(|nm| nm.spec.node_name == node)
                .collect();
            if found.is_empty() {
                return Err(Failure(
                    EXIT_ERROR,
                    format!("error: no NodeMaintenance for node {node}"),
                ));
            }
            for nm in &found {
                let name = nm.metadata.name.clone().unwrap_or_default();
                match nms.delete(&name, &DeleteParams::default()).await {
                    // Gone already: what stop wants.
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
                let _ = writeln!(out, "nodemaintenance/{name} deleted");
            }
            if wait {
                wait_restored(&client, &nms, &node, timeout).await?;
                let _ = writeln!(out, "node/{node} schedulable");
            }
            Ok(())
        }
        Command::Stage { target, stage } => {
            let found = for_target(&nms, &target).await?;
            if found.is_empty() {
                return Err(Failure(
                    EXIT_ERROR,
                    format!("error: no NodeMaintenance named {target} or for node {target}"),
                ));
            }
            // Both places: the annotation wins over spec.stage, and upstream's CRD prunes the
            // field, so a stage given once by either is replaced by this one.
            let patch = serde_json::json!({
                "metadata": {"annotations": {STAGE_ANNOTATION: stage.to_string()}},
                "spec": {"stage": stage.to_string()},
            });
            for nm in &found {
                let name = nm.metadata.name.clone().unwrap_or_default();
                nms.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                let _ = writeln!(out, "nodemaintenance/{name} stage {stage}");
            }
            Ok(())
        }
        Command::Preflight { node, timeout } => preflight(&client, &node, timeout, out).await,
        Command::List => {
            let list = nms.list(&ListParams::default()).await?.items;
            let mut rows = vec![
                [
                    "NAME", "NODE", "STAGE", "PHASE", "DRAIN", "PENDING", "REASON",
                ]
                .map(String::from),
            ];
            for nm in &list {
                let s = nm.status.clone().unwrap_or_default();
                rows.push([
                    nm.metadata.name.clone().unwrap_or_default(),
                    nm.spec.node_name.clone(),
                    stage_shown(nm),
                    s.phase.map_or("-".into(), |p| p.to_string()),
                    s.drain_progress.map_or("-".into(), |p| format!("{p}%")),
                    s.pending_pods.as_ref().map_or(0, Vec::len).to_string(),
                    nm.spec.reason.clone().unwrap_or_default(),
                ]);
            }
            let _ = write!(out, "{}", table(&rows));
            Ok(())
        }
    }
}

/// The stage `list` shows: the operator's word when it has written one (the `Stage` condition's
/// reason, which follows its `--stage` default too), else what the object asks (annotation,
/// then `spec.stage`), else `Drain` (the default, today's and upstream's behaviour).
fn stage_shown(nm: &NodeMaintenance) -> String {
    let condition = nm.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Stage")
            .map(|c| c.reason.clone())
    });
    let asked = || {
        nm.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(STAGE_ANNOTATION).cloned())
            .or_else(|| nm.spec.stage.map(|s| s.to_string()))
    };
    condition
        .filter(|r| !r.is_empty())
        .or_else(asked)
        .unwrap_or_else(|| Stage::Drain.to_string())
}

/// Sets `stage` as `spec.stage` and as its annotation (which wins, and which upstream's CRD
/// keeps where it prunes the field).
fn set_stage(nm: &mut NodeMaintenance, stage: Stage) {
    nm.spec.stage = Some(stage);
    nm.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(STAGE_ANNOTATION.into(), stage.to_string());
}

/// Creates `nm` and returns the admission warnings of the answer (its `Warning` headers, which
/// kube's typed API drops), as kubectl prints them, and the object created; [`EXIT_REFUSED`]
/// with kubectl's `Error from server (<reason>): <message>` when the API server refuses it.
async fn create(
    client: &kube::Client,
    nm: &NodeMaintenance,
) -> Result<(Vec<String>, NodeMaintenance), Failure> {
    use kube::Resource;
    let body = serde_json::to_vec(nm).map_err(|e| Failure(EXIT_ERROR, format!("error: {e}")))?;
    let request = kube::core::Request::new(NodeMaintenance::url_path(&(), None))
        .create(&PostParams::default(), body)
        .map_err(|e| Failure(EXIT_ERROR, format!("error: {e}")))?
        .map(kube::client::Body::from);
    let response = client.send(request).await?;
    let warnings: Vec<String> = response
        .headers()
        .get_all(http::header::WARNING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(warning_text)
        .collect();
    let ok = response.status().is_success();
    let bytes = response.into_body().collect_bytes().await?;
    if ok {
        let created = serde_json::from_slice(&bytes).map_err(|e| {
            Failure(
                EXIT_ERROR,
                format!("error: reading the created object: {e}"),
            )
        })?;
        return Ok((warnings, created));
    }
    Err(match serde_json::from_slice::<kube::core::Status>(&bytes) {
        Ok(s) => Failure(
            EXIT_REFUSED,
            format!("Error from server ({}): {}", s.reason, s.message),
        ),
        Err(_) => Failure(
            EXIT_ERROR,
            format!("error: {}", String::from_utf8_lossy(&bytes)),
        ),
    })
}

/// The text of a `Warning` header as the API server writes it (RFC 7234: `299 - "<text>"`, `"`
/// and `\` escaped); the header as it is when it has another shape.
fn warning_text(header: &str) -> String {
    let Some(quoted) = header
        .strip_prefix("299 - \"")
        .and_then(|r| r.strip_suffix('"'))
    else {
        return header.to_string();
    };
    let mut text = String::with_capacity(quoted.len());
    let mut chars = quoted.chars();
    while let Some(c) = chars.next() {
        text.push(if c == '\\' {
            chars.next().unwrap_or(c)
        } else {
            c
        });
    }
    text
}

/// `preflight <node>`: creates a NodeMaintenance (`nm-preflight-<node>-<random>`) in stage
/// Preflight, waits at most `timeout` for the operator's answer, prints the blocker table, then
/// deletes the object and waits until it is gone (the operator's finalizer released), so nothing
/// is left behind whatever the answer.
///
/// The answer is the `Stage` condition with reason Preflight whose `observedGeneration` is the
/// object's generation: the operator writes it in the same status write as the dry-run
/// evictions' `status.blockers` (docs/design.md §1, "Stages"), so it vouches for them.
///
/// # Errors
/// [`EXIT_BLOCKED`] when something blocks (the table printed); [`EXIT_REFUSED`] when admission
/// refuses the object; [`EXIT_ERROR`] when no answer came within `timeout` (an operator without
/// the `stage` knob, or upstream's CRD, which prunes `status.conditions`) or on API errors.
async fn preflight(
    client: &kube::Client,
    node: &str,
    timeout: Duration,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    use kube::runtime::wait::await_condition;
    let nms: Api<NodeMaintenance> = Api::all(client.clone());
    let mut nm = NodeMaintenance::new(
        "",
        node_maintenance_operator::api::NodeMaintenanceSpec {
            node_name: node.to_string(),
            reason: Some("kubectl nm preflight".into()),
            ..Default::default()
        },
    );
    nm.metadata.name = None;
    nm.metadata.generate_name = Some(format!("nm-preflight-{node}-"));
    set_stage(&mut nm, Stage::Preflight);
    let (warnings, created) = create(client, &nm).await?;
    for warning in warnings {
        let _ = writeln!(out, "Warning: {warning}");
    }
    let name = created.metadata.name.clone().unwrap_or_default();
    let generation = created.metadata.generation;
    let answered = move |nm: Option<&NodeMaintenance>| {
        nm.and_then(|nm| nm.status.as_ref()?.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.type_ == "Stage"
                        && c.status == "True"
                        && c.reason == "Preflight"
                        && c.observed_generation == generation
                })
            })
    };
    let answer = tokio::time::timeout(timeout, await_condition(nms.clone(), &name, answered)).await;

    // Deleted whatever the answer, so a preflight leaves nothing behind.
    let uid = created.metadata.uid.clone().unwrap_or_default();
    let gone = delete_and_wait(&nms, &name, &uid, timeout).await;

    let status = match answer {
        Ok(Ok(nm)) => nm.and_then(|nm| nm.status).unwrap_or_default(),
        Ok(Err(e)) => return Err(Failure(EXIT_ERROR, format!("error: {e}"))),
        Err(_) => {
            return Err(Failure(
                EXIT_ERROR,
                format!(
                    "error: timed out after {} waiting for the preflight of node/{node} \
                     (nodemaintenance/{name}, condition Stage=Preflight for generation {}): \
                     is the operator running, with its own CRD?",
                    human(timeout),
                    generation.unwrap_or_default()
                ),
            ));
        }
    };
    let _ = write!(out, "{}", blocker_table(&status));
    gone?;
    let blocked = status.blockers.as_ref().map_or(0, Vec::len);
    if blocked > 0 {
        return Err(Failure(
            EXIT_BLOCKED,
            format!("error: {blocked} pod(s) would stay on node/{node} if it were drained now"),
        ));
    }
    Ok(())
}

/// Deletes NodeMaintenance `name` (gone already is fine) and waits at most `timeout` until the
/// object with `uid` is gone, i.e. the operator released its finalizer.
///
/// # Errors
/// [`EXIT_ERROR`] on an API error or when it is still there after `timeout`.
async fn delete_and_wait(
    nms: &Api<NodeMaintenance>,
    name: &str,
    uid: &str,
    timeout: Duration,
) -> Result<(), Failure> {
    use kube::runtime::wait::{await_condition, conditions};
    match nms.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    match tokio::time::timeout(
        timeout,
        await_condition(nms.clone(), name, conditions::is_deleted(uid)),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(Failure(EXIT_ERROR, format!("error: {e}"))),
        Err(_) => Err(Failure(
            EXIT_ERROR,
            format!(
                "error: nodemaintenance/{name} is still there {} after its deletion",
                human(timeout)
            ),
        )),
    }
}

/// A duration as kubectl's `--timeout` takes it (`1m30s`).
fn human(d: Duration) -> String {
    jiff::SignedDuration::try_from(d).map_or_else(|_| format!("{d:?}"), |d| format!("{d:#}"))
}

/// The NodeMaintenance named `target`, else those whose `spec.nodeName` is `target`.
async fn for_target(
    nms: &Api<NodeMaintenance>,
    target: &str,
) -> Result<Vec<NodeMaintenance>, Failure> {
    if let Some(nm) = nms.get_opt(target).await? {
        return Ok(vec![nm]);
    }
    Ok(nms
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|nm| nm.spec.node_name == target)
        .collect())
}

/// Watches NodeMaintenance `name`, printing each new summary and blocker table, until it
/// Succeeds (Ok), Fails, is deleted, or `timeout` passes ([`EXIT_TIMEOUT`], the last blocker
/// table printed).
async fn wait_succeeded(
    nms: &Api<NodeMaintenance>,
    name: &str,
    timeout: Duration,
    out: &mut dyn Write,
) -> Result<(), Failure> {
    let mut last = NodeMaintenanceStatus::default();
    let mut printed = String::new();
    let watch = async {
        let mut stream = watcher(
            nms.clone(),
            watcher::Config::default().fields(&format!("metadata.name={name}")),
        )
        .default_backoff()
        .touched_objects()
        .boxed();
        while let Some(nm) = stream.try_next().await.map_err(|e| {
            Failure(
                EXIT_ERROR,
                format!("error: watching nodemaintenance/{name}: {e}"),
            )
        })? {
            let status = nm.status.clone().unwrap_or_default();
            let text = format!("{}\n{}", summary(&status), blocker_table(&status));
            if text != printed {
                let _ = write!(out, "nodemaintenance/{name}: {text}");
                printed = text;
            }
            last = status.clone();
            match status.phase {
                Some(MaintenancePhase::Succeeded) => return Ok(()),
                Some(MaintenancePhase::Failed) => {
                    return Err(Failure(
                        EXIT_ERROR,
                        format!(
                            "error: nodemaintenance/{name} Failed: {}",
                            status.last_error.unwrap_or_default()
                        ),
                    ));
                }
                _ => {}
            }
        }
        Err(Failure(
            EXIT_ERROR,
            format!("error: the watch of nodemaintenance/{name} ended"),
        ))
    };
    match tokio::time::timeout(timeout, watch).await {
        Ok(r) => r,
        Err(_) => {
            let _ = write!(out, "{}", blocker_table(&last));
            Err(Failure(
                EXIT_TIMEOUT,
                format!(
                    "error: timed out after {} waiting for nodemaintenance/{name} to succeed",
                    human(timeout)
                ),
            ))
        }
    }
}

/// Waits until no NodeMaintenance names `node` and the node is schedulable, re-reading both on
/// every change of either (a watch of each).
async fn wait_restored(
    client: &kube::Client,
    nms: &Api<NodeMaintenance>,
    node: &str,
    timeout: Duration,
) -> Result<(), Failure> {
    let nodes: Api<Node> = Api::all(client.clone());
    let changes = futures::stream::select(
        watcher(
            nodes.clone(),
            watcher::Config::default().fields(&format!("metadata.name={node}")),
        )
        .default_backoff()
        .map_ok(|_| ())
        .boxed(),
        watcher(nms.clone(), watcher::Config::default())
            .default_backoff()
            .map_ok(|_| ())
            .boxed(),
    );
    let wait = async {
        let mut changes = std::pin::pin!(changes);
        while changes
            .try_next()
            .await
            .map_err(|e| Failure(EXIT_ERROR, format!("error: watching node/{node}: {e}")))?
            .is_some()
        {
            let held = nms
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .any(|nm| nm.spec.node_name == node);
            let cordoned = nodes
                .get(node)
                .await?
                .spec
                .and_then(|s| s.unschedulable)
                .unwrap_or(false);
            if !held && !cordoned {
                return Ok(());
            }
        }
        Err(Failure(EXIT_ERROR, "error: the watch ended".into()))
    };
    tokio::time::timeout(timeout, wait)
        .await
        .unwrap_or_else(|_| {
            Err(Failure(
                EXIT_TIMEOUT,
                format!("error: timed out waiting for node/{node} to be schedulable"),
            ))
        })
}

/// One line: phase, drain progress, pods pending, the deadline and what happens then.
fn summary(s: &NodeMaintenanceStatus) -> String {
    let mut parts = vec![s.phase.map_or("Pending".into(), |p| p.to_string())];
    if let Some(p) = s.drain_progress {
        parts.push(format!("drain {p}%"));
    }
    if let Some(p) = &s.pending_pods {
        parts.push(format!("{} pods pending", p.len()));
    }
    if let Some(e) = &s.last_error {
        parts.push(format!("last error: {e}"));
    }
    parts.join(", ")
}

/// The blockers as a table (POD, REASON, BUDGET, NEEDS, HAS, DUE), DUE being the drain's
/// deadline and what happens then (`onTimeout`); "no blockers" when there are none.
fn blocker_table(s: &NodeMaintenanceStatus) -> String {
    let blockers: &[PodBlocker] = s.blockers.as_deref().unwrap_or_default();
    if blockers.is_empty() {
        return "no blockers\n".into();
    }
    let due = match (&s.drain_deadline, &s.on_timeout) {
        (Some(t), Some(o)) => format!("{} ({o:?})", t.0),
        (Some(t), None) => t.0.to_string(),
        _ => "-".into(),
    };
    let dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let mut rows = vec![["POD", "REASON", "BUDGET", "NEEDS", "HAS", "DUE"].map(String::from)];
    for b in blockers {
        rows.push([
            format!("{}/{}", b.namespace, b.name),
            b.reason.clone(),
            dash(b.pod_disruption_budget.clone()),
            dash(b.desired_healthy.map(|v| v.to_string())),
            dash(b.current_healthy.map(|v| v.to_string())),
            due.clone(),
        ]);
    }
    table(&rows)
}

/// Rows as kubectl prints tables: columns left-aligned, three spaces apart.
fn table<const N: usize>(rows: &[[String; N]]) -> String {
    let widths: Vec<usize> = (0..N)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(line.join("   ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_shows_the_operators_stage_else_the_asked_one_else_drain() {
        let nm = |v: serde_json::Value| serde_json::from_value::<NodeMaintenance>(v).unwrap();
        let base = serde_json::json!({"apiVersion": "nodemaintenance.medik8s.io/v1beta1",
            "kind": "NodeMaintenance", "metadata": {"name": "m"}, "spec": {"nodeName": "n1"}});
        assert_eq!(stage_shown(&nm(base.clone())), "Drain");
        let mut asked = base.clone();
        asked["spec"]["stage"] = "Cordon".into();
        assert_eq!(stage_shown(&nm(asked.clone())), "Cordon");
        asked["metadata"]["annotations"] = serde_json::json!({STAGE_ANNOTATION: "Idle"});
        assert_eq!(stage_shown(&nm(asked.clone())), "Idle");
        asked["status"] = serde_json::json!({"conditions": [{"type": "Stage", "status": "True",
            "reason": "Preflight", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        assert_eq!(stage_shown(&nm(asked)), "Preflight");
    }

    #[test]
    fn warning_headers_read_as_kubectl_prints_them() {
        assert_eq!(
            warning_text(r#"299 - "budget \"db\" holds, see C:\\x""#),
            r#"budget "db" holds, see C:\x"#
        );
        assert_eq!(warning_text("199 other"), "199 other");
    }

    #[test]
    fn timeouts_parse_as_kubectl_writes_them() {
        assert_eq!(parse_timeout("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_timeout("1h30m"), Ok(Duration::from_secs(5400)));
        assert!(parse_timeout("soon").is_err());
    }

    #[test]
    fn the_blocker_table_names_the_budget_and_what_it_needs_and_has() {
        let status: NodeMaintenanceStatus = serde_json::from_value(serde_json::json!({
            "blockers": [{"namespace": "ns", "name": "web-1", "reason": "PodDisruptionBudget",
                          "podDisruptionBudget": "web", "desiredHealthy": 2, "currentHealthy": 2},
                         {"namespace": "ns", "name": "db-0", "reason": "Terminating"}],
            "drainDeadline": "2026-01-01T00:00:00Z", "onTimeout": "Fail"
        }))
        .unwrap();
        assert_eq!(
            blocker_table(&status),
            "POD        REASON                BUDGET   NEEDS   HAS   DUE\n\
             ns/web-1   PodDisruptionBudget   web      2       2     2026-01-01T00:00:00Z (Fail)\n\
             ns/db-0    Terminating           -        -       -     2026-01-01T00:00:00Z (Fail)\n"
        );
        assert_eq!(
            blocker_table(&NodeMaintenanceStatus::default()),
            "no blockers\n"
        );
    }

    #[tokio::test]
    async fn help_and_bad_arguments_answer_as_kubectl_does() {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        assert_eq!(
            run(["kubectl-nm", "--help"], &mut out, &mut err).await,
            EXIT_OK
        );
        let help = String::from_utf8(out).unwrap();
        assert!(help.contains("Usage: kubectl nm"), "{help}");
        for sub in ["start", "why", "stop", "list", "stage", "preflight"] {
            assert!(help.contains(sub), "{sub} missing:\n{help}");
        }
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run(["kubectl-nm", "start", "n1"], &mut out, &mut err).await;
        assert_eq!(code, EXIT_ERROR);
        let err = String::from_utf8(err).unwrap();
        assert!(
            err.starts_with("error:") && err.contains("--reason"),
            "{err}"
        );
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run(
            [
                "kubectl-nm",
                "start",
                "n1",
                "--reason",
                "r",
                "--stage",
                "Cordon",
                "--wait",
            ],
            &mut out,
            &mut err,
        )
        .await;
        assert_eq!(code, EXIT_ERROR);
        let err = String::from_utf8(err).unwrap();
        assert!(err.contains("only stage Drain"), "{err}");
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run(["kubectl-nm", "stage", "n1", "Later"], &mut out, &mut err).await;
        assert_eq!(code, EXIT_ERROR);
        let err = String::from_utf8(err).unwrap();
        assert!(
            err.starts_with("error:") && err.contains("Preflight"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn preflight_help_says_its_exit_codes() {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run(["kubectl-nm", "preflight", "--help"], &mut out, &mut err).await;
        assert_eq!(code, EXIT_OK);
        let help = String::from_utf8(out).unwrap();
        assert!(help.contains("Exit 0") && help.contains("2:"), "{help}");
    }

    #[test]
    fn a_stage_goes_in_the_spec_and_the_annotation_that_upstream_keeps() {
        let mut nm = NodeMaintenance::new("nm", Default::default());
        set_stage(&mut nm, Stage::Preflight);
        let v = serde_json::to_value(&nm).unwrap();
        assert_eq!(v["spec"]["stage"], "Preflight");
        assert_eq!(
            v["metadata"]["annotations"]["nodemaintenance.medik8s.io/stage"],
            "Preflight"
        );
    }
}

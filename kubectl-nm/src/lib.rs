//! `kubectl nm`, a kubectl plugin for NodeMaintenances (installed as `kubectl-nm` on the PATH,
//! or with krew from `kubectl-nm/krew/nm.yaml`):
//!
//! - `start <node> --reason <text> [--name <nm>] [--stage <stage>] [--wait] [--timeout
//!   <duration>]` creates a NodeMaintenance (going as far as `--stage`) and, with `--wait`, follows
//!   it as `watch` does until it Succeeds; an empty or blank `--reason` is refused before any
//!   request;
//! - `watch <node|nm> [--timeout <duration>]` follows an existing maintenance until it Succeeds,
//!   printing a block (phase, progress, blocker table) only when one of them changed
//!   ([`follow`]);
//! - `why <node|nm> [-o json|yaml]` prints what keeps pods on the node: the pre-drain hooks that
//!   hold the whole drain, by owner, then a table of pod, reason,
//!   budget, the healthy pods the budget needs and has, and when the drain is due; then, for
//!   each pod an active eviction responder (KEP-4563) is moving, the responder, its message and
//!   when it expects to be done ([`render::responder_lines`]); and for each pod the `surge`
//!   knob holds, its blocker's message naming the Deployment and why ([`render::surge_lines`]);
//! - `stop <node> [--wait] [--timeout <duration>] [--lease-namespace <ns>]` deletes the node's
//!   NodeMaintenances and, with `--wait`, returns once they are gone and the node is as the
//!   operator's exit leaves it: restored to its state before the maintenance, an admin's cordon
//!   included ([`restore`]);
//! - `list [-o json|yaml]` prints every NodeMaintenance: name, node, stage, phase, drain
//!   progress, pods pending, reason;
//! - `stage <node|nm> <stage>` moves existing maintenances to another stage, forward or back;
//! - `preflight <node> [--timeout <duration>]` creates a NodeMaintenance in stage Preflight,
//!   waits for the operator's dry-run evictions of this generation, prints the blocker table,
//!   deletes the object and waits until it is gone; [`EXIT_BLOCKED`] when something blocks.
//!
//! kubectl's flags: `--kubeconfig`, `--context` (through kube's kubeconfig loading,
//! [`connect`]), `--version`.
//!
//! Exit status: [`EXIT_OK`], [`EXIT_ERROR`], [`EXIT_TIMEOUT`] (the blocker table is printed),
//! [`EXIT_BLOCKED`] (preflight), [`EXIT_REFUSED`] (denied at admission), [`EXIT_UNAVAILABLE`]
//! (the API server could not reach the webhook, or failed: worth retrying); [`failure`] sorts
//! the API server's answers. Errors are one `error: ...` line on stderr, as kubectl's; an API
//! server's refusal is kubectl's `Error from server (<reason>): <message>`.

mod connect;
mod create;
mod failure;
mod follow;
mod preflight;
mod render;
mod restore;

use std::ffi::OsString;
use std::io::Write;
use std::time::Duration;

use clap::{Parser, Subcommand};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use node_maintenance_operator::api::{NodeMaintenance, Stage};
use node_maintenance_operator::policy::STAGE_ANNOTATION;

use failure::Failure;
use render::Output;

/// Done: the maintenance Succeeded, or the node is back.
pub const EXIT_OK: u8 = 0;
/// Any error (bad arguments, API errors, a Failed maintenance, a missing CRD).
pub const EXIT_ERROR: u8 = 1;
/// `--timeout` passed before the wait was over.
pub const EXIT_TIMEOUT: u8 = 2;
/// `preflight`: something would keep pods on the node (the blocker table is printed).
pub const EXIT_BLOCKED: u8 = 2;
/// Denied at admission: an admission webhook (or policy) said no, with its message (a 4xx).
/// Retrying the same request will not help.
pub const EXIT_REFUSED: u8 = 3;
/// The API server could not reach the webhook (`InternalError ... failed calling webhook`) or
/// answered 5xx: an outage, worth retrying.
pub const EXIT_UNAVAILABLE: u8 = 4;

/// `--help`'s word on exit statuses (README "kubectl nm" has the same table).
const EXIT_HELP: &str = "Exit status:\n  \
    0  done (preflight: nothing blocks)\n  \
    1  error (bad arguments, API errors, a Failed maintenance, no CRD)\n  \
    2  timed out, the blocker table printed (preflight: something blocks)\n  \
    3  denied at admission (the webhook's message printed): fix the request\n  \
    4  the API server could not reach the webhook, or answered 5xx: retry later";

#[derive(Parser, Debug)]
#[command(
    name = "kubectl nm",
    bin_name = "kubectl nm",
    version,
    about = "Start, watch, explain and stop node maintenance (NodeMaintenance objects).",
    after_help = EXIT_HELP
)]
struct Cli {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, global = true)]
    kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig context to use (default: its current-context).
    #[arg(long, global = true)]
    context: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Put a node into maintenance: cordon, taint and drain it.
    Start {
        /// The node.
        node: String,
        /// Why (spec.reason, shown on the node); must not be empty or blank.
        #[arg(long, value_parser = parse_reason)]
        reason: String,
        /// Name of the NodeMaintenance (default: nm-<node>).
        #[arg(long)]
        name: Option<String>,
        /// How far the maintenance goes: Preflight, Idle, Cordon or Drain (the operator's
        /// default, Drain, when not given). Set as spec.stage and its annotation.
        #[arg(long, value_enum)]
        stage: Option<Stage>,
        /// Wait until the maintenance Succeeds, printing its progress and blockers when they
        /// change (stage Drain only: the others never Succeed).
        #[arg(long)]
        wait: bool,
        /// How long --wait waits, e.g. 60s, 5m, 1h30m.
        #[arg(long, default_value = "10m", value_parser = parse_timeout)]
        timeout: Duration,
    },
    /// Follow an existing maintenance until it Succeeds, as start --wait does (same exit
    /// statuses).
    Watch {
        /// A node, or the name of a NodeMaintenance.
        target: String,
        /// How long to wait, e.g. 60s, 5m, 1h30m.
        #[arg(long, default_value = "10m", value_parser = parse_timeout)]
        timeout: Duration,
    },
    /// Explain what keeps a node's maintenance from finishing.
    Why {
        /// A node, or the name of a NodeMaintenance.
        target: String,
        /// Print the NodeMaintenances (a List) as json or yaml instead of the table.
        #[arg(short = 'o', long, value_enum)]
        output: Option<Output>,
    },
    /// End a node's maintenance: delete its NodeMaintenances (the node is restored).
    Stop {
        /// The node.
        node: String,
        /// Wait until the NodeMaintenances are gone and the node is restored to its state
        /// before the maintenance (schedulable, or still cordoned if an admin had cordoned it).
        #[arg(long)]
        wait: bool,
        /// How long --wait waits, e.g. 60s, 5m.
        #[arg(long, default_value = "10m", value_parser = parse_timeout)]
        timeout: Duration,
        /// Where the operator keeps the node's medik8s lease (its --lease-namespace), whose
        /// release --wait waits for.
        #[arg(long, default_value = restore::DEFAULT_LEASE_NAMESPACE)]
        lease_namespace: String,
    },
    /// List NodeMaintenances.
    List {
        /// Print the NodeMaintenances (a List) as json or yaml instead of the table.
        #[arg(short = 'o', long, value_enum)]
        output: Option<Output>,
    },
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

/// `--reason`: required text, so an empty or blank one is a typo, refused with the other
/// argument errors (before any request) rather than sent as a maintenance without a reason.
fn parse_reason(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        return Err("--reason must say why (it is empty or blank)".into());
    }
    Ok(s.to_string())
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
    match execute(cli, out, err).await {
        Ok(()) => EXIT_OK,
        Err(Failure(code, line)) => {
            let _ = writeln!(err, "{line}");
            code
        }
    }
}

async fn execute(cli: Cli, out: &mut dyn Write, err: &mut dyn Write) -> Result<(), Failure> {
    if let Command::Start {
        stage: Some(stage),
        wait: true,
        ..
    } = &cli.command
        && *stage != Stage::Drain
    {
        return Err(Failure::error(format!(
            "--wait waits for Succeeded, which only stage Drain reaches, not {stage}"
        )));
    }
    let client = connect::client(cli.kubeconfig.as_deref(), cli.context).await?;
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
                create::set_stage(&mut nm, stage);
            }
            for warning in create::create(&client, &nm).await?.0 {
                let _ = writeln!(out, "Warning: {warning}");
            }
            let _ = writeln!(out, "nodemaintenance/{name} created");
            if wait {
                follow::wait_succeeded(&nms, &name, timeout, out, err).await?;
            }
            Ok(())
        }
        Command::Watch { target, timeout } => {
            let found = for_target(&nms, &target).await?;
            let name = match found.as_slice() {
                [] => return Err(not_found(&target)),
                [one] => one.metadata.name.clone().unwrap_or_default(),
                several => {
                    let names: Vec<&str> = several
                        .iter()
                        .filter_map(|nm| nm.metadata.name.as_deref())
                        .collect();
                    return Err(Failure::error(format!(
                        "node {target} has {} NodeMaintenances ({}): watch one by name",
                        names.len(),
                        names.join(", ")
                    )));
                }
            };
            if let Some(nm) = found.first()
                && render::stage_shown(nm) != Stage::Drain.to_string()
            {
                // It may be moved to Drain while this waits (`kubectl nm stage`): said, not refused.
                let _ = writeln!(
                    err,
                    "warning: nodemaintenance/{name} is in stage {}: only stage Drain Succeeds",
                    render::stage_shown(nm)
                );
            }
            follow::wait_succeeded(&nms, &name, timeout, out, err).await
        }
        Command::Why { target, output } => {
            let found = for_target(&nms, &target).await?;
            if found.is_empty() {
                return Err(not_found(&target));
            }
            if let Some(format) = output {
                let _ = write!(out, "{}", render::objects(&found, format)?);
                return Ok(());
            }
            for nm in &found {
                let status = nm.status.clone().unwrap_or_default();
                let _ = writeln!(
                    out,
                    "nodemaintenance/{} (node {}): {}",
                    nm.metadata.name.as_deref().unwrap_or_default(),
                    nm.spec.node_name,
                    render::summary(&status)
                );
                let _ = write!(out, "{}", render::hooks_line(nm).unwrap_or_default());
                let _ = write!(out, "{}", render::blocker_table(&status));
                let _ = write!(out, "{}", render::responder_lines(&status));
                let _ = write!(out, "{}", render::surge_lines(&status));
            }
            Ok(())
        }
        Command::Stop {
            node,
            wait,
            timeout,
            lease_namespace,
        } => {
            let found: Vec<NodeMaintenance> = nms
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter(|nm| nm.spec.node_name == node)
                .collect();
            if found.is_empty() {
                return Err(Failure::error(format!(
                    "no NodeMaintenance for node {node}"
                )));
            }
            // Read before the deletion: the exit removes the record of the node's prior state.
            let expected = Api::<Node>::all(client.clone())
                .get_opt(&node)
                .await?
                .map(|n| restore::Expected::of(&n))
                .unwrap_or_default();
            for nm in &found {
                let name = nm.metadata.name.clone().unwrap_or_default();
                match nms.delete(&name, &DeleteParams::default()).await {
                    // Gone already: what stop wants.
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 && s.reason == "NotFound" => {}
                    Err(e) => return Err(e.into()),
                }
                let _ = writeln!(out, "nodemaintenance/{name} deleted");
            }
            if wait {
                restore::wait_restored(&client, &node, &expected, &lease_namespace, timeout, out)
                    .await?;
            }
            Ok(())
        }
        Command::Stage { target, stage } => {
            let found = for_target(&nms, &target).await?;
            if found.is_empty() {
                return Err(not_found(&target));
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
        Command::Preflight { node, timeout } => {
            preflight::preflight(&client, &node, timeout, out).await
        }
        Command::List { output } => {
            let list = nms.list(&ListParams::default()).await?.items;
            let text = match output {
                Some(format) => render::objects(&list, format)?,
                None => render::list_table(&list),
            };
            let _ = write!(out, "{text}");
            Ok(())
        }
    }
}

fn not_found(target: &str) -> Failure {
    Failure::error(format!(
        "no NodeMaintenance named {target} or for node {target}"
    ))
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

#[cfg(test)]
mod tests {
    use super::*;

    async fn run_args(args: &[&str]) -> (u8, String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut argv = vec!["kubectl-nm"];
        argv.extend(args);
        let code = run(argv, &mut out, &mut err).await;
        (
            code,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    #[test]
    fn timeouts_parse_as_kubectl_writes_them() {
        assert_eq!(parse_timeout("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_timeout("1h30m"), Ok(Duration::from_secs(5400)));
        assert!(parse_timeout("soon").is_err());
    }

    #[tokio::test]
    async fn help_and_bad_arguments_answer_as_kubectl_does() {
        let (code, help, _) = run_args(&["--help"]).await;
        assert_eq!(code, EXIT_OK);
        assert!(help.contains("Usage: kubectl nm"), "{help}");
        for sub in [
            "start",
            "watch",
            "why",
            "stop",
            "list",
            "stage",
            "preflight",
            "--context",
            "--version",
        ] {
            assert!(help.contains(sub), "{sub} missing:\n{help}");
        }
        for status in ["0  done", "2  timed out", "3  denied", "4  the API server"] {
            assert!(help.contains(status), "{status} missing:\n{help}");
        }
        let (code, _, err) = run_args(&["start", "n1"]).await;
        assert_eq!(code, EXIT_ERROR);
        assert!(
            err.starts_with("error:") && err.contains("--reason"),
            "{err}"
        );
        let (code, _, err) = run_args(&[
            "start", "n1", "--reason", "r", "--stage", "Cordon", "--wait",
        ])
        .await;
        assert_eq!(code, EXIT_ERROR);
        assert!(err.contains("only stage Drain"), "{err}");
        let (code, _, err) = run_args(&["stage", "n1", "Later"]).await;
        assert_eq!(code, EXIT_ERROR);
        assert!(
            err.starts_with("error:") && err.contains("Preflight"),
            "{err}"
        );
        let (code, _, err) = run_args(&["list", "-o", "wide"]).await;
        assert_eq!(code, EXIT_ERROR);
        assert!(err.contains("json") && err.contains("yaml"), "{err}");
    }

    /// The kubeconfig given points nowhere, so an argument error that got as far as a request
    /// would say so instead of naming `--reason`.
    #[tokio::test]
    async fn an_empty_or_blank_reason_is_refused_naming_it_before_any_request() {
        for reason in ["", "   ", "\t\n"] {
            let (code, out, err) = run_args(&[
                "--kubeconfig",
                "/nonexistent/kubeconfig",
                "start",
                "n1",
                "--reason",
                reason,
            ])
            .await;
            assert_eq!(code, EXIT_ERROR, "{reason:?}: {out}{err}");
            assert!(
                err.starts_with("error:")
                    && err.contains("--reason")
                    && err.contains("empty or blank")
                    && !err.contains("kubeconfig"),
                "{reason:?}: {err}"
            );
        }
    }

    #[tokio::test]
    async fn version_and_a_missing_kubeconfig_answer_in_one_line() {
        let (code, out, _) = run_args(&["--version"]).await;
        assert_eq!(code, EXIT_OK);
        assert_eq!(out, format!("kubectl nm {}\n", env!("CARGO_PKG_VERSION")));
        let (code, _, err) = run_args(&["--kubeconfig", "/nonexistent/kc", "list"]).await;
        assert_eq!(code, EXIT_ERROR);
        assert_eq!(err, "error: kubeconfig /nonexistent/kc does not exist\n");
    }

    #[tokio::test]
    async fn preflight_help_says_its_exit_codes() {
        let (code, help, _) = run_args(&["preflight", "--help"]).await;
        assert_eq!(code, EXIT_OK);
        assert!(help.contains("Exit 0") && help.contains("2:"), "{help}");
    }
}

//! `cargo cluster up --operator` (`nmo-devcluster up --operator`) as an admin uses it: started
//! as a child process, it prints a kubeconfig; with it the operator's webhook refuses a
//! NodeMaintenance for a missing node with upstream's text, a maintenance of one of its nodes
//! reaches Succeeded, and the printed `kubectl nm start --wait`, `list` and `stop --wait` exit 0;
//! SIGINT then ends it with exit 0, no process it started left and its
//! directory gone.

mod common;

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use kube::api::{Api, PostParams};
use node_maintenance_operator::api::{MaintenancePhase, NodeMaintenance};

/// Builds `nmo-devcluster` as `cargo cluster` does (the dev profile) and returns its path.
fn devcluster_binary() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    // The test's own crate variables would make build scripts rerun (as stack.rs explains).
    for (key, _) in std::env::vars() {
        if crate_variable(&key) {
            build.env_remove(key);
        }
    }
    let out = build
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "build",
            "-p",
            "nmo-devcluster",
            "--bin",
            "nmo-devcluster",
            "--message-format=json-render-diagnostics",
        ])
        .stderr(Stdio::inherit())
        .output()
        .expect("cargo runs");
    assert!(out.status.success(), "building nmo-devcluster failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "nmo-devcluster")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .expect("cargo names the nmo-devcluster executable")
}

/// The child, SIGKILLed if the test ends before it exits (its own children then die with it:
/// `PR_SET_PDEATHSIG`).
struct Guard(std::process::Child);

impl Drop for Guard {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Whether `pid` is a live process (a zombie counts as gone) whose command line names `dir`
/// (so a pid reused by an unrelated process is not mistaken for a leftover).
fn alive_in(pid: u32, dir: &Path) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
    if stat.is_empty() || state == Some(Some('Z')) {
        return false;
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&cmdline).contains(&*dir.to_string_lossy())
}

/// Every live process whose command line names `dir`: `(pid, command line)`.
fn processes_naming(dir: &Path) -> Vec<(u32, String)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| alive_in(pid, dir))
        .map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            (pid, String::from_utf8_lossy(&cmdline).replace('\0', " "))
        })
        .collect()
}

#[tokio::test]
async fn up_with_operator_serves_the_webhook_drains_and_stops_clean_on_sigint() {
    let binary = devcluster_binary();
    let stderr = tempfile::NamedTempFile::new().unwrap();
    let child = Command::new(&binary)
        .args(["up", "--operator"])
        .env("NMO_OPERATOR_BIN", operator_binary())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr.reopen().unwrap())
        .spawn()
        .expect("nmo-devcluster starts");
    let mut child = Guard(child);
    let pid = child.0.id();
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let log = || std::fs::read_to_string(stderr.path()).unwrap_or_default();

    // Its printed kubeconfig, processes and directory (the control plane and the operator's
    // start on a loaded machine: minutes, not seconds).
    let limit = Duration::from_secs(300);
    let deadline = Instant::now() + limit;
    let (mut kubeconfig, mut pids, mut dir) = (None, Vec::<(String, u32)>::new(), None);
    let mut seen = Vec::new();
    while dir.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx.recv_timeout(left).unwrap_or_else(|_| {
            panic!(
                "no `directory:` line after {limit:?}; stdout:\n{}\nstderr:\n{}",
                seen.join("\n"),
                log()
            )
        });
        if let Some(path) = line.strip_prefix("export KUBECONFIG=") {
            kubeconfig = Some(PathBuf::from(path.trim()));
        } else if let Some(list) = line.strip_prefix("processes: ") {
            pids = list
                .split_whitespace()
                .filter_map(|p| p.split_once('='))
                .map(|(name, pid)| (name.to_string(), pid.parse().unwrap()))
                .collect();
        } else if let Some(path) = line.strip_prefix("directory: ") {
            dir = Some(PathBuf::from(path.trim()));
        }
        seen.push(line);
    }
    let stdout = seen.join("\n");
    let kubeconfig = kubeconfig.unwrap_or_else(|| panic!("no KUBECONFIG printed:\n{stdout}"));
    let dir = dir.unwrap();
    for cmd in [
        "kubectl get nodes",
        "kubectl nm start kwok-worker-1 --reason x --wait",
        "kubectl nm list",
        "kubectl nm stop kwok-worker-1 --wait",
    ] {
        assert!(stdout.contains(cmd), "`{cmd}` not printed:\n{stdout}");
    }
    let names: Vec<&str> = pids.iter().map(|(n, _)| n.as_str()).collect();
    for component in ["etcd", "kube-apiserver", "kwok", "operator"] {
        assert!(
            names.contains(&component),
            "{component} pid not printed: {pids:?}"
        );
    }
    for (name, pid) in &pids {
        assert!(alive_in(*pid, &dir), "{name} ({pid}) is not running");
    }

    // The operator answers as the cluster's webhook, and drains a node.
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let nms = Api::<NodeMaintenance>::all(client.clone());
    let refused = nms
        .create(
            &PostParams::default(),
            &nm::new("try-typo", "kwok-wroker-0", "try it"),
        )
        .await
        .expect_err("the webhook admitted a NodeMaintenance for a missing node");
    assert!(
        refused
            .to_string()
            .contains("invalid nodeName, no node with name kwok-wroker-0 found"),
        "{refused}"
    );
    nms.create(
        &PostParams::default(),
        &nm::new("try-it", "kwok-worker-0", "try it"),
    )
    .await
    .unwrap();
    nm::wait_phase(
        &client,
        "try-it",
        MaintenancePhase::Succeeded,
        Duration::from_secs(180),
    )
    .await;

    // The printed `kubectl nm` commands, in-process (`kubectl_nm::run`, the plugin's whole
    // body), with the printed kubeconfig.
    let kc = kubeconfig.display().to_string();
    for args in [
        &[
            "start",
            "kwok-worker-1",
            "--reason",
            "x",
            "--wait",
            "--timeout",
            "3m",
        ][..],
        &["list"],
        &["stop", "kwok-worker-1", "--wait", "--timeout", "3m"],
    ] {
        let mut argv = vec!["kubectl-nm", "--kubeconfig", kc.as_str()];
        argv.extend(args);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = kubectl_nm::run(argv, &mut out, &mut err).await;
        assert_eq!(
            code,
            0,
            "kubectl nm {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&err)
        );
    }

    // Ctrl-C: exit 0, nothing left.
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let limit = Duration::from_secs(60);
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "still running {limit:?} after SIGINT; stderr:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status.code(), Some(0), "exit status; stderr:\n{}", log());
    let left: Vec<_> = pids
        .iter()
        .filter(|(_, pid)| alive_in(*pid, &dir))
        .collect();
    assert!(left.is_empty(), "still running after exit: {left:?}");
    let naming = processes_naming(&dir);
    assert!(
        naming.is_empty(),
        "processes naming {}: {naming:?}",
        dir.display()
    );
    assert!(!dir.exists(), "{} still exists", dir.display());
}

/// A variable cargo sets for the crate it runs (`CARGO_PKG_*`, `CARGO_MANIFEST_*`, ...), not
/// one of the user's settings (`CARGO_HOME`, `CARGO_TARGET_DIR`, `CARGO_BUILD_*`, ...).
fn crate_variable(key: &str) -> bool {
    [
        "CARGO_PKG_",
        "CARGO_MANIFEST_",
        "CARGO_CRATE_",
        "CARGO_BIN_",
    ]
    .iter()
    .any(|p| key.starts_with(p))
        || [
            "CARGO_PRIMARY_PACKAGE",
            "CARGO_TARGET_TMPDIR",
            "CARGO_RUSTC_CURRENT_DIR",
        ]
        .contains(&key)
}

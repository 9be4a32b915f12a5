//! `up --operator`: the local control plane, the CRD and RBAC from `manifests/`, the operator
//! running as its ServiceAccount with its webhook registered, three kwok workers and a small
//! workload, kept running to try `kubectl nm` on, until SIGINT (Ctrl-C) or SIGTERM. Then every
//! process it started is stopped and its directory removed; exit 0.
//!
//! It prints, on stdout, the commands to try, then three lines a script can read:
//! `export KUBECONFIG=<path>`, `processes: <name>=<pid> ...` and `directory: <path>`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::stack::{deploy_workload, operator_binary, start_cluster, start_operator};

/// The node the printed commands put in maintenance.
const NODE: &str = "kwok-worker-1";

/// Runs `up --operator`; the process exit code (0 after a signal, 1 when something failed).
pub(crate) fn run() -> i32 {
    let stop = Arc::new(AtomicBool::new(false));
    if let Err(e) = super::stop_on_signal(stop.clone()) {
        eprintln!("nmo-devcluster: cannot install the signal handlers: {e}");
        return 1;
    }
    match up(&stop) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("nmo-devcluster: {e}");
            1
        }
    }
}

fn up(stop: &AtomicBool) -> Result<(), String> {
    // A signal during start-up ends it at the next step; what was started is dropped (stopped,
    // its directory removed) on the way out.
    let interrupted = || {
        if stop.load(Ordering::SeqCst) {
            Err("interrupted during start-up; everything started was stopped".to_string())
        } else {
            Ok(())
        }
    };
    let binary = operator_binary()?;
    interrupted()?;
    let cluster = start_cluster()?;
    interrupted()?;
    let mut operator = start_operator(&cluster, &binary)?;
    interrupted()?;
    deploy_workload(&cluster)?;
    interrupted()?;
    match cluster.kubectl_run(&["get", "nodes,pods", "-A", "-o", "wide"], None) {
        Ok(out) => println!("{out}"),
        Err(e) => eprintln!("{e}"),
    }
    let kubectl_dir = cluster.bin("kubectl");
    let kubectl_dir = kubectl_dir.parent().unwrap_or(cluster.dir());
    println!(
        "The operator runs on a local cluster. In another terminal (kubectl nm: `cargo install \
         --locked --path kubectl-nm`, or `cargo run -p kubectl-nm --` in its place):\n\n  \
         export KUBECONFIG={kubeconfig}\n  \
         export PATH=\"$PATH:{kubectl_dir}\"   # a kubectl of this cluster's version, if you have none\n  \
         kubectl get nodes\n  \
         kubectl nm start {NODE} --reason x --wait\n  \
         kubectl nm list\n  \
         kubectl nm stop {NODE} --wait\n",
        kubeconfig = cluster.kubeconfig().display(),
        kubectl_dir = kubectl_dir.display(),
    );
    let mut pids: Vec<String> = cluster
        .component_pids()
        .into_iter()
        .map(|(name, pid)| format!("{name}={pid}"))
        .collect();
    pids.push(format!("operator={}", operator.process().pid()));
    println!("export KUBECONFIG={}", cluster.kubeconfig().display());
    println!("processes: {}", pids.join(" "));
    println!("directory: {}", cluster.dir().display());
    println!("operator log: {}", operator.process().log_path().display());
    println!("Press Ctrl-C to stop the operator and the cluster.");

    let failed = loop {
        if stop.load(Ordering::SeqCst) {
            break None;
        }
        let exited = match (cluster.check_components(), operator.process().exited()) {
            (Err(e), _) => Some(e.to_string()),
            (Ok(()), Some(status)) => Some(format!(
                "the operator exited ({status}); last lines of its log:\n{}",
                operator.process().log_tail(30)
            )),
            (Ok(()), None) => None,
        };
        if let Some(why) = exited {
            // Ctrl-C in a terminal signals the whole process group: a component may end on it
            // before the handler's thread sets the flag.
            std::thread::sleep(Duration::from_secs(1));
            if stop.load(Ordering::SeqCst) {
                break None;
            }
            break Some(why);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let dir = cluster.dir().to_path_buf();
    drop(operator);
    cluster.stop();
    match failed {
        Some(why) => Err(why),
        None => {
            println!("Stopped every process and removed {}.", dir.display());
            Ok(())
        }
    }
}

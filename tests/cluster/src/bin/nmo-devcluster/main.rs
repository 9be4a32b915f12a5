//! The local control plane from the command line.
//!
//! - `nmo-devcluster up`: start it, print `kubectl get nodes,pods -A` and the KUBECONFIG to use,
//!   and keep it running until Ctrl-C.
//! - `nmo-devcluster up --operator`: the same with the operator, its webhook and a workload, to
//!   try `kubectl nm` on (see `try_it.rs`).
//! - `nmo-devcluster demo`: the main job (see `demo.rs`).

use std::time::Duration;

use nmo_devcluster::{Cluster, Options};

mod demo;
mod stack;
mod try_it;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.first().map(String::as_str) {
        Some("up") if args.get(1).map(String::as_str) == Some("--operator") => try_it::run(),
        Some("up") if args.len() == 1 => up(),
        Some("demo") => demo::run(),
        _ => {
            eprintln!("usage: nmo-devcluster up [--operator] | demo");
            2
        }
    };
    std::process::exit(code);
}

fn up() -> i32 {
    let cluster = match Cluster::start(Options::default()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("nmo-devcluster: {e}");
            return 1;
        }
    };
    match cluster.kubectl_run(&["get", "nodes,pods", "-A", "-o", "wide"], None) {
        Ok(out) => println!("{out}"),
        Err(e) => eprintln!("{e}"),
    }
    println!("export KUBECONFIG={}", cluster.kubeconfig().display());
    println!("kubectl: {}", cluster.bin("kubectl").display());
    println!("Press Ctrl-C to stop the cluster.");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    if let Err(e) = stop_on_signal(stop.clone()) {
        eprintln!("nmo-devcluster: cannot install the signal handlers: {e}");
        return 1;
    }
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        if let Err(e) = cluster.check_components() {
            eprintln!("nmo-devcluster: {e}");
            return 1;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    cluster.stop();
    0
}

/// Sets `flag` on the first SIGINT or SIGTERM. tokio's handlers, driven by a thread of their
/// own so that the synchronous callers only poll the flag; installed before this returns.
pub fn stop_on_signal(flag: std::sync::Arc<std::sync::atomic::AtomicBool>) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    let (mut int, mut term) = {
        let _context = runtime.enter();
        (
            signal(SignalKind::interrupt())?,
            signal(SignalKind::terminate())?,
        )
    };
    std::thread::spawn(move || {
        runtime.block_on(async {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
        });
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    Ok(())
}

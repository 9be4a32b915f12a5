//! The local control plane from the command line.
//!
//! - `nmo-devcluster up`: start it, print `kubectl get nodes,pods -A` and the KUBECONFIG to use,
//!   and keep it running until Ctrl-C.
//! - `nmo-devcluster demo`: the main job (see `demo.rs`).

use std::time::Duration;

use nmo_devcluster::{Cluster, Options};

mod demo;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.first().map(String::as_str) {
        Some("up") => up(),
        Some("demo") => demo::run(),
        _ => {
            eprintln!("usage: nmo-devcluster up|demo");
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
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let _ = signal_flag(sig, stop.clone());
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

/// Sets `flag` when `signal` arrives (a minimal handler: an atomic store is async-signal-safe).
pub fn signal_flag(
    signal: i32,
    flag: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::io::Result<()> {
    static FLAG: std::sync::OnceLock<std::sync::Arc<std::sync::atomic::AtomicBool>> =
        std::sync::OnceLock::new();
    let _ = FLAG.set(flag);
    extern "C" fn handler(_: i32) {
        if let Some(f) = FLAG.get() {
            f.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
    // SAFETY: installing a handler that only performs an atomic store.
    let r = unsafe { libc::signal(signal, handler as *const () as libc::sighandler_t) };
    if r == libc::SIG_ERR {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

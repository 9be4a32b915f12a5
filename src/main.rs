//! The manager binary: parses flags, sets up logging and runs the operator.
//!
//! Exit status: 0 after a graceful shutdown (SIGTERM/SIGINT) and for `--help`/`--version`; 2 for
//! bad flags; 1 for any start-up failure or loss of leadership (`docs/design.md §5`). Every
//! failure is reported as one line on stderr.

use std::process::ExitCode;

use clap::Parser;
use node_maintenance_operator::config::Config;
use node_maintenance_operator::{run, telemetry};

fn main() -> ExitCode {
    one_heap_arena();
    // Exactly one rustls provider, before any TLS config or kube client is built: with several
    // crypto backends compiled in, rustls refuses to pick one. Err only means one is installed
    // already.
    let _ = rustls::crypto::ring::default_provider().install_default();

    let config = match Config::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            // clap adds usage and tips on further lines; the first line says what is wrong.
            let text = e.to_string();
            eprintln!(
                "{}",
                text.lines().next().unwrap_or("error: invalid arguments")
            );
            return ExitCode::from(2);
        }
    };
    if config.max_parallel_drains_for.len() > 32 {
        eprintln!("error: at most 32 --max-parallel-drains-for budgets are supported");
        return ExitCode::from(2);
    }
    if let Err(e) = telemetry::init(&config.log_level, config.log_format) {
        eprintln!("error: {e}");
        return ExitCode::from(1);
    }
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        metrics_bind_address = %config.metrics_bind_address,
        health_probe_bind_address = %config.health_probe_bind_address,
        webhook_bind_address = %config.webhook_bind_address,
        webhook_cert_path = %config.webhook_cert_path.display(),
        webhook_cert_name = %config.webhook_cert_name,
        webhook_cert_key = %config.webhook_cert_key,
        leader_elect = config.leader_elect,
        enable_http2 = config.enable_http2,
        lease_namespace = %config.lease_namespace,
        max_concurrent_reconciles = config.max_concurrent_reconciles,
        "Operator Version"
    );

    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run::run(config)) {
        Ok(()) => {
            tracing::info!("stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            // A plain line rather than a log event, so that the reason is the one line an operator
            // sees in `kubectl logs --previous` whatever the log format.
            eprintln!("error: {}", e.to_string().replace('\n', " "));
            ExitCode::from(1)
        }
    }
}

/// Keeps the heap in one glibc arena instead of one per thread that ever allocated (up to 8 per
/// core). The large lists (every node, every pod) are decoded on whichever worker runs their
/// watch, and each arena kept its own partly used pages after `malloc_trim`: with one arena an
/// idle operator at 5,000 nodes held 22.2 MiB instead of 23.9 (`BENCH_SCALE_ONLY=start cargo
/// bench --bench scale`, `MALLOC_ARENA_MAX=1` against the default). The admission path did not
/// pay for the shared lock: `cargo bench --bench admission` spent 84.5 µs of CPU per UPDATE
/// with it, 80.9 without, within the spread of runs of one tree on the 2-core machine. It
/// replaces any `MALLOC_ARENA_MAX` or `glibc.malloc.arena_max` tunable of the environment.
///
/// It also fixes glibc's mmap threshold at its initial 128 KiB: glibc otherwise raises it to the
/// size of each large block freed, so after the first pod-list page (about 1.3 MB of JSON for
/// 100 kubelet-size pods) was freed, the next pages and hyper's read buffers came from the heap
/// and were kept there. A 3,000-pod drain's peak `VmRSS` (`cargo bench --bench maintenance --
/// bigdrain`, 2026-12-06) was 29.8 and 29.5 MiB with it, 31.8 and 32.2 without; 20 nodes of 110
/// pods, 37.6 and 36.9 against 41.7 and 40.7. Setting it also stops glibc moving its trim
/// threshold (it stays at its 128 KiB default), and replaces any `MALLOC_MMAP_THRESHOLD_` or
/// `glibc.malloc.mmap_threshold` tunable of the environment.
fn one_heap_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt takes no pointers and is thread-safe; it runs first so that no thread has
    // an arena of its own yet (arenas already made would stay).
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

//! Measurements of an operator process for the benchmarks: `/proc` counters, and the time from
//! spawn to `/readyz` answering 200, polled finely.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::{Child, Cluster, ClusterError, free_ports, http_get};

/// A `kB` field of `/proc/<pid>/status` (`VmRSS`, `VmHWM`, ...), in bytes; `None` when the
/// process is gone or has no such field.
pub fn proc_status(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// The number of sockets process `pid` holds open (listeners and connections, TCP and Unix);
/// `None` when the process is gone. Idle keep-alive connections of an HTTP client pool cost
/// memory (TLS and HTTP buffers each), so the benches show this beside RSS.
pub fn open_sockets(pid: u32) -> Option<usize> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    Some(
        fds.filter_map(Result::ok)
            .filter(|e| {
                std::fs::read_link(e.path())
                    .is_ok_and(|t| t.to_string_lossy().starts_with("socket:"))
            })
            .count(),
    )
}

/// The control plane's processes by component name ([`crate::Cluster::component_pid`]): what
/// the benches wait to settle and whose CPU they report.
pub const CONTROL_PLANE: [&str; 5] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
];

/// CPU time (user + system, every thread) of process `pid` so far, in seconds; `None` when the
/// process is gone.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let fields: Vec<&str> = stat.get(stat.rfind(')')? + 2..)?.split(' ').collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Some(ticks as f64 / hz.max(1) as f64)
}

/// Waits until the processes `pids` together use less than `cores` of CPU over a whole second
/// (a control plane that has finished digesting a burst of writes), at most `limit`. Returns
/// how long it waited and the CPU (in cores) of the last second measured; the wait is at
/// `limit` when they never got below `cores`.
pub fn wait_until_quiet(pids: &[u32], cores: f64, limit: Duration) -> (Duration, f64) {
    let t0 = Instant::now();
    let total = || pids.iter().filter_map(|p| cpu_seconds(*p)).sum::<f64>();
    loop {
        let before = total();
        std::thread::sleep(Duration::from_secs(1));
        let used = total() - before;
        if used < cores || t0.elapsed() > limit {
            return (t0.elapsed(), used);
        }
    }
}

/// A started operator process and the ports it serves on.
pub struct Started {
    /// The process (stopped when dropped).
    pub child: Child,
    /// Spawn to the first `/readyz` 200.
    pub ready_after: Duration,
    /// Ports: webhook, metrics, probes.
    pub ports: [u16; 3],
}

/// Spawns `binary` as an operator (leader election off, `RUST_LOG=warn`) with the webhook pair
/// in `cert_dir` and `kubeconfig`, `args` appended to its flags, and polls `/readyz` every 2 ms:
/// the time to ready includes the process start, the certificate load and the initial lists of
/// the watches.
///
/// # Errors
/// The process cannot start, exits, or is not ready within `limit` (with its log tail).
#[allow(clippy::too_many_arguments)]
pub fn start_operator_timed(
    cluster: &Cluster,
    name: &str,
    binary: &Path,
    kubeconfig: &Path,
    cert_dir: &Path,
    env: &[(&str, &str)],
    args: &[&str],
    limit: Duration,
) -> Result<Started, ClusterError> {
    let ports = free_ports(3)?;
    let mut cmd = Command::new(binary);
    cmd.args([
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--webhook-cert-path={}", cert_dir.display()),
        format!("--webhook-bind-address=127.0.0.1:{}", ports[0]),
        format!("--metrics-bind-address=127.0.0.1:{}", ports[1]),
        format!("--health-probe-bind-address=127.0.0.1:{}", ports[2]),
        "--leader-elect=false".into(),
    ])
    .args(args)
    .env("RUST_LOG", "warn");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let t0 = Instant::now();
    let mut child = cluster.spawn(name, cmd)?;
    loop {
        let r = http_get(("127.0.0.1", ports[2]), "/readyz");
        if r.as_ref()
            .is_some_and(|r| r.split(' ').nth(1) == Some("200"))
        {
            return Ok(Started {
                child,
                ready_after: t0.elapsed(),
                ports: [ports[0], ports[1], ports[2]],
            });
        }
        if let Some(status) = child.exited() {
            return Err(ClusterError::Exited {
                name: name.into(),
                status: status.to_string(),
                log: child.log_path().display().to_string(),
                tail: child.log_tail(20),
            });
        }
        if t0.elapsed() > limit {
            return Err(ClusterError::NotReady {
                what: format!("{name} /readyz"),
                seconds: limit.as_secs(),
                log: child.log_path().display().to_string(),
                tail: child.log_tail(20),
            });
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

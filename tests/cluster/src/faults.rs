//! Faults for robustness tests: a control-plane component killed and started again on the same
//! port and data, a component paused (SIGSTOP) and resumed, and an operator's webhook serving
//! pair replaced on disk. Used by the chaos suite (`tests/chaos.rs`); each fault is a plain
//! method so a test can place it wherever its scenario says.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::{Child, Cluster, ClusterError, http_get, io_err};

/// How a component was started: program, arguments and environment, so it can be started again
/// with the same ports, certificates and data directory.
#[derive(Clone, Debug)]
pub struct CommandSpec {
    name: String,
    program: OsString,
    args: Vec<OsString>,
    envs: Vec<(OsString, Option<OsString>)>,
}

impl CommandSpec {
    pub(crate) fn of(name: &str, cmd: &Command) -> Self {
        CommandSpec {
            name: name.to_string(),
            program: cmd.get_program().to_owned(),
            args: cmd.get_args().map(ToOwned::to_owned).collect(),
            envs: cmd
                .get_envs()
                .map(|(k, v)| (k.to_owned(), v.map(ToOwned::to_owned)))
                .collect(),
        }
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args);
        for (k, v) in &self.envs {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        cmd
    }
}

impl Cluster {
    /// Operating-system process id of component `name` (`etcd`, `kube-apiserver`,
    /// `kube-controller-manager`, `kube-scheduler`, `kwok`).
    ///
    /// # Errors
    /// [`ClusterError::Io`] when no component has that name.
    pub fn component_pid(&self, name: &str) -> Result<u32, ClusterError> {
        let components = self.components.lock().expect("components lock");
        components
            .iter()
            .find(|c| c.name() == name)
            .map(Child::pid)
            .ok_or_else(|| no_component(name))
    }

    /// Starts again every component that has exited, with its first command, as the kubelet
    /// restarts a crashed static pod of a real control plane, and returns their names. It does
    /// not wait for them to serve. kube-scheduler, for one, exits by design when it finds its
    /// cache inconsistent ("Scheduler cache is corrupted"), which a binding cut short by an API
    /// server restart can cause.
    ///
    /// # Errors
    /// A component cannot be started again.
    pub fn revive_exited(&self) -> Result<Vec<String>, ClusterError> {
        let commands = self.commands.lock().expect("commands lock").clone();
        let mut components = self.components.lock().expect("components lock");
        let mut revived = Vec::new();
        for slot in components.iter_mut() {
            if slot.exited().is_some() {
                let name = slot.name().to_string();
                let spec = commands
                    .iter()
                    .find(|c| c.name == name)
                    .ok_or_else(|| no_component(&name))?;
                *slot = self.spawn(&name, spec.command())?;
                revived.push(name);
            }
        }
        Ok(revived)
    }

    /// SIGSTOP to component `name`: it holds its sockets but answers nothing, as a process stuck
    /// on a full disk or a long GC pause would. Undo with [`Cluster::resume_component`].
    ///
    /// # Errors
    /// No component has that name.
    pub fn pause_component(&self, name: &str) -> Result<(), ClusterError> {
        let pid = self.component_pid(name)?;
        // SAFETY: kill(2) on a child this cluster started.
        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
        Ok(())
    }

    /// SIGCONT to component `name`.
    ///
    /// # Errors
    /// No component has that name.
    pub fn resume_component(&self, name: &str) -> Result<(), ClusterError> {
        let pid = self.component_pid(name)?;
        // SAFETY: kill(2) on a child this cluster started.
        unsafe { libc::kill(pid as i32, libc::SIGCONT) };
        Ok(())
    }

    /// SIGKILL to component `name` (a crash: no graceful shutdown), `down` of nothing, then the
    /// same command again: same port, certificates and data directory, output appended to the
    /// same log. Waits up to `limit` until the component serves again (`kube-apiserver`:
    /// `/readyz`; `etcd`: `/health`; others: still running after a second).
    ///
    /// # Errors
    /// No such component; it cannot be started; it exits or is not ready within `limit`.
    pub fn restart_component(
        &self,
        name: &str,
        down: Duration,
        limit: Duration,
    ) -> Result<(), ClusterError> {
        let spec = self
            .commands
            .lock()
            .expect("commands lock")
            .iter()
            .find(|c| c.name == name)
            .cloned()
            .ok_or_else(|| no_component(name))?;
        {
            let mut components = self.components.lock().expect("components lock");
            let slot = components
                .iter_mut()
                .find(|c| c.name() == name)
                .ok_or_else(|| no_component(name))?;
            slot.kill();
            std::thread::sleep(down);
            *slot = self.spawn(name, spec.command())?;
        }
        let deadline = Instant::now() + limit;
        let etcd_health = (name == "etcd").then(|| etcd_client_port(&spec)).flatten();
        loop {
            self.check_components()?;
            let ready = match name {
                "kube-apiserver" => self.kubectl_run(&["get", "--raw=/readyz"], None).is_ok(),
                "etcd" => etcd_health.is_some_and(|port| {
                    http_get(("127.0.0.1", port), "/health").is_some_and(|b| b.contains("true"))
                }),
                _ => true,
            };
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                let components = self.components.lock().expect("components lock");
                let c = components.iter().find(|c| c.name() == name);
                return Err(ClusterError::NotReady {
                    what: format!("{name} after a restart"),
                    seconds: limit.as_secs(),
                    log: c
                        .map(|c| c.log_path().display().to_string())
                        .unwrap_or_default(),
                    tail: c.map(|c| c.log_tail(30)).unwrap_or_default(),
                });
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Where kube-apiserver writes audit events when [`crate::Options::audit_policy`] is set.
    pub fn audit_log_path(&self) -> PathBuf {
        self.dir.join(crate::audit::LOG_FILE)
    }
}

fn no_component(name: &str) -> ClusterError {
    ClusterError::Io {
        context: format!("component {name}"),
        source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such component"),
    }
}

fn etcd_client_port(spec: &CommandSpec) -> Option<u16> {
    spec.args.iter().find_map(|a| {
        a.to_str()?
            .strip_prefix("--listen-client-urls=http://127.0.0.1:")?
            .parse()
            .ok()
    })
}

/// Replaces the webhook serving pair of the operator started as `operator_name` (in
/// `<cluster dir>/<operator_name>-certs/`) with a new pair from the cluster's CA, as a
/// certificate rotation does, and returns the new certificate (PEM). Each file is written
/// beside its target and renamed over it, so a reader sees the old or the new file, never a
/// torn one; between the two renames the directory holds a mismatched pair, which the operator
/// must survive. [`served_certificate`] tells when the operator serves the new one.
///
/// # Errors
/// Certificate or file errors.
pub fn swap_serving_pair(cluster: &Cluster, operator_name: &str) -> Result<String, ClusterError> {
    let dir = cluster.dir().join(format!("{operator_name}-certs"));
    let pair = cluster
        .ca()
        .issue_server(&["localhost"], &["127.0.0.1".parse().unwrap()])?;
    for (file, content) in [
        ("apiserver.crt", &pair.cert_pem),
        ("apiserver.key", &pair.key_pem),
    ] {
        let tmp = dir.join(format!(".{file}.new"));
        std::fs::write(&tmp, content).map_err(io_err(format!("writing {}", tmp.display())))?;
        std::fs::rename(&tmp, dir.join(file)).map_err(io_err(format!("renaming to {file}")))?;
    }
    Ok(pair.cert_pem)
}

/// The leaf certificate (DER) a TLS server on `127.0.0.1:port` presents, verified against the
/// cluster's CA for the name `127.0.0.1`. Blocking, with 5 s timeouts.
///
/// # Errors
/// The connection, the handshake or the verification fails (the message says which).
pub fn served_certificate(cluster: &Cluster, port: u16) -> Result<Vec<u8>, String> {
    use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
    use std::sync::Arc;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(cluster.ca().cert_pem().as_bytes()) {
        roots
            .add(c.map_err(|e| format!("CA PEM: {e}"))?)
            .map_err(|e| format!("CA: {e}"))?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = ServerName::IpAddress(std::net::IpAddr::from([127, 0, 0, 1]).into());
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name)
        .map_err(|e| format!("TLS client: {e}"))?;
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port))
        .map_err(|e| format!("connect 127.0.0.1:{port}: {e}"))?;
    let timeout = Some(Duration::from_secs(5));
    tcp.set_read_timeout(timeout).map_err(|e| e.to_string())?;
    tcp.set_write_timeout(timeout).map_err(|e| e.to_string())?;
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp)
            .map_err(|e| format!("TLS handshake with 127.0.0.1:{port}: {e}"))?;
    }
    conn.peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.as_ref().to_vec())
        .ok_or_else(|| format!("127.0.0.1:{port} presented no certificate"))
}

/// The DER of the first certificate in `pem`.
///
/// # Errors
/// `pem` holds no certificate.
pub fn certificate_der(pem: &str) -> Result<Vec<u8>, String> {
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .next()
        .ok_or("no certificate in the PEM")?
        .map(|c| c.as_ref().to_vec())
        .map_err(|e| format!("certificate PEM: {e}"))
}

impl Child {
    /// SIGSTOP: the process keeps its sockets and leases but runs nothing, as in a long GC pause
    /// or a frozen VM. Undo with [`Child::resume`].
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// SIGCONT after [`Child::pause`].
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }
}

//! A real local Kubernetes control plane for the tests and the demo.
//!
//! [`Cluster::start`] runs etcd, kube-apiserver, kube-controller-manager (garbage collector,
//! namespace, disruption, replicaset, deployment, daemonset and serviceaccount controllers),
//! kube-scheduler and kwok (which plays the kubelet of fake nodes: pods become Running and
//! graceful deletions complete) on loopback ports, in a fresh directory with a generated CA,
//! certificates, service-account keys and an admin kubeconfig. The binaries are built once per
//! machine from the Go module proxy by `build-k8s-bins.sh` into a versioned cache under `$HOME`.
//!
//! Nothing outlives the caller: see [`process`] for how children and directories are cleaned up
//! on exit, on panic and on a kill.

pub mod audit;
pub mod faults;
pub mod fixtures;
pub mod kubevirt;
pub mod load;
pub mod measure;
pub mod operator;
pub mod process;
pub mod versions;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

pub use nmo_certs::Ca;
pub use process::Child;

/// Name of the label that marks a control-plane node.
pub const CONTROL_PLANE_LABEL: &str = "node-role.kubernetes.io/control-plane";

/// Why the control plane could not be brought up.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// `build-k8s-bins.sh` failed (Go missing, a module not served, a compile error); its own
    /// message, printed on stderr, says which.
    #[error(
        "building the control-plane binaries failed ({0}); see the build-k8s-bins messages above"
    )]
    Build(String),
    /// A component exited while starting; the tail of its log says why.
    #[error("{name} exited during start-up ({status}); last lines of {log}:\n{tail}")]
    Exited {
        /// The component (`etcd`, `kube-apiserver`, ...).
        name: String,
        /// Its exit status.
        status: String,
        /// Path of its log file.
        log: String,
        /// The last lines of that log.
        tail: String,
    },
    /// A component did not become ready in time.
    #[error("{what} was not ready after {seconds} s; last lines of {log}:\n{tail}")]
    NotReady {
        /// What was waited for.
        what: String,
        /// How long it was waited for, in seconds.
        seconds: u64,
        /// Path of the log that says why.
        log: String,
        /// The last lines of that log.
        tail: String,
    },
    /// A kubectl call that sets up the cluster failed.
    #[error("`kubectl {args}` failed: {stderr}")]
    Kubectl {
        /// The arguments, space-separated.
        args: String,
        /// What kubectl wrote on stderr.
        stderr: String,
    },
    /// Certificate generation failed.
    #[error("certificates: {0}")]
    Certs(#[from] nmo_certs::Error),
    /// A file or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done (and on which path).
        context: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ClusterError {
    let context = context.into();
    move |source| ClusterError::Io { context, source }
}

/// Shape of the cluster to start.
#[derive(Clone, Debug)]
pub struct Options {
    /// Worker nodes `kwok-worker-0..`, Ready, schedulable.
    pub workers: usize,
    /// Control-plane nodes `kwok-control-plane-0..`, labelled [`CONTROL_PLANE_LABEL`] and tainted
    /// `node-role.kubernetes.io/control-plane:NoSchedule` as kubeadm does.
    pub control_planes: usize,
    /// An audit policy (YAML, `audit.k8s.io/v1` `Policy`) for kube-apiserver; when set, the API
    /// server writes JSON audit events to [`Cluster::audit_log_path`]. Off by default: auditing
    /// costs the API server a write per request. See [`audit`] for ready-made policies.
    pub audit_policy: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            workers: 3,
            control_planes: 1,
            audit_policy: None,
        }
    }
}

/// The common name of the API server's front-proxy client certificate (the aggregation layer's
/// `--proxy-client-cert-file`, `--requestheader-allowed-names`).
pub const FRONT_PROXY_CLIENT: &str = "front-proxy-client";

/// A running control plane. Dropping it stops every component and removes its directory.
pub struct Cluster {
    dir: PathBuf,
    bins: PathBuf,
    kubeconfig: PathBuf,
    server: String,
    ca: Ca,
    components: Mutex<Vec<Child>>,
    /// How each component was started, so [`faults`] can start it again identically.
    commands: Mutex<Vec<faults::CommandSpec>>,
    nodes: Vec<String>,
}

impl Cluster {
    /// The cluster shared by every test of one test binary, started on first use with
    /// [`Options::default`] and stopped when the process exits. Tests isolate themselves with
    /// their own namespaces and nodes.
    ///
    /// # Panics
    /// When the cluster cannot start; the message says which component failed and why.
    pub fn shared() -> &'static Cluster {
        static SHARED: OnceLock<Cluster> = OnceLock::new();
        SHARED.get_or_init(|| match Cluster::start(Options::default()) {
            Ok(c) => c,
            Err(e) => panic!("the local control plane did not start: {e}"),
        })
    }

    /// Builds the binaries if this machine has none, then starts every component and waits until
    /// the API server is ready and the nodes are Ready (up to 120 s each on 2 cores).
    ///
    /// # Errors
    /// See [`ClusterError`]: each variant names the failing step and carries its evidence.
    pub fn start(opts: Options) -> Result<Cluster, ClusterError> {
        let started = Instant::now();
        let bins = ensure_binaries()?;
        sweep_stale_dirs();
        let dir = std::env::temp_dir().join(format!(
            "nmo-devcluster-{}-{}",
            std::process::id(),
            started.elapsed().as_nanos() ^ u128::from(rand_u32())
        ));
        std::fs::create_dir_all(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
        process::register_dir(&dir);

        let ca = Ca::new("nmo-devcluster-ca")?;
        let ports = free_ports(3)?;
        let (etcd_client, etcd_peer, apiserver_port) = (ports[0], ports[1], ports[2]);
        let server = format!("https://127.0.0.1:{apiserver_port}");
        let pki = dir.join("pki");
        std::fs::create_dir_all(&pki).map_err(io_err("creating pki dir"))?;
        let write = |name: &str, content: &str| -> Result<PathBuf, ClusterError> {
            let p = pki.join(name);
            std::fs::write(&p, content).map_err(io_err(format!("writing {}", p.display())))?;
            Ok(p)
        };
        let ca_crt = write("ca.crt", ca.cert_pem())?;
        let serving = ca.issue_server(
            &[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            &["127.0.0.1".parse().unwrap(), "10.0.0.1".parse().unwrap()],
        )?;
        let api_crt = write("apiserver.crt", &serving.cert_pem)?;
        let api_key = write("apiserver.key", &serving.key_pem)?;
        let admin = ca.issue_client("admin", Some("system:masters"))?;
        let admin_crt = write("admin.crt", &admin.cert_pem)?;
        let admin_key = write("admin.key", &admin.key_pem)?;
        let (sa_private, sa_public) = nmo_certs::service_account_keys()?;
        let sa_key = write("sa.key", &sa_private)?;
        let sa_pub = write("sa.pub", &sa_public)?;
        // The aggregation layer's front proxy: its own CA (as kubeadm's front-proxy-ca), so that
        // an aggregated server trusts the proxied user headers only from the API server.
        let front_proxy_ca = Ca::new("front-proxy-ca")?;
        let front_proxy_ca_crt = write("front-proxy-ca.crt", front_proxy_ca.cert_pem())?;
        let front_proxy = front_proxy_ca.issue_client(FRONT_PROXY_CLIENT, None)?;
        let front_proxy_crt = write("front-proxy-client.crt", &front_proxy.cert_pem)?;
        let front_proxy_key = write("front-proxy-client.key", &front_proxy.key_pem)?;
        let kubeconfig = dir.join("admin.kubeconfig");
        write_kubeconfig(&kubeconfig, &server, &ca_crt, &admin_crt, &admin_key)?;

        let mut cluster = Cluster {
            dir: dir.clone(),
            bins: bins.clone(),
            kubeconfig: kubeconfig.clone(),
            server: server.clone(),
            ca,
            components: Mutex::new(Vec::new()),
            commands: Mutex::new(Vec::new()),
            nodes: Vec::new(),
        };

        // etcd
        let etcd_data = dir.join("etcd");
        std::fs::create_dir_all(&etcd_data).map_err(io_err("creating etcd dir"))?;
        std::fs::set_permissions(
            &etcd_data,
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .map_err(io_err("chmod etcd dir"))?;
        let client_url = format!("http://127.0.0.1:{etcd_client}");
        let peer_url = format!("http://127.0.0.1:{etcd_peer}");
        let mut etcd = Command::new(bins.join("bin/etcd"));
        etcd.args([
            "--name=default",
            &format!("--data-dir={}", etcd_data.display()),
            &format!("--listen-client-urls={client_url}"),
            &format!("--advertise-client-urls={client_url}"),
            &format!("--listen-peer-urls={peer_url}"),
            &format!("--initial-advertise-peer-urls={peer_url}"),
            &format!("--initial-cluster=default={peer_url}"),
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]);
        cluster.spawn_component("etcd", etcd)?;
        cluster.wait_ready("etcd", Duration::from_secs(60), || {
            http_get(("127.0.0.1", etcd_client), "/health").is_some_and(|b| b.contains("true"))
        })?;

        // kube-apiserver, with envtest's flags plus our own serving pair (docs/design.md §7).
        let mut apiserver = Command::new(bins.join("bin/kube-apiserver"));
        apiserver.args([
            format!("--etcd-servers={client_url}"),
            format!("--cert-dir={}", dir.join("apiserver-certs").display()),
            format!("--secure-port={apiserver_port}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            "--endpoint-reconciler-type=none".into(),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            "--allow-privileged=true".into(),
            "--disable-admission-plugins=ServiceAccount".into(),
            "--authorization-mode=RBAC".into(),
            format!("--service-account-issuer={server}"),
            format!("--service-account-key-file={}", sa_pub.display()),
            format!("--service-account-signing-key-file={}", sa_key.display()),
            format!("--client-ca-file={}", ca_crt.display()),
            format!("--tls-cert-file={}", api_crt.display()),
            format!("--tls-private-key-file={}", api_key.display()),
            "--profiling=false".into(),
        ]);
        // The aggregation layer (APIService-backed APIs, as KubeVirt's subresources): additive,
        // nothing else changes. No `--enable-aggregator-routing`: it would resolve webhook
        // Services by their endpoints too, and refuse the ExternalName Services that point them
        // (and an APIService) at a local process.
        apiserver.args([
            format!(
                "--requestheader-client-ca-file={}",
                front_proxy_ca_crt.display()
            ),
            format!("--requestheader-allowed-names={FRONT_PROXY_CLIENT}"),
            "--requestheader-extra-headers-prefix=X-Remote-Extra-".into(),
            "--requestheader-group-headers=X-Remote-Group".into(),
            "--requestheader-username-headers=X-Remote-User".into(),
            format!("--proxy-client-cert-file={}", front_proxy_crt.display()),
            format!("--proxy-client-key-file={}", front_proxy_key.display()),
        ]);
        if let Some(policy) = &opts.audit_policy {
            let file = dir.join("audit-policy.yaml");
            std::fs::write(&file, policy).map_err(io_err("writing the audit policy"))?;
            apiserver.args([
                format!("--audit-policy-file={}", file.display()),
                format!("--audit-log-path={}", dir.join(audit::LOG_FILE).display()),
                "--audit-log-format=json".into(),
                "--audit-log-mode=blocking".into(),
            ]);
        }
        apiserver.args(versions::apiserver_flags(&versions::kube()));
        cluster.spawn_component("kube-apiserver", apiserver)?;
        cluster.wait_ready("kube-apiserver /readyz", Duration::from_secs(120), || {
            cluster.kubectl_ok(&["get", "--raw=/readyz"])
        })?;

        let kc = format!("--kubeconfig={}", kubeconfig.display());
        let mut kcm = Command::new(bins.join("bin/kube-controller-manager"));
        kcm.args([
            kc.clone(),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
            "--controllers=garbage-collector-controller,namespace-controller,disruption-controller,\
             replicaset-controller,deployment-controller,daemonset-controller,\
             serviceaccount-controller,statefulset-controller,node-lifecycle-controller"
                .into(),
            format!("--service-account-private-key-file={}", sa_key.display()),
            format!("--root-ca-file={}", ca_crt.display()),
            "--use-service-account-credentials=false".into(),
        ]);
        kcm.args(versions::controller_manager_flags(&versions::kube()));
        cluster.spawn_component("kube-controller-manager", kcm)?;

        let mut scheduler = Command::new(bins.join("bin/kube-scheduler"));
        scheduler.args([
            kc.clone(),
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
        ]);
        cluster.spawn_component("kube-scheduler", scheduler)?;

        let kwok_port = free_ports(1)?[0];
        // kwok plays every node's kubelet from one process; its default of 4 pod stages at a time
        // would serialise what real kubelets do in parallel on each node. A configuration file
        // replaces kwok's defaults for every parallelism, so all four are set.
        let kwok_config = dir.join("kwok-config.yaml");
        std::fs::write(
            &kwok_config,
            "apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\noptions:\n  \
             podPlayStageParallelism: 32\n  nodePlayStageParallelism: 8\n  \
             nodeLeaseParallelism: 8\n  podsOnNodeSyncParallelism: 4\n",
        )
        .map_err(io_err("writing the kwok configuration"))?;
        let mut kwok = Command::new(bins.join("bin/kwok"));
        kwok.args([
            kc,
            format!("--config={}", bins.join("stages.yaml").display()),
            format!("--config={}", kwok_config.display()),
            "--manage-all-nodes=false".into(),
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake".into(),
            "--cidr=10.244.0.0/16".into(),
            "--node-ip=10.0.0.2".into(),
            "--node-lease-duration-seconds=40".into(),
            format!("--server-address=127.0.0.1:{kwok_port}"),
        ]);
        cluster.spawn_component("kwok", kwok)?;

        let mut names = Vec::new();
        for i in 0..opts.control_planes {
            names.push((format!("kwok-control-plane-{i}"), true));
        }
        for i in 0..opts.workers {
            names.push((format!("kwok-worker-{i}"), false));
        }
        for (name, cp) in &names {
            cluster.create_node(name, *cp)?;
        }
        cluster.nodes = names.into_iter().map(|(n, _)| n).collect();
        if !cluster.nodes.is_empty() {
            let nodes = cluster.nodes.clone();
            cluster.wait_ready("kwok nodes Ready", Duration::from_secs(120), || {
                nodes.iter().all(|n| cluster.node_ready(n))
            })?;
        }
        eprintln!(
            "nmo-devcluster: control plane ready at {} in {:.1} s (kubeconfig {})",
            cluster.server,
            started.elapsed().as_secs_f64(),
            cluster.kubeconfig.display()
        );
        Ok(cluster)
    }

    /// Path of the admin kubeconfig (user `admin` in group `system:masters`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The API server's URL, `https://127.0.0.1:<port>`.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The cluster's CA: trusted by the API server for client certificates, and the issuer to
    /// use for webhook serving pairs (its PEM is the webhook's `caBundle`).
    pub fn ca(&self) -> &Ca {
        &self.ca
    }

    /// The cluster's working directory (certificates, logs, etcd data).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A binary of the control plane, e.g. `bin("kubectl")`.
    pub fn bin(&self, name: &str) -> PathBuf {
        self.bins.join("bin").join(name)
    }

    /// The nodes created at start, control-plane nodes first.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// A fresh admin client. Each async runtime needs its own (a client's connections live on
    /// the runtime that made them), so tests call this rather than share one.
    ///
    /// # Panics
    /// When the kubeconfig written at start cannot be read back.
    pub async fn client(&self) -> kube::Client {
        self.client_for(&self.kubeconfig).await
    }

    /// A client for another kubeconfig written by [`Cluster::write_user_kubeconfig`].
    ///
    /// # Panics
    /// When the kubeconfig cannot be read.
    pub async fn client_for(&self, kubeconfig: &Path) -> kube::Client {
        let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig reads");
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .expect("kubeconfig is valid");
        kube::Client::try_from(config).expect("client builds")
    }

    /// Writes a kubeconfig that authenticates as `user` in `groups` with a client certificate,
    /// e.g. `system:serviceaccount:<ns>:<name>` in `system:serviceaccounts`, which RBAC treats
    /// exactly as that ServiceAccount.
    ///
    /// # Errors
    /// Certificate or file errors.
    pub fn write_user_kubeconfig(
        &self,
        file_stem: &str,
        user: &str,
        group: &str,
    ) -> Result<PathBuf, ClusterError> {
        let pair = self.ca.issue_client(user, Some(group))?;
        let crt = self.dir.join(format!("pki/{file_stem}.crt"));
        let key = self.dir.join(format!("pki/{file_stem}.key"));
        std::fs::write(&crt, &pair.cert_pem).map_err(io_err("writing client cert"))?;
        std::fs::write(&key, &pair.key_pem).map_err(io_err("writing client key"))?;
        let path = self.dir.join(format!("{file_stem}.kubeconfig"));
        write_kubeconfig(
            &path,
            &self.server,
            &self.dir.join("pki/ca.crt"),
            &crt,
            &key,
        )?;
        Ok(path)
    }

    /// A `kubectl` command bound to the admin kubeconfig.
    pub fn kubectl(&self) -> Command {
        let mut c = Command::new(self.bin("kubectl"));
        c.arg(format!("--kubeconfig={}", self.kubeconfig.display()));
        c
    }

    /// Runs kubectl with `args` (and `stdin` when given) and returns stdout.
    ///
    /// # Errors
    /// [`ClusterError::Kubectl`] with kubectl's stderr when it exits non-zero.
    pub fn kubectl_run(&self, args: &[&str], stdin: Option<&str>) -> Result<String, ClusterError> {
        let mut cmd = self.kubectl();
        cmd.args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        if stdin.is_some() {
            cmd.stdin(std::process::Stdio::piped());
        }
        let mut child = cmd.spawn().map_err(io_err("running kubectl"))?;
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .expect("piped")
                .write_all(input.as_bytes())
                .map_err(io_err("kubectl stdin"))?;
        }
        let out = child
            .wait_with_output()
            .map_err(io_err("running kubectl"))?;
        if !out.status.success() {
            return Err(ClusterError::Kubectl {
                args: args.join(" "),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Creates a kwok-managed node (Ready within a second or two); a control-plane node gets the
    /// control-plane label and NoSchedule taint.
    ///
    /// # Errors
    /// [`ClusterError::Kubectl`] when the API server refuses it.
    pub fn create_node(&self, name: &str, control_plane: bool) -> Result<(), ClusterError> {
        let (role, taints) = if control_plane {
            (
                format!("\n    {CONTROL_PLANE_LABEL}: \"\""),
                format!("\n  taints:\n  - key: {CONTROL_PLANE_LABEL}\n    effect: NoSchedule"),
            )
        } else {
            (String::new(), String::new())
        };
        let manifest = format!(
            r#"apiVersion: v1
kind: Node
metadata:
  name: {name}
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    kubernetes.io/hostname: {name}
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok{role}
spec:{spec}
status:
  allocatable: {{cpu: "64", memory: 256Gi, pods: "1000"}}
  capacity: {{cpu: "64", memory: 256Gi, pods: "1000"}}
"#,
            spec = if taints.is_empty() {
                " {}".to_string()
            } else {
                taints
            }
        );
        self.kubectl_run(&["apply", "-f", "-"], Some(&manifest))
            .map(|_| ())
    }

    /// Whether node `name` has condition Ready=True.
    pub fn node_ready(&self, name: &str) -> bool {
        self.kubectl_run(
            &[
                "get",
                "node",
                name,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ],
            None,
        )
        .is_ok_and(|s| s.trim() == "True")
    }

    /// Starts a program as a component of this cluster (stopped with it, never orphaned), with
    /// output in `<dir>/<name>.log`.
    ///
    /// # Errors
    /// The program cannot be started.
    pub fn spawn(&self, name: &str, cmd: Command) -> Result<Child, ClusterError> {
        let log = self.dir.join(format!("{name}.log"));
        Child::spawn(name, cmd, &log).map_err(io_err(format!("starting {name}")))
    }

    fn spawn_component(&self, name: &str, cmd: Command) -> Result<(), ClusterError> {
        self.commands
            .lock()
            .expect("commands lock")
            .push(faults::CommandSpec::of(name, &cmd));
        let child = self.spawn(name, cmd)?;
        self.components.lock().expect("components lock").push(child);
        Ok(())
    }

    /// Each running component's name and process id, in start order.
    pub fn component_pids(&self) -> Vec<(String, u32)> {
        let components = self.components.lock().expect("components lock");
        components
            .iter()
            .map(|c| (c.name().to_string(), c.pid()))
            .collect()
    }

    /// Fails with the evidence when a component has exited.
    ///
    /// # Errors
    /// [`ClusterError::Exited`] naming the first component found dead, with its log tail.
    pub fn check_components(&self) -> Result<(), ClusterError> {
        let mut components = self.components.lock().expect("components lock");
        for c in components.iter_mut() {
            if let Some(status) = c.exited() {
                return Err(ClusterError::Exited {
                    name: c.name().to_string(),
                    status: status.to_string(),
                    log: c.log_path().display().to_string(),
                    tail: c.log_tail(30),
                });
            }
        }
        Ok(())
    }

    fn wait_ready(
        &self,
        what: &str,
        limit: Duration,
        mut ready: impl FnMut() -> bool,
    ) -> Result<(), ClusterError> {
        let deadline = Instant::now() + limit;
        loop {
            self.check_components()?;
            if ready() {
                return Ok(());
            }
            if Instant::now() > deadline {
                let components = self.components.lock().expect("components lock");
                let last = components.last();
                return Err(ClusterError::NotReady {
                    what: what.to_string(),
                    seconds: limit.as_secs(),
                    log: last
                        .map(|c| c.log_path().display().to_string())
                        .unwrap_or_default(),
                    tail: last.map(|c| c.log_tail(30)).unwrap_or_default(),
                });
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn kubectl_ok(&self, args: &[&str]) -> bool {
        self.kubectl_run(args, None).is_ok()
    }

    /// Stops every component (SIGTERM, then SIGKILL) and removes the directory.
    pub fn stop(self) {
        drop(self);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let mut components = std::mem::take(&mut *self.components.lock().expect("components lock"));
        // Stop in reverse start order: clients before the API server, the API server before etcd.
        while let Some(mut c) = components.pop() {
            c.stop(Duration::from_secs(5));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        process::forget_dir(&self.dir);
    }
}

/// Runs `build-k8s-bins.sh` (a no-op when the versioned cache is complete) and returns the cache
/// directory holding `bin/` and `stages.yaml`.
///
/// # Errors
/// [`ClusterError::Build`] when the script fails; it prints its reason on stderr.
pub fn ensure_binaries() -> Result<PathBuf, ClusterError> {
    static BINS: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BINS.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("build-k8s-bins.sh");
        let out = Command::new("bash")
            .arg(&script)
            .stderr(std::process::Stdio::inherit())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        if !out.status.success() {
            return Err(format!("{} exited with {}", script.display(), out.status));
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let dir = stdout.lines().last().unwrap_or_default().trim().to_string();
        Ok(PathBuf::from(dir))
    })
    .clone()
    .map_err(ClusterError::Build)
}

/// Removes `nmo-devcluster-<pid>-*` directories left by processes that no longer exist (a test
/// binary killed by a signal cannot run its exit hooks).
fn sweep_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("nmo-devcluster-") else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        // SAFETY: kill with signal 0 only checks whether the pid exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0;
        if !alive {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn write_kubeconfig(
    path: &Path,
    server: &str,
    ca: &Path,
    crt: &Path,
    key: &Path,
) -> Result<(), ClusterError> {
    let content = format!(
        r#"apiVersion: v1
kind: Config
clusters:
- name: nmo-devcluster
  cluster:
    server: {server}
    certificate-authority: {ca}
users:
- name: user
  user:
    client-certificate: {crt}
    client-key: {key}
contexts:
- name: nmo-devcluster
  context:
    cluster: nmo-devcluster
    user: user
current-context: nmo-devcluster
"#,
        ca = ca.display(),
        crt = crt.display(),
        key = key.display()
    );
    std::fs::write(path, content).map_err(io_err(format!("writing {}", path.display())))
}

/// Free loopback ports, chosen by the kernel. They are released before use, so another process
/// could take one in between; the component then exits and its log says "address in use".
///
/// # Errors
/// The kernel would not hand out a port.
pub fn free_ports(n: usize) -> Result<Vec<u16>, ClusterError> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()
        .map_err(io_err("binding a free loopback port"))?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<_, _>>()
        .map_err(io_err("reading a bound port"))
}

/// A plain-HTTP GET on loopback, for health endpoints; `None` on any failure.
pub fn http_get(addr: impl std::net::ToSocketAddrs, path: &str) -> Option<String> {
    let addr: SocketAddr = addr.to_socket_addrs().ok()?.next()?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    body.starts_with("HTTP/1.").then_some(body)
}

fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::process::id() as u64);
    h.finish() as u32
}

/// Runs `tests/cluster/<script>` (a Go test tool's builder: builds once into the versioned
/// cache under `$HOME`, then prints the tool's path as its last line) and returns that path.
///
/// # Panics
/// When the script fails or prints nothing; its stderr goes to the test's.
pub fn go_tool(script: &str) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
    let out = std::process::Command::new("bash")
        .arg(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("bash runs");
    assert!(out.status.success(), "{} failed", script.display());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default().trim();
    assert!(!last.is_empty(), "{} printed no path", script.display());
    PathBuf::from(last)
}

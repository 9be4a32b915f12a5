//! Command-line flags of the manager binary.
//!
//! Flag names and defaults follow upstream NMO (docs/compat.md §8) where upstream has the flag, so
//! the upstream Deployment args (`--health-probe-bind-address=:8081 --leader-elect
//! --enable-http2=false`) work unchanged. Differences, on purpose:
//!
//! - `--metrics-bind-address` defaults to `:8080` and serves plain HTTP (upstream: `:8443`,
//!   HTTPS with TokenReview/SubjectAccessReview); `--metrics-secure` serves it as upstream does
//!   (`docs/compat.md §8`).
//! - Go's zap flags (`--zap-*`) are replaced by `--log-level` and `--log-format`.
//! - The webhook certificate location, the webhook port, the lease namespace and the reconcile
//!   concurrency are flags here; upstream hard-codes or reads them from the environment.
//!
//! Addresses are written the Go way: `:8080` means every interface (`0.0.0.0:8080`),
//! `127.0.0.1:8080` and `[::1]:8080` are literal, and `0` disables the metrics or probe server.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use clap::{ArgAction, Parser, ValueEnum};

/// Namespace used for the leader-election Lease when neither `--leader-election-namespace`,
/// `POD_NAMESPACE` nor the in-cluster service-account namespace file gives one. It is the
/// namespace of the shipped manifests (upstream kustomize default).
pub const DEFAULT_OPERATOR_NAMESPACE: &str = "node-maintenance-operator-system";

/// The file a pod's service-account token mount puts its namespace in.
pub const SERVICE_ACCOUNT_NAMESPACE_FILE: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// A listen address for a plain-HTTP server that may be switched off.
///
/// Parsed from Go's `host:port` syntax: `:8080` -> `0.0.0.0:8080`, `localhost:8080` ->
/// `127.0.0.1:8080`, `[::]:8080` -> IPv6 any, and `0` -> [`BindAddress::Disabled`] (as
/// controller-runtime's `"0"`). Host names other than `localhost` are rejected: resolving names at
/// start-up would make start-up depend on DNS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindAddress {
    /// The server is not started.
    Disabled,
    /// Listen on this socket address.
    Listen(SocketAddr),
}

impl BindAddress {
    /// The socket address, or `None` when disabled.
    pub fn socket(self) -> Option<SocketAddr> {
        match self {
            BindAddress::Disabled => None,
            BindAddress::Listen(a) => Some(a),
        }
    }
}

impl std::fmt::Display for BindAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BindAddress::Disabled => f.write_str("0 (disabled)"),
            BindAddress::Listen(a) => write!(f, "{a}"),
        }
    }
}

/// Parses a Go-style listen address (`:8080`, `0.0.0.0:8080`, `[::]:8080`, `localhost:8080`)
/// into a socket address. `0` is not accepted here (see [`parse_bind_address`]).
///
/// # Errors
/// A one-line message naming the expected shape when the text is not `host:port` with an IP
/// literal (or `localhost`, or empty for all interfaces) and a port in 0..=65535.
pub fn parse_socket_addr(s: &str) -> Result<SocketAddr, String> {
    let bad = || {
        format!(
            "{s:?} is not a listen address; expected host:port such as :8080, 127.0.0.1:8080 or [::]:8080"
        )
    };
    let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    let ip: IpAddr = match host {
        "" => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        "localhost" => IpAddr::V4(Ipv4Addr::LOCALHOST),
        h if h.starts_with('[') && h.ends_with(']') => {
            h[1..h.len() - 1].parse().map_err(|_| bad())?
        }
        h => h.parse::<Ipv4Addr>().map_err(|_| bad())?.into(),
    };
    Ok(SocketAddr::new(ip, port))
}

/// Parses a Go-style listen address that may be `0` to disable the server
/// (controller-runtime's convention for `--metrics-bind-address` and
/// `--health-probe-bind-address`).
///
/// # Errors
/// As [`parse_socket_addr`].
pub fn parse_bind_address(s: &str) -> Result<BindAddress, String> {
    if s == "0" {
        return Ok(BindAddress::Disabled);
    }
    parse_socket_addr(s).map(BindAddress::Listen)
}

/// Parses `--lease-namespace` / `LEASE_NAMESPACE`: empty (e.g. `LEASE_NAMESPACE=` in a manifest)
/// means the default `medik8s-leases`, as medik8s reads the variable; anything else must be a
/// namespace name (a DNS-1123 label: at most 63 lower-case letters, digits and `-`, starting and
/// ending with a letter or digit).
///
/// # Errors
/// A one-line message naming the rejected value.
pub fn parse_lease_namespace(s: &str) -> Result<String, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(crate::lease::DEFAULT_LEASE_NAMESPACE.to_string());
    }
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    if b.len() > 63
        || !b.first().is_some_and(alnum)
        || !b.last().is_some_and(alnum)
        || !b.iter().all(|c| alnum(c) || *c == b'-')
    {
        return Err(format!(
            "{s:?} is not a namespace name (at most 63 lower-case letters, digits and '-', \
             starting and ending with a letter or digit)"
        ));
    }
    Ok(s.to_string())
}

/// Parses `--tls-min-version`: Go's and OpenShift's names, `VersionTLS10` .. `VersionTLS13`.
///
/// # Errors
/// A one-line message naming the accepted values.
pub fn parse_tls_min_version(s: &str) -> Result<String, String> {
    nmo_webhook::parse_min_version(s.trim())
        .map(|_| s.trim().to_string())
        .map_err(|e| e.to_string())
}

/// Parses one name of `--tls-cipher-suites`: a TLS cipher suite known to Go or OpenSSL, whether
/// or not rustls implements it (those it lacks are logged at start-up and not offered).
///
/// # Errors
/// A one-line message for a name that is no known suite (a typo would otherwise go unnoticed).
pub fn parse_cipher_suite(s: &str) -> Result<String, String> {
    let name = s.trim().to_string();
    let mapping = nmo_webhook::map_settings("VersionTLS12", std::slice::from_ref(&name))
        .map_err(|e| e.to_string())?;
    if mapping.unknown.is_empty() {
        Ok(name)
    } else {
        Err(format!(
            "{name:?} is not a TLS cipher suite name (IANA, e.g. TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, or OpenSSL, e.g. ECDHE-RSA-AES128-GCM-SHA256)"
        ))
    }
}

/// Log line format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable single lines.
    Text,
    /// One JSON object per line, event fields flattened to the top level.
    Json,
}

/// All flags of the manager. `--help` lists each with its default and environment variable.
#[derive(Clone, Debug, Parser)]
#[command(
    name = "manager",
    version,
    about = "Node Maintenance Operator: keeps a node cordoned, tainted and drained while a NodeMaintenance exists"
)]
pub struct Config {
    /// Address the plain-HTTP metrics endpoint (GET /metrics) binds to; 0 disables it.
    #[arg(long, default_value = ":8080", value_parser = parse_bind_address)]
    pub metrics_bind_address: BindAddress,

    /// Serve /metrics over HTTPS and only to clients whose bearer token passes a TokenReview and
    /// a SubjectAccessReview for GET on the non-resource URL /metrics (controller-runtime's
    /// WithAuthenticationAndAuthorization, upstream's setting). Off: plain HTTP, no auth.
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true", value_name = "BOOL")]
    pub metrics_secure: bool,

    /// Directory of the metrics serving pair (tls.crt, tls.key; reloaded when they change) for
    /// --metrics-secure. Unset: a self-signed certificate generated at start-up, as
    /// controller-runtime does.
    #[arg(long)]
    pub metrics_cert_path: Option<PathBuf>,

    /// Lowest TLS version the webhook and --metrics-secure servers accept: VersionTLS12 or
    /// VersionTLS13 (VersionTLS10 and VersionTLS11 mean VersionTLS12: rustls implements nothing
    /// older). Unset: on OpenShift the cluster's TLS security profile, else VersionTLS12. Giving
    /// this or --tls-cipher-suites replaces the cluster's profile.
    #[arg(long, value_name = "VERSION", value_parser = parse_tls_min_version)]
    pub tls_min_version: Option<String>,

    /// Comma-separated cipher suites of those servers, IANA names as Go and kube-apiserver spell
    /// them (TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256) or OpenSSL names (ECDHE-RSA-AES128-GCM-SHA256).
    /// Suites rustls does not implement (CBC, RSA key exchange, DHE, 3DES) are logged and not
    /// offered; TLS 1.3 suites: as Go, all three unless some are named. Unset: on OpenShift the
    /// cluster's TLS security profile, else every suite rustls offers.
    #[arg(long, value_name = "SUITES", value_delimiter = ',', value_parser = parse_cipher_suite)]
    pub tls_cipher_suites: Vec<String>,

    /// Address the probe endpoints (/healthz, /readyz) bind to; 0 disables them.
    #[arg(long, default_value = ":8081", value_parser = parse_bind_address)]
    pub health_probe_bind_address: BindAddress,

    /// Enable leader election, so that only one replica runs the controller (the webhook is
    /// served by every replica).
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true", value_name = "BOOL")]
    pub leader_elect: bool,

    /// Namespace of the leader-election Lease. Unset: --pod-namespace, else the pod's
    /// service-account namespace, else node-maintenance-operator-system.
    #[arg(long)]
    pub leader_election_namespace: Option<String>,

    /// Name of this pod (downward API): the `reportingInstance` of events, a host name of the
    /// self-signed metrics certificate, and, with --pod-namespace, the pod a drain evicts last.
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,

    /// Namespace of this pod (downward API): the default leader-election namespace, and, with
    /// --pod-name, the pod a drain evicts last.
    #[arg(long, env = "POD_NAMESPACE")]
    pub pod_namespace: Option<String>,

    /// Offer HTTP/2 on the webhook server (ALPN h2); off by default, as upstream, so that only
    /// HTTP/1.1 is negotiated.
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true", value_name = "BOOL")]
    pub enable_http2: bool,

    /// Directory of the webhook serving certificate (the OLM-injected location). When the pair is
    /// not there, <tmp>/k8s-webhook-server/serving-certs/tls.{crt,key} is used.
    #[arg(long, default_value = "/apiserver.local.config/certificates")]
    pub webhook_cert_path: PathBuf,

    /// File name of the webhook certificate chain inside --webhook-cert-path.
    #[arg(long, default_value = "apiserver.crt")]
    pub webhook_cert_name: String,

    /// File name of the webhook private key inside --webhook-cert-path.
    #[arg(long, default_value = "apiserver.key")]
    pub webhook_cert_key: String,

    /// Address the HTTPS admission webhook server binds to.
    #[arg(long, default_value = ":9443", value_parser = parse_socket_addr)]
    pub webhook_bind_address: SocketAddr,

    /// Path to a kubeconfig file. Unset: $KUBECONFIG, else the in-cluster service account, else
    /// ~/.kube/config.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,

    /// Log filter: a level (error, warn, info, debug, trace) or tracing directives such as
    /// "info,kube=debug".
    #[arg(long, env = "RUST_LOG", default_value = "info")]
    pub log_level: String,

    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Namespace of the medik8s per-node leases (node-<name>), shared with the other medik8s
    /// operators.
    #[arg(long, env = "LEASE_NAMESPACE", default_value = "medik8s-leases",
          value_parser = parse_lease_namespace)]
    pub lease_namespace: String,

    /// NodeMaintenance objects reconciled in parallel (one object is never reconciled twice at
    /// once). Upstream is fixed at 1.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_concurrent_reconciles: u16,

    /// The drain knobs' flags (`--drain-paused`, `--drain-timeout`, `--on-timeout`,
    /// `--drain-rules`, `--stage`, `--node-conditions`, `--expire-after`,
    /// `--wait-for-volume-detach`): the defaults of the knobs of every maintenance
    /// (`crate::knobs`).
    #[command(flatten)]
    pub knobs: crate::api::DrainKnobs,

    /// Honour the common opt-out annotations: a pod annotated karpenter.sh/do-not-disrupt=true
    /// or cluster-autoscaler.kubernetes.io/safe-to-evict=false is not evicted until the drain
    /// deadline, whose onTimeout then applies to it. Off by default: upstream evicts them.
    #[arg(long, default_value_t = false, action = ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true", value_name = "BOOL")]
    pub honor_opt_out_annotations: bool,

    /// The cluster-wide drain budget: at most this many maintenances evict at once (a number,
    /// or a percentage of the nodes such as 10%); the others are cordoned and tainted at once
    /// and their evictions wait in creation order. Unlimited by default, as upstream.
    #[arg(long, value_name = "N|PERCENT", value_parser = crate::policy::DrainLimit::parse)]
    pub max_parallel_drains: Option<crate::policy::DrainLimit>,

    /// A drain budget of the nodes a label selector selects, as `<selector>=<limit>` (kubectl's
    /// equality-based selector; the limit a number or a percentage of the nodes selected), e.g.
    /// `node-role.kubernetes.io/storage=1`. Repeatable (at most 32); a maintenance drains only
    /// within every budget that selects its node and within --max-parallel-drains.
    #[arg(long, value_name = "SELECTOR=N|PERCENT", value_parser = crate::policy::NodeBudget::parse)]
    pub max_parallel_drains_for: Vec<crate::policy::NodeBudget>,

    /// The CREATE of a NodeMaintenance warns (never refuses) when it brings the NodeMaintenances
    /// to more than this percentage of the nodes ((NodeMaintenances + 1) / nodes); 0 turns the
    /// warning off. At 30 % out, the rest of a cluster sized to run at 70 % of its capacity
    /// (a common target) is full.
    #[arg(long, default_value_t = 30, value_name = "PERCENT",
          value_parser = clap::value_parser!(u8).range(0..=100))]
    pub maintenance_share_warning: u8,

    /// The CREATE warnings about the node's pods (budgets that hold them, pods that stay or lose
    /// data, the last ready replica of a workload) read a cache of every scheduled, unfinished
    /// pod of the cluster, kept by each replica: about 2.4 KiB of memory a pod (+12 MiB at 5,000
    /// pods, `cargo bench --bench admission` with `BENCH_PODS=5000`). Off: no pod cache, none of
    /// those warnings (the share warning stays); for clusters whose pods would take the cache
    /// past the memory limit (`manifests/` ships 64 MiB: above about 15,000 pods, raise it or
    /// turn this off).
    #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true", value_name = "BOOL")]
    pub pod_warnings: bool,
}

impl Config {
    /// The leader-election namespace: `--leader-election-namespace`, else `--pod-namespace`
    /// (`POD_NAMESPACE`), else the namespace in [`SERVICE_ACCOUNT_NAMESPACE_FILE`], else
    /// [`DEFAULT_OPERATOR_NAMESPACE`] (so a developer running outside a cluster gets the
    /// manifests' namespace). Mirrors controller-runtime, which also falls back to the in-cluster
    /// namespace file.
    pub fn operator_namespace(&self) -> String {
        let explicit = non_empty(self.leader_election_namespace.as_deref())
            .or_else(|| non_empty(self.pod_namespace.as_deref()));
        resolve_namespace(
            explicit,
            std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE_FILE)
                .ok()
                .as_deref(),
        )
    }

    /// The TLS settings of `--tls-min-version` and `--tls-cipher-suites`, `None` when neither is
    /// given (the cluster's profile or the defaults then apply: `crate::tls_profile`). A missing
    /// minimum is VersionTLS12, a missing list rustls' suites for the version.
    pub fn tls_settings(&self) -> Option<nmo_webhook::Mapping> {
        if self.tls_min_version.is_none() && self.tls_cipher_suites.is_empty() {
            return None;
        }
        let min = self.tls_min_version.as_deref().unwrap_or("VersionTLS12");
        // Both were validated by their parsers.
        nmo_webhook::map_settings(min, &self.tls_cipher_suites).ok()
    }

    /// This pod's name (`--pod-name` / `POD_NAME`), `None` when unset or empty.
    pub fn pod_name(&self) -> Option<&str> {
        non_empty(self.pod_name.as_deref())
    }

    /// The operator's own pod, which a drain evicts last: both `--pod-name` and
    /// `--pod-namespace` (`POD_NAME`, `POD_NAMESPACE`) set and non-empty, else `None`.
    pub fn own_pod(&self) -> Option<crate::api::PodReference> {
        Some(crate::api::PodReference {
            namespace: non_empty(self.pod_namespace.as_deref())?.to_owned(),
            name: self.pod_name()?.to_owned(),
        })
    }
}

fn non_empty(s: Option<&str>) -> Option<&str> {
    s.map(str::trim).filter(|s| !s.is_empty())
}

/// Pure part of [`Config::operator_namespace`]: `explicit` wins when non-empty, then the trimmed
/// content of the service-account namespace file when non-empty, then
/// [`DEFAULT_OPERATOR_NAMESPACE`].
pub fn resolve_namespace(explicit: Option<&str>, sa_file: Option<&str>) -> String {
    explicit
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .or_else(|| sa_file.map(str::trim).filter(|s| !s.is_empty()))
        .unwrap_or(DEFAULT_OPERATOR_NAMESPACE)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, FromArgMatches};

    /// Parses `args` as if no environment variable were set, whatever the test process's own
    /// environment holds: no argument reads the environment.
    fn parse(args: &[&str]) -> Result<Config, clap::Error> {
        let mut cmd = Config::command();
        let ids: Vec<clap::Id> = cmd.get_arguments().map(|a| a.get_id().clone()).collect();
        for id in ids {
            cmd = cmd.mut_arg(id, |a| a.env(None::<&'static str>));
        }
        let matches =
            cmd.try_get_matches_from(std::iter::once("manager").chain(args.iter().copied()))?;
        Config::from_arg_matches(&matches)
    }

    const CHILD_ARGS: &str = "NMO_CONFIG_TEST_CHILD_ARGS";

    /// Parses `args` in a child process of this test binary whose environment is exactly `env`
    /// (clap reads the real environment, and changing this process's environment would race
    /// with the other tests). Returns the child's `Debug` of the parsed `Config`, or the first
    /// line of the error prefixed `error: `.
    fn parse_in_child(args: &[&str], env: &[(&str, &str)]) -> String {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "config::tests::child_parse", "--nocapture"])
            .args(["--test-threads", "1"])
            .env_clear()
            .envs(env.iter().copied())
            .env(CHILD_ARGS, args.join("\u{1f}"))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout
            .lines()
            .find_map(|l| l.split_once("PARSED ").map(|(_, parsed)| parsed))
            .unwrap_or_else(|| {
                panic!(
                    "child printed no result: {stdout}\n{}",
                    String::from_utf8_lossy(&out.stderr)
                )
            });
        line.to_string()
    }

    /// The child half of [`parse_in_child`]; does nothing when run as an ordinary test.
    #[test]
    fn child_parse() {
        let Some(args) = std::env::var_os(CHILD_ARGS) else {
            return;
        };
        let args = args.to_string_lossy().into_owned();
        let args = args.split('\u{1f}').filter(|a| !a.is_empty());
        match Config::try_parse_from(std::iter::once("manager").chain(args)) {
            Ok(c) => println!("PARSED {c:?}"),
            Err(e) => println!(
                "PARSED error: {}",
                e.to_string().lines().next().unwrap_or_default()
            ),
        }
    }

    #[test]
    fn pod_warnings_are_on_by_default_and_turn_off() {
        assert!(parse_in_child(&[], &[]).contains("pod_warnings: true"));
        for off in [&["--pod-warnings=false"][..], &["--pod-warnings", "false"]] {
            let c = parse_in_child(off, &[]);
            assert!(c.contains("pod_warnings: false"), "{off:?}: {c}");
        }
    }

    #[test]
    fn environment_is_the_fallback_of_its_flag() {
        let env = [
            ("LEASE_NAMESPACE", "from-env"),
            ("POD_NAME", "nmo-0"),
            ("POD_NAMESPACE", "ops"),
            ("RUST_LOG", "debug"),
        ];
        let c = parse_in_child(&[], &env);
        for field in [
            "lease_namespace: \"from-env\"",
            "pod_name: Some(\"nmo-0\")",
            "pod_namespace: Some(\"ops\")",
            "log_level: \"debug\"",
        ] {
            assert!(c.contains(field), "{field} missing from {c}");
        }
        // The flag beats the variable.
        let c = parse_in_child(
            &[
                "--lease-namespace=from-flag",
                "--pod-name=nmo-1",
                "--log-level=warn",
            ],
            &env,
        );
        for field in [
            "lease_namespace: \"from-flag\"",
            "pod_name: Some(\"nmo-1\")",
            "pod_namespace: Some(\"ops\")",
            "log_level: \"warn\"",
        ] {
            assert!(c.contains(field), "{field} missing from {c}");
        }
        // Neither: the defaults.
        let c = parse_in_child(&[], &[]);
        for field in [
            "lease_namespace: \"medik8s-leases\"",
            "pod_name: None",
            "pod_namespace: None",
            "log_level: \"info\"",
        ] {
            assert!(c.contains(field), "{field} missing from {c}");
        }
    }

    #[test]
    fn an_invalid_environment_value_is_a_clear_error() {
        let c = parse_in_child(&[], &[("LEASE_NAMESPACE", "Not_A_Namespace")]);
        assert!(c.starts_with("error: "), "{c}");
        assert!(
            c.contains("\"Not_A_Namespace\" is not a namespace name"),
            "{c}"
        );
        assert!(c.contains("--lease-namespace"), "{c}");
    }

    #[test]
    fn own_pod_and_namespaces_come_from_the_pod_flags() {
        let c = parse(&["--pod-name=nmo-0", "--pod-namespace=ops"]).unwrap();
        assert_eq!(c.pod_name(), Some("nmo-0"));
        assert_eq!(
            c.own_pod(),
            Some(crate::api::PodReference {
                namespace: "ops".into(),
                name: "nmo-0".into()
            })
        );
        assert_eq!(c.operator_namespace(), "ops");
        let c = parse(&["--pod-namespace=ops", "--leader-election-namespace=le"]).unwrap();
        assert_eq!(c.operator_namespace(), "le");
        assert_eq!(c.own_pod(), None, "no pod name, no own pod");
        let c = parse(&["--pod-name="]).unwrap();
        assert_eq!(c.pod_name(), None);
    }

    /// The knobs' flags resolve to the defaults as a spec would: none gives upstream's.
    #[test]
    fn the_knob_flags_give_the_defaults_of_the_knobs() {
        use crate::api::{OnTimeout, Stage};
        use crate::policy::{DrainPolicy, defaults};
        use std::time::Duration;
        assert_eq!(defaults(&parse(&[]).unwrap().knobs), DrainPolicy::default());
        let c = parse(&[
            "--drain-paused=true",
            "--drain-timeout=15m",
            "--on-timeout=ForceDelete",
            r#"--drain-rules=[{"podSelector": {"matchLabels": {"app": "db"}}, "behavior": "Skip"}]"#,
            "--stage=Idle",
            "--node-conditions",
            "--expire-after=30s",
            "--wait-for-volume-detach=true",
            "--daemon-sets=EvictLast",
        ])
        .unwrap();
        let d = defaults(&c.knobs);
        assert_eq!(
            (d.paused, d.drain_timeout, d.on_timeout, d.drain_rules.len()),
            (
                true,
                Some(Duration::from_secs(900)),
                OnTimeout::ForceDelete,
                1
            )
        );
        assert_eq!(
            (d.stage, d.node_conditions, d.expire_after),
            (Stage::Idle, true, Some(Duration::from_secs(30)))
        );
        assert_eq!(
            d.wait_for_volume_detach,
            Some(crate::knobs::DEFAULT_DETACH_BOUND)
        );
        assert_eq!(d.daemon_sets, crate::api::DaemonSets::EvictLast);
        let c = parse(&["--wait-for-volume-detach=false"]).unwrap();
        assert_eq!(defaults(&c.knobs).wait_for_volume_detach, None);
    }

    #[test]
    fn clap_definition_is_consistent() {
        Config::command().debug_assert();
    }

    #[test]
    fn go_style_addresses() {
        assert_eq!(
            parse_bind_address(":8080"),
            Ok(BindAddress::Listen("0.0.0.0:8080".parse().unwrap()))
        );
        assert_eq!(parse_bind_address("0"), Ok(BindAddress::Disabled));
        assert_eq!(
            parse_bind_address("127.0.0.1:9"),
            Ok(BindAddress::Listen("127.0.0.1:9".parse().unwrap()))
        );
        assert_eq!(
            parse_bind_address("[::]:8081"),
            Ok(BindAddress::Listen("[::]:8081".parse().unwrap()))
        );
        assert_eq!(
            parse_bind_address("localhost:1"),
            Ok(BindAddress::Listen("127.0.0.1:1".parse().unwrap()))
        );
        for bad in [
            "8080",
            ":",
            ":99999",
            "example.com:80",
            "::1:80",
            "1.2.3:80",
            "",
            "[::1]",
        ] {
            let err = parse_bind_address(bad).expect_err(bad);
            assert!(!err.contains('\n'), "one line: {err}");
            assert!(err.contains("listen address"), "{err}");
        }
        // The webhook address cannot be disabled.
        assert!(parse_socket_addr("0").is_err());
    }

    #[test]
    fn defaults_match_upstream_and_manifests() {
        let c = parse(&[]).unwrap();
        assert_eq!(
            c.metrics_bind_address,
            BindAddress::Listen("0.0.0.0:8080".parse().unwrap())
        );
        assert_eq!(
            c.health_probe_bind_address,
            BindAddress::Listen("0.0.0.0:8081".parse().unwrap())
        );
        assert!(!c.leader_elect);
        assert!(!c.enable_http2);
        assert!(!c.metrics_secure);
        assert_eq!(c.metrics_cert_path, None);
        assert_eq!(
            c.webhook_cert_path,
            PathBuf::from("/apiserver.local.config/certificates")
        );
        assert_eq!(c.webhook_cert_name, "apiserver.crt");
        assert_eq!(c.webhook_cert_key, "apiserver.key");
        assert_eq!(c.webhook_bind_address, "0.0.0.0:9443".parse().unwrap());
        assert_eq!(c.kubeconfig, None);
        assert_eq!(c.log_format, LogFormat::Text);
        assert_eq!(c.max_concurrent_reconciles, 32);
        assert_eq!(c.log_level, "info");
        assert_eq!(c.lease_namespace, "medik8s-leases");
        assert!(
            c.tls_settings().is_none(),
            "no TLS flag: the profile or the defaults"
        );
        assert_eq!((c.pod_name, c.pod_namespace), (None, None));
    }

    #[test]
    fn tls_flags_set_the_servers_tls_settings() {
        let c = parse(&["--tls-min-version=VersionTLS13"]).unwrap();
        let m = c.tls_settings().unwrap();
        assert_eq!(m.policy.min_version(), nmo_webhook::TlsVersion::Tls13);
        assert_eq!(m.policy.suites().len(), 3);
        let c = parse(&[
            "--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,ECDHE-ECDSA-AES256-GCM-SHA384,TLS_RSA_WITH_AES_128_CBC_SHA",
        ])
        .unwrap();
        assert_eq!(c.tls_cipher_suites.len(), 3);
        let m = c.tls_settings().unwrap();
        assert_eq!(m.policy.min_version(), nmo_webhook::TlsVersion::Tls12);
        assert_eq!(
            m.policy.suites().len(),
            5,
            "two TLS 1.2 suites and all of TLS 1.3"
        );
        assert_eq!(m.not_offered, ["TLS_RSA_WITH_AES_128_CBC_SHA"]);
        for bad in [
            &["--tls-min-version=TLS12"][..],
            &["--tls-min-version=VersionTLS14"],
            &["--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA265"],
        ] {
            let err = parse(bad).expect_err(&format!("{bad:?}")).to_string();
            assert!(err.lines().count() >= 1 && err.contains("--tls-"), "{err}");
        }
    }

    #[test]
    fn upstream_deployment_args_parse() {
        let c = parse(&[
            "--health-probe-bind-address=:8081",
            "--metrics-bind-address=:8443",
            "--leader-elect",
            "--enable-http2=false",
        ])
        .unwrap();
        assert!(c.leader_elect);
        assert!(!c.enable_http2);
        assert_eq!(c.metrics_bind_address.socket().unwrap().port(), 8443);

        let c = parse(&[
            "--leader-elect=true",
            "--enable-http2",
            "--metrics-bind-address",
            "0",
        ])
        .unwrap();
        assert!(c.leader_elect && c.enable_http2);
        assert_eq!(c.metrics_bind_address, BindAddress::Disabled);
        assert!(parse(&["--leader-elect=false"]).is_ok_and(|c| !c.leader_elect));
    }

    #[test]
    fn every_flag_is_settable() {
        let c = parse(&[
            "--leader-election-namespace=ops",
            "--webhook-cert-path=/certs",
            "--webhook-cert-name=tls.crt",
            "--webhook-cert-key=tls.key",
            "--webhook-bind-address=127.0.0.1:10443",
            "--kubeconfig=/kc",
            "--log-level=debug,kube=info",
            "--log-format=json",
            "--lease-namespace=leases",
            "--max-concurrent-reconciles=9",
            "--metrics-secure",
            "--metrics-cert-path=/mcerts",
        ])
        .unwrap();
        assert!(c.metrics_secure);
        assert_eq!(c.metrics_cert_path, Some(PathBuf::from("/mcerts")));
        assert_eq!(c.leader_election_namespace.as_deref(), Some("ops"));
        assert_eq!(c.operator_namespace(), "ops");
        assert_eq!(c.webhook_cert_path, PathBuf::from("/certs"));
        assert_eq!(c.webhook_cert_name, "tls.crt");
        assert_eq!(c.webhook_cert_key, "tls.key");
        assert_eq!(c.webhook_bind_address, "127.0.0.1:10443".parse().unwrap());
        assert_eq!(c.kubeconfig, Some(PathBuf::from("/kc")));
        assert_eq!(c.log_level, "debug,kube=info");
        assert_eq!(c.log_format, LogFormat::Json);
        assert_eq!(c.lease_namespace, "leases");
        assert_eq!(c.max_concurrent_reconciles, 9);
    }

    #[test]
    fn bad_input_is_rejected() {
        for args in [
            &["--no-such-flag"][..],
            &["--metrics-bind-address=8080"],
            &["--webhook-bind-address=0"],
            &["--log-format=xml"],
            &["--max-concurrent-reconciles=0"],
            &["--leader-elect=maybe"],
            &["--lease-namespace=Medik8s_Leases"],
        ] {
            let err = parse(args).expect_err(&format!("{args:?}"));
            assert_ne!(err.exit_code(), 0, "{args:?}");
        }
    }

    #[test]
    fn help_lists_every_flag_with_its_default() {
        let help = Config::command().render_long_help().to_string();
        for needle in [
            "--metrics-bind-address",
            "[default: :8080]",
            "--health-probe-bind-address",
            "[default: :8081]",
            "--leader-elect",
            "--leader-election-namespace",
            "POD_NAMESPACE",
            "--enable-http2",
            "--webhook-cert-path",
            "[default: /apiserver.local.config/certificates]",
            "--webhook-cert-name",
            "[default: apiserver.crt]",
            "--webhook-cert-key",
            "[default: apiserver.key]",
            "--webhook-bind-address",
            "[default: :9443]",
            "--kubeconfig",
            "--log-level",
            "--log-format",
            "--lease-namespace",
            "LEASE_NAMESPACE",
            "[default: medik8s-leases]",
            "--max-concurrent-reconciles",
            "--metrics-secure",
            "--metrics-cert-path",
            "--tls-min-version",
            "--tls-cipher-suites",
        ] {
            assert!(help.contains(needle), "{needle:?} missing from:\n{help}");
        }
    }

    #[test]
    fn empty_lease_namespace_means_the_default() {
        assert_eq!(parse_lease_namespace(""), Ok("medik8s-leases".to_string()));
        assert_eq!(parse_lease_namespace(" "), Ok("medik8s-leases".to_string()));
        assert_eq!(
            parse_lease_namespace("leases-1"),
            Ok("leases-1".to_string())
        );
        for bad in ["-a", "a-", "A", "a.b", &"a".repeat(64)] {
            assert!(parse_lease_namespace(bad).is_err(), "{bad}");
        }
        let c = parse(&["--lease-namespace="]).unwrap();
        assert_eq!(c.lease_namespace, "medik8s-leases");
    }

    #[test]
    fn namespace_resolution_order() {
        assert_eq!(resolve_namespace(Some("a"), Some("b")), "a");
        assert_eq!(resolve_namespace(Some(""), Some("b\n")), "b");
        assert_eq!(
            resolve_namespace(None, Some("  ")),
            DEFAULT_OPERATOR_NAMESPACE
        );
        assert_eq!(resolve_namespace(None, None), DEFAULT_OPERATOR_NAMESPACE);
    }
}

//! Hot reload of a server's TLS configuration: the certificate pair (a directory watch plus a
//! periodic re-read) and the [`TlsPolicy`] (a `watch` channel), rebuilt into one rustls config.
//!
//! The watch is on the certificate *directory* (non-recursive) because the kubelet updates a
//! Secret volume by renaming a `..data` symlink; a watch on `tls.crt` itself follows the old inode
//! and goes silent after the first swap (docs/design.md §8). `Access` events are ignored: our own
//! reads produce them and would make the reloader spin. The periodic re-read (controller-runtime's
//! certwatcher polls every 10 s) catches anything the watch misses, e.g. an overflowed inotify
//! queue or a filesystem without inotify.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::{Notify, watch};

use crate::policy::TlsPolicy;
use crate::tls::{CertPaths, PemPair, build_server_config_with};

/// Counters of the reloader, shared with [`crate::WebhookServer`].
#[derive(Debug, Default)]
pub(crate) struct ReloadStats {
    /// Pairs that were loaded and are now served (the initial load not counted).
    pub(crate) reloads: AtomicU64,
    /// New pairs that were read but rejected (unreadable, unparsable, key mismatch).
    pub(crate) failures: AtomicU64,
}

/// Timing of the reloader.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReloadTiming {
    /// Quiet time after the last relevant event before the pair is re-read.
    pub(crate) debounce: Duration,
    /// Interval of the safety re-read that compares bytes.
    pub(crate) poll: Duration,
}

/// Whether a filesystem event may have changed the served pair.
fn is_relevant(event: &notify::Event, paths: &CertPaths) -> bool {
    if matches!(event.kind, EventKind::Access(_)) {
        return false;
    }
    if !matches!(
        event.kind,
        EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_) | EventKind::Any
    ) {
        return false;
    }
    event.paths.iter().any(|p| {
        p.file_name().and_then(|n| n.to_str()).is_some_and(|name| {
            name == "..data" || name == paths.cert_name || name == paths.key_name
        })
    })
}

struct Reloader {
    /// `webhook` or `metrics`, for the log lines.
    name: &'static str,
    paths: CertPaths,
    enable_http2: bool,
    policy: TlsPolicy,
    rustls: RustlsConfig,
    stats: Arc<ReloadStats>,
    last_good: PemPair,
    /// The last rejected pair, so that a broken pair left on disk is reported once rather than at
    /// every poll.
    last_bad: Option<PemPair>,
    last_read_error: Option<String>,
}

impl Reloader {
    fn check(&mut self, trigger: &'static str) {
        let pair = match PemPair::read(&self.paths) {
            Ok(pair) => pair,
            Err(e) => {
                let msg = e.to_string();
                if self.last_read_error.as_deref() != Some(msg.as_str()) {
                    tracing::warn!(server = self.name, error = %msg, trigger, "cannot read the new serving certificate; still serving the previous one");
                    self.stats.failures.fetch_add(1, Ordering::Relaxed);
                    self.last_read_error = Some(msg);
                }
                return;
            }
        };
        self.last_read_error = None;
        if pair == self.last_good || self.last_bad.as_ref() == Some(&pair) {
            return;
        }
        match build_server_config_with(&pair, self.enable_http2, &self.policy) {
            Ok(config) => {
                self.rustls.reload_from_config(Arc::new(config));
                self.stats.reloads.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    server = self.name,
                    cert = %self.paths.cert().display(),
                    trigger,
                    "reloaded the serving certificate"
                );
                self.last_good = pair;
                self.last_bad = None;
            }
            Err(e) => {
                // A rotation in progress (cert rewritten, key not yet) lands here too; the next
                // event or poll picks up the completed pair.
                tracing::warn!(server = self.name, error = %e, trigger, "rejected the new serving certificate; still serving the previous one");
                self.stats.failures.fetch_add(1, Ordering::Relaxed);
                self.last_bad = Some(pair);
            }
        }
    }
}

/// Applies a new policy to the pair being served. The pair was accepted before, so the build
/// fails only if the policy and the key disagree (an ECDSA key with only RSA suites left for
/// TLS 1.2 still has TLS 1.3), and then the previous configuration keeps serving.
fn apply_policy(
    name: &'static str,
    rustls: &RustlsConfig,
    pair: &PemPair,
    enable_http2: bool,
    policy: &TlsPolicy,
) -> bool {
    match build_server_config_with(pair, enable_http2, policy) {
        Ok(config) => {
            rustls.reload_from_config(Arc::new(config));
            tracing::info!(
                server = name,
                min_version = policy.min_version().go_name(),
                cipher_suites = ?policy.suite_names(),
                "applied the TLS settings"
            );
            true
        }
        Err(e) => {
            tracing::warn!(server = name, error = %e, "cannot apply the new TLS settings; the previous ones stay");
            false
        }
    }
}

/// What the reload task serves and watches.
pub(crate) struct ReloadInputs {
    /// `webhook` or `metrics`, for the log lines.
    pub(crate) name: &'static str,
    /// The files to watch and re-read; `None` for a pair that never changes (self-signed).
    pub(crate) paths: Option<CertPaths>,
    pub(crate) enable_http2: bool,
    pub(crate) rustls: RustlsConfig,
    /// The pair being served.
    pub(crate) initial: PemPair,
    /// The policy being served.
    pub(crate) policy: TlsPolicy,
    /// Later policies; `None` or a closed channel: the policy never changes.
    pub(crate) policies: Option<watch::Receiver<TlsPolicy>>,
    pub(crate) stats: Arc<ReloadStats>,
    pub(crate) timing: ReloadTiming,
}

/// Starts the watcher and the reload task. The task ends when `stop` changes or is dropped.
///
/// A failure to set up the directory watch is logged and leaves the periodic re-read as the only
/// trigger, rather than refusing to serve.
pub(crate) fn spawn(
    inputs: ReloadInputs,
    mut stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let poke = Arc::new(Notify::new());
    let watcher = inputs
        .paths
        .as_ref()
        .and_then(|paths| start_watcher(paths, poke.clone()));
    let timing = inputs.timing;
    let mut policies = inputs.policies;
    let mut reloader = inputs.paths.map(|paths| Reloader {
        name: inputs.name,
        paths,
        enable_http2: inputs.enable_http2,
        policy: inputs.policy.clone(),
        rustls: inputs.rustls.clone(),
        stats: inputs.stats,
        last_good: inputs.initial.clone(),
        last_bad: None,
        last_read_error: None,
    });
    let (name, rustls, fixed_pair, enable_http2) = (
        inputs.name,
        inputs.rustls,
        inputs.initial,
        inputs.enable_http2,
    );
    let mut policy = inputs.policy;
    tokio::spawn(async move {
        // Moved into the task: dropping the watcher would end the watch.
        let _watcher = watcher;
        let mut poll = tokio::time::interval(timing.poll);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        poll.tick().await;
        loop {
            let next_policy = async {
                match policies.as_mut() {
                    Some(rx) => rx.changed().await.map(|()| rx.borrow_and_update().clone()),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = stop.changed() => return,
                changed = next_policy => match changed {
                    Ok(new) if new != policy => {
                        let pair = reloader.as_ref().map_or(&fixed_pair, |r| &r.last_good);
                        if apply_policy(name, &rustls, pair, enable_http2, &new) {
                            if let Some(r) = reloader.as_mut() {
                                r.policy = new.clone();
                            }
                            policy = new;
                        }
                    }
                    Ok(_) => {}
                    // The sender is gone: the policy stays as it is.
                    Err(_) => policies = None,
                },
                _ = poke.notified() => {
                    // Debounce: wait until the directory has been quiet for `debounce`, so an
                    // in-place rewrite (truncate, write cert, write key) is read once, complete.
                    loop {
                        tokio::select! {
                            _ = stop.changed() => return,
                            _ = poke.notified() => continue,
                            _ = tokio::time::sleep(timing.debounce) => break,
                        }
                    }
                    if let Some(r) = reloader.as_mut() {
                        r.check("event");
                    }
                }
                _ = poll.tick(), if reloader.is_some() => {
                    if let Some(r) = reloader.as_mut() {
                        r.check("poll");
                    }
                }
            }
        }
    })
}

fn start_watcher(paths: &CertPaths, poke: Arc<Notify>) -> Option<notify::RecommendedWatcher> {
    let filter_paths = paths.clone();
    let handler = move |res: notify::Result<notify::Event>| match res {
        // Runs on notify's thread: only poke the async side, never block or await here.
        Ok(event) if is_relevant(&event, &filter_paths) => poke.notify_one(),
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(error = %e, "certificate directory watch error; relying on the periodic re-read");
            poke.notify_one();
        }
    };
    let watched: &Path = &paths.dir;
    match notify::recommended_watcher(handler)
        .and_then(|mut w| w.watch(watched, RecursiveMode::NonRecursive).map(|()| w))
    {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(dir = %watched.display(), error = %e, "cannot watch the certificate directory; certificates are re-read periodically only");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{AccessKind, CreateKind, ModifyKind, RenameMode};
    use std::path::PathBuf;

    fn paths() -> CertPaths {
        CertPaths {
            dir: PathBuf::from("/certs"),
            cert_name: "tls.crt".into(),
            key_name: "tls.key".into(),
        }
    }

    fn event(kind: EventKind, names: &[&str]) -> notify::Event {
        let mut e = notify::Event::new(kind);
        for n in names {
            e = e.add_path(PathBuf::from("/certs").join(n));
        }
        e
    }

    #[test]
    fn access_events_are_ignored_even_on_the_cert() {
        let e = event(EventKind::Access(AccessKind::Any), &["tls.crt"]);
        assert!(!is_relevant(&e, &paths()));
    }

    #[test]
    fn data_symlink_rename_is_relevant() {
        let e = event(
            EventKind::Modify(ModifyKind::Name(RenameMode::Both)),
            &["..data_tmp", "..data"],
        );
        assert!(is_relevant(&e, &paths()));
    }

    #[test]
    fn in_place_writes_of_cert_or_key_are_relevant() {
        for name in ["tls.crt", "tls.key"] {
            let e = event(EventKind::Modify(ModifyKind::Any), &[name]);
            assert!(is_relevant(&e, &paths()), "{name}");
        }
        let e = event(EventKind::Create(CreateKind::File), &["tls.key"]);
        assert!(is_relevant(&e, &paths()));
    }

    #[test]
    fn unrelated_files_and_timestamp_dirs_are_ignored() {
        let e = event(EventKind::Create(CreateKind::Folder), &["..2026_01_01"]);
        assert!(!is_relevant(&e, &paths()));
        let e = event(EventKind::Modify(ModifyKind::Any), &["ca.crt"]);
        assert!(!is_relevant(&e, &paths()));
    }
}

//! The client, from kubectl's flags through kube's kubeconfig loading: `--kubeconfig`, else
//! `$KUBECONFIG` (paths joined as the platform joins them, merged in order, as kubectl does), else
//! `~/.kube/config`, else the in-cluster ServiceAccount; `--context` picks a context of the
//! kubeconfig (default: its `current-context`).
//!
//! Errors are one line naming the file once (kube's own `ReadConfig` error embeds the path, and
//! the plugin used to print it twice).

use std::path::{Path, PathBuf};

use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};

use crate::failure::Failure;

/// Builds the client for `kubeconfig` (the `--kubeconfig` flag) and `context` (`--context`).
///
/// # Errors
/// [`crate::EXIT_ERROR`] with one line: a kubeconfig that does not exist or cannot be read (its
/// path), one that does not parse, a context it does not have, no kubeconfig at all outside a
/// cluster.
pub(crate) async fn client(
    kubeconfig: Option<&Path>,
    context: Option<String>,
) -> Result<kube::Client, Failure> {
    let paths: Vec<PathBuf> = match kubeconfig {
        Some(p) => vec![p.to_path_buf()],
        None => match std::env::var_os("KUBECONFIG") {
            Some(v) if !v.is_empty() => std::env::split_paths(&v)
                .filter(|p| !p.as_os_str().is_empty())
                .collect(),
            _ => std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".kube").join("config"))
                .filter(|p| p.exists())
                .into_iter()
                .collect(),
        },
    };
    let options = KubeConfigOptions {
        context: context.clone(),
        ..Default::default()
    };
    let config = if paths.is_empty() {
        if let Some(context) = context {
            return Err(Failure::error(format!(
                "--context {context}: no kubeconfig ($KUBECONFIG unset, no ~/.kube/config)"
            )));
        }
        kube::Config::incluster().map_err(|e| {
            Failure::error(format!(
                "no kubeconfig ($KUBECONFIG unset, no ~/.kube/config) and not in a cluster ({e})"
            ))
        })?
    } else {
        let mut merged = Kubeconfig::default();
        for path in &paths {
            merged = merged
                .merge(read(path)?)
                .map_err(|e| Failure::error(format!("kubeconfig {}: {e}", path.display())))?;
        }
        kube::Config::from_custom_kubeconfig(merged, &options)
            .await
            .map_err(|e| match e {
                KubeconfigError::LoadContext(c) => {
                    Failure::error(format!("context {c:?} not found in the kubeconfig"))
                }
                e => Failure::error(format!("kubeconfig: {e}")),
            })?
    };
    kube::Client::try_from(config).map_err(Into::into)
}

/// Reads one kubeconfig file (kube's reading: relative certificate paths made absolute).
fn read(path: &Path) -> Result<Kubeconfig, Failure> {
    if !path.exists() {
        return Err(Failure::error(format!(
            "kubeconfig {} does not exist",
            path.display()
        )));
    }
    Kubeconfig::read_from(path).map_err(|e| match e {
        KubeconfigError::ReadConfig(io, _) => {
            Failure::error(format!("cannot read kubeconfig {}: {io}", path.display()))
        }
        e => Failure::error(format!("kubeconfig {}: {e}", path.display())),
    })
}

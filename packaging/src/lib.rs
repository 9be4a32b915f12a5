//! nmo-packaging: renders the operator's packaging from its one definition, the kustomize
//! manifests under `manifests/`: the OLM bundle and its file-based catalog ([`bundle`], written
//! by `bundlegen`) and the Helm chart ([`chart`], written by `chartgen`). The operator itself uses
//! none of this; it lives in a crate of its own so the operator's build does not carry it.
//!
//! The version written into the bundle and the chart is the operator's and the source links are
//! the project's repository: both come from the workspace's `[workspace.package]`, which this
//! crate and the operator inherit ([`VERSION`], [`bundle::REPOSITORY`]).

use std::path::Path;

pub mod bundle;
pub mod chart;

/// The operator's version (semver, e.g. `0.1.0`): the bundle's and the chart's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The repository root, where `manifests/`, `bundle/`, `catalog/` and `charts/` live: the parent
/// of this crate's folder (`packaging/`).
pub fn repository_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("packaging/ sits in the repository root")
}

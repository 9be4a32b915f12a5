//! Writes the OLM bundle (`bundle/`, `bundle.Dockerfile`) and its file-based catalog
//! (`catalog/`, `catalog.Dockerfile`) from the kustomize rendering of
//! `manifests/overlays/monitoring/secure` (read from stdin) and `manifests/crd.yaml`:
//!
//! ```sh
//! kubectl kustomize manifests/overlays/monitoring/secure | cargo run -p nmo-packaging --bin bundlegen
//! ```
//!
//! `tests/bundle.rs` fails when the files on disk differ from what this prints.
use std::io::Read;
use std::process::ExitCode;

use nmo_packaging::bundle;

fn main() -> ExitCode {
    let root = nmo_packaging::repository_root();
    let mut rendered = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut rendered) {
        eprintln!("error: cannot read the rendered manifests from stdin: {e}");
        return ExitCode::FAILURE;
    }
    let crd = match std::fs::read_to_string(root.join("manifests/crd.yaml")) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: cannot read manifests/crd.yaml: {e}");
            return ExitCode::FAILURE;
        }
    };
    let files = match bundle::render(&rendered, &crd, nmo_packaging::VERSION) {
        Ok(f) => f,
        Err(e) => {
            eprintln!(
                "error: {e} (pipe in `kubectl kustomize {}`)",
                bundle::SOURCE_OVERLAY
            );
            return ExitCode::FAILURE;
        }
    };
    // Files the mapping no longer produces must not linger in the bundle.
    let _ = std::fs::remove_dir_all(root.join("bundle/manifests"));
    let _ = std::fs::remove_dir_all(root.join(bundle::CATALOG_DIR));
    for f in files {
        let path = root.join(&f.path);
        let written = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&path, &f.content));
        if let Err(e) = written {
            eprintln!("error: cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("{}", f.path);
    }
    ExitCode::SUCCESS
}

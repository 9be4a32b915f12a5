//! Writes the Helm chart (`charts/node-maintenance-operator/`) from the kustomize renderings of
//! `manifests/` and its overlays (`packaging/src/chart.rs`), running `kubectl kustomize` itself
//! (`$KUBECTL`, else `kubectl` on the PATH):
//!
//! ```sh
//! cargo run -p nmo-packaging --bin chartgen
//! ```
//!
//! `tests/chart.rs` fails when the files on disk differ from what this writes.
use std::process::{Command, ExitCode};

use nmo_packaging::chart::{self, CHART_DIR, Renderings};

fn main() -> ExitCode {
    let root = nmo_packaging::repository_root();
    let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let renderings = Renderings::with(|dir| {
        let out = Command::new(&kubectl)
            .args(["kustomize", &root.join(dir).display().to_string()])
            .output()
            .map_err(|e| format!("cannot run {kubectl}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "kubectl kustomize {dir}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        String::from_utf8(out.stdout).map_err(|e| e.to_string())
    });
    let files = match renderings
        .map_err(|e| e.to_string())
        .and_then(|r| chart::render(&r, nmo_packaging::VERSION).map_err(|e| e.to_string()))
    {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Templates the mapping no longer produces must not linger.
    let _ = std::fs::remove_dir_all(root.join(CHART_DIR).join("templates"));
    let _ = std::fs::remove_dir_all(root.join(CHART_DIR).join("crds"));
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

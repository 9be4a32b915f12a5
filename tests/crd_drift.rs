//! `manifests/crd.yaml` must be exactly what `src/bin/crdgen.rs` prints for the current Rust
//! types, so a deploy never installs a schema that the code does not match.

use kube::CustomResourceExt;
use node_maintenance_operator::api::NodeMaintenance;

#[test]
fn manifests_crd_matches_the_rust_types() {
    let generated = serde_yaml::to_string(&NodeMaintenance::crd()).expect("the CRD serializes");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/crd.yaml");
    let on_disk = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    if generated != on_disk {
        let first = generated
            .lines()
            .zip(on_disk.lines())
            .position(|(a, b)| a != b)
            .map_or_else(
                || "one file is a prefix of the other".to_string(),
                |i| {
                    format!(
                        "first difference at line {}:\n  generated: {}\n  on disk:   {}",
                        i + 1,
                        generated.lines().nth(i).unwrap_or(""),
                        on_disk.lines().nth(i).unwrap_or("")
                    )
                },
            );
        panic!(
            "manifests/crd.yaml is out of date with src/api.rs; regenerate it with\n\n    cargo run --bin crdgen > manifests/crd.yaml\n\n{first}"
        );
    }
}

//! Prints the NodeMaintenance CustomResourceDefinition generated from the Rust types, as YAML.
//! `manifests/crd.yaml` is this program's output; a test fails when the two drift.
//!
//! `crdgen --upstream` prints the CRD with upstream NMO's schema instead (our types minus our
//! additions, see `api::upstream_schema_crd`), which the tests install to prove the controller
//! works where upstream's CRD stays installed.
use kube::CustomResourceExt;
use node_maintenance_operator::api::{NodeMaintenance, upstream_schema_crd};

fn main() {
    let crd = match std::env::args().nth(1).as_deref() {
        None => NodeMaintenance::crd(),
        Some("--upstream") => upstream_schema_crd(),
        Some(other) => {
            eprintln!("usage: crdgen [--upstream]  (unknown argument {other:?})");
            std::process::exit(2);
        }
    };
    print!(
        "{}",
        serde_yaml::to_string(&crd).expect("the CRD serializes to YAML")
    );
}

//! Prints the NodeMaintenance CustomResourceDefinition generated from the Rust types, as YAML.
//! `manifests/crd.yaml` is this program's output; a test fails when the two drift.
use kube::CustomResourceExt;
use node_maintenance_operator::api::NodeMaintenance;

fn main() {
    print!(
        "{}",
        serde_yaml::to_string(&NodeMaintenance::crd()).expect("the CRD serializes to YAML")
    );
}

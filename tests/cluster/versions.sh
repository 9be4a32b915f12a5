# The test control plane's versions: the one place they are written. Sourced by the build
# scripts (build-k8s-bins.sh, go-tool-build.sh) and read by the nmo-devcluster crate
# (`nmo_devcluster::versions`), so the binaries, the Go test tools' client-go and the tests that
# name the version agree. Each can be overridden from the environment, e.g.
# `KUBE_VERSION=v1.36.3 cargo test` for the long-form run on the previous minor (README).
KUBE_VERSION=${KUBE_VERSION:-v1.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.6.14}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}

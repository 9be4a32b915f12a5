# syntax=docker/dockerfile:1
# The manager image: `docker build -t node-maintenance-operator .`
#
# Build stage: the release binary, linked against glibc (Debian 12), which the distroless cc
# runtime below provides. ring is the only crypto provider, so no C toolchain beyond gcc is needed.
FROM docker.io/library/rust:1.95-bookworm AS builder
WORKDIR /src
COPY . .
# The cache mounts keep the registry and build artefacts between builds; the binary is copied out
# of the cached target directory because cache mounts are not part of the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p node-maintenance-operator --bin node-maintenance-operator \
    && install -D -m 0755 target/release/node-maintenance-operator /out/manager

# Runtime: distroless cc (glibc, CA certificates, no shell), non-root 65532 as upstream.
FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="node-maintenance-operator" \
      org.opencontainers.image.description="Keeps a node cordoned, tainted and drained while a NodeMaintenance exists (drop-in for medik8s NMO)" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/manager /manager
# Numeric, so the kubelet can check the manifests' runAsNonRoot without a passwd lookup; the
# manifests pin no UID (OpenShift's restricted-v2 SCC substitutes one from the namespace range).
USER 65532:65532
ENTRYPOINT ["/manager"]

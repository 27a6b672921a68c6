# syntax=docker/dockerfile:1
#
# The agent image: one statically linked binary on distroless, non-root.
#
#   docker build -t ghcr.io/example/etcd-member-agent:0.1.0 .
#
# (ghcr.io/example/... is a placeholder: push to your own registry.)
#
# NOT BUILT IN THIS REPOSITORY'S CI: the machines it runs on have no container
# engine and no registry, so this file is checked only by tests/it/deploy.rs (same
# toolchain as rust-toolchain.toml, same flags as scripts/build-static, the
# binary where deploy/ runs it). scripts/build-static builds and checks the same
# static binary locally.
#
# Static glibc (+crt-static): the binary needs no libc, loader or NSS modules at
# run time, so `install` can copy it into the distroless etcd image and run it
# there next to that image's etcdutl. x86_64 only; an arm64 image needs
# --target aarch64-unknown-linux-gnu on an arm64 builder.

FROM rust:1.95-bookworm AS build
# etcd-client's and the agent's gRPC code is generated at build time by protoc;
# etcd's protos import google/protobuf/*.proto from libprotobuf-dev.
RUN apt-get update \
    && apt-get install -y --no-install-recommends protobuf-compiler libprotobuf-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Only what the binary is built from (the build context's target/ stays out).
COPY rust-toolchain.toml Cargo.toml Cargo.lock build.rs ./
COPY proto ./proto
COPY src ./src
# --target makes RUSTFLAGS apply to the binary only, not to build scripts and
# proc macros (which must stay dynamic for rustc to load them).
RUN RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked --target x86_64-unknown-linux-gnu --bin etcd-member-agent \
    && ./target/x86_64-unknown-linux-gnu/release/etcd-member-agent --version

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/target/x86_64-unknown-linux-gnu/release/etcd-member-agent /usr/local/bin/etcd-member-agent
# The distroless `nonroot` user, and the uid/gid the operator runs etcd with.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/etcd-member-agent"]

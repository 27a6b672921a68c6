//! The integration tests: one test binary, so the crate and the harness are
//! compiled and linked once. Each module is one area, run on its own with a
//! name filter: `cargo test --test it -- restore::` (or `restore_s3::`, ...).
//!
//! The shared harness:
//! * [`common`]: real etcd clusters on loopback, the agent run as a black box,
//!   ports, patience, tree snapshots, skips that fail under `CI=true`.
//! * [`kube_fake`]: an in-process fake Kubernetes API server.
//! * [`preflight_support`]: preflight runs against a live cluster.
//! * [`serve_support`]: the `serve` sidecar, its collector and TLS material.
//! * [`fault_sched`]: fault schedules against a cluster and the agent.
//! * [`common::node`]: a real Kubernetes node (kubelet, containerd, runc) for
//!   Pods; [`node_support`]: the member Pods on it and the test standing in for
//!   the operator.
//!
//! Everything runs in one process: no test may change the process's
//! environment or working directory (child processes get their env passed).

// Test code may unwrap and expect: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod fault_sched;
mod kube_fake;
mod node_support;
mod preflight_support;
mod serve_support;

mod deploy;
mod etcd_evidence;
mod faults;
mod fleet;
mod fuzz_corpus;
mod harness_smoke;
mod hashkv;
mod inject;
mod inspect;
mod install;
mod kube_evidence;
mod kube_real;
mod monitoring;
mod node;
mod pod_check;
mod preflight;
mod preflight_kube;
mod preflight_soundness;
mod restore;
mod restore_s3;
mod rollback;
mod rollback_review;
mod serve;
mod serve_api;
mod serve_limits;
mod serve_witness;
mod static_binary;
mod upgrade;
mod webhook;
mod wipe;

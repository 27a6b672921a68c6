//! The code generated from `proto/etcd/agent/v1/agent.proto` by `build.rs`, kept
//! private to [`crate::server`]: the rest of the crate speaks the plain domain
//! types of [`super::identity`], which convert into these at the gRPC boundary, so
//! a schema change cannot ripple through the crate.

#![allow(missing_docs, clippy::all, clippy::pedantic)]

tonic::include_proto!("etcd.agent.v1");

/// The encoded `FileDescriptorSet` of the schema (with its imports), served by
/// gRPC server reflection so `grpcurl` works without the `.proto` file.
pub(crate) const FILE_DESCRIPTOR_SET: &[u8] =
    tonic::include_file_descriptor_set!("etcd_agent_v1_descriptor");

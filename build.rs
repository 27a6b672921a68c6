//! Generates the gRPC code of `proto/etcd/agent/v1/agent.proto` (client and
//! server) and its encoded file descriptor set, which the sidecar serves through
//! gRPC server reflection. The generated code lands in `OUT_DIR` and is included
//! only by `src/server/proto.rs` (and by tests and examples that act as clients).

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .file_descriptor_set_path(out_dir.join("etcd_agent_v1_descriptor.bin"))
        .compile_protos(&["proto/etcd/agent/v1/agent.proto"], &["proto"])?;
    Ok(())
}

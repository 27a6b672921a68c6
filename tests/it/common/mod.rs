//! The shared harness for black-box tests: real etcd 3.4 and 3.5 clusters on
//! loopback, formed the way the operator forms them, the agent binary run with a
//! clean environment, and proofs that a directory was left alone.
//!
//! Every module of the test binary uses what it needs from here. The harness is
//! shaped around three promises:
//! * **Like production.** Members are seeded and added exactly as the operator does
//!   it, with flags frozen at creation, so restarts behave like Pod restarts.
//! * **No waiting by guesswork.** Every wait is a condition polled against one
//!   patience budget (`TEST_PATIENCE_SECS`, see [`patience`]).
//! * **Nothing left behind.** Every etcd is tracked by PID and killed and reaped
//!   when its `Member`/`Cluster` drops, panics included; failures carry the tail of
//!   the member's log.
//!
//! ```ignore
//! let cluster = Cluster::builder(EtcdVersion::V3_5).members(3).start();
//! cluster[0].put("k", "v");
//! cluster[2].kill9();
//! cluster[2].wipe_data_dir();
//! let run = run_agent(["preflight", "-o", "json"], &cluster.agent_env(2));
//! run.assert_code(10);
//! ```

mod agent;
mod blackhole;
mod cluster;
mod etcd;
mod gateway;
mod kube_apiserver;
mod member;
pub mod node;
mod patience;
mod ports;
mod process;
mod skip;
mod tree;

pub use agent::{
    agent, chown_recursive, pod_uid_can_run_the_agent, run_agent, run_agent_as, run_command,
    run_command_with_stdin, with, without, AgentRun, AGENT_BIN, POD_GID, POD_UID,
};
pub use blackhole::BlackHole;
pub use cluster::Cluster;
pub use etcd::{etcd35_dir, etcdctl_command, etcdutl_status, etcdutl_status_of, EtcdVersion};
pub use gateway::{base64_decode, base64_encode, health, HttpConn};
pub use kube_apiserver::{
    client_from, kube_apiserver_version, KubeApiServer, AGENT_SERVICE_ACCOUNT,
};
pub use member::{tail, ClusterState, Member, MemberFlags, WaitError};
pub use patience::{ensure, eventually, patience, Deadline};
pub use ports::free_port;
pub use process::{
    per_process_dir, pid_exists, register, run_with_deadline, signal, unregister,
    wait_with_deadline,
};
pub use skip::skip;
pub use tree::{assert_tree_unchanged, entries, tree_diff, tree_snapshot};

/// Evaluates `$check` (an expression of type `Result<T, String>`) until it is
/// `Ok` or the patience runs out, and yields the `T`; panics with the last error
/// otherwise. An optional message (format arguments) says what was awaited:
///
/// ```ignore
/// let status = assert_eventually!(m.try_endpoint_status(), "{} answers", m.name());
/// assert_eventually!(ensure(!m.is_running(), "still running"));
/// ```
macro_rules! assert_eventually {
    ($check:expr $(,)?) => {
        $crate::common::eventually($crate::common::patience(), || $check).unwrap_or_else(|e| {
            panic!("not eventually true: {}\n  {}", stringify!($check), e)
        })
    };
    ($check:expr, $($msg:tt)+) => {
        $crate::common::eventually($crate::common::patience(), || $check).unwrap_or_else(|e| {
            panic!("not eventually true: {}\n  {}", format!($($msg)+), e)
        })
    };
}
pub(crate) use assert_eventually;

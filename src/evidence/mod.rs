//! The sources of evidence other than the directory: the live cluster (etcd
//! gRPC), the operator's records (Kubernetes API) and env hints. Each is a thin,
//! time-bounded wrapper with its own error type; none decides anything.

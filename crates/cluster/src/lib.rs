//! Hourglass clustering (docs/clustering.md): one leader at a time, elected through etcd, serving
//! clients; followers holding a byte-for-byte copy of its data directory, fed by replicating
//! every file operation of its store; a confirm only once a majority holds it.
//!
//! ```text
//! coordinator/    the node's etcd thread: the Following and Leading state machines (every
//!                 election, lease, in-sync and step-down rule, no I/O) and the shell that
//!                 performs their requests and effects
//! election.rs     etcd keys and records, the election rule (sans-IO)
//! in_sync.rs      the leader's in-sync, confirm and step-down rules (sans-IO)
//! lease.rs        how long the lease holds by this node's clock (sans-IO)
//! dead_leader.rs  the evidence that a leader's process is gone, to depose it before its lease ends
//! retry.rs        riding out an unreachable etcd: jittered back-off, a rate-limited WARN
//! etcd.rs         a blocking etcd v3 client over its JSON gateway
//! repl/           replication: frames, the leader's hub and storage wrapper, links, the
//!                 follower's receiver and applier, catch-up manifests
//! proxy.rs        followers forward client ports to the leader
//! ```

pub mod coordinator;
pub mod dead_leader;
pub mod election;
pub mod etcd;
pub mod in_sync;
pub mod lease;
pub mod proxy;
pub mod repl;
pub mod retry;

pub use coordinator::{ClusterSettings, Coordinator, Elected, Role, StepDown};
pub use election::NodeRecord;

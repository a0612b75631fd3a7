//! Replication of the data directory from the leader to its followers.

pub mod apply;
pub mod auth;
pub mod digests;
pub mod frame;
pub mod hub;
pub mod link;
pub mod manifest;
pub mod receiver;
pub mod storage;
pub mod transport;

pub use auth::ClusterSecret;
pub use digests::FileDigests;
pub use hub::Hub;
pub use receiver::{Fence, Follower, ReplicationAuth};
pub use storage::ReplicatedStorage;
pub use transport::ReplicationTls;

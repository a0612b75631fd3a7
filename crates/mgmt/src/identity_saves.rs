//! Where the user store's changes are written once the broker runs: through the broker task and
//! the store thread, as catalog operations in order with every other definition (ADR 0008's one
//! owner, issue 22). The store thread syncs them in its group commit, and in a cluster a change
//! is on a majority before it is visible, as a confirm would be. The thread that made the change
//! (an HTTP handler on a tokio worker) waits for that without holding up the worker's other tasks,
//! and no fsync ever runs on it.

use crate::handle::BrokerHandle;
use crate::users::Saver;
use hourglass_broker::requests::StoreIdentity;

/// A saver that sends each change's records to the broker task and waits until they are durable.
/// It holds the broker weakly: the user store outlives the broker task at shutdown, and must not
/// keep it running.
pub fn saver_through_store(broker: &BrokerHandle) -> Saver {
    let broker = broker.downgrade();
    Box::new(move |changes| {
        let broker = broker.upgrade().ok_or("the broker is shutting down")?;
        let changes = changes.to_vec();
        wait_off_the_worker(async move { broker.request(StoreIdentity { changes }).await })?
            .map_err(|error| error.reason())
    })
}

/// Waits for `durable` from synchronous code on a thread of the multi-threaded runtime (the
/// broker's): a worker hands its other tasks over first (`block_in_place`). Anywhere else the
/// broker task might never run while this thread waits, so it is refused.
fn wait_off_the_worker<T>(durable: impl std::future::Future<Output = T>) -> Result<T, String> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            Ok(tokio::task::block_in_place(|| handle.block_on(durable)))
        }
        _ => Err("the user store saves through the broker task only from its multi-threaded runtime".into()),
    }
}

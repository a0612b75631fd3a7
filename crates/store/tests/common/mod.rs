//! What the tests read after a reopen: recovery's two passes, as the server runs them.
#![allow(dead_code)] // each test binary uses part of it

use std::collections::BTreeMap;

use hourglass_store::{
    MemStorage, Recovered, RecoveredMessage, RecoveryReport, Storage, Store, CHECKPOINT_FILE,
};

/// The recovered messages per queue (in enqueue order) and the recovery report.
#[derive(Debug)]
pub struct Reopened {
    pub queues: BTreeMap<u64, Vec<RecoveredMessage>>,
    pub report: RecoveryReport,
}

/// Replays what `Store::open` recovered. The first pass's count per queue must match the messages
/// the second pass reads back.
pub fn replayed((store, recovered): (Store, Recovered)) -> (Store, Reopened) {
    let queues = store.recovered_queues(recovered.replay).expect("the second pass reads every live record");
    let counts: BTreeMap<u64, u64> = queues.iter().map(|(q, m)| (*q, m.len() as u64)).collect();
    assert_eq!(counts, recovered.queue_messages, "counts per queue from the first pass");
    (store, Reopened { queues, report: recovered.report })
}

/// Removes the log's checkpoint, so the next open reads every segment: for tests of the rules a
/// full read applies (what a start without a checkpoint, or with one it cannot use, does).
pub fn without_checkpoint(storage: &MemStorage) {
    match storage.remove(CHECKPOINT_FILE) {
        Ok(()) => {}
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}"),
    }
}

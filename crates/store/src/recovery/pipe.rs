//! The bounded pipe between each recovery pass's two threads: items go across in batches (one
//! channel operation per batch, not per record), and at most a few batches wait, so a pass holds
//! a few MB more whatever the backlog.

use std::sync::mpsc;

/// A pipe carrying items in batches of `batch`, with at most `in_flight` full batches waiting.
pub(super) fn pipe<T>(batch: usize, in_flight: usize) -> (BatchSender<T>, BatchReceiver<T>) {
    let (sender, batches) = mpsc::sync_channel(in_flight);
    let sender = BatchSender { sender, batch: Vec::with_capacity(batch), batch_len: batch };
    (sender, BatchReceiver { batches, batch: Vec::new().into_iter() })
}

/// The sending end; what is still in its batch is sent when it is dropped.
pub(super) struct BatchSender<T> {
    sender: mpsc::SyncSender<Vec<T>>,
    batch: Vec<T>,
    batch_len: usize,
}

impl<T> BatchSender<T> {
    /// Adds `item`, sending the batch once it is full (waiting while the pipe is full); false
    /// when that send found the receiver gone.
    pub(super) fn push(&mut self, item: T) -> bool {
        self.batch.push(item);
        self.batch.len() < self.batch_len || self.flush()
    }

    /// Sends what the batch holds; false once the receiver is gone.
    fn flush(&mut self) -> bool {
        if self.batch.is_empty() {
            return true;
        }
        let full = std::mem::replace(&mut self.batch, Vec::with_capacity(self.batch_len));
        self.sender.send(full).is_ok()
    }
}

impl<T> Drop for BatchSender<T> {
    fn drop(&mut self) {
        self.flush();
    }
}

/// The receiving end: the items in the order sent, until the sender is dropped.
pub(super) struct BatchReceiver<T> {
    batches: mpsc::Receiver<Vec<T>>,
    batch: std::vec::IntoIter<T>,
}

impl<T> BatchReceiver<T> {
    /// Items received but not yet taken.
    pub(super) fn buffered(&self) -> usize {
        self.batch.len()
    }
}

impl<T> Iterator for BatchReceiver<T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        loop {
            if let Some(item) = self.batch.next() {
                return Some(item);
            }
            self.batch = self.batches.recv().ok()?.into_iter();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every item arrives once, in order, across batch boundaries and the last partial batch,
    /// with the sender on another thread and the pipe smaller than what is sent.
    #[test]
    fn items_arrive_in_order_across_batches() {
        let (mut sender, receiver) = pipe(3, 1);
        let sending = std::thread::spawn(move || {
            for i in 0..10u32 {
                assert!(sender.push(i));
            }
        });
        assert_eq!(receiver.collect::<Vec<_>>(), (0..10).collect::<Vec<_>>());
        sending.join().unwrap();
    }

    /// A sender whose receiver is gone is told so, instead of waiting forever on a full pipe.
    #[test]
    fn a_sender_learns_the_receiver_is_gone() {
        let (mut sender, receiver) = pipe(2, 1);
        drop(receiver);
        assert!(sender.push(1));
        assert!(!sender.push(2));
    }
}

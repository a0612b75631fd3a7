//! What one management job holds the broker task for (issue 22): a whole queue listing's rows at
//! 100,000 queues — what one `GET /api/queues` built in one job before — against the listing's
//! keys and one slice of `SLICE_ROWS_MAX` rows, what a job builds now (`admin/slices.rs`).
//! Broker core only, no I/O. Run with `cargo bench -p hourglass-broker --bench listing_slices`.

use hourglass_broker::admin::slices::SLICE_ROWS_MAX;
use hourglass_broker::{Broker, BrokerConfig, Timestamp};
use hourglass_wire::{FieldTable, FieldValue, QueueDeclare, ShortStr};

/// Queues in the broker: issue 22's measurement.
const QUEUES: usize = 100_000;

fn main() {
    divan::main();
}

/// A broker with [`QUEUES`] durable queues, each with an argument (as imported definitions often
/// carry one).
fn broker_with_queues() -> Broker {
    let mut broker = Broker::new(BrokerConfig::default());
    broker.with_admin_channel("guest", "/", Timestamp::ZERO, |ch| {
        for i in 0..QUEUES {
            let queue = ShortStr::try_from(format!("queue-{i:06}").as_str()).expect("a short name");
            let arguments = FieldTable::new().with_entry("x-max-length", FieldValue::I32(1_000));
            ch.call(QueueDeclare { queue, durable: true, arguments, ..Default::default() })
                .expect("declared");
        }
    });
    broker
}

/// Every queue's row in one go, sorted: the job one full listing was before.
#[divan::bench(sample_count = 10)]
fn whole_listing_in_one_job(bencher: divan::Bencher) {
    let broker = broker_with_queues();
    bencher.bench_local(|| broker.list_queue_details());
}

/// The listing's first job now: the keys of every queue.
#[divan::bench(sample_count = 50)]
fn keys_job(bencher: divan::Bencher) {
    let broker = broker_with_queues();
    bencher.bench_local(|| broker.queue_keys(None));
}

/// Each further job now: the rows of one slice.
#[divan::bench(sample_count = 50)]
fn slice_job(bencher: divan::Bencher) {
    let broker = broker_with_queues();
    let keys = broker.queue_keys(None);
    bencher.bench_local(|| broker.queue_details(&keys[..SLICE_ROWS_MAX]));
}

//! The background sampler behind the rates: every [`SAMPLE_INTERVAL`] the broker's jobs read the
//! counters and gauges of every object the API shows rates for (the overview, vhosts, queues,
//! channels, exchanges; the many in slices, `Sampled::read`), and the pass is recorded in
//! [`Rates`] off the runtime's workers. Its cost is one read of each
//! object's counters per pass, and each object's history is bounded (`OBJECT_HISTORY`,
//! `TOTALS_HISTORY`).

use std::collections::HashMap;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use hourglass_broker::admin::{ChannelSummary, ExchangeDetails};
use hourglass_broker::message_stats::MessageStats;
use hourglass_broker::queue::QueueStats;
use hourglass_broker::requests::{ChannelListing, ExchangeListing, NodeTotals, QueueStatsListing};

use super::{
    depth_fields, exchange_fields, key, publisher_fields, queue_fields, time_total_fields, Observation,
    SampleTime, OBJECT_HISTORY, SAMPLE_INTERVAL, TOTALS_HISTORY,
};
use crate::error::ApiError;
use crate::{AppState, BrokerHandle};

/// Samples every [`SAMPLE_INTERVAL`] until `stopped` completes (shutdown: its handle on the
/// broker must go, or the broker task would wait for it) or the broker is gone.
pub async fn run(state: AppState, stopped: impl std::future::Future<Output = ()>) {
    let mut ticks = tokio::time::interval(SAMPLE_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut stopped = std::pin::pin!(stopped);
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            _ = ticks.tick() => {}
        }
        let Ok(sampled) = Sampled::read(&state.broker).await else { return };
        let time = now();
        // 200,000 keys at 100,000 queues: off the runtime's workers, which serve the connections.
        let rates = state.rates.clone();
        let recorded = tokio::task::spawn_blocking(move || rates.record_pass(time, sampled.observations()));
        if recorded.await.is_err() {
            return;
        }
    }
}

/// The OS clock, for the live sampler (tests give their own [`SampleTime`]).
fn now() -> SampleTime {
    let wall_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    SampleTime { at: Instant::now(), wall_ms }
}

/// What one pass reads from the broker.
pub struct Sampled {
    message_stats: MessageStats,
    vhosts: Vec<String>,
    queues: Vec<QueueStats>,
    exchanges: Vec<ExchangeDetails>,
    channels: Vec<ChannelSummary>,
}

impl Sampled {
    /// Everything at once, in one look at `b` (tests).
    #[cfg(test)]
    fn of(b: &hourglass_broker::Broker) -> Sampled {
        Sampled {
            message_stats: b.message_stats(),
            vhosts: b.vhost_names(),
            queues: b.list_queues(),
            exchanges: b.exchange_details(&b.exchange_keys(None)),
            channels: b.list_channels(),
        }
    }

    /// The live pass: queues, exchanges and channels in slices between other work on the
    /// broker task (issue 22: one job over 100,000 queues held confirms up for a second).
    pub async fn read(broker: &BrokerHandle) -> Result<Sampled, ApiError> {
        let totals = broker.ask(NodeTotals).await?;
        Ok(Sampled {
            message_stats: totals.messages,
            vhosts: totals.vhosts,
            queues: queue_stats_in_slices(broker).await?,
            exchanges: broker.rows_in_slices(ExchangeListing { vhost: None }).await?,
            channels: broker.rows_in_slices(ChannelListing).await?,
        })
    }

    /// Every sampled object's values under its key.
    pub fn observations(self) -> Vec<Observation> {
        let Sampled { message_stats, vhosts, queues, exchanges, channels } = self;
        let mut found =
            Vec::with_capacity(3 + vhosts.len() + 2 * queues.len() + exchanges.len() + channels.len());
        let mut seen = |key: String, fields: &[(&str, u64)], keep: usize| {
            found.push(Observation { key, values: fields.iter().map(|(_, v)| *v).collect(), keep });
        };
        seen(key::OVERVIEW.into(), &publisher_fields(&message_stats), TOTALS_HISTORY);
        let (ready, unacked) = total_depth(&queues);
        seen(key::OVERVIEW_QUEUE_TOTALS.into(), &depth_fields(ready, unacked), TOTALS_HISTORY);
        seen(key::OVERVIEW_TIME.into(), &time_total_fields(&queues), TOTALS_HISTORY);
        let depths = depth_by_vhost(&queues);
        for vhost in &vhosts {
            let (ready, unacked) = depths.get(vhost).copied().unwrap_or_default();
            seen(key::vhost_depth(vhost), &depth_fields(ready, unacked), TOTALS_HISTORY);
        }
        for x in &exchanges {
            let key = key::exchange(&x.vhost, &x.spec.name.as_str());
            seen(key, &exchange_fields(&x.message_stats), OBJECT_HISTORY);
        }
        for q in &queues {
            seen(key::queue(&q.vhost, &q.name), &queue_fields(&q.counters.messages), OBJECT_HISTORY);
            seen(
                key::queue_depth(&q.vhost, &q.name),
                &depth_fields(q.messages_ready, q.messages_unacked),
                OBJECT_HISTORY,
            );
        }
        for c in &channels {
            seen(key::channel(c.conn, c.channel), &publisher_fields(&c.message_stats), OBJECT_HISTORY);
        }
        found
    }
}

/// One pass over the broker: every sampled object's values under its key (tests).
#[cfg(test)]
fn observe(b: &hourglass_broker::Broker) -> Vec<Observation> {
    Sampled::of(b).observations()
}

/// Every queue's statistics in no order, built in slices on the broker task
/// (`BrokerHandle::rows_in_slices`).
pub(crate) async fn queue_stats_in_slices(broker: &BrokerHandle) -> Result<Vec<QueueStats>, ApiError> {
    broker.rows_in_slices(QueueStatsListing { vhost: None }).await
}

/// Ready and unacknowledged messages over `queues`.
pub fn total_depth<'q>(queues: impl IntoIterator<Item = &'q QueueStats>) -> (usize, usize) {
    queues.into_iter().fold((0, 0), |(r, u), q| (r + q.messages_ready, u + q.messages_unacked))
}

/// Ready and unacknowledged messages per vhost (vhosts without queues are absent).
pub fn depth_by_vhost(queues: &[QueueStats]) -> HashMap<String, (usize, usize)> {
    let mut depths: HashMap<String, (usize, usize)> = HashMap::new();
    for q in queues {
        let entry = depths.entry(q.vhost.clone()).or_default();
        entry.0 += q.messages_ready;
        entry.1 += q.messages_unacked;
    }
    depths
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use hourglass_broker::time::Timestamp;
    use hourglass_broker::{Broker, BrokerConfig, Publish};
    use hourglass_wire::{QueueDeclare, ShortStr};
    use serde_json::Value;

    use super::*;
    use crate::rates::{Ranges, Rates};
    use crate::routes::queues::queue_json;

    fn time(t0: Instant, seconds: u64) -> SampleTime {
        SampleTime { at: t0 + Duration::from_secs(seconds), wall_ms: seconds * 1000 }
    }

    fn publish(broker: &mut Broker, queue: &str, count: usize) {
        broker.with_admin_channel("guest", "/", Timestamp::ZERO, |ch| {
            for _ in 0..count {
                let publish = Publish {
                    exchange: ShortStr::default(),
                    routing_key: ShortStr::try_from(queue).unwrap(),
                    mandatory: false,
                    properties: Default::default(),
                    body: bytes::Bytes::from_static(b"hello"),
                };
                ch.publish(publish).unwrap();
            }
        });
    }

    /// Two passes 5 s apart (an injected clock: no sleeps) and no request before: the first look
    /// at the queue and the overview already has rates (issue 25: it showed 0/s).
    #[test]
    fn the_first_look_has_rates_sampled_in_the_background() {
        let mut broker = Broker::new(BrokerConfig::default());
        let declare = QueueDeclare { queue: ShortStr::from_static("q"), ..Default::default() };
        broker.with_admin_channel("guest", "/", Timestamp::ZERO, |ch| ch.call(declare)).unwrap();
        let rates = Rates::default();
        let t0 = Instant::now();
        rates.record_pass(time(t0, 0), observe(&broker));
        publish(&mut broker, "q", 20);
        rates.record_pass(time(t0, 5), observe(&broker));

        let queue = &broker.list_queue_details()[0];
        let json = queue_json(queue, "node", &rates, Ranges::default());
        assert_eq!(json["message_stats"]["publish_details"]["rate"], 4.0, "{json}");
        assert_eq!(json["messages_details"]["rate"], 4.0, "{json}");
        let publisher = crate::rates::publisher_fields(&broker.message_stats());
        let overview = Value::Object(rates.details(key::OVERVIEW, &publisher, None));
        assert_eq!(overview["publish_details"]["rate"], 4.0, "{overview}");
        let depth = crate::rates::depth_fields(20, 0);
        let vhost = Value::Object(rates.details(&key::vhost_depth("/"), &depth, None));
        assert_eq!(vhost["messages_details"]["rate"], 4.0, "{vhost}");
    }

    /// One pass finds each object once: the overview's three, one per vhost and exchange, two per
    /// queue (counters and depth).
    #[test]
    fn a_pass_reads_each_object_once() {
        let mut broker = Broker::new(BrokerConfig::default());
        for name in ["a", "b"] {
            let declare = QueueDeclare { queue: ShortStr::try_from(name).unwrap(), ..Default::default() };
            broker.with_admin_channel("guest", "/", Timestamp::ZERO, |ch| ch.call(declare)).unwrap();
        }
        let found = observe(&broker);
        let exchanges = broker.list_exchange_details("/").len();
        assert_eq!(found.len(), 3 + 1 + exchanges + 2 * 2);
        let mut keys: Vec<&str> = found.iter().map(|o| o.key.as_str()).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), found.len(), "no object twice");
    }
}

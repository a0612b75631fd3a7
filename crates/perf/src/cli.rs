//! Command-line flags: global ones (`--url`, `--broker-pid`, `--label`) and one subcommand per
//! scenario. Every scenario is bounded in time *and* count, so a stalled broker cannot make a
//! run (or the benchmark matrix) hang.

use clap::{Args, Parser, Subcommand, ValueEnum};

/// RabbitMQ's default URL: guest on loopback, vhost `/`.
/// `amqps://…/%2f?cacertfile=CA.pem` for TLS.
pub const DEFAULT_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// Load generator for AMQP 0-9-1 brokers (Hourglass, RabbitMQ, …).
#[derive(Debug, Parser)]
#[command(name = "hourglass-perf", version)]
pub struct Cli {
    /// Broker to load.
    #[arg(long, global = true, default_value = DEFAULT_URL)]
    pub url: String,
    /// The broker's process id: report its CPU time per message and its RSS from /proc.
    #[arg(long, global = true)]
    pub broker_pid: Option<u32>,
    /// A name for the broker in the result lines (e.g. "hourglass", "rabbitmq").
    #[arg(long, global = true)]
    pub label: Option<String>,
    #[command(subcommand)]
    pub scenario: Scenario,
}

#[derive(Debug, Subcommand)]
pub enum Scenario {
    /// P producers → Q queues → C consumers as fast as they go (or at --rate).
    Throughput(ThroughputArgs),
    /// One producer at a fixed rate, one consumer; latency from timestamps in the body.
    Latency(LatencyArgs),
    /// basic.get polling: gets per second per poller.
    Get(GetArgs),
    /// N idle connections held open: broker memory per connection.
    IdleConnections(IdleArgs),
    /// Messages with random per-message TTLs behind a long-TTL head: expiry lateness, memory.
    Ttl(DeadlineArgs),
    /// Messages through an x-delayed-message exchange with random x-delay: lateness, memory.
    Delayed(DeadlineArgs),
    /// Unacked deliveries under x-visibility-timeout (--min-ms): lateness of their return.
    Visibility(DeadlineArgs),
    /// Waits until a queue holds at least N messages (e.g. while a broker recovers after a
    /// restart): the time it took, polling a passive queue.declare on fresh connections.
    Depth(DepthArgs),
    /// One consumer takes N messages already waiting in a queue: time to the first delivery,
    /// rate, broker CPU per message.
    Drain(DrainArgs),
    /// N durable queues declared and bound one at a time: the rate per slice as they add up.
    Declares(DeclaresArgs),
    /// Fills a durable queue with N persistent messages due far ahead (x-delay, or per-message TTL
    /// and dead-lettering): publish rate and broker RSS per waiting message for each slice.
    ScaleFill(ScaleFillArgs),
    /// K persistent tracers through a delayed exchange into their own queue, each due at the
    /// wall-clock time in its body (published before a restart, consumed after it).
    ScaleTracers(ScaleTracersArgs),
    /// Consumes the tracers: lateness against the due time in each body, and how many came early.
    ScaleTracersConsume(ScaleTracersConsumeArgs),
}

/// How `scale-fill`'s messages wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum WaitVia {
    /// An `x-delay` header through an `x-delayed-message` exchange (Hourglass, or RabbitMQ with
    /// the delayed-message plugin).
    Delayed,
    /// A per-message expiration in a queue that dead-letters to QUEUE-due through the default
    /// exchange: what RabbitMQ users without the plugin do.
    Ttl,
}

#[derive(Clone, Debug, Args)]
pub struct ScaleFillArgs {
    /// How the messages wait.
    #[arg(long, value_enum, default_value_t = WaitVia::Delayed)]
    pub via: WaitVia,
    /// The x-delayed-message exchange (durable, x-delayed-type direct); unused with `--via ttl`.
    #[arg(long, default_value = "scale")]
    pub exchange: String,
    /// The durable queue the messages wait in (bound to the exchange with its name as key).
    #[arg(long, default_value = "scale")]
    pub queue: String,
    /// Messages to publish (persistent, 16 B: due time and index).
    #[arg(long, default_value_t = 1_000_000)]
    pub count: u64,
    /// Shortest wait in ms; waits are drawn uniformly from min..=max, far enough ahead that
    /// none falls due during the run.
    #[arg(long, default_value_t = 3_600_000)]
    pub min_ms: u64,
    /// Longest wait in ms.
    #[arg(long, default_value_t = 7_200_000)]
    pub max_ms: u64,
    /// Publisher confirms with at most this many unconfirmed messages.
    #[arg(long, default_value_t = 1000)]
    pub confirm: u32,
    /// Report the rate and the broker's RSS at the end of each of this many equal slices.
    #[arg(long, default_value_t = 10)]
    pub slices: u32,
    /// Seed of the wait generator (the same seed draws the same waits against every broker).
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Stop publishing after this long.
    #[arg(long, default_value_t = 3600.0)]
    pub timeout_s: f64,
}

#[derive(Clone, Debug, Args)]
pub struct ScaleTracersArgs {
    /// The x-delayed-message exchange (durable, x-delayed-type direct).
    #[arg(long, default_value = "scale")]
    pub exchange: String,
    /// The tracers' durable queue, bound to the exchange with its name as key.
    #[arg(long, default_value = "scale-tracers")]
    pub queue: String,
    /// Tracers to publish (persistent, confirmed).
    #[arg(long, default_value_t = 1000)]
    pub count: u64,
    /// The first tracer is due this long after the run starts (wall clock).
    #[arg(long, default_value_t = 60_000)]
    pub due_in_ms: u64,
    /// The due times are spread evenly over this window after the first.
    #[arg(long, default_value_t = 10_000)]
    pub spread_ms: u64,
    /// Publisher confirms with at most this many unconfirmed messages.
    #[arg(long, default_value_t = 100)]
    pub confirm: u32,
}

#[derive(Clone, Debug, Args)]
pub struct ScaleTracersConsumeArgs {
    /// The tracers' queue.
    #[arg(long, default_value = "scale-tracers")]
    pub queue: String,
    /// Tracers expected.
    #[arg(long, default_value_t = 1000)]
    pub count: u64,
    /// Wait at most this long for them, then count the rest as missing.
    #[arg(long, default_value_t = 600.0)]
    pub timeout_s: f64,
}

#[derive(Clone, Debug, Args)]
pub struct DeclaresArgs {
    /// Durable queues to declare (each also bound to amq.direct).
    #[arg(long, default_value_t = 20_000)]
    pub queues: u32,
    /// Report the rate for every slice of this many queues.
    #[arg(long, default_value_t = 2_000)]
    pub step: u32,
    /// Stop declaring after this long (what was declared is still deleted).
    #[arg(long, default_value_t = 600.0)]
    pub timeout_s: f64,
    /// Leave the queues behind instead of deleting them (so that a CPU count taken around the
    /// run covers the declares alone).
    #[arg(long)]
    pub keep_queues: bool,
}

#[derive(Clone, Debug, Args)]
pub struct DepthArgs {
    /// The queue to watch.
    #[arg(long)]
    pub queue: String,
    /// Done once the queue reports at least this many messages.
    #[arg(long)]
    pub messages: u64,
    /// Give up after this long.
    #[arg(long, default_value_t = 600.0)]
    pub timeout_s: f64,
}

#[derive(Clone, Debug, Args)]
pub struct DrainArgs {
    /// The queue to drain (it is neither declared nor deleted).
    #[arg(long)]
    pub queue: String,
    /// Done after this many deliveries.
    #[arg(long)]
    pub messages: u64,
    /// Consume with no-ack (auto-ack).
    #[arg(long)]
    pub auto_ack: bool,
    /// basic.qos prefetch-count (0 = unlimited); ignored with --auto-ack.
    #[arg(long, default_value_t = 1000)]
    pub prefetch: u16,
    /// Manual ack: one basic.ack (multiple=true) every K deliveries.
    #[arg(long, default_value_t = 100)]
    pub ack_every: u32,
    /// Give up after this long.
    #[arg(long, default_value_t = 600.0)]
    pub timeout_s: f64,
}

#[derive(Clone, Debug, Args)]
pub struct DeadlineArgs {
    /// Messages to publish.
    #[arg(long, default_value_t = 100_000)]
    pub count: u64,
    /// Shortest wait (TTL, delay) in ms; for `visibility`, the visibility timeout.
    #[arg(long, default_value_t = 1_000)]
    pub min_ms: u64,
    /// Longest wait in ms (waits are drawn uniformly from min..=max).
    #[arg(long, default_value_t = 60_000)]
    pub max_ms: u64,
    /// After the last deadline, wait at most this long for stragglers, then count the rest as missing.
    #[arg(long, default_value_t = 10.0)]
    pub grace_s: f64,
    /// Seed of the wait generator (the same seed draws the same waits against every broker).
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Publish at most this many msg/s (0 = as fast as possible). Deadlines are stamped at
    /// publish time, so a publisher outrunning the broker counts the broker's backlog as
    /// lateness (issue 39: p99 145 ms unpaced where paced it is 1 ms); pacing by default keeps
    /// the figure about the timers.
    #[arg(long, default_value_t = 10_000)]
    pub rate: u64,
}

#[derive(Clone, Debug, Args)]
pub struct ThroughputArgs {
    /// Producer connections.
    #[arg(long, short = 'P', default_value_t = 1)]
    pub producers: u16,
    /// Consumer connections; 0 fills the queues (the window closes when publishing ends and the
    /// report adds the broker's RSS growth per message).
    #[arg(long, short = 'C', default_value_t = 1)]
    pub consumers: u16,
    /// Queues; producer i publishes to queue i mod Q, consumer j consumes queue j mod Q.
    #[arg(long, short = 'Q', default_value_t = 1)]
    pub queues: u16,
    /// Name the queues NAME-0, NAME-1, … instead of a name unique to this run.
    #[arg(long)]
    pub queue_name: Option<String>,
    /// Leave the queues (and what is in them) behind instead of deleting them.
    #[arg(long)]
    pub keep_queues: bool,
    /// Body size in octets.
    #[arg(long, default_value_t = 16)]
    pub size: usize,
    /// Stop publishing after this many seconds.
    #[arg(long, default_value_t = 10.0)]
    pub duration_s: f64,
    /// Stop publishing after this many messages in total (split over the producers); by default
    /// 2M per second of `--duration-s`, more than any broker here takes, so the time ends the run.
    #[arg(long)]
    pub count: Option<u64>,
    /// Publish at most this many msg/s per producer (0 = as fast as possible).
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// Publisher confirms with at most this many unconfirmed messages per producer (0 = off).
    #[arg(long, default_value_t = 0)]
    pub confirm: u32,
    /// Publish with delivery-mode 2 (persistent).
    #[arg(long)]
    pub persistent: bool,
    /// Producers publish over AMQP 1.0 to `/queues/<queue>` (unsettled, at most --confirm
    /// unsettled; durable, as a 1.0 message without a header is); consumers stay on 0-9-1.
    #[arg(long)]
    pub amqp1: bool,
    /// Declare the queues durable.
    #[arg(long)]
    pub durable: bool,
    /// Declare the queues with this `x-queue-type` (`quorum` for RabbitMQ's replicated queues).
    #[arg(long)]
    pub queue_type: Option<String>,
    /// Consumers' basic.qos prefetch-count (0 = unlimited); ignored with --auto-ack.
    #[arg(long, default_value_t = 1000)]
    pub prefetch: u16,
    /// Consume with no-ack (auto-ack).
    #[arg(long)]
    pub auto_ack: bool,
    /// Manual ack: one basic.ack (multiple=true) every K deliveries; 1 = one ack per message.
    #[arg(long, default_value_t = 1)]
    pub ack_every: u32,
    /// After publishing stops, wait at most this long for consumers to receive the rest.
    #[arg(long, default_value_t = 30.0)]
    pub drain_timeout_s: f64,
}

#[derive(Clone, Debug, Args)]
pub struct LatencyArgs {
    /// Messages per second.
    #[arg(long, default_value_t = 1000)]
    pub rate: u64,
    /// Body size in octets (at least 8: the send time is in the first 8).
    #[arg(long, default_value_t = 16)]
    pub size: usize,
    /// Publishing time.
    #[arg(long, default_value_t = 10.0)]
    pub duration_s: f64,
    /// At most this many messages; by default `--rate` × `--duration-s`, so the time ends the run.
    #[arg(long)]
    pub count: Option<u64>,
    /// After publishing stops, wait at most this long for the last messages.
    #[arg(long, default_value_t = 10.0)]
    pub drain_timeout_s: f64,
}

#[derive(Clone, Debug, Args)]
pub struct GetArgs {
    /// Polling connections, each doing one basic.get at a time.
    #[arg(long, default_value_t = 1)]
    pub pollers: u16,
    /// Messages put in the queue before the measured window (polls after it runs dry get get-empty).
    #[arg(long, default_value_t = 100_000)]
    pub prefill: u64,
    /// Body size in octets.
    #[arg(long, default_value_t = 16)]
    pub size: usize,
    /// Polling time.
    #[arg(long, default_value_t = 5.0)]
    pub duration_s: f64,
    /// At most this many gets in total; by default 2M per second of `--duration-s`, so the time
    /// ends the run.
    #[arg(long)]
    pub count: Option<u64>,
    /// Ack each fetched message (basic.get no-ack=false) instead of no-ack.
    #[arg(long)]
    pub ack: bool,
    /// Poll this existing queue instead (filled beforehand, e.g. a paged backlog after a
    /// restart): nothing is declared, pre-filled or deleted.
    #[arg(long)]
    pub queue: Option<String>,
}

#[derive(Clone, Debug, Args)]
pub struct IdleArgs {
    /// Connections to open (each with one open channel).
    #[arg(long, default_value_t = 200)]
    pub connections: u32,
    /// Hold them this long before measuring and closing.
    #[arg(long, default_value_t = 5.0)]
    pub hold_s: f64,
}

/// The most messages per second a run may move when no `--count` bounds it: above what any broker
/// takes on one machine, so a run's time ends it, and still a bound.
const CEILING_PER_S: f64 = 2_000_000.0;

/// `count`, or what `duration_s` at `per_s` comes to (at least 1).
fn count_or(count: Option<u64>, duration_s: f64, per_s: f64) -> u64 {
    count.unwrap_or_else(|| (duration_s.max(0.0) * per_s).ceil().max(1.0) as u64)
}

impl ThroughputArgs {
    /// The run's bound in messages (`--count`, or 2M per second of `--duration-s`).
    pub fn count(&self) -> u64 {
        count_or(self.count, self.duration_s, CEILING_PER_S)
    }
}

impl LatencyArgs {
    /// The run's bound in messages (`--count`, or `--rate` × `--duration-s`).
    pub fn count(&self) -> u64 {
        count_or(self.count, self.duration_s, self.rate as f64)
    }
}

impl GetArgs {
    /// The run's bound in gets (`--count`, or 2M per second of `--duration-s`).
    pub fn count(&self) -> u64 {
        count_or(self.count, self.duration_s, CEILING_PER_S)
    }
}

#[cfg(test)]
mod count_tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Throughput {
        #[command(flatten)]
        args: ThroughputArgs,
    }

    /// Issue 39: a long `--duration-s` is no longer cut short by a default count; `--count` still
    /// bounds a run when given.
    #[test]
    fn the_duration_ends_a_run_unless_a_count_is_given() {
        let long = Throughput::parse_from(["t", "--duration-s", "60"]).args;
        assert_eq!(long.count(), 120_000_000);
        let counted = Throughput::parse_from(["t", "--duration-s", "60", "--count", "1000"]).args;
        assert_eq!(counted.count(), 1000);
        assert_eq!(count_or(None, 10.0, 1000.0), 10_000);
        assert_eq!(count_or(None, 0.0, 1000.0), 1);
    }

    #[derive(Parser)]
    struct Deadlines {
        #[command(flatten)]
        args: DeadlineArgs,
    }

    /// Issue 39: deadline scenarios publish paced by default, so their lateness is the timers',
    /// not the publisher's backlog; `--rate 0` still publishes as fast as it can.
    #[test]
    fn deadline_scenarios_are_paced_unless_told() {
        assert_eq!(Deadlines::parse_from(["d"]).args.rate, 10_000);
        assert_eq!(Deadlines::parse_from(["d", "--rate", "0"]).args.rate, 0);
    }
}

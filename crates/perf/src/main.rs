//! `hourglass-perf`: load scenarios against any AMQP 0-9-1 broker, with the broker's CPU time
//! per message read from /proc. See `hourglass-perf --help` and docs/benchmarks.md.

mod cli;
mod client;
mod measure;
mod probe;
mod progress;
mod report;
mod scenario;
mod transport;
mod url;

use clap::Parser;

use crate::cli::{Cli, Scenario};
use crate::probe::Probe;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let url = url::AmqpUrl::parse(&cli.url)?;
    let broker = cli.broker_pid.map(Probe::new).transpose()?;
    let run = scenario::Run { url, broker, label: cli.label.clone() };
    match &cli.scenario {
        Scenario::Throughput(args) => scenario::throughput::run(&run, args),
        Scenario::Latency(args) => scenario::latency::run(&run, args),
        Scenario::Get(args) => scenario::get::run(&run, args),
        Scenario::IdleConnections(args) => scenario::idle::run(&run, args),
        Scenario::Ttl(args) => scenario::deadlines::run(&run, args, scenario::deadlines::Kind::Ttl),
        Scenario::Delayed(args) => scenario::deadlines::run(&run, args, scenario::deadlines::Kind::Delayed),
        Scenario::Visibility(args) => {
            scenario::deadlines::run(&run, args, scenario::deadlines::Kind::Visibility)
        }
        Scenario::Depth(args) => scenario::depth::run(&run, args),
        Scenario::Drain(args) => scenario::drain::run(&run, args),
        Scenario::Declares(args) => scenario::declares::run(&run, args),
        Scenario::ScaleFill(args) => scenario::scale::fill(&run, args),
        Scenario::ScaleTracers(args) => scenario::scale::tracers(&run, args),
        Scenario::ScaleTracersConsume(args) => scenario::scale::consume_tracers(&run, args),
    }
}

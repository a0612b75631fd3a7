//! `declares`: durable queue declarations as the broker's definitions grow. One connection
//! declares N durable queues, each bound to `amq.direct`, one at a time (each waits for its
//! `*-ok`, which a durable broker sends only once the definition is on disk), and reports the
//! rate and the broker's CPU per declaration for every slice of `--step` queues: a broker whose
//! cost per declaration grows with the number of queues it already has shows it here. The
//! queues are deleted at the end (also timed), unless `--keep-queues`.

use std::time::{Duration, Instant};

use anyhow::bail;
use hourglass_wire::{Method, QueueBind, QueueDeclare};
use serde_json::json;

use super::{delete_queues, queue_name, Run, CHANNEL};
use crate::cli::DeclaresArgs;
use crate::client::short;
use crate::measure::{round3, Window};
use crate::report;

/// A bound on N: each queue stays on the broker until the end of the run.
const MAX_QUEUES: u32 = 200_000;

pub fn run(run: &Run, args: &DeclaresArgs) -> anyhow::Result<()> {
    if args.queues == 0 || args.queues > MAX_QUEUES || args.step == 0 {
        bail!("--queues must be within 1..={MAX_QUEUES} and --step at least 1");
    }
    let deadline = Instant::now() + Duration::from_secs_f64(args.timeout_s);
    let mut client = run.connect()?;
    let names: Vec<String> = (0..args.queues).map(|i| format!("{}-{i}", queue_name("declares", 0))).collect();
    let mut slices = Vec::new();
    let mut declared = 0usize;
    let declaring = Instant::now();
    while declared < names.len() && Instant::now() < deadline {
        let slice = &names[declared..(declared + args.step as usize).min(names.len())];
        let window = Window::open(run.broker.as_ref())?;
        for name in slice {
            let queue = short(name)?;
            let declare = QueueDeclare { queue: queue.clone(), durable: true, ..Default::default() };
            expect(client.call(CHANNEL, declare)?, "queue.declare-ok")?;
            let bind = QueueBind {
                queue,
                exchange: short("amq.direct")?,
                routing_key: short(name)?,
                ..Default::default()
            };
            expect(client.call(CHANNEL, bind)?, "queue.bind-ok")?;
        }
        let measured = window.close()?;
        let n = slice.len() as u64;
        declared += slice.len();
        eprintln!("{declared:>7} queues: {}", measured.human(n, "declare"));
        slices.push(json!({
            "queues_after": declared,
            "declares_per_s": round3(measured.rate_per_s(n)),
            "broker_cpu_us_per_declare": measured.broker_cpu_us_per(n).map(round3),
        }));
    }
    let declare_s = declaring.elapsed().as_secs_f64();
    let deleting = Instant::now();
    if !args.keep_queues {
        delete_queues(&mut client, &names[..declared])?;
    }
    let delete_s = deleting.elapsed().as_secs_f64();
    let _ = client.close();
    let first = slices.first().and_then(|s| s["declares_per_s"].as_f64()).unwrap_or(0.0);
    let last = slices.last().and_then(|s| s["declares_per_s"].as_f64()).unwrap_or(0.0);
    let human = format!(
        "{declared} durable queues (declare + bind each): {first:.0}/s in the first {} → {last:.0}/s in the \
         last; deleted in {delete_s:.1}s",
        args.step
    );
    let params = json!({ "queues": args.queues, "step": args.step });
    let results = json!({
        "declared": declared,
        "declare_s": round3(declare_s),
        "slices": slices,
        "delete_s": round3(delete_s),
    });
    report::print("declares", run.label.as_deref(), &run.target(), &human, params, results);
    Ok(())
}

fn expect(reply: Method, name: &str) -> anyhow::Result<()> {
    if reply.name() != name {
        bail!("expected {name}, got {}", reply.name());
    }
    Ok(())
}

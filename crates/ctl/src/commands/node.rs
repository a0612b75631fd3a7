//! The node verbs of rabbitmqctl: status, ping, await_startup, environment, authenticate_user,
//! cluster_status — answered from the management API's overview and node objects.

use clap::Subcommand;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::Refused;
use crate::client::Client;
use crate::output::{Format, Formatter};

/// How often await_startup asks again.
const AWAIT_STARTUP_POLL: Duration = Duration::from_millis(500);

pub(super) fn ping(client: &Client, format: &Format) -> anyhow::Result<String> {
    let overview = reachable(client)?;
    let node = text(&overview["node"]);
    Ok(format!(
        "{}Ping succeeded\n",
        format.info(&format!("Will ping {node}. This checks that its API answers."))
    ))
}

/// Asks until the node answers or `timeout` has passed (then EX_UNAVAILABLE).
pub(super) fn await_startup(client: &Client, timeout: Duration) -> anyhow::Result<String> {
    let started = Instant::now();
    loop {
        match reachable(client) {
            Ok(_) => return Ok(String::new()),
            Err(error) if started.elapsed() >= timeout => return Err(error),
            Err(_) => std::thread::sleep(AWAIT_STARTUP_POLL),
        }
    }
}

/// A listener's address as a socket address: `[::]:5672` for an IPv6 one, never `:::5672`.
fn listener_address(ip: &str, port: &Value) -> String {
    match (ip.parse::<std::net::IpAddr>(), port.as_u64().and_then(|p| u16::try_from(p).ok())) {
        (Ok(ip), Some(port)) => std::net::SocketAddr::new(ip, port).to_string(),
        _ => format!("{ip}:{port}"),
    }
}

pub(super) fn status(client: &Client, format: &Format) -> anyhow::Result<String> {
    let overview = reachable(client)?;
    let node = this_node(client)?;
    let listeners: Vec<String> = overview["listeners"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|l| {
            format!("{} {}", text(&l["protocol"]), listener_address(&text(&l["ip_address"]), &l["port"]))
        })
        .collect();
    let totals = &overview["object_totals"];
    let pairs = [
        ("node", overview["node"].clone()),
        (
            "product",
            json!(format!("{} {}", text(&overview["product_name"]), text(&overview["product_version"]))),
        ),
        ("rabbitmq_version", overview["rabbitmq_version"].clone()),
        ("os_pid", node["os_pid"].clone()),
        ("uptime_seconds", json!(node["uptime"].as_u64().unwrap_or(0) / 1000)),
        ("listeners", json!(listeners)),
        ("memory_used_bytes", node["mem_used"].clone()),
        ("memory_limit_bytes", node["mem_limit"].clone()),
        ("memory_alarm", node["mem_alarm"].clone()),
        ("disk_free_bytes", node["disk_free"].clone()),
        ("disk_free_limit_bytes", node["disk_free_limit"].clone()),
        ("disk_free_alarm", node["disk_free_alarm"].clone()),
        ("file_descriptors_used", node["fd_used"].clone()),
        ("connections", totals["connections"].clone()),
        ("channels", totals["channels"].clone()),
        ("queues", totals["queues"].clone()),
        ("consumers", totals["consumers"].clone()),
    ];
    Ok(format.pairs(&format!("Status of node {} ...", text(&overview["node"])), &pairs))
}

pub(super) fn environment(client: &Client, format: &Format) -> anyhow::Result<String> {
    let overview = reachable(client)?;
    let node = this_node(client)?;
    let pairs = [
        ("cluster_name", overview["cluster_name"].clone()),
        ("listeners", overview["listeners"].clone()),
        ("vm_memory_high_watermark_bytes", node["mem_limit"].clone()),
        ("disk_free_limit_bytes", node["disk_free_limit"].clone()),
        ("enabled_plugins", node["enabled_plugins"].clone()),
        ("rates_mode", overview["rates_mode"].clone()),
    ];
    Ok(format.pairs("Application environment of node ...", &pairs))
}

/// Checks `username`'s password against the node (EX_DATAERR when refused).
pub(super) fn authenticate_user(
    client: &Client,
    username: &str,
    password: &str,
    format: &Format,
) -> anyhow::Result<String> {
    let as_user = client.with_credentials(username, password);
    match as_user.get("/api/whoami") {
        Ok(_) => Ok(format!("{}Success\n", format.info(&format!("Authenticating user \"{username}\" ...")))),
        Err(error) if error.to_string().starts_with("401") => {
            Err(Refused::AuthenticationFailed(username.to_owned()).into())
        }
        Err(error) => Err(error),
    }
}

pub(super) fn cluster_status(client: &Client, format: &Format) -> anyhow::Result<String> {
    let overview = reachable(client)?;
    let nodes = client.get("/api/nodes")?;
    let nodes = nodes.as_array().map(Vec::as_slice).unwrap_or_default();
    let names: Vec<String> = nodes.iter().map(|n| text(&n["name"])).collect();
    let running: Vec<String> =
        nodes.iter().filter(|n| n["running"].as_bool().unwrap_or(false)).map(|n| text(&n["name"])).collect();
    let mut alarms = Vec::new();
    for node in nodes {
        if node["mem_alarm"].as_bool().unwrap_or(false) {
            alarms.push(format!("memory alarm on node {}", text(&node["name"])));
        }
        if node["disk_free_alarm"].as_bool().unwrap_or(false) {
            alarms.push(format!("free disk space alarm on node {}", text(&node["name"])));
        }
    }
    let mut cluster_name = text(&overview["cluster_name"]);
    // A clustered node (docs/clustering.md): every member, the leader and replication state.
    let cluster = client.get("/api/cluster").unwrap_or(Value::Null);
    let members = cluster["nodes"].as_array().map(Vec::as_slice).unwrap_or_default();
    let (mut names, mut running) = (names, running);
    let mut replicas = Vec::new();
    if cluster["cluster_name"].is_string() {
        cluster_name = text(&cluster["cluster_name"]);
        names = members.iter().map(|n| text(&n["name"])).collect();
        running = members.iter().filter(|n| n["running"] == true).map(|n| text(&n["name"])).collect();
        replicas = members
            .iter()
            .map(|n| {
                let sync = if n["in_sync"] == true { "in sync" } else { "not in sync" };
                format!(
                    "{}: {}, {sync}, lag {} records, AMQP {}",
                    text(&n["name"]),
                    text(&n["role"]),
                    n["lag_records"],
                    text(&n["amqp"])
                )
            })
            .collect();
    }
    if format.formatter == Formatter::Json {
        let status = json!({
            "cluster_name": cluster_name, "disk_nodes": names, "running_nodes": running, "alarms": alarms,
            "leader": cluster["leader"], "term": cluster["term"], "nodes": cluster["nodes"],
        });
        return Ok(format!("{status}\n"));
    }
    let list = |items: &[String]| {
        if items.is_empty() {
            "(none)\n".to_owned()
        } else {
            format!("{}\n", items.join("\n"))
        }
    };
    let leader = if replicas.is_empty() {
        String::new()
    } else {
        format!(
            "\nLeader\n\n{} (term {})\n\nReplicas\n\n{}",
            text(&cluster["leader"]),
            cluster["term"],
            list(&replicas)
        )
    };
    Ok(format!(
        "{}Basics\n\nCluster name: {cluster_name}\n\nDisk Nodes\n\n{}\nRunning Nodes\n\n{}{leader}\nAlarms\n\n{}",
        format.info(&format!("Cluster status of node {} ...", text(&overview["node"]))),
        list(&names),
        list(&running),
        list(&alarms),
    ))
}

/// The overview, or EX_UNAVAILABLE naming the node's API when it does not answer.
fn reachable(client: &Client) -> anyhow::Result<Value> {
    client.get("/api/overview").map_err(|error| {
        let hint = format!(" * the management API at {} did not answer: {error:#}", client.base_url());
        Refused::NodeUnavailable(client.base_url().to_owned(), hint).into()
    })
}

/// This node's object from /api/nodes.
fn this_node(client: &Client) -> anyhow::Result<Value> {
    let nodes = client.get("/api/nodes")?;
    Ok(nodes.as_array().and_then(|n| n.first().cloned()).unwrap_or(Value::Null))
}

fn text(value: &Value) -> String {
    value.as_str().map_or_else(|| value.to_string(), str::to_owned)
}

/// `set_vm_memory_high_watermark FRACTION` or `set_vm_memory_high_watermark absolute SIZE`.
pub(super) fn set_vm_memory_high_watermark(
    client: &Client,
    value: &[String],
    format: &Format,
) -> anyhow::Result<String> {
    let body = match value {
        [fraction] => json!({ "fraction": number(fraction)? }),
        [kind, size] if kind == "absolute" => json!({ "absolute": size }),
        _ => anyhow::bail!("usage: set_vm_memory_high_watermark FRACTION | absolute SIZE"),
    };
    client.put("/api/node/memory-high-watermark", &body)?;
    Ok(format.info(&format!("Setting memory threshold to {} ...", value.join(" "))))
}

/// `set_disk_free_limit SIZE` or `set_disk_free_limit mem_relative FACTOR`.
pub(super) fn set_disk_free_limit(
    client: &Client,
    value: &[String],
    format: &Format,
) -> anyhow::Result<String> {
    let body = match value {
        [size] => json!({ "absolute": size }),
        [kind, factor] if kind == "mem_relative" => json!({ "mem_relative": number(factor)? }),
        _ => anyhow::bail!("usage: set_disk_free_limit SIZE | mem_relative FACTOR"),
    };
    client.put("/api/node/disk-free-limit", &body)?;
    Ok(format.info(&format!("Setting disk free limit to {} ...", value.join(" "))))
}

fn number(text: &str) -> anyhow::Result<f64> {
    text.parse().map_err(|_| anyhow::anyhow!("{text:?} is not a number"))
}

/// The node's verbs.
#[derive(Debug, Subcommand)]
#[command(rename_all = "snake_case")]
pub enum NodeCommand {
    /// The node's state: versions, uptime, listeners, memory and disk with their alarms, totals.
    Status,
    /// Checks that the node answers.
    Ping,
    /// Waits until the node answers (at most `--timeout` seconds).
    AwaitStartup {
        #[arg(long, short = 't', default_value_t = 300)]
        timeout: u64,
    },
    /// This tool's version.
    Version,
    /// The node's effective settings.
    Environment,
    /// Checks a user's credentials.
    AuthenticateUser { username: String, password: String },
    /// The cluster's name, its nodes (each node's role and state when clustered) and alarms.
    ClusterStatus,
    /// Sets the memory alarm's watermark until the next restart: a fraction of the machine's
    /// memory (`0.4`), or `absolute SIZE` (`absolute 2GB`).
    SetVmMemoryHighWatermark {
        #[arg(num_args = 1..=2, required = true)]
        value: Vec<String>,
    },
    /// Sets the disk alarm's free-space limit until the next restart: `SIZE` (`50MB`), or
    /// `mem_relative FACTOR` (a multiple of the machine's memory).
    SetDiskFreeLimit {
        #[arg(num_args = 1..=2, required = true)]
        value: Vec<String>,
    },
}

/// Runs one of these verbs.
pub(super) fn run(
    client: &Client,
    _vhost: &str,
    command: NodeCommand,
    format: &Format,
) -> anyhow::Result<String> {
    match command {
        NodeCommand::Status => status(client, format),
        NodeCommand::Ping => ping(client, format),
        NodeCommand::AwaitStartup { timeout } => {
            await_startup(client, std::time::Duration::from_secs(timeout))
        }
        NodeCommand::Version => Ok(format!("{}\n", env!("CARGO_PKG_VERSION"))),
        NodeCommand::Environment => environment(client, format),
        NodeCommand::AuthenticateUser { username, password } => {
            authenticate_user(client, &username, &password, format)
        }
        NodeCommand::ClusterStatus => cluster_status(client, format),
        NodeCommand::SetVmMemoryHighWatermark { value } => {
            set_vm_memory_high_watermark(client, &value, format)
        }
        NodeCommand::SetDiskFreeLimit { value } => set_disk_free_limit(client, &value, format),
    }
}

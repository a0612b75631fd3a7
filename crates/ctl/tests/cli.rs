//! hourglass-ctl against a broker served in process on loopback.

use std::process::Command;

use hourglass_server::{Config, Server};

/// Starts a broker on OS-chosen loopback ports in a background runtime; returns its API URL.
fn start_broker() -> String {
    start_broker_with_amqp().0
}

/// Starts a broker as `start_broker`; returns its API URL and its AMQP address.
fn start_broker_with_amqp() -> (String, std::net::SocketAddr) {
    start_broker_on([127, 0, 0, 1].into())
}

/// Starts a broker listening on `bind` (`::` listens on every address, IPv4 too); returns its API
/// URL and its AMQP address, both on loopback.
fn start_broker_on(bind: std::net::IpAddr) -> (String, std::net::SocketAddr) {
    let (url, amqp, _) = start_broker_serving_sqs(bind);
    (url, amqp)
}

/// Starts a broker as `start_broker_on`, its SQS endpoint on an OS-chosen port too; returns its
/// API URL, its AMQP address and the SQS endpoint's port.
fn start_broker_serving_sqs(bind: std::net::IpAddr) -> (String, std::net::SocketAddr, u16) {
    // One data directory per broker: tests run in parallel and a directory takes one broker.
    static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        runtime.block_on(async move {
            let config = Config {
                bind: bind.into(),
                amqp_port: 0,
                http_port: 0,
                metrics_port: 0,
                sqs_port: Some(0),
                // Its own data directory: the default ./data would land in the source tree.
                data_dir: std::env::temp_dir().join(format!("hourglass-ctl-test-{}-{n}", std::process::id())),
                ..Config::default()
            };
            let server = Server::bind(config).await.expect("bind");
            let sqs = server.sqs_addr().expect("addr").port();
            tx.send((server.http_addr().expect("addr"), server.amqp_addr().expect("addr"), sqs))
                .expect("send");
            server.run(std::future::pending()).await.expect("run");
        });
    });
    let (http, amqp, sqs): (std::net::SocketAddr, std::net::SocketAddr, u16) =
        rx.recv().expect("broker started");
    let loopback = |addr: std::net::SocketAddr| match addr.ip() {
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => {
            std::net::SocketAddr::from(([127, 0, 0, 1], addr.port()))
        }
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => {
            std::net::SocketAddr::from(([127, 0, 0, 1], addr.port()))
        }
        _ => addr,
    };
    (format!("http://{}", loopback(http)), loopback(amqp), sqs)
}

/// Runs hourglass-ctl with rows only (`-q --no-table-headers`), as scripts use it.
fn ctl(url: &str, args: &[&str]) -> (bool, String, String) {
    let quiet: Vec<&str> = ["-q", "--no-table-headers"].into_iter().chain(args.iter().copied()).collect();
    ctl_as_typed(url, &quiet)
}

/// Runs hourglass-ctl with exactly these arguments.
fn ctl_as_typed(url: &str, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_hourglass-ctl"))
        .arg("--url")
        .arg(url)
        .args(args)
        .output()
        .expect("run ctl");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Runs hourglass-ctl with exactly these arguments: its exit code, stdout and stderr.
fn ctl_exit(url: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let output =
        Command::new(env!("CARGO_BIN_EXE_hourglass-ctl")).arg("--url").arg(url).args(args).output().unwrap();
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status.code(), text(&output.stdout), text(&output.stderr))
}

/// Issue 39: what an operator used to rabbitmqctl expects (RabbitMQ 3.10's `rabbitmqctl`, run
/// beside it): a line saying what a verb does (none with -q), its errors and exit codes for what
/// is not there, a bad column or an unknown verb refused with 64, and `--formatter pretty_table`.
#[test]
fn rabbitmqctl_answers_on_success_errors_and_usage() {
    let url = start_broker();
    let (code, out, _) = ctl_exit(&url, &["add_user", "ann", "secret"]);
    assert_eq!(code, Some(0));
    assert_eq!(
        out,
        "Adding user \"ann\" ...\nDone. Don't forget to grant the user permissions to some virtual hosts! \
         See 'hourglass-ctl help set_permissions' to learn more.\n"
    );
    assert_eq!(ctl_exit(&url, &["-q", "add_user", "bea", "secret"]), (Some(0), String::new(), String::new()));
    let (_, out, _) = ctl_exit(&url, &["set_permissions", "ann", ".*", ".*", ".*"]);
    assert_eq!(out, "Setting permissions for user \"ann\" in vhost \"/\" ...\n");
    let (_, out, _) = ctl_exit(&url, &["set_policy", "--priority", "3", "p1", "^x", r#"{"max-length":5}"#]);
    assert_eq!(
        out,
        "Setting policy \"p1\" for pattern \"^x\" to \"{\"max-length\":5}\" with priority \"3\" for vhost \"/\" ...\n"
    );
    let defs = std::env::temp_dir().join(format!("hg-ctl-defs-{}.json", std::process::id()));
    let queue =
        r#"{"queues":[{"name":"jobs","vhost":"/","durable":true,"auto_delete":false,"arguments":{}}]}"#;
    std::fs::write(&defs, queue).unwrap();
    let (code, out, _) = ctl_exit(&url, &["import_definitions", defs.to_str().unwrap()]);
    std::fs::remove_file(&defs).unwrap();
    assert_eq!(
        (code, out),
        (Some(0), format!("Importing definitions in JSON from a file at \"{}\" ...\n", defs.display()))
    );
    let (code, out, _) = ctl_exit(&url, &["purge_queue", "jobs"]);
    assert_eq!((code, out.as_str()), (Some(0), "Purging queue 'jobs' in vhost '/' ...\n"));
    let (code, out, _) = ctl_exit(&url, &["delete_queue", "jobs"]);
    assert_eq!((code, out.as_str()), (Some(0), "Deleting queue 'jobs' on vhost '/' ...\n"));
    let (code, out, err) = ctl_exit(&url, &["purge_queue", "jobs"]);
    assert_eq!((code, out.as_str(), err.as_str()), (Some(69), "", "Error:\nnot_found\n"), "no such queue");
    let (code, _, err) = ctl_exit(&url, &["delete_user", "nobody"]);
    assert_eq!((code, err.as_str()), (Some(67), "Error:\nUser \"nobody\" does not exist\n"));
    let (_, out, _) = ctl_exit(&url, &["delete_user", "bea"]);
    assert_eq!(out, "Deleting user \"bea\" ...\n");

    let (code, out, err) = ctl_exit(&url, &["list_queues", "name", "bogus"]);
    assert_eq!(code, Some(64));
    assert_eq!(
        (out.as_str(), err.as_str()),
        ("", "Error (argument validation): Info key(s) bogus are not supported\n")
    );
    let (code, out, _) = ctl_exit(&url, &["-q", "list_queues", "name", "messages_delayed"]);
    assert_eq!(
        (code, out.as_str()),
        (Some(0), "name\tmessages_delayed\n"),
        "Hourglass's own columns, no queue"
    );
    let (code, _, err) = ctl_exit(&url, &["bogusverb"]);
    assert_eq!(code, Some(64));
    assert!(err.starts_with("Command 'bogusverb' not found."), "{err}");
    assert_eq!(ctl_exit(&url, &["list_queues", "--bogus-flag"]).0, Some(64));
    assert_eq!(ctl_exit(&url, &["help"]).0, Some(0));

    let (code, out, _) = ctl_exit(&url, &["-q", "--formatter", "pretty_table", "list_users"]);
    assert_eq!(code, Some(0));
    assert_eq!(
        out,
        "┌───────┬─────────────────┐\n│ name  │ tags            │\n├───────┼─────────────────┤\n│ ann   │ []              │\n\
         ├───────┼─────────────────┤\n│ guest │ [administrator] │\n└───────┴─────────────────┘\n"
    );
}

/// add_user of an existing user is refused as rabbitmqctl refuses it (user_already_exists, exit
/// code 70), and the user keeps its password and tags.
#[test]
fn add_user_refuses_an_existing_user() {
    let url = start_broker();
    assert!(ctl(&url, &["add_user", "bob", "first"]).0);
    assert!(ctl(&url, &["set_user_tags", "bob", "monitoring"]).0);
    let output = Command::new(env!("CARGO_BIN_EXE_hourglass-ctl"))
        .args(["--url", &url, "add_user", "bob", "second"])
        .output()
        .expect("run ctl");
    assert_eq!(output.status.code(), Some(70));
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(err.contains("user_already_exists: bob"), "{err}");
    let (_, out, _) = ctl(&url, &["list_users"]);
    assert!(out.contains("bob\t[monitoring]\n"), "tags kept: {out}");
    let (_, _, err) = ctl(&url, &["--user", "bob", "--password", "second", "list_queues"]);
    assert!(err.contains("Login failed"), "the second password was not set: {err}");
    let (_, _, err) = ctl(&url, &["--user", "bob", "--password", "first", "list_queues"]);
    assert!(!err.contains("Login failed"), "the first password still works: {err}");
}

/// rabbitmqctl's habits: an info line and a header row on listings (-q drops the info line),
/// JSON with --formatter json, node verbs, errors naming what was not found.
#[test]
fn rabbitmqctl_output_habits_and_node_verbs() {
    let url = start_broker();
    let (_, out, _) = ctl_as_typed(&url, &["list_vhosts"]);
    assert_eq!(out, "Listing vhosts ...\nname\n/\n");
    let (_, out, _) = ctl_as_typed(&url, &["-q", "list_users"]);
    assert_eq!(out, "name\ttags\nguest\t[administrator]\n");
    let (_, out, _) = ctl_as_typed(&url, &["--formatter", "json", "list_queues", "name", "messages"]);
    assert_eq!(out, "[]\n");
    let (ok, out, _) = ctl_as_typed(&url, &["-q", "ping"]);
    assert!(ok && out == "Ping succeeded\n", "{out}");
    let (ok, out, _) = ctl_as_typed(&url, &["--formatter", "json", "status"]);
    let status: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(ok && status["rabbitmq_version"] == "3.13.7" && status["memory_alarm"] == false, "{out}");
    let (ok, out, _) = ctl_as_typed(&url, &["cluster_status"]);
    assert!(ok && out.contains("Running Nodes") && out.contains("Alarms\n\n(none)"), "{out}");
    assert!(ctl_as_typed(&url, &["await_startup", "--timeout", "5"]).0);
    let (ok, out, _) = ctl_as_typed(&url, &["authenticate_user", "guest", "guest"]);
    assert!(ok && out.ends_with("Success\n"), "{out}");
    let refused = Command::new(env!("CARGO_BIN_EXE_hourglass-ctl"))
        .args(["--url", &url, "authenticate_user", "guest", "wrong"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(65));
    let (code, _, err) = ctl_exit(&url, &["delete_queue", "missing"]);
    assert_eq!((code, err.as_str()), (Some(64), "Error:\nQueue not found\n"), "as rabbitmqctl 3.10");
    // A node that does not answer is EX_UNAVAILABLE.
    let down = Command::new(env!("CARGO_BIN_EXE_hourglass-ctl"))
        .args(["--url", "http://127.0.0.1:9", "ping"])
        .output()
        .unwrap();
    assert_eq!(down.status.code(), Some(69));
}

/// The rabbitmqctl verbs work end to end and print tab-separated rows.
#[test]
fn rabbitmqctl_verbs_against_a_running_broker() {
    let url = start_broker();
    assert!(ctl(&url, &["add_vhost", "dev"]).0);
    let (_, out, _) = ctl(&url, &["list_vhosts"]);
    assert_eq!(out, "/\ndev\n");
    assert!(ctl(&url, &["add_user", "ann", "secret"]).0);
    assert!(ctl(&url, &["set_user_tags", "ann", "management"]).0);
    assert!(ctl(&url, &["-p", "dev", "set_permissions", "ann", ".*", ".*", ".*"]).0);
    let (_, out, _) = ctl(&url, &["-p", "dev", "list_permissions"]);
    assert!(out.contains("ann\t.*\t.*\t.*\n"), "{out}");
    let (_, out, _) = ctl(&url, &["list_users"]);
    assert!(out.contains("ann\t[management]\n") && out.contains("guest\t[administrator]\n"), "{out}");
    let (ok, _, err) = ctl(&url, &["--user", "ann", "--password", "wrong", "list_queues"]);
    assert!(!ok && err.contains("401"), "{err}");

    let export = std::env::temp_dir().join(format!("hourglass-ctl-defs-{}.json", std::process::id()));
    let defs = serde_json::json!({"queues": [{"name": "jobs", "vhost": "dev", "durable": true, "auto_delete": false, "arguments": {}}],
        "bindings": [{"source": "amq.direct", "vhost": "dev", "destination": "jobs", "destination_type": "queue", "routing_key": "j", "arguments": {}}]});
    std::fs::write(&export, defs.to_string()).unwrap();
    let (ok, _, err) = ctl(&url, &["import_definitions", export.to_str().unwrap()]);
    assert!(ok, "{err}");
    let (_, out, _) = ctl(&url, &["-p", "dev", "list_queues", "name", "messages", "consumers"]);
    assert_eq!(out, "jobs\t0\t0\n");
    let (_, out, _) = ctl(&url, &["-p", "dev", "list_bindings"]);
    assert!(out.contains("amq.direct\texchange\tjobs\tqueue\tj\t{}\n"), "{out}");
    let (_, out, _) = ctl(&url, &["-p", "dev", "list_exchanges"]);
    assert!(out.contains("amq.topic\ttopic\n"), "{out}");
    assert!(ctl(&url, &["export_definitions", export.to_str().unwrap()]).0);
    let exported: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&export).unwrap()).unwrap();
    assert_eq!(exported["queues"][0]["name"], "jobs");
    let _ = std::fs::remove_file(&export);

    // Policies: rabbitmqctl's arguments and list_policies' columns; the queue takes the policy.
    let (ok, _, err) = ctl(
        &url,
        &[
            "-p",
            "dev",
            "set_policy",
            "--priority",
            "2",
            "--apply-to",
            "queues",
            "ttl",
            "^jobs$",
            r#"{"message-ttl":60000}"#,
        ],
    );
    assert!(ok, "{err}");
    let (_, out, _) = ctl(&url, &["-p", "dev", "list_policies"]);
    assert_eq!(out, "dev\tttl\t^jobs$\tqueues\t{\"message-ttl\":60000}\t2\n");
    let (_, out, _) = ctl(&url, &["-p", "dev", "list_queues", "name", "policy"]);
    assert_eq!(out, "jobs\tttl\n");
    let (ok, _, err) = ctl(&url, &["-p", "dev", "set_policy", "bad", ".*", r#"{"nope":1}"#]);
    assert!(!ok && err.contains("400") && err.contains("not recognised"), "{err}");
    assert!(ctl(&url, &["-p", "dev", "set_operator_policy", "cap", ".*", r#"{"max-length":5}"#]).0);
    let (_, out, _) = ctl(&url, &["-p", "dev", "list_operator_policies"]);
    assert_eq!(out, "dev\tcap\t.*\tall\t{\"max-length\":5}\t0\n");
    assert!(ctl(&url, &["-p", "dev", "clear_operator_policy", "cap"]).0);
    assert!(ctl(&url, &["-p", "dev", "clear_policy", "ttl"]).0);
    let (ok, _, err) = ctl(&url, &["-p", "dev", "clear_policy", "ttl"]);
    assert!(!ok && err.contains("404"), "{err}");
    assert_eq!(ctl(&url, &["-p", "dev", "list_policies"]).1, "");

    assert!(ctl(&url, &["-p", "dev", "purge_queue", "jobs"]).0);
    assert!(ctl(&url, &["-p", "dev", "delete_queue", "jobs"]).0);
    let (ok, _, err) = ctl(&url, &["-p", "dev", "delete_queue", "jobs"]);
    assert!(!ok && err == "Error:\nQueue not found\n", "{err}");
    assert_eq!(ctl(&url, &["list_connections"]).1, "");
    assert!(ctl(&url, &["delete_user", "ann"]).0);
    assert!(ctl(&url, &["delete_vhost", "dev"]).0);
}

/// The limit verbs: set_vhost_limits replaces the vhost's limits, set_user_limits adds to the
/// user's, list_* print rabbitmqctl's JSON object (or rows with --global), clear_* remove them;
/// a bad definition fails with the API's 400 and RabbitMQ's validation text.
#[test]
fn limit_verbs_against_a_running_broker() {
    let url = start_broker();
    assert!(ctl(&url, &["add_user", "lim", "pw"]).0);
    let (ok, out, err) =
        ctl_as_typed(&url, &["set_vhost_limits", r#"{"max-connections": 10, "max-queues": 5}"#]);
    assert!(ok, "{err}");
    assert_eq!(
        out,
        "Setting vhost limits to \"{\"max-connections\": 10, \"max-queues\": 5}\" for vhost \"/\" ...\n"
    );
    assert!(ctl(&url, &["set_vhost_limits", r#"{"max-queues": -1}"#]).0);
    assert_eq!(ctl(&url, &["list_vhost_limits"]).1, "{\"max-queues\":-1}\n", "replaced, -1 kept");
    assert_eq!(ctl(&url, &["list_vhost_limits", "--global"]).1, "/\t{\"max-queues\":-1}\n");
    let (ok, _, err) = ctl(&url, &["set_vhost_limits", r#"{"max-conn": 1}"#]);
    assert!(!ok && err.contains("400") && err.contains("Unrecognised terms"), "{err}");
    assert!(ctl(&url, &["clear_vhost_limits"]).0);
    assert_eq!(ctl(&url, &["list_vhost_limits"]).1, "{}\n");

    assert!(ctl(&url, &["set_user_limits", "lim", r#"{"max-connections": 2}"#]).0);
    assert!(ctl(&url, &["set_user_limits", "lim", r#"{"max-channels": 20}"#]).0);
    let (_, out, _) = ctl(&url, &["list_user_limits", "--user", "lim"]);
    assert_eq!(out, "{\"max-channels\":20,\"max-connections\":2}\n", "added, not replaced");
    let (_, out, _) = ctl_as_typed(&url, &["clear_user_limits", "lim", "max-channels"]);
    assert_eq!(out, "Clearing \"max-channels\" limit for user \"lim\" ...\n");
    assert_eq!(ctl(&url, &["list_user_limits", "--global"]).1, "lim\t{\"max-connections\":2}\n");
    assert!(ctl(&url, &["clear_user_limits", "lim", "all"]).0);
    assert_eq!(ctl(&url, &["list_user_limits", "--user", "lim"]).1, "{}\n");
    assert_eq!(ctl(&url, &["list_user_limits"]).1, "{}\n", "guest by default");
}

/// The topic permission verbs: set, list (rabbitmqctl's columns), clear one exchange's, clear all.
#[test]
fn topic_permission_verbs_against_a_running_broker() {
    let url = start_broker();
    assert!(ctl(&url, &["add_user", "tp", "pw"]).0);
    assert!(ctl(&url, &["set_topic_permissions", "tp", "amq.topic", "^tp\\.", "^r\\."]).0);
    assert!(ctl(&url, &["set_topic_permissions", "tp", "logs", ".*", ""]).0);
    let (_, out, _) = ctl_as_typed(&url, &["list_topic_permissions"]);
    assert_eq!(
        out,
        "Listing topic permissions for vhost \"/\" ...\nuser\texchange\twrite\tread\ntp\tamq.topic\t^tp\\.\t^r\\.\ntp\tlogs\t.*\t\n"
    );
    assert!(ctl(&url, &["clear_topic_permissions", "tp", "logs"]).0);
    assert_eq!(ctl(&url, &["list_topic_permissions"]).1, "tp\tamq.topic\t^tp\\.\t^r\\.\n");
    let (ok, _, err) = ctl(&url, &["set_topic_permissions", "tp", "amq.topic", "(", ""]);
    assert!(!ok && err.contains("400"), "{err}");
    assert!(ctl(&url, &["clear_topic_permissions", "tp"]).0);
    assert_eq!(ctl(&url, &["list_topic_permissions"]).1, "");
}

/// The time verbs: a message published through the API into a delay queue is listed, rescheduled
/// and cancelled; a visibility change with an unknown receipt handle is refused with 404.
#[test]
fn delayed_and_visibility_verbs_against_a_running_broker() {
    let url = start_broker();
    let defs = serde_json::json!({"queues": [{"name": "later", "vhost": "/", "durable": false,
        "auto_delete": false, "arguments": {"x-delivery-delay": 60000}}]});
    let path = std::env::temp_dir().join(format!("hourglass-ctl-delayed-{}.json", std::process::id()));
    std::fs::write(&path, defs.to_string()).unwrap();
    assert!(ctl(&url, &["import_definitions", path.to_str().unwrap()]).0);
    let _ = std::fs::remove_file(&path);

    let (ok, out, err) = ctl(&url, &["publish_message", "", "later", "hello", "--header", "n=7"]);
    assert!(ok, "{err}");
    assert_eq!(out, "routed\ttrue\n");
    let (_, listed, _) = ctl(&url, &["list_delayed", "later"]);
    let row: Vec<&str> = listed.trim_end().split('\t').collect();
    assert_eq!(row.len(), 4, "{listed}");
    let (id, due_in_ms) = (row[0], row[1].parse::<u64>().unwrap());
    assert!(due_in_ms <= 60_000 && due_in_ms > 50_000, "{listed}");
    assert_eq!(&row[2..], ["later", "5"]);

    let (ok, _, err) = ctl(&url, &["reschedule_delayed", "later", id, "--delay-ms", "3600000"]);
    assert!(ok, "{err}");
    let (_, listed, _) = ctl(&url, &["list_delayed", "later"]);
    let due_in_ms: u64 = listed.split('\t').nth(1).unwrap().parse().unwrap();
    assert!(due_in_ms > 3_500_000, "{listed}");
    assert!(ctl(&url, &["cancel_delayed", "later", id]).0);
    assert_eq!(ctl(&url, &["list_delayed", "later"]).1, "");
    let (ok, _, err) = ctl(&url, &["cancel_delayed", "later", id]);
    assert!(!ok && err.contains("404"), "{err}");

    // By the AMQP message_id property (issue 23): published over the HTTP API with one.
    let publish = serde_json::json!({"routing_key": "later", "payload": "x", "payload_encoding": "string",
        "properties": {"message_id": "order-9"}});
    let published = ureq::post(&format!("{url}/api/exchanges/%2F/amq.default/publish"))
        .header("Authorization", "Basic Z3Vlc3Q6Z3Vlc3Q=")
        .content_type("application/json")
        .send(publish.to_string());
    assert!(published.is_ok(), "{published:?}");
    let (ok, out, err) =
        ctl(&url, &["reschedule_delayed", "later", "--message-id", "order-9", "--delay-ms", "7200000"]);
    assert!(ok, "{err}");
    assert_eq!(out, "rescheduled\t1\n");
    let (ok, out, err) = ctl(&url, &["cancel_delayed", "later", "--message-id", "order-9"]);
    assert!(ok, "{err}");
    assert_eq!(out, "cancelled\t1\n");
    let (ok, _, err) = ctl(&url, &["cancel_delayed", "later", "--message-id", "order-9"]);
    assert!(!ok && err.contains("404"), "{err}");

    let (ok, _, err) = ctl(&url, &["change_visibility", "later", "no-such-handle", "1000"]);
    assert!(!ok && err.contains("404") && err.contains("receipt handle"), "{err}");
    assert_eq!(ctl(&url, &["list_channels"]).1, "");
    assert_eq!(ctl(&url, &["list_consumers"]).1, "");
}

/// `set_vm_memory_high_watermark` and `set_disk_free_limit` change the alarms' limits of a
/// running node: a limit below what the node uses raises the alarm at once, a sane one clears it;
/// nonsense is refused with the reason.
#[test]
fn alarm_limit_verbs_raise_and_clear_the_alarms() {
    let url = start_broker();
    let alarm_is = |field: &str, expected: bool| {
        // The monitor samples again as soon as a limit changes; allow it a moment.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let (_, out, _) = ctl_as_typed(&url, &["--formatter", "json", "status"]);
            let status: serde_json::Value = serde_json::from_str(&out).unwrap();
            if status[field] == expected {
                return;
            }
            assert!(std::time::Instant::now() < deadline, "{field} is not {expected}: {out}");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };
    alarm_is("memory_alarm", false);
    let (ok, out, err) = ctl_as_typed(&url, &["set_vm_memory_high_watermark", "absolute", "1MB"]);
    assert!(ok && out.starts_with("Setting memory threshold to absolute 1MB"), "{out}{err}");
    alarm_is("memory_alarm", true);
    assert!(ctl(&url, &["set_vm_memory_high_watermark", "0.9"]).0);
    alarm_is("memory_alarm", false);
    assert!(ctl(&url, &["set_disk_free_limit", "1000000GB"]).0);
    alarm_is("disk_free_alarm", true);
    assert!(ctl(&url, &["set_disk_free_limit", "mem_relative", "0.001"]).0);
    alarm_is("disk_free_alarm", false);
    let (ok, _, err) = ctl(&url, &["set_vm_memory_high_watermark", "1.5"]);
    assert!(!ok && err.contains("\"fraction\" must be a number from 0 to 1"), "{err}");
    let (ok, _, err) = ctl(&url, &["set_disk_free_limit", "5 parsecs"]);
    assert!(!ok && err.contains("unknown unit"), "{err}");
}

/// close_all_connections closes the vhost's connections (at most `--limit`), or every vhost's
/// with `--global`.
#[test]
fn close_all_connections_closes_a_vhosts_connections_or_all() {
    let (url, amqp) = start_broker_with_amqp();
    assert!(ctl(&url, &["add_vhost", "other"]).0);
    assert!(ctl(&url, &["set_permissions", "-p", "other", "guest", ".*", ".*", ".*"]).0);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let open = |vhost: &str| {
        let uri = format!("amqp://guest:guest@{amqp}/{}", if vhost == "/" { "%2f" } else { vhost });
        runtime.block_on(lapin::Connection::connect(&uri, Default::default())).expect("connect")
    };
    let (root, other) = ([open("/"), open("/"), open("/")], open("other"));
    let open_count =
        |connections: &[&lapin::Connection]| connections.iter().filter(|c| c.status().connected()).count();
    let wait_for = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what}");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };

    let (ok, out, err) = ctl_as_typed(&url, &["close_all_connections", "--limit", "2", "maintenance"]);
    assert!(ok, "{err}");
    assert!(out.contains("Closing all connections in vhost / (limit: 2)"), "{out}");
    wait_for("two of vhost /'s connections closed", &|| open_count(&[&root[0], &root[1], &root[2]]) == 1);
    assert!(other.status().connected(), "another vhost's connection is left alone");

    assert!(ctl(&url, &["close_all_connections", "--global", "maintenance"]).0);
    wait_for("every connection closed", &|| open_count(&[&root[0], &root[1], &root[2], &other]) == 0);
    assert_eq!(ctl(&url, &["list_connections"]).1, "");
}

/// trace_on / trace_off switch the vhost's firehose, as `list_vhosts name tracing` shows; an
/// unknown vhost is an error, not created.
#[test]
fn trace_on_and_off_switch_the_vhosts_firehose() {
    let url = start_broker();
    assert_eq!(ctl(&url, &["list_vhosts", "name", "tracing"]).1, "/\tfalse\n");
    let (ok, out, err) = ctl_as_typed(&url, &["trace_on"]);
    assert!(ok, "{err}");
    assert_eq!(out, "Starting tracing for vhost \"/\" ...\n");
    assert_eq!(ctl(&url, &["list_vhosts", "name", "tracing"]).1, "/\ttrue\n");
    assert!(ctl(&url, &["trace_off", "-p", "/"]).0);
    assert_eq!(ctl(&url, &["list_vhosts", "name", "tracing"]).1, "/\tfalse\n");
    let (ok, _, err) = ctl(&url, &["trace_on", "-p", "nowhere"]);
    assert!(!ok && err.contains("nowhere"), "{err}");
    assert_eq!(ctl(&url, &["list_vhosts"]).1, "/\n");
}

/// Every verb says what it does in `--help` (issue 25: a dozen had an empty line), and the help
/// no longer says the cluster is "one node until clustering exists".
#[test]
fn every_verb_has_a_help_line() {
    let output = Command::new(env!("CARGO_BIN_EXE_hourglass-ctl")).arg("--help").output().expect("run ctl");
    let help = String::from_utf8_lossy(&output.stdout);
    let commands =
        help.split("Commands:").nth(1).and_then(|c| c.split("Options:").next()).expect("Commands:");
    let verbs: Vec<&str> =
        commands.lines().filter(|l| l.starts_with("  ") && !l.starts_with("   ")).collect();
    assert!(verbs.len() > 40, "{help}");
    let bare: Vec<&str> =
        verbs.iter().filter(|l| l.split_whitespace().count() < 2).map(|l| l.trim()).collect();
    assert!(bare.is_empty(), "verbs without help: {bare:?}");
    assert!(!help.contains("until clustering exists"), "{help}");
}

/// list_consumers prints the columns its help names (`queue_name channel_pid ...`), the channel
/// named as the API names it; list_channels' `connection` column is the connection's name.
#[test]
fn list_consumers_prints_the_columns_its_help_names() {
    let (url, amqp) = start_broker_with_amqp();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let uri = format!("amqp://guest:guest@{amqp}/%2f");
    let connection = runtime.block_on(lapin::Connection::connect(&uri, Default::default())).expect("connect");
    let channel = runtime.block_on(connection.create_channel()).expect("channel");
    runtime
        .block_on(channel.queue_declare("work".into(), Default::default(), Default::default()))
        .expect("declare");
    // Kept: a dropped lapin consumer is cancelled.
    let _consumer = runtime
        .block_on(channel.basic_consume(
            "work".into(),
            "tag-1".into(),
            Default::default(),
            Default::default(),
        ))
        .expect("consume");
    let (ok, out, err) = ctl_as_typed(&url, &["-q", "list_consumers"]);
    assert!(ok, "{err}");
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("queue_name\tchannel_pid\tconsumer_tag\tack_required\tprefetch_count"));
    let row: Vec<&str> = lines.next().expect("a row").split('\t').collect();
    assert_eq!(row[0], "work", "{out}");
    assert!(row[1].contains(&format!(" -> {amqp} (1)")), "the channel's name: {out}");
    assert_eq!(row[2..], ["tag-1", "true", "0"], "{out}");
    let (_, out, _) = ctl_as_typed(&url, &["-q", "list_channels"]);
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("connection\tnumber\tuser\tconsumer_count\tmessages_unacknowledged"));
    let row = lines.next().expect("a row");
    assert!(row.contains(&format!(" -> {amqp}\t1\tguest\t1\t0")), "{out}");
}

/// `status` prints a listener on `::` as the socket address `[::]:PORT`, not `:::PORT`, and
/// names the SQS endpoint with the others (issue 40, item 24: it was missing).
#[test]
fn status_prints_listeners_as_socket_addresses() {
    let (url, amqp, sqs) = start_broker_serving_sqs(std::net::Ipv6Addr::UNSPECIFIED.into());
    let (ok, out, err) = ctl_as_typed(&url, &["-q", "status"]);
    assert!(ok, "{err}");
    let listeners = out.lines().find(|l| l.starts_with("listeners: ")).expect("listeners line");
    // A machine without IPv6 listens on 0.0.0.0 instead.
    for (protocol, port) in [("amqp", amqp.port()), ("sqs", sqs)] {
        let expected = [format!("{protocol} [::]:{port}"), format!("{protocol} 0.0.0.0:{port}")];
        assert!(expected.iter().any(|e| listeners.contains(e.as_str())), "{listeners}");
    }
    assert!(!listeners.contains(":::"), "{listeners}");
}

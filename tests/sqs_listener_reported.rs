//! The SQS endpoint is reported where the other listeners are (issue 40, item 24): before, with
//! `--sqs-port 0` the port it bound could only be found with `ss`, because neither the start-up
//! "listening" line nor `/api/overview`'s `listeners` (which the web UI's listener table and
//! `hourglass-ctl status` show) named it. Over the real binary.

mod common;

use common::sqs_wire::{sqs, sqs_broker};
use common::{http, RunningBroker};
use serde_json::{json, Value};

/// `(protocol, port)` of each listener `/api/overview` lists.
async fn listeners(broker: &RunningBroker) -> Vec<(String, u64)> {
    let (status, body) = http(broker, "GET", "/api/overview", "").await;
    assert_eq!(status, 200, "{body}");
    let overview: Value = serde_json::from_str(&body).expect("JSON");
    overview["listeners"]
        .as_array()
        .expect("listeners")
        .iter()
        .map(|l| (l["protocol"].as_str().unwrap_or("").to_owned(), l["port"].as_u64().unwrap_or(0)))
        .collect()
}

/// Started on port 0, the endpoint's address is in the start line (`sqs=`), it answers a signed
/// request there, and the overview lists it as `sqs` with that port.
#[tokio::test]
async fn the_sqs_port_the_os_chose_is_in_the_start_line_and_the_overview() {
    let (broker, sqs_addr) = sqs_broker(&[]);
    assert_ne!(sqs_addr.port(), 0, "the start line names the bound port, not 0");
    let (status, answer) = sqs(sqs_addr, "ListQueues", json!({})).await;
    assert_eq!(status, 200, "the named address serves SQS: {answer}");
    let listed = listeners(&broker).await;
    assert!(listed.contains(&("sqs".to_owned(), u64::from(sqs_addr.port()))), "{listed:?}");
    assert!(listed.iter().any(|(protocol, _)| protocol == "amqp"), "{listed:?}");
}

/// Without `--sqs-port` the start line says `sqs=off` and the overview lists no SQS listener.
#[tokio::test]
async fn without_the_endpoint_the_start_line_says_off_and_the_overview_lists_none() {
    let broker = RunningBroker::start();
    assert_eq!(broker.sqs, None);
    let line = broker.log_lines_with("hourglass listening");
    assert!(line.iter().any(|l| l.contains("sqs=off")), "{line:?}");
    let listed = listeners(&broker).await;
    assert!(listed.iter().all(|(protocol, _)| !protocol.starts_with("sqs")), "{listed:?}");
}

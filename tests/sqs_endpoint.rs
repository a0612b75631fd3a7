//! The SQS endpoint over the real binary (issue 26): the Query protocol that older SDKs speak,
//! beside AWS JSON 1.0 on the same port, and sends refused while a resource alarm is in effect.
//! The real clients' runs are `tests/clients/sqs_*.py` and `tests/clients/sqs_node`.

mod common;

use std::time::{Duration, Instant};

use common::sqs_wire::{sqs, sqs_broker, sqs_query};
use common::RunningBroker;
use serde_json::json;

/// Every wait in these tests ends by this.
const WAIT: Duration = Duration::from_secs(15);

async fn node_alarmed(broker: &RunningBroker) -> bool {
    let (status, body) = common::http(broker, "GET", "/api/nodes", "").await;
    assert_eq!(status, 200, "{body}");
    body.contains(r#""disk_free_alarm":true"#)
}

/// A disk alarm blocks AMQP publishers; an SQS send meanwhile is refused with a 503 that SDKs
/// retry, and stores nothing. Other operations go on. Once the alarm clears, sends are taken.
#[tokio::test]
async fn sqs_sends_are_refused_while_a_resource_alarm_is_in_effect() {
    // No file system has a petabyte free: the disk alarm is raised at the first sample.
    let (broker, addr) = sqs_broker(&["--disk-free-limit", "1000000000GB"]);
    let deadline = Instant::now() + WAIT;
    while !node_alarmed(&broker).await {
        assert!(Instant::now() < deadline, "the disk alarm was not raised");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, created) = sqs(addr, "CreateQueue", json!({"QueueName": "held"})).await;
    assert_eq!(status, 200, "{created}");
    let url = created["QueueUrl"].as_str().unwrap().to_owned();
    let send = json!({"QueueUrl": url, "MessageBody": "while low on disk"});
    let (status, refused) = sqs(addr, "SendMessage", send.clone()).await;
    assert_eq!(status, 503, "{refused}");
    assert_eq!(refused["__type"], "com.amazon.coral.service#ServiceUnavailable");
    assert!(refused["message"].as_str().unwrap().contains("low on disk"), "{refused}");
    let batch = json!({"QueueUrl": url, "Entries": [{"Id": "a", "MessageBody": "x"}]});
    assert_eq!(sqs(addr, "SendMessageBatch", batch).await.0, 503);
    let (status, form) =
        sqs_query(addr, "/", "Action=SendMessage&QueueUrl=http%3A%2F%2Fh%2F%252F%2Fheld&MessageBody=q").await;
    assert_eq!(status, 503, "{form}");
    assert!(
        form.contains("<Code>ServiceUnavailable</Code>") && form.contains("<Type>Receiver</Type>"),
        "{form}"
    );
    let count = json!({"QueueUrl": url, "AttributeNames": ["ApproximateNumberOfMessages"]});
    let (_, attributes) = sqs(addr, "GetQueueAttributes", count.clone()).await;
    assert_eq!(attributes["Attributes"]["ApproximateNumberOfMessages"], "0");

    let (status, body) =
        common::http(&broker, "PUT", "/api/node/disk-free-limit", r#"{"absolute": "1MB"}"#).await;
    assert_eq!(status, 204, "{body}");
    let deadline = Instant::now() + WAIT;
    loop {
        let (status, sent) = sqs(addr, "SendMessage", send.clone()).await;
        if status == 200 {
            break;
        }
        assert_eq!(status, 503, "{sent}");
        assert!(Instant::now() < deadline, "sends still refused after the alarm cleared");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, attributes) = sqs(addr, "GetQueueAttributes", count).await;
    assert_eq!(attributes["Attributes"]["ApproximateNumberOfMessages"], "1");
}

/// The text of the first `<name>` element of an XML answer.
fn element<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    let start = xml.find(&format!("<{name}>"))? + name.len() + 2;
    let end = start + xml[start..].find(&format!("</{name}>"))?;
    Some(&xml[start..end])
}

/// The Query protocol on the same port and the same queues as JSON: a queue made with a
/// flattened attribute, a message sent with a message attribute to the queue's own URL (no
/// `QueueUrl` parameter), received with its attributes and deleted; an error as XML with its
/// Query code. Old botocore and the AWS CLI run it for real in `tests/clients/sqs_query.py`.
#[tokio::test]
async fn query_protocol_requests_act_on_the_same_queues_as_json_ones() {
    let (_broker, addr) = sqs_broker(&[]);
    let (status, created) = sqs_query(
        addr,
        "/",
        "Action=CreateQueue&Version=2012-11-05&QueueName=forms\
         &Attribute.1.Name=VisibilityTimeout&Attribute.1.Value=45",
    )
    .await;
    assert_eq!(status, 200, "{created}");
    assert!(created.contains("<CreateQueueResponse xmlns=\"http://queue.amazonaws.com/doc/2012-11-05/\">"));
    let url = element(&created, "QueueUrl").expect("a QueueUrl").to_owned();
    assert!(url.ends_with("/%2F/forms"), "{url}");
    let (_, attributes) =
        sqs(addr, "GetQueueAttributes", json!({"QueueUrl": url, "AttributeNames": ["VisibilityTimeout"]}))
            .await;
    assert_eq!(attributes["Attributes"]["VisibilityTimeout"], "45", "{attributes}");

    let path = "/%2F/forms";
    let (status, sent) = sqs_query(
        addr,
        path,
        "Action=SendMessage&MessageBody=a%26b+%3Cc%3E\
         &MessageAttribute.1.Name=colour&MessageAttribute.1.Value.DataType=String\
         &MessageAttribute.1.Value.StringValue=blue",
    )
    .await;
    assert_eq!(status, 200, "{sent}");
    let message_id = element(&sent, "MessageId").expect("a MessageId").to_owned();
    // The body's MD5 as AWS computes it: md5("a&b <c>").
    assert_eq!(element(&sent, "MD5OfMessageBody"), Some("dfca713405194bf4e643de2de404e944"), "{sent}");

    let (status, got) = sqs_query(
        addr,
        path,
        "Action=ReceiveMessage&AttributeName.1=All&MessageAttributeName.1=All&WaitTimeSeconds=5",
    )
    .await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(element(&got, "MessageId"), Some(message_id.as_str()), "{got}");
    assert_eq!(element(&got, "Body"), Some("a&amp;b &lt;c&gt;"), "{got}");
    assert!(
        got.contains("<Attribute><Name>ApproximateReceiveCount</Name><Value>1</Value></Attribute>"),
        "{got}"
    );
    assert!(
        got.contains("<MessageAttribute><Name>colour</Name><Value><DataType>String</DataType><StringValue>blue</StringValue></Value></MessageAttribute>"),
        "{got}"
    );
    let handle = element(&got, "ReceiptHandle").expect("a ReceiptHandle");
    let form = format!("Action=DeleteMessage&ReceiptHandle={}", form_encode(handle));
    let (status, deleted) = sqs_query(addr, path, &form).await;
    assert_eq!(status, 200, "{deleted}");
    let (_, attributes) = sqs(
        addr,
        "GetQueueAttributes",
        json!({"QueueUrl": url, "AttributeNames": ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]}),
    )
    .await;
    assert_eq!(attributes["Attributes"]["ApproximateNumberOfMessages"], "0");
    assert_eq!(attributes["Attributes"]["ApproximateNumberOfMessagesNotVisible"], "0");

    let (status, error) = sqs_query(addr, "/", "Action=GetQueueUrl&QueueName=nowhere").await;
    assert_eq!(status, 400);
    assert_eq!(element(&error, "Code"), Some("AWS.SimpleQueueService.NonExistentQueue"), "{error}");
    assert_eq!(element(&error, "Type"), Some("Sender"));
    let (status, error) = sqs_query(addr, "/", "Action=NoSuchThing").await;
    assert_eq!((status, element(&error, "Code")), (400, Some("InvalidAction")), "{error}");
}

fn form_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// CreateQueue of an existing queue answers its URL unless an attribute given differs from the
/// queue's: attributes left out are not compared (they were, as their defaults). Queues made
/// over SQS show when they were made and last changed. A 1 MiB message is taken (AWS's limit
/// since 2025), one byte more is not.
#[tokio::test]
async fn create_queue_compares_only_the_attributes_given_and_messages_reach_one_mib() {
    let (_broker, addr) = sqs_broker(&[]);
    let made = json!({"QueueName": "kept", "Attributes": {"VisibilityTimeout": "5"}});
    let (status, created) = sqs(addr, "CreateQueue", made.clone()).await;
    assert_eq!(status, 200, "{created}");
    let (status, again) = sqs(addr, "CreateQueue", json!({"QueueName": "kept"})).await;
    assert_eq!((status, &again["QueueUrl"]), (200, &created["QueueUrl"]), "{again}");
    assert_eq!(sqs(addr, "CreateQueue", made).await.0, 200);
    let different = json!({"QueueName": "kept", "Attributes": {"VisibilityTimeout": "6"}});
    let (status, refused) = sqs(addr, "CreateQueue", different).await;
    assert_eq!((status, refused["__type"].as_str()), (400, Some("com.amazonaws.sqs#QueueNameExists")));
    // The attribute the client sent is named, not our argument (issue 40, item 14).
    let text = refused["message"].as_str().unwrap();
    assert!(text.ends_with("a different value for attribute VisibilityTimeout"), "{text}");

    let url = created["QueueUrl"].as_str().unwrap().to_owned();
    let times = json!({"QueueUrl": url, "AttributeNames": ["CreatedTimestamp", "LastModifiedTimestamp"]});
    let (_, before) = sqs(addr, "GetQueueAttributes", times.clone()).await;
    let created_s: u64 = before["Attributes"]["CreatedTimestamp"].as_str().unwrap().parse().unwrap();
    let now_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    assert!(now_s.abs_diff(created_s) < 60, "{before}");
    assert_eq!(before["Attributes"]["LastModifiedTimestamp"], before["Attributes"]["CreatedTimestamp"]);
    let set = json!({"QueueUrl": url, "Attributes": {"DelaySeconds": "1"}});
    assert_eq!(sqs(addr, "SetQueueAttributes", set).await.0, 200);
    let (_, after) = sqs(addr, "GetQueueAttributes", times).await;
    let modified: u64 = after["Attributes"]["LastModifiedTimestamp"].as_str().unwrap().parse().unwrap();
    assert!(modified >= created_s, "{after}");

    let (_, attributes) =
        sqs(addr, "GetQueueAttributes", json!({"QueueUrl": url, "AttributeNames": ["MaximumMessageSize"]}))
            .await;
    assert_eq!(attributes["Attributes"]["MaximumMessageSize"], "1048576");
    let body = "m".repeat(1_048_576);
    let (status, sent) = sqs(addr, "SendMessage", json!({"QueueUrl": url, "MessageBody": body})).await;
    assert_eq!(status, 200, "{sent}");
    let over = "m".repeat(1_048_577);
    let (status, refused) = sqs(addr, "SendMessage", json!({"QueueUrl": url, "MessageBody": over})).await;
    assert_eq!(
        (status, refused["__type"].as_str()),
        (400, Some("com.amazon.coral.service#InvalidParameterValueException"))
    );
}

/// Requests AWS accepts or refuses, answered as AWS answers them (issue 40, items 5, 6, 7 and
/// 11): a bare queue name as `QueueUrl`; `DelaySeconds` 0 on a FIFO send (any other value is
/// refused); a missing queue or a malformed URL is `QueueDoesNotExist`, for DeleteQueue too; an
/// empty batch names its own operation's entry type.
#[tokio::test]
async fn requests_are_taken_and_refused_as_aws_does() {
    let (_broker, addr) = sqs_broker(&[]);
    let (status, created) = sqs(addr, "CreateQueue", json!({"QueueName": "plain"})).await;
    assert_eq!(status, 200, "{created}");
    let (status, sent) =
        sqs(addr, "SendMessage", json!({"QueueUrl": "plain", "MessageBody": "by name"})).await;
    assert_eq!(status, 200, "a bare queue name: {sent}");
    let (_, got) = sqs(addr, "ReceiveMessage", json!({"QueueUrl": "plain"})).await;
    assert_eq!(got["Messages"][0]["Body"], "by name");

    let fifo = json!({"QueueName": "ordered.fifo", "Attributes": {"FifoQueue": "true"}});
    let (status, created) = sqs(addr, "CreateQueue", fifo).await;
    assert_eq!(status, 200, "{created}");
    let url = created["QueueUrl"].as_str().unwrap();
    let send = |delay: u64| json!({"QueueUrl": url, "MessageBody": "x", "MessageGroupId": "g", "MessageDeduplicationId": delay.to_string(), "DelaySeconds": delay});
    assert_eq!(sqs(addr, "SendMessage", send(0)).await.0, 200, "DelaySeconds 0 on a FIFO queue");
    let (status, refused) = sqs(addr, "SendMessage", send(5)).await;
    assert_eq!(
        (status, refused["__type"].as_str()),
        (400, Some("com.amazon.coral.service#InvalidParameterValueException"))
    );

    let missing = |url: &str| json!({"QueueUrl": url});
    for url in [format!("http://{addr}/%2F/nowhere"), "http://h/not/a/queue/url".into(), "nowhere".into()] {
        for action in ["DeleteQueue", "GetQueueAttributes", "ReceiveMessage"] {
            let (status, refused) = sqs(addr, action, missing(&url)).await;
            assert_eq!(
                (status, refused["__type"].as_str()),
                (400, Some("com.amazonaws.sqs#QueueDoesNotExist")),
                "{action} {url}: {refused}"
            );
        }
    }
    for (action, entry) in [
        ("SendMessageBatch", "SendMessageBatchRequestEntry"),
        ("DeleteMessageBatch", "DeleteMessageBatchRequestEntry"),
        ("ChangeMessageVisibilityBatch", "ChangeMessageVisibilityBatchRequestEntry"),
    ] {
        let (status, refused) = sqs(addr, action, json!({"QueueUrl": "plain", "Entries": []})).await;
        assert_eq!(status, 400, "{refused}");
        let text = refused["message"].as_str().unwrap();
        assert_eq!(text, format!("There should be at least one {entry} in the request."), "{action}");
    }
}

/// A sender's `AWSTraceHeader` (MessageSystemAttributes) is kept and returned on receive, with
/// its MD5 in the send's answer (issue 40, item 13: it was dropped); another system attribute
/// is refused.
#[tokio::test]
async fn an_aws_trace_header_travels_with_its_message() {
    let (_broker, addr) = sqs_broker(&[]);
    let (status, created) = sqs(addr, "CreateQueue", json!({"QueueName": "traced"})).await;
    assert_eq!(status, 200, "{created}");
    let trace = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
    let system = json!({"AWSTraceHeader": {"DataType": "String", "StringValue": trace}});
    let send = json!({"QueueUrl": "traced", "MessageBody": "x", "MessageSystemAttributes": system});
    let (status, sent) = sqs(addr, "SendMessage", send).await;
    assert_eq!(status, 200, "{sent}");
    assert_eq!(sent["MD5OfMessageSystemAttributes"].as_str().map(str::len), Some(32), "{sent}");
    let receive = json!({"QueueUrl": "traced", "MessageSystemAttributeNames": ["AWSTraceHeader"]});
    let (_, got) = sqs(addr, "ReceiveMessage", receive).await;
    assert_eq!(got["Messages"][0]["Attributes"]["AWSTraceHeader"], trace, "{got}");
    assert!(got["Messages"][0].get("MessageAttributes").is_none(), "not a message attribute: {got}");
    let other = json!({"Foo": {"DataType": "String", "StringValue": "x"}});
    let send = json!({"QueueUrl": "traced", "MessageBody": "x", "MessageSystemAttributes": other});
    assert_eq!(sqs(addr, "SendMessage", send).await.0, 400);
}

/// PurgeQueue takes the messages received and not deleted too, as AWS does (issue 40, item 4).
#[tokio::test]
async fn purge_takes_the_messages_in_flight() {
    let (_broker, addr) = sqs_broker(&[]);
    assert_eq!(sqs(addr, "CreateQueue", json!({"QueueName": "purged"})).await.0, 200);
    for body in ["held", "ready"] {
        assert_eq!(sqs(addr, "SendMessage", json!({"QueueUrl": "purged", "MessageBody": body})).await.0, 200);
    }
    let (_, got) = sqs(addr, "ReceiveMessage", json!({"QueueUrl": "purged", "VisibilityTimeout": 600})).await;
    assert_eq!(got["Messages"].as_array().map(Vec::len), Some(1), "{got}");
    assert_eq!(sqs(addr, "PurgeQueue", json!({"QueueUrl": "purged"})).await.0, 200);
    let counts = json!({"QueueUrl": "purged", "AttributeNames": ["All"]});
    let (_, attributes) = sqs(addr, "GetQueueAttributes", counts).await;
    let attributes = &attributes["Attributes"];
    assert_eq!(
        (&attributes["ApproximateNumberOfMessages"], &attributes["ApproximateNumberOfMessagesNotVisible"]),
        (&json!("0"), &json!("0")),
        "{attributes}"
    );
}

/// Issue 41: GetQueueAttributes shows a queue's visibility timeout as it runs. An operator
/// policy caps the 30 s CreateQueue set; the receive path already obeyed the cap while the
/// attributes still showed the declared 30.
#[tokio::test]
async fn queue_attributes_show_the_visibility_timeout_an_operator_policy_caps() {
    let (broker, addr) = sqs_broker(&[]);
    let attributes = json!({"VisibilityTimeout": "30", "DelaySeconds": "0"});
    let (status, created) =
        sqs(addr, "CreateQueue", json!({"QueueName": "capped", "Attributes": attributes})).await;
    assert_eq!(status, 200, "{created}");
    let url = created["QueueUrl"].as_str().unwrap().to_owned();
    let cap =
        json!({"pattern": "^capped$", "apply-to": "queues", "definition": {"visibility-timeout": 2000}});
    let (status, body) =
        common::http(&broker, "PUT", "/api/operator-policies/%2f/cap", &cap.to_string()).await;
    assert!(status == 201 || status == 204, "{status} {body}");
    let get = json!({"QueueUrl": url, "AttributeNames": ["All"]});
    let (status, shown) = sqs(addr, "GetQueueAttributes", get).await;
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["Attributes"]["VisibilityTimeout"], "2", "{shown}");
    // And it runs so: a message received and not deleted is visible again after 2 s, not 30.
    let hidden = hidden_for(addr, &url, "again").await;
    assert!(hidden >= Duration::from_millis(1_900), "visible again after {hidden:?}");
}

/// Sends `body` to the queue at `url`, receives it without deleting it, and polls until it is
/// received again: how long it stayed hidden (at most [`WAIT`]).
async fn hidden_for(addr: std::net::SocketAddr, url: &str, body: &str) -> Duration {
    assert_eq!(sqs(addr, "SendMessage", json!({"QueueUrl": url, "MessageBody": body})).await.0, 200);
    let receive = json!({"QueueUrl": url, "WaitTimeSeconds": 1});
    let (_, first) = sqs(addr, "ReceiveMessage", receive.clone()).await;
    assert_eq!(first["Messages"][0]["Body"], body, "{first}");
    let received = Instant::now();
    loop {
        let (_, again) = sqs(addr, "ReceiveMessage", receive.clone()).await;
        if again["Messages"][0]["Body"] == body {
            return received.elapsed();
        }
        assert!(received.elapsed() < WAIT, "not visible again within {WAIT:?}");
    }
}

/// Issue 41: a user policy's `visibility-timeout` applies to a queue made over SQS without a
/// `VisibilityTimeout`. CreateQueue used to store SQS's 30 s default as the queue's own argument,
/// which a user policy cannot override: the message stayed hidden for 30 s. Giving the default
/// again on a second CreateQueue is still no conflict.
#[tokio::test]
async fn a_user_policy_sets_the_visibility_timeout_of_a_queue_made_over_sqs() {
    let (broker, addr) = sqs_broker(&[]);
    let (status, created) = sqs(addr, "CreateQueue", json!({"QueueName": "ruled"})).await;
    assert_eq!(status, 200, "{created}");
    let url = created["QueueUrl"].as_str().unwrap().to_owned();
    let again = json!({"QueueName": "ruled", "Attributes": {"VisibilityTimeout": "30"}});
    let (status, body) = sqs(addr, "CreateQueue", again).await;
    assert_eq!(status, 200, "the default given again is the queue's own: {body}");
    let policy =
        json!({"pattern": "^ruled$", "apply-to": "queues", "definition": {"visibility-timeout": 1000}});
    let (status, body) = common::http(&broker, "PUT", "/api/policies/%2f/short", &policy.to_string()).await;
    assert!(status == 201 || status == 204, "{status} {body}");
    let get = json!({"QueueUrl": url, "AttributeNames": ["VisibilityTimeout"]});
    let (_, shown) = sqs(addr, "GetQueueAttributes", get).await;
    assert_eq!(shown["Attributes"]["VisibilityTimeout"], "1", "{shown}");
    let hidden = hidden_for(addr, &url, "back").await;
    assert!(hidden >= Duration::from_millis(900), "visible again after {hidden:?}");
}

/// Issue 41: a receive reads the queue's SQS settings where the queue is, in the same request
/// as the receive (they were read in a round trip of their own): `ReceiveMessageWaitTimeSeconds`
/// makes a receive without `WaitTimeSeconds` a long poll, which a send ends, and a queue's
/// `VisibilityTimeout` of 0 leaves a received message visible at once.
#[tokio::test]
async fn a_receive_follows_the_queue_s_wait_and_zero_visibility() {
    let (_broker, addr) = sqs_broker(&[]);
    let attributes = json!({"ReceiveMessageWaitTimeSeconds": "1", "VisibilityTimeout": "0"});
    let (status, created) =
        sqs(addr, "CreateQueue", json!({"QueueName": "waiting", "Attributes": attributes})).await;
    assert_eq!(status, 200, "{created}");
    let url = created["QueueUrl"].as_str().unwrap().to_owned();
    let receive = json!({"QueueUrl": url});
    let started = Instant::now();
    let (status, empty) = sqs(addr, "ReceiveMessage", receive.clone()).await;
    assert_eq!(status, 200, "{empty}");
    assert!(empty.get("Messages").is_none(), "{empty}");
    assert!(started.elapsed() >= Duration::from_millis(900), "waited {:?}", started.elapsed());
    assert!(started.elapsed() < WAIT, "waited {:?}", started.elapsed());
    let sender = {
        let url = url.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            sqs(addr, "SendMessage", json!({"QueueUrl": url, "MessageBody": "woke"})).await.0
        })
    };
    let (_, got) = sqs(addr, "ReceiveMessage", receive.clone()).await;
    assert_eq!(got["Messages"][0]["Body"], "woke", "a send ends the queue's long poll: {got}");
    assert_eq!(sender.await.unwrap(), 200);
    let (_, again) = sqs(addr, "ReceiveMessage", receive).await;
    assert_eq!(again["Messages"][0]["Body"], "woke", "visible again at once: {again}");
}

/// Issue 41: GetQueueAttributes shows the queue's SQS settings as the broker parsed them, the
/// ones its sends and receives obey, not its raw arguments. A queue declared over the HTTP API
/// with odd `x-sqs-*` values showed them as they were (a `VisibilityTimeout` of 0 and a
/// `MaximumMessageSize` of 5 MB) while a receive hid its message for SQS's 30 s and a send was
/// held to 1 MiB.
#[tokio::test]
async fn queue_attributes_are_the_settings_sends_and_receives_obey() {
    let (broker, addr) = sqs_broker(&[]);
    let declared = json!({"durable": true, "arguments": {
        "x-sqs-visibility-timeout": 7, "x-sqs-maximum-message-size": 5_000_000,
        "x-sqs-receive-message-wait-time-seconds": "soon"}});
    let (status, body) = common::http(&broker, "PUT", "/api/queues/%2F/odd", &declared.to_string()).await;
    assert_eq!(status, 201, "{body}");
    let url = format!("http://{addr}/%2F/odd");
    let names = ["VisibilityTimeout", "MaximumMessageSize", "ReceiveMessageWaitTimeSeconds"];
    let (status, shown) =
        sqs(addr, "GetQueueAttributes", json!({"QueueUrl": url, "AttributeNames": names})).await;
    assert_eq!(status, 200, "{shown}");
    let shown = &shown["Attributes"];
    assert_eq!(
        (&shown["VisibilityTimeout"], &shown["ReceiveMessageWaitTimeSeconds"]),
        (&json!("30"), &json!("0"))
    );
    assert_eq!(shown["MaximumMessageSize"], "1048576", "{shown}");
    let (status, sent) = sqs(addr, "SendMessage", json!({"QueueUrl": url, "MessageBody": "hidden"})).await;
    assert_eq!(status, 200, "{sent}");
    let (_, got) = sqs(addr, "ReceiveMessage", json!({"QueueUrl": url})).await;
    assert_eq!(got["Messages"][0]["Body"], "hidden", "{got}");
    let (_, again) = sqs(addr, "ReceiveMessage", json!({"QueueUrl": url})).await;
    assert!(again.get("Messages").is_none(), "hidden for the 30 s shown: {again}");
    let too_long = "x".repeat(1_048_577);
    let (status, refused) = sqs(addr, "SendMessage", json!({"QueueUrl": url, "MessageBody": too_long})).await;
    assert_eq!(status, 400, "{refused}");
    assert!(refused["message"].as_str().unwrap().contains("shorter than 1048576 bytes"), "{refused}");
}

/// A queue that dead-letters to a named exchange after a delivery limit has no RedrivePolicy:
/// its routing key names no queue. It used to show one naming the routing key as the target.
/// One made with a RedrivePolicy still shows it.
#[tokio::test]
async fn only_dead_lettering_to_a_queue_is_a_redrive_policy() {
    let (broker, addr) = sqs_broker(&[]);
    let declared = json!({"durable": true, "arguments": {
        "x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "k", "x-delivery-limit": 3}});
    let (status, body) =
        common::http(&broker, "PUT", "/api/queues/%2F/to-exchange", &declared.to_string()).await;
    assert_eq!(status, 201, "{body}");
    let all = |url: String| json!({"QueueUrl": url, "AttributeNames": ["All"]});
    let (_, shown) = sqs(addr, "GetQueueAttributes", all(format!("http://{addr}/%2F/to-exchange"))).await;
    assert!(shown["Attributes"].get("RedrivePolicy").is_none(), "{shown}");
    let (_, dlq) = sqs(addr, "CreateQueue", json!({"QueueName": "dlq"})).await;
    let (_, dlq) = sqs(addr, "GetQueueAttributes", all(dlq["QueueUrl"].as_str().unwrap().to_owned())).await;
    let arn = dlq["Attributes"]["QueueArn"].as_str().unwrap().to_owned();
    let redrive = json!({"deadLetterTargetArn": arn, "maxReceiveCount": 4}).to_string();
    let made = json!({"QueueName": "redriven", "Attributes": {"RedrivePolicy": redrive}});
    let (status, made) = sqs(addr, "CreateQueue", made).await;
    assert_eq!(status, 200, "{made}");
    let (_, shown) =
        sqs(addr, "GetQueueAttributes", all(made["QueueUrl"].as_str().unwrap().to_owned())).await;
    let policy: serde_json::Value =
        serde_json::from_str(shown["Attributes"]["RedrivePolicy"].as_str().unwrap()).unwrap();
    assert_eq!(policy, json!({"deadLetterTargetArn": arn, "maxReceiveCount": 4}));
}

/// Issue 41: a receive from a queue whose head is paged out (20 messages resident) asks for the
/// read off the broker's thread, and waits for it even as a short poll: every receive of the
/// backlog answers with messages, in the order they were sent, as AWS answers a short poll on a
/// deep queue with messages. Ended by `WAIT` per receive.
#[tokio::test]
async fn short_polls_of_a_paged_backlog_each_answer_with_messages() {
    const MESSAGES: usize = 300;
    let (broker, addr) = sqs_broker(&["--queue-resident-messages", "20"]);
    let url = paged_backlog(&broker, addr, json!({"QueueName": "deep"}), MESSAGES, |_| json!({})).await;
    let received = short_poll_all(addr, &url, MESSAGES, false).await;
    let expected: Vec<_> = (0..MESSAGES).map(|n| format!("m{n:03}")).collect();
    assert_eq!(received, expected);
}

/// Issue 41: the same for an SQS FIFO queue, whose receives take each free group's next message
/// wherever it sits: a receive whose chosen message is paged out asks for it off the broker's
/// thread and waits for it, a short poll too, so every short poll (each deleting what it got,
/// freeing its groups) answers with messages, and each group comes in the order it was sent.
#[tokio::test]
async fn short_polls_of_a_paged_fifo_backlog_each_answer_with_messages() {
    const MESSAGES: usize = 300;
    let (broker, addr) = sqs_broker(&["--queue-resident-messages", "20"]);
    let fifo = json!({"QueueName": "deep.fifo", "Attributes": {"FifoQueue": "true", "ContentBasedDeduplication": "true"}});
    let group = |n: usize| format!("g{}", n % 3);
    let url = paged_backlog(&broker, addr, fifo, MESSAGES, |n| json!({"MessageGroupId": group(n)})).await;
    let received = short_poll_all(addr, &url, MESSAGES, true).await;
    for g in 0..3 {
        let of_group: Vec<_> =
            received.iter().filter(|body| body[1..].parse::<usize>().unwrap() % 3 == g).cloned().collect();
        let sent: Vec<_> = (0..MESSAGES).filter(|n| n % 3 == g).map(|n| format!("m{n:03}")).collect();
        assert_eq!(of_group, sent, "group g{g} in order");
    }
}

/// A queue made with `create` (a CreateQueue input) holding `messages` sent in batches of 10
/// (`m000`, `m001`, …, each entry extended by `entry(n)`), paged out past the broker's resident
/// limit; its URL.
async fn paged_backlog(
    broker: &common::RunningBroker,
    addr: std::net::SocketAddr,
    create: serde_json::Value,
    messages: usize,
    entry: impl Fn(usize) -> serde_json::Value,
) -> String {
    let name = create["QueueName"].as_str().unwrap().to_owned();
    let (status, created) = sqs(addr, "CreateQueue", create).await;
    assert_eq!(status, 200, "{created}");
    let url = created["QueueUrl"].as_str().unwrap().to_owned();
    for batch in 0..messages / 10 {
        let entries: Vec<_> = (0..10)
            .map(|i| {
                let n = batch * 10 + i;
                let mut sent = json!({"Id": format!("e{i}"), "MessageBody": format!("m{n:03}")});
                sent.as_object_mut().unwrap().extend(entry(n).as_object().unwrap().clone());
                sent
            })
            .collect();
        let (status, sent) =
            sqs(addr, "SendMessageBatch", json!({"QueueUrl": url, "Entries": entries})).await;
        assert_eq!((status, sent["Successful"].as_array().map(Vec::len)), (200, Some(10)), "{sent}");
    }
    let (status, shown) = common::http(broker, "GET", &format!("/api/queues/%2F/{name}"), "").await;
    let shown: serde_json::Value = serde_json::from_str(&shown).unwrap_or_default();
    let paged = shown["messages_paged_out"].as_u64().unwrap_or_default();
    assert!(status == 200 && paged > 0, "the backlog is paged out: {status} {shown}");
    url
}

/// The bodies of `messages` received from `url` by short polls of 10, each of which must answer
/// with messages; each deleted once received when `delete` says so. Ended by `WAIT` per receive.
async fn short_poll_all(addr: std::net::SocketAddr, url: &str, messages: usize, delete: bool) -> Vec<String> {
    let mut received = Vec::new();
    while received.len() < messages {
        let receive = json!({"QueueUrl": url, "MaxNumberOfMessages": 10});
        let (status, got) = tokio::time::timeout(WAIT, sqs(addr, "ReceiveMessage", receive)).await.unwrap();
        assert_eq!(status, 200, "{got}");
        let batch = got["Messages"].as_array().cloned().unwrap_or_default();
        assert!(!batch.is_empty(), "a short poll after {} of {messages} came back empty", received.len());
        received.extend(batch.iter().map(|m| m["Body"].as_str().unwrap().to_owned()));
        if delete {
            let entries: Vec<_> = batch
                .iter()
                .enumerate()
                .map(|(i, m)| json!({"Id": format!("d{i}"), "ReceiptHandle": m["ReceiptHandle"]}))
                .collect();
            let delete = sqs(addr, "DeleteMessageBatch", json!({"QueueUrl": url, "Entries": entries}));
            let (status, deleted) = tokio::time::timeout(WAIT, delete).await.unwrap();
            assert_eq!((status, deleted["Failed"].as_array().map(Vec::len)), (200, Some(0)), "{deleted}");
        }
    }
    received
}

//! SQS's older wire protocol, the Query protocol: form-encoded `Action=…` parameters (in a POST
//! body or a GET's query string) and XML answers, what SDKs released before the JSON protocol
//! speak (botocore before 1.31.81 and between 1.33 and 1.34.90, the AWS CLI v1 built on them,
//! the AWS SDK for Java 1.x, PHP and Ruby SDKs of that time).
//!
//! A Query request is turned into the JSON protocol's input (`to_input`), so both protocols run
//! the same operations, and the JSON answer is written as the Query protocol's XML
//! (`answer_xml`, `error_xml`). The names each side uses are AWS's service model's: a list or map
//! member is "flattened" under a singular name (`AttributeName.1`, `Attribute.1.Name` /
//! `Attribute.1.Value`, `SendMessageBatchRequestEntry.1.Id`; `<QueueUrl>` repeated, `<Message>`
//! repeated, `<Attribute><Name/><Value/></Attribute>`).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::error::SqsError;

/// The XML namespace of SQS's answers.
const XMLNS: &str = "http://queue.amazonaws.com/doc/2012-11-05/";
/// The most parameters a request may carry: ten batch entries of ten attributes each, with room.
const PARAMS_MAX: usize = 2_000;
/// The largest index a flattened list or map may use.
const INDEX_MAX: usize = 1_000;
/// The most dotted parts a parameter's name may have (SQS's deepest is 6:
/// `SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringValue`), and its longest
/// name: the parameters are read recursively, so their depth is bounded.
const NAME_PARTS_MAX: usize = 8;
const NAME_BYTES_MAX: usize = 256;

/// Parameters that sign or describe the request rather than the operation.
fn is_envelope(name: &str) -> bool {
    matches!(name, "Action" | "Version" | "Signature" | "SignatureMethod" | "SignatureVersion")
        || matches!(name, "AWSAccessKeyId" | "Timestamp" | "Expires" | "SecurityToken")
        || name.starts_with("X-Amz-")
}

/// A Query request read: its action and its parameters as the JSON protocol's input.
#[derive(Debug, PartialEq)]
pub(crate) struct QueryRequest {
    pub action: String,
    pub input: Value,
}

/// Reads a Query request from its form-encoded parameters (the body's and the URL's). A request
/// sent to a queue's URL without a `QueueUrl` parameter names that queue (`queue_url`).
pub(crate) fn to_input(encoded: &[&str], queue_url: Option<String>) -> Result<QueryRequest, SqsError> {
    let mut params = Vec::new();
    for part in encoded.iter().flat_map(|e| e.split('&')).filter(|p| !p.is_empty()) {
        if params.len() == PARAMS_MAX {
            return Err(malformed(format!("more than {PARAMS_MAX} parameters")));
        }
        let (name, value) = part.split_once('=').unwrap_or((part, ""));
        let decode = |s: &str| crate::sigv4::percent_decode(s).map_err(|e| malformed(e.to_string()));
        params.push((decode(name)?, decode(value)?));
    }
    let action = params
        .iter()
        .find(|(name, _)| name == "Action")
        .map(|(_, value)| value.clone())
        .ok_or(SqsError::MissingParameter("Action"))?;
    let mut tree = Tree::default();
    for (name, value) in params.into_iter().filter(|(name, _)| !is_envelope(name)) {
        tree.insert(&name, value)?;
    }
    let mut input = members(&tree)?;
    if action == "CreateQueue" {
        // CreateQueue's JSON member is the only lower-case one.
        if let Some(tags) = input.remove("Tags") {
            input.insert("tags".into(), tags);
        }
    }
    if let Some(url) = queue_url.filter(|_| !input.contains_key("QueueUrl")) {
        input.insert("QueueUrl".into(), Value::String(url));
    }
    Ok(QueryRequest { action, input: Value::Object(input) })
}

fn malformed(why: String) -> SqsError {
    SqsError::MalformedQueryString(why)
}

/// Parameters by the dotted parts of their names.
#[derive(Debug, Default)]
struct Tree {
    value: Option<String>,
    children: BTreeMap<String, Tree>,
}

impl Tree {
    fn insert(&mut self, name: &str, value: String) -> Result<(), SqsError> {
        if name.len() > NAME_BYTES_MAX || name.split('.').count() > NAME_PARTS_MAX {
            return Err(malformed(format!(
                "a parameter name has at most {NAME_PARTS_MAX} parts and {NAME_BYTES_MAX} bytes"
            )));
        }
        let mut node = self;
        for part in name.split('.') {
            node = node.children.entry(part.to_owned()).or_default();
        }
        if node.value.is_some() {
            return Err(malformed(format!("parameter {name} given twice")));
        }
        node.value = Some(value);
        Ok(())
    }

    /// The entries of a flattened list or map (`Name.1`, `Name.2`, …) in index order.
    fn indexed(&self, name: &str) -> Result<Vec<&Tree>, SqsError> {
        let mut entries = Vec::with_capacity(self.children.len());
        for (index, child) in &self.children {
            match index.parse::<usize>() {
                Ok(i) if (1..=INDEX_MAX).contains(&i) => entries.push((i, child)),
                _ => return Err(malformed(format!("{name}.{index}: not an index from 1 to {INDEX_MAX}"))),
            }
        }
        entries.sort_by_key(|(i, _)| *i);
        Ok(entries.into_iter().map(|(_, child)| child).collect())
    }

    fn to_json(&self, name: &str) -> Result<Value, SqsError> {
        match (&self.value, self.children.is_empty()) {
            (Some(value), true) => Ok(Value::String(value.clone())),
            (None, false) => Ok(Value::Object(members(self)?)),
            _ => Err(malformed(format!("{name} is both a value and a structure"))),
        }
    }
}

/// How a flattened Query name maps onto a JSON member.
enum Flattened {
    /// `Name.N` → `Names: [..]`
    List(&'static str),
    /// `Name.N.{key}` / `Name.N.{value}` → `Names: {key: value}`
    Map(&'static str, &'static str, &'static str),
    /// `XBatchRequestEntry.N.…` → `Entries: [{…}]`
    Entries,
}

fn flattened(name: &str) -> Option<Flattened> {
    Some(match name {
        "AttributeName" => Flattened::List("AttributeNames"),
        "MessageAttributeName" => Flattened::List("MessageAttributeNames"),
        "MessageSystemAttributeName" => Flattened::List("MessageSystemAttributeNames"),
        "TagKey" => Flattened::List("TagKeys"),
        "AWSAccountId" => Flattened::List("AWSAccountIds"),
        "ActionName" => Flattened::List("Actions"),
        "StringListValue" => Flattened::List("StringListValues"),
        "BinaryListValue" => Flattened::List("BinaryListValues"),
        "Attribute" => Flattened::Map("Attributes", "Name", "Value"),
        "MessageAttribute" => Flattened::Map("MessageAttributes", "Name", "Value"),
        "MessageSystemAttribute" => Flattened::Map("MessageSystemAttributes", "Name", "Value"),
        "Tag" => Flattened::Map("Tags", "Key", "Value"),
        _ if name.ends_with("BatchRequestEntry") => Flattened::Entries,
        _ => return None,
    })
}

/// A structure's members as the JSON protocol names them.
fn members(tree: &Tree) -> Result<Map<String, Value>, SqsError> {
    let mut out = Map::new();
    for (name, child) in &tree.children {
        let (member, value) = match flattened(name) {
            None => (name.clone(), child.to_json(name)?),
            Some(Flattened::List(member)) => {
                let items = child.indexed(name)?.into_iter().map(|item| item.to_json(name));
                (member.to_owned(), Value::Array(items.collect::<Result<_, _>>()?))
            }
            Some(Flattened::Entries) => {
                let items = child.indexed(name)?.into_iter().map(|item| item.to_json(name));
                ("Entries".to_owned(), Value::Array(items.collect::<Result<_, _>>()?))
            }
            Some(Flattened::Map(member, key, value)) => {
                let mut map = Map::new();
                for entry in child.indexed(name)? {
                    let missing = || malformed(format!("{name}.N needs both {key} and {value}"));
                    let k = entry.children.get(key).and_then(|k| k.value.clone()).ok_or_else(missing)?;
                    let v = entry.children.get(value).ok_or_else(missing)?.to_json(value)?;
                    map.insert(k, v);
                }
                (member.to_owned(), Value::Object(map))
            }
        };
        out.insert(member, value);
    }
    Ok(out)
}

/// The Query protocol's answer to `action`: its JSON answer's members written as XML.
pub(crate) fn answer_xml(action: &str, answer: &Value, request_id: &str) -> String {
    let mut xml = format!(r#"<?xml version="1.0"?><{action}Response xmlns="{XMLNS}"><{action}Result>"#);
    if let Value::Object(members) = answer {
        write_members(&mut xml, action, members);
    }
    xml.push_str(&format!(
        "</{action}Result><ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata></{action}Response>"
    ));
    xml
}

/// The Query protocol's error answer: the error's Query code and fault.
pub(crate) fn error_xml(error: &SqsError, request_id: &str) -> String {
    format!(
        r#"<?xml version="1.0"?><ErrorResponse xmlns="{XMLNS}"><Error><Type>{}</Type><Code>{}</Code><Message>{}</Message><Detail/></Error><RequestId>{request_id}</RequestId></ErrorResponse>"#,
        error.fault(),
        error.query_code(),
        escape(&error.to_string())
    )
}

/// The element a JSON list member's items are written as (flattened: one element per item).
fn item_element(action: &str, member: &str) -> String {
    match member {
        "QueueUrls" | "queueUrls" => "QueueUrl".into(),
        "Messages" => "Message".into(),
        "Failed" => "BatchResultErrorEntry".into(),
        "Successful" | "Results" => format!("{action}ResultEntry"),
        "StringListValues" => "StringListValue".into(),
        "BinaryListValues" => "BinaryListValue".into(),
        other => other.into(),
    }
}

/// The element, key and value names a JSON map member is written with.
fn map_elements(member: &str) -> Option<(&'static str, &'static str, &'static str)> {
    match member {
        "Attributes" => Some(("Attribute", "Name", "Value")),
        "MessageAttributes" => Some(("MessageAttribute", "Name", "Value")),
        "Tags" => Some(("Tag", "Key", "Value")),
        _ => None,
    }
}

fn write_members(xml: &mut String, action: &str, members: &Map<String, Value>) {
    for (name, value) in members {
        match value {
            Value::Array(items) => {
                let element = item_element(action, name);
                for item in items {
                    write_element(xml, action, &element, item);
                }
            }
            Value::Object(map) => match map_elements(name) {
                Some((element, key, value_name)) => {
                    for (k, v) in map {
                        xml.push_str(&format!("<{element}><{key}>{}</{key}>", escape(k)));
                        write_element(xml, action, value_name, v);
                        xml.push_str(&format!("</{element}>"));
                    }
                }
                None => write_element(xml, action, name, value),
            },
            _ => write_element(xml, action, name, value),
        }
    }
}

fn write_element(xml: &mut String, action: &str, name: &str, value: &Value) {
    xml.push_str(&format!("<{name}>"));
    match value {
        Value::Object(members) => write_members(xml, action, members),
        Value::String(s) => xml.push_str(&escape(s)),
        Value::Null => {}
        other => xml.push_str(&other.to_string()),
    }
    xml.push_str(&format!("</{name}>"));
}

/// Text as XML character data: markup characters escaped, and a carriage return as a reference
/// (a parser would otherwise read it as a line feed).
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\r' => out.push_str("&#xD;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn flattened_lists_maps_and_batch_entries_become_the_json_members() {
        // As botocore 1.31's Query serializer writes a batch send and a queue creation.
        let batch = "Action=SendMessageBatch&Version=2012-11-05&QueueUrl=http%3A%2F%2Fh%2F%252F%2Fq\
            &SendMessageBatchRequestEntry.1.Id=a&SendMessageBatchRequestEntry.1.MessageBody=one+two\
            &SendMessageBatchRequestEntry.1.MessageAttribute.1.Name=colour\
            &SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringValue=blue\
            &SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.DataType=String\
            &SendMessageBatchRequestEntry.2.Id=b&SendMessageBatchRequestEntry.2.MessageBody=x%26y\
            &SendMessageBatchRequestEntry.2.DelaySeconds=5";
        let read = to_input(&[batch], None).unwrap();
        assert_eq!(read.action, "SendMessageBatch");
        assert_eq!(
            read.input,
            json!({"QueueUrl": "http://h/%2F/q", "Entries": [
                {"Id": "a", "MessageBody": "one two",
                 "MessageAttributes": {"colour": {"StringValue": "blue", "DataType": "String"}}},
                {"Id": "b", "MessageBody": "x&y", "DelaySeconds": "5"}]})
        );
        let create = "Action=CreateQueue&QueueName=q&Attribute.2.Name=DelaySeconds&Attribute.2.Value=3\
            &Attribute.1.Name=VisibilityTimeout&Attribute.1.Value=40&Tag.1.Key=team&Tag.1.Value=ops";
        let read = to_input(&[create], None).unwrap();
        assert_eq!(
            read.input,
            json!({"QueueName": "q", "Attributes": {"VisibilityTimeout": "40", "DelaySeconds": "3"},
                   "tags": {"team": "ops"}})
        );
        let receive = "Action=ReceiveMessage&AttributeName.2=SentTimestamp&AttributeName.1=All\
            &MessageAttributeName.1=All&MaxNumberOfMessages=10";
        let read = to_input(&[receive], Some("http://h/%2F/q".into())).unwrap();
        assert_eq!(
            read.input,
            json!({"AttributeNames": ["All", "SentTimestamp"], "MessageAttributeNames": ["All"],
                   "MaxNumberOfMessages": "10", "QueueUrl": "http://h/%2F/q"})
        );
        let grant = "Action=AddPermission&Label=l&AWSAccountId.1=111122223333&ActionName.1=SendMessage\
            &ActionName.2=ReceiveMessage";
        let read = to_input(&[grant], Some("http://h/%2F/q".into())).unwrap();
        assert_eq!(
            read.input,
            json!({"Label": "l", "AWSAccountIds": ["111122223333"], "Actions": ["SendMessage", "ReceiveMessage"],
                   "QueueUrl": "http://h/%2F/q"})
        );
    }

    #[test]
    fn malformed_or_unbounded_parameters_are_refused() {
        let refused = |params: &str| to_input(&[params], None).unwrap_err();
        assert_eq!(refused("QueueName=q"), SqsError::MissingParameter("Action"));
        assert!(matches!(refused("Action=X&AttributeName.0=a"), SqsError::MalformedQueryString(_)));
        assert!(matches!(refused("Action=X&AttributeName.1001=a"), SqsError::MalformedQueryString(_)));
        assert!(matches!(refused("Action=X&AttributeName.x=a"), SqsError::MalformedQueryString(_)));
        assert!(matches!(refused("Action=X&A=1&A.B=2"), SqsError::MalformedQueryString(_)));
        assert!(matches!(refused("Action=X&A=1&A=2"), SqsError::MalformedQueryString(_)));
        assert!(matches!(refused("Action=X&Attribute.1.Name=n"), SqsError::MalformedQueryString(_)));
        assert!(matches!(refused("Action=X&A=%zz"), SqsError::MalformedQueryString(_)));
        // Names deep enough to exhaust the stack of a recursive reader are refused up front.
        let deep = vec!["A"; 200_000].join(".");
        assert!(matches!(refused(&format!("Action=X&{deep}=1")), SqsError::MalformedQueryString(_)));
        assert!(matches!(refused("Action=X&A.B.C.D.E.F.G.H.I=1"), SqsError::MalformedQueryString(_)));
        let long = "N".repeat(257);
        assert!(matches!(refused(&format!("Action=X&{long}=1")), SqsError::MalformedQueryString(_)));
        let many = (0..=PARAMS_MAX).map(|i| format!("P{i}=1")).collect::<Vec<_>>().join("&");
        assert!(matches!(refused(&format!("Action=X&{many}")), SqsError::MalformedQueryString(_)));
    }

    #[test]
    fn answers_are_written_with_the_service_models_flattened_names() {
        let answer = json!({"Messages": [{
            "MessageId": "m1", "ReceiptHandle": "r<1>", "Body": "a\r\nb & c",
            "Attributes": {"SentTimestamp": "7"},
            "MessageAttributes": {"colour": {"StringValue": "blue", "DataType": "String"}}}]});
        assert_eq!(
            answer_xml("ReceiveMessage", &answer, "id"),
            format!(
                r#"<?xml version="1.0"?><ReceiveMessageResponse xmlns="{XMLNS}"><ReceiveMessageResult><Message><Attributes_placeholder/></Message></ReceiveMessageResult><ResponseMetadata><RequestId>id</RequestId></ResponseMetadata></ReceiveMessageResponse>"#
            )
            .replace(
                "<Attributes_placeholder/>",
                "<Attribute><Name>SentTimestamp</Name><Value>7</Value></Attribute><Body>a&#xD;\nb &amp; c</Body>\
                 <MessageAttribute><Name>colour</Name><Value><DataType>String</DataType><StringValue>blue</StringValue></Value></MessageAttribute>\
                 <MessageId>m1</MessageId><ReceiptHandle>r&lt;1&gt;</ReceiptHandle>"
            )
        );
        let batch = json!({"Successful": [{"Id": "a", "MessageId": "m"}],
                           "Failed": [{"Id": "b", "SenderFault": true, "Code": "C", "Message": "M"}]});
        let xml = answer_xml("SendMessageBatch", &batch, "id");
        assert!(xml.contains(
            "<SendMessageBatchResult><BatchResultErrorEntry><Code>C</Code><Id>b</Id><Message>M</Message>\
             <SenderFault>true</SenderFault></BatchResultErrorEntry><SendMessageBatchResultEntry><Id>a</Id>\
             <MessageId>m</MessageId></SendMessageBatchResultEntry></SendMessageBatchResult>"
        ));
        let urls = answer_xml("ListQueues", &json!({"QueueUrls": ["u1", "u2"]}), "id");
        assert!(urls
            .contains("<ListQueuesResult><QueueUrl>u1</QueueUrl><QueueUrl>u2</QueueUrl></ListQueuesResult>"));
    }

    #[test]
    fn errors_carry_the_query_code_and_fault() {
        assert_eq!(
            error_xml(&SqsError::QueueDoesNotExist, "id"),
            format!(
                r#"<?xml version="1.0"?><ErrorResponse xmlns="{XMLNS}"><Error><Type>Sender</Type><Code>AWS.SimpleQueueService.NonExistentQueue</Code><Message>The specified queue does not exist.</Message><Detail/></Error><RequestId>id</RequestId></ErrorResponse>"#
            )
        );
    }
}

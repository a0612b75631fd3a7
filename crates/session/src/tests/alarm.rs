//! What the server needs from a session to enforce the memory and disk alarms: how much
//! unfinished content a connection holds, and heartbeats that survive a paused socket.

use super::*;

/// The session reports each unfinished message (basic.publish seen, body incomplete): its
/// announced size and the body bytes buffered so far, until the last body frame arrives or its
/// channel is closed.
#[test]
fn unfinished_content_is_reported_until_the_body_completes_or_the_channel_closes() {
    let mut c = Client::local();
    c.open(60);
    c.open_channel(1);
    c.open_channel(2);
    assert_eq!(c.conn.unfinished_content(), UnfinishedContent::default());
    c.publish(1, "rk");
    assert_eq!(c.conn.unfinished_content(), unfinished(1, 0, 0));
    c.send_header(1, 60, 10);
    c.send_body(1, b"abcd");
    c.publish(2, "rk");
    c.send_header(2, 60, 100);
    c.send_body(2, &[7; 30]);
    assert_eq!(c.conn.unfinished_content(), unfinished(2, 110, 34));
    c.send_body(1, b"efghij");
    assert_eq!(c.commands(), vec![expected_publish(b"abcdefghij")]);
    assert_eq!(c.conn.unfinished_content(), unfinished(1, 100, 30));
    // The broker closes channel 2 (any channel error): its partial message goes with it.
    let error = AmqpError::new(404, "NOT_FOUND - no exchange 'x' in vhost '/'");
    c.effect(Effect::ChannelError { conn: CONN, channel: ChannelId(2), error });
    assert_eq!(c.conn.unfinished_content(), UnfinishedContent::default());
}

/// Unfinished messages of one connection may announce 512 MiB together (four default-size
/// messages on four channels); a header past that closes its channel with 406 before any of its
/// body is buffered, and the other channels carry on.
#[test]
fn unfinished_messages_of_a_connection_may_announce_at_most_512_mib() {
    let mut c = Client::local();
    c.open(60);
    for channel in 1..=5 {
        c.open_channel(channel);
        c.publish(channel, "rk");
        c.send_header(channel, 60, DEFAULT_MAX_MESSAGE_SIZE);
    }
    assert_eq!(MAX_UNFINISHED_CONTENT_BYTES, 4 * DEFAULT_MAX_MESSAGE_SIZE);
    let text = "PRECONDITION_FAILED - message size 134217728 would bring this connection's unfinished \
                messages to 671088640 bytes, more than the limit of 536870912";
    let close = ChannelClose { reply_code: 406, reply_text: short(text), class_id: 60, method_id: 40 };
    assert_eq!(c.methods(), vec![(5, close.into())]);
    assert_eq!(c.commands(), vec![Command::ChannelAborted { conn: CONN, channel: ChannelId(5) }]);
    assert_eq!(c.conn.unfinished_content(), unfinished(4, 4 * DEFAULT_MAX_MESSAGE_SIZE, 0));
    c.send_body(1, &[1; 1024]);
    assert!(c.frames().is_empty(), "channel 1 is still receiving its body");
    assert_eq!(c.conn.unfinished_content().received_bytes, 1024);
}

/// While the server does not read a blocked connection, its client's silence is not counted:
/// with heartbeat 2 s it stays open for a minute, and still gets our heartbeats. Once reading
/// resumes, the client has the usual two intervals (4 s) from then.
#[test]
fn a_connection_blocked_by_an_alarm_is_not_dropped_for_missed_heartbeats() {
    let mut c = Client::local();
    c.open(2);
    c.at(1_000).reading_blocked(true);
    for second in 2..=60 {
        c.at(second * 1_000).timeout();
        assert!(!c.conn.is_closed(), "dropped at {second} s while blocked");
    }
    let heartbeats = c.frames().iter().filter(|f| **f == Frame::Heartbeat { channel: 0 }).count();
    assert!(heartbeats >= 50, "we kept sending heartbeats: {heartbeats}");
    c.at(60_000).reading_blocked(false);
    c.at(63_999).timeout();
    assert!(!c.conn.is_closed());
    c.at(64_000).timeout();
    assert!(c.conn.is_closed(), "a silent client is dropped two intervals after reading resumed");
}

impl Client {
    fn reading_blocked(&mut self, blocked: bool) {
        self.conn.set_reading_blocked(blocked, self.now);
    }
}

fn unfinished(messages: u64, announced_bytes: u64, received_bytes: u64) -> UnfinishedContent {
    UnfinishedContent { messages, announced_bytes, received_bytes }
}

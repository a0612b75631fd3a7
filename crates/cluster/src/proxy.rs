//! A follower's client ports: every connection is forwarded byte for byte to the leader's port,
//! so clients (or a load balancer) may name any node. When the leader or its term changes, each
//! forwarded AMQP connection gets `connection.close` 320 CONNECTION_FORCED — sent between two of
//! the leader's frames, never inside one — and is closed; clients reconnect as after a restart.
//! While there is no leader to forward to — an election that lasts, or a node that cannot
//! reach etcd and so has no role — an AMQP client gets that 320 after its protocol header, an
//! HTTP client a 503: both answers a client retries, where a closed port or a silent EOF is not.

use std::time::Duration;

use bytes::BytesMut;
use hourglass_wire::{encode_method_frame, ConnectionClose, Method, ShortStr, FRAME_HEADER_SIZE};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::coordinator::Role;
use crate::election::NodeRecord;

/// How long a new client waits for a leader to forward to (during an election) before it is
/// closed.
const LEADER_WAIT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a client that arrives with no leader known may take to send its protocol header
/// before its 320 (it is closed either way).
const HEADER_WAIT: Duration = Duration::from_secs(2);

/// The reply text forwarded AMQP clients get when the leader changes.
pub const LEADER_CHANGED: &str = "CONNECTION_FORCED - the cluster's leader changed; reconnect";
/// The reply text of an AMQP client that arrives while there is no leader to forward to.
pub const NO_LEADER_TEXT: &str = "CONNECTION_FORCED - the cluster has no leader right now; reconnect";

/// Where a node's client ports forward to now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Upstream {
    /// The leader etcd names, in its term: the same node in a later term is a new server
    /// process, so forwarded connections end when either changes.
    Leader { node: NodeRecord, term: u64 },
    /// No leader yet (an election): a new client waits up to [`LEADER_WAIT`] for one.
    Electing,
    /// This node has no role (it cannot reach etcd, or it leads itself): clients are answered
    /// at once, 320 or 503.
    Unavailable,
}

impl Upstream {
    /// Where a node's client ports forward to while its coordinator sees `role`.
    pub fn of(role: &Role) -> Upstream {
        match role {
            Role::Follower { leader: Some(node), term } => {
                Upstream::Leader { node: node.clone(), term: *term }
            }
            Role::Follower { leader: None, .. } => Upstream::Electing,
            Role::Leader { .. } => Upstream::Unavailable,
        }
    }
}

/// Which protocol a forwarded port speaks (only plain AMQP gets a close frame: TLS streams and
/// HTTP are only closed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Amqp,
    /// Plain HTTP: a client arriving while there is no leader gets a 503 (and the reason).
    Http,
    /// TLS (AMQPS, HTTPS): bytes only; TLS ends on the leader.
    Tls,
}

/// The answer of a follower's HTTP port while the cluster has no leader (an election).
const NO_LEADER: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
content-length: 70\r\nconnection: close\r\n\r\n{\"error\":\"unavailable\",\"reason\":\"the cluster has no leader right now\"}";

/// Which of the leader's ports a forwarded port goes to (`None`: the leader has none such).
pub type PortOf = fn(&NodeRecord) -> Option<String>;

/// Accepts on `listener` and forwards to the leader's port that `port_of` picks, until the task
/// is dropped.
pub async fn forward(
    listener: TcpListener,
    leader: watch::Receiver<Upstream>,
    port_of: PortOf,
    protocol: Protocol,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let leader = leader.clone();
        tokio::spawn(async move {
            let _ = forward_one(client, leader, port_of, protocol).await;
        });
    }
}

async fn forward_one(
    client: TcpStream,
    mut leader: watch::Receiver<Upstream>,
    port_of: PortOf,
    protocol: Protocol,
) -> std::io::Result<()> {
    let decided = |upstream: &Upstream| !matches!(upstream, Upstream::Electing);
    let target =
        tokio::time::timeout(LEADER_WAIT, leader.wait_for(decided)).await.ok().and_then(
            |found| match &*found.ok()? {
                Upstream::Leader { node, .. } => port_of(node),
                Upstream::Electing | Upstream::Unavailable => None,
            },
        );
    let Some(target) = target else { return refuse(client, protocol).await };
    leader.mark_unchanged();
    // A leader that does not answer, or one replaced meanwhile, gets the client its 320 / 503
    // at once (not a reset after the connect timeout): it reconnects and lands on the new one.
    let connect = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&target));
    let server = tokio::select! {
        connected = connect => match connected {
            Ok(Ok(server)) => server,
            _ => return refuse(client, protocol).await,
        },
        _ = leader.changed() => return refuse(client, protocol).await,
    };
    let _ = server.set_nodelay(true);
    let _ = client.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upstream = async {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
        let _ = server_write.shutdown().await;
    };
    let downstream = async {
        let mut frames = FrameBoundary::default();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            tokio::select! {
                read = server_read.read(&mut buf) => {
                    let n = match read { Ok(0) | Err(_) => break, Ok(n) => n };
                    if client_write.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                    frames.advance(&buf[..n]);
                }
                changed = leader.changed() => {
                    if changed.is_ok() && protocol == Protocol::Amqp && frames.at_boundary() {
                        let _ = client_write.write_all(&connection_forced()).await;
                    }
                    break;
                }
            }
        }
        let _ = client_write.shutdown().await;
    };
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
    }
    Ok(())
}

/// Answers a client there is no leader for: HTTP a 503; AMQP, once its protocol header is in
/// (or after [`HEADER_WAIT`]), `connection.close` 320 — what clients retry on, as after a
/// broker restart; TLS is only closed (it ends on the leader).
async fn refuse(mut client: TcpStream, protocol: Protocol) -> std::io::Result<()> {
    match protocol {
        Protocol::Http => client.write_all(NO_LEADER).await?,
        Protocol::Amqp => {
            let mut header = [0u8; 8];
            let _ = tokio::time::timeout(HEADER_WAIT, client.read_exact(&mut header)).await;
            client.write_all(&close_frame(NO_LEADER_TEXT)).await?;
        }
        Protocol::Tls => {}
    }
    client.shutdown().await
}

fn connection_forced() -> BytesMut {
    close_frame(LEADER_CHANGED)
}

fn close_frame(reply_text: &'static str) -> BytesMut {
    let mut out = BytesMut::new();
    let close = ConnectionClose {
        reply_code: hourglass_wire::CONNECTION_FORCED,
        reply_text: ShortStr::from_static(reply_text),
        class_id: 0,
        method_id: 0,
    };
    encode_method_frame(0, &Method::ConnectionClose(close), &mut out);
    out
}

/// Follows the AMQP frames of a byte stream (header: type, channel, size; payload; frame end) to
/// tell whether the bytes so far end exactly at a frame's end.
#[derive(Debug, Default)]
struct FrameBoundary {
    header: [u8; FRAME_HEADER_SIZE],
    header_len: usize,
    /// Payload and frame-end bytes still to come of the current frame.
    remaining: u64,
}

impl FrameBoundary {
    fn advance(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.remaining > 0 {
                let n = (self.remaining.min(bytes.len() as u64)) as usize;
                self.remaining -= n as u64;
                bytes = &bytes[n..];
                continue;
            }
            let n = (FRAME_HEADER_SIZE - self.header_len).min(bytes.len());
            self.header[self.header_len..self.header_len + n].copy_from_slice(&bytes[..n]);
            self.header_len += n;
            bytes = &bytes[n..];
            if self.header_len == FRAME_HEADER_SIZE {
                let size =
                    u32::from_be_bytes([self.header[3], self.header[4], self.header[5], self.header[6]]);
                self.remaining = u64::from(size) + 1;
                self.header_len = 0;
            }
        }
    }

    fn at_boundary(&self) -> bool {
        self.header_len == 0 && self.remaining == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hourglass_wire::{encode_heartbeat_frame, Frame, FrameDecoder};

    #[test]
    fn boundaries_are_found_however_the_bytes_are_split() {
        let mut stream = BytesMut::new();
        encode_heartbeat_frame(&mut stream);
        stream.extend_from_slice(&connection_forced());
        for split in 0..=stream.len() {
            let mut frames = FrameBoundary::default();
            frames.advance(&stream[..split]);
            let expected = split == 0 || split == 8 || split == stream.len();
            assert_eq!(frames.at_boundary(), expected, "split at {split}");
            frames.advance(&stream[split..]);
            assert!(frames.at_boundary());
        }
    }

    /// The first frame a client of `forward` gets after its protocol header, with the upstream
    /// as `upstream`.
    async fn first_frame_after_header(upstream: Upstream) -> Frame {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (_tx, rx) = watch::channel(upstream);
        let proxy = tokio::spawn(forward(listener, rx, |n| Some(n.amqp()), Protocol::Amqp));
        let mut client = TcpStream::connect(address).await.unwrap();
        client.write_all(b"AMQP\x00\x00\x09\x01").await.unwrap();
        let mut bytes = BytesMut::new();
        let frame = tokio::time::timeout(Duration::from_secs(1), async {
            loop {
                if let Some(frame) = FrameDecoder::new(131_072).decode(&mut bytes).unwrap() {
                    return frame;
                }
                let mut buf = [0u8; 512];
                let n = client.read(&mut buf).await.unwrap();
                assert!(n > 0, "closed without a frame");
                bytes.extend_from_slice(&buf[..n]);
            }
        })
        .await
        .expect("a frame within 1 s, not the 2 s connect timeout");
        proxy.abort();
        frame
    }

    fn leader_at(address: &str) -> Upstream {
        let (host, port) = address.rsplit_once(':').unwrap();
        let node = NodeRecord {
            name: "gone".into(),
            host: host.into(),
            amqp_port: port.parse().unwrap(),
            http_port: 0,
            replication_port: 0,
            amqps_port: None,
            https_port: None,
            sqs_port: None,
            sqs_tls_port: None,
        };
        Upstream::Leader { node, term: 1 }
    }

    #[test]
    fn the_same_node_elected_again_is_a_new_upstream() {
        // A leader that lost its term and won the next one runs a new server process: the
        // connections forwarded to its old one must get their 320, even when this node never
        // saw the election in between (a watch keeps only the latest role).
        let Upstream::Leader { node, .. } = leader_at("127.0.0.1:5672") else { unreachable!() };
        let first = Upstream::of(&Role::Follower { leader: Some(node.clone()), term: 7 });
        let again = Upstream::of(&Role::Follower { leader: Some(node), term: 9 });
        assert_ne!(first, again);
    }

    #[tokio::test]
    async fn a_leader_that_refuses_the_connection_gets_the_client_a_320_not_a_reset() {
        // A port nobody listens on: the connect fails at once.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let frame = first_frame_after_header(leader_at(&closed.to_string())).await;
        assert!(
            matches!(frame, Frame::Method { method: Method::ConnectionClose(ref c), .. } if c.reply_code == 320),
            "{frame:?}"
        );
    }

    #[test]
    fn the_no_leader_answer_is_a_complete_http_response() {
        let text = std::str::from_utf8(NO_LEADER).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503"));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        assert!(serde_json::from_str::<serde_json::Value>(body).is_ok());
    }

    #[test]
    fn the_close_is_a_valid_connection_close_320() {
        let mut bytes = connection_forced();
        let frame = FrameDecoder::new(131_072).decode(&mut bytes).unwrap().unwrap();
        let Frame::Method { channel: 0, method: Method::ConnectionClose(close) } = frame else {
            panic!("{frame:?}")
        };
        assert_eq!(close.reply_code, 320);
        assert_eq!(close.reply_text, LEADER_CHANGED);
    }
}

//! One task per client connection: read → decode → session → broker, and broker effects →
//! session → socket, sleeping until the session's next deadline (heartbeats, timeouts).
//!
//! Output is written straight from this task when the socket takes it; what it cannot take goes
//! to a writer task, so a client that is slow to read never blocks this task from reading.
//!
//! A TLS connection (`connection/tls.rs`) runs the same loop on one end of a socket pair whose
//! other end a pump task copies to and from the TLS stream (`connection/socket.rs` says why).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use hourglass_broker::{Command, ConnectionId};
use hourglass_session::{ClientCertificate, Connection, PeerInfo, SessionConfig};
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::AsyncReadExt;
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, Notify};

use crate::alarm::InboundContent;

mod alarm_gate;
mod socket;
mod tls;
use crate::broker_task::{BrokerInput, CommandBudget};
use crate::clock::Clock;
use alarm_gate::AlarmGate;
use hourglass_mgmt::resources::ResourceWatch;
use socket::{SocketRead, SocketWrite};
pub use tls::run_tls;

/// Read buffer growth step of a new connection: an idle connection keeps only this much.
const READ_CHUNK_MIN: usize = 4 * 1024;
/// The step a busy connection grows to (doubling each time a read fills the buffer): big enough
/// for many small frames per read system call.
const READ_CHUNK_MAX: usize = 64 * 1024;
/// How often a connection that is not read (blocked by an alarm) while its client's data waits
/// in the socket checks whether the client hung up: a vanished publisher's held content is freed
/// within this.
const HANGUP_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);
/// How long the writer may take to flush the last bytes (connection.close) before we drop the socket.
const FINAL_FLUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);
/// Output waiting for a slow socket beyond which the broker stops delivering to this connection:
/// enough to keep a fast link busy, small enough that a stalled reader costs little memory.
const OUTPUT_HIGH_WATERMARK: usize = 4 * 1024 * 1024;
/// Deliveries resume once the waiting output has drained below this.
const OUTPUT_LOW_WATERMARK: usize = 1024 * 1024;
/// The most capacity the writer task keeps in its coalescing buffer between batches: what it
/// gathers in steady flow, not a burst's worth.
const PENDING_KEPT_MAX: usize = OUTPUT_HIGH_WATERMARK;

/// Bytes handed to the writer task and not yet written, shared by both tasks.
#[derive(Default)]
struct OutputGauge {
    queued: AtomicUsize,
    drained: Notify,
    /// The writer task gave up: the socket failed or made no progress within the send timeout.
    failed: Notify,
}

#[derive(Clone)]
pub struct ConnectionContext {
    pub id: ConnectionId,
    pub peer: SocketAddr,
    /// The accepted socket's local address (IPv4-mapped addresses as IPv4), named in the
    /// connection's name: `peer -> local`.
    pub local: SocketAddr,
    pub broker: mpsc::Sender<BrokerInput>,
    /// What the connection's commands take room from while they wait for the broker task.
    pub commands: CommandBudget,
    pub session_config: Arc<SessionConfig>,
    pub clock: Clock,
    pub shutdown: watch::Receiver<bool>,
    /// The memory and disk alarms (crate::alarm).
    pub resources: ResourceWatch,
    /// Body bytes held for unfinished messages and published, summed over connections: their
    /// growth makes the alarm monitor sample at once (crate::alarm).
    pub inbound: Arc<InboundContent>,
    /// A socket write making no progress this long ends the connection (`DEFAULT_TCP_SEND_TIMEOUT_MS`).
    pub send_timeout: std::time::Duration,
}

/// Serves one plain AMQP connection until it closes.
pub async fn run(stream: TcpStream, cx: ConnectionContext) {
    let _ = stream.set_nodelay(true);
    let (reader, writer) = stream.into_split();
    serve(reader, writer, cx, None).await;
}

/// The connection loop over a socket's two halves; `tls`: the connection came over TLS, with
/// the client's verified certificate if it presented one.
async fn serve<R: SocketRead, W: SocketWrite>(
    mut reader: R,
    writer: W,
    mut cx: ConnectionContext,
    tls: Option<Option<ClientCertificate>>,
) {
    let (mailbox_tx, mut mailbox) = mpsc::unbounded_channel();
    if cx.broker.send(BrokerInput::Register { conn: cx.id, mailbox: mailbox_tx }).await.is_err() {
        return;
    }
    let peer = PeerInfo {
        addr: cx.peer.to_string(),
        local: cx.local.to_string(),
        is_loopback: cx.peer.ip().to_canonical().is_loopback(),
    };
    let mut session = Connection::new(cx.id, peer, cx.session_config.clone(), cx.clock.now());
    if let Some(certificate) = tls {
        session = session.over_tls(certificate);
    }
    let writer = Arc::new(writer);
    let (out_tx, out_rx) = mpsc::unbounded_channel::<Bytes>();
    let gauge = Arc::new(OutputGauge::default());
    let writer_task = tokio::spawn(write_loop(writer.clone(), out_rx, gauge.clone(), cx.send_timeout, cx.id));
    let mut read_chunk = READ_CHUNK_MIN;
    let mut input = BytesMut::with_capacity(read_chunk);
    let mut reading = true;
    // The broker drops its end once it is told the connection is closed (at the client's
    // connection.close, before close-ok goes out): a closed mailbox is not polled again.
    let mut mailbox_open = true;
    let mut paused = false;
    let mut gate = AlarmGate::new(cx.resources.clone(), cx.inbound.clone());
    let mut shutdown_live = true;
    loop {
        let reading_blocked = gate.reading_blocked(&mut session, cx.clock.now());
        let deadline = session.next_deadline().map(|d| cx.clock.instant_of(d));
        if input.capacity() - input.len() < read_chunk / 4 {
            input.reserve(read_chunk);
        }
        let spare = input.capacity() - input.len();
        tokio::select! {
            read = read_or_watch(&mut reader, &mut input, reading_blocked), if reading => match read {
                Read::Eof => {
                    reading = false;
                    session.handle_eof(cx.clock.now());
                }
                Read::Bytes(n) => {
                    if n == spare {
                        // The socket had more than the buffer could take: read more per call.
                        read_chunk = (read_chunk * 2).min(READ_CHUNK_MAX);
                    }
                    session.handle_input(&mut input, cx.clock.now());
                }
            },
            effects = mailbox.recv(), if mailbox_open => {
                mailbox_open = effects.is_some();
                let now = cx.clock.now();
                // What else is waiting goes in the same turn.
                let waiting = std::iter::from_fn(|| mailbox.try_recv().ok());
                for effect in effects.into_iter().chain(waiting).flatten() {
                    session.handle_effect(effect, now);
                }
            }
            _ = sleep_until(deadline) => session.handle_timeout(cx.clock.now()),
            _ = gauge.drained.notified(), if paused => {}
            _ = gauge.failed.notified() => session.handle_eof(cx.clock.now()),
            _ = gate.changed(), if gate.live() => {}
            changed = cx.shutdown.changed(), if shutdown_live => {
                shutdown_live = changed.is_ok();
                if shutdown_live && *cx.shutdown.borrow() {
                    session.close_forced("shutdown", cx.clock.now());
                }
            }
        }
        gate.after_session(&mut session, cx.id, cx.clock.now()).await;
        // Commands held under an alarm that has cleared go first, then the session's new ones
        // (those the gate holds wait for the clear).
        let mut commands = gate.released();
        let admitted = gate.admit(session.take_commands());
        if commands.is_empty() {
            commands = admitted;
        } else {
            commands.extend(admitted);
        }
        gate.on_commands(&commands);
        // An error means the broker task is gone: the server is stopping.
        let _ = cx.commands.send(&cx.broker, commands).await;
        gate.after_commands().await;
        gate.tell(&mut session, cx.id, cx.clock.now());
        write_output(&mut session, writer.as_ref(), &gauge, &out_tx, &cx.clock);
        let queued = gauge.queued.load(Ordering::Relaxed);
        let pause = if paused { queued >= OUTPUT_LOW_WATERMARK } else { queued > OUTPUT_HIGH_WATERMARK };
        if pause != paused {
            paused = pause;
            let command = Command::DeliveryPaused { conn: cx.id, paused };
            if cx.commands.send(&cx.broker, vec![command]).await.is_err() {
                break;
            }
        }
        if session.is_closed() {
            break;
        }
    }
    gate.release();
    let _ = cx.commands.send(&cx.broker, vec![Command::ConnectionClosed { conn: cx.id }]).await;
    drop(out_tx);
    let _ = tokio::time::timeout(FINAL_FLUSH_TIMEOUT, writer_task).await;
}

/// Writes the session's output: on the socket at once while the writer task holds nothing
/// (that keeps the byte order), the rest through the writer task. A failed write ends the
/// session.
fn write_output<W: SocketWrite>(
    session: &mut Connection,
    writer: &W,
    gauge: &OutputGauge,
    out_tx: &mpsc::UnboundedSender<Bytes>,
    clock: &Clock,
) {
    let mut output = session.take_output();
    if !output.is_empty() && gauge.queued.load(Ordering::Acquire) == 0 {
        match writer.try_write(&output) {
            Ok(written) if written == output.len() => return session.recycle_output(output),
            Ok(written) => drop(output.split_to(written)),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => {
                output.clear();
                session.handle_eof(clock.now());
            }
        }
    }
    if !output.is_empty() {
        gauge.queued.fetch_add(output.len(), Ordering::AcqRel);
        if out_tx.send(output.freeze()).is_err() {
            session.handle_eof(clock.now());
        }
    }
}

/// Writes what the connection task could not, coalescing queued chunks into one write. The
/// socket's write side shuts down when both tasks have dropped it.
async fn write_loop<W: SocketWrite>(
    writer: Arc<W>,
    mut chunks: mpsc::UnboundedReceiver<Bytes>,
    gauge: Arc<OutputGauge>,
    send_timeout: std::time::Duration,
    conn: ConnectionId,
) {
    let mut pending = BytesMut::new();
    while let Some(first) = chunks.recv().await {
        let mut batch = first;
        if let Ok(next) = chunks.try_recv() {
            pending.clear();
            pending.extend_from_slice(&batch);
            pending.extend_from_slice(&next);
            while let Ok(more) = chunks.try_recv() {
                pending.extend_from_slice(&more);
            }
            // A large batch takes its buffer along (freed once written) rather than leave the
            // spare capacity, which shares its allocation, to hold it for good (issue #25).
            batch = if pending.capacity() > PENDING_KEPT_MAX {
                std::mem::take(&mut pending).freeze()
            } else {
                pending.split().freeze()
            };
        }
        if let Err(error) = write_all(writer.as_ref(), &batch, send_timeout).await {
            if error.kind() == std::io::ErrorKind::TimedOut {
                let timeout_ms = send_timeout.as_millis() as u64;
                tracing::warn!(
                    conn = conn.0,
                    timeout_ms,
                    "client stopped reading (socket write made no progress); closing the connection"
                );
            }
            gauge.failed.notify_one();
            return;
        }
        let before = gauge.queued.fetch_sub(batch.len(), Ordering::AcqRel);
        if before >= OUTPUT_LOW_WATERMARK && before - batch.len() < OUTPUT_LOW_WATERMARK {
            gauge.drained.notify_one();
        }
    }
}

/// Writes all of `bytes`; fails with `TimedOut` when the socket takes nothing for `send_timeout`.
async fn write_all<W: SocketWrite>(
    writer: &W,
    mut bytes: &[u8],
    send_timeout: std::time::Duration,
) -> std::io::Result<()> {
    while !bytes.is_empty() {
        match tokio::time::timeout(send_timeout, writer.writable()).await {
            Ok(ready) => ready?,
            Err(_) => return Err(std::io::ErrorKind::TimedOut.into()),
        }
        match writer.try_write(bytes) {
            Ok(written) => bytes = &bytes[written..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// What one wait on the socket brought.
enum Read {
    /// This many bytes were appended to the input.
    Bytes(usize),
    /// End of stream, or the socket failed (also seen while reading is blocked).
    Eof,
}

/// Reads into `input`; while `blocked` (a resource alarm), reads nothing but still notices the
/// peer going away, which a connection that is not read would never see: a vanished publisher
/// then frees what it held (and the alarm it may have raised).
async fn read_or_watch<R: SocketRead>(reader: &mut R, input: &mut BytesMut, blocked: bool) -> Read {
    if blocked {
        peer_hung_up(reader).await;
        return Read::Eof;
    }
    match reader.read_buf(input).await {
        Ok(0) | Err(_) => Read::Eof,
        Ok(n) => Read::Bytes(n),
    }
}

/// Resolves when the peer has closed or reset the connection, without reading from it. The
/// socket's readiness is left as it is (clearing it would leave a later read waiting for an event
/// that unread data never sends again), so while data waits unread this checks again every
/// [`HANGUP_CHECK_INTERVAL`] instead of waking at once.
async fn peer_hung_up<R: SocketRead>(reader: &R) {
    loop {
        match reader.ready(Interest::READABLE).await {
            Ok(ready) if !(ready.is_read_closed() || ready.is_error()) => {
                tokio::time::sleep(HANGUP_CHECK_INTERVAL).await;
            }
            _ => return,
        }
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

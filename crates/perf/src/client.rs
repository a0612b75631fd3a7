//! A lean, blocking AMQP 0-9-1 client over our own codec (`hourglass-wire`), just enough for
//! load generation: handshake (PLAIN), channels, synchronous methods, pre-encoded publishes,
//! and frame-at-a-time reading with a timeout. One client per thread; no tasks, no locks.
//! See docs/adr/0004-load-tool.md for why this and not lapin.
//!
//! `amqps://` URLs go over TLS (rustls, `transport.rs`); the rest is the same.
//!
//! Writes are buffered and sent by [`Client::flush`] (also before every blocking read), so a
//! batch of publishes or acks leaves in one `write` call. Heartbeats are switched off in
//! tune-ok (0), so an idle connection costs the broker nothing but its state.

use std::io::{ErrorKind, Read, Write};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::BytesMut;
use hourglass_wire::{
    encode_body_frame, encode_header_frame, encode_method_frame, BasicProperties, BasicPublish, ChannelOpen,
    ConnectionClose, ConnectionCloseOk, ConnectionOpen, ConnectionStartOk, ConnectionTuneOk, ContentHeader,
    FieldTable, Frame, FrameDecoder, LongStr, Method, ShortStr, FRAME_OVERHEAD, PROTOCOL_HEADER,
};

use crate::transport::Transport;
use crate::url::AmqpUrl;

/// The frame-max we ask for when the broker proposes none (RabbitMQ's default, 128 KiB).
const PREFERRED_FRAME_MAX: u32 = 131_072;
/// Octets read from the socket per `read` call: large enough that a busy consumer drains
/// hundreds of small deliveries per system call.
const READ_CHUNK: usize = 128 * 1024;
/// How long a synchronous method (declare, open, qos…) may take before the run is failed.
const RPC_TIMEOUT: Duration = Duration::from_secs(30);
/// Basic class id, for content headers (AMQP 0-9-1 §4.2.6.1).
const BASIC_CLASS_ID: u16 = 60;
/// The most frames `call` skips while waiting for its reply (deliveries already in flight).
const MAX_FRAMES_BEFORE_REPLY: usize = 1_000_000;

/// One AMQP connection on a blocking socket.
pub struct Client {
    stream: Transport,
    read_buf: BytesMut,
    scratch: Box<[u8]>,
    write_buf: BytesMut,
    decoder: FrameDecoder,
    frame_max: u32,
}

/// The method and content-header frames of one kind of publish, encoded once; each message then
/// only appends its body frame(s). Valid for bodies of exactly `body_size` octets.
pub struct PublishTemplate {
    channel: u16,
    prefix: BytesMut,
    body_size: usize,
}

impl Client {
    /// Connects, authenticates with PLAIN and opens the URL's vhost. Blocking reads give up
    /// after `read_timeout` (then [`Client::next_frame`] returns `Ok(None)`).
    pub fn connect(url: &AmqpUrl, read_timeout: Duration) -> anyhow::Result<Client> {
        let stream = Transport::connect(url)?;
        // Latency runs send one message at a time; Nagle would hold it back.
        stream.tcp().set_nodelay(true)?;
        stream.tcp().set_read_timeout(Some(read_timeout))?;
        let mut client = Client {
            stream,
            read_buf: BytesMut::with_capacity(READ_CHUNK),
            scratch: vec![0; READ_CHUNK].into_boxed_slice(),
            write_buf: BytesMut::with_capacity(READ_CHUNK),
            decoder: FrameDecoder::new(PREFERRED_FRAME_MAX),
            frame_max: PREFERRED_FRAME_MAX,
        };
        client.handshake(url)?;
        Ok(client)
    }

    /// Opens channel `channel`.
    pub fn open_channel(&mut self, channel: u16) -> anyhow::Result<()> {
        self.call(channel, ChannelOpen::default())?;
        Ok(())
    }

    /// Sends a synchronous method and returns the broker's reply on the same channel. Content
    /// frames and other channels' methods that arrive first are skipped.
    pub fn call(&mut self, channel: u16, method: impl Into<Method>) -> anyhow::Result<Method> {
        let method = method.into();
        let name = method.name();
        self.send(channel, &method);
        let deadline = Instant::now() + RPC_TIMEOUT;
        for _ in 0..MAX_FRAMES_BEFORE_REPLY {
            match self.next_frame()? {
                Some(Frame::Method { channel: on, method }) if on == channel => return Ok(method),
                Some(_) => {}
                None if Instant::now() >= deadline => bail!("no reply to {name} within {RPC_TIMEOUT:?}"),
                None => {}
            }
        }
        bail!("no reply to {name} within {MAX_FRAMES_BEFORE_REPLY} frames")
    }

    /// Buffers a method frame.
    pub fn send(&mut self, channel: u16, method: &Method) {
        encode_method_frame(channel, method, &mut self.write_buf);
    }

    /// Encodes the frames shared by every publish of `body_size` octets with `properties`.
    pub fn publish_template(
        &self,
        channel: u16,
        publish: BasicPublish,
        properties: BasicProperties,
        body_size: usize,
    ) -> PublishTemplate {
        let mut prefix = BytesMut::new();
        encode_method_frame(channel, &Method::BasicPublish(publish), &mut prefix);
        let properties = properties.into();
        let header = ContentHeader { class_id: BASIC_CLASS_ID, body_size: body_size as u64, properties };
        encode_header_frame(channel, &header, &mut prefix);
        PublishTemplate { channel, prefix, body_size }
    }

    /// Buffers one publish: the template's frames plus `body`, split at frame-max.
    pub fn publish(&mut self, template: &PublishTemplate, body: &[u8]) {
        debug_assert_eq!(body.len(), template.body_size, "template built for another body size");
        self.write_buf.extend_from_slice(&template.prefix);
        let chunk = (self.frame_max as usize).saturating_sub(FRAME_OVERHEAD).max(1);
        for piece in body.chunks(chunk) {
            encode_body_frame(template.channel, piece, &mut self.write_buf);
        }
    }

    /// Writes everything buffered.
    pub fn flush(&mut self) -> anyhow::Result<()> {
        if !self.write_buf.is_empty() {
            self.stream.write_all(&self.write_buf).context("write to broker")?;
            // TLS: push out what rustls still holds (a no-op on plain TCP).
            self.stream.flush().context("write to broker")?;
            self.write_buf.clear();
        }
        Ok(())
    }

    /// The next frame: from what is buffered, else after flushing writes and one blocking read.
    /// `Ok(None)` when the read timed out. A connection.close or channel.close from the broker
    /// is an error naming its reply code and text; heartbeats are skipped.
    pub fn next_frame(&mut self) -> anyhow::Result<Option<Frame>> {
        loop {
            if let Some(frame) = self.decoder.decode(&mut self.read_buf).context("bad frame from broker")? {
                match frame {
                    Frame::Heartbeat { .. } => continue,
                    Frame::Method { method: Method::ConnectionClose(close), .. } => {
                        self.send(0, &ConnectionCloseOk::default().into());
                        let _ = self.flush();
                        bail!("broker closed the connection: {} {}", close.reply_code, close.reply_text);
                    }
                    Frame::Method { channel, method: Method::ChannelClose(close) } => {
                        bail!("broker closed channel {channel}: {} {}", close.reply_code, close.reply_text);
                    }
                    frame => return Ok(Some(frame)),
                }
            }
            self.flush()?;
            if !self.fill()? {
                return Ok(None);
            }
        }
    }

    /// A frame if one is buffered or readable without blocking; used by publishers to notice a
    /// channel.close or connection.blocked without waiting.
    pub fn poll_frame(&mut self) -> anyhow::Result<Option<Frame>> {
        self.stream.tcp().set_nonblocking(true)?;
        let frame = self.next_frame();
        self.stream.tcp().set_nonblocking(false)?;
        frame
    }

    /// Closes the connection politely (connection.close, then close-ok or a timeout).
    pub fn close(mut self) -> anyhow::Result<()> {
        let close = ConnectionClose { reply_code: 200, reply_text: short("bye")?, class_id: 0, method_id: 0 };
        self.send(0, &close.into());
        let deadline = Instant::now() + RPC_TIMEOUT;
        for _ in 0..MAX_FRAMES_BEFORE_REPLY {
            match self.next_frame() {
                Ok(Some(Frame::Method { method: Method::ConnectionCloseOk(_), .. })) => return Ok(()),
                Ok(Some(_)) => {}
                Ok(None) if Instant::now() >= deadline => bail!("no connection.close-ok"),
                Ok(None) => {}
                // The broker may simply drop the socket after close-ok; that is a clean close.
                Err(_) => return Ok(()),
            }
        }
        Ok(())
    }

    fn handshake(&mut self, url: &AmqpUrl) -> anyhow::Result<()> {
        self.write_buf.extend_from_slice(PROTOCOL_HEADER);
        match self.expect_method("connection.start")? {
            Method::ConnectionStart(_) => {}
            other => bail!("expected connection.start, got {}", other.name()),
        }
        let response = format!("\0{}\0{}", url.user, url.password);
        let start_ok = ConnectionStartOk {
            client_properties: FieldTable::new(),
            mechanism: short("PLAIN")?,
            response: LongStr::from(response),
            locale: short("en_US")?,
        };
        self.send(0, &start_ok.into());
        let tune = match self.expect_method("connection.tune")? {
            Method::ConnectionTune(tune) => tune,
            other => bail!("expected connection.tune, got {}", other.name()),
        };
        self.frame_max = match tune.frame_max {
            0 => PREFERRED_FRAME_MAX,
            max => max.min(PREFERRED_FRAME_MAX),
        };
        self.decoder.set_max_frame_size(self.frame_max);
        let tune_ok =
            ConnectionTuneOk { channel_max: tune.channel_max, frame_max: self.frame_max, heartbeat: 0 };
        self.send(0, &tune_ok.into());
        let open = ConnectionOpen { virtual_host: short(&url.vhost)? };
        match self.call(0, open)? {
            Method::ConnectionOpenOk(_) => Ok(()),
            other => bail!("expected connection.open-ok, got {}", other.name()),
        }
    }

    fn expect_method(&mut self, what: &str) -> anyhow::Result<Method> {
        let deadline = Instant::now() + RPC_TIMEOUT;
        while Instant::now() < deadline {
            if let Some(Frame::Method { method, .. }) = self.next_frame()? {
                return Ok(method);
            }
        }
        bail!("no {what} within {RPC_TIMEOUT:?}")
    }

    /// Reads once into the buffer; false on timeout (or would-block in non-blocking mode).
    fn fill(&mut self) -> anyhow::Result<bool> {
        match self.stream.read(&mut self.scratch) {
            Ok(0) => bail!("broker closed the socket"),
            Ok(n) => {
                self.read_buf.extend_from_slice(&self.scratch[..n]);
                Ok(true)
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => Ok(false),
            Err(e) if e.kind() == ErrorKind::Interrupted => Ok(true),
            Err(e) => Err(e).context("read from broker"),
        }
    }
}

/// A short string from text we chose (names, mechanism); fails only past 255 octets.
pub fn short(text: &str) -> anyhow::Result<ShortStr> {
    ShortStr::try_from(text).map_err(|_| anyhow::anyhow!("{text:?} is longer than 255 octets"))
}

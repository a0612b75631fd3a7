//! Bytes waiting for the socket: frames are encoded straight into one buffer, which the server
//! takes with [`Output::take`] and writes. Also remembers when we last wrote, for heartbeats.
//!
//! Publisher confirms are coalesced while they wait: a basic.ack for tag N+1 right after the
//! basic.ack for tag N of the same channel (nothing else written in between, not yet taken)
//! replaces it with one basic.ack N+1 multiple=true, as RabbitMQ acks runs of confirms. That says
//! the same thing: a channel's confirms leave the broker in publish order (held ones hold back
//! everything after them), so every tag below N was already acked or nacked.

use bytes::BytesMut;
use hourglass_broker::Timestamp;
use hourglass_wire::{BasicAck, EncodedProperties, Method};

/// The most buffer capacity kept for the next frames when the output is taken. A burst (a
/// consumer handed a large backlog at once) can grow the buffer to hundreds of MiB; the spare
/// capacity a split leaves behind shares that allocation, so it would stay allocated (and be
/// reclaimed whole at the next growth) and an idle connection would hold the burst's memory for
/// good (issue #25). In steady flow far less is encoded between two takes (the server pauses
/// deliveries past 4 MiB queued for the socket).
pub(crate) const KEPT_CAPACITY_MAX: usize = 1024 * 1024;

/// The encoded frames not yet handed to the server.
#[derive(Debug)]
pub(crate) struct Output {
    buf: BytesMut,
    /// The frame size body frames are split to (the negotiated frame_max).
    frame_max: u32,
    last_write: Timestamp,
    /// The confirm that is the last frame in `buf`, if the last frame is one.
    last_ack: Option<LastAck>,
}

#[derive(Copy, Clone, Debug)]
struct LastAck {
    channel: u16,
    delivery_tag: u64,
    /// Where its frame starts in `buf`.
    at: usize,
}

impl Output {
    pub(crate) fn new(frame_max: u32, now: Timestamp) -> Self {
        Output { buf: BytesMut::new(), frame_max, last_write: now, last_ack: None }
    }

    pub(crate) fn set_frame_max(&mut self, frame_max: u32) {
        self.frame_max = frame_max;
    }

    /// A method frame without content.
    pub(crate) fn method(&mut self, channel: u16, method: &Method, now: Timestamp) {
        debug_assert!(!method.has_content(), "{} needs content", method.name());
        let last_ack = self.last_ack.take();
        if let Method::BasicAck(ack) = method {
            let next_of_last =
                last_ack.filter(|last| last.channel == channel && last.delivery_tag + 1 == ack.delivery_tag);
            let at = match next_of_last {
                Some(last) if !ack.multiple => {
                    // Its frame is the last thing in the buffer: rewrite it to cover this one too.
                    self.buf.truncate(last.at);
                    let run = BasicAck { delivery_tag: ack.delivery_tag, multiple: true };
                    hourglass_wire::encode_method_frame(channel, &run.into(), &mut self.buf);
                    last.at
                }
                _ => {
                    let at = self.buf.len();
                    hourglass_wire::encode_method_frame(channel, method, &mut self.buf);
                    at
                }
            };
            self.last_ack = Some(LastAck { channel, delivery_tag: ack.delivery_tag, at });
        } else {
            hourglass_wire::encode_method_frame(channel, method, &mut self.buf);
        }
        self.wrote(now);
    }

    /// A method frame, its content header (the properties copied as they are encoded) and its
    /// body split into frames of at most frame_max.
    pub(crate) fn content(
        &mut self,
        channel: u16,
        method: &Method,
        properties: &EncodedProperties,
        body: &[u8],
        now: Timestamp,
    ) {
        self.last_ack = None;
        hourglass_wire::encode_content(channel, method, properties, body, self.frame_max, &mut self.buf);
        self.wrote(now);
    }

    /// basic.deliver with its content, written from the delivery's parts.
    pub(crate) fn delivery(
        &mut self,
        channel: u16,
        deliver: hourglass_wire::DeliverArgs<'_>,
        properties: &EncodedProperties,
        body: &[u8],
        now: Timestamp,
    ) {
        self.last_ack = None;
        hourglass_wire::encode_delivery(channel, deliver, properties, body, self.frame_max, &mut self.buf);
        self.wrote(now);
    }

    pub(crate) fn heartbeat(&mut self, now: Timestamp) {
        self.last_ack = None;
        hourglass_wire::encode_heartbeat_frame(&mut self.buf);
        self.wrote(now);
    }

    /// Raw bytes (our protocol header; a held login refusal, already encoded).
    pub(crate) fn raw(&mut self, bytes: &[u8], now: Timestamp) {
        self.last_ack = None;
        self.buf.extend_from_slice(bytes);
        self.wrote(now);
    }

    /// Everything encoded so far; the buffer keeps its spare capacity for the next frames,
    /// unless it grew past `KEPT_CAPACITY_MAX`: then the allocation leaves with what is taken.
    pub(crate) fn take(&mut self) -> BytesMut {
        // What is taken is on its way to the socket: no longer ours to rewrite.
        self.last_ack = None;
        if self.buf.capacity() > KEPT_CAPACITY_MAX {
            return std::mem::take(&mut self.buf);
        }
        let taken = self.buf.split();
        if self.buf.capacity() < taken.len() {
            // The spare capacity left shares the taken allocation, so it cannot grow in place
            // while that is out: the next batch, likely as large, would be copied into a new
            // buffer at every doubling. A buffer of its size now costs no copy (and gives way
            // to the taken one if that comes back written, `recycle`).
            self.buf = BytesMut::with_capacity((taken.len() * 2).min(KEPT_CAPACITY_MAX));
        }
        taken
    }

    /// Takes back a buffer [`Output::take`] gave out, now written in full: the next frames go
    /// into its allocation from the start. The spare capacity `take` kept shares that
    /// allocation, and could not grow in place while the taken part was out, so without this a
    /// steady flow copied each batch into a new, larger buffer. A buffer past
    /// `KEPT_CAPACITY_MAX` is not kept (issue #25), nor one taken while frames were pending.
    pub(crate) fn recycle(&mut self, mut written: BytesMut) {
        if self.buf.is_empty() && written.capacity() <= KEPT_CAPACITY_MAX {
            written.clear();
            self.buf = written;
        }
    }

    /// When we last encoded anything (the server writes promptly, so this stands for "wrote").
    pub(crate) fn last_write(&self) -> Timestamp {
        self.last_write
    }

    fn wrote(&mut self, now: Timestamp) {
        self.last_write = self.last_write.max(now);
    }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use hourglass_wire::{BasicAck, BasicNack, Frame, FrameDecoder, Method};

    use super::*;

    fn ack(delivery_tag: u64) -> Method {
        BasicAck { delivery_tag, multiple: false }.into()
    }

    /// The (channel, method) of every frame in `bytes`.
    fn frames(mut bytes: BytesMut) -> Vec<(u16, Method)> {
        let mut decoder = FrameDecoder::new(0);
        let mut out = Vec::new();
        while let Ok(Some(frame)) = decoder.decode(&mut bytes) {
            if let Frame::Method { channel, method } = frame {
                out.push((channel, method));
            }
        }
        out
    }

    fn acked(channel: u16, delivery_tag: u64, multiple: bool) -> (u16, Method) {
        (channel, BasicAck { delivery_tag, multiple }.into())
    }

    /// A run of consecutive confirms of one channel leaves as one multiple=true ack of the last.
    #[test]
    fn consecutive_confirms_of_a_channel_coalesce() {
        let now = Timestamp::from_millis(0);
        let mut out = Output::new(4096, now);
        for tag in 1..=5 {
            out.method(1, &ack(tag), now);
        }
        assert_eq!(frames(out.take()), vec![acked(1, 5, true)]);
        // The first one alone stays as it was.
        out.method(1, &ack(6), now);
        assert_eq!(frames(out.take()), vec![acked(1, 6, false)], "after take(): nothing to extend");
    }

    /// Only the frame just written is extended: a gap, another channel, a nack or any other
    /// frame in between ends the run.
    #[test]
    fn runs_end_at_gaps_other_channels_and_other_frames() {
        let now = Timestamp::from_millis(0);
        let mut out = Output::new(4096, now);
        out.method(1, &ack(1), now);
        out.method(1, &ack(3), now);
        out.method(2, &ack(4), now);
        out.method(1, &BasicNack { delivery_tag: 5, multiple: false, requeue: true }.into(), now);
        out.method(1, &ack(6), now);
        out.heartbeat(now);
        out.method(1, &ack(7), now);
        out.method(1, &ack(8), now);
        let nack = (1, BasicNack { delivery_tag: 5, multiple: false, requeue: true }.into());
        assert_eq!(
            frames(out.take()),
            vec![
                acked(1, 1, false),
                acked(1, 3, false),
                acked(2, 4, false),
                nack,
                acked(1, 6, false),
                acked(1, 8, true)
            ]
        );
    }

    /// A buffer taken, written and handed back takes the next frames in the same allocation;
    /// one past `KEPT_CAPACITY_MAX` is not kept.
    #[test]
    fn a_written_buffer_takes_the_next_frames() {
        let now = Timestamp::from_millis(0);
        let mut output = Output::new(131_072, now);
        let deliver: Method = hourglass_wire::BasicDeliver::default().into();
        let batch = |output: &mut Output| {
            for _ in 0..100 {
                output.content(1, &deliver, &EncodedProperties::default(), &[7; 64], now);
            }
        };
        batch(&mut output);
        let written = output.take();
        let allocation = written.as_ptr();
        output.recycle(written);
        batch(&mut output);
        let again = output.take();
        assert_eq!(again.as_ptr(), allocation);
        assert_eq!(frames(again).len(), 100);

        for _ in 0..2_000 {
            output.content(1, &deliver, &EncodedProperties::default(), &[7; 2048], now);
        }
        let burst = output.take();
        assert!(burst.capacity() > KEPT_CAPACITY_MAX);
        output.recycle(burst);
        assert!(output.buf.capacity() <= KEPT_CAPACITY_MAX, "kept {} bytes", output.buf.capacity());
    }

    /// A burst of deliveries taken and written leaves no large buffer behind (issue #25).
    #[test]
    fn a_burst_of_output_does_not_stay_allocated_once_taken() {
        let now = Timestamp::from_millis(0);
        let mut output = Output::new(131_072, now);
        let deliver: Method = hourglass_wire::BasicDeliver::default().into();
        for _ in 0..2_000 {
            output.content(1, &deliver, &EncodedProperties::default(), &[7; 2048], now);
        }
        // Written to the socket and dropped; then more frames than the buffer's spare capacity
        // held, which reclaimed the burst's whole allocation when the output kept a share of it.
        drop(output.take());
        for _ in 0..200 {
            output.content(1, &deliver, &EncodedProperties::default(), &[7; 2048], now);
        }
        assert!(output.buf.capacity() <= KEPT_CAPACITY_MAX, "kept {} bytes", output.buf.capacity());
    }
}

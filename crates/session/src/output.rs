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
    /// Room made at the first frame after a take whose buffer did not come back (`recycle`):
    /// twice the batch taken, at most `KEPT_CAPACITY_MAX`; none after a burst past it.
    room: usize,
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
        Output { buf: BytesMut::new(), frame_max, last_write: now, last_ack: None, room: 0 }
    }

    pub(crate) fn set_frame_max(&mut self, frame_max: u32) {
        self.frame_max = frame_max;
    }

    /// A method frame without content.
    pub(crate) fn method(&mut self, channel: u16, method: &Method, now: Timestamp) {
        debug_assert!(!method.has_content(), "{} needs content", method.name());
        self.make_room();
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
        self.make_room();
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
        self.make_room();
        hourglass_wire::encode_delivery(channel, deliver, properties, body, self.frame_max, &mut self.buf);
        self.wrote(now);
    }

    pub(crate) fn heartbeat(&mut self, now: Timestamp) {
        self.last_ack = None;
        self.make_room();
        hourglass_wire::encode_heartbeat_frame(&mut self.buf);
        self.wrote(now);
    }

    /// Raw bytes (our protocol header; a held login refusal, already encoded).
    pub(crate) fn raw(&mut self, bytes: &[u8], now: Timestamp) {
        self.last_ack = None;
        self.make_room();
        self.buf.extend_from_slice(bytes);
        self.wrote(now);
    }

    /// Everything encoded so far, the whole buffer with it. If the socket takes it all at once,
    /// the buffer comes back (`recycle`) and takes the next frames with its capacity intact;
    /// otherwise the next frames get a buffer with room for twice this batch (`make_room`). A
    /// buffer past `KEPT_CAPACITY_MAX` leaves for good (issue #25). Splitting the buffer instead
    /// kept spare capacity that shares the taken allocation: it could not grow in place while
    /// that was out, and once reclaimed it grew a few octets at a time.
    pub(crate) fn take(&mut self) -> BytesMut {
        // What is taken is on its way to the socket: no longer ours to rewrite.
        self.last_ack = None;
        if self.buf.is_empty() {
            return BytesMut::new();
        }
        let burst = self.buf.capacity() > KEPT_CAPACITY_MAX;
        self.room = if burst { 0 } else { (self.buf.len() * 2).min(KEPT_CAPACITY_MAX) };
        std::mem::take(&mut self.buf)
    }

    /// Takes back a buffer [`Output::take`] gave out, now written in full: the next frames go
    /// into it, its capacity intact. One past `KEPT_CAPACITY_MAX` is not kept (issue #25), nor
    /// one taken while frames were encoded since.
    pub(crate) fn recycle(&mut self, mut written: BytesMut) {
        if self.buf.is_empty() && written.capacity() <= KEPT_CAPACITY_MAX {
            written.clear();
            self.buf = written;
        }
    }

    /// After a take whose buffer did not come back, makes the room for the next batch at once,
    /// so that it does not grow by doubling, a copy at every step.
    fn make_room(&mut self) {
        if self.buf.capacity() == 0 && self.room > 0 {
            self.buf.reserve(self.room);
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

    /// A buffer taken, written and handed back takes the next frames in the same allocation,
    /// with all its capacity; one taken and not handed back leaves room for twice its batch; one
    /// past `KEPT_CAPACITY_MAX` is not kept.
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
        let (allocation, capacity, len) = (written.as_ptr(), written.capacity(), written.len());
        output.recycle(written);
        assert_eq!(output.buf.capacity(), capacity, "the whole capacity comes back");
        batch(&mut output);
        let again = output.take();
        assert_eq!(again.as_ptr(), allocation);
        assert_eq!(frames(again).len(), 100);

        // Not handed back (the socket did not take it all): room for twice the batch at once.
        batch(&mut output);
        assert!(output.buf.capacity() >= 2 * len, "room for {} octets", output.buf.capacity());

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

//! Micro-benchmarks of the publish path through the codec: encoding basic.publish + content
//! header + body, and decoding those three frames back, for a 16 B and a 1 KiB body.
//! Run with `cargo bench -p hourglass-wire`.

use bytes::BytesMut;
use hourglass_wire::{encode_content, BasicPublish, EncodedProperties, FrameDecoder, Method, ShortStr};

/// RabbitMQ's default frame-max.
const FRAME_MAX: u32 = 131_072;
/// Body sizes of the standard benchmark matrix.
const SIZES: [usize; 2] = [16, 1024];

fn main() {
    divan::main();
}

fn publish() -> Method {
    let routing_key = ShortStr::try_from("perf-queue").unwrap_or_default();
    Method::BasicPublish(BasicPublish { routing_key, ..Default::default() })
}

/// Encodes one publish (three frames) into a reused buffer.
#[divan::bench(args = SIZES)]
fn encode_publish(bencher: divan::Bencher, size: usize) {
    let (method, properties, body) = (publish(), EncodedProperties::default(), vec![0u8; size]);
    let mut out = BytesMut::with_capacity(2 * size + 128);
    bencher.bench_local(|| {
        out.clear();
        encode_content(1, &method, &properties, &body, FRAME_MAX, &mut out);
        divan::black_box(out.len())
    });
}

/// Decodes the three frames of one publish.
#[divan::bench(args = SIZES)]
fn decode_publish(bencher: divan::Bencher, size: usize) {
    let mut encoded = BytesMut::new();
    encode_content(1, &publish(), &EncodedProperties::default(), &vec![0u8; size], FRAME_MAX, &mut encoded);
    let encoded = encoded.freeze();
    let mut decoder = FrameDecoder::new(FRAME_MAX);
    bencher.with_inputs(|| BytesMut::from(&encoded[..])).bench_local_values(|mut input| {
        let mut frames = 0;
        while let Ok(Some(frame)) = decoder.decode(&mut input) {
            divan::black_box(frame);
            frames += 1;
        }
        frames
    });
}

//! Property tests: arbitrary or corrupted input never panics and every
//! failure is a DecodeError.

mod common;

use bytes::{Bytes, BytesMut};
use common::*;
use hourglass_wire::*;
use proptest::prelude::*;

/// Runs the decoder over `chunks` until it errors or runs dry.
fn drain(chunks: Vec<Vec<u8>>, max: u32) {
    let mut decoder = FrameDecoder::new(max);
    let mut buf = BytesMut::new();
    for piece in chunks {
        buf.extend_from_slice(&piece);
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(frame)) => {
                    // Anything that decodes must re-encode without panicking.
                    let mut out = BytesMut::new();
                    encode_frame(&frame, &mut out);
                }
                Ok(None) => break,
                Err(e) => {
                    assert!([501, 502, 540].contains(&e.reply_code()));
                    let _ = e.reply_text();
                    return;
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Arbitrary bytes in arbitrary chunks never panic the frame decoder.
    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512),
                                sizes in proptest::collection::vec(1usize..32, 1..8)) {
        drain(chunk(&data, &sizes), 4096);
    }

    /// Well-framed envelopes around random payloads exercise method, header
    /// and table decoding without panicking; properties kept encoded agree with the decoder.
    #[test]
    fn random_payloads_never_panic(kind in prop_oneof![Just(1u8), Just(2), Just(3), Just(8)],
                                   class in prop_oneof![Just(10u16), Just(20), Just(40), Just(50), Just(60), Just(85), Just(90), any::<u16>()],
                                   method in prop_oneof![(0u16..130), any::<u16>()],
                                   tail in proptest::collection::vec(any::<u8>(), 0..256)) {
        let mut payload = Vec::new();
        payload.extend_from_slice(&class.to_be_bytes());
        payload.extend_from_slice(&method.to_be_bytes());
        payload.extend_from_slice(&tail);
        let mut frame = vec![kind, 0, 1];
        frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        frame.extend_from_slice(&payload);
        frame.push(FRAME_END);
        drain(vec![frame], 0);
        let _ = Method::decode(Bytes::from(payload.clone()));
        // Properties kept encoded accept and refuse exactly what the full decoder does.
        let (mut decoded, mut split) = (Bytes::from(tail.clone()), Bytes::from(tail.clone()));
        let outcome = BasicProperties::decode(&mut decoded);
        let encoded = EncodedProperties::split_from(&mut split);
        prop_assert_eq!(encoded.map(|e| e.decode()), outcome);
        prop_assert_eq!(decoded, split);
        let _ = FieldTable::from_raw(Bytes::from(tail));
    }

    /// Corrupting one byte of a valid frame stream never panics.
    #[test]
    fn corrupted_frames_never_panic(frames in proptest::collection::vec(frame(), 1..4),
                                    pos in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut stream = BytesMut::new();
        for f in &frames {
            encode_frame(f, &mut stream);
        }
        let i = pos.index(stream.len());
        stream[i] = byte;
        drain(vec![stream.to_vec()], 0);
    }

    /// Arbitrary bytes as a field table either validate (and then iterate
    /// fully, re-encoding to the same bytes) or are rejected.
    #[test]
    fn random_tables_validate_or_fail(data in proptest::collection::vec(any::<u8>(), 0..128)) {
        if let Ok(table) = FieldTable::from_raw(Bytes::from(data.clone())) {
            let rebuilt = FieldTable::from_entries(table.iter().map(|(k, v)| (k.into_bytes(), v)));
            // Lossy only for 'L' (re-encoded as 'l') and bools (normalised).
            prop_assert_eq!(rebuilt.raw().len(), data.len());
        }
    }
}

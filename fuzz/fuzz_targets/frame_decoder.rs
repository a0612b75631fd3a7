//! Fuzzes `FrameDecoder`: arbitrary bytes, fed in chunk sizes taken from the
//! input itself, must never panic; every frame that decodes must re-encode
//! and decode again to an equal frame.
#![no_main]

use bytes::BytesMut;
use hourglass_wire::{
    encode_body_frame, encode_header_frame, encode_method_frame, Frame, FrameDecoder, FRAME_END,
};
use libfuzzer_sys::fuzz_target;

/// Re-encodes a decoded frame (heartbeats keep their channel number).
fn encode(frame: &Frame, out: &mut BytesMut) {
    match frame {
        Frame::Method { channel, method } => encode_method_frame(*channel, method, out),
        Frame::Header { channel, header } => encode_header_frame(*channel, header, out),
        Frame::Body { channel, payload } => encode_body_frame(*channel, payload, out),
        Frame::Heartbeat { channel } => {
            out.extend_from_slice(&[8]);
            out.extend_from_slice(&channel.to_be_bytes());
            out.extend_from_slice(&[0, 0, 0, 0, FRAME_END]);
        }
    }
}

/// Re-encoding a decoded frame and decoding it again gives the same frame.
fn check_roundtrip(frame: &Frame) {
    let mut out = BytesMut::new();
    encode(frame, &mut out);
    let mut decoder = FrameDecoder::new(0);
    match decoder.decode(&mut out) {
        Ok(Some(again)) => assert_eq!(&again, frame),
        other => panic!("re-encoded frame did not decode: {other:?}"),
    }
    assert!(out.is_empty(), "re-encoded frame left trailing bytes");
}

fuzz_target!(|data: &[u8]| {
    // The first octets choose the chunk sizes and the frame limit; the rest
    // is the stream.
    let Some((&seed, rest)) = data.split_first() else {
        return;
    };
    let Some((&limit, stream)) = rest.split_first() else {
        return;
    };
    let max = match limit % 3 {
        0 => 0,
        1 => 4096,
        _ => 131_072,
    };
    let mut decoder = FrameDecoder::new(max);
    let mut buf = BytesMut::new();
    let mut pos = 0;
    let mut step = usize::from(seed % 17) + 1;
    while pos < stream.len() {
        let end = (pos + step).min(stream.len());
        buf.extend_from_slice(&stream[pos..end]);
        pos = end;
        step = (step * 7 + 3) % 23 + 1;
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(frame)) => check_roundtrip(&frame),
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
});

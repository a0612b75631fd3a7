//! Fuzzes the AMQP 1.0 value codec (issue 42): arbitrary bytes must never panic the decoder,
//! and a value that decodes must re-encode to bytes that decode to a value encoding the same
//! way again (bytes, not values, are compared: NaN is not equal to itself).
#![no_main]

use bytes::BytesMut;
use hourglass_wire::amqp1::{decode_value, encode_value, Value};
use libfuzzer_sys::fuzz_target;

fn encoded(value: &Value) -> BytesMut {
    let mut out = BytesMut::new();
    encode_value(value, &mut out);
    out
}

fuzz_target!(|data: &[u8]| {
    let Ok((value, _)) = decode_value(data) else { return };
    let once = encoded(&value);
    let (again, used) = decode_value(&once).expect("a re-encoded value decodes");
    assert_eq!(used, once.len(), "a re-encoded value is read whole");
    assert_eq!(encoded(&again), once, "the encoding is stable");
});

//! Fuzzes the AMQP 1.0 value codec (issue 42): arbitrary bytes must never panic the decoder,
//! and a value that decodes must re-encode to bytes that decode to a value encoding the same
//! way again (bytes, not values, are compared: NaN is not equal to itself). The fast transfer
//! reader must read whatever it accepts exactly as the general reader does, and `value_len`,
//! which builds nothing, must accept and refuse exactly what `decode_value` does.
#![no_main]

use bytes::BytesMut;
use hourglass_wire::amqp1::{decode_transfer, decode_value, encode_value, value_len, Performative, Value};
use libfuzzer_sys::fuzz_target;

fn encoded(value: &Value) -> BytesMut {
    let mut out = BytesMut::new();
    encode_value(value, &mut out);
    out
}

fuzz_target!(|data: &[u8]| {
    if let Some((fast, used)) = decode_transfer(data) {
        let (value, general_used) = decode_value(data).expect("what the fast reader takes decodes");
        assert_eq!(Performative::from_value(&value).ok(), Some(fast), "the two readers agree");
        assert_eq!(used, general_used);
    }
    let decoded = decode_value(data);
    assert_eq!(value_len(data), decoded.as_ref().map(|(_, used)| *used).map_err(Clone::clone), "measured as decoded");
    let Ok((value, _)) = decoded else { return };
    let once = encoded(&value);
    let (again, used) = decode_value(&once).expect("a re-encoded value decodes");
    assert_eq!(used, once.len(), "a re-encoded value is read whole");
    assert_eq!(encoded(&again), once, "the encoding is stable");
});

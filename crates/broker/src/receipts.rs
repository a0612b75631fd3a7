//! Receipt handles (`x-receipt-handle`, semantics §4): what a delivery under a visibility timeout
//! is named by when its visibility is changed (issue 26: a handle was `6.2.1.1`, then `6.2.1.2`,
//! so anyone who could read the queue could steer another consumer's deliveries, and a handle of
//! a closed channel named the delivery with the same tag on the channel reopened under its
//! number).
//!
//! A handle names the queue, the delivery (connection, channel number, tag), the channel's
//! opening ([`Receipt::channel_opening`]: no two openings of a channel in one broker's life have
//! the same one) and the queue entry delivered ([`Receipt::entry`]: what a late SQS delete
//! removes once the delivery has timed out), and carries an HMAC-SHA256 of all of it under the broker's [`ReceiptKey`],
//! random for each broker's life. So a handle cannot be made or altered without the key, names
//! one delivery only, and is void after a restart or a failover (when the delivery it named has
//! gone anyway: deliveries end with their channel).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

use crate::api::{ChannelId, ConnectionId};
use crate::queue::visibility::DeliveryRef;
use crate::queue::QueueId;

/// The handle format's first byte: a later format can be told apart (2: with the entry).
const FORMAT: u8 = 2;
/// The named fields: format, queue, connection, channel, channel opening, tag, entry.
const FIELDS_LEN: usize = 1 + 8 + 8 + 2 + 8 + 8 + 8;
/// HMAC-SHA256's tag, kept whole (`hmac::verify` compares it in constant time).
const TAG_LEN: usize = 32;
/// The longest string that can be a handle: anything longer is refused before decoding.
const HANDLE_LEN_MAX: usize = (FIELDS_LEN + TAG_LEN).div_ceil(3) * 4;

/// One delivery as its handle names it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Receipt {
    pub queue: QueueId,
    pub delivery: DeliveryRef,
    /// Which opening of the channel the delivery was made on (`Channel::opening`).
    pub channel_opening: u64,
    /// The queue entry delivered (`Entry::seq`).
    pub entry: u64,
}

/// The key handles are signed with: one per broker, random, never stored.
#[derive(Clone)]
pub struct ReceiptKey(hmac::Key);

impl std::fmt::Debug for ReceiptKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReceiptKey(..)")
    }
}

impl ReceiptKey {
    /// A fresh key from the operating system's random source: for the driver to put in
    /// `BrokerConfig` (the broker itself reads no random source).
    pub fn random() -> ReceiptKey {
        let mut bytes = [0u8; 32];
        // The OS random source failing is not something a broker can go on without.
        SystemRandom::new().fill(&mut bytes).expect("the operating system's random source failed");
        ReceiptKey::from_bytes(&bytes)
    }

    pub fn from_bytes(bytes: &[u8; 32]) -> ReceiptKey {
        ReceiptKey(hmac::Key::new(hmac::HMAC_SHA256, bytes))
    }

    /// The handle for `receipt`: URL-safe base64 of its fields and their HMAC.
    pub fn issue(&self, receipt: &Receipt) -> String {
        let fields = encode(receipt);
        let tag = hmac::sign(&self.0, &fields);
        let mut bytes = Vec::with_capacity(FIELDS_LEN + TAG_LEN);
        bytes.extend_from_slice(&fields);
        bytes.extend_from_slice(tag.as_ref());
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// The receipt `handle` names, if this key issued it; `None` for anything else (a foreign,
    /// altered or truncated string, or a handle of another broker or another life of this one).
    pub fn open(&self, handle: &str) -> Option<Receipt> {
        if handle.len() > HANDLE_LEN_MAX {
            return None;
        }
        let bytes = URL_SAFE_NO_PAD.decode(handle).ok()?;
        if bytes.len() != FIELDS_LEN + TAG_LEN {
            return None;
        }
        let (fields, tag) = bytes.split_at(FIELDS_LEN);
        hmac::verify(&self.0, fields, tag).ok()?;
        decode(fields)
    }
}

fn encode(receipt: &Receipt) -> [u8; FIELDS_LEN] {
    let mut out = [0u8; FIELDS_LEN];
    out[0] = FORMAT;
    out[1..9].copy_from_slice(&receipt.queue.0.to_be_bytes());
    out[9..17].copy_from_slice(&receipt.delivery.conn.0.to_be_bytes());
    out[17..19].copy_from_slice(&receipt.delivery.channel.0.to_be_bytes());
    out[19..27].copy_from_slice(&receipt.channel_opening.to_be_bytes());
    out[27..35].copy_from_slice(&receipt.delivery.tag.to_be_bytes());
    out[35..43].copy_from_slice(&receipt.entry.to_be_bytes());
    out
}

fn decode(fields: &[u8]) -> Option<Receipt> {
    if fields.first() != Some(&FORMAT) {
        return None;
    }
    let u64_at = |at: usize| fields.get(at..at + 8)?.try_into().ok().map(u64::from_be_bytes);
    let channel = u16::from_be_bytes(fields.get(17..19)?.try_into().ok()?);
    Some(Receipt {
        queue: QueueId(u64_at(1)?),
        delivery: DeliveryRef {
            conn: ConnectionId(u64_at(9)?),
            channel: ChannelId(channel),
            tag: u64_at(27)?,
        },
        channel_opening: u64_at(19)?,
        entry: u64_at(35)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receipt() -> Receipt {
        Receipt {
            queue: QueueId(6),
            delivery: DeliveryRef { conn: ConnectionId(2), channel: ChannelId(1), tag: 1 },
            channel_opening: 17,
            entry: 40,
        }
    }

    /// A handle reads back to the delivery it names, under the key that issued it only.
    #[test]
    fn a_handle_opens_under_its_own_key_only() {
        let key = ReceiptKey::random();
        let handle = key.issue(&receipt());
        assert_eq!(key.open(&handle), Some(receipt()));
        assert_eq!(ReceiptKey::random().open(&handle), None, "another broker's key");
        assert!(handle.len() <= HANDLE_LEN_MAX);
    }

    /// Handles of neighbouring deliveries cannot be made from one another: every field, and
    /// every bit of a handle, is covered by the MAC.
    #[test]
    fn altered_or_guessed_handles_are_refused() {
        let key = ReceiptKey::from_bytes(&[7; 32]);
        let handle = key.issue(&receipt());
        let mut bytes = URL_SAFE_NO_PAD.decode(&handle).unwrap();
        for at in 0..bytes.len() {
            bytes[at] ^= 1;
            assert_eq!(key.open(&URL_SAFE_NO_PAD.encode(&bytes)), None, "bit 0 of byte {at} flipped");
            bytes[at] ^= 1;
        }
        let next = Receipt { delivery: DeliveryRef { tag: 2, ..receipt().delivery }, ..receipt() };
        assert_ne!(key.issue(&next), handle);
        for foreign in ["", "6.2.1.1", "6.2.1.2", &handle[..handle.len() - 1], &format!("{handle}A"), "%%%"] {
            assert_eq!(key.open(foreign), None, "{foreign:?}");
        }
        assert_eq!(key.open(&"A".repeat(10_000)), None);
    }
}

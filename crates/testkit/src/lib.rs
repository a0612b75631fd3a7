//! Test harness: the broker driven directly with a manual clock, no sockets and no sleeps.
//!
//! `TestBroker` owns a `Broker` and a `ManualClock`; `Chan` names a channel on a connection the
//! harness opened. Calls return the effects they caused, so a test reads as "do X, expect Y".

mod clock;
mod harness;
mod inspect;

pub use clock::ManualClock;
pub use harness::{short, Chan, TestBroker};
pub use inspect::{deliveries, methods, Delivery};

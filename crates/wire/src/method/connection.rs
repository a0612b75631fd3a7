//! Class `connection` (id 10): connection negotiation and shutdown
//! (amqp0-9-1.xml §connection, plus RabbitMQ's blocked/unblocked and
//! update-secret extensions).

use crate::codec::{Arg, ArgReader, ArgSize, ArgWriter, Res};
use crate::field_table::FieldTable;
use crate::types::{LongStr, ShortStr};

amqp_class! {
    /// connection.start (10/10): server proposes protocol version, properties,
    /// SASL mechanisms and locales (space-separated long strings).
    ConnectionStart = (10, 10, "connection.start") {
        pub version_major: u8,
        pub version_minor: u8,
        pub server_properties: FieldTable,
        pub mechanisms: LongStr,
        pub locales: LongStr,
    }
    /// connection.start-ok (10/11): client picks mechanism and locale.
    ConnectionStartOk = (10, 11, "connection.start-ok") {
        pub client_properties: FieldTable,
        pub mechanism: ShortStr,
        pub response: LongStr,
        pub locale: ShortStr,
    }
    /// connection.secure (10/20): SASL challenge.
    ConnectionSecure = (10, 20, "connection.secure") {
        pub challenge: LongStr,
    }
    /// connection.secure-ok (10/21): SASL response.
    ConnectionSecureOk = (10, 21, "connection.secure-ok") {
        pub response: LongStr,
    }
    /// connection.tune (10/30): server's limits (0 = no limit).
    ConnectionTune = (10, 30, "connection.tune") {
        pub channel_max: u16,
        pub frame_max: u32,
        pub heartbeat: u16,
    }
    /// connection.tune-ok (10/31): the limits the client accepts.
    ConnectionTuneOk = (10, 31, "connection.tune-ok") {
        pub channel_max: u16,
        pub frame_max: u32,
        pub heartbeat: u16,
    }
    /// connection.open (10/40): selects the virtual host.
    ConnectionOpen = (10, 40, "connection.open") {
        pub virtual_host: ShortStr,
        reserved capabilities: ShortStr,
        reserved insist: bool,
    }
    /// connection.open-ok (10/41).
    ConnectionOpenOk = (10, 41, "connection.open-ok") {
        reserved known_hosts: ShortStr,
    }
    /// connection.close (10/50): reply code/text and the failing method.
    ConnectionClose = (10, 50, "connection.close") {
        pub reply_code: u16,
        pub reply_text: ShortStr,
        pub class_id: u16,
        pub method_id: u16,
    }
    /// connection.close-ok (10/51).
    ConnectionCloseOk = (10, 51, "connection.close-ok") {}
    /// connection.blocked (10/60, RabbitMQ): publishing is blocked.
    ConnectionBlocked = (10, 60, "connection.blocked") {
        pub reason: ShortStr,
    }
    /// connection.unblocked (10/61, RabbitMQ).
    ConnectionUnblocked = (10, 61, "connection.unblocked") {}
    /// connection.update-secret (10/70, RabbitMQ): new credentials.
    ConnectionUpdateSecret = (10, 70, "connection.update-secret") {
        pub new_secret: LongStr,
        pub reason: ShortStr,
    }
    /// connection.update-secret-ok (10/71, RabbitMQ).
    ConnectionUpdateSecretOk = (10, 71, "connection.update-secret-ok") {}
}

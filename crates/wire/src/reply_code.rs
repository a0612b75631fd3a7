//! AMQP 0-9-1 reply codes (spec §1.1 "Constants", amqp0-9-1.xml `constant`
//! elements) and their classification into soft (channel) and hard
//! (connection) errors.

/// 200: the method completed successfully.
pub const REPLY_SUCCESS: u16 = 200;
/// 311: content larger than the server will accept (soft).
pub const CONTENT_TOO_LARGE: u16 = 311;
/// 312: a mandatory message could not be routed (basic.return).
pub const NO_ROUTE: u16 = 312;
/// 313: an immediate message had no consumers (basic.return).
pub const NO_CONSUMERS: u16 = 313;
/// 320: an operator closed the connection (hard).
pub const CONNECTION_FORCED: u16 = 320;
/// 402: unknown virtual host (hard).
pub const INVALID_PATH: u16 = 402;
/// 403: access refused by security settings (soft).
pub const ACCESS_REFUSED: u16 = 403;
/// 404: entity does not exist (soft).
pub const NOT_FOUND: u16 = 404;
/// 405: entity locked by another client, e.g. exclusive queue (soft).
pub const RESOURCE_LOCKED: u16 = 405;
/// 406: a precondition failed, e.g. inequivalent arguments (soft).
pub const PRECONDITION_FAILED: u16 = 406;
/// 501: malformed frame (hard).
pub const FRAME_ERROR: u16 = 501;
/// 502: illegal field values (hard).
pub const SYNTAX_ERROR: u16 = 502;
/// 503: invalid sequence of frames or methods (hard).
pub const COMMAND_INVALID: u16 = 503;
/// 504: channel not open or misused (hard).
pub const CHANNEL_ERROR: u16 = 504;
/// 505: unexpected frame type (hard).
pub const UNEXPECTED_FRAME: u16 = 505;
/// 506: server out of resources (hard).
pub const RESOURCE_ERROR: u16 = 506;
/// 530: not allowed by the server's configuration (hard).
pub const NOT_ALLOWED: u16 = 530;
/// 540: functionality not implemented (hard).
pub const NOT_IMPLEMENTED: u16 = 540;
/// 541: internal server error (hard).
pub const INTERNAL_ERROR: u16 = 541;

/// The spec's constant name for `code` ("NOT_FOUND"), as RabbitMQ prefixes
/// its reply texts; "UNKNOWN" for codes the spec does not define.
pub fn reply_code_name(code: u16) -> &'static str {
    match code {
        REPLY_SUCCESS => "REPLY_SUCCESS",
        CONTENT_TOO_LARGE => "CONTENT_TOO_LARGE",
        NO_ROUTE => "NO_ROUTE",
        NO_CONSUMERS => "NO_CONSUMERS",
        CONNECTION_FORCED => "CONNECTION_FORCED",
        INVALID_PATH => "INVALID_PATH",
        ACCESS_REFUSED => "ACCESS_REFUSED",
        NOT_FOUND => "NOT_FOUND",
        RESOURCE_LOCKED => "RESOURCE_LOCKED",
        PRECONDITION_FAILED => "PRECONDITION_FAILED",
        FRAME_ERROR => "FRAME_ERROR",
        SYNTAX_ERROR => "SYNTAX_ERROR",
        COMMAND_INVALID => "COMMAND_INVALID",
        CHANNEL_ERROR => "CHANNEL_ERROR",
        UNEXPECTED_FRAME => "UNEXPECTED_FRAME",
        RESOURCE_ERROR => "RESOURCE_ERROR",
        NOT_ALLOWED => "NOT_ALLOWED",
        NOT_IMPLEMENTED => "NOT_IMPLEMENTED",
        INTERNAL_ERROR => "INTERNAL_ERROR",
        _ => "UNKNOWN",
    }
}

/// True for the spec's "hard-error" class: the whole connection must be
/// closed (connection.close), not just the channel.
pub fn is_connection_error(code: u16) -> bool {
    matches!(
        code,
        CONNECTION_FORCED
            | INVALID_PATH
            | FRAME_ERROR
            | SYNTAX_ERROR
            | COMMAND_INVALID
            | CHANNEL_ERROR
            | UNEXPECTED_FRAME
            | RESOURCE_ERROR
            | NOT_ALLOWED
            | NOT_IMPLEMENTED
            | INTERNAL_ERROR
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hard errors per the spec are connection errors; soft ones are not.
    #[test]
    fn classification_matches_spec() {
        for code in [320, 402, 501, 502, 503, 504, 505, 506, 530, 540, 541] {
            assert!(is_connection_error(code), "{code}");
        }
        for code in [200, 311, 312, 313, 403, 404, 405, 406] {
            assert!(!is_connection_error(code), "{code}");
        }
    }

    /// Names are the spec constant names.
    #[test]
    fn names() {
        assert_eq!(reply_code_name(NOT_FOUND), "NOT_FOUND");
        assert_eq!(reply_code_name(PRECONDITION_FAILED), "PRECONDITION_FAILED");
        assert_eq!(reply_code_name(999), "UNKNOWN");
    }
}

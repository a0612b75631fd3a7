//! AMQP 1.0's SASL layer (part 5.3) and the open's vhost check, with the same users, limits and
//! failed-login slowdown as 0-9-1: PLAIN always, EXTERNAL when it is turned on and the client
//! presented a verified certificate, ANONYMOUS when an anonymous user is configured (as RabbitMQ
//! 4's `anonymous_login_user`; off by default here).

use std::sync::Arc;

use bytes::Bytes;
use hourglass_broker::{ClientCapabilities, ConnectionInfo, LoginInfo, Permissions, Timestamp, AMQP_1_0};
use hourglass_wire::amqp1::Value;
use hourglass_wire::{FieldTable, FieldValue, LongStr};

use super::ConnectionFault;
use crate::auth::{AuthError, ClientCertificate, LoginRefused, Mechanism, VhostAccess};
use crate::client_limits::Seat;
use crate::config::SessionConfig;
use crate::connection::PeerInfo;
use crate::login_limiter::Admission;

/// sasl-outcome codes (part 5.3.3.6).
pub(super) const OK: u8 = 0;
pub(super) const AUTH: u8 = 1;

/// Who logged in, and how.
#[derive(Clone, Debug)]
pub(super) struct Login {
    pub username: String,
    pub mechanism: &'static str,
}

/// A refused login: for the log, and how long the limiter holds the answer.
#[derive(Debug)]
pub(super) struct Refusal {
    pub username: String,
    pub reason: LoginRefused,
    pub hold_ms: u64,
}

/// The mechanisms offered to this client.
pub(super) fn mechanisms(config: &SessionConfig, has_certificate: bool) -> Vec<String> {
    let mut offered = vec!["PLAIN".to_owned()];
    if config.external_auth && has_certificate {
        offered.push("EXTERNAL".to_owned());
    }
    if config.anonymous_login.is_some() {
        offered.push(ANONYMOUS.to_owned());
    }
    offered
}

const ANONYMOUS: &str = "ANONYMOUS";

/// Checks a sasl-init.
pub(super) fn login(
    config: &SessionConfig,
    peer: &PeerInfo,
    certificate: Option<&ClientCertificate>,
    mechanism: &str,
    response: Bytes,
    now: Timestamp,
) -> Result<Login, Refusal> {
    let refused = |username: &str, reason| Refusal { username: username.to_owned(), reason, hold_ms: 0 };
    let anonymous = config.anonymous_login.as_ref().filter(|_| mechanism == ANONYMOUS);
    let (username, checked) = match (anonymous, Mechanism::parse(mechanism.as_bytes())) {
        // RFC 4505's trace information in the response is ignored, as RabbitMQ does.
        (Some(anonymous), _) => {
            let checked =
                config.authenticator.authenticate(&anonymous.user, &anonymous.pass, peer.is_loopback);
            (anonymous.user.clone(), checked)
        }
        (None, Some(Mechanism::Plain)) => match Mechanism::Plain.credentials(response) {
            Ok(c) => {
                let checked = config.authenticator.authenticate(&c.username, &c.password, peer.is_loopback);
                (c.username, checked)
            }
            Err(AuthError::Malformed(_) | AuthError::Refused) => {
                return Err(refused("<unusable credentials>", LoginRefused::Unusable));
            }
        },
        (None, Some(Mechanism::External)) if config.external_auth => {
            match certificate.and_then(|c| c.common_name.clone()) {
                Some(name) => {
                    let checked = config.authenticator.authenticate_external(&name, peer.is_loopback);
                    (name, checked)
                }
                None => return Err(refused("<no certificate name>", LoginRefused::NoCertificateName)),
            }
        }
        _ => return Err(refused("<unoffered mechanism>", LoginRefused::Unusable)),
    };
    let limiter = &config.login_limiter;
    let source = peer.ip();
    if let Some(Admission::Refuse { hold_ms }) = source.map(|ip| limiter.admit(ip, now)) {
        return Err(Refusal { username, reason: LoginRefused::TooManyFailures, hold_ms });
    }
    match checked {
        Ok(()) => {
            let mechanism = match mechanism {
                "EXTERNAL" => "EXTERNAL",
                ANONYMOUS => ANONYMOUS,
                _ => "PLAIN",
            };
            Ok(Login { username, mechanism })
        }
        Err(reason) => {
            let hold_ms = source.map_or(0, |ip| limiter.record_failure(ip, now));
            Err(Refusal { username, reason, hold_ms })
        }
    }
}

/// The vhost check of an open, in RabbitMQ's order: the vhost exists, its and the user's
/// connection limits, the user's access to it.
pub(super) fn admit(
    config: &SessionConfig,
    user: &str,
    vhost: &str,
) -> Result<(Seat, Arc<Permissions>), ConnectionFault> {
    let authenticator = &config.authenticator;
    match authenticator.vhost_access(user, vhost) {
        VhostAccess::NotFound => {
            Err(ConnectionFault::new("amqp:not-found", format!("vhost {vhost} not found")))
        }
        access => {
            let limits = authenticator.client_limits(user, vhost);
            let seat = config.occupancy.admit(user, vhost, limits).map_err(|reached| {
                ConnectionFault::new("amqp:resource-limit-exceeded", reached.to_string())
            })?;
            match access {
                VhostAccess::Allowed(permissions) => Ok((seat, permissions)),
                _ => Err(ConnectionFault::new(
                    "amqp:unauthorized-access",
                    format!("access to vhost '{vhost}' refused for user '{user}'"),
                )),
            }
        }
    }
}

/// The RabbitMQ release whose AMQP 1.0 behaviour this follows, announced in our open's
/// properties: RabbitMQ's 1.0 clients require 4.0 or later, and offer direct reply-to only to
/// 4.2 or later (its other 4.1 and 4.2 gates are stream filters and OAuth 2 token refresh,
/// which are not served and are refused as such; docs/amqp1.md). 0-9-1 announces 3.13 (ADR 0009).
pub(super) const AMQP1_COMPATIBLE_VERSION: &str = "4.2.0";

/// Our open's properties, as RabbitMQ 4 sends them: the product and version its 1.0 clients
/// check, and who we are.
pub(super) fn server_properties(config: &SessionConfig) -> Value {
    let entry = |key: &str, value: &str| (Value::Symbol(key.to_owned()), Value::String(value.to_owned()));
    Value::Map(vec![
        entry("product", &config.product),
        entry("version", AMQP1_COMPATIBLE_VERSION),
        entry("platform", "Rust"),
        entry("cluster_name", &config.cluster_name),
        entry("hourglass_version", &config.hourglass_version),
    ])
}

/// What was negotiated, for the connection listing.
pub(super) struct Negotiated {
    pub frame_max: u32,
    pub channel_max: u16,
    pub idle_s: u16,
    pub over_tls: bool,
}

/// The broker's record of an opened 1.0 connection: its client properties name the protocol
/// and the client's container id.
pub(super) fn connection_info(
    config: &SessionConfig,
    peer: &PeerInfo,
    login: &Login,
    vhost: String,
    permissions: Arc<Permissions>,
    container_id: &str,
    negotiated: Negotiated,
) -> ConnectionInfo {
    let text = |s: &str| FieldValue::LongStr(LongStr::from(s));
    let client_properties = FieldTable::from_entries([("container_id", text(container_id))]);
    ConnectionInfo {
        user: login.username.clone(),
        vhost,
        peer: peer.addr.clone(),
        local: peer.local.clone(),
        client_properties,
        // The link, not the client, hears of a cancelled consumer: it is detached.
        capabilities: ClientCapabilities { consumer_cancel_notify: true, connection_blocked: false },
        frame_max: negotiated.frame_max,
        channel_max: negotiated.channel_max,
        heartbeat_s: negotiated.idle_s,
        permissions,
        may_impersonate: config.authenticator.may_impersonate(&login.username),
        login: LoginInfo { protocol: AMQP_1_0, mechanism: login.mechanism, tls: negotiated.over_tls },
    }
}

//! The handshake proper: connection.start, start-ok (login), tune / tune-ok (limits) and open
//! (vhost), with RabbitMQ's rules and reply texts (rabbit_reader `handle_method0`).

use hourglass_broker::{
    AmqpError, ClientCapabilities, Command, ConnectionInfo, LoginInfo, Timestamp, AMQP_0_9_1,
};
use hourglass_wire::reply_code::{ACCESS_REFUSED, COMMAND_INVALID, NOT_ALLOWED, SYNTAX_ERROR};
use hourglass_wire::{
    ConnectionOpen, ConnectionOpenOk, ConnectionStart, ConnectionStartOk, ConnectionTune, ConnectionTuneOk,
    FieldTable, FieldValue, LongStr, Method, FRAME_MIN_SIZE,
};
use tracing::{info, warn};

use super::{Connection, State};
use crate::auth::{
    AuthError, Credentials, LoginRefused, Mechanism, VhostAccess, MECHANISMS, MECHANISMS_WITH_EXTERNAL,
};
use crate::channels::Channels;
use crate::config::SessionConfig;
use crate::heartbeat::Heartbeat;
use crate::login_limiter::Admission;

/// The lowest channel_max a client may ask for (RabbitMQ's `?CHANNEL_MIN`); 0 means "no limit".
const CHANNEL_MIN: u32 = 1;

/// Shown to clients in connection.start's server-properties.
const COPYRIGHT: &str = "Copyright (c) The Hourglass authors";
const INFORMATION: &str = "Licensed under the Apache License 2.0";
const PLATFORM: &str = "Rust";

/// Capabilities we advertise in connection.start, each implemented, as RabbitMQ advertises them.
const SERVER_CAPABILITIES: [&str; 9] = [
    "publisher_confirms",
    "exchange_exchange_bindings",
    "basic.nack",
    "consumer_cancel_notify",
    "connection.blocked",
    "consumer_priorities",
    "authentication_failure_close",
    "per_consumer_qos",
    "direct_reply_to",
];

impl Connection {
    pub(super) fn send_start(&mut self, now: Timestamp) {
        let start = ConnectionStart {
            // RabbitMQ announces 0-9: connection.start has no field for the revision.
            version_major: 0,
            version_minor: 9,
            server_properties: server_properties(&self.config),
            mechanisms: LongStr::from(self.mechanisms()),
            locales: LongStr::from("en_US"),
        };
        self.out.method(0, &start.into(), now);
        self.state = State::ExpectStartOk;
    }

    pub(super) fn on_start_ok(&mut self, start_ok: ConnectionStartOk, now: Timestamp) {
        self.capabilities = client_capabilities(&start_ok.client_properties);
        self.client_properties = start_ok.client_properties;
        let on_start_ok = Method::from(ConnectionStartOk::default());
        let mechanism = match Mechanism::parse(start_ok.mechanism.as_bytes()) {
            Some(mechanism) if self.offers(mechanism) => mechanism,
            offered => {
                // rabbit_reader: a mechanism it knows but did not offer on this socket is
                // "invalid", one it does not know "unknown"; both 503 COMMAND_INVALID.
                let word = if offered.is_some() { "invalid" } else { "unknown" };
                let detail = format!("{word} authentication mechanism '{}'", start_ok.mechanism.as_str());
                let error = AmqpError::new(COMMAND_INVALID, detail).on(&on_start_ok);
                return self.close_with(error, now);
            }
        };
        let login = match mechanism {
            Mechanism::External => Login::Certificate(self.certificate_user()),
            _ => match mechanism.credentials(start_ok.response.into_bytes()) {
                Ok(credentials) => Login::Password(credentials),
                Err(AuthError::Malformed(detail)) => {
                    let error = AmqpError::new(SYNTAX_ERROR, detail).on(&on_start_ok);
                    return self.close_with(error, now);
                }
                Err(AuthError::Refused) => {
                    return self.refuse_login(
                        mechanism,
                        "<unusable credentials>",
                        LoginRefused::Unusable,
                        now,
                    );
                }
            },
        };
        let source = self.peer.ip();
        let limiter = self.config.login_limiter.clone();
        if let Some(Admission::Refuse { hold_ms }) = source.map(|ip| limiter.admit(ip, now)) {
            let reason = LoginRefused::TooManyFailures;
            self.refuse_login(mechanism, login.username(), reason, now);
            return self.hold_refusal(hold_ms, now);
        }
        let authenticator = &self.config.authenticator;
        let loopback = self.peer.is_loopback;
        let checked = match &login {
            Login::Password(c) => authenticator.authenticate(&c.username, &c.password, loopback),
            Login::Certificate(Ok(name)) => authenticator.authenticate_external(name, loopback),
            Login::Certificate(Err(reason)) => Err(*reason),
        };
        if let Err(reason) = checked {
            self.refuse_login(mechanism, login.username(), reason, now);
            let hold_ms = source.map_or(0, |ip| limiter.record_failure(ip, now));
            return self.hold_refusal(hold_ms, now);
        }
        self.user = Some(login.username().to_owned());
        self.login_mechanism = mechanism.name();
        let tune = ConnectionTune {
            channel_max: self.config.channel_max,
            frame_max: self.offered_frame_max(),
            heartbeat: self.config.heartbeat_s,
        };
        self.out.method(0, &tune.into(), now);
        self.state = State::ExpectTuneOk;
    }

    /// The mechanisms this connection offers: EXTERNAL only when it is turned on and the client
    /// presented a verified certificate.
    fn mechanisms(&self) -> &'static str {
        if self.offers(Mechanism::External) {
            MECHANISMS_WITH_EXTERNAL
        } else {
            MECHANISMS
        }
    }

    fn offers(&self, mechanism: Mechanism) -> bool {
        match mechanism {
            Mechanism::Plain | Mechanism::AmqPlain => true,
            Mechanism::External => self.config.external_auth && self.client_certificate.is_some(),
        }
    }

    /// The user EXTERNAL logs in as: the certificate subject's CN.
    fn certificate_user(&self) -> Result<String, LoginRefused> {
        let certificate = self.client_certificate.as_ref();
        certificate.and_then(|c| c.common_name.clone()).ok_or(LoginRefused::NoCertificateName)
    }

    /// A refused login. A client that announced the `authentication_failure_close` capability gets
    /// RabbitMQ's 403 connection.close, whose text names only the mechanism; any other client has
    /// its socket closed without a word, as rabbit_reader does (older clients cannot read a close
    /// before tune). Why the login failed goes to our log (never the password).
    fn refuse_login(&mut self, mechanism: Mechanism, username: &str, reason: LoginRefused, now: Timestamp) {
        warn!(conn = self.id.0, peer = %self.peer.addr, user = username, mechanism = mechanism.name(), %reason, "login refused");
        if !announces(&self.client_properties, "authentication_failure_close") {
            self.state = State::Closed;
            return;
        }
        let detail = format!(
            "Login was refused using authentication mechanism {}. For details see the broker logfile.",
            mechanism.name()
        );
        self.close_with(AmqpError::new(ACCESS_REFUSED, detail), now);
    }

    /// Holds the connection.close just encoded by `refuse_login` (nothing, for a silent close) for
    /// `hold_ms` (the failed-login slowdown, `login_limiter.rs`): it leaves in `handle_timeout`
    /// once the hold is over.
    fn hold_refusal(&mut self, hold_ms: u64, now: Timestamp) {
        if hold_ms == 0 {
            return;
        }
        let held = self.out.take();
        let answer_at = now.saturating_add_millis(hold_ms);
        self.state = State::LoginRefused { answer_at, held };
    }

    pub(super) fn on_tune_ok(&mut self, tune_ok: ConnectionTuneOk, now: Timestamp) {
        let frame_max = negotiate("frame_max", FRAME_MIN_SIZE, self.offered_frame_max(), tune_ok.frame_max);
        let channel_max = negotiate(
            "channel_max",
            CHANNEL_MIN,
            u32::from(self.config.channel_max),
            u32::from(tune_ok.channel_max),
        );
        if let Err(detail) = frame_max.and(channel_max) {
            let on_tune = Method::ConnectionTune(ConnectionTune::default());
            return self.close_with(AmqpError::new(NOT_ALLOWED, detail).on(&on_tune), now);
        }
        self.frame_max = tune_ok.frame_max;
        self.heartbeat_s = tune_ok.heartbeat;
        self.decoder.set_max_frame_size(tune_ok.frame_max);
        self.out.set_frame_max(tune_ok.frame_max);
        self.channels = Channels::new(tune_ok.channel_max);
        let mut heartbeat = Heartbeat::new(tune_ok.heartbeat, now);
        heartbeat.pause_receive(self.reading_blocked, now);
        self.heartbeat = Some(heartbeat);
        self.state = State::ExpectOpen;
    }

    pub(super) fn on_open(&mut self, open: ConnectionOpen, now: Timestamp) {
        let vhost = open.virtual_host.as_str().into_owned();
        let user = self.user.clone().unwrap_or_default();
        let on_open = Method::ConnectionOpen(ConnectionOpen::default());
        let authenticator = &self.config.authenticator;
        // RabbitMQ's order (rabbit_reader, connection.open): the vhost's and the user's
        // connection limits, then the user's access to the vhost.
        let access = match authenticator.vhost_access(&user, &vhost) {
            VhostAccess::NotFound => Err(format!("vhost {vhost} not found")),
            access => {
                let limits = authenticator.client_limits(&user, &vhost);
                match (self.config.occupancy.admit(&user, &vhost, limits), access) {
                    (Err(reached), _) => Err(reached.to_string()),
                    (Ok(seat), VhostAccess::Allowed(permissions)) => Ok((seat, permissions)),
                    (Ok(_), _) => Err(format!("access to vhost '{vhost}' refused for user '{user}'")),
                }
            }
        };
        let permissions = match access {
            Ok((seat, permissions)) => {
                self.channels.seat = Some(seat);
                permissions
            }
            Err(detail) => {
                warn!(conn = self.id.0, peer = %self.peer.addr, user = %user, vhost = %vhost, reason = %detail, "connection.open refused");
                return self.close_with(AmqpError::new(NOT_ALLOWED, detail).on(&on_open), now);
            }
        };
        self.out.method(0, &ConnectionOpenOk {}.into(), now);
        self.state = State::Open;
        self.opened = true;
        info!(conn = self.id.0, peer = %self.peer.addr, user = %user, vhost = %vhost, "connection opened");
        let may_impersonate = self.config.authenticator.may_impersonate(&user);
        let info = ConnectionInfo {
            user,
            vhost,
            peer: self.peer.addr.clone(),
            local: self.peer.local.clone(),
            client_properties: self.client_properties.clone(),
            capabilities: self.capabilities,
            frame_max: self.frame_max,
            channel_max: self.channels.channel_max(),
            heartbeat_s: self.heartbeat_s,
            may_impersonate,
            permissions,
            login: LoginInfo { protocol: AMQP_0_9_1, mechanism: self.login_mechanism, tls: self.over_tls },
        };
        self.commands.push_back(Command::ConnectionOpen { conn: self.id, info: Box::new(info) });
    }
}

/// Who a start-ok asks to log in as.
enum Login {
    /// PLAIN or AMQPLAIN: a user name and password to check.
    Password(Credentials),
    /// EXTERNAL: the name the client certificate gives, or why it gives none.
    Certificate(Result<String, LoginRefused>),
}

impl Login {
    /// The user name for the log (a placeholder when the certificate names nobody).
    fn username(&self) -> &str {
        match self {
            Login::Password(credentials) => &credentials.username,
            Login::Certificate(Ok(name)) => name,
            Login::Certificate(Err(_)) => "<no certificate name>",
        }
    }
}

/// RabbitMQ's `validate_negotiated_integer_value`: the client's value must be at least `min`
/// (0 excepted) and, when we have a limit, not above it (0, "no limit", is above any limit).
fn negotiate(field: &str, min: u32, ours: u32, theirs: u32) -> Result<(), String> {
    let no_limit = if field == "channel_max" && theirs == 0 { " (no limit)" } else { "" };
    if theirs != 0 && theirs < min {
        Err(format!(
            "negotiated {field} = {theirs}{no_limit} is lower than the minimum allowed value ({min})"
        ))
    } else if ours != 0 && (theirs == 0 || theirs > ours) {
        Err(format!(
            "negotiated {field} = {theirs}{no_limit} is higher than the maximum allowed value ({ours})"
        ))
    } else {
        Ok(())
    }
}

/// The client capabilities the broker acts on, from client-properties `capabilities`.
fn client_capabilities(client_properties: &FieldTable) -> ClientCapabilities {
    ClientCapabilities {
        consumer_cancel_notify: announces(client_properties, "consumer_cancel_notify"),
        connection_blocked: announces(client_properties, "connection.blocked"),
    }
}

/// Whether client-properties `capabilities` has `key` set to true.
fn announces(client_properties: &FieldTable, key: &str) -> bool {
    let Some(FieldValue::Table(capabilities)) = client_properties.get("capabilities") else {
        return false;
    };
    matches!(capabilities.get(key), Some(FieldValue::Bool(true)))
}

/// connection.start's server-properties, keys sorted as RabbitMQ sends them.
fn server_properties(config: &SessionConfig) -> FieldTable {
    let capabilities =
        FieldTable::from_entries(SERVER_CAPABILITIES.iter().map(|name| (*name, FieldValue::Bool(true))));
    let text = |s: &str| FieldValue::LongStr(LongStr::from(s));
    FieldTable::from_entries([
        ("capabilities", FieldValue::Table(capabilities)),
        ("cluster_name", text(&config.cluster_name)),
        ("copyright", text(COPYRIGHT)),
        ("hourglass_version", text(&config.hourglass_version)),
        ("information", text(INFORMATION)),
        ("platform", text(PLATFORM)),
        ("product", text(&config.product)),
        ("version", text(&config.version)),
    ])
}

//! Logins that must fail, and the failed-login slowdown (issue #12, finding 9), on a manual
//! clock.

use super::*;

const REFUSED_PLAIN: &str =
    "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. For details see the broker logfile.";

fn users_with_blank_password() -> Arc<StaticUsers> {
    Arc::new(StaticUsers::default().with_user("blank", "", false).with_user("alice", "secret", false))
}

fn client_with(config: SessionConfig) -> Client {
    let mut c = Client::new(config, false);
    c.send_bytes(PROTOCOL_HEADER);
    c.frames();
    c
}

/// An empty password is refused even for a user whose password is empty, over PLAIN and
/// AMQPLAIN, as RabbitMQ's internal backend refuses blank passwords.
#[test]
fn blank_password_is_refused_over_plain_and_amqplain() {
    let mut c = client_with(SessionConfig::new(users_with_blank_password()));
    c.send_method(0, start_ok("PLAIN", b"\0blank\0"));
    assert_eq!(c.connection_close(), close_of(403, REFUSED_PLAIN, 0, 0));
    let mut c = client_with(SessionConfig::new(users_with_blank_password()));
    let table = FieldTable::from_entries([
        ("LOGIN", FieldValue::LongStr("blank".into())),
        ("PASSWORD", FieldValue::LongStr("".into())),
    ]);
    c.send_method(0, start_ok("AMQPLAIN", table.raw()));
    assert_eq!(c.connection_close().reply_code, 403);
}

fn limited(first_delay_ms: u64) -> SessionConfig {
    let mut config = SessionConfig::new(users_with_blank_password());
    config.login_limiter = Arc::new(LoginLimiter::new(first_delay_ms));
    config
}

/// A refused login's answer is held for the limiter's delay (nothing is sent before it, the
/// close goes out at it), and the next failure from the address doubles it.
#[test]
fn refused_login_is_answered_after_the_hold() {
    let config = limited(100);
    let limiter = config.login_limiter.clone();
    let mut c = client_with(config.clone());
    c.send_method(0, start_ok("PLAIN", b"\0alice\0wrong"));
    assert!(c.frames().is_empty(), "the refusal is held");
    assert_eq!(c.conn.next_deadline(), Some(Timestamp::from_millis(T0 + 100)));
    c.at(99).timeout();
    assert!(c.frames().is_empty());
    c.at(100).timeout();
    assert_eq!(c.connection_close(), close_of(403, REFUSED_PLAIN, 0, 0));
    c.send_method(0, ConnectionCloseOk {});
    assert!(c.conn.is_closed());
    let mut again = client_with(config);
    again.send_method(0, start_ok("PLAIN", b"\0alice\0wrong"));
    assert_eq!(again.conn.next_deadline(), Some(Timestamp::from_millis(T0 + 200)));
    assert_eq!(limiter.tracked_sources(), 1);
}

/// After many refusals from the same address a good login is answered at once.
#[test]
fn good_login_is_not_held_after_refusals() {
    let config = limited(100);
    for _ in 0..5 {
        let mut bad = client_with(config.clone());
        bad.send_method(0, start_ok("PLAIN", b"\0alice\0wrong"));
    }
    let mut good = client_with(config);
    good.send_method(0, start_ok("PLAIN", b"\0alice\0secret"));
    assert!(matches!(good.methods().as_slice(), [(0, Method::ConnectionTune(_))]));
}

/// While the maximum of refusals from one address are held, a further attempt is refused
/// without its password being checked (even a good one), and held as well.
#[test]
fn a_burst_of_held_refusals_refuses_further_attempts_unchecked() {
    let config = limited(1_000);
    for _ in 0..LOGIN_FAILURES_PENDING_MAX {
        let mut bad = client_with(config.clone());
        bad.send_method(0, start_ok("PLAIN", b"\0alice\0wrong"));
    }
    let mut good = client_with(config);
    good.send_method(0, start_ok("PLAIN", b"\0alice\0secret"));
    assert!(good.frames().is_empty());
    good.at(LOGIN_FAILURE_DELAY_MAX_MS).timeout();
    assert_eq!(good.connection_close().reply_code, 403);
}

/// During the hold nothing the peer sends is read (not even a close), and EOF ends the
/// connection at once without the held answer.
#[test]
fn input_during_the_hold_is_ignored_and_eof_ends_it() {
    let mut c = client_with(limited(100));
    c.send_method(0, start_ok("PLAIN", b"\0alice\0wrong"));
    c.send_method(
        0,
        ConnectionClose { reply_code: 200, reply_text: short("bye"), class_id: 0, method_id: 0 },
    );
    assert!(c.frames().is_empty() && !c.conn.is_closed());
    c.conn.handle_eof(c.now);
    assert!(c.conn.is_closed() && c.conn.next_deadline().is_none());
}

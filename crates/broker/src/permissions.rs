//! Who may do what to which exchange or queue: RabbitMQ's per-vhost configure / write / read
//! regexes (`rabbit_auth_backend_internal:check_resource_access`), compiled once.
//!
//! This file only decides; the method handlers say *which* access an operation needs, in
//! RabbitMQ's order (`rabbit_channel`), through [`Broker::check_access`]:
//!
//! | operation | needs |
//! |---|---|
//! | exchange.declare (not passive) | configure on the exchange; a new one with `alternate-exchange` also read on it and write on the AE |
//! | exchange.delete | configure on the exchange |
//! | queue.declare (not passive; server-named `amq.gen-*` too) | configure on the queue; a new one with `x-dead-letter-exchange` also read on it and write on the DLX |
//! | queue.delete | configure on the queue |
//! | queue.purge, basic.get, basic.consume | read on the queue |
//! | queue.bind / unbind | write on the queue, read on the exchange |
//! | exchange.bind / unbind | write on the destination, read on the source |
//! | basic.publish | write on the exchange (the default exchange is `amq.default`) |
//!
//! Passive declares, and declares of / consumes from `amq.rabbitmq.reply-to`, need nothing.
//!
//! A pattern matches anywhere in the name unless anchored (Erlang's `re:run`); an empty pattern
//! matches only the empty name, so it grants nothing. Patterns are PCRE in RabbitMQ: look-around
//! (`^(?!amq\.).*`) and back-references are supported here too (fancy-regex); a match that gives
//! up (the backtracking limit) counts as no match, so access is refused rather than granted.
//!
//! Topic permissions (RabbitMQ's `set_topic_permissions`): per user, vhost and exchange, a write
//! and a read pattern on routing keys, `{username}` and `{vhost}` expanded. They apply to topic
//! exchanges only — basic.publish needs write on the routing key, queue/exchange bind and unbind
//! read on the binding key — and only where an entry names the exchange; without one, anything
//! goes, as in RabbitMQ (`rabbit_auth_backend_internal:check_topic_access`). A user without topic
//! permissions pays one emptiness check per publish.

use std::fmt;
use std::sync::{Arc, LazyLock};

use fancy_regex::Regex;

use crate::api::{AmqpError, ConnectionId};
use crate::broker::Broker;
use crate::errors;

/// RabbitMQ's three permissions.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Access {
    /// Create, delete or change a resource.
    Configure,
    /// Put messages into it (publish, be a binding's destination).
    Write,
    /// Take messages out of it (get, consume, purge, be a binding's source).
    Read,
}

/// What a permission applies to.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Resource {
    Exchange,
    Queue,
}

impl Access {
    /// RabbitMQ's name for it, as in `set_permissions` and the definitions file.
    pub fn name(self) -> &'static str {
        match self {
            Access::Configure => "configure",
            Access::Write => "write",
            Access::Read => "read",
        }
    }
}

impl Resource {
    fn kind(self) -> &'static str {
        match self {
            Resource::Exchange => "exchange",
            Resource::Queue => "queue",
        }
    }
}

/// One user's compiled permissions in one vhost.
#[derive(Clone)]
pub struct Permissions {
    configure: Pattern,
    write: Pattern,
    read: Pattern,
    /// Topic permissions, one per exchange named.
    topics: Vec<TopicPatterns>,
}

/// One exchange's topic permission, with its variables already expanded.
#[derive(Clone)]
struct TopicPatterns {
    exchange: String,
    write: Pattern,
    read: Pattern,
}

/// A pattern that does not compile, naming which of the three it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidPattern {
    pub access: Access,
    pub pattern: String,
    pub reason: String,
}

impl fmt::Display for InvalidPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {} regexp '{}': {}", self.access.name(), self.pattern, self.reason)
    }
}

impl std::error::Error for InvalidPattern {}

#[derive(Clone)]
struct Pattern {
    source: String,
    /// `None` for the empty pattern, which matches only the empty name (RabbitMQ turns "" into
    /// "^$"); names are never empty (the default exchange is checked as `amq.default`).
    regex: Option<Regex>,
    /// `.*` (or `^.*`): an unanchored search that matches every name, so no search is run — the
    /// usual grant, checked on every publish, get and consume.
    matches_everything: bool,
}

impl Permissions {
    /// Compiles the three patterns.
    pub fn compile(configure: &str, write: &str, read: &str) -> Result<Self, InvalidPattern> {
        Ok(Permissions {
            configure: Pattern::compile(Access::Configure, configure)?,
            write: Pattern::compile(Access::Write, write)?,
            read: Pattern::compile(Access::Read, read)?,
            topics: Vec::new(),
        })
    }

    /// Adds topic permissions: `(exchange, write, read)` patterns with `{username}` and
    /// `{vhost}` replaced by `user` and `vhost`, as RabbitMQ expands them.
    pub fn with_topics(
        mut self,
        topics: &[(String, String, String)],
        user: &str,
        vhost: &str,
    ) -> Result<Self, InvalidPattern> {
        let expand = |pattern: &str| pattern.replace("{username}", user).replace("{vhost}", vhost);
        for (exchange, write, read) in topics {
            self.topics.push(TopicPatterns {
                exchange: exchange.clone(),
                write: Pattern::compile(Access::Write, &expand(write))?,
                read: Pattern::compile(Access::Read, &expand(read))?,
            });
        }
        Ok(self)
    }

    /// Whether `access` (write or read) with `routing_key` on the topic exchange `exchange` is
    /// granted: yes unless a topic permission names the exchange and its pattern does not match.
    pub fn allows_topic(&self, access: Access, exchange: &str, routing_key: &str) -> bool {
        let Some(topic) = self.topics.iter().find(|t| t.exchange == exchange) else { return true };
        let pattern = if access == Access::Read { &topic.read } else { &topic.write };
        pattern.matches(routing_key)
    }

    /// `.*` for all three: everything is allowed. Compiled once, shared.
    pub fn full() -> Arc<Self> {
        static FULL: LazyLock<Arc<Permissions>> = LazyLock::new(|| {
            Arc::new(Permissions::compile(".*", ".*", ".*").expect("'.*' is a valid pattern"))
        });
        FULL.clone()
    }

    /// Empty patterns: nothing is allowed (a user whose permission entry was removed).
    pub fn none() -> Arc<Self> {
        static NONE: LazyLock<Arc<Permissions>> =
            LazyLock::new(|| Arc::new(Permissions::compile("", "", "").expect("the empty pattern is valid")));
        NONE.clone()
    }

    /// Whether `access` to the resource called `name` is granted. The default exchange (empty
    /// name) is checked as `amq.default`, as RabbitMQ does.
    pub fn allows(&self, access: Access, resource: Resource, name: &str) -> bool {
        let name = if resource == Resource::Exchange && name.is_empty() { "amq.default" } else { name };
        self.pattern(access).matches(name)
    }

    fn pattern(&self, access: Access) -> &Pattern {
        match access {
            Access::Configure => &self.configure,
            Access::Write => &self.write,
            Access::Read => &self.read,
        }
    }
}

impl Pattern {
    fn compile(access: Access, source: &str) -> Result<Pattern, InvalidPattern> {
        let regex = if source.is_empty() {
            None
        } else {
            let compiled = Regex::new(source).map_err(|e| InvalidPattern {
                access,
                pattern: source.to_owned(),
                reason: e.to_string(),
            })?;
            Some(compiled)
        };
        let matches_everything = matches!(source, ".*" | "^.*");
        Ok(Pattern { source: source.to_owned(), regex, matches_everything })
    }

    fn matches(&self, name: &str) -> bool {
        if self.matches_everything {
            return true;
        }
        match &self.regex {
            None => name.is_empty(),
            // Err: the backtracking limit was hit; refuse rather than grant.
            Some(regex) => regex.is_match(name).unwrap_or(false),
        }
    }
}

impl fmt::Debug for Permissions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let topics: Vec<(&str, &str, &str)> = self
            .topics
            .iter()
            .map(|t| (t.exchange.as_str(), t.write.source.as_str(), t.read.source.as_str()))
            .collect();
        f.debug_struct("Permissions")
            .field("configure", &self.configure.source)
            .field("write", &self.write.source)
            .field("read", &self.read.source)
            .field("topics", &topics)
            .finish()
    }
}

/// Two permission sets are equal when their patterns are the same text.
impl PartialEq for Permissions {
    fn eq(&self, other: &Self) -> bool {
        let topic = |t: &TopicPatterns| (t.exchange.clone(), t.write.source.clone(), t.read.source.clone());
        self.configure.source == other.configure.source
            && self.write.source == other.write.source
            && self.read.source == other.read.source
            && self.topics.iter().map(topic).eq(other.topics.iter().map(topic))
    }
}

/// RabbitMQ's 403 text (3.x: `access to queue 'q' in vhost '/' refused for user 'bob'`).
fn refusal(info: &crate::api::ConnectionInfo, resource: Resource, name: &str) -> AmqpError {
    let shown = if resource == Resource::Exchange && name.is_empty() { "amq.default" } else { name };
    errors::access_refused(format!(
        "access to {} '{shown}' in vhost '{}' refused for user '{}'",
        resource.kind(),
        info.vhost,
        info.user
    ))
}

impl Broker {
    /// 403 ACCESS_REFUSED unless the connection's user has `access` to the named resource in its
    /// vhost, with RabbitMQ's text (3.x: `access to queue 'q' in vhost '/' refused for user
    /// 'bob'`). A connection the broker no longer knows passes: its methods are dropped anyway.
    pub(crate) fn check_access(
        &self,
        conn: ConnectionId,
        access: Access,
        resource: Resource,
        name: &str,
    ) -> Result<(), AmqpError> {
        let Some(connection) = self.connections.get(&conn) else { return Ok(()) };
        let info = &connection.info;
        if info.permissions.allows(access, resource, name) {
            return Ok(());
        }
        Err(refusal(info, resource, name))
    }

    /// basic.publish's checks with one connection lookup: write on the exchange, then (topic
    /// permissions set) write on the routing key.
    pub(crate) fn check_publish_access(
        &self,
        conn: ConnectionId,
        exchange: &hourglass_wire::ShortStr,
        routing_key: &hourglass_wire::ShortStr,
    ) -> Result<(), AmqpError> {
        let Some(connection) = self.connections.get(&conn) else { return Ok(()) };
        let info = &connection.info;
        let name = exchange.as_str();
        if !info.permissions.allows(Access::Write, Resource::Exchange, &name) {
            return Err(refusal(info, Resource::Exchange, &name));
        }
        if info.permissions.topics.is_empty() {
            return Ok(());
        }
        self.check_topic_access(conn, Access::Write, exchange, &routing_key.as_str())
    }

    /// 403 ACCESS_REFUSED unless the user's topic permissions allow `access` with `routing_key`
    /// on `exchange`, when it is a topic exchange (RabbitMQ's `check_topic_authorisation`, its
    /// text). Free for users without topic permissions.
    pub(crate) fn check_topic_access(
        &self,
        conn: ConnectionId,
        access: Access,
        exchange: &hourglass_wire::ShortStr,
        routing_key: &str,
    ) -> Result<(), AmqpError> {
        let Some(connection) = self.connections.get(&conn) else { return Ok(()) };
        let info = &connection.info;
        if info.permissions.topics.is_empty() {
            return Ok(());
        }
        let is_topic = self
            .vhosts
            .get(&info.vhost)
            .and_then(|v| v.exchanges.get(exchange))
            .is_some_and(|x| x.spec.kind == crate::exchange::ExchangeKind::Topic);
        if !is_topic || info.permissions.allows_topic(access, &exchange.as_str(), routing_key) {
            return Ok(());
        }
        Err(errors::access_refused(format!(
            "access to topic '{routing_key}' in exchange '{exchange}' in vhost '{}' refused for user '{}'",
            info.vhost, info.user
        )))
    }

    /// Replaces the permissions of every open connection of `user` on `vhost` (the management API
    /// changed or removed them). RabbitMQ caches up to 12 granted checks per channel, so there
    /// a change may wait for a new channel; here it applies to the next operation.
    pub fn set_permissions(&mut self, user: &str, vhost: &str, permissions: Arc<Permissions>) {
        for connection in self.connections.values_mut() {
            if connection.info.user == user && connection.info.vhost == vhost {
                connection.info.permissions = permissions.clone();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perms(configure: &str, write: &str, read: &str) -> Permissions {
        Permissions::compile(configure, write, read).unwrap()
    }

    /// Patterns match anywhere unless anchored, as Erlang's re:run does.
    #[test]
    fn patterns_are_unanchored_searches() {
        let p = perms("app", "^app-", "^app-.*$");
        assert!(p.allows(Access::Configure, Resource::Queue, "my-app-queue"));
        assert!(!p.allows(Access::Write, Resource::Queue, "my-app-queue"));
        assert!(p.allows(Access::Write, Resource::Queue, "app-q"));
        assert!(p.allows(Access::Read, Resource::Queue, "app-q"));
        assert!(!p.allows(Access::Read, Resource::Exchange, "other"));
    }

    /// An empty pattern grants nothing; ".*" grants everything.
    #[test]
    fn empty_denies_and_dot_star_allows() {
        let p = perms("", ".*", "");
        assert!(!p.allows(Access::Configure, Resource::Queue, "q"));
        assert!(p.allows(Access::Write, Resource::Queue, "q"));
        // The no-search shortcut for `.*` and `^.*` answers as the regex search would.
        for name in ["q", "odd\nname", "ünï"] {
            for pattern in [".*", "^.*"] {
                let regex = Regex::new(pattern).unwrap();
                assert_eq!(
                    perms(pattern, pattern, pattern).allows(Access::Read, Resource::Queue, name),
                    regex.is_match(name).unwrap()
                );
            }
        }
        assert!(!p.allows(Access::Read, Resource::Exchange, ""));
        let none = Permissions::none();
        assert!(!none.allows(Access::Write, Resource::Exchange, "amq.direct"));
        let full = Permissions::full();
        assert!(full.allows(Access::Configure, Resource::Queue, "amq.gen-abc"));
    }

    /// The default exchange is checked under the name amq.default.
    #[test]
    fn default_exchange_is_amq_default() {
        let p = perms("", "^amq\\.default$", "");
        assert!(p.allows(Access::Write, Resource::Exchange, ""));
        assert!(!p.allows(Access::Write, Resource::Queue, ""));
    }

    /// PCRE look-ahead works, as in RabbitMQ ("everything but amq.*").
    #[test]
    fn lookahead_patterns_work() {
        let p = perms("^(?!amq\\.).*", ".*", ".*");
        assert!(p.allows(Access::Configure, Resource::Queue, "orders"));
        assert!(!p.allows(Access::Configure, Resource::Queue, "amq.gen-x"));
    }

    /// Topic permissions apply to the exchange they name only, with variables expanded; an
    /// empty pattern grants nothing.
    #[test]
    fn topic_permissions_name_one_exchange_and_expand_variables() {
        let topics = [
            ("amq.topic".to_owned(), "^{username}\\.".to_owned(), "".to_owned()),
            ("logs".to_owned(), ".*".to_owned(), "^{vhost}$".to_owned()),
        ];
        let p = perms(".*", ".*", ".*").with_topics(&topics, "bob", "dev").unwrap();
        assert!(p.allows_topic(Access::Write, "amq.topic", "bob.orders"));
        assert!(!p.allows_topic(Access::Write, "amq.topic", "alice.orders"));
        assert!(!p.allows_topic(Access::Read, "amq.topic", "bob.orders"), "empty read pattern");
        assert!(p.allows_topic(Access::Read, "logs", "dev"));
        assert!(!p.allows_topic(Access::Read, "logs", "prod"));
        assert!(p.allows_topic(Access::Write, "other", "anything"), "no entry: allowed");
        let bad = [("x".to_owned(), "(".to_owned(), "".to_owned())];
        assert!(perms(".*", ".*", ".*").with_topics(&bad, "u", "v").is_err());
    }

    /// A pattern that does not compile is reported with which permission it was.
    #[test]
    fn invalid_pattern_names_the_permission() {
        let err = Permissions::compile(".*", "(", ".*").unwrap_err();
        assert_eq!(err.access, Access::Write);
        assert_eq!(err.pattern, "(");
        assert!(err.to_string().starts_with("invalid write regexp '('"), "{err}");
    }
}

//! Who may see and change what through the management API: RabbitMQ's rules
//! (`rabbit_web_dispatch_access_control`, `rabbit_mgmt_util` `filter_vhost` / `filter_user`) in
//! one place, so every route asks the same questions.
//!
//! | question | rule (RabbitMQ's name) | refusal |
//! |---|---|---|
//! | may this user act in vhost V at all? | `administrator`, or a permission entry in V (`is_authorized_vhost`); a vhost that does not exist is left to the route's 404 | 401 `User not authorised to access virtual host` |
//! | which vhosts' objects (queues, exchanges, bindings, consumers…) does a listing show? | all for `administrator`; otherwise the vhosts with a permission entry (`filter_vhost`, `list_login_vhosts`) — `monitoring` alone does not widen it | left out |
//! | which vhosts does `/api/vhosts` list? | all for `administrator` and `monitoring`; otherwise those with an entry (`list_visible_vhosts`) | left out |
//! | whose connections, channels and consumers are shown? | everyone's for `administrator` and `monitoring`; otherwise the user's own (`filter_user`) | left out |
//! | may this user look at / close connection C? | look: `administrator`, `monitoring` or C's own user; close: `administrator` or C's own user (`is_authorized_user`) | 401 `User not authorised to access object` |
//! | may this user see the node (`/api/nodes`)? | `administrator` or `monitoring` (`is_authorized_monitor`: `AuthUser::require_monitor`) | 401 `Not monitor user` |
//! | may this user read or steer the messages of queue Q? | vhost access as above, then the AMQP permission the same operation needs over AMQP (here: read on Q) | 401 with the AMQP refusal text |
//!
//! What an operation through the admin channel needs (declare, bind, publish, get, purge,
//! delete) is decided by the broker's AMQP checks (`hourglass_broker::permissions`); this module
//! adds the HTTP-only rules around them.

use std::collections::HashSet;

use hourglass_broker::{Access, Resource};

use crate::auth::AuthUser;
use crate::error::ApiError;
use crate::AppState;

/// RabbitMQ's reason for a user without access to the vhost in the URL.
pub(crate) const NOT_AUTHORISED_VHOST: &str = "User not authorised to access virtual host";
/// RabbitMQ's reason for a user who may not see or change another user's object.
pub(crate) const NOT_AUTHORISED_OBJECT: &str = "User not authorised to access object";

/// What a user wants to do to a connection (or its channels).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum OwnedAction {
    /// GET: `administrator`, `monitoring` or the owner.
    Inspect,
    /// DELETE: `administrator` or the owner.
    Close,
}

/// RabbitMQ's `is_authorized_vhost`: `administrator`, or a permission entry (whatever its
/// patterns) in `vhost`. A vhost that does not exist passes, so the route answers 404.
pub(crate) fn require_vhost_access(state: &AppState, user: &AuthUser, vhost: &str) -> Result<(), ApiError> {
    if user.is_admin() || state.users.vhost(vhost).is_none() || has_entry(state, user, vhost) {
        Ok(())
    } else {
        Err(ApiError::not_authorised(NOT_AUTHORISED_VHOST))
    }
}

/// [`require_vhost_access`], then the AMQP permission a client would need for the same operation
/// on queue `queue` (e.g. read, as for basic.get). The refusal text is the broker's AMQP one.
pub(crate) fn require_queue_access(
    state: &AppState,
    user: &AuthUser,
    vhost: &str,
    queue: &str,
    access: Access,
) -> Result<(), ApiError> {
    require_vhost_access(state, user, vhost)?;
    // The user's own AMQP rights, administrators included (none without an entry), as RabbitMQ's
    // API acts on messages through a channel opened as the user (rabbit_mgmt_util:with_channel).
    let permissions = state.users.compiled_permissions(vhost, &user.name);
    if permissions.allows(access, Resource::Queue, queue) {
        Ok(())
    } else {
        Err(ApiError::not_authorised(format!(
            "access to queue '{queue}' in vhost '{vhost}' refused for user '{}'",
            user.name
        )))
    }
}

/// RabbitMQ's `is_authorized_user`: may `user` act on an object (connection, channel) owned by
/// `owner`? `None`: no such object; only users who could see any object pass (the route's 404).
pub(crate) fn require_owner_or_tag(
    user: &AuthUser,
    owner: Option<&str>,
    action: OwnedAction,
) -> Result<(), ApiError> {
    let by_tag = match action {
        OwnedAction::Inspect => user.is_monitor(),
        OwnedAction::Close => user.is_admin(),
    };
    if by_tag || owner == Some(user.name.as_str()) {
        Ok(())
    } else {
        Err(ApiError::not_authorised(NOT_AUTHORISED_OBJECT))
    }
}

/// RabbitMQ's `filter_user`: whether `user` sees a connection, channel or consumer of `owner`.
pub(crate) fn sees_owner(user: &AuthUser, owner: &str) -> bool {
    user.is_monitor() || user.name == owner
}

/// RabbitMQ's `list_visible_vhosts`: whether `/api/vhosts` (and `/api/overview`'s totals) show
/// `vhost` to `user`.
pub(crate) fn sees_vhost_record(state: &AppState, user: &AuthUser, vhost: &str) -> bool {
    user.is_monitor() || has_entry(state, user, vhost)
}

/// RabbitMQ's `filter_vhost`: the vhosts whose objects a listing shows `user`, taken once per
/// request (one lookup per vhost, not per object).
#[derive(Debug)]
pub(crate) struct VhostFilter {
    /// `None`: every vhost (administrators).
    allowed: Option<HashSet<String>>,
}

impl VhostFilter {
    pub(crate) fn new(state: &AppState, user: &AuthUser) -> Self {
        if user.is_admin() {
            return VhostFilter { allowed: None };
        }
        let allowed =
            state.users.permissions().into_iter().filter(|p| p.user == user.name).map(|p| p.vhost).collect();
        VhostFilter { allowed: Some(allowed) }
    }

    pub(crate) fn shows(&self, vhost: &str) -> bool {
        self.allowed.as_ref().is_none_or(|allowed| allowed.contains(vhost))
    }

    /// Keeps the listed objects (JSON with a `vhost` field) this filter shows.
    pub(crate) fn retain(&self, items: &mut Vec<serde_json::Value>) {
        if self.allowed.is_some() {
            items.retain(|item| self.shows(item["vhost"].as_str().unwrap_or_default()));
        }
    }
}

fn has_entry(state: &AppState, user: &AuthUser, vhost: &str) -> bool {
    state.users.permission(vhost, &user.name).is_some()
}

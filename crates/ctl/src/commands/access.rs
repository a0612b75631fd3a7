//! rabbitmqctl's user, permission and topic-permission verbs, and the SQS endpoint's access
//! keys (docs/sqs.md).

use clap::Subcommand;
use serde_json::json;

use super::{or_refused, Refused};
use crate::client::{segment, Client};
use crate::output::Format;

/// Users, their permissions and access keys.
#[derive(Debug, Subcommand)]
#[command(rename_all = "snake_case")]
pub enum AccessCommand {
    /// Adds a user with a password and no tags (refused if the user exists).
    AddUser { username: String, password: String },
    /// Deletes a user, its permissions and access keys, and closes its connections.
    DeleteUser { username: String },
    /// Makes an access key for the SQS endpoint acting as the user in the vhost (`-p`); prints
    /// its id and secret, which is shown only this once (docs/sqs.md).
    AddAccessKey { username: String },
    /// The user's access key ids, the vhost each acts in and when each was made.
    ListAccessKeys { username: String },
    /// Revokes one of the user's access keys.
    DeleteAccessKey { username: String, access_key_id: String },
    /// Sets a new password for a user.
    ChangePassword { username: String, password: String },
    /// Replaces the user's tags.
    SetUserTags { username: String, tags: Vec<String> },
    /// Sets a user's permissions in the vhost: CONFIGURE, WRITE and READ regular expressions on
    /// resource names (`".*"` for all, `""` for none).
    SetPermissions { username: String, configure: String, write: String, read: String },
    /// Removes a user's permissions in the vhost.
    ClearPermissions { username: String },
    /// Sets the user's topic permission on EXCHANGE in the vhost: WRITE and READ patterns on
    /// routing keys (`{username}`, `{vhost}` expanded).
    SetTopicPermissions { username: String, exchange: String, write: String, read: String },
    /// Removes the user's topic permissions in the vhost (only EXCHANGE's when given).
    ClearTopicPermissions { username: String, exchange: Option<String> },
}

/// Runs one of these verbs.
pub(super) fn run(
    client: &Client,
    vhost: &str,
    command: AccessCommand,
    format: &Format,
) -> anyhow::Result<String> {
    let v = segment(vhost);
    match command {
        AccessCommand::AddUser { username, password } => {
            // rabbitmqctl refuses to overwrite a user (its password and tags would be lost).
            let path = format!("/api/users/{}", segment(&username));
            if client.exists(&path)? {
                return Err(Refused::UserAlreadyExists(username).into());
            }
            client.put(&path, &json!({"password": password, "tags": ""}))?;
            Ok(format.info(&format!(
            "Adding user \"{username}\" ...\nDone. Don't forget to grant the user permissions to some virtual \
             hosts! See 'hourglass-ctl help set_permissions' to learn more."
        )))
        }
        AccessCommand::DeleteUser { username } => {
            let deleted = client.delete(&format!("/api/users/{}", segment(&username)));
            or_refused(deleted, Refused::NoSuchUser(username.clone()))?;
            Ok(format.info(&format!("Deleting user \"{username}\" ...")))
        }
        AccessCommand::AddAccessKey { username } => {
            let path = format!("/api/users/{}/access-keys", segment(&username));
            let key = client.post(&path, &json!({"vhost": vhost}))?;
            let field = |name: &str| key[name].as_str().unwrap_or_default().to_owned();
            Ok(format!(
                "access_key_id\t{}\nsecret_access_key\t{}\n",
                field("access_key_id"),
                field("secret_access_key")
            ))
        }
        AccessCommand::ListAccessKeys { username } => {
            let all = client.get(&format!("/api/users/{}/access-keys", segment(&username)))?;
            Ok(format.listing(
                &format!("Listing access keys of user \"{username}\" ..."),
                &all,
                &[],
                &["access_key_id", "vhost", "created_ms"],
            ))
        }
        AccessCommand::DeleteAccessKey { username, access_key_id } => {
            client.delete(&format!(
                "/api/users/{}/access-keys/{}",
                segment(&username),
                segment(&access_key_id)
            ))?;
            Ok(String::new())
        }
        AccessCommand::ChangePassword { username, password } => {
            let path = format!("/api/users/{}", segment(&username));
            let user = or_refused(client.get(&path), Refused::NoSuchUser(username.clone()))?;
            client.put(&path, &json!({"password": password, "tags": user["tags"]}))?;
            Ok(format.info(&format!("Changing password for user \"{username}\" ...")))
        }
        AccessCommand::SetUserTags { username, tags } => {
            let path = format!("/api/users/{}", segment(&username));
            let user = or_refused(client.get(&path), Refused::NoSuchUser(username.clone()))?;
            client.put(&path, &json!({"password_hash": user["password_hash"], "tags": tags}))?;
            Ok(format.info(&format!("Setting tags for user \"{username}\" to [{}] ...", tags.join(", "))))
        }
        AccessCommand::SetPermissions { username, configure, write, read } => {
            let body = json!({"configure": configure, "write": write, "read": read});
            client.put(&format!("/api/permissions/{v}/{}", segment(&username)), &body)?;
            Ok(format.info(&format!("Setting permissions for user \"{username}\" in vhost \"{vhost}\" ...")))
        }
        AccessCommand::ClearPermissions { username } => {
            client.delete(&format!("/api/permissions/{v}/{}", segment(&username)))?;
            Ok(format.info(&format!("Clearing permissions for user \"{username}\" in vhost \"{vhost}\" ...")))
        }
        AccessCommand::SetTopicPermissions { username, exchange, write, read } => {
            let body = json!({"exchange": exchange, "write": write, "read": read});
            client.put(&format!("/api/topic-permissions/{v}/{}", segment(&username)), &body)?;
            Ok(format.info(&format!(
            "Setting topic permissions on \"{exchange}\" for user \"{username}\" in vhost \"{vhost}\" ..."
        )))
        }
        AccessCommand::ClearTopicPermissions { username, exchange } => {
            let only = exchange.as_ref().map(|x| format!("?exchange={}", segment(x))).unwrap_or_default();
            client.delete(&format!("/api/topic-permissions/{v}/{}{only}", segment(&username)))?;
            let on = exchange.map(|x| format!(" on \"{x}\"")).unwrap_or_default();
            Ok(format.info(&format!(
                "Clearing topic permissions{on} for user \"{username}\" in vhost \"{vhost}\" ..."
            )))
        }
    }
}

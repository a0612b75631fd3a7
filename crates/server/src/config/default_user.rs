//! `--default-user` / `--default-pass` (RabbitMQ's `default_user` and `default_pass`): the
//! administrator a blank catalog gets instead of guest/guest; and `--anonymous-login-user` /
//! `--anonymous-login-pass`, the user SASL ANONYMOUS logs in as (docs/configuration.md).

/// The user a blank catalog gets instead of guest/guest (RabbitMQ's `default_user` and
/// `default_pass`), tagged administrator with full permissions on `/`.
#[derive(Clone, PartialEq, Eq)]
pub struct DefaultUser {
    pub name: String,
    pub password: String,
}

impl std::fmt::Debug for DefaultUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DefaultUser").field("name", &self.name).finish_non_exhaustive()
    }
}

/// The default user and the anonymous login, from the flags or else the file.
pub(super) fn logins(
    cli: &super::Cli,
    file: &super::FileConfig,
) -> anyhow::Result<(Option<DefaultUser>, Option<hourglass_session::AnonymousLogin>)> {
    let either = |flag: &Option<String>, key: &Option<String>| flag.clone().or_else(|| key.clone());
    let default = default_user(
        either(&cli.default_user, &file.default_user),
        either(&cli.default_pass, &file.default_pass),
    )?;
    let anonymous = anonymous_login(
        either(&cli.anonymous_login_user, &file.anonymous_login_user),
        either(&cli.anonymous_login_pass, &file.anonymous_login_pass),
    )?;
    Ok((default, anonymous))
}

/// Both or neither: a name without a password (or the reverse) is a mistake to refuse.
fn default_user(name: Option<String>, password: Option<String>) -> anyhow::Result<Option<DefaultUser>> {
    let pair = user_and_password(name, password, "--default-user and --default-pass")?;
    Ok(pair.map(|(name, password)| DefaultUser { name, password }))
}

/// `--anonymous-login-user` / `--anonymous-login-pass` (RabbitMQ 4's `anonymous_login_user` and
/// `anonymous_login_pass`): the user SASL ANONYMOUS logs AMQP 1.0 clients in as; both or neither.
fn anonymous_login(
    user: Option<String>,
    pass: Option<String>,
) -> anyhow::Result<Option<hourglass_session::AnonymousLogin>> {
    let pair = user_and_password(user, pass, "--anonymous-login-user and --anonymous-login-pass")?;
    Ok(pair.map(|(user, pass)| hourglass_session::AnonymousLogin { user, pass }))
}

/// A user name (trimmed) and its password, given together, neither empty; `flags` names them in
/// the refusal.
fn user_and_password(
    name: Option<String>,
    password: Option<String>,
    flags: &str,
) -> anyhow::Result<Option<(String, String)>> {
    match (name, password) {
        (None, None) => Ok(None),
        (Some(name), Some(password)) if !name.trim().is_empty() && !password.is_empty() => {
            Ok(Some((name.trim().to_owned(), password)))
        }
        _ => anyhow::bail!("{flags} go together, and neither may be empty"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Cli, Config};

    /// `--anonymous-login-user` and `--anonymous-login-pass` come together or not at all; off by
    /// default.
    #[test]
    fn anonymous_login_is_off_unless_both_are_given() {
        assert_eq!(Config::resolve(Cli::default()).unwrap().anonymous_login, None);
        let both = Cli {
            anonymous_login_user: Some("guest".into()),
            anonymous_login_pass: Some("guest".into()),
            ..Cli::default()
        };
        let login = Config::resolve(both).unwrap().anonymous_login.unwrap();
        assert_eq!((login.user.as_str(), login.pass.as_str()), ("guest", "guest"));
        let half = Cli { anonymous_login_user: Some("guest".into()), ..Cli::default() };
        assert!(Config::resolve(half).is_err());
    }

    /// `--default-user` and `--default-pass` come together or not at all, neither empty.
    #[test]
    fn default_user_needs_its_password() {
        let both =
            Cli { default_user: Some("admin".into()), default_pass: Some("pw".into()), ..Cli::default() };
        let user = Config::resolve(both).unwrap().default_user.unwrap();
        assert_eq!((user.name.as_str(), user.password.as_str()), ("admin", "pw"));
        assert!(!format!("{user:?}").contains("pw"), "the password is not logged");
        for (name, pass) in [(Some("admin"), None), (None, Some("pw")), (Some("admin"), Some(""))] {
            let cli = Cli {
                default_user: name.map(Into::into),
                default_pass: pass.map(Into::into),
                ..Cli::default()
            };
            assert!(Config::resolve(cli).is_err(), "{name:?} {pass:?}");
        }
    }
}

//! `--default-user` / `--default-pass` (RabbitMQ's `default_user` and `default_pass`): the
//! administrator a blank catalog gets instead of guest/guest (docs/configuration.md).

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

/// Both or neither: a name without a password (or the reverse) is a mistake to refuse.
pub(super) fn default_user(
    name: Option<String>,
    password: Option<String>,
) -> anyhow::Result<Option<DefaultUser>> {
    match (name, password) {
        (None, None) => Ok(None),
        (Some(name), Some(password)) if !name.trim().is_empty() && !password.is_empty() => {
            Ok(Some(DefaultUser { name: name.trim().to_owned(), password }))
        }
        _ => anyhow::bail!("--default-user and --default-pass go together, and neither may be empty"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Cli, Config};

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

//! A string that must never be printed: tokens, API keys, signing secrets.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What a secret shows instead of its value, in `Debug`, `Display` and serialization.
pub const REDACTED: &str = "***";

/// A credential from the config. Its value is reachable only through
/// [`Secret::expose`], so logging or serializing a config (as `ferry config show` does)
/// can never leak it.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// A client's key: `key` when set and not blank, else the value of the environment
    /// variable `key_env` names (which must then be set: `Err` with its name), else none (a
    /// local server that needs no key).
    pub fn resolve(
        key: Option<&Secret>,
        key_env: Option<&str>,
        env: &super::Environment,
    ) -> Result<Option<Secret>, String> {
        match (key, key_env) {
            (Some(key), _) if !key.is_blank() => Ok(Some(key.clone())),
            (_, Some(variable)) => match env.var(variable).map(str::trim).filter(|value| !value.is_empty()) {
                Some(value) => Ok(Some(Secret::new(value))),
                None => Err(variable.to_owned()),
            },
            _ => Ok(None),
        }
    }

    /// The real value, for the one place that needs it (an HTTP header, a client builder).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// An empty string counts as "not configured" (`bot_token = ""` in a template).
    pub fn is_blank(&self) -> bool {
        self.0.trim().is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(REDACTED)
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Secret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_never_prints_its_value() {
        let secret = Secret::new("123456:ABC-very-secret");
        assert_eq!(format!("{secret:?} {secret}"), "*** ***");
        assert_eq!(serde_json::to_string(&secret).unwrap(), "\"***\"");
        assert_eq!(secret.expose(), "123456:ABC-very-secret");
    }

    #[test]
    fn blank_secrets_count_as_missing() {
        assert!(Secret::new("  ").is_blank());
        assert!(!Secret::new("x").is_blank());
    }
}

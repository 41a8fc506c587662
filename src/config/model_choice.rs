//! `agents.defaults.model`: one model, or a primary with fallbacks (issue 20).

use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Which models answer, in the order they are tried. Written either as `"P/M"` or as
/// `{ primary = "P/M", fallbacks = ["P2/M2", …] }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSetting {
    pub primary: String,
    /// Tried in order when every credential of the model before is cooling or failed.
    pub fallbacks: Vec<String>,
}

impl ModelSetting {
    pub fn one(model: impl Into<String>) -> Self {
        Self { primary: model.into(), fallbacks: Vec::new() }
    }

    /// The primary, then the fallbacks.
    pub fn chain(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.primary.as_str()).chain(self.fallbacks.iter().map(String::as_str))
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Chain {
    primary: String,
    #[serde(default)]
    fallbacks: Vec<String>,
}

impl Serialize for ModelSetting {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.fallbacks.is_empty() {
            serializer.serialize_str(&self.primary)
        } else {
            Chain { primary: self.primary.clone(), fallbacks: self.fallbacks.clone() }.serialize(serializer)
        }
    }
}

impl<'de> Deserialize<'de> for ModelSetting {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ModelSettingVisitor)
    }
}

struct ModelSettingVisitor;

impl<'de> Visitor<'de> for ModelSettingVisitor {
    type Value = ModelSetting;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(r#""PROVIDER/MODEL" or a table { primary = "PROVIDER/MODEL", fallbacks = ["PROVIDER/MODEL", …] }"#)
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<ModelSetting, E> {
        Ok(ModelSetting::one(value))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ModelSetting, A::Error> {
        let chain = Chain::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(ModelSetting { primary: chain.primary, fallbacks: chain.fallbacks })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, Serialize)]
    struct Holder {
        model: ModelSetting,
    }

    #[test]
    fn a_string_and_a_table_both_read_and_round_trip() {
        let one: Holder = toml::from_str(r#"model = "openai/gpt-4o""#).unwrap();
        assert_eq!(one.model, ModelSetting::one("openai/gpt-4o"));
        let chain: Holder = toml::from_str("[model]\nprimary = \"a/x\"\nfallbacks = [\"b/y\", \"c/z\"]\n").unwrap();
        assert_eq!(chain.model.chain().collect::<Vec<_>>(), ["a/x", "b/y", "c/z"]);
        let again: Holder = toml::from_str(&toml::to_string(&chain).unwrap()).unwrap();
        assert_eq!(again.model, chain.model);
    }

    #[test]
    fn an_unknown_key_in_the_table_is_refused() {
        let error = toml::from_str::<Holder>("[model]\nprimary = \"a/x\"\nfallback = [\"b/y\"]\n").unwrap_err();
        assert!(error.to_string().contains("fallback"), "{error}");
    }
}

//! `human_delay`: a word (`"off"`, `"natural"`) or a table (`{ min_ms, max_ms }`).

use std::fmt;
use std::ops::RangeInclusive;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The pause before each streamed block after the first, so a reply arriving in several
/// messages reads like someone typing rather than a burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HumanDelay {
    Off,
    /// 800–2500 ms, chosen at random per block.
    Natural,
    /// A random pause in `min_ms..=max_ms`.
    Custom {
        min_ms: u64,
        max_ms: u64,
    },
}

/// The range `natural` draws from (SPEC §7).
pub const NATURAL_DELAY_MS: RangeInclusive<u64> = 800..=2500;

impl HumanDelay {
    /// The range of pauses in milliseconds, or `None` when off.
    pub fn range_ms(self) -> Option<RangeInclusive<u64>> {
        match self {
            HumanDelay::Off => None,
            HumanDelay::Natural => Some(NATURAL_DELAY_MS),
            HumanDelay::Custom { min_ms, max_ms } => Some(min_ms..=max_ms),
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CustomDelay {
    min_ms: u64,
    max_ms: u64,
}

impl Serialize for HumanDelay {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match *self {
            HumanDelay::Off => serializer.serialize_str("off"),
            HumanDelay::Natural => serializer.serialize_str("natural"),
            HumanDelay::Custom { min_ms, max_ms } => CustomDelay { min_ms, max_ms }.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for HumanDelay {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(HumanDelayVisitor)
    }
}

struct HumanDelayVisitor;

impl<'de> Visitor<'de> for HumanDelayVisitor {
    type Value = HumanDelay;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(r#""off", "natural" or a table { min_ms = …, max_ms = … }"#)
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<HumanDelay, E> {
        match value {
            "off" => Ok(HumanDelay::Off),
            "natural" => Ok(HumanDelay::Natural),
            other => Err(E::invalid_value(de::Unexpected::Str(other), &self)),
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<HumanDelay, A::Error> {
        let custom = CustomDelay::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(HumanDelay::Custom { min_ms: custom.min_ms, max_ms: custom.max_ms })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize, Serialize, Debug, PartialEq)]
    struct Holder {
        human_delay: HumanDelay,
    }

    fn parse(toml_text: &str) -> Result<HumanDelay, toml::de::Error> {
        toml::from_str::<Holder>(toml_text).map(|h| h.human_delay)
    }

    #[test]
    fn words_and_tables_both_parse() {
        assert_eq!(parse(r#"human_delay = "off""#).unwrap(), HumanDelay::Off);
        assert_eq!(parse(r#"human_delay = "natural""#).unwrap(), HumanDelay::Natural);
        assert_eq!(
            parse("human_delay = { min_ms = 100, max_ms = 300 }").unwrap(),
            HumanDelay::Custom { min_ms: 100, max_ms: 300 }
        );
    }

    #[test]
    fn an_unknown_word_says_what_is_expected() {
        let message = parse(r#"human_delay = "slow""#).unwrap_err().to_string();
        assert!(message.contains(r#""off", "natural" or a table"#), "{message}");
    }

    #[test]
    fn round_trips_through_toml() {
        for delay in [HumanDelay::Off, HumanDelay::Natural, HumanDelay::Custom { min_ms: 1, max_ms: 2 }] {
            let text = toml::to_string(&Holder { human_delay: delay }).unwrap();
            assert_eq!(parse(&text).unwrap(), delay);
        }
    }

    #[test]
    fn ranges_follow_the_setting() {
        assert_eq!(HumanDelay::Off.range_ms(), None);
        assert_eq!(HumanDelay::Natural.range_ms(), Some(800..=2500));
    }
}

//! The values an enum key accepts, read from its serde derive.
//!
//! The `config` crate reports a bad enum value as "enum QueueMode does not have variant
//! constructor colect": it names a Rust type and leaves out the valid values. Those values
//! are in the derive, though: serde hands them to the deserializer with every
//! `deserialize_enum(name, variants, visitor)` call. [`enum_values`] walks a config type
//! down a key path with a deserializer that follows only that path, and returns the
//! variants the enum at its end declares. Every enum in the config is covered this way,
//! with no list of values to keep in step with the types.

use std::fmt;

use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use serde_path_to_error::Segment;

/// The serialized names of the enum `T` has at `path` (after `rename_all`), or `None` when
/// the path does not lead to a plain enum.
pub(crate) fn enum_values<T: DeserializeOwned>(path: &[Segment]) -> Option<&'static [&'static str]> {
    match T::deserialize(Probe { path }) {
        Err(ProbeError::Found(values)) => Some(values),
        _ => None,
    }
}

/// Why the probe stopped: it always stops, either at the enum it was looking for or
/// anywhere else.
#[derive(Debug)]
enum ProbeError {
    Found(&'static [&'static str]),
    NotAnEnum,
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeError::Found(values) => write!(f, "an enum of {values:?}"),
            ProbeError::NotAnEnum => f.write_str("the path does not lead to an enum"),
        }
    }
}

impl std::error::Error for ProbeError {}

impl de::Error for ProbeError {
    fn custom<T: fmt::Display>(_: T) -> Self {
        ProbeError::NotAnEnum
    }
}

/// A deserializer with no data: it answers a struct or map with the one entry named by
/// the next path segment, a sequence with one element, and stops at the first enum.
struct Probe<'a> {
    path: &'a [Segment],
}

impl<'de> de::Deserializer<'de> for Probe<'_> {
    type Error = ProbeError;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, ProbeError> {
        Err(ProbeError::NotAnEnum)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, ProbeError> {
        if self.path.is_empty() { Err(ProbeError::Found(variants)) } else { Err(ProbeError::NotAnEnum) }
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ProbeError> {
        match self.path.split_first() {
            Some((Segment::Map { key }, rest)) => visitor.visit_map(OneEntry { key: Some(key), rest }),
            _ => Err(ProbeError::NotAnEnum),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ProbeError> {
        self.deserialize_map(visitor)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ProbeError> {
        match self.path.split_first() {
            Some((Segment::Seq { .. }, rest)) => visitor.visit_seq(OneElement { rest: Some(rest) }),
            _ => Err(ProbeError::NotAnEnum),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ProbeError> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, ProbeError> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct tuple tuple_struct identifier ignored_any
    }
}

/// The single `key = <probe>` entry of a struct or map on the path.
struct OneEntry<'a> {
    key: Option<&'a String>,
    rest: &'a [Segment],
}

impl<'de> MapAccess<'de> for OneEntry<'_> {
    type Error = ProbeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, ProbeError> {
        match self.key.take() {
            Some(key) => seed.deserialize(key.as_str().into_deserializer()).map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, ProbeError> {
        seed.deserialize(Probe { path: self.rest })
    }
}

/// The single element of a sequence on the path.
struct OneElement<'a> {
    rest: Option<&'a [Segment]>,
}

impl<'de> SeqAccess<'de> for OneElement<'_> {
    type Error = ProbeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, ProbeError> {
        match self.rest.take() {
            Some(path) => seed.deserialize(Probe { path }).map(Some),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;
    use crate::config::Config;

    fn path(dotted: &str) -> Vec<Segment> {
        dotted.split('.').map(|key| Segment::Map { key: key.to_owned() }).collect()
    }

    #[test]
    fn finds_the_enum_at_a_struct_field_a_map_value_and_behind_an_option() {
        assert_eq!(
            enum_values::<Config>(&path("models.providers.anything.kind")),
            Some(&["openai", "anthropic", "echo"][..])
        );
        assert_eq!(
            enum_values::<Config>(&path("messages.queue.by_channel.telegram")),
            Some(&["collect", "steer", "followup", "steer-backlog", "interrupt"][..])
        );
        assert_eq!(
            enum_values::<Config>(&path("agents.defaults.block_streaming_break")),
            Some(&["text_end", "message_end"][..])
        );
    }

    #[test]
    fn finds_an_enum_inside_a_sequence() {
        #[derive(Deserialize)]
        #[allow(dead_code)]
        enum Colour {
            Red,
            Blue,
        }
        #[derive(Deserialize)]
        #[allow(dead_code)]
        struct Palette {
            colours: Vec<Option<Colour>>,
        }
        let path = [Segment::Map { key: "colours".to_owned() }, Segment::Seq { index: 3 }];
        assert_eq!(enum_values::<Palette>(&path), Some(&["Red", "Blue"][..]));
    }

    #[test]
    fn anything_but_an_enum_is_none() {
        for key in ["gateway.port", "gateway", "agents.defaults.human_delay", "gateway.nonexistent", "channels"] {
            assert_eq!(enum_values::<Config>(&path(key)), None, "{key}");
        }
        assert_eq!(enum_values::<Config>(&[]), None);
    }
}

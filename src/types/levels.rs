//! How hard a model thinks (`/think`, `agents.defaults.thinking`) and how its reasoning is
//! shown (`/reasoning`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The effort a model is asked to spend reasoning before it answers. Providers map it to
/// their own knob: OpenAI-compatible `reasoning_effort`, Anthropic extended thinking's
/// `budget_tokens`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ThinkingLevel {
    #[default]
    Off,
    Minimal,
    Low,
    Medium,
    High,
}

impl ThinkingLevel {
    pub const ALL: [ThinkingLevel; 5] =
        [ThinkingLevel::Off, ThinkingLevel::Minimal, ThinkingLevel::Low, ThinkingLevel::Medium, ThinkingLevel::High];

    pub fn as_str(self) -> &'static str {
        match self {
            ThinkingLevel::Off => "off",
            ThinkingLevel::Minimal => "minimal",
            ThinkingLevel::Low => "low",
            ThinkingLevel::Medium => "medium",
            ThinkingLevel::High => "high",
        }
    }

    pub fn is_off(&self) -> bool {
        *self == ThinkingLevel::Off
    }

    /// Anthropic extended thinking's `budget_tokens` for this level (the API's minimum is
    /// 1024), or `None` when thinking is off.
    pub fn anthropic_budget(self) -> Option<u32> {
        match self {
            ThinkingLevel::Off => None,
            ThinkingLevel::Minimal => Some(1_024),
            ThinkingLevel::Low => Some(4_096),
            ThinkingLevel::Medium => Some(10_000),
            ThinkingLevel::High => Some(32_000),
        }
    }
}

impl fmt::Display for ThinkingLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A word that is not a level; the message lists the valid ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a thinking level (off, minimal, low, medium, high)")]
pub struct UnknownThinkingLevel(pub String);

impl FromStr for ThinkingLevel {
    type Err = UnknownThinkingLevel;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let word = text.trim().to_ascii_lowercase();
        Self::ALL.into_iter().find(|level| level.as_str() == word).ok_or_else(|| UnknownThinkingLevel(text.to_owned()))
    }
}

/// How a session sees the model's reasoning (`/reasoning`). Off by default: reasoning is
/// long, and most users want the answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningDisplay {
    #[default]
    Off,
    /// Sent as its own message before the answer, marked as reasoning.
    On,
    /// Streamed into the preview, which the answer then replaces (where previews stream;
    /// elsewhere as `On`).
    Stream,
}

impl ReasoningDisplay {
    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningDisplay::Off => "off",
            ReasoningDisplay::On => "on",
            ReasoningDisplay::Stream => "stream",
        }
    }

    pub fn is_off(&self) -> bool {
        *self == ReasoningDisplay::Off
    }
}

impl fmt::Display for ReasoningDisplay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A word that is not a display mode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a reasoning display (off, on, stream)")]
pub struct UnknownReasoningDisplay(pub String);

impl FromStr for ReasoningDisplay {
    type Err = UnknownReasoningDisplay;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim().to_ascii_lowercase().as_str() {
            "off" | "hide" | "hidden" => Ok(ReasoningDisplay::Off),
            "on" | "show" => Ok(ReasoningDisplay::On),
            "stream" => Ok(ReasoningDisplay::Stream),
            _ => Err(UnknownReasoningDisplay(text.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_read_as_their_names_in_any_case() {
        for level in ThinkingLevel::ALL {
            assert_eq!(level.as_str().to_uppercase().parse::<ThinkingLevel>(), Ok(level));
        }
        let error = "max".parse::<ThinkingLevel>().unwrap_err();
        assert!(error.to_string().contains("off, minimal, low, medium, high"), "{error}");
    }

    #[test]
    fn budgets_grow_with_the_level_and_start_at_the_api_minimum() {
        let budgets: Vec<_> = ThinkingLevel::ALL.iter().filter_map(|level| level.anthropic_budget()).collect();
        assert_eq!(budgets[0], 1_024);
        assert!(budgets.windows(2).all(|pair| pair[0] < pair[1]), "{budgets:?}");
    }

    #[test]
    fn display_modes_parse() {
        assert_eq!("Stream".parse::<ReasoningDisplay>(), Ok(ReasoningDisplay::Stream));
        assert!("loud".parse::<ReasoningDisplay>().is_err());
    }
}

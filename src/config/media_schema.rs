//! `[media]`: what Ferry accepts from users' files, how long it keeps them, and
//! `[media.transcription]`, the service that turns voice notes into text.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Secret;
use super::error::Violation;

/// `[media]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct MediaConfig {
    /// The largest file, in megabytes, accepted from a user; checked against what the
    /// platform announces and again as the bytes arrive.
    pub max_mb: u64,
    /// Per-channel overrides of `max_mb` (`{ discord = 8 }`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub channel_max_mb: BTreeMap<String, u64>,
    /// Days a stored file is kept after its last use.
    pub ttl_days: u64,
    /// Images are replayed to the model for this many of the latest user turns; older
    /// ones become one-line notes, bounding what a long conversation costs.
    pub history_images: usize,
    /// The most characters of a text document (or a PDF's text) put in the prompt.
    pub inline_text_chars: usize,
    /// MIME types refused outright (sniffed from the bytes; `*` matches anything, so
    /// `video/*` refuses every video). The sender is told.
    pub deny_types: Vec<String>,
    /// Seconds a parser of a user's file (a PDF's text) may take. Parsers run in a child
    /// process that is killed then, so a file that makes the parser loop costs this long
    /// and no more; the sender is told the file could not be read.
    pub parse_timeout_seconds: u64,
    /// Megabytes of memory a parser's child process may use (`RLIMIT_DATA`); a file that
    /// needs more is not read, and the daemon's own memory is never touched.
    pub parse_memory_mb: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transcription: Option<TranscriptionConfig>,
}

impl Default for MediaConfig {
    fn default() -> Self {
        Self {
            max_mb: 20,
            channel_max_mb: BTreeMap::new(),
            ttl_days: 7,
            history_images: 3,
            inline_text_chars: 20_000,
            deny_types: DEFAULT_DENY_TYPES.iter().map(|&mime| mime.to_owned()).collect(),
            parse_timeout_seconds: 20,
            parse_memory_mb: 512,
            transcription: None,
        }
    }
}

/// Programs: nothing a chat agent should read, and what a compromised account would send.
const DEFAULT_DENY_TYPES: [&str; 4] = [
    "application/x-executable",
    "application/x-mach-binary",
    "application/vnd.microsoft.portable-executable",
    "application/x-msdownload",
];

impl MediaConfig {
    /// The largest file, in bytes, accepted on `channel`.
    pub fn max_bytes(&self, channel: &str) -> u64 {
        self.channel_max_mb.get(channel).copied().unwrap_or(self.max_mb).saturating_mul(1024 * 1024)
    }

    /// Whether files of this (sniffed) type are refused.
    pub fn denies(&self, mime_type: &str) -> bool {
        self.deny_types.iter().any(|pattern| mime_matches(pattern, mime_type))
    }
}

/// `type/subtype` against a pattern: exact (ignoring case), `type/*`, or `*`.
fn mime_matches(pattern: &str, mime_type: &str) -> bool {
    let pattern = pattern.trim();
    if pattern == "*" || pattern == "*/*" {
        return true;
    }
    match pattern.strip_suffix("/*") {
        Some(top) => mime_type.split('/').next().is_some_and(|kind| kind.eq_ignore_ascii_case(top)),
        None => pattern.eq_ignore_ascii_case(mime_type),
    }
}

/// `[media.transcription]`: an OpenAI-compatible `POST {base_url}/audio/transcriptions`
/// (OpenAI, Groq, a local whisper server).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TranscriptionConfig {
    /// e.g. `https://api.openai.com/v1`, `https://api.groq.com/openai/v1`.
    pub base_url: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key: Option<Secret>,
    /// The environment variable holding the key; `api_key` wins when both are set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    pub model: String,
    /// The spoken language as ISO-639-1 (`en`, `de`); unset: detected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    /// Seconds one transcription may take.
    pub timeout: u64,
}

impl Default for TranscriptionConfig {
    fn default() -> Self {
        Self {
            base_url: "https://api.openai.com/v1".to_owned(),
            api_key: None,
            api_key_env: None,
            model: "whisper-1".to_owned(),
            language: None,
            timeout: 60,
        }
    }
}

/// Load-time checks of `[media]` beyond the numeric ranges (`super::ranges`).
pub(super) fn validate(media: &MediaConfig) -> Result<(), Violation> {
    if let Some(pattern) = media.deny_types.iter().find(|pattern| !valid_pattern(pattern)) {
        return Err(Violation::new(
            "media.deny_types",
            format!("{pattern:?} is not a MIME type pattern; write `type/subtype`, `type/*` or `*`"),
        ));
    }
    if let Some(transcription) = &media.transcription {
        super::endpoint::check("media.transcription", &transcription.base_url, &transcription.model, "\"whisper-1\"")?;
    }
    Ok(())
}

fn valid_pattern(pattern: &str) -> bool {
    let pattern = pattern.trim();
    pattern == "*"
        || pattern.split_once('/').is_some_and(|(top, sub)| {
            !top.is_empty() && !sub.is_empty() && !top.contains('*') && (sub == "*" || !sub.contains('*'))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_exactly_by_top_level_type_or_everything() {
        assert!(mime_matches("video/*", "video/mp4"));
        assert!(mime_matches("Application/PDF", "application/pdf"));
        assert!(mime_matches("*", "text/plain"));
        assert!(!mime_matches("video/*", "audio/ogg"));
        assert!(!mime_matches("image/png", "image/jpeg"));
    }

    #[test]
    fn programs_are_refused_by_default_and_limits_are_per_channel() {
        let mut media = MediaConfig::default();
        assert!(media.denies("application/x-executable"));
        assert!(!media.denies("image/jpeg"));
        media.channel_max_mb.insert("discord".into(), 8);
        assert_eq!(media.max_bytes("discord"), 8 * 1024 * 1024);
        assert_eq!(media.max_bytes("telegram"), 20 * 1024 * 1024);
    }

    #[test]
    fn bad_values_name_their_key() {
        let media = MediaConfig { deny_types: vec!["video".into()], ..MediaConfig::default() };
        assert_eq!(validate(&media).map_err(|violation| violation.key.clone()), Err("media.deny_types".into()));
        let media = MediaConfig {
            transcription: Some(TranscriptionConfig {
                base_url: "whisper.local".into(),
                ..TranscriptionConfig::default()
            }),
            ..MediaConfig::default()
        };
        let key = validate(&media).map_err(|violation| violation.key.clone());
        assert_eq!(key, Err("media.transcription.base_url".into()));
    }
}

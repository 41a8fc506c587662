//! The check every OpenAI-compatible helper endpoint gets at load (`[media.transcription]`,
//! `[memory.embeddings]`): an http(s) base URL and a model name.

use super::error::Violation;

/// `table.base_url` must be an http(s) URL and `table.model` must name a model
/// (`model_example` shows one).
pub(super) fn check(table: &str, base_url: &str, model: &str, model_example: &str) -> Result<(), Violation> {
    if url::Url::parse(base_url).map_or(true, |url| !matches!(url.scheme(), "http" | "https")) {
        return Err(Violation::new(
            format!("{table}.base_url"),
            format!("{base_url:?} is not an http(s) URL, e.g. \"https://api.openai.com/v1\""),
        ));
    }
    if model.trim().is_empty() {
        return Err(Violation::new(format!("{table}.model"), format!("must name a model, e.g. {model_example}")));
    }
    Ok(())
}

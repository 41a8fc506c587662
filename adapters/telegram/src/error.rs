//! Telegram's failures, classified: [`TelegramError`] for start-up, and the mapping of Bot
//! API errors onto [`ChannelError`] that the core's outbound scheduler decides on.
//!
//! teloxide drops the HTTP status and keeps the `description`, so the classification reads
//! the typed [`ApiError`] where teloxide knows the text, and the description's prefix
//! (`Bad Request:`, `Forbidden:`, `Too Many Requests:` …) where it does not.

use std::time::Duration;

use ferry_channel::ChannelError;
use teloxide::{ApiError, RequestError};

/// The platform's hard limit on one message, reported with [`ChannelError::TooLong`].
const TEXT_LIMIT: usize = 4096;

/// The platform's limit on a file's caption, reported with [`ChannelError::TooLong`].
const CAPTION_LIMIT: usize = 1024;

/// Why [`TelegramChannel::connect`](crate::TelegramChannel::connect) failed.
#[derive(Debug, thiserror::Error)]
pub enum TelegramError {
    /// Telegram refused the token (`getMe` answered 401/404). The operator must fix
    /// `channels.telegram.bot_token`; retrying will not help.
    #[error("Telegram refused the bot token (check channels.telegram.bot_token): {reason}")]
    Unauthorized { reason: String },
    /// The configuration cannot work (an unparsable `api_url`, an empty token or secret).
    #[error("invalid Telegram configuration: {reason}")]
    InvalidConfig { reason: String },
    /// The Bot API could not be reached or answered with something unexpected.
    #[error("could not reach the Telegram Bot API at {api_url}: {reason}")]
    Unreachable { api_url: String, reason: String },
}

/// Replaces the bot token in a message: teloxide's network errors include the request URL,
/// which carries the token (`/bot<TOKEN>/SendMessage`).
pub(crate) fn redact(text: &str, token: &str) -> String {
    if token.is_empty() { text.to_owned() } else { text.replace(token, "<token>") }
}

/// Classifies a failed Bot API call. `text_len` is the length of the text that was sent,
/// for [`ChannelError::TooLong`]; `token` is redacted from every reason.
pub(crate) fn channel_error(error: &RequestError, text_len: Option<usize>, token: &str) -> ChannelError {
    let reason = || redact(&error.to_string(), token);
    match error {
        RequestError::RetryAfter(seconds) => ChannelError::RateLimited { retry_after: Some(seconds.duration()) },
        RequestError::Network(_) | RequestError::InvalidJson { .. } | RequestError::Io(_) => {
            ChannelError::Transient { reason: reason() }
        }
        RequestError::MigrateToChatId(to) => {
            ChannelError::Rejected { reason: format!("the group was migrated to the supergroup {to}") }
        }
        RequestError::Api(api) => api_error(api, text_len, token),
    }
}

fn api_error(error: &ApiError, text_len: Option<usize>, token: &str) -> ChannelError {
    let description = redact(&error.to_string(), token);
    match error {
        ApiError::InvalidToken => ChannelError::Unauthorized { reason: description },
        ApiError::CantParseEntities(reason) => ChannelError::MarkupRejected { reason: reason.clone() },
        ApiError::MessageIsTooLong | ApiError::EditedMessageIsTooLong => {
            ChannelError::TooLong { len: text_len.unwrap_or(0), limit: TEXT_LIMIT }
        }
        ApiError::Unknown(text) => unknown_api_error(text, text_len),
        // Everything teloxide names is a definite refusal: bot blocked or kicked, chat not
        // found, message to edit not found…
        _ => ChannelError::Rejected { reason: description },
    }
}

/// Descriptions teloxide does not know, by their status prefix.
fn unknown_api_error(description: &str, text_len: Option<usize>) -> ChannelError {
    let lower = description.to_ascii_lowercase();
    if lower.starts_with("too many requests") {
        // A 429 without `parameters.retry_after` ("Too Many Requests: retry after 5").
        let retry_after = lower.rsplit(' ').next().and_then(|n| n.parse::<u64>().ok()).map(Duration::from_secs);
        return ChannelError::RateLimited { retry_after };
    }
    if lower.contains("can't parse entities") || lower.contains("unsupported start tag") {
        return ChannelError::MarkupRejected { reason: description.to_owned() };
    }
    if lower.contains("message is too long") || lower.contains("text is too long") {
        return ChannelError::TooLong { len: text_len.unwrap_or(0), limit: TEXT_LIMIT };
    }
    if lower.contains("caption is too long") {
        return ChannelError::TooLong { len: text_len.unwrap_or(0), limit: CAPTION_LIMIT };
    }
    const REFUSALS: [&str; 6] =
        ["bad request", "forbidden", "unauthorized", "not found", "conflict", "request entity too large"];
    if REFUSALS.iter().any(|prefix| lower.starts_with(prefix)) {
        ChannelError::Rejected { reason: description.to_owned() }
    } else {
        // "Internal Server Error", "Bad Gateway", "Gateway Timeout"…: a 5xx; the message
        // may or may not have been delivered.
        ChannelError::Transient { reason: description.to_owned() }
    }
}

/// Whether an edit failed only because the message already shows this text.
pub(crate) fn is_not_modified(error: &RequestError) -> bool {
    match error {
        RequestError::Api(ApiError::MessageNotModified) => true,
        RequestError::Api(ApiError::Unknown(text)) => text.to_ascii_lowercase().contains("message is not modified"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error teloxide produces for a Bot API error response body.
    fn from_response(body: &str) -> RequestError {
        #[derive(serde::Deserialize)]
        struct Response {
            description: ApiError,
            parameters: Option<teloxide::types::ResponseParameters>,
        }
        let response: Response = serde_json::from_str(body).unwrap();
        match response.parameters {
            Some(teloxide::types::ResponseParameters::RetryAfter(seconds)) => RequestError::RetryAfter(seconds),
            Some(teloxide::types::ResponseParameters::MigrateToChatId(to)) => RequestError::MigrateToChatId(to),
            None => RequestError::Api(response.description),
        }
    }

    fn classify(body: &str) -> ChannelError {
        channel_error(&from_response(body), Some(5000), "123:TOKEN")
    }

    #[test]
    fn flood_control_is_rate_limited_with_the_platforms_retry_after() {
        let error = classify(
            r#"{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 7","parameters":{"retry_after":7}}"#,
        );
        assert_eq!(error, ChannelError::RateLimited { retry_after: Some(Duration::from_secs(7)) });
        // Without parameters the description still says how long.
        let error = classify(r#"{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 3"}"#);
        assert_eq!(error, ChannelError::RateLimited { retry_after: Some(Duration::from_secs(3)) });
    }

    #[test]
    fn rejected_html_is_markup_rejected_so_the_core_resends_plain() {
        let error = classify(
            r#"{"ok":false,"error_code":400,"description":"Bad Request: can't parse entities: Unsupported start tag \"foo\" at byte offset 0"}"#,
        );
        assert!(
            matches!(error, ChannelError::MarkupRejected { ref reason } if reason.contains("Unsupported start tag"))
        );
    }

    #[test]
    fn an_overlong_text_is_too_long_with_the_platform_limit() {
        let error = classify(r#"{"ok":false,"error_code":400,"description":"Bad Request: message is too long"}"#);
        assert_eq!(error, ChannelError::TooLong { len: 5000, limit: 4096 });
    }

    #[test]
    fn an_overlong_caption_is_too_long_with_the_caption_limit() {
        let error =
            classify(r#"{"ok":false,"error_code":400,"description":"Bad Request: message caption is too long"}"#);
        assert_eq!(error, ChannelError::TooLong { len: 5000, limit: 1024 });
    }

    #[test]
    fn a_file_over_the_download_or_upload_limit_is_rejected() {
        for body in [
            r#"{"ok":false,"error_code":400,"description":"Bad Request: file is too big"}"#,
            r#"{"ok":false,"error_code":413,"description":"Request Entity Too Large"}"#,
        ] {
            assert!(matches!(classify(body), ChannelError::Rejected { .. }), "{body}");
        }
    }

    #[test]
    fn a_refused_token_is_unauthorized_but_a_blocked_bot_is_only_rejected() {
        assert!(matches!(
            classify(r#"{"ok":false,"error_code":401,"description":"Unauthorized"}"#),
            ChannelError::Unauthorized { .. }
        ));
        for body in [
            r#"{"ok":false,"error_code":403,"description":"Forbidden: bot was blocked by the user"}"#,
            r#"{"ok":false,"error_code":403,"description":"Forbidden: bot was kicked from the group chat"}"#,
            r#"{"ok":false,"error_code":400,"description":"Bad Request: chat not found"}"#,
            r#"{"ok":false,"error_code":400,"description":"Bad Request: message thread not found"}"#,
        ] {
            assert!(matches!(classify(body), ChannelError::Rejected { .. }), "{body}");
        }
    }

    #[test]
    fn server_errors_are_transient() {
        for body in [
            r#"{"ok":false,"error_code":500,"description":"Internal Server Error"}"#,
            r#"{"ok":false,"error_code":502,"description":"Bad Gateway"}"#,
        ] {
            assert!(matches!(classify(body), ChannelError::Transient { .. }), "{body}");
        }
    }

    #[test]
    fn not_modified_is_recognised() {
        let error = from_response(
            r#"{"ok":false,"error_code":400,"description":"Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message"}"#,
        );
        assert!(is_not_modified(&error));
        assert!(!is_not_modified(&from_response(
            r#"{"ok":false,"error_code":400,"description":"Bad Request: message to edit not found"}"#
        )));
    }

    #[test]
    fn reasons_never_contain_the_token() {
        assert_eq!(
            redact("error sending request for url (http://x/bot123:TOKEN/GetMe)", "123:TOKEN"),
            "error sending request for url (http://x/bot<token>/GetMe)"
        );
    }
}

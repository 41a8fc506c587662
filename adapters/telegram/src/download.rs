//! [`Channel::download`](ferry_channel::Channel::download) for Telegram: an inbound file's
//! bytes, fetched the Bot API's two-step way.
//!
//! 1. `getFile` with the attachment's `file_id` (its `reference`) answers a `file_path`, or
//!    refuses a file over [`DOWNLOAD_LIMIT`] ("Bad Request: file is too big").
//! 2. `GET {api_url}/file/bot{TOKEN}/{file_path}` answers the bytes, streamed to the core as
//!    they arrive with `Content-Length` as the declared size.
//!
//! The second URL carries the bot token in its path, so no error text here is reqwest's own
//! (its `Display` prints the URL): transport errors are stripped of their URL with
//! [`reqwest::Error::without_url`] and every reason is also passed through
//! [`redact`](crate::error::redact). The URL itself is never logged.

use std::time::Duration;

use ferry_channel::{Attachment, ChannelError, Download};
use futures::StreamExt;
use reqwest::StatusCode;
use reqwest::header::RETRY_AFTER;
use teloxide::Bot;
use teloxide::requests::Requester;
use teloxide::types::FileId;
use tracing::debug;

use crate::CHANNEL_NAME;
use crate::error::{channel_error, redact};

/// The largest file a bot may download: "up to 20MB in size" (Bot API, `getFile`). The Bot
/// API server counts 20 MiB; `getFile` refuses larger files.
pub(crate) const DOWNLOAD_LIMIT: u64 = 20 << 20;

/// How much of an error answer's body is read for its description.
const ERROR_BODY_LIMIT: usize = 4096;

/// Starts downloading `attachment` (a Telegram file by its `file_id`) with `bot`'s client.
pub(crate) async fn download(bot: &Bot, attachment: &Attachment) -> Result<Download, ChannelError> {
    let token = bot.token();
    let file =
        bot.get_file(FileId(attachment.reference.clone())).await.map_err(|error| channel_error(&error, None, token))?;
    debug!(channel = CHANNEL_NAME, file_id = %attachment.reference, size = file.size, "downloading a Telegram file");
    let url = file_url(bot.api_url(), token, &file.path)?;
    let response = bot.client().get(url).send().await.map_err(|error| transport_error(error, token))?;
    let status = response.status();
    if !status.is_success() {
        return Err(status_error(response, token).await);
    }
    let declared_len = response.content_length();
    let token = token.to_owned();
    let body = response.bytes_stream().map(move |chunk| chunk.map_err(|error| transport_error(error, &token)));
    Ok(Download { declared_len, body: body.boxed() })
}

/// `{api_url}/file/bot{token}/{file_path}`, keeping the `/`s of the file path.
fn file_url(mut url: reqwest::Url, token: &str, file_path: &str) -> Result<reqwest::Url, ChannelError> {
    {
        let mut segments = url
            .path_segments_mut()
            .map_err(|()| ChannelError::Rejected { reason: "the Telegram API URL cannot have a path".to_owned() })?;
        segments.pop_if_empty().push("file").push(&format!("bot{token}"));
        segments.extend(file_path.split('/').filter(|segment| !segment.is_empty()));
    }
    Ok(url)
}

/// A request that got no (complete) answer: the connection failed, timed out or broke off
/// mid-body. Worth retrying; the URL (with the token) is dropped from the text.
fn transport_error(error: reqwest::Error, token: &str) -> ChannelError {
    let what = if error.is_timeout() { "timed out" } else { "failed" };
    let error = error.without_url();
    ChannelError::Transient { reason: redact(&format!("downloading the file {what}: {error}"), token) }
}

/// An answer other than 2xx from the file server, classified like a Bot API error.
async fn status_error(response: reqwest::Response, token: &str) -> ChannelError {
    let status = response.status();
    let header_retry_after = response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    let body = read_prefix(response).await;
    let answer: Option<serde_json::Value> = serde_json::from_slice(&body).ok();
    let description = answer
        .as_ref()
        .and_then(|answer| answer.get("description"))
        .and_then(serde_json::Value::as_str)
        .map_or_else(|| status.to_string(), |description| redact(description, token));
    let body_retry_after = answer
        .as_ref()
        .and_then(|answer| answer.pointer("/parameters/retry_after"))
        .and_then(serde_json::Value::as_u64);
    let reason = format!("downloading the file answered {}: {description}", status.as_u16());
    match status {
        StatusCode::TOO_MANY_REQUESTS => {
            ChannelError::RateLimited { retry_after: body_retry_after.or(header_retry_after).map(Duration::from_secs) }
        }
        StatusCode::UNAUTHORIZED => ChannelError::Unauthorized { reason },
        status if status.is_server_error() => ChannelError::Transient { reason },
        // 404: an unknown or expired path (a new download asks `getFile` again), or a wrong
        // token; 4xx refusals in general are not retried.
        _ => ChannelError::Rejected { reason },
    }
}

/// The first [`ERROR_BODY_LIMIT`] bytes of an error answer (all of it, for Telegram's JSON).
async fn read_prefix(mut response: reqwest::Response) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < ERROR_BODY_LIMIT {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    body.truncate(ERROR_BODY_LIMIT);
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "123456:SECRET-token";

    #[test]
    fn the_file_url_keeps_the_path_and_any_api_url_prefix() {
        let base = reqwest::Url::parse("http://127.0.0.1:9/prefix").unwrap();
        let url = file_url(base, TOKEN, "photos/file_3.jpg").unwrap();
        assert_eq!(url.as_str(), "http://127.0.0.1:9/prefix/file/bot123456:SECRET-token/photos/file_3.jpg");
    }

    #[tokio::test]
    async fn a_transport_error_loses_the_url_and_so_the_token() {
        // A loopback port just freed: nothing listens, the connection is refused.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let base = reqwest::Url::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        let url = file_url(base, TOKEN, "documents/a.pdf").unwrap();
        let raw = reqwest::Client::new().get(url).send().await.expect_err("nothing listens there");
        // reqwest's own text names the URL, token and all: this is what must not get out.
        assert!(raw.to_string().contains(TOKEN), "{raw}");
        let error = transport_error(raw, TOKEN);
        assert!(matches!(error, ChannelError::Transient { .. }), "{error:?}");
        assert!(!error.to_string().contains(TOKEN) && !format!("{error:?}").contains(TOKEN), "{error}");
    }
}

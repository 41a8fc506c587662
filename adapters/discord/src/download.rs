//! Inbound attachments: fetching the bytes of a file a user sent ([`Channel::download`]).
//!
//! A Discord attachment's `url` (its `reference`, see `normalize.rs`) is a signed CDN link
//! (`https://cdn.discordapp.com/attachments/…?ex=…&is=…&hm=…`): the signature in the query is
//! the credential, so the request carries no `Authorization` header, and the bot token is
//! never sent to a file host (the downloader has a client of its own, without it). The link
//! expires (about a day after it was handed out); the CDN then answers 404, as it does for a
//! deleted file.
//!
//! The body is streamed to the core, which enforces its size limit as the bytes arrive and
//! sniffs their type; the adapter only fetches and classifies failures:
//! - 429 → [`ChannelError::RateLimited`] with `Retry-After`;
//! - 5xx, a refused or dropped connection, a timeout → [`ChannelError::Transient`];
//! - 403, 404, 410 (an expired or revoked link) and any other 4xx → [`ChannelError::Rejected`].
//!
//! The signed URL is never logged above debug level nor put into an error: errors name the
//! attachment's file name, and reqwest's errors are stripped of their URL.
//!
//! [`Channel::download`]: ferry_channel::Channel::download

use std::time::Duration;

use ferry_channel::{Attachment, ChannelError, Download};
use futures::StreamExt;
use tracing::debug;

use crate::CHANNEL_NAME;

/// How long connecting to the CDN may take before the download is given up as transient.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest wait for the next bytes of a download. Not a total timeout: a large file on a
/// slow link may take minutes, and the core stops it when it passes the size limit.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Fetches attachment bytes from Discord's CDN. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Downloader {
    /// A client of its own, with no credentials: CDN links are signed, and the bot token must
    /// never reach a file host.
    client: reqwest::Client,
}

impl Downloader {
    pub(crate) fn new() -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .build()
            .map_err(|error| format!("cannot build the download client: {error}"))?;
        Ok(Self { client })
    }

    /// Starts downloading `attachment` by its URL; see the module documentation.
    pub(crate) async fn download(&self, attachment: &Attachment) -> Result<Download, ChannelError> {
        let name = display_name(attachment);
        let url = url::Url::parse(&attachment.reference)
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https"))
            .ok_or_else(|| ChannelError::Rejected {
                reason: format!("attachment {name} has no http(s) link to download it from"),
            })?;
        debug!(channel = CHANNEL_NAME, file = %name, host = url.host_str().unwrap_or_default(), "downloading an attachment");
        let response = self.client.get(url).send().await.map_err(|error| ChannelError::Transient {
            reason: format!("downloading attachment {name}: {}", error.without_url()),
        })?;
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.trim().parse::<f64>().ok());
            return Err(classify(status, retry_after, &name));
        }
        let declared_len = response.content_length();
        let body = response.bytes_stream().map(move |chunk| {
            chunk.map_err(|error| ChannelError::Transient {
                reason: format!("downloading attachment {name}: {}", error.without_url()),
            })
        });
        Ok(Download { declared_len, body: body.boxed() })
    }
}

/// What an error calls the attachment: its file name, never its signed link.
fn display_name(attachment: &Attachment) -> String {
    match &attachment.file_name {
        Some(name) => format!("{name:?}"),
        None => "(unnamed)".to_owned(),
    }
}

/// The failure a non-success download answer means.
fn classify(status: u16, retry_after_seconds: Option<f64>, name: &str) -> ChannelError {
    match status {
        429 => ChannelError::RateLimited {
            retry_after: retry_after_seconds
                .filter(|seconds| seconds.is_finite() && *seconds >= 0.0)
                .map(Duration::from_secs_f64),
        },
        status if status >= 500 => {
            ChannelError::Transient { reason: format!("downloading attachment {name}: the CDN answered HTTP {status}") }
        }
        403 | 404 | 410 => ChannelError::Rejected {
            reason: format!(
                "attachment {name} is no longer available (HTTP {status}): its link expired or the file was deleted"
            ),
        },
        status => ChannelError::Rejected { reason: format!("downloading attachment {name}: HTTP {status}") },
    }
}

#[cfg(test)]
mod tests {
    use ferry_channel::AttachmentKind;

    use super::*;

    #[test]
    fn download_failures_are_classified_by_status() {
        assert_eq!(
            classify(429, Some(2.5), "\"a.png\""),
            ChannelError::RateLimited { retry_after: Some(Duration::from_millis(2500)) }
        );
        assert_eq!(classify(429, Some(f64::NAN), "x"), ChannelError::RateLimited { retry_after: None });
        assert!(matches!(classify(503, None, "x"), ChannelError::Transient { .. }));
        for status in [403, 404, 410, 400] {
            assert!(matches!(classify(status, None, "x"), ChannelError::Rejected { .. }), "{status}");
        }
    }

    #[tokio::test]
    async fn only_http_links_are_fetched_and_errors_name_the_file() {
        let downloader = Downloader::new().unwrap();
        let mut attachment = Attachment::remote(AttachmentKind::Document, "file:///etc/passwd");
        attachment.file_name = Some("notes.txt".to_owned());
        let error = downloader.download(&attachment).await.unwrap_err();
        assert!(matches!(&error, ChannelError::Rejected { reason } if reason.contains("\"notes.txt\"")), "{error}");
        attachment.reference = "not a url".to_owned();
        assert!(matches!(downloader.download(&attachment).await, Err(ChannelError::Rejected { .. })));
    }
}

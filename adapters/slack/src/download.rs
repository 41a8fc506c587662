//! Inbound files: the bytes behind a file a user shared, for
//! [`Channel::download`](ferry_channel::Channel::download).
//!
//! Slack serves a message's files at `url_private_download` (or `url_private`) on
//! `files.slack.com`, to a request carrying `Authorization: Bearer <bot token>` (the app
//! needs the `files:read` scope). The adapter only fetches: it streams the body to the core,
//! which enforces size limits as the bytes arrive and sniffs the type.
//!
//! The token is the point of care:
//! - a URL is fetched only if it is on Slack's hosts ([`SlackHosts`]); any other URL is
//!   refused before a connection is made;
//! - redirects are followed here, not by the HTTP client, at most [`MAX_REDIRECTS`]: each
//!   hop gets the token only if it is on Slack's hosts, so a redirect can take the request
//!   elsewhere but never the token;
//! - the token is never logged, and error reasons name no URL.
//!
//! Without a valid token Slack does not answer 401: it answers **200 with its HTML sign-in
//! page**. A `text/html` answer for a file that is not itself HTML is therefore refused as
//! [`ChannelError::Rejected`], with a reason that says what probably went wrong.

use std::time::Duration;

use ferry_channel::{ChannelError, Download};
use futures::StreamExt;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, LOCATION, RETRY_AFTER};
use tracing::debug;
use url::Url;

use crate::CHANNEL_NAME;
use crate::error::{SlackError, file_status_error, file_transport_error};
use crate::hosts::SlackHosts;

/// Redirects followed for one download before it is given up as a loop.
pub(crate) const MAX_REDIRECTS: usize = 5;

/// How long to wait for a connection to Slack's file host.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a download (or an upload's answer) may go without a byte before it fails as
/// [`ChannelError::Transient`]. There is no total limit: a large file on a slow link is fine
/// as long as it moves, and the core stops a download that grows past its size limit.
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// What a download is called in error reasons.
const DOING: &str = "downloading a Slack file";

/// The HTTP client for files both ways: redirects are not followed by the client (see
/// [`Downloads::fetch`]), and plain `http` only for a loopback API (tests).
pub(crate) fn file_client(hosts: &SlackHosts) -> Result<reqwest::Client, SlackError> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT)
        .read_timeout(READ_TIMEOUT)
        .https_only(!hosts.is_loopback())
        .tcp_nodelay(true)
        .build()
        .map_err(|error| SlackError::InvalidConfig { reason: format!("cannot build the file HTTP client: {error}") })
}

/// Fetches users' files with the bot token. See the [module docs](self).
pub(crate) struct Downloads {
    http: reqwest::Client,
    hosts: SlackHosts,
    /// `Bearer <bot token>`, marked sensitive (left out of header dumps). No `Debug` here.
    authorization: HeaderValue,
}

impl Downloads {
    pub(crate) fn new(http: reqwest::Client, hosts: SlackHosts, bot_token: &str) -> Result<Self, SlackError> {
        let mut authorization = HeaderValue::from_str(&format!("Bearer {}", bot_token.trim())).map_err(|_| {
            SlackError::InvalidConfig { reason: "channels.slack.bot_token holds characters a header cannot".to_owned() }
        })?;
        authorization.set_sensitive(true);
        Ok(Self { http, hosts, authorization })
    }

    /// Starts downloading the file at `url`. `file_mime` is the type Slack announced for the
    /// file: an HTML answer is the sign-in page unless the file itself is HTML.
    pub(crate) async fn fetch(&self, url: &str, file_mime: Option<&str>) -> Result<Download, ChannelError> {
        let mut url = Url::parse(url)
            .map_err(|_| ChannelError::Rejected { reason: "the Slack file reference is not a URL".to_owned() })?;
        if !self.hosts.contains(&url) {
            return Err(ChannelError::Rejected {
                reason: format!(
                    "the file URL is not on Slack's hosts ({}); the bot token is not sent there",
                    url.host_str().unwrap_or("no host")
                ),
            });
        }
        for _ in 0..=MAX_REDIRECTS {
            let on_slack = self.hosts.contains(&url);
            let mut request = self.http.get(url.clone());
            if on_slack {
                request = request.header(AUTHORIZATION, self.authorization.clone());
            }
            let response = request.send().await.map_err(|error| file_transport_error(error, DOING))?;
            let status = response.status();
            if status.is_redirection() {
                let next = self.redirect_target(&url, response.headers().get(LOCATION))?;
                debug!(
                    channel = CHANNEL_NAME,
                    from = url.host_str().unwrap_or_default(),
                    to = next.host_str().unwrap_or_default(),
                    with_token = self.hosts.contains(&next),
                    "following a redirect for a Slack file"
                );
                url = next;
                continue;
            }
            if !status.is_success() {
                let retry_after = response.headers().get(RETRY_AFTER).and_then(|value| value.to_str().ok());
                return Err(file_status_error(status.as_u16(), retry_after, DOING));
            }
            let content_type = response.headers().get(CONTENT_TYPE).and_then(|value| value.to_str().ok());
            if is_html(content_type) && !is_html(file_mime) {
                return Err(ChannelError::Rejected {
                    reason: "Slack answered the file request with an HTML page (its sign-in page): the bot token \
                             was not accepted for this file; check that the app has the files:read scope"
                        .to_owned(),
                });
            }
            let declared_len = response.content_length();
            let body = response.bytes_stream().map(|chunk| chunk.map_err(|error| file_transport_error(error, DOING)));
            return Ok(Download { declared_len, body: body.boxed() });
        }
        Err(ChannelError::Rejected { reason: format!("{DOING}: more than {MAX_REDIRECTS} redirects") })
    }

    /// Where a redirect leads. Off Slack's hosts only over https (the token stays behind
    /// anyway; this keeps the file's bytes off plain-text links), except in a loopback test.
    fn redirect_target(&self, from: &Url, location: Option<&HeaderValue>) -> Result<Url, ChannelError> {
        let refused = |reason: &str| ChannelError::Rejected { reason: format!("{DOING}: {reason}") };
        let location =
            location.and_then(|value| value.to_str().ok()).ok_or_else(|| refused("redirect without a Location"))?;
        let next = from.join(location).map_err(|_| refused("redirect to an unreadable Location"))?;
        let secure = next.scheme() == "https" || (self.hosts.is_loopback() && next.scheme() == "http");
        if !self.hosts.contains(&next) && !secure {
            return Err(refused("redirect to a plain-text link off Slack's hosts"));
        }
        Ok(next)
    }
}

/// Whether a MIME type (or `Content-Type` value) is HTML.
fn is_html(mime: Option<&str>) -> bool {
    mime.and_then(|mime| mime.split(';').next()).is_some_and(|essence| essence.trim().eq_ignore_ascii_case("text/html"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_is_recognized_with_parameters_and_in_any_case() {
        assert!(is_html(Some("text/html; charset=utf-8")));
        assert!(is_html(Some("Text/HTML")));
        assert!(!is_html(Some("image/png")));
        assert!(!is_html(None));
    }
}

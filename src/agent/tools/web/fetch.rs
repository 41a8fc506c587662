//! The guarded HTTP fetcher under `web_fetch` and the files an agent attaches by URL: GET
//! one http(s) URL within limits, off private addresses.
//!
//! What a call may cost is bounded by `[tools.web]`: the whole call (every redirect and the
//! body) by `timeout_seconds`, the body by `max_bytes` (the rest is never read), the chain of
//! redirects by `max_redirects`. Redirects are followed here, not by reqwest, so each hop is
//! checked like the first URL (scheme, IP-literal host; see [`super::ssrf`]); host names are
//! vetted by the client's resolver, at connect time.
//!
//! Reading a page for the model (charsets, HTML to markdown) is `page`, in the `web` feature;
//! the fetcher itself is always built, for files attached by URL.

use std::error::Error as _;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{ACCEPT, LOCATION};
use reqwest::{Response, StatusCode};
use url::Url;

use super::ssrf::{AddressPolicy, GuardedResolver, Lookup, Refused, SystemLookup, check_host};
use super::{USER_AGENT, WebToolsError};
use crate::agent::tools::ToolError;
use crate::config::WebToolsConfig;

/// The longest connect attempt, within the call's own timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// What the fetcher asks for: readable text first.
const ACCEPT_VALUE: &str = "text/html, application/xhtml+xml, text/markdown;q=0.9, text/plain;q=0.9, \
                            application/json;q=0.8, */*;q=0.5";

/// The limits one fetch works within, from `[tools.web]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchSettings {
    pub timeout: Duration,
    pub max_bytes: u64,
    pub max_redirects: u32,
    pub policy: AddressPolicy,
}

impl FetchSettings {
    pub fn from_config(config: &WebToolsConfig) -> Self {
        Self {
            timeout: Duration::from_secs(config.timeout_seconds),
            max_bytes: config.max_bytes,
            max_redirects: config.max_redirects,
            policy: AddressPolicy::new(config.allow_private),
        }
    }
}

/// The `web_fetch` tool: one HTTP client whose resolver is the SSRF guard, and the limits.
pub struct WebFetch {
    pub(super) client: reqwest::Client,
    pub(super) settings: FetchSettings,
}

impl WebFetch {
    /// A fetcher resolving names with the system resolver.
    pub fn new(settings: FetchSettings) -> Result<Self, WebToolsError> {
        Self::with_lookup(settings, Arc::new(SystemLookup))
    }

    /// A fetcher resolving names with `lookup` (a fixed table, in tests); the policy still
    /// vets every address it answers.
    pub fn with_lookup(settings: FetchSettings, lookup: Arc<dyn Lookup>) -> Result<Self, WebToolsError> {
        let resolver = GuardedResolver::new(lookup, settings.policy.clone());
        let client = reqwest::Client::builder()
            .user_agent(USER_AGENT)
            // Each hop is checked before it is requested: see `fetch_within`.
            .redirect(reqwest::redirect::Policy::none())
            // Through a proxy the connection would go to the proxy, and the guard could not
            // see where the request really goes.
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT.min(settings.timeout))
            .dns_resolver(Arc::new(resolver))
            .build()
            .map_err(WebToolsError::Client)?;
        Ok(Self { client, settings })
    }

    /// The bytes at `url` (a file the agent attaches to a message), at most `limit` of them,
    /// under the guard, redirect rules and timeout of `[tools.web]`. Returns the
    /// URL they came from (after redirects) and the bytes.
    pub async fn fetch_file(&self, url: &str, limit: u64) -> Result<(Url, Vec<u8>), ToolError> {
        let parsed = parse_url(url)?;
        let fetched = async {
            let (url, response) = self.follow_redirects(parsed).await?;
            let status = response.status();
            if !status.is_success() {
                return Err(ToolError::new(format!("{url} answered HTTP {}", status_text(status))));
            }
            let too_large = || ToolError::new(format!("{url} is larger than {limit} bytes, more than can be sent"));
            if response.content_length().is_some_and(|length| length > limit) {
                return Err(too_large());
            }
            let body = read_capped(response, limit)
                .await
                .map_err(|error| ToolError::new(format!("reading {url} failed: {}", error_chain(&error))))?;
            if body.truncated {
                return Err(too_large());
            }
            Ok((url, body.bytes))
        };
        match tokio::time::timeout(self.settings.timeout, fetched).await {
            Ok(result) => result,
            Err(_) => Err(ToolError::new(format!(
                "fetching {url} took longer than {} s (tools.web.timeout_seconds) and was stopped",
                self.settings.timeout.as_secs()
            ))),
        }
    }

    /// Requests `url`, following redirects while each hop passes the guard, up to
    /// `max_redirects`. Returns the final URL and its response.
    pub(super) async fn follow_redirects(&self, mut url: Url) -> Result<(Url, Response), ToolError> {
        let mut redirects = 0;
        loop {
            check_host(&url, &self.settings.policy).map_err(|refused| ToolError::new(refused.to_string()))?;
            let response = self
                .client
                .get(url.clone())
                .header(ACCEPT, ACCEPT_VALUE)
                .send()
                .await
                .map_err(|error| request_failure(&url, &error))?;
            let status = response.status();
            let location = response.headers().get(LOCATION).cloned();
            let Some(location) = location.filter(|_| status.is_redirection()) else {
                return Ok((url, response));
            };
            let next = location.to_str().ok().and_then(|location| url.join(location.trim()).ok()).ok_or_else(|| {
                ToolError::new(format!("{url} redirects ({}) to an invalid location", status_text(status)))
            })?;
            check_scheme(&next).map_err(|error| ToolError::new(format!("{url} redirects to {next}: {error}")))?;
            if redirects >= self.settings.max_redirects {
                return Err(ToolError::new(format!(
                    "too many redirects: stopped after {} (tools.web.max_redirects); {url} redirects on to {next}",
                    self.settings.max_redirects
                )));
            }
            redirects += 1;
            url = next;
        }
    }
}

/// `url` parsed, as an http(s) URL, or an error worded for the model.
pub(super) fn parse_url(url: &str) -> Result<Url, ToolError> {
    let parsed = Url::parse(url.trim()).map_err(|error| match error {
        url::ParseError::RelativeUrlWithoutBase => {
            ToolError::new(format!("{url:?} is not a full URL: start it with https:// or http://"))
        }
        error => ToolError::new(format!("{url:?} is not a URL: {error}")),
    })?;
    check_scheme(&parsed)?;
    Ok(parsed)
}

fn check_scheme(url: &Url) -> Result<(), ToolError> {
    match url.scheme() {
        "http" | "https" => Ok(()),
        other => Err(ToolError::new(format!("only http:// and https:// URLs can be fetched, not {other}:"))),
    }
}

/// "200 OK", "404 Not Found".
pub(super) fn status_text(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

/// Why a request failed: the guard's refusal when that is what stopped it (the resolver's
/// error travels inside reqwest's), else reqwest's error with its causes.
fn request_failure(url: &Url, error: &reqwest::Error) -> ToolError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        if let Some(refused) = current.downcast_ref::<Refused>() {
            return ToolError::new(refused.to_string());
        }
        source = current.source();
    }
    if error.is_timeout() {
        return ToolError::new(format!("connecting to {url} timed out"));
    }
    // reqwest's own message repeats the URL; its causes say what happened.
    let why = error.source().map_or_else(|| error.to_string(), error_chain);
    ToolError::new(format!("could not fetch {url}: {why}"))
}

/// An error and its causes, joined: "error sending request: dns error: no such host".
pub(super) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![error.to_string()];
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !parts.iter().any(|part| part.contains(&text)) {
            parts.push(text);
        }
        source = cause.source();
    }
    parts.join(": ")
}

/// A body read up to a cap.
pub(super) struct Body {
    pub(super) bytes: Vec<u8>,
    /// The body went on past the cap; the rest was not read.
    pub(super) truncated: bool,
}

/// Reads at most `max_bytes` of the body; once past the cap it stops and drops the connection.
pub(super) async fn read_capped(mut response: Response, max_bytes: u64) -> Result<Body, reqwest::Error> {
    let cap = usize::try_from(max_bytes).unwrap_or(usize::MAX);
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        bytes.extend_from_slice(&chunk);
        if bytes.len() > cap {
            bytes.truncate(cap);
            return Ok(Body { bytes, truncated: true });
        }
    }
    Ok(Body { bytes, truncated: false })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn web_non_http_schemes_are_refused() {
        for url in ["file:///etc/passwd", "ftp://example.com/", "gopher://example.com/"] {
            assert!(check_scheme(&Url::parse(url).unwrap()).is_err(), "{url}");
        }
        assert!(check_scheme(&Url::parse("https://example.com/").unwrap()).is_ok());
    }
}

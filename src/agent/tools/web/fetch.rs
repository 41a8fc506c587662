//! `web_fetch`: GET one http(s) URL and give the model its text.
//!
//! What a call may cost is bounded by `[tools.web]`: the whole call (every redirect and the
//! body) by `timeout_seconds`, the body by `max_bytes` (the rest is never read), the chain of
//! redirects by `max_redirects`. Redirects are followed here, not by reqwest, so each hop is
//! checked like the first URL (scheme, IP-literal host; see [`super::ssrf`]); host names are
//! vetted by the client's resolver, at connect time.
//!
//! A body is decoded from the charset its `Content-Type` or, for HTML, its `<meta>` names, else
//! as UTF-8 ([`super::charset`]). HTML becomes markdown ([`super::markdown`]); text, markdown
//! and JSON pass through; a body with no usable content type is sniffed; binary types are
//! refused without reading them.

use std::error::Error as _;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{ACCEPT, CONTENT_TYPE, LOCATION};
use reqwest::{Response, StatusCode};
use schemars::JsonSchema;
use serde::Deserialize;
use url::Url;

use super::ssrf::{AddressPolicy, GuardedResolver, Lookup, Refused, SystemLookup, check_host};
use super::{USER_AGENT, WebToolsError};
use super::{charset, markdown};
use crate::agent::tools::{ToolContext, ToolError, ToolOutput, TypedTool};
use crate::config::WebToolsConfig;

/// `max_chars` when the model does not say: about a long article's worth.
pub const DEFAULT_MAX_CHARS: usize = 50_000;
/// The bounds `max_chars` is held to. Whatever it is, the registry's `tools.max_result_chars`
/// still caps the result.
const MAX_CHARS_RANGE: (usize, usize) = (100, 1_000_000);
/// The longest connect attempt, within the call's own timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How much of an error page's body goes into the error result.
const ERROR_EXCERPT_CHARS: usize = 1_000;
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

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebFetchArgs {
    /// The http:// or https:// URL to fetch.
    pub url: String,
    /// The most characters of the page's content to return (default 50000); the rest is cut
    /// and the result says so.
    #[serde(default)]
    pub max_chars: Option<usize>,
}

/// The `web_fetch` tool: one HTTP client whose resolver is the SSRF guard, and the limits.
pub struct WebFetch {
    client: reqwest::Client,
    settings: FetchSettings,
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

    /// Fetches `url` and renders it for the model (see the module doc); every failure is an
    /// error worded for the model.
    pub async fn fetch(&self, url: &str, max_chars: Option<usize>) -> Result<String, ToolError> {
        let parsed = parse_url(url)?;
        let max_chars = max_chars.unwrap_or(DEFAULT_MAX_CHARS).clamp(MAX_CHARS_RANGE.0, MAX_CHARS_RANGE.1);
        match tokio::time::timeout(self.settings.timeout, self.fetch_within(parsed, max_chars)).await {
            Ok(result) => result,
            Err(_) => Err(ToolError::new(format!(
                "fetching {url} took longer than {} s (tools.web.timeout_seconds) and was stopped",
                self.settings.timeout.as_secs()
            ))),
        }
    }

    /// The bytes at `url` (a file the agent attaches to a message), at most `limit` of them,
    /// under the same guard, redirect rules and timeout as [`WebFetch::fetch`]. Returns the
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

    async fn fetch_within(&self, first: Url, max_chars: usize) -> Result<String, ToolError> {
        let (url, response) = self.follow_redirects(first.clone()).await?;
        let status = response.status();
        let content_type =
            response.headers().get(CONTENT_TYPE).and_then(|value| value.to_str().ok()).map(str::to_owned);
        let host = url.host_str().unwrap_or_default().to_owned();
        let kind = ContentKind::of(content_type.as_deref());
        if !status.is_success() {
            let excerpt = match kind {
                ContentKind::Binary(_) => String::new(),
                _ => error_excerpt(response, content_type.as_deref(), kind == ContentKind::Html).await,
            };
            tracing::debug!(%host, status = status.as_u16(), "web_fetch got an error status");
            return Err(ToolError::new(format!("{url} answered HTTP {}{excerpt}", status_text(status))));
        }
        if let ContentKind::Binary(essence) = &kind {
            return Err(binary_refusal(&url, essence));
        }
        let body = read_capped(response, self.settings.max_bytes)
            .await
            .map_err(|error| ToolError::new(format!("reading {url} failed: {}", error_chain(&error))))?;
        tracing::debug!(%host, bytes = body.bytes.len(), truncated = body.truncated, "web_fetch read a page");
        let kind = match kind {
            ContentKind::Unknown => sniff(&body.bytes),
            known => known,
        };
        let text = charset::decode(&body.bytes, content_type.as_deref(), kind == ContentKind::Html);
        let (title, content) = match kind {
            ContentKind::Html => {
                let page = markdown::convert(text, url.clone())
                    .await
                    .ok_or_else(|| ToolError::new(format!("converting {url} to markdown failed")))?;
                (page.title, page.markdown)
            }
            ContentKind::Binary(essence) => return Err(binary_refusal(&url, &essence)),
            ContentKind::Text | ContentKind::Unknown => (None, text),
        };

        let mut out = format!("URL: {url}\nStatus: {}\n", status_text(status));
        out.push_str(&format!("Content-Type: {}\n", content_type.as_deref().unwrap_or("(none given)")));
        if let Some(title) = title {
            out.push_str(&format!("Title: {title}\n"));
        }
        if url != first {
            out.push_str(&format!("Redirected from: {first}\n"));
        }
        if body.truncated {
            out.push_str(&format!(
                "Note: only the first {} bytes were read (tools.web.max_bytes); the page goes on.\n",
                self.settings.max_bytes
            ));
        }
        out.push('\n');
        out.push_str(&cap_chars(&content, max_chars));
        Ok(out)
    }

    /// Requests `url`, following redirects while each hop passes the guard, up to
    /// `max_redirects`. Returns the final URL and its response.
    async fn follow_redirects(&self, mut url: Url) -> Result<(Url, Response), ToolError> {
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

#[async_trait]
impl TypedTool for WebFetch {
    type Args = WebFetchArgs;
    const NAME: &'static str = "web_fetch";
    const DESCRIPTION: &'static str = "Fetch a web page or file over http(s) (GET) and read it. HTML comes back as \
        markdown with absolute links; plain text, markdown and JSON as they are. Images, PDFs and other binary files \
        cannot be read. The result starts with the final URL (after redirects), the status and the content type.";

    async fn run(&self, args: WebFetchArgs, _context: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.fetch(&args.url, args.max_chars).await.map(ToolOutput::from)
    }
}

/// `url` parsed, as an http(s) URL, or an error worded for the model.
fn parse_url(url: &str) -> Result<Url, ToolError> {
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
fn status_text(status: StatusCode) -> String {
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
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
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

fn binary_refusal(url: &Url, what: &str) -> ToolError {
    ToolError::new(format!(
        "{url} is not text ({what}): web_fetch reads HTML and text only (pages, plain text, markdown, JSON)"
    ))
}

/// What a response's body is, by its `Content-Type`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ContentKind {
    Html,
    Text,
    /// Not text; what it is (a MIME essence such as `image/png`).
    Binary(String),
    /// No content type, or `application/octet-stream`: the body decides ([`sniff`]).
    Unknown,
}

impl ContentKind {
    fn of(content_type: Option<&str>) -> Self {
        let essence = content_type.and_then(|value| value.split(';').next()).unwrap_or("").trim().to_ascii_lowercase();
        match essence.as_str() {
            "" | "application/octet-stream" | "binary/octet-stream" => Self::Unknown,
            "text/html" | "application/xhtml+xml" => Self::Html,
            "application/json"
            | "application/xml"
            | "application/javascript"
            | "application/ecmascript"
            | "application/x-javascript"
            | "application/yaml"
            | "application/x-yaml"
            | "application/toml"
            | "application/x-ndjson"
            | "application/jsonl"
            | "application/sql"
            | "application/graphql"
            | "application/x-sh"
            | "application/x-httpd-php" => Self::Text,
            text if text.starts_with("text/") || text.ends_with("+json") || text.ends_with("+xml") => Self::Text,
            _ => Self::Binary(essence),
        }
    }
}

/// The kind of a body that came without a usable content type: binary if it has NUL bytes,
/// HTML if it opens like a document (in whatever charset its `<meta>` names), binary if it is
/// mostly not UTF-8, else text.
fn sniff(bytes: &[u8]) -> ContentKind {
    let head = &bytes[..bytes.len().min(8 * 1024)];
    let binary = || ContentKind::Binary("binary data without a text content type".to_owned());
    if head.contains(&0) {
        return binary();
    }
    let decoded = String::from_utf8_lossy(head);
    let start = decoded.trim_start_matches('\u{feff}').trim_start().to_ascii_lowercase();
    if start.starts_with("<!doctype html") || start.starts_with("<html") {
        return ContentKind::Html;
    }
    let replaced = decoded.chars().filter(|c| *c == char::REPLACEMENT_CHARACTER).count();
    if replaced * 20 > decoded.chars().count().max(1) { binary() } else { ContentKind::Text }
}

/// A body read up to a cap.
struct Body {
    bytes: Vec<u8>,
    /// The body went on past the cap; the rest was not read.
    truncated: bool,
}

/// Reads at most `max_bytes` of the body; once past the cap it stops and drops the connection.
async fn read_capped(mut response: Response, max_bytes: u64) -> Result<Body, reqwest::Error> {
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

/// The start of an error page, as text, for the error result: APIs explain themselves there.
/// `html`: the content type says HTML.
async fn error_excerpt(response: Response, content_type: Option<&str>, html: bool) -> String {
    let Ok(body) = read_capped(response, (ERROR_EXCERPT_CHARS * 4) as u64).await else { return String::new() };
    let sniffed = sniff(&body.bytes);
    if matches!(sniffed, ContentKind::Binary(_)) {
        return String::new();
    }
    let text = charset::decode(&body.bytes, content_type, html || sniffed == ContentKind::Html);
    let text = text.trim();
    if text.is_empty() {
        return String::new();
    }
    let excerpt: String = text.chars().take(ERROR_EXCERPT_CHARS).collect();
    let more = if excerpt.len() < text.len() || body.truncated { " …" } else { "" };
    format!("; the response begins:\n{excerpt}{more}")
}

/// The first `max_chars` characters of `content`, cut at a line end when one is near, with a
/// line saying how much was left out.
fn cap_chars(content: &str, max_chars: usize) -> String {
    let total = content.chars().count();
    if total <= max_chars {
        return content.to_owned();
    }
    let end = content.char_indices().nth(max_chars).map_or(content.len(), |(at, _)| at);
    let window_start = content.floor_char_boundary(end.saturating_sub(200));
    let end = content[window_start..end].rfind('\n').map_or(end, |at| window_start + at);
    let kept = content[..end].chars().count();
    format!(
        "{}\n\n[… content cut here: {kept} of {total} characters shown (max_chars); ask again with a larger \
         max_chars for more …]",
        content[..end].trim_end()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn web_content_types_decide_how_a_body_is_read() {
        assert_eq!(ContentKind::of(Some("text/html; charset=utf-8")), ContentKind::Html);
        assert_eq!(ContentKind::of(Some("application/xhtml+xml")), ContentKind::Html);
        for text in ["text/plain", "text/markdown", "application/json", "application/ld+json", "application/rss+xml"] {
            assert_eq!(ContentKind::of(Some(text)), ContentKind::Text, "{text}");
        }
        for binary in ["image/png", "application/pdf", "video/mp4", "application/zip"] {
            assert_eq!(ContentKind::of(Some(binary)), ContentKind::Binary(binary.to_owned()), "{binary}");
        }
        assert_eq!(ContentKind::of(None), ContentKind::Unknown);
        assert_eq!(ContentKind::of(Some("application/octet-stream")), ContentKind::Unknown);
    }

    #[test]
    fn web_an_unlabelled_body_is_sniffed() {
        assert_eq!(sniff(b"  <!DOCTYPE html><p>x</p>"), ContentKind::Html);
        assert_eq!(sniff(b"plain words"), ContentKind::Text);
        assert!(matches!(sniff(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"), ContentKind::Binary(_)));
        assert!(matches!(sniff(&[0xff, 0xfe, 0xfd, 0xfc, 0xfb, 0xfa]), ContentKind::Binary(_)));
        // A page in a legacy charset is not UTF-8, but opens like HTML: its <meta> decides.
        let shift_jis =
            [b"<!DOCTYPE html><meta charset=shift_jis><p>".as_slice(), &b"\x93\xfa\x96{".repeat(50)].concat();
        assert_eq!(sniff(&shift_jis), ContentKind::Html);
        assert!(matches!(sniff(&b"\x93\xfa\x96{".repeat(50)), ContentKind::Binary(_)));
    }

    #[test]
    fn web_long_content_is_cut_at_max_chars_with_a_note() {
        let content: String = (0..1_000).map(|n| format!("line {n}\n")).collect();
        let capped = cap_chars(&content, 500);
        let (kept, note) = capped.split_once("\n\n[… content cut here: ").expect("a note");
        assert!(kept.chars().count() <= 500 && kept.ends_with(|c: char| c.is_ascii_digit()), "{kept}");
        assert!(note.starts_with(&format!("{} of {} characters shown", kept.chars().count(), content.chars().count())));
        assert_eq!(cap_chars("short", 500), "short");
        assert!(cap_chars(&"é".repeat(300), 100).starts_with(&"é".repeat(100)));
    }

    #[test]
    fn web_non_http_schemes_are_refused() {
        for url in ["file:///etc/passwd", "ftp://example.com/", "gopher://example.com/"] {
            assert!(check_scheme(&Url::parse(url).unwrap()).is_err(), "{url}");
        }
        assert!(check_scheme(&Url::parse("https://example.com/").unwrap()).is_ok());
    }
}

//! `web_fetch`: GET one http(s) URL and give the model its text.
//!
//! A body is decoded from the charset its `Content-Type` or, for HTML, its `<meta>` names, else
//! as UTF-8 ([`super::charset`]). HTML becomes markdown ([`super::markdown`]); text, markdown
//! and JSON pass through; a body with no usable content type is sniffed; binary types are
//! refused without reading them. The fetch itself, its guard and its limits are
//! [`super::fetch`]'s.

use async_trait::async_trait;
use reqwest::Response;
use reqwest::header::CONTENT_TYPE;
use schemars::JsonSchema;
use serde::Deserialize;
use url::Url;

use super::fetch::{WebFetch, error_chain, parse_url, read_capped, status_text};
use super::{charset, markdown};
use crate::agent::tools::{ToolContext, ToolError, ToolOutput, TypedTool};

/// `max_chars` when the model does not say: about a long article's worth.
pub const DEFAULT_MAX_CHARS: usize = 50_000;
/// The bounds `max_chars` is held to. Whatever it is, the registry's `tools.max_result_chars`
/// still caps the result.
const MAX_CHARS_RANGE: (usize, usize) = (100, 1_000_000);
/// How much of an error page's body goes into the error result.
const ERROR_EXCERPT_CHARS: usize = 1_000;
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

impl WebFetch {
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
}

//! `web_search`: titles, URLs and snippets from the search provider `[tools.web.search]`
//! names: a SearXNG instance's JSON API or the Brave Search API.
//!
//! The provider's URL is the operator's, not the model's, so its requests do not go through
//! the SSRF guard (a self-hosted SearXNG usually listens on localhost); they do have the
//! `tools.web.timeout_seconds` limit. The Brave key is a [`Secret`]: it goes into one header and
//! nowhere else.

use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::ACCEPT;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use url::Url;

use super::{USER_AGENT, WebToolsError, parse};
use crate::agent::tools::{ToolContext, ToolError, ToolOutput, TypedTool};
use crate::config::{Secret, WebSearchConfig, WebSearchProvider};

/// Results when the model does not say how many.
pub const DEFAULT_COUNT: usize = 5;
/// The most results one call returns (Brave's own maximum per request).
pub const MAX_COUNT: usize = 20;
/// Brave's API root when `tools.web.search.url` does not override it.
pub const BRAVE_DEFAULT_URL: &str = "https://api.search.brave.com";
/// The largest provider answer read; a page of 20 results is a few tens of kilobytes.
const MAX_ANSWER_BYTES: usize = 2_000_000;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebSearchArgs {
    /// What to search the web for.
    pub query: String,
    /// How many results to return (default 5, at most 20).
    #[serde(default)]
    pub count: Option<usize>,
}

/// One result as the model gets it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SearchResult {
    pub title: String,
    pub url: String,
    /// The provider's excerpt of the page, as plain text.
    pub snippet: String,
}

/// A provider and how to reach it.
#[derive(Debug, Clone)]
enum Provider {
    Searxng { base: Url },
    Brave { base: Url, key: Secret },
}

impl Provider {
    fn name(&self) -> &'static str {
        match self {
            Provider::Searxng { .. } => "searxng",
            Provider::Brave { .. } => "brave",
        }
    }
}

/// The `web_search` tool. Registered only when a provider is configured.
pub struct WebSearch {
    client: reqwest::Client,
    provider: Provider,
}

impl WebSearch {
    /// The tool for `config`'s provider, each call limited to `timeout`. The config has been
    /// validated (a SearXNG URL, a Brave key); what is still wrong is an error here.
    pub fn from_config(config: &WebSearchConfig, timeout: Duration) -> Result<Self, WebToolsError> {
        let url = |default: Option<&str>| -> Result<Url, WebToolsError> {
            let text = config.url.as_deref().or(default).ok_or(WebToolsError::MissingSearchUrl)?;
            Url::parse(text)
                .map_err(|error| WebToolsError::SearchUrl { url: text.to_owned(), reason: error.to_string() })
        };
        let provider = match config.provider {
            WebSearchProvider::Searxng => Provider::Searxng { base: url(None)? },
            WebSearchProvider::Brave => Provider::Brave {
                base: url(Some(BRAVE_DEFAULT_URL))?,
                key: config.api_key.clone().filter(|key| !key.is_blank()).ok_or(WebToolsError::MissingBraveKey)?,
            },
        };
        let client = reqwest::Client::builder()
            .user_agent(USER_AGENT)
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .build()
            .map_err(WebToolsError::Client)?;
        Ok(Self { client, provider })
    }

    /// Asks the provider for `count` results for `query`.
    pub async fn search(&self, query: &str, count: Option<usize>) -> Result<Vec<SearchResult>, ToolError> {
        let query = query.trim();
        if query.is_empty() {
            return Err(ToolError::new("the query is empty; say what to search for"));
        }
        let count = count.unwrap_or(DEFAULT_COUNT).clamp(1, MAX_COUNT);
        let provider = self.provider.name();
        let request = match &self.provider {
            Provider::Searxng { base } => {
                let url = endpoint(base, &["search"])?;
                self.client.get(url).query(&[("q", query), ("format", "json")])
            }
            Provider::Brave { base, key } => {
                let url = endpoint(base, &["res", "v1", "web", "search"])?;
                self.client
                    .get(url)
                    .query(&[("q", query), ("count", &count.to_string())])
                    .header("X-Subscription-Token", key.expose())
            }
        };
        let response = request.header(ACCEPT, "application/json").send().await.map_err(|error| {
            ToolError::new(format!("the search provider ({provider}) could not be reached: {}", reason(&error)))
        })?;
        let status = response.status();
        let body = read_answer(response).await.map_err(|error| {
            ToolError::new(format!("reading the search provider's ({provider}) answer failed: {}", reason(&error)))
        })?;
        if !status.is_success() {
            tracing::warn!(provider, status = status.as_u16(), "web_search: the provider answered with an error");
            let hint = match (&self.provider, status.as_u16()) {
                (Provider::Searxng { .. }, 403) => {
                    " (SearXNG refuses JSON unless `json` is in search.formats of its settings.yml)"
                }
                (Provider::Brave { .. }, 401 | 403) => " (check tools.web.search.api_key / BRAVE_API_KEY)",
                (_, 429) => " (rate limited: try again later)",
                _ => "",
            };
            let excerpt: String = String::from_utf8_lossy(&body).chars().take(300).collect();
            return Err(ToolError::new(format!(
                "the search provider ({provider}) answered HTTP {status}{hint}: {}",
                excerpt.trim()
            )));
        }
        let mut results = match &self.provider {
            Provider::Searxng { .. } => parse_searxng(&body),
            Provider::Brave { .. } => parse_brave(&body),
        }
        .map_err(|error| {
            ToolError::new(format!("the search provider's ({provider}) answer was not the JSON expected: {error}"))
        })?;
        results.truncate(count);
        Ok(results)
    }
}

#[async_trait]
impl TypedTool for WebSearch {
    type Args = WebSearchArgs;
    const NAME: &'static str = "web_search";
    const DESCRIPTION: &'static str = "Search the web. Returns titles, URLs and snippets of the top results; \
        fetch a result with web_fetch to read it.";

    async fn run(&self, args: WebSearchArgs, _context: &ToolContext) -> Result<ToolOutput, ToolError> {
        let results = self.search(&args.query, args.count).await?;
        let answer = serde_json::json!({ "query": args.query.trim(), "results": results });
        serde_json::to_string(&answer)
            .map(ToolOutput::from)
            .map_err(|error| ToolError::new(format!("could not encode the results: {error}")))
    }
}

/// `base` with `segments` appended to its path (a SearXNG may live under a path prefix).
fn endpoint(base: &Url, segments: &[&str]) -> Result<Url, ToolError> {
    let mut url = base.clone();
    url.path_segments_mut()
        .map_err(|()| ToolError::new(format!("the search provider URL {base} cannot have a path")))?
        .pop_if_empty()
        .extend(segments);
    Ok(url)
}

async fn read_answer(mut response: reqwest::Response) -> Result<Vec<u8>, reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_ANSWER_BYTES {
            body.truncate(MAX_ANSWER_BYTES);
            break;
        }
    }
    Ok(body)
}

fn reason(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        return "timed out (tools.web.timeout_seconds)".to_owned();
    }
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

/// SearXNG's `/search?format=json` answer: the fields used of it.
#[derive(Debug, Deserialize)]
struct SearxngAnswer {
    #[serde(default)]
    results: Vec<SearxngResult>,
}

#[derive(Debug, Deserialize)]
struct SearxngResult {
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    title: Option<String>,
    /// The snippet, plain text.
    #[serde(default)]
    content: Option<String>,
}

fn parse_searxng(body: &[u8]) -> Result<Vec<SearchResult>, serde_json::Error> {
    let answer: SearxngAnswer = serde_json::from_slice(body)?;
    Ok(answer
        .results
        .into_iter()
        .filter_map(|result| {
            Some(SearchResult {
                url: result.url.filter(|url| !url.is_empty())?,
                title: result.title.unwrap_or_default().trim().to_owned(),
                snippet: result.content.unwrap_or_default().trim().to_owned(),
            })
        })
        .collect())
}

/// Brave's `/res/v1/web/search` answer: the web results, the fields used of them.
#[derive(Debug, Deserialize)]
struct BraveAnswer {
    #[serde(default)]
    web: Option<BraveWeb>,
}

#[derive(Debug, Deserialize)]
struct BraveWeb {
    #[serde(default)]
    results: Vec<BraveResult>,
}

#[derive(Debug, Deserialize)]
struct BraveResult {
    url: String,
    #[serde(default)]
    title: String,
    /// An HTML fragment: matched words in `<strong>`, entities escaped.
    #[serde(default)]
    description: String,
}

fn parse_brave(body: &[u8]) -> Result<Vec<SearchResult>, serde_json::Error> {
    let answer: BraveAnswer = serde_json::from_slice(body)?;
    let results = answer.web.map(|web| web.results).unwrap_or_default();
    Ok(results
        .into_iter()
        .map(|result| SearchResult {
            title: html_text(&result.title),
            snippet: html_text(&result.description),
            url: result.url,
        })
        .collect())
}

/// The text of an HTML fragment (Brave marks up its titles and snippets).
fn html_text(fragment: &str) -> String {
    if !fragment.contains(['<', '&']) {
        return fragment.trim().to_owned();
    }
    parse::fragment_text(fragment)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn web_searxng_results_are_read_from_its_json() {
        let body = br#"{
            "query": "rust ssrf",
            "number_of_results": 0,
            "results": [
                {"url": "https://example.com/a", "title": "A page", "content": "About A.", "engine": "duckduckgo",
                 "parsed_url": ["https", "example.com", "/a", "", "", ""], "score": 1.5, "category": "general"},
                {"url": "https://example.org/b", "title": " B ", "engine": "bing"},
                {"title": "no url, skipped"}
            ],
            "answers": [], "corrections": [], "infoboxes": [], "suggestions": ["rust ssrf guard"],
            "unresponsive_engines": []
        }"#;
        let results = parse_searxng(body).unwrap();
        assert_eq!(
            results,
            [
                SearchResult {
                    title: "A page".into(),
                    url: "https://example.com/a".into(),
                    snippet: "About A.".into()
                },
                SearchResult { title: "B".into(), url: "https://example.org/b".into(), snippet: String::new() },
            ]
        );
        assert_eq!(parse_searxng(br#"{"results": []}"#).unwrap(), []);
        assert!(parse_searxng(b"<html>not json</html>").is_err());
    }

    #[test]
    fn web_brave_results_are_read_from_its_json_with_markup_removed() {
        let body = br#"{
            "type": "search",
            "query": {"original": "ferry chat", "more_results_available": true},
            "mixed": {"type": "mixed", "main": [{"type": "web", "index": 0, "all": false}]},
            "web": {"type": "search", "family_friendly": true, "results": [
                {"title": "Ferry &amp; friends", "url": "https://ferry.example/", "is_source_local": false,
                 "description": "Run <strong>chat</strong> agents &#x27;anywhere&#x27;.", "page_age": "2025-01-01T00:00:00",
                 "profile": {"name": "Ferry"}, "language": "en", "family_friendly": true},
                {"title": "Plain", "url": "https://plain.example/x", "description": "No markup here."}
            ]}
        }"#;
        let results = parse_brave(body).unwrap();
        assert_eq!(results.len(), 2);
        assert_eq!(results[0].title, "Ferry & friends");
        assert_eq!(results[0].url, "https://ferry.example/");
        assert_eq!(results[0].snippet, "Run **chat** agents 'anywhere'.");
        assert_eq!(results[1].snippet, "No markup here.");
        // A query with no web results has no `web` at all.
        assert_eq!(parse_brave(br#"{"type": "search", "query": {"original": "x"}}"#).unwrap(), []);
    }

    #[test]
    fn web_endpoints_keep_the_base_path() {
        let base = Url::parse("http://127.0.0.1:8888/searxng/").unwrap();
        assert_eq!(endpoint(&base, &["search"]).unwrap().as_str(), "http://127.0.0.1:8888/searxng/search");
        let base = Url::parse("https://api.search.brave.com").unwrap();
        assert_eq!(
            endpoint(&base, &["res", "v1", "web", "search"]).unwrap().as_str(),
            "https://api.search.brave.com/res/v1/web/search"
        );
    }

    #[test]
    fn web_a_brave_provider_needs_a_key() {
        let config = WebSearchConfig { provider: WebSearchProvider::Brave, url: None, api_key: None };
        assert!(matches!(WebSearch::from_config(&config, Duration::from_secs(5)), Err(WebToolsError::MissingBraveKey)));
        let config = WebSearchConfig { api_key: Some(Secret::new("k")), ..config };
        let search = WebSearch::from_config(&config, Duration::from_secs(5)).unwrap();
        assert!(
            matches!(&search.provider, Provider::Brave { base, .. } if base.as_str() == "https://api.search.brave.com/")
        );
        assert!(!format!("{:?}", search.provider).contains("\"k\""), "the key is never printed");
    }
}

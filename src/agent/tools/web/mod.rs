//! The web tools (issue 21, `group:web`): `web_fetch` reads a page, `web_search` asks a search
//! provider.
//!
//! ```no_run
//! use ferry::agent::tools::{ToolRegistry, web};
//! use ferry::config::WebToolsConfig;
//!
//! let mut registry = ToolRegistry::with_builtins();
//! web::register(&mut registry, &WebToolsConfig::default())?;
//! # Ok::<(), web::WebToolsError>(())
//! ```
//!
//! Registering them does not offer them: the chat's tool policy does (`[tools] profile =
//! "coding"` or an `allow` of `group:web`). A model is an untrusted client here, since a page
//! it reads can tell it what to fetch next, so `web_fetch` is guarded against server-side
//! request forgery ([`ssrf`]): unless `tools.web.allow_private` is on it reaches public
//! addresses only, checked where the connection is made.
//!
//! - [`fetch`]: the guarded fetcher, its limits and redirects (always built: files an agent
//!   attaches by URL come through it);
//! - `page`: the `web_fetch` tool, reading what [`fetch`] got;
//! - [`charset`]: which encoding a fetched body is in (header, `<meta>`, UTF-8);
//! - [`ssrf`]: what an address is, and the resolver that keeps fetches off private ones;
//! - [`markdown`]: HTML to markdown, on a DOM [`parse`] keeps from nesting too deep;
//! - [`search`]: the `web_search` tool and its providers (SearXNG, Brave).
//!
//! All but [`fetch`] and [`ssrf`] are the `web` cargo feature; without it [`register`] adds
//! nothing and `config::features` says so.

#[cfg(feature = "web")]
pub mod charset;
pub mod fetch;
#[cfg(feature = "web")]
pub mod markdown;
#[cfg(feature = "web")]
mod page;
#[cfg(feature = "web")]
pub mod parse;
#[cfg(feature = "web")]
pub mod search;
pub mod ssrf;

pub use fetch::{FetchSettings, WebFetch};
#[cfg(feature = "web")]
pub use page::{DEFAULT_MAX_CHARS, WebFetchArgs};
#[cfg(feature = "web")]
pub use search::{SearchResult, WebSearch};

#[cfg(feature = "web")]
use std::time::Duration;

use super::ToolRegistry;
use crate::config::WebToolsConfig;

/// How the web tools introduce themselves to servers.
pub const USER_AGENT: &str = concat!("Ferry/", env!("CARGO_PKG_VERSION"));

/// Why the web tools could not be built. Start-up fails with it: a configured tool that
/// silently went missing would be worse.
#[derive(Debug, thiserror::Error)]
pub enum WebToolsError {
    #[error("could not build the web tools' HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    #[error("tools.web.search.url is required for this provider")]
    MissingSearchUrl,
    #[error("tools.web.search.url {url:?} is not a URL: {reason}")]
    SearchUrl { url: String, reason: String },
    #[error("tools.web.search.api_key is required for provider = \"brave\" (or set BRAVE_API_KEY)")]
    MissingBraveKey,
}

/// Adds `web_fetch`, and `web_search` when `[tools.web.search]` names a provider, to
/// `registry`, with the limits of `config`.
#[cfg(feature = "web")]
pub fn register(registry: &mut ToolRegistry, config: &WebToolsConfig) -> Result<(), WebToolsError> {
    registry.register(WebFetch::new(FetchSettings::from_config(config))?);
    if let Some(search) = &config.search {
        registry.register(WebSearch::from_config(search, Duration::from_secs(config.timeout_seconds))?);
    }
    Ok(())
}

/// A build without the `web` feature has no web tools to add (`config::features` warns when
/// the config would offer them, and refuses `[tools.web.search]`).
#[cfg(not(feature = "web"))]
pub fn register(_registry: &mut ToolRegistry, _config: &WebToolsConfig) -> Result<(), WebToolsError> {
    Ok(())
}

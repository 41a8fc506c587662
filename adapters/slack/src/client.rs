//! The slack-morphism Web API client, on a rustls connector that is https-only unless the
//! API is on this machine.
//!
//! `SlackClientHyperConnector::new()` refuses plain `http`, which tests against a local fake
//! need; allowing `http` everywhere would let a typo send the bot token in clear text. So the
//! connector is built here: `https_or_http()` only when `api_url`'s host is a loopback
//! address, `https_only()` otherwise.

use hyper_util::client::legacy::connect::HttpConnector;
use slack_morphism::SlackClient;
use slack_morphism::hyper_tokio::{SlackClientHyperConnector, SlackClientHyperHttpsConnector};
use url::{Host, Url};

use crate::error::SlackError;

/// The Web API client type used throughout the adapter.
pub(crate) type Client = SlackClient<SlackClientHyperHttpsConnector>;

/// Builds the client for `api_url` (e.g. `https://slack.com/api`).
pub(crate) fn build(api_url: &str) -> Result<Client, SlackError> {
    let api_url = api_url.trim_end_matches('/');
    let url = Url::parse(api_url).map_err(|error| SlackError::InvalidConfig {
        reason: format!("channels.slack.api_url {api_url:?} is not a URL: {error}"),
    })?;
    let loopback = is_loopback(&url);
    match url.scheme() {
        "https" => {}
        "http" if loopback => {}
        scheme => {
            return Err(SlackError::InvalidConfig {
                reason: format!(
                    "channels.slack.api_url must use https (plain {scheme} is allowed only for a loopback host)"
                ),
            });
        }
    }
    let builder = hyper_rustls::HttpsConnectorBuilder::new().with_native_roots().map_err(|error| {
        SlackError::InvalidConfig { reason: format!("cannot load the system's TLS root certificates: {error}") }
    })?;
    let builder = if loopback { builder.https_or_http() } else { builder.https_only() };
    // Small JSON requests on kept-alive connections: without TCP_NODELAY, Nagle's algorithm
    // meets the server's delayed ACK and a send can sit ~40 ms in the kernel.
    let mut tcp = HttpConnector::new();
    tcp.set_nodelay(true);
    tcp.enforce_http(false);
    let connector = builder.enable_all_versions().wrap_connector(tcp);
    Ok(SlackClient::new(SlackClientHyperConnector::with_connector(connector).with_slack_api_url(api_url)))
}

fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(Host::Ipv4(ip)) => ip.is_loopback(),
        Some(Host::Ipv6(ip)) => ip.is_loopback(),
        Some(Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_is_allowed_only_on_loopback() {
        assert!(build("https://slack.com/api").is_ok());
        assert!(build("http://127.0.0.1:4000/api").is_ok());
        assert!(build("http://localhost:4000/api/").is_ok());
        assert!(build("http://[::1]:4000/api").is_ok());
        for refused in ["http://slack.com/api", "http://10.0.0.1/api", "ftp://127.0.0.1/api", "not a url"] {
            assert!(matches!(build(refused), Err(SlackError::InvalidConfig { .. })), "{refused}");
        }
    }
}

//! Which hosts are Slack's, so the bot token (and the users' files) go nowhere else.
//!
//! A file URL comes from an event, and an upload URL from a Web API answer; the adapter
//! sends the bot token with a download, so it must not follow a URL to a host that is not
//! Slack's, however the URL got there. The family is derived from `channels.slack.api_url`:
//!
//! - on Slack itself (`https://slack.com/api`, or GovSlack's `slack-gov.com`), the family is
//!   that root domain and its subdomains over https: `files.slack.com` serves files and
//!   upload URLs;
//! - anywhere else (a fake in tests, a proxy), exactly the API's origin: same scheme, host
//!   and port.

use url::{Host, Url};

/// Slack's root domains: the public service and GovSlack.
const SLACK_ROOTS: [&str; 2] = ["slack.com", "slack-gov.com"];

/// The hosts the adapter trusts with the bot token. See the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlackHosts {
    scheme: String,
    host: String,
    port: Option<u16>,
    /// `host` is a Slack root domain: its subdomains are Slack's too.
    subdomains: bool,
}

impl SlackHosts {
    /// The family of `api_url` (already validated by [`crate::client::build`]).
    pub(crate) fn of(api_url: &Url) -> Self {
        let host = api_url.host_str().unwrap_or_default().to_ascii_lowercase();
        let root = SLACK_ROOTS.iter().find(|root| host == **root || host.ends_with(&format!(".{root}")));
        match root {
            Some(root) if api_url.scheme() == "https" => {
                Self { scheme: "https".to_owned(), host: (*root).to_owned(), port: Some(443), subdomains: true }
            }
            _ => Self {
                scheme: api_url.scheme().to_owned(),
                host,
                port: api_url.port_or_known_default(),
                subdomains: false,
            },
        }
    }

    /// Whether `url` is on one of Slack's hosts.
    pub(crate) fn contains(&self, url: &Url) -> bool {
        let Some(host) = url.host_str().map(str::to_ascii_lowercase) else { return false };
        let same_host = host == self.host || (self.subdomains && host.ends_with(&format!(".{}", self.host)));
        url.scheme() == self.scheme && url.port_or_known_default() == self.port && same_host
    }

    /// Whether the family is a loopback API (tests): plain `http` redirects are followed.
    pub(crate) fn is_loopback(&self) -> bool {
        match Host::parse(&self.host) {
            Ok(Host::Ipv4(ip)) => ip.is_loopback(),
            Ok(Host::Ipv6(ip)) => ip.is_loopback(),
            Ok(Host::Domain(name)) => name == "localhost",
            Err(_) => self.host.trim_matches(['[', ']']).parse::<std::net::Ipv6Addr>().is_ok_and(|ip| ip.is_loopback()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(api_url: &str) -> SlackHosts {
        SlackHosts::of(&Url::parse(api_url).unwrap())
    }

    fn allows(hosts: &SlackHosts, url: &str) -> bool {
        hosts.contains(&Url::parse(url).unwrap())
    }

    #[test]
    fn on_slack_the_token_goes_to_slacks_file_hosts_only() {
        let slack = hosts("https://slack.com/api");
        assert!(allows(&slack, "https://files.slack.com/files-pri/T1-F1/download/a.png"));
        assert!(allows(&slack, "https://FILES.slack.com/files-pri/T1-F1/a.png"));
        for refused in [
            "http://files.slack.com/files-pri/T1-F1/a.png",
            "https://files.slack.com:8443/files-pri/T1-F1/a.png",
            "https://files.slack.com.evil.example/a.png",
            "https://evilslack.com/a.png",
            "https://example.com/a.png",
        ] {
            assert!(!allows(&slack, refused), "{refused}");
        }
        assert!(allows(&hosts("https://slack-gov.com/api"), "https://files.slack-gov.com/x"));
        assert!(!allows(&hosts("https://slack-gov.com/api"), "https://files.slack.com/x"));
    }

    #[test]
    fn off_slack_only_the_apis_own_origin_is_trusted() {
        let fake = hosts("http://127.0.0.1:4000/api");
        assert!(fake.is_loopback());
        assert!(allows(&fake, "http://127.0.0.1:4000/files-pri/T1-F1/a.png"));
        assert!(!allows(&fake, "http://127.0.0.1:4001/files-pri/T1-F1/a.png"));
        assert!(!allows(&fake, "http://localhost:4000/files-pri/T1-F1/a.png"));
        assert!(!allows(&fake, "https://files.slack.com/files-pri/T1-F1/a.png"));
        assert!(hosts("http://[::1]:4000/api").is_loopback());
        assert!(!hosts("https://slack.com/api").is_loopback());
    }
}

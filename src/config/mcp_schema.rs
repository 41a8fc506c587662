//! `[mcp.servers.NAME]`: the Model Context Protocol servers whose tools the agent is offered,
//! and the rules an entry must follow before Ferry tries to start it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::Secret;
use super::error::Violation;

/// The most characters a server name may have: its tools are offered as
/// `<server>__<tool>`, and providers accept tool names of 64 characters at most.
pub const MAX_SERVER_NAME_CHARS: usize = 24;

/// `[mcp]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// How long after the start runs wait for servers still connecting for the first time,
    /// so the messages answered right after a restart are offered their tools.
    pub startup_wait_seconds: u64,
    /// The servers, by the name their tools are offered under.
    pub servers: BTreeMap<String, McpServerConfig>,
}

impl Default for McpConfig {
    fn default() -> Self {
        Self { startup_wait_seconds: 10, servers: BTreeMap::new() }
    }
}

/// One server: a local program spoken to over stdio (`command`), or a remote one over
/// streamable HTTP (`url`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpServerConfig {
    /// The program to start (looked up on `PATH` when it has no `/`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// The program's whole environment besides `PATH` and `HOME`: nothing of Ferry's own
    /// (keys, tokens) reaches it unless listed here.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, Secret>,
    /// The directory it starts in; Ferry's own when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// A streamable HTTP endpoint, e.g. `https://mcp.example.com/mcp`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Headers sent with every request to `url`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, Secret>,
    /// Headers whose whole value comes from an environment variable, header → variable
    /// (`{ Authorization = "EXAMPLE_MCP_AUTH" }`), so a token need not be in the file.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers_env: BTreeMap<String, String>,
    /// Only these of the server's tools are offered (its own names; `*` matches anything).
    /// Empty: all of them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// These of the server's tools are never offered; a deny wins over an allow.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
    /// Seconds one tool call may take before the model is told it timed out.
    pub timeout: u64,
}

impl Default for McpServerConfig {
    fn default() -> Self {
        Self {
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
            url: None,
            headers: BTreeMap::new(),
            headers_env: BTreeMap::new(),
            allow: Vec::new(),
            deny: Vec::new(),
            timeout: 60,
        }
    }
}

impl McpServerConfig {
    /// Whether the server's tool `tool` (its own name) may be offered: `allow` (if any)
    /// names it and `deny` does not.
    pub fn offers(&self, tool: &str) -> bool {
        let listed = |patterns: &[String]| patterns.iter().any(|pattern| glob_matches(pattern, tool));
        (self.allow.is_empty() || listed(&self.allow)) && !listed(&self.deny)
    }
}

/// Whether `text` matches `pattern`, where `*` stands for any run of characters.
pub(crate) fn glob_matches(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else { return false };
    let mut parts: Vec<&str> = parts.collect();
    let Some(last) = parts.pop() else { return rest.is_empty() };
    for part in parts {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// Whether `name` may name a server: letters, digits, `-` and single `_`, at most
/// [`MAX_SERVER_NAME_CHARS`]. `__` is the separator of `<server>__<tool>`.
pub fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_SERVER_NAME_CHARS
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && !name.contains("__")
        && !name.starts_with('_')
        && !name.ends_with('_')
}

/// Every server entry is one a connection can be tried with: a valid name, exactly one of
/// `command` and `url`, a URL that parses, and no key of the other transport.
pub(super) fn validate(mcp: &McpConfig) -> Result<(), Violation> {
    let mut seen: BTreeMap<String, &str> = BTreeMap::new();
    for (name, server) in &mcp.servers {
        let key = format!("mcp.servers.{name}");
        if !valid_server_name(name) {
            return Err(Violation::new(
                key,
                format!(
                    "{name:?} cannot name a server: use letters, digits, `-` and single `_` (not `__`, which \
                     separates server and tool in `<server>__<tool>`), at most {MAX_SERVER_NAME_CHARS} characters"
                ),
            ));
        }
        if let Some(other) = seen.insert(name.to_ascii_lowercase(), name) {
            return Err(Violation::new(
                key,
                format!("collides with server {other:?}: tool names would differ only in case"),
            ));
        }
        server_entry(&key, server)?;
    }
    Ok(())
}

fn server_entry(key: &str, server: &McpServerConfig) -> Result<(), Violation> {
    match (&server.command, &server.url) {
        (None, None) => {
            return Err(Violation::new(
                key,
                "needs `command` (a local server spoken to over stdio) or `url` (a streamable HTTP endpoint)",
            ));
        }
        (Some(_), Some(_)) => {
            return Err(Violation::new(
                key,
                "has both `command` and `url`: a server is either local (stdio) or remote (streamable HTTP)",
            ));
        }
        (Some(command), None) => {
            if command.trim().is_empty() {
                return Err(Violation::new(format!("{key}.command"), "is empty; name the program to start"));
            }
            let http_keys = [("headers", server.headers.is_empty()), ("headers_env", server.headers_env.is_empty())];
            if let Some((name, _)) = http_keys.iter().find(|(_, empty)| !empty) {
                return Err(Violation::new(format!("{key}.{name}"), "applies to `url` servers only"));
            }
        }
        (None, Some(url)) => {
            let parsed = url::Url::parse(url)
                .map_err(|error| Violation::new(format!("{key}.url"), format!("{url:?} is not a URL: {error}")))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(Violation::new(
                    format!("{key}.url"),
                    format!("{url:?} must be an http:// or https:// URL"),
                ));
            }
            let stdio_keys =
                [("args", server.args.is_empty()), ("env", server.env.is_empty()), ("cwd", server.cwd.is_none())];
            if let Some((name, _)) = stdio_keys.iter().find(|(_, empty)| !empty) {
                return Err(Violation::new(format!("{key}.{name}"), "applies to `command` servers only"));
            }
            for header in server.headers.keys().chain(server.headers_env.keys()) {
                if reqwest::header::HeaderName::from_bytes(header.as_bytes()).is_err() {
                    return Err(Violation::new(format!("{key}.headers"), format!("{header:?} is not a header name")));
                }
            }
        }
    }
    for (list, patterns) in [("allow", &server.allow), ("deny", &server.deny)] {
        if patterns.iter().any(|pattern| pattern.trim().is_empty()) {
            return Err(Violation::new(format!("{key}.{list}"), "has an empty entry; name a tool of the server"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdio() -> McpServerConfig {
        McpServerConfig { command: Some("npx".into()), ..Default::default() }
    }

    fn check(name: &str, server: McpServerConfig) -> Result<(), Violation> {
        validate(&McpConfig { servers: BTreeMap::from([(name.to_owned(), server)]), ..McpConfig::default() })
    }

    #[test]
    fn names_must_fit_the_tool_name_scheme() {
        for good in ["github", "my-db", "fs_2"] {
            assert!(valid_server_name(good), "{good}");
        }
        for bad in ["", "a__b", "_x", "x_", "has space", "ü", &"x".repeat(MAX_SERVER_NAME_CHARS + 1)] {
            assert!(!valid_server_name(bad), "{bad:?}");
            assert!(check(bad, stdio()).unwrap_err().reason.contains("cannot name a server"));
        }
        let servers = BTreeMap::from([("Git".to_owned(), stdio()), ("git".to_owned(), stdio())]);
        let error = validate(&McpConfig { servers, ..McpConfig::default() }).unwrap_err();
        assert_eq!(error.key, "mcp.servers.git");
        assert!(error.reason.contains("collides with server \"Git\""), "{}", error.reason);
    }

    #[test]
    fn a_server_is_either_local_or_remote() {
        assert_eq!(check("a", stdio()), Ok(()));
        let http = McpServerConfig { url: Some("https://mcp.example.com/mcp".into()), ..Default::default() };
        assert_eq!(check("a", http.clone()), Ok(()));
        assert!(check("a", McpServerConfig::default()).unwrap_err().reason.contains("needs `command`"));
        let both = McpServerConfig { url: http.url.clone(), ..stdio() };
        assert!(check("a", both).unwrap_err().reason.contains("both"));
        let bad_url = McpServerConfig { url: Some("mcp.example.com".into()), ..Default::default() };
        assert_eq!(check("a", bad_url).unwrap_err().key, "mcp.servers.a.url");
        let ftp = McpServerConfig { url: Some("ftp://example.com/".into()), ..Default::default() };
        assert!(check("a", ftp).unwrap_err().reason.contains("http://"));
        let headers_on_stdio =
            McpServerConfig { headers_env: BTreeMap::from([("X-Key".into(), "K".into())]), ..stdio() };
        assert_eq!(check("a", headers_on_stdio).unwrap_err().key, "mcp.servers.a.headers_env");
        let args_on_http = McpServerConfig { args: vec!["x".into()], ..http.clone() };
        assert_eq!(check("a", args_on_http).unwrap_err().key, "mcp.servers.a.args");
        let bad_header = McpServerConfig { headers: BTreeMap::from([("Bad Header".into(), Secret::new("v"))]), ..http };
        assert!(check("a", bad_header).unwrap_err().reason.contains("not a header name"));
    }

    #[test]
    fn allow_and_deny_pick_the_offered_tools() {
        let all = stdio();
        assert!(all.offers("anything"));
        let some =
            McpServerConfig { allow: vec!["get_*".into(), "echo".into()], deny: vec!["get_secret".into()], ..stdio() };
        assert!(some.offers("echo") && some.offers("get_file") && some.offers("get_"));
        assert!(!some.offers("get_secret") && !some.offers("echoes") && !some.offers("put_file"));
        assert!(glob_matches("*", "") && glob_matches("a*b*c", "aXbYc") && !glob_matches("a*b*c", "aXcYb"));
        assert!(!glob_matches("ab*ba", "aba"), "the prefix and suffix may not overlap");
    }
}

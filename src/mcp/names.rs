//! The names MCP tools are offered under: `<server>__<tool>`, in the characters and length
//! every provider accepts (`^[A-Za-z0-9_-]{1,64}$`, OpenAI's rule and the strictest). A
//! server may name its tools anything; the name it gave is kept to call it by.

use std::collections::BTreeMap;

use crate::agent::tools::MCP_SEPARATOR;

/// The longest tool name providers accept.
pub const MAX_TOOL_NAME_CHARS: usize = 64;

/// The name `tool` of `server` is offered under. Characters providers refuse become `_`; a
/// name that is too long, or that another of the server's tools already took, is shortened
/// and given a checksum of the original, so it stays the same from one listing to the next.
pub fn offered_name<T>(server: &str, tool: &str, taken: &BTreeMap<String, T>) -> String {
    let cleaned: String =
        tool.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect();
    let cleaned = if cleaned.is_empty() { "tool".to_owned() } else { cleaned };
    let plain = format!("{server}{MCP_SEPARATOR}{cleaned}");
    if plain.len() <= MAX_TOOL_NAME_CHARS && !taken.contains_key(&plain) {
        return plain;
    }
    let suffix = format!("_{:08x}", crc32fast::hash(tool.as_bytes()));
    let room = MAX_TOOL_NAME_CHARS - server.len() - MCP_SEPARATOR.len() - suffix.len();
    let kept: String = cleaned.chars().take(room).collect();
    format!("{server}{MCP_SEPARATOR}{kept}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_to_what_providers_accept() {
        let none = BTreeMap::<String, ()>::new();
        assert_eq!(offered_name("github", "create_issue", &none), "github__create_issue");
        assert_eq!(offered_name("db", "run.query/v2", &none), "db__run_query_v2");
        assert_eq!(offered_name("db", "", &none), "db__tool");
        let long = "x".repeat(100);
        let name = offered_name("everything", &long, &none);
        assert_eq!(name.len(), MAX_TOOL_NAME_CHARS);
        assert!(name.starts_with("everything__xxx"), "{name}");
        assert_eq!(name, offered_name("everything", &long, &none), "stable from one listing to the next");
        assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'));
    }

    #[test]
    fn two_tools_never_share_a_name() {
        let taken = BTreeMap::from([("db__a_b".to_owned(), "a.b".to_owned())]);
        let second = offered_name("db", "a/b", &taken);
        assert_ne!(second, "db__a_b");
        assert!(second.starts_with("db__a_b_"), "{second}");
    }
}

//! Verbose mode (`/verbose on`, SPEC §7 step 7): one line per tool call in the reply, so a
//! user can see what the agent did on their behalf — `🔧 current_time`,
//! `🔧 message — text: hi, to: 42`, `🔧 read_file — path: notes.md (failed)`.
//!
//! A line is made when the call's result arrives (it says whether the call failed). Tool
//! arguments are the model's text, so they are escaped: a `*` in a file name must not turn
//! the rest of the line bold.

use std::collections::HashMap;

use serde_json::Value;

use crate::agent::ToolEvent;

/// Longest arguments excerpt on a summary line.
const ARGS_CHARS: usize = 120;

/// Tracks a run's tool calls from their start events to their results.
#[derive(Debug, Default)]
pub struct ToolSummaries {
    /// Arguments of calls that started and have not finished, by call id.
    started: HashMap<String, Value>,
}

impl ToolSummaries {
    /// The summary line of the call `event` finished, if it finished one.
    pub fn observe(&mut self, event: &ToolEvent) -> Option<String> {
        match event {
            ToolEvent::Start { tool_call_id, args, .. } => {
                self.started.insert(tool_call_id.clone(), args.clone());
                None
            }
            ToolEvent::Update { .. } => None,
            ToolEvent::Result { name, tool_call_id, is_error, .. } => {
                let args = self.started.remove(tool_call_id).unwrap_or(Value::Null);
                Some(summary_line(name, &args, *is_error))
            }
        }
    }
}

/// `🔧 <name> — <key: value, …>`, with ` (failed)` when the call failed. Markdown-escaped.
pub fn summary_line(name: &str, args: &Value, failed: bool) -> String {
    let mut line = format!("🔧 {}", escape_markdown(name));
    let args = describe_args(args);
    if !args.is_empty() {
        line.push_str(" — ");
        line.push_str(&escape_markdown(&args));
    }
    if failed {
        line.push_str(" (failed)");
    }
    line
}

/// The arguments on one line: an object's fields as `key: value`, whitespace collapsed,
/// cut at [`ARGS_CHARS`] with an ellipsis.
fn describe_args(args: &Value) -> String {
    let text = match args {
        Value::Null => String::new(),
        Value::Object(fields) => {
            fields.iter().map(|(key, value)| format!("{key}: {}", scalar(value))).collect::<Vec<_>>().join(", ")
        }
        other => scalar(other),
    };
    let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.chars().count() <= ARGS_CHARS {
        return collapsed;
    }
    let mut cut: String = collapsed.chars().take(ARGS_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// A string as it is (no quotes), anything else as compact JSON.
fn scalar(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Characters that can start or end markup (emphasis, code, links, HTML, entities, tables).
const MARKUP_CHARS: &[char] = &['\\', '*', '_', '`', '[', ']', '<', '>', '~', '|', '&', '#'];

/// `text` with markup characters backslash-escaped, so markdown rendering shows it as
/// written (CommonMark allows escaping any ASCII punctuation).
fn escape_markdown(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if MARKUP_CHARS.contains(&c) {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::reply::format;
    use ferry_channel::MarkupDialect;

    fn start(id: &str, name: &str, args: Value) -> ToolEvent {
        ToolEvent::Start { name: name.into(), tool_call_id: id.into(), args }
    }

    fn result(id: &str, name: &str, is_error: bool) -> ToolEvent {
        ToolEvent::Result { name: name.into(), tool_call_id: id.into(), is_error, result: String::new() }
    }

    #[test]
    fn a_line_is_made_when_each_call_finishes_with_its_own_arguments() {
        let mut summaries = ToolSummaries::default();
        assert_eq!(summaries.observe(&start("a", "current_time", json!({}))), None);
        assert_eq!(summaries.observe(&start("b", "message", json!({"text": "hi  there\nyou", "to": 42}))), None);
        assert_eq!(
            summaries.observe(&result("b", "message", true)).as_deref(),
            Some("🔧 message — text: hi there you, to: 42 (failed)")
        );
        assert_eq!(summaries.observe(&result("a", "current_time", false)).as_deref(), Some("🔧 current\\_time"));
    }

    #[test]
    fn long_arguments_are_cut_and_markup_in_them_stays_literal() {
        let line = summary_line("read", &json!({"path": "*notes*.md", "pad": "x".repeat(300)}), false);
        assert!(line.chars().count() < 160, "{line}");
        assert!(line.ends_with('…'), "{line}");
        assert_eq!(
            format::render(
                &summary_line("read", &json!({"path": "*notes* <b>.md"}), false),
                MarkupDialect::TelegramHtml
            ),
            "🔧 read — path: *notes* &lt;b&gt;.md"
        );
    }
}

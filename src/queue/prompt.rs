//! The prompts of follow-up runs: batched queued messages and the overflow summary
//! (SPEC §5, formats exact).

use super::journal::QueuedMessage;

/// A dropped message's summary is cut to this many characters.
pub const SUMMARY_LINE_LIMIT: usize = 160;

/// One line standing for a message dropped under `drop = "summarize"`: whitespace
/// collapsed, at most [`SUMMARY_LINE_LIMIT`] characters.
pub fn summary_line(text: &str) -> String {
    let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match collapsed.char_indices().nth(SUMMARY_LINE_LIMIT - 1) {
        Some((cut, _)) if collapsed.chars().count() > SUMMARY_LINE_LIMIT => format!("{}…", &collapsed[..cut]),
        _ => collapsed,
    }
}

/// The prompt of a follow-up run answering `batch`, with the summaries of messages the
/// queue dropped since the last run prepended.
pub fn follow_up_prompt(batch: &[QueuedMessage], dropped_summaries: &[String]) -> String {
    let mut prompt = String::new();
    if !dropped_summaries.is_empty() {
        prompt.push_str(&format!(
            "[Queue overflow] Dropped {} message(s) due to cap.\nSummary:\n",
            dropped_summaries.len()
        ));
        for line in dropped_summaries {
            prompt.push_str(&format!("- {line}\n"));
        }
        prompt.push('\n');
    }
    match batch {
        [single] => prompt.push_str(&single.prompt),
        items => {
            prompt.push_str("[Queued messages while agent was busy]");
            for (index, item) in items.iter().enumerate() {
                prompt.push_str(&format!("\n---\nQueued #{}\n{}", index + 1, item.prompt));
            }
        }
    }
    prompt
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use ferry_channel::{ChatKind, ChatRef, InboundMessage, Sender};

    use super::*;

    fn item(prompt: &str) -> QueuedMessage {
        QueuedMessage {
            id: 1,
            session_key: "k".into(),
            message: InboundMessage::new(
                "memory",
                "default",
                ChatRef::new(ChatKind::Direct, "a"),
                Sender::user("a"),
                "1",
                prompt,
            ),
            prompt: prompt.into(),
            enqueued_at: Utc::now(),
        }
    }

    #[test]
    fn several_messages_are_numbered_in_the_collect_format() {
        let prompt = follow_up_prompt(&[item("one"), item("two"), item("three")], &[]);
        assert_eq!(
            prompt,
            "[Queued messages while agent was busy]\n---\nQueued #1\none\n---\nQueued #2\ntwo\n---\nQueued #3\nthree"
        );
        assert_eq!(follow_up_prompt(&[item("alone")], &[]), "alone");
    }

    #[test]
    fn dropped_messages_are_summarized_first() {
        let prompt = follow_up_prompt(&[item("latest")], &["first".into(), "second".into()]);
        assert_eq!(prompt, "[Queue overflow] Dropped 2 message(s) due to cap.\nSummary:\n- first\n- second\n\nlatest");
    }

    #[test]
    fn summary_lines_collapse_whitespace_and_stay_short() {
        assert_eq!(summary_line("  a\n\n b\tc "), "a b c");
        let long = summary_line(&"word ".repeat(100));
        assert_eq!(long.chars().count(), SUMMARY_LINE_LIMIT);
        assert!(long.ends_with('…'));
        assert_eq!(summary_line(&"x".repeat(160)).chars().count(), 160);
    }
}

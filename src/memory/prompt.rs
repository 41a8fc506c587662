//! What memory puts into a run's system prompt: the scope's `MEMORY.md` within
//! `memory.prompt_bytes`, and with `memory.recall` the few passages that best match the
//! message, marked as recollections. Only ever in a private scope: a person's memory is
//! never shown in a group, and a group's is searched on demand, not pushed.

use super::AgentMemory;
use super::paths::LONG_TERM;
use super::scope::is_private;
use super::search::Found;
use crate::state::memory::MemoryScope;

/// Passages recall adds at most.
const RECALLED: usize = 3;

impl AgentMemory {
    /// The memory sections of the system prompt for a run in `scope` answering `message`;
    /// `None` when there is nothing to add. A store that cannot be read adds nothing (the
    /// run goes on without it), with a warning.
    pub async fn prompt_sections(&self, scope: &MemoryScope, message: &str) -> Option<String> {
        if !is_private(&scope.scope) {
            return None;
        }
        let config = self.memory.config();
        let mut sections = Vec::new();
        match self.memory.read(scope, LONG_TERM, None, None).await {
            Ok(text) => sections.extend(long_term_section(&text, config.prompt_bytes as usize)),
            Err(error) => tracing::warn!(%error, "MEMORY.md could not be read for the prompt"),
        }
        if config.recall && !message.trim().is_empty() {
            let found = self.memory.search(scope, message, RECALLED, 0.0, self.embedder.as_ref(), self.today()).await;
            match found {
                Ok(found) => sections.extend(recall_section(&found, config.recall_bytes as usize)),
                Err(error) => tracing::warn!(%error, "memory recall failed; the run goes on without it"),
            }
        }
        (!sections.is_empty()).then(|| sections.join("\n\n"))
    }
}

/// `MEMORY.md` for the prompt, cut at a line boundary within `budget` bytes with a note
/// saying how much is left out; `None` when it is empty or the budget is 0.
pub fn long_term_section(text: &str, budget: usize) -> Option<String> {
    let text = text.trim();
    if text.is_empty() || budget == 0 {
        return None;
    }
    let mut section = String::from(
        "## Your long-term memory of this person (MEMORY.md)\nWhat you wrote down in earlier conversations; keep it \
         up to date with memory_write.\n\n",
    );
    if text.len() <= budget {
        section.push_str(text);
        return Some(section);
    }
    let shown = cut(text, budget);
    section.push_str(shown);
    section.push_str(&format!(
        "\n\n[MEMORY.md goes on: {} of its {} bytes are shown. Read the rest with memory_get, and keep it short.]",
        shown.len(),
        text.len()
    ));
    Some(section)
}

/// Recalled passages within `budget` bytes, marked as possibly out of date.
pub fn recall_section(found: &[Found], budget: usize) -> Option<String> {
    let mut section = String::from(
        "## Recollections\nPassages from your memory that may bear on this message. They are notes, not facts \
         about now: they may be out of date, and they are no record of what is scheduled (ask the cron tool).\n",
    );
    let mut used = 0;
    let mut any = false;
    for found in found {
        let room = budget.saturating_sub(used);
        if room == 0 {
            break;
        }
        let text = cut(found.snippet.trim(), room);
        if text.is_empty() {
            break;
        }
        used += text.len();
        any = true;
        section.push_str(&format!("\n- {} (lines {}-{}): {text}", found.path, found.start_line, found.end_line));
    }
    any.then_some(section)
}

/// The longest prefix of `text` within `budget` bytes ending at a line break when one is
/// in reach, else at a character boundary.
fn cut(text: &str, budget: usize) -> &str {
    if text.len() <= budget {
        return text;
    }
    let mut end = budget;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let head = &text[..end];
    match head.rfind('\n') {
        Some(line) if line > 0 => &head[..line],
        _ => head,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_md_is_cut_at_a_line_within_the_budget_with_a_note() {
        assert_eq!(long_term_section("  \n", 100), None);
        assert_eq!(long_term_section("likes tea", 0), None);
        let whole = long_term_section("likes tea\nlives in Lisbon", 100).unwrap();
        assert!(whole.ends_with("likes tea\nlives in Lisbon") && !whole.contains("goes on"), "{whole}");
        let text = "line one\nline two\nline three";
        let cut = long_term_section(text, 20).unwrap();
        assert!(cut.contains("line one\nline two\n\n[MEMORY.md goes on: 17 of its 28 bytes"), "{cut}");
        assert!(!cut.contains("line three"));
    }

    #[test]
    fn a_cut_never_splits_a_character() {
        assert_eq!(cut("ééé", 3), "é");
        assert_eq!(cut("日本語", 5), "日");
    }

    #[test]
    fn recollections_stay_within_their_budget_and_say_they_may_be_stale() {
        let found = |path: &str, text: &str| Found {
            path: path.into(),
            start_line: 1,
            end_line: 2,
            snippet: text.into(),
            score: 1.0,
        };
        assert_eq!(recall_section(&[], 100), None);
        let many = [found("MEMORY.md", &"a".repeat(60)), found("memory/x.md", &"b".repeat(60))];
        let section = recall_section(&many, 100).unwrap();
        assert!(section.contains("may be out of date"), "{section}");
        assert!(section.contains(&"a".repeat(60)) && section.contains(&"b".repeat(40)));
        assert!(!section.contains(&"b".repeat(41)), "the budget holds: {section}");
    }
}

//! The system prompt: Ferry's base instructions, the skills list, the workspace's
//! bootstrap files and per-run additions (SPEC §6.2).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::change_cache::ChangeCache;
use super::skills::SkillsSnapshot;

/// Files read from the agent workspace into every prompt, in this order.
pub const BOOTSTRAP_FILES: [&str; 5] = ["AGENTS.md", "SOUL.md", "TOOLS.md", "IDENTITY.md", "USER.md"];
/// A bootstrap file longer than this is cut.
pub const BOOTSTRAP_FILE_LIMIT: usize = 20_000;
/// All bootstrap files together are cut at this many characters.
pub const BOOTSTRAP_TOTAL_LIMIT: usize = 150_000;

/// The reply that tells Ferry to send nothing (SPEC §7).
pub const SILENT_TOKEN: &str = "NO_REPLY";

const BASE_PROMPT: &str = "You are an assistant that people talk to through chat apps (Telegram, Discord, Slack or a \
web chat), running inside Ferry.

- Answer in the language you are addressed in. Keep replies conversational and to the point; light Markdown is fine, \
it is converted for each app.
- In group chats several people talk. When a message needs no answer from you, reply with exactly NO_REPLY and \
nothing else: nothing will be sent.
- The `message` tool sends a separate chat message. Do not repeat in your reply what you already sent with it.";

/// A bootstrap file as it goes into the prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapFile {
    pub name: String,
    pub content: String,
    /// Characters left out by the per-file or total cap.
    pub omitted_chars: usize,
}

/// Reads those of `names` that exist in `workspace` (normally [`BOOTSTRAP_FILES`]; hooks
/// may change the list), applying the caps. A file that cannot be read is logged and left
/// out; the run goes on.
pub fn load_bootstrap_files<S: AsRef<str>>(workspace: &Path, names: &[S]) -> Vec<BootstrapFile> {
    let mut files = Vec::new();
    let mut budget = BOOTSTRAP_TOTAL_LIMIT;
    for name in names.iter().map(AsRef::as_ref) {
        let path = workspace.join(name);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "cannot read a bootstrap file; leaving it out of the prompt");
                continue;
            }
        };
        if budget == 0 {
            tracing::warn!(file = name, "bootstrap files exceed the total limit; leaving this one out");
            continue;
        }
        let limit = BOOTSTRAP_FILE_LIMIT.min(budget);
        let (content, omitted_chars) = cut(&text, limit);
        budget -= content.chars().count();
        files.push(BootstrapFile { name: name.to_owned(), content, omitted_chars });
    }
    files
}

/// The default bootstrap files of a workspace, re-read only when one of them is created,
/// deleted or modified — a run checks a few file timestamps instead of reading files.
pub struct BootstrapCache {
    workspace: PathBuf,
    /// Keyed by each default file's (modification time, size), `None` when absent.
    cache: ChangeCache<Vec<Option<(SystemTime, u64)>>, [BootstrapFile]>,
}

impl BootstrapCache {
    /// Checks the files at most once per [`RECHECK`](super::change_cache::RECHECK).
    pub fn new(workspace: &Path) -> Self {
        Self { workspace: workspace.to_owned(), cache: ChangeCache::default() }
    }

    /// Checks the files whenever their last check is `recheck` old (zero: every time).
    pub fn rechecked_every(workspace: &Path, recheck: Duration) -> Self {
        Self { workspace: workspace.to_owned(), cache: ChangeCache::rechecked_every(recheck) }
    }

    pub fn files(&self) -> Arc<[BootstrapFile]> {
        let fingerprint = || -> Vec<_> {
            BOOTSTRAP_FILES
                .iter()
                .map(|name| {
                    let meta = std::fs::metadata(self.workspace.join(name)).ok()?;
                    Some((meta.modified().ok()?, meta.len()))
                })
                .collect()
        };
        self.cache.get(fingerprint, |_| load_bootstrap_files(&self.workspace, &BOOTSTRAP_FILES).into())
    }
}

/// Assembles the system prompt.
pub fn system_prompt(skills: &SkillsSnapshot, files: &[BootstrapFile], extra: Option<&str>) -> String {
    let mut prompt = String::from(BASE_PROMPT);
    if !skills.is_empty() {
        prompt
            .push_str("\n\n## Skills\nRead a skill's full instructions with the `skill_read` tool before using it.\n");
        for skill in skills.skills() {
            prompt.push_str(&format!("- {}: {}\n", skill.name, skill.description));
        }
    }
    if !files.is_empty() {
        prompt.push_str("\n\n## Workspace files\n");
        for file in files {
            prompt.push_str(&format!("\n### {}\n{}\n", file.name, file.content.trim_end()));
            if file.omitted_chars > 0 {
                prompt.push_str(&format!(
                    "[…truncated: {} more characters of {} not shown]\n",
                    file.omitted_chars, file.name
                ));
            }
        }
    }
    if let Some(extra) = extra.map(str::trim).filter(|extra| !extra.is_empty()) {
        prompt.push_str("\n\n## Additional instructions\n");
        prompt.push_str(extra);
    }
    prompt
}

/// The first `limit` characters and how many were left out.
/// `system` with the section `old` (added to it earlier, `None` if none was) replaced by
/// `new`: in place when `old` is still there, else `new` is added at the end. A hook that
/// rewrote the prompt keeps its rewrite.
pub fn replace_section(system: &str, old: Option<&str>, new: Option<&str>) -> String {
    match old {
        Some(old) if system.contains(old) => system.replacen(old, new.unwrap_or_default(), 1),
        _ => match new {
            Some(new) => format!("{}\n\n{new}", system.trim_end()),
            None => system.to_owned(),
        },
    }
}

fn cut(text: &str, limit: usize) -> (String, usize) {
    match text.char_indices().nth(limit) {
        Some((byte, _)) => (text[..byte].to_owned(), text[byte..].chars().count()),
        None => (text.to_owned(), 0),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_section_is_replaced_where_it_was_or_added_at_the_end() {
        use super::replace_section;
        assert_eq!(
            replace_section("base\n\nold part\n\ntail", Some("old part"), Some("new part")),
            "base\n\nnew part\n\ntail"
        );
        assert_eq!(replace_section("base\n", None, Some("new part")), "base\n\nnew part");
        assert_eq!(replace_section("rewritten", Some("old part"), Some("new part")), "rewritten\n\nnew part");
        assert_eq!(replace_section("base", None, None), "base");
    }

    use super::*;

    #[test]
    fn bootstrap_files_are_read_in_order_and_capped() {
        let workspace = tempfile::tempdir().unwrap();
        std::fs::write(workspace.path().join("SOUL.md"), "Be kind.").unwrap();
        std::fs::write(workspace.path().join("AGENTS.md"), "x".repeat(BOOTSTRAP_FILE_LIMIT + 10)).unwrap();
        let files = load_bootstrap_files(workspace.path(), &BOOTSTRAP_FILES);
        assert_eq!(files.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(), ["AGENTS.md", "SOUL.md"]);
        assert_eq!(files[0].content.len(), BOOTSTRAP_FILE_LIMIT);
        assert_eq!(files[0].omitted_chars, 10);

        let prompt = system_prompt(&SkillsSnapshot::default(), &files, Some("Speak French."));
        assert!(prompt.contains("### SOUL.md\nBe kind."));
        assert!(prompt.contains("[…truncated: 10 more characters of AGENTS.md not shown]"));
        assert!(prompt.ends_with("## Additional instructions\nSpeak French."));
    }

    #[test]
    fn the_total_cap_applies_across_files() {
        let workspace = tempfile::tempdir().unwrap();
        let names: Vec<String> = (0..9).map(|i| format!("EXTRA{i}.md")).collect();
        for name in &names {
            std::fs::write(workspace.path().join(name), "y".repeat(BOOTSTRAP_FILE_LIMIT)).unwrap();
        }
        let files = load_bootstrap_files(workspace.path(), &names);
        let total: usize = files.iter().map(|f| f.content.len()).sum();
        assert_eq!(total, BOOTSTRAP_TOTAL_LIMIT);
        let last = files.last().unwrap();
        assert_eq!((last.content.len(), last.omitted_chars), (10_000, 10_000));
    }

    #[test]
    fn the_cache_rereads_a_file_only_when_it_changes() {
        let workspace = tempfile::tempdir().unwrap();
        let cache = BootstrapCache::rechecked_every(workspace.path(), Duration::ZERO);
        assert!(cache.files().is_empty());
        std::fs::write(workspace.path().join("USER.md"), "Name: Ada").unwrap();
        let first = cache.files();
        assert_eq!(first[0].content, "Name: Ada");
        assert!(Arc::ptr_eq(&first, &cache.files()));
        std::fs::write(workspace.path().join("USER.md"), "Name: Ada Lovelace").unwrap();
        assert_eq!(cache.files()[0].content, "Name: Ada Lovelace");
    }

    #[test]
    fn the_base_prompt_explains_the_silent_token() {
        assert!(system_prompt(&SkillsSnapshot::default(), &[], None).contains(SILENT_TOKEN));
    }
}

//! Skills: folders `<workspace>/skills/<name>/SKILL.md` whose front matter gives a `name`
//! and a `description` (SPEC §6.7).
//!
//! The system prompt lists each skill's name and description; the model reads a skill's
//! body with the `skill_read` tool when it needs it, so long instructions cost tokens only
//! when used. The list is read once and reused until a skill file changes.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::change_cache::ChangeCache;

/// The file that makes a folder a skill.
pub const SKILL_FILE: &str = "SKILL.md";

/// One skill as listed to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    pub path: PathBuf,
}

/// The skills available when a run started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkillsSnapshot {
    skills: Vec<Skill>,
}

impl SkillsSnapshot {
    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    pub fn skills(&self) -> &[Skill] {
        &self.skills
    }

    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|skill| skill.name == name)
    }
}

/// Reads the skills folder, re-reading only when a skill file was added, removed or changed.
pub struct SkillsCache {
    dir: PathBuf,
    /// Keyed by every skill file with its modification time.
    cache: ChangeCache<Vec<(PathBuf, Option<SystemTime>)>, SkillsSnapshot>,
}

impl SkillsCache {
    /// Skills under `<workspace>/skills`.
    pub fn new(workspace: &Path) -> Self {
        Self { dir: workspace.join("skills"), cache: ChangeCache::default() }
    }

    /// Skills under `<workspace>/skills`, looked at whenever the last look is `recheck` old
    /// (zero: every time).
    pub fn rechecked_every(workspace: &Path, recheck: Duration) -> Self {
        Self { dir: workspace.join("skills"), cache: ChangeCache::rechecked_every(recheck) }
    }

    pub fn snapshot(&self) -> Arc<SkillsSnapshot> {
        self.cache.get(|| self.fingerprint(), |files| Arc::new(read_skills(files)))
    }

    /// Every skill file with its modification time, in name order.
    fn fingerprint(&self) -> Vec<(PathBuf, Option<SystemTime>)> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        let mut files: Vec<_> = entries
            .filter_map(Result::ok)
            .map(|entry| entry.path().join(SKILL_FILE))
            .filter_map(|file| std::fs::metadata(&file).ok().map(|meta| (file, meta.modified().ok())))
            .collect();
        files.sort();
        files
    }
}

fn read_skills(files: &[(PathBuf, Option<SystemTime>)]) -> SkillsSnapshot {
    let mut skills = Vec::new();
    for (path, _) in files {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let folder = path.parent().and_then(Path::file_name).map(|n| n.to_string_lossy().into_owned());
                let (name, description) = front_matter(&text);
                let Some(name) = name.or(folder) else { continue };
                let description = description.unwrap_or_else(|| first_body_line(&text));
                if skills.iter().any(|skill: &Skill| skill.name == name) {
                    tracing::warn!(skill = %name, path = %path.display(), "two skills share a name; keeping the first");
                    continue;
                }
                skills.push(Skill { name, description, path: path.clone() });
            }
            Err(error) => tracing::warn!(path = %path.display(), %error, "cannot read a skill file; skipping it"),
        }
    }
    SkillsSnapshot { skills }
}

/// `name` and `description` from a `---`-delimited front matter of `key: value` lines.
fn front_matter(text: &str) -> (Option<String>, Option<String>) {
    let mut lines = text.lines();
    if lines.next().map(str::trim) != Some("---") {
        return (None, None);
    }
    let (mut name, mut description) = (None, None);
    for line in lines.take_while(|line| line.trim() != "---") {
        let Some((key, value)) = line.split_once(':') else { continue };
        let value = value.trim().trim_matches(|c| c == '"' || c == '\'').trim().to_owned();
        if value.is_empty() {
            continue;
        }
        match key.trim() {
            "name" => name = Some(value),
            "description" => description = Some(value),
            _ => {}
        }
    }
    (name, description)
}

/// The body without its front matter.
pub fn body(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("---") else { return text };
    match rest.find("\n---") {
        Some(end) => rest[end + 4..].trim_start_matches(['\r', '\n']),
        None => text,
    }
}

fn first_body_line(text: &str) -> String {
    body(text)
        .lines()
        .map(|line| line.trim().trim_start_matches('#').trim())
        .find(|line| !line.is_empty())
        .unwrap_or("")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_skill(workspace: &Path, folder: &str, text: &str) {
        let dir = workspace.join("skills").join(folder);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(SKILL_FILE), text).unwrap();
    }

    #[test]
    fn skills_are_read_from_front_matter_with_fallbacks() {
        let workspace = tempfile::tempdir().unwrap();
        write_skill(
            workspace.path(),
            "weather",
            "---\nname: weather\ndescription: \"Forecasts by city\"\n---\nCall the API.",
        );
        write_skill(workspace.path(), "notes", "# Keep notes\nWrite them down.");
        let snapshot = SkillsCache::new(workspace.path()).snapshot();
        let listed: Vec<_> = snapshot.skills().iter().map(|s| (s.name.as_str(), s.description.as_str())).collect();
        assert_eq!(listed, [("notes", "Keep notes"), ("weather", "Forecasts by city")]);
        assert_eq!(body("---\nname: x\n---\nCall the API."), "Call the API.");
    }

    #[test]
    fn the_snapshot_is_reused_until_a_skill_changes() {
        let workspace = tempfile::tempdir().unwrap();
        write_skill(workspace.path(), "a", "---\nname: a\ndescription: one\n---\n");
        let cache = SkillsCache::rechecked_every(workspace.path(), Duration::ZERO);
        let first = cache.snapshot();
        assert!(Arc::ptr_eq(&first, &cache.snapshot()));
        write_skill(workspace.path(), "b", "---\nname: b\ndescription: two\n---\n");
        let second = cache.snapshot();
        assert_eq!(second.skills().len(), 2);
    }

    #[test]
    fn no_skills_folder_means_no_skills() {
        let workspace = tempfile::tempdir().unwrap();
        assert!(SkillsCache::new(workspace.path()).snapshot().is_empty());
    }
}

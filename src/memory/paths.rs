//! Which documents memory may hold: `MEMORY.md` (long-term facts), `memory/YYYY-MM-DD.md`
//! (dated notes) and `memory/<name>.md`. Nothing else, so a model cannot write outside
//! memory, make a hidden file or nest folders it would never find again.

use chrono::NaiveDate;

/// The long-term document: what goes into a private conversation's system prompt.
pub const LONG_TERM: &str = "MEMORY.md";

/// The longest `<name>` in `memory/<name>.md`.
const MAX_NAME: usize = 64;

/// Why a path was refused, worded for the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a memory document: use MEMORY.md, memory/YYYY-MM-DD.md or memory/<name>.md (a name of letters, \
     digits, '-', '_' or '.', at most 64 characters)"
)]
pub struct PathError(pub String);

/// `path` as stored, or why it cannot be one: a leading `./` and surrounding space are
/// dropped, everything else must already be exact.
pub fn check(path: &str) -> Result<String, PathError> {
    let trimmed = path.trim();
    let trimmed = trimmed.strip_prefix("./").unwrap_or(trimmed);
    if trimmed == LONG_TERM {
        return Ok(LONG_TERM.to_owned());
    }
    let refused = || PathError(path.trim().chars().take(200).collect());
    let name = trimmed.strip_prefix("memory/").and_then(|rest| rest.strip_suffix(".md")).ok_or_else(refused)?;
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if name.is_empty()
        || name.len() > MAX_NAME
        || name.starts_with('.')
        || name.contains("..")
        || !name.chars().all(allowed)
    {
        return Err(refused());
    }
    Ok(trimmed.to_owned())
}

/// The dated note for `day`.
pub fn daily(day: NaiveDate) -> String {
    format!("memory/{}.md", day.format("%Y-%m-%d"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_kinds_of_document_are_accepted() {
        assert_eq!(check(" MEMORY.md ").unwrap(), "MEMORY.md");
        assert_eq!(check("./memory/2026-11-28.md").unwrap(), "memory/2026-11-28.md");
        assert_eq!(check("memory/projects_v2.md").unwrap(), "memory/projects_v2.md");
        assert_eq!(daily(NaiveDate::from_ymd_opt(2026, 1, 5).unwrap()), "memory/2026-01-05.md");
    }

    #[test]
    fn anything_else_is_refused_with_the_allowed_forms() {
        for path in [
            "",
            "memory.md",
            "notes.md",
            "/etc/passwd",
            "memory/../MEMORY.md",
            "memory/a/b.md",
            "memory/.hidden.md",
            "memory/.md",
            "memory/x.txt",
            "memory/x y.md",
            "memory/ü.md",
            "MEMORY.md/x",
            "../MEMORY.md",
        ] {
            let error = check(path).expect_err(path);
            assert!(error.to_string().contains("memory/<name>.md"), "{error}");
        }
        assert!(check(&format!("memory/{}.md", "a".repeat(65))).is_err());
        assert!(check(&format!("memory/{}.md", "a".repeat(64))).is_ok());
    }
}

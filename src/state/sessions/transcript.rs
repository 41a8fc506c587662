//! How transcripts are stored, whatever the backend: a row per entry (id, role, JSON
//! content), compaction entries among them, and the context a session's rows give the
//! model. The SQLite and PostgreSQL stores share this, so the two read and write the same
//! rows.

use super::{CompactionEntry, SessionOverrides, StoreError};
use crate::types::ChatMessage;

/// How the summary is marked in the context, so the model knows what it is.
pub const SUMMARY_HEADER: &str = "[Summary of the earlier conversation, compacted to fit the model's context]";

/// Whether `message` is a compaction summary.
pub fn is_summary(message: &ChatMessage) -> bool {
    matches!(message, ChatMessage::User { text, .. } if text.starts_with(SUMMARY_HEADER))
}

/// The summary as the model sees it in the context.
pub fn summary_message(summary: &str) -> ChatMessage {
    ChatMessage::user(format!("{SUMMARY_HEADER}\n\n{summary}"))
}

/// A fresh session id.
pub(crate) fn new_session_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The role column of an entry's row.
pub(crate) fn role_of(message: &ChatMessage) -> &'static str {
    match message {
        ChatMessage::User { .. } => "user",
        ChatMessage::Assistant { .. } => "assistant",
        ChatMessage::ToolResult { .. } => "tool_result",
    }
}

/// The role of a compaction entry's row (SQLite migration 0003 foresaw it: `role` is free
/// text).
pub(crate) const COMPACTION_ROLE: &str = "compaction";

/// A compaction row's content.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredCompaction {
    summary: String,
    /// The first entry the summary does not cover; `None`: it covers every earlier entry.
    first_kept_entry_id: Option<i64>,
    tokens_before: u64,
}

/// One transcript row: id, role, JSON content, and `T`: nothing, or the run that wrote it.
pub(crate) type Row<T = ()> = (i64, String, String, T);

/// The context a transcript gives the model, each entry with its row id: after the latest
/// compaction, its summary (no row of its own: `None`, and `T::default()`) then the entries
/// it did not cover, each with its row's `T`. `rows` are in id order.
pub(crate) fn context_entries<T: Default>(rows: Vec<Row<T>>) -> Result<Vec<(Option<i64>, T, ChatMessage)>, StoreError> {
    let latest = rows.iter().rposition(|(_, role, ..)| role == COMPACTION_ROLE);
    let mut context = Vec::new();
    let mut first_kept = i64::MIN;
    if let Some(index) = latest {
        let (id, _, content, _) = &rows[index];
        let compaction: StoredCompaction =
            serde_json::from_str(content).map_err(|e| StoreError::Corrupt(format!("compaction entry: {e}")))?;
        first_kept = compaction.first_kept_entry_id.unwrap_or(id + 1);
        context.push((None, T::default(), summary_message(&compaction.summary)));
    }
    for (id, role, content, extra) in rows {
        if id < first_kept || role == COMPACTION_ROLE {
            continue;
        }
        let entry =
            serde_json::from_str(&content).map_err(|e| StoreError::Corrupt(format!("transcript entry: {e}")))?;
        context.push((Some(id), extra, entry));
    }
    Ok(context)
}

/// The messages of [`context_entries`].
pub(crate) fn decode_transcript(rows: Vec<Row>) -> Result<Vec<ChatMessage>, StoreError> {
    Ok(context_entries(rows)?.into_iter().map(|(_, _, entry)| entry).collect())
}

/// Transcript entries as (role, JSON), encoded before any write so no lock or transaction is
/// held while encoding.
pub(crate) fn encode_entries(entries: &[ChatMessage]) -> Result<Vec<(&'static str, String)>, StoreError> {
    entries
        .iter()
        .map(|entry| Ok((role_of(entry), serde_json::to_string(entry)?)))
        .collect::<Result<Vec<_>, serde_json::Error>>()
        .map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// The content of the row that records `entry`, given the session's stored rows (in id
/// order). Refused if the context the compaction was chosen in (`context_len` entries) is
/// not the stored one: a compaction is only ever made by the run that owns the session.
pub(crate) fn compaction_content(
    rows: Vec<Row>,
    context_len: usize,
    entry: &CompactionEntry,
) -> Result<String, StoreError> {
    let context = context_entries(rows)?;
    if context.len() != context_len || entry.keep_from == 0 || entry.keep_from > context_len {
        return Err(StoreError::Corrupt(format!(
            "a compaction keeping entries from {} of {context_len} does not fit the stored context of {}",
            entry.keep_from,
            context.len()
        )));
    }
    let first_kept_entry_id = context.get(entry.keep_from).and_then(|(id, ..)| *id);
    let stored =
        StoredCompaction { summary: entry.summary.clone(), first_kept_entry_id, tokens_before: entry.tokens_before };
    serde_json::to_string(&stored).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// A session's stored overrides (JSON).
pub(crate) fn decode_overrides(json: &str) -> Result<SessionOverrides, StoreError> {
    serde_json::from_str(json).map_err(|e| StoreError::Corrupt(format!("overrides: {e}")))
}

/// [`decode_overrides`] for listing the sessions users changed: a value that does not
/// decode is logged and skipped, and default overrides are not listed.
pub(crate) fn overridden(rows: Vec<(String, String)>) -> Vec<(String, SessionOverrides)> {
    rows.into_iter()
        .filter_map(|(key, json)| match serde_json::from_str::<SessionOverrides>(&json) {
            Ok(overrides) => (overrides != SessionOverrides::default()).then_some((key, overrides)),
            Err(error) => {
                tracing::warn!(session_key = %key, %error, "a session's saved settings do not decode; using the defaults");
                None
            }
        })
        .collect()
}

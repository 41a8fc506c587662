//! Many users at once (issue 18): 200 DMs from 20 Telegram users, all sent at the same
//! moment, against the real `ferry gateway` binary and the fake Bot API with Telegram's
//! flood limits on (the offline echo provider as an instant model, which repeats the prompt,
//! so a reply shows which messages it answered).
//!
//! Reported for the default config (`session.dm_scope = "per-channel-peer"`) and for
//! `dm_scope = "main"` (every DM one session): the time until every chat was answered about
//! all of its own messages, replies per chat, 429s seen, and whether any chat was shown
//! another user's message. Run with `cargo bench --bench burst`; results go in BENCHMARKS.md.

#[path = "common/gateway.rs"]
mod gateway;

use std::collections::BTreeSet;
use std::time::Duration;

use ferry_fakes::FakeTelegram;
use tokio::time::Instant;

use gateway::BenchGateway;

const TOKEN: &str = "123456:BENCH-token";
const USERS: i64 = 20;
const PER_USER: usize = 10;

fn main() {
    gateway::bench_main(run);
}

async fn run() {
    for (label, session) in
        [("default (per-channel-peer)", ""), ("dm_scope = \"main\"", "[session]\ndm_scope = \"main\"\n")]
    {
        burst(label, session).await;
    }
}

/// The `u<user>m<n>` tokens in `text`.
fn tokens(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|word| {
            word.starts_with('u')
                && word[1..].split_once('m').is_some_and(|(u, n)| u.parse::<u32>().is_ok() && n.parse::<u32>().is_ok())
        })
        .map(str::to_owned)
        .collect()
}

async fn burst(label: &str, session: &str) {
    let telegram = FakeTelegram::start(TOKEN).await.expect("fake telegram");
    let _gateway = BenchGateway::start_with(&format!(
        "{session}\n[channels.telegram]\nenabled = true\nbot_token = \"{TOKEN}\"\napi_url = \"{}\"\n\
         dm_policy = \"open\"\nallow_from = [\"*\"]\n",
        telegram.url()
    ));
    tokio::time::timeout(Duration::from_secs(60), telegram.wait_for_arrivals("getUpdates", 1)).await.expect("polling");

    let started = Instant::now();
    for n in 0..PER_USER {
        for user in 1..=USERS {
            telegram.private_message(user, "Bench", &format!("question u{user}m{n}"));
        }
    }
    let named = |user: i64| -> BTreeSet<String> {
        telegram.messages_in(user).iter().flat_map(|message| tokens(&message.visible_text)).collect()
    };
    let own = |user: i64| -> BTreeSet<String> { (0..PER_USER).map(|n| format!("u{user}m{n}")).collect() };
    let all_answered = tokio::time::timeout(Duration::from_secs(600), async {
        while (1..=USERS).any(|user| !own(user).is_subset(&named(user))) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let elapsed = started.elapsed();
    // Late extras (a reply to the wrong chat would show up here).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let replies: Vec<usize> = (1..=USERS).map(|user| telegram.messages_in(user).len()).collect();
    let foreign = (1..=USERS).filter(|&user| !named(user).is_subset(&own(user))).count();
    println!(
        "{label}: {} DMs from {USERS} users; every chat answered about all its messages: {} after {:.2} s; \
         replies per chat min {} / mean {:.1} / max {}; 429s seen {}; chats shown another user's message {foreign}",
        USERS as usize * PER_USER,
        if all_answered.is_ok() { "yes" } else { "NO (gave up)" },
        elapsed.as_secs_f64(),
        replies.iter().min().copied().unwrap_or_default(),
        replies.iter().sum::<usize>() as f64 / replies.len() as f64,
        replies.iter().max().copied().unwrap_or_default(),
        telegram.rate_limited_count(),
    );
}

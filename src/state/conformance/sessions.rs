//! Sessions and transcripts: resets, the run fence, compaction, usage, overrides, listing.

use chrono::{DateTime, Local, TimeZone, Utc};

use super::{Harness, conformance};
use crate::config::{ResetConfig, ResetMode};
use crate::state::sessions::{
    CompactionEntry, ResetReason, SessionOverrides, StoreError, TranscriptSaved, summary_message,
};
use crate::types::{ChatMessage, Usage};

fn local(hour: u32, minute: u32, day: u32) -> DateTime<Utc> {
    Local.with_ymd_and_hms(2026, 11, day, hour, minute, 0).earliest().unwrap().with_timezone(&Utc)
}

const DAILY: ResetConfig = ResetConfig { mode: ResetMode::Daily, at_hour: 4, idle_minutes: 0 };

async fn the_daily_reset_at_04_00_starts_a_new_session_lazily(harness: &Harness) {
    let store = &harness.stores.sessions;
    let first = store.resolve("agent:main:main", local(23, 0, 21), &DAILY).await.unwrap();
    assert_eq!(first.started, Some(ResetReason::New));
    let same = store.resolve("agent:main:main", local(3, 59, 22), &DAILY).await.unwrap();
    assert_eq!((same.started, &same.session.session_id), (None, &first.session.session_id));
    let next = store.resolve("agent:main:main", local(4, 1, 22), &DAILY).await.unwrap();
    assert_eq!(next.started, Some(ResetReason::Daily));
    assert_ne!(next.session.session_id, first.session.session_id);
    assert_eq!(next.ended_session_id.as_deref(), Some(first.session.session_id.as_str()));
}

async fn open_and_close_run_do_resolve_fence_append_and_usage_in_one_write_each(harness: &Harness) {
    let store = &harness.stores.sessions;
    let opened = store.open_run("k", Utc::now(), &DAILY, "run-1").await.unwrap();
    assert_eq!(opened.resolved.started, Some(ResetReason::New));
    assert!(opened.history.unwrap().is_empty());
    let session_id = opened.resolved.session.session_id;
    let entries = [ChatMessage::user("hi"), ChatMessage::assistant("hello", vec![])];
    let usage = Usage { input_tokens: 3, output_tokens: 2 };
    assert_eq!(store.close_run("k", "run-1", &entries, usage).await.unwrap(), TranscriptSaved::Saved);

    // The next run opens with the conversation so far, oldest first.
    let second = store.open_run("k", Utc::now(), &DAILY, "run-2").await.unwrap();
    assert_eq!(second.resolved.session.session_id, session_id);
    assert_eq!(second.history.unwrap(), entries);
    // A run superseded by a reset keeps nothing, but its tokens are still counted.
    let reset = store.reset("k", Utc::now()).await.unwrap();
    assert_eq!(store.close_run("k", "run-2", &entries, usage).await.unwrap(), TranscriptSaved::Superseded);
    assert!(store.history(&reset.session.session_id).await.unwrap().is_empty());
    assert_eq!(store.get("k").await.unwrap().unwrap().usage, usage);
}

async fn the_transcript_is_the_context_with_the_run_that_wrote_each_entry(harness: &Harness) {
    let store = &harness.stores.sessions;
    let opened = store.open_run("k", Utc::now(), &DAILY, "run-1").await.unwrap();
    let session_id = opened.resolved.session.session_id;
    let answer = |text: &str| ChatMessage::assistant(text, vec![]);
    store.close_run("k", "run-1", &[ChatMessage::user("q1"), answer("a1")], Usage::default()).await.unwrap();
    store.open_run("k", Utc::now(), &DAILY, "run-2").await.unwrap();
    store.append("k", "run-2", &[ChatMessage::user("q2"), answer("a2")]).await.unwrap();
    let entry = CompactionEntry { summary: "q1".into(), keep_from: 2, tokens_before: 40 };
    store.compact("k", "run-2", 4, &entry).await.unwrap();

    let transcript = store.transcript(&session_id).await.unwrap();
    let runs: Vec<Option<&str>> = transcript.iter().map(|entry| entry.run_id.as_deref()).collect();
    assert_eq!(runs, [None, Some("run-2"), Some("run-2")], "the summary was written by no run");
    let messages: Vec<ChatMessage> = transcript.into_iter().map(|entry| entry.message).collect();
    assert_eq!(messages, store.history(&session_id).await.unwrap());
}

async fn a_compaction_entry_replaces_the_entries_it_summarized_in_the_context(harness: &Harness) {
    let store = &harness.stores.sessions;
    let opened = store.open_run("k", Utc::now(), &DAILY, "run-1").await.unwrap();
    let answer = |text: &str| ChatMessage::assistant(text, vec![]);
    let entries = [ChatMessage::user("q1"), answer("a1"), ChatMessage::user("q2"), answer("a2")];
    store.append("k", "run-1", &entries).await.unwrap();
    let entry = CompactionEntry { summary: "they asked twice".into(), keep_from: 2, tokens_before: 40 };
    // The cut is checked against the stored context.
    assert!(matches!(store.compact("k", "run-1", 3, &entry).await, Err(StoreError::Corrupt(_))));
    store.compact("k", "run-1", 4, &entry).await.unwrap();
    let session_id = opened.resolved.session.session_id;
    let context = store.history(&session_id).await.unwrap();
    assert_eq!(context, [summary_message("they asked twice"), entries[2].clone(), entries[3].clone()]);

    // Later entries follow; a second compaction folds the first summary in.
    store.append("k", "run-1", &[ChatMessage::user("q3")]).await.unwrap();
    let again = CompactionEntry { summary: "all of it".into(), keep_from: 3, tokens_before: 30 };
    store.compact("k", "run-1", 4, &again).await.unwrap();
    assert_eq!(store.history(&session_id).await.unwrap(), [summary_message("all of it"), ChatMessage::user("q3")]);
    // Summarizing everything keeps only what comes after.
    let everything = CompactionEntry { summary: "done".into(), keep_from: 2, tokens_before: 10 };
    store.compact("k", "run-1", 2, &everything).await.unwrap();
    store.append("k", "run-1", &[ChatMessage::user("q4")]).await.unwrap();
    assert_eq!(store.history(&session_id).await.unwrap(), [summary_message("done"), ChatMessage::user("q4")]);
    assert_eq!(store.get("k").await.unwrap().unwrap().compaction_count, 3);
    // A run that lost the session cannot compact it.
    store.begin_run("k", &session_id, "run-2").await.unwrap();
    assert!(matches!(store.compact("k", "run-1", 2, &everything).await, Err(StoreError::Superseded { .. })));
}

async fn a_superseded_run_cannot_append(harness: &Harness) {
    let store = &harness.stores.sessions;
    let session = store.resolve("k", Utc::now(), &DAILY).await.unwrap().session;
    store.begin_run("k", &session.session_id, "old-run").await.unwrap();
    // A newer run takes over (interrupt)…
    store.begin_run("k", &session.session_id, "new-run").await.unwrap();
    assert!(matches!(
        store.append("k", "old-run", &[ChatMessage::user("x")]).await,
        Err(StoreError::Superseded { .. })
    ));
    // …and a reset fences out everyone.
    let reset = store.reset("k", Utc::now()).await.unwrap();
    assert_eq!(reset.started, Some(ResetReason::Manual));
    assert!(matches!(
        store.append("k", "new-run", &[ChatMessage::user("x")]).await,
        Err(StoreError::Superseded { .. })
    ));
    assert!(store.begin_run("k", &session.session_id, "late").await.is_err(), "the old session id is gone");
    assert!(store.history(&reset.session.session_id).await.unwrap().is_empty());
}

async fn work_that_must_not_take_a_session_from_a_run_waits_for_it_to_finish(harness: &Harness) {
    let store = &harness.stores.sessions;
    let session = store.resolve("k", Utc::now(), &DAILY).await.unwrap().session;
    store.begin_run("k", &session.session_id, "run-1").await.unwrap();
    assert!(!store.begin_run_if_idle("k", &session.session_id, "compact-1").await.unwrap(), "a run owns it");
    store.append("k", "run-1", &[ChatMessage::user("still mine")]).await.unwrap();
    store.finish_run("k", "run-1", Usage::default()).await.unwrap();
    assert!(store.begin_run_if_idle("k", &session.session_id, "compact-1").await.unwrap(), "free now");
}

async fn usage_overrides_and_listing_persist(harness: &Harness) {
    let store = &harness.stores.sessions;
    let session = store.resolve("a", Utc::now(), &DAILY).await.unwrap().session;
    store.begin_run("a", &session.session_id, "r").await.unwrap();
    store.finish_run("a", "r", Usage { input_tokens: 10, output_tokens: 4 }).await.unwrap();
    let overrides = SessionOverrides { queue_mode: Some(crate::config::QueueMode::Followup), ..Default::default() };
    store.set_overrides("a", &overrides).await.unwrap();
    store.resolve("b", Utc::now() + chrono::Duration::seconds(1), &DAILY).await.unwrap();

    let listed = store.list(10).await.unwrap();
    assert_eq!(listed.iter().map(|s| s.key.as_str()).collect::<Vec<_>>(), ["b", "a"]);
    let a = store.get("a").await.unwrap().unwrap();
    assert_eq!((a.usage.input_tokens, a.usage.output_tokens), (10, 4));
    assert_eq!(a.overrides, overrides);
    // A reset keeps the user's settings.
    assert_eq!(store.reset("a", Utc::now()).await.unwrap().session.overrides, overrides);
}

conformance!(
    the_daily_reset_at_04_00_starts_a_new_session_lazily,
    open_and_close_run_do_resolve_fence_append_and_usage_in_one_write_each,
    the_transcript_is_the_context_with_the_run_that_wrote_each_entry,
    a_compaction_entry_replaces_the_entries_it_summarized_in_the_context,
    a_superseded_run_cannot_append,
    work_that_must_not_take_a_session_from_a_run_waits_for_it_to_finish,
    usage_overrides_and_listing_persist,
);

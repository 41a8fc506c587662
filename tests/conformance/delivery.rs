//! Exactly-once delivery through crashes and model failures (SPEC §11, issue 17): a
//! killed run's preview is streamed into again, a reply recorded before the kill is
//! delivered from the ledger without asking the model again, and a model failure after
//! visible output is retried into the same message or kept for later.

use std::time::Duration;

use ferry_fakes::{Reply, Turn};

use super::{Harness, Platform, USER, visible};

/// Preview streaming on, open DMs.
const PREVIEW: &str = "dm_policy = \"open\"\nallow_from = [\"*\"]\nstreaming = \"partial\"";

impl<P: Platform> Harness<P> {
    /// How many records of the gateway's delivery ledger contain `needle` (0 before the
    /// log exists).
    #[allow(dead_code, reason = "used by tests/chaos.rs, which includes the suite")]
    pub fn ledger_count(&self, needle: &str) -> usize {
        let home = self.daemon.as_ref().and_then(|daemon| daemon.home.as_ref()).expect("a running gateway");
        let bytes = std::fs::read(home.path().join(".local/share/ferry/inbound.log")).unwrap_or_default();
        bytes.windows(needle.len()).filter(|window| *window == needle.as_bytes()).count()
    }

    /// Kills the gateway (SIGKILL), leaves it down for `downtime`, and starts a new one on
    /// the same state.
    #[allow(dead_code, reason = "used by tests/chaos.rs, which includes the suite")]
    pub async fn crash_and_restart_after(&mut self, downtime: Duration) {
        let home = self.daemon.take().expect("a running gateway").crash();
        tokio::time::sleep(downtime).await;
        self.launch(home).await;
    }

    /// Waits until the gateway's delivery ledger (inside its inbound log) holds a record
    /// containing `needle`: the explicit signal that a step of a reply is durable.
    pub async fn ledger_holds(&self, needle: &str) {
        let home = self.daemon.as_ref().and_then(|daemon| daemon.home.as_ref()).expect("a running gateway");
        let found = crate::daemon::ledger_holds(home.path(), needle).await;
        assert!(found, "{}: the ledger never recorded {needle}", P::NAME);
    }
}

/// A run killed while its preview streams leaves no frozen fragment: after the restart the
/// run's next attempt streams into the same message, which ends as the one answer.
pub async fn a_crash_mid_stream_streams_the_retry_into_the_same_preview<P: Platform>() {
    let mut h = Harness::<P>::start_with(PREVIEW, "").await;
    h.openai.push(Turn::stall(Reply::text(["Let me look into that for you, one moment please", " …"]), 1));
    h.openai.push(Turn::text(["Here is the whole answer, ", "complete this time."]));
    h.platform.dm(USER, "a long question").await;
    let preview = h.until(|p| p.dm_messages(USER), |shown| !shown.is_empty()).await;
    h.ledger_holds("\"event\":\"preview\"").await;
    h.crash_and_restart().await;
    let full = "Here is the whole answer, complete this time.";
    let shown = h.until(|p| p.dm_messages(USER), |shown| shown.iter().any(|m| m.visible.trim() == full)).await;
    assert_eq!(visible(&shown), [full], "{}: one message, the preview finished in place", P::NAME);
    assert!(shown[0].edits >= 1, "{}: the left preview {preview:?} was edited, not replaced", P::NAME);
    let shown = h.after_sentinel(USER).await;
    assert_eq!(visible(&shown), [full, "pong"], "{}: nothing else was sent", P::NAME);
    let port = h.daemon.as_ref().expect("running").port;
    let metrics = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await.unwrap().text().await.unwrap();
    let reused = format!("ferry_previews_recovered_total{{channel=\"{}\",action=\"reused\"}} 1", P::NAME);
    assert!(metrics.contains(&reused), "{}: counted as reused:\n{metrics}", P::NAME);
}

/// A preview left by a killed run whose retry streams no preview (the operator turned
/// streaming off before the restart) is deleted, not left frozen beside the answer.
pub async fn a_preview_left_by_a_crash_is_deleted_when_the_retry_streams_none<P: Platform>() {
    let mut h = Harness::<P>::start_with(PREVIEW, "").await;
    h.openai.push(Turn::stall(Reply::text(["Let me look into that for you, one moment please", " …"]), 1));
    h.openai.push(Turn::text(["The answer, sent as a message of its own."]));
    h.platform.dm(USER, "a long question").await;
    h.until(|p| p.dm_messages(USER), |shown| !shown.is_empty()).await;
    h.ledger_holds("\"event\":\"preview\"").await;
    h.channel_keys = super::OPEN.to_owned();
    h.crash_and_restart().await;
    let shown = h.after_sentinel(USER).await;
    assert_eq!(visible(&shown), ["The answer, sent as a message of its own.", "pong"], "{}", P::NAME);
    let port = h.daemon.as_ref().expect("running").port;
    let metrics = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await.unwrap().text().await.unwrap();
    let deleted = format!("ferry_previews_recovered_total{{channel=\"{}\",action=\"deleted\"}} 1", P::NAME);
    assert!(metrics.contains(&deleted), "{}: counted as deleted:\n{metrics}", P::NAME);
}

/// A run killed after its reply was recorded, while the platform rate-limited the send:
/// after the restart the recorded reply is delivered once, and the model is not asked again.
pub async fn a_reply_recorded_before_a_crash_is_delivered_without_asking_the_model_again<P: Platform>() {
    let mut h = Harness::<P>::start("").await;
    h.openai.push(Turn::text(["The answer the model gave once."]));
    h.platform.rate_limit_storm(USER);
    h.platform.dm(USER, "a question").await;
    h.ledger_holds("\"event\":\"finals\"").await;
    h.until(|p| p.rate_limited_count(), |count| *count >= 1).await;
    h.crash_and_restart().await;
    h.until(|p| p.dm_messages(USER), |shown| !shown.is_empty()).await;
    let shown = h.after_sentinel(USER).await;
    assert_eq!(visible(&shown), ["The answer the model gave once.", "pong"], "{}: delivered once", P::NAME);
    assert_eq!(h.openai.requests().len(), 2, "{}: the question and the sentinel, nothing asked twice", P::NAME);
}

/// A model stream that breaks off after part of the reply was shown is asked again, and
/// the new attempt streams into the same preview.
pub async fn a_model_failure_after_visible_output_is_retried_into_the_same_preview<P: Platform>() {
    let h = Harness::<P>::start_with(PREVIEW, "[agents.defaults]\nmodel_retry_after_output_ms = 200").await;
    let first = "The first attempt says this much, and then";
    h.openai.push(Turn::cut(Reply::text([first, " breaks off"]).with_chunk_delay(Duration::from_millis(1500)), 1));
    h.openai.push(Turn::text(["The second attempt ", "finishes the answer."]));
    h.platform.dm(USER, "a question").await;
    let full = "The second attempt finishes the answer.";
    let shown = h.until(|p| p.dm_messages(USER), |shown| shown.iter().any(|m| m.visible.trim() == full)).await;
    assert_eq!(visible(&shown), [full], "{}: one message", P::NAME);
    assert_eq!(h.openai.requests().len(), 2);
}

/// A model that keeps failing after visible output: the user is told their message is
/// kept, and it is answered together with their next one.
pub async fn a_message_the_model_kept_failing_on_is_answered_with_the_next_one<P: Platform>() {
    let tables = "[agents.defaults]\nmodel_retry_after_output_ms = 100\n\n[messages.queue]\ndebounce_ms = 0";
    let h = Harness::<P>::start_with(PREVIEW, tables).await;
    for _ in 0..3 {
        h.openai.push(Turn::cut(Reply::text(["Starting an answer that will never be finished", " …"]), 1));
    }
    h.platform.dm(USER, "the first question").await;
    let shown =
        h.until(|p| p.dm_messages(USER), |shown| shown.iter().any(|m| m.visible.contains("kept your message"))).await;
    assert_eq!(shown.len(), 1, "{}: the notice replaced the broken preview: {shown:?}", P::NAME);
    h.openai.push(Turn::text(["Both answered."]));
    h.platform.dm(USER, "the second question").await;
    h.until(|p| p.dm_messages(USER), |shown| shown.iter().any(|m| m.visible.trim() == "Both answered.")).await;
    let prompt = h.prompt(3);
    assert!(prompt.contains("the first question") && prompt.contains("the second question"), "{prompt}");
}

use std::sync::Arc;

use ferry_channel::memory::{MemoryChannel, Operation, OperationKind};
use ferry_channel::{ChannelCapabilities, ChannelError, ChatKind, ChatRef};

use super::*;

const INTERVAL: Duration = Duration::from_secs(1);

fn setup(text_limit: usize) -> (Arc<MemoryChannel>, PreviewStream) {
    let channel = Arc::new(MemoryChannel::with_capabilities(
        "memory",
        "default",
        ChannelCapabilities { text_limit, ..ChannelCapabilities::unrestricted() },
    ));
    let target = Target { chat: ChatRef::new(ChatKind::Direct, "42"), thread_id: None };
    let scheduler = OutboundScheduler::new(channel.clone());
    let preview = PreviewStream::new(scheduler, target, INTERVAL, text_limit, MarkupDialect::Markdown);
    (channel, preview)
}

fn final_text(text: &str) -> OutboundMessage {
    OutboundMessage::text(Target { chat: ChatRef::new(ChatKind::Direct, "42"), thread_id: None }, text)
}

fn count(channel: &MemoryChannel, kind: fn(&Operation) -> bool) -> usize {
    channel.operations().iter().filter(|op| kind(op)).count()
}

fn sends(channel: &MemoryChannel) -> usize {
    count(channel, |op| matches!(op, Operation::Sent { .. }))
}

fn edits(channel: &MemoryChannel) -> usize {
    count(channel, |op| matches!(op, Operation::Edited { .. }))
}

#[tokio::test(start_paused = true)]
async fn the_first_preview_waits_for_thirty_visible_characters() {
    let (channel, mut preview) = setup(4096);
    preview.update("Let me check that").await;
    assert_eq!(sends(&channel), 0);
    preview.update("Let me check that for you, one moment").await;
    assert_eq!(channel.sent_texts(), ["Let me check that for you, one moment"]);
}

#[tokio::test(start_paused = true)]
async fn the_preview_is_edited_at_most_once_per_interval_and_the_newest_text_wins() {
    let (channel, mut preview) = setup(4096);
    let mut text = String::from("The answer, streaming in word by word:");
    preview.update(&text).await;
    for i in 0..25 {
        tokio::time::advance(Duration::from_millis(100)).await;
        text.push_str(&format!(" w{i}"));
        preview.update(&text).await;
    }
    // 2.5 s of updates every 100 ms: an edit each second, at 1 s and 2 s.
    assert_eq!(edits(&channel), 2);
    let due = preview.due().expect("the newest text waits");
    tokio::time::sleep_until(due).await;
    preview.tick().await;
    assert_eq!(channel.visible_messages()[0].text, text);
    assert_eq!(preview.due(), None);
}

#[tokio::test(start_paused = true)]
async fn a_text_only_final_edits_the_preview_in_place() {
    let (channel, mut preview) = setup(4096);
    preview.update("Working on it, this takes a few seconds").await;
    let finished = preview.finish(&[final_text("Done: the deploy is green.")]).await;
    assert!(matches!(finished, Finished::EditedInPlace { .. }));
    assert_eq!(sends(&channel), 1, "no second message");
    assert_eq!(channel.visible_messages()[0].text, "Done: the deploy is green.");
}

#[tokio::test(start_paused = true)]
async fn a_reply_in_several_parts_is_sent_fresh_and_the_preview_deleted() {
    let (channel, mut preview) = setup(60);
    preview.update("The first part of a long answer, more to come").await;
    let parts = [final_text("Part one of the answer."), final_text("Part two of the answer.")];
    assert!(matches!(preview.finish(&parts).await, Finished::SentFresh { .. }));
    let visible: Vec<String> = channel.visible_messages().into_iter().map(|m| m.text).collect();
    assert_eq!(visible, ["Part one of the answer.", "Part two of the answer."]);
    assert_eq!(count(&channel, |op| matches!(op, Operation::Deleted { .. })), 1);
}

#[tokio::test(start_paused = true)]
async fn a_streamed_silent_token_never_creates_a_preview() {
    let (channel, mut preview) = setup(4096);
    for partial in ["NO", "NO_RE", "NO_REPLY"] {
        preview.update(partial).await;
    }
    assert_eq!(preview.due(), None);
    assert_eq!(preview.finish(&[]).await, Finished::NoPreview);
    assert!(channel.operations().is_empty(), "{:?}", channel.operations());
}

#[tokio::test(start_paused = true)]
async fn a_preview_whose_reply_was_dropped_is_removed() {
    let (channel, mut preview) = setup(4096);
    preview.update("I sent the report to you directly just now").await;
    assert!(matches!(preview.finish(&[]).await, Finished::SentFresh { .. }));
    assert!(channel.visible_messages().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_final_edit_is_retried_through_timeouts_and_a_429_storm_and_lands_in_place() {
    let (channel, mut preview) = setup(4096);
    preview.update("Thinking about it for a moment or two").await;
    for _ in 0..3 {
        channel.fail_next(OperationKind::Edit, ChannelError::Transient { reason: "timeout".into() });
    }
    // Longer than the three attempts a preview edit gets: a final waits it out.
    for _ in 0..8 {
        channel.fail_next(OperationKind::Edit, ChannelError::RateLimited { retry_after: Some(Duration::from_secs(2)) });
    }
    assert!(matches!(preview.finish(&[final_text("The answer.")]).await, Finished::EditedInPlace { .. }));
    assert_eq!(sends(&channel), 1, "no second copy of the reply");
    assert_eq!(channel.visible_messages()[0].text, "The answer.", "never the truncated preview");
}

#[tokio::test(start_paused = true)]
async fn a_final_edit_that_cannot_land_is_sent_fresh_and_the_preview_deleted() {
    let (channel, mut preview) = setup(4096);
    preview.update("Thinking about it for a moment or two").await;
    channel.fail_next(OperationKind::Edit, ChannelError::Rejected { reason: "message can't be edited".into() });
    assert!(matches!(preview.finish(&[final_text("The answer.")]).await, Finished::SentFresh { .. }));
    let visible: Vec<String> = channel.visible_messages().into_iter().map(|m| m.text).collect();
    assert_eq!(visible, ["The answer."]);
}

#[tokio::test(start_paused = true)]
async fn a_reply_an_earlier_process_began_adopts_the_preview_it_sent_and_an_adopted_one_waits_for_text() {
    use ferry_channel::SendReconciliation;

    use crate::reply::ledger::DeliveryLedger;
    use crate::state::inbound::{Accepted, MessageKey};
    use crate::state::sqlite::inbound_log::InboundLog;

    let dir = tempfile::tempdir().unwrap();
    let log = InboundLog::open(&dir.path().join("inbound.log")).unwrap();
    let key = MessageKey { channel: "memory", account_id: "default", chat_id: "42", thread_id: "", message_id: "1" };
    let entry = Accepted { session_key: "s".into(), prompt: "q".into(), message: "{}".into(), enqueued_at: 0 };
    let seq = log.accept(&key, 1, 0, &entry).await.unwrap().unwrap();
    // A restart: the message was accepted by the process before this one.
    let ledger = DeliveryLedger::new(Arc::new(log.clone()));
    ledger.recover(Vec::new()).await;
    let recorder = ledger.recorder(vec![seq]);
    assert!(recorder.inherited());

    let capabilities =
        ChannelCapabilities { send_reconciliation: SendReconciliation::Lookup, ..ChannelCapabilities::unrestricted() };
    let channel = Arc::new(MemoryChannel::with_capabilities("memory", "default", capabilities));
    let target = Target { chat: ChatRef::new(ChatKind::Direct, "42"), thread_id: None };
    let scheduler = OutboundScheduler::new(channel.clone());
    // The earlier process sent the preview and died before recording it.
    let mut left = OutboundMessage::text(target.clone(), "Half of what the killed run had said");
    left.idempotency_key = Some(format!("{}:preview", recorder.reply_key()));
    scheduler.send(left).await.unwrap();

    let mut preview = PreviewStream::new(scheduler, target, INTERVAL, 4096, MarkupDialect::Markdown)
        .with_recorder(recorder, "memory", "default");
    preview.update("The retry's answer, streaming in again").await;
    assert_eq!(sends(&channel), 1, "found and streamed into, not sent again");
    tokio::time::sleep_until(preview.due().expect("what the found message shows is unknown")).await;
    preview.tick().await;
    assert_eq!(channel.visible_messages()[0].text, "The retry's answer, streaming in again");

    let mut adopted = PreviewStream::new(
        OutboundScheduler::new(channel.clone()),
        Target { chat: ChatRef::new(ChatKind::Direct, "42"), thread_id: None },
        INTERVAL,
        4096,
        MarkupDialect::Markdown,
    );
    adopted.adopt(preview.into_message().unwrap());
    assert_eq!(adopted.due(), None, "nothing to show yet: no empty edit");
    adopted.update("NO").await;
    assert_eq!(edits(&channel), 1, "a held-back silent prefix is no text either");
}

#[tokio::test(start_paused = true)]
async fn a_preview_refused_its_thread_streams_unthreaded_and_its_final_is_edited_in() {
    let (channel, mut preview) = setup(4096);
    preview.thread_to(Some("no-such-message".into()));
    channel.fail_next(OperationKind::Send, ChannelError::Rejected { reason: "message to reply not found".into() });
    preview.update("The answer, streaming in slowly here").await;
    assert_eq!(sends(&channel), 0, "the threaded send was refused");
    preview.thread_to(Some("no-such-message".into()));
    preview.update("The answer, streaming in slowly here, word").await;
    let threads: Vec<Option<String>> = channel
        .operations()
        .into_iter()
        .filter_map(|op| match op {
            Operation::Sent { message, .. } => Some(message.reply_to_message_id),
            _ => None,
        })
        .collect();
    assert_eq!(threads, [None], "sent again, unthreaded, and not threaded again");
    let mut last = final_text("The whole answer.");
    last.reply_to_message_id = Some("no-such-message".into());
    let finished = preview.finish(&[last]).await;
    assert!(matches!(finished, Finished::EditedInPlace { .. }), "{finished:?}");
    assert_eq!(sends(&channel), 1);
}

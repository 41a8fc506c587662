use std::sync::Arc;

use ferry_channel::{ChatKind, ChatRef, MessageRef, Target};

use super::testing::accept;
use super::*;
use crate::state::sqlite::inbound_log::InboundLog;

fn preview(id: &str) -> MessageRef {
    MessageRef { target: Target { chat: ChatRef::new(ChatKind::Direct, "42"), thread_id: None }, message_id: id.into() }
}

/// A killed run answering two messages left a preview; the replica that took the session
/// over answered the first alone, streaming into that preview. The second, run later, must
/// not stream into the first one's answer, and the preview is no orphan to delete.
#[tokio::test]
async fn a_preview_handed_to_a_run_answering_fewer_messages_is_no_longer_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let log = InboundLog::open(&dir.path().join("inbound.log")).unwrap();
    let (first, second) = (accept(&log, "1").await, accept(&log, "2").await);
    let ledger = DeliveryLedger::new(Arc::new(log.clone()));
    let event =
        LedgerEvent::Preview { channel: "memory".into(), account_id: "default".into(), message: preview("100") };
    assert!(ledger.recorder(vec![first, second]).record(&event, false).await);

    ledger.hand_over_preview(&[first, second], &[first], "memory", "default", &preview("100")).await;
    let answered = LedgerEvent::Delivered { index: 0, message_id: "100".into() };
    assert!(ledger.recorder(vec![first]).record(&answered, true).await);

    let waiting = log.unanswered().unwrap();
    assert_eq!(waiting.messages.iter().map(|message| message.seq).collect::<Vec<_>>(), [second]);
    let recovery = recovery::fold(waiting.deliveries);
    assert_eq!(recovery.by_seq.get(&second).and_then(|reply| reply.preview.clone()), None);
    assert!(recovery.orphans.is_empty(), "the first message's answer is not deleted: {:?}", recovery.orphans);
}

/// The same messages (a restart's retry): nothing more is written.
#[tokio::test]
async fn a_preview_handed_to_a_run_answering_the_same_messages_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = InboundLog::open(&dir.path().join("inbound.log")).unwrap();
    let first = accept(&log, "1").await;
    let ledger = DeliveryLedger::new(Arc::new(log.clone()));
    let event =
        LedgerEvent::Preview { channel: "memory".into(), account_id: "default".into(), message: preview("100") };
    assert!(ledger.recorder(vec![first]).record(&event, false).await);
    let before = log.unanswered().unwrap().deliveries.len();
    ledger.hand_over_preview(&[first], &[first], "memory", "default", &preview("100")).await;
    assert_eq!(log.unanswered().unwrap().deliveries.len(), before);
}

/// A reply's record written while the store restarts is written once it is back: left
/// unwritten, the reply would be sent again by whoever runs its message next.
#[tokio::test(start_paused = true)]
async fn a_record_written_during_an_outage_is_written_once_the_store_is_back() {
    use std::sync::atomic::Ordering;

    use crate::state::intercept::{Intercepted, Outage};

    let dir = tempfile::tempdir().unwrap();
    let log = InboundLog::open(&dir.path().join("inbound.log")).unwrap();
    let seq = accept(&log, "1").await;
    let store = Arc::new(Intercepted { log: log.clone(), hook: Outage::new(3) });
    let ledger = DeliveryLedger::new(store.clone());
    let answered = LedgerEvent::Delivered { index: 0, message_id: "100".into() };
    assert!(ledger.recorder(vec![seq]).record(&answered, true).await, "written in the end");
    assert_eq!(store.hook.writes.load(Ordering::SeqCst), 4, "three refusals, then the write");
    assert!(log.unanswered().unwrap().messages.is_empty(), "the message is answered");
}

/// A replica that takes a session over a second time reads what the database holds now:
/// what it adopted the first time (and never ran) is stale, and gives way.
#[tokio::test]
async fn adopting_a_session_again_replaces_what_an_earlier_adoption_left() {
    use crate::state::inbound::LoggedDelivery;

    let dir = tempfile::tempdir().unwrap();
    let log = InboundLog::open(&dir.path().join("inbound.log")).unwrap();
    let seq = accept(&log, "1").await;
    let ledger = DeliveryLedger::new(Arc::new(log));
    let streamed =
        LedgerEvent::Preview { channel: "memory".into(), account_id: "default".into(), message: preview("100") };
    let record = |event: &LedgerEvent| LoggedDelivery { seqs: vec![seq], body: event.encode() };
    ledger.adopt(&[seq], vec![record(&streamed)]);
    // Meanwhile another replica ran the message and gave its preview up.
    ledger.adopt(&[seq], vec![record(&streamed), record(&LedgerEvent::PreviewGone)]);
    let taken = ledger.take(&[seq]);
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].preview, None, "the database's latest, not the first adoption's");
}

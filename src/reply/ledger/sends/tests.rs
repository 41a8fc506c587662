use std::sync::Arc;
use std::time::Duration;

use ferry_channel::memory::MemoryChannel;
use ferry_channel::{ChannelCapabilities, ChatKind, ChatRef, SendReconciliation, Target};

use super::*;
use crate::reply::ledger::DeliveryLedger;
use crate::reply::ledger::LedgerEvent;
use crate::reply::ledger::testing::{accept, restarted};
use crate::state::StorageError;
use crate::state::intercept::{BeforeWrite, Intercepted};
use crate::state::sqlite::inbound_log::InboundLog;

fn text(body: &str) -> OutboundMessage {
    OutboundMessage::text(Target { chat: ChatRef::new(ChatKind::Direct, "42"), thread_id: None }, body)
}

/// A channel that finds its sent messages by idempotency key (as Slack does).
fn lookup_channel() -> Arc<MemoryChannel> {
    let capabilities =
        ChannelCapabilities { send_reconciliation: SendReconciliation::Lookup, ..ChannelCapabilities::unrestricted() };
    Arc::new(MemoryChannel::with_capabilities("memory", "default", capabilities))
}

/// The parts of a block message carrying `blocks`, named and recorded as the coalescer does
/// before it sends them.
async fn block_message(sends: &RunSends, bodies: &[&str], blocks: &[String]) -> Vec<OutboundMessage> {
    let mut parts: Vec<OutboundMessage> = bodies.iter().map(|body| text(body)).collect();
    sends.prepare_block_message(&mut parts, blocks).await;
    parts
}

/// Sends a block message of one part carrying `blocks`.
async fn send_block(sends: &RunSends, scheduler: &OutboundScheduler, body: &str, blocks: &[String]) -> Outcome {
    let part = block_message(sends, &[body], blocks).await.remove(0);
    sends.send_block(scheduler, part, MarkupDialect::Plain).await.unwrap()
}

/// A run that sent a `message` and a block, then was killed, is resumed after a restart on
/// a platform that cannot settle a repeated send (Telegram): each was recorded once sent, so
/// neither is sent again (the `message` call, made again with the same id, finds its
/// record), and a new block is.
#[tokio::test(start_paused = true)]
async fn a_resumed_run_sends_only_the_blocks_the_killed_attempt_did_not() {
    let dir = tempfile::tempdir().unwrap();
    let log = InboundLog::open(&dir.path().join("inbound.log")).unwrap();
    let seq = accept(&log, "1").await;
    let channel = Arc::new(MemoryChannel::new("memory", "default"));

    let first = DeliveryLedger::new(Arc::new(log.clone()));
    let sends = RunSends::new(first.recorder(vec![seq]), Recovered::default(), 0);
    let scheduler = OutboundScheduler::new(channel.clone());
    let mut message = text("tool one");
    message.idempotency_key = Some(sends.message_key("call-a"));
    assert!(matches!(sends.send(&scheduler, message).await.unwrap(), Outcome::Sent(_)));
    let zero = [block_digest("block zero")];
    let block_sent = send_block(&sends, &scheduler, "block zero", &zero).await;
    sends.settle().await;
    // Killed here, once the records written behind the sends are written: nothing
    // answered the message.

    let (second, recovered) = restarted(&log, &[seq]).await;
    assert_eq!(recovered.sent.len(), 2, "the send and the block: {recovered:?}");
    let sends = RunSends::new(second.recorder(vec![seq]), recovered, 0);
    assert!(sends.block_was_sent(&zero[0]) && !sends.block_was_sent(&block_digest("block one")));
    let scheduler = OutboundScheduler::new(channel.clone());
    let mut message = text("tool one");
    message.idempotency_key = Some(sends.message_key("call-a"));
    assert!(matches!(sends.send(&scheduler, message).await.unwrap(), Outcome::Recorded(_)));
    let again = send_block(&sends, &scheduler, "block zero again", &zero).await;
    let one = [block_digest("block one")];
    let new = send_block(&sends, &scheduler, "block one", &one).await;

    assert_eq!(channel.sent_texts(), ["tool one", "block zero", "block one"]);
    assert_eq!(again, Outcome::Recorded(block_sent.message().clone()), "the first attempt's message");
    assert!(matches!(new, Outcome::Sent(_)));
}

/// Killed between the platform's answer and the ledger write: the re-done run's send is
/// looked up by its key where the platform allows (Slack), found, and not repeated.
#[tokio::test(start_paused = true)]
async fn a_send_the_killed_attempt_made_without_recording_it_is_found_by_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let log = InboundLog::open(&dir.path().join("inbound.log")).unwrap();
    let seq = accept(&log, "1").await;
    let channel = lookup_channel();
    let key = RunSends::new(DeliveryLedger::new(Arc::new(log.clone())).recorder(vec![seq]), Recovered::default(), 0)
        .message_key("call-a");
    let mut unrecorded = text("sent, never recorded");
    unrecorded.idempotency_key = Some(key);
    OutboundScheduler::new(channel.clone()).send(unrecorded).await.unwrap();

    let (second, recovered) = restarted(&log, &[seq]).await;
    assert!(recovered.sent.is_empty());
    let recorder = second.recorder(vec![seq]);
    assert!(recorder.inherited(), "accepted by the process that was killed");
    let sends = RunSends::new(recorder, recovered, 0);
    let mut again = text("sent, never recorded");
    again.idempotency_key = Some(sends.message_key("call-a"));
    sends.send(&OutboundScheduler::new(channel.clone()), again).await.unwrap();
    assert_eq!(channel.sent_texts(), ["sent, never recorded"]);
}

/// Where the platform settles a repeated send by key, a block message is recorded before it
/// is sent. A killed attempt sent one and was killed before sending the next; the resumed
/// run sends both again first, reconciled (the first is found, not repeated; the second
/// goes out), and their blocks count as sent, however it merges them this time.
#[tokio::test(start_paused = true)]
async fn recorded_block_messages_are_sent_again_reconciled_before_the_resumed_run_streams() {
    let dir = tempfile::tempdir().unwrap();
    let log = InboundLog::open(&dir.path().join("inbound.log")).unwrap();
    let seq = accept(&log, "1").await;
    let channel = lookup_channel();
    let scheduler = OutboundScheduler::new(channel.clone());
    let (one, two) = ([block_digest("block one")], [block_digest("block two")]);
    let killed = RunSends::new(DeliveryLedger::new(Arc::new(log.clone())).recorder(vec![seq]), Recovered::default(), 0);
    send_block(&killed, &scheduler, "block one", &one).await;
    block_message(&killed, &["block two"], &two).await;
    // Killed here, the second message recorded and not sent.

    let (second, recovered) = restarted(&log, &[seq]).await;
    assert_eq!(recovered.block_messages.len(), 2, "{recovered:?}");
    assert!(recovered.sent.is_empty(), "recorded before, not after: one write each");
    let sends = RunSends::new(second.recorder(vec![seq]), recovered, 0);
    assert!(sends.block_was_sent(&one[0]) && sends.block_was_sent(&two[0]));
    assert!(!sends.block_was_sent(&block_digest("block three")));
    let scheduler = OutboundScheduler::new(channel.clone());
    assert_eq!(sends.replay_block_messages(&scheduler, MarkupDialect::Plain).await.unwrap(), 2);
    assert_eq!(sends.replay_block_messages(&scheduler, MarkupDialect::Plain).await.unwrap(), 0, "once");
    assert_eq!(channel.sent_texts(), ["block one", "block two"]);
}

/// On a platform that cannot settle a repeated send (Telegram), a block message is recorded
/// before it is sent and each part once sent. The resumed run skips what was recorded sent,
/// sends again the very same message whose send was in flight at the kill (a repeat of it at
/// worst, never of its blocks merged with others), and sends the one never sent.
#[tokio::test(start_paused = true)]
async fn without_reconciliation_only_the_block_message_in_flight_at_the_kill_is_repeated_and_as_itself() {
    let dir = tempfile::tempdir().unwrap();
    let log = InboundLog::open(&dir.path().join("inbound.log")).unwrap();
    let seq = accept(&log, "1").await;
    let channel = Arc::new(MemoryChannel::new("memory", "default"));
    let scheduler = OutboundScheduler::new(channel.clone());
    let killed = RunSends::new(DeliveryLedger::new(Arc::new(log.clone())).recorder(vec![seq]), Recovered::default(), 0);
    let digests = |text: &str| [block_digest(text)];
    send_block(&killed, &scheduler, "one", &digests("one")).await;
    killed.settle().await;
    // Sent, and killed before its record.
    let in_flight = block_message(&killed, &["two"], &digests("two")).await;
    scheduler.send(in_flight[0].clone()).await.unwrap();
    // Recorded, never sent.
    block_message(&killed, &["three"], &digests("three")).await;

    let (second, recovered) = restarted(&log, &[seq]).await;
    let sends = RunSends::new(second.recorder(vec![seq]), recovered, 0);
    let scheduler = OutboundScheduler::new(channel.clone());
    assert_eq!(sends.replay_block_messages(&scheduler, MarkupDialect::Plain).await.unwrap(), 3);
    assert_eq!(channel.sent_texts(), ["one", "two", "two", "three"]);
    assert!(["one", "two", "three"].iter().all(|text| sends.block_was_sent(&block_digest(text))));
    sends.settle().await;

    // Killed again: what the replay sent was recorded, so a third attempt repeats nothing.
    let (third, recovered) = restarted(&log, &[seq]).await;
    let sends = RunSends::new(third.recorder(vec![seq]), recovered, 0);
    assert_eq!(sends.replay_block_messages(&scheduler, MarkupDialect::Plain).await.unwrap(), 3);
    assert_eq!(channel.sent_texts(), ["one", "two", "two", "three"]);
}

/// Holds every `Sent` record until it is let go, as a slow database would.
#[derive(Debug)]
struct HoldSentRecords(tokio::sync::Semaphore);

#[async_trait::async_trait]
impl BeforeWrite for HoldSentRecords {
    async fn before_write(&self, body: Option<&str>) -> Result<(), StorageError> {
        if body.is_some_and(|body| matches!(LedgerEvent::decode(body), Ok(LedgerEvent::Sent { .. }))) {
            let _held = self.0.acquire().await;
        }
        Ok(())
    }
}

/// On Telegram a send waits for one ledger write, not two: its record once sent is written
/// behind it. The reply's next step waits for that record, so the reply's records keep
/// their order, and a restart after the step finds the send recorded.
#[tokio::test]
async fn a_send_does_not_wait_for_its_record_once_sent_but_the_next_step_does() {
    let dir = tempfile::tempdir().unwrap();
    let log = InboundLog::open(&dir.path().join("inbound.log")).unwrap();
    let seq = accept(&log, "1").await;
    let hook = HoldSentRecords(tokio::sync::Semaphore::new(0));
    let store = Arc::new(Intercepted { log: log.clone(), hook });
    let channel = Arc::new(MemoryChannel::new("memory", "default"));
    let scheduler = OutboundScheduler::new(channel.clone());
    let sends = RunSends::new(DeliveryLedger::new(store.clone()).recorder(vec![seq]), Recovered::default(), 0);
    let mut message = text("tool one");
    message.idempotency_key = Some(sends.message_key("call-a"));
    let send = sends.send(&scheduler, message);
    let sent = tokio::time::timeout(Duration::from_secs(5), send).await;
    assert!(matches!(sent, Ok(Ok(Outcome::Sent(_)))), "the send did not wait for its record: {sent:?}");
    let zero = [block_digest("block zero")];
    let block = tokio::time::timeout(Duration::from_secs(5), send_block(&sends, &scheduler, "block zero", &zero));
    assert!(matches!(block.await, Ok(Outcome::Sent(_))));
    assert!(restarted(&log, &[seq]).await.1.sent.is_empty(), "the records are still held");

    let step = sends.step(Vec::new(), Vec::new(), "run-1", StepKind::default());
    tokio::pin!(step);
    assert!(tokio::time::timeout(Duration::from_millis(200), &mut step).await.is_err(), "the step waits for them");
    store.hook.0.add_permits(2);
    step.await;
    let (_, recovered) = restarted(&log, &[seq]).await;
    assert_eq!(recovered.sent.len(), 2, "{recovered:?}");
}

/// A message steered into a run is answered by the run's reply: the record completing it
/// marks the steered message answered too, so a restart does not run it again.
#[tokio::test]
async fn the_record_completing_a_reply_answers_the_messages_steered_into_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = InboundLog::open(&dir.path().join("inbound.log")).unwrap();
    let (first, steered) = (accept(&log, "1").await, accept(&log, "2").await);
    let ledger = DeliveryLedger::new(Arc::new(log.clone()));
    let recorder = ledger.recorder(vec![first]);
    recorder.join(&[steered, first]);
    assert_eq!(recorder.joined(), [steered]);
    let sent = LedgerEvent::Sent { key: "m1:block:0".into(), message_id: "9".into(), blocks: vec!["ab".into()] };
    assert!(recorder.record(&sent, false).await);
    assert_eq!(log.unanswered().unwrap().messages.len(), 2, "only a completing record answers");
    assert!(recorder.record(&LedgerEvent::Completed, true).await);
    assert!(log.unanswered().unwrap().messages.is_empty());
}

/// Recorded finals carry the steered messages: a restart that completes the reply from
/// the record answers them too.
#[tokio::test]
async fn recorded_finals_name_the_messages_steered_into_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let log = InboundLog::open(&dir.path().join("inbound.log")).unwrap();
    let (first, steered) = (accept(&log, "1").await, accept(&log, "2").await);
    let ledger = DeliveryLedger::new(Arc::new(log.clone()));
    let recorder = ledger.recorder(vec![first]);
    recorder.join(&[steered]);
    let plan = crate::reply::finals::FinalsPlan::new(vec![text("answer")], None, 4096, MarkupDialect::Plain);
    assert!(recorder.record(&plan.event("memory", "default", recorder.joined()), false).await);

    let ledger = DeliveryLedger::new(Arc::new(log.clone()));
    ledger.recover(log.unanswered().unwrap().deliveries).await;
    let reply = ledger.take(&[first]).pop().unwrap();
    assert_eq!(reply.finals.as_ref().map(|finals| finals.joined.clone()), Some(vec![steered]));
}

/// A run that failed for a passing reason kept its messages for the next run, whose
/// transcript shows what the first sent: the next run's sends are new ones, not taken for
/// the first run's, in this process and after a restart.
#[tokio::test(start_paused = true)]
async fn sends_of_a_run_after_one_that_kept_its_messages_are_new_ones() {
    let dir = tempfile::tempdir().unwrap();
    let log = InboundLog::open(&dir.path().join("inbound.log")).unwrap();
    let seq = accept(&log, "1").await;
    let channel = Arc::new(MemoryChannel::new("memory", "default"));
    let scheduler = OutboundScheduler::new(channel.clone());
    let ledger = DeliveryLedger::new(Arc::new(log.clone()));
    // Block messages are named by their first block: the next run's may be the same text.
    // Each is sent and its record written behind it (as before the kept record and the step).
    let block = |sends: RunSends, body: &'static str| {
        let scheduler = scheduler.clone();
        let digests = [block_digest("the same block")];
        async move {
            let outcome = send_block(&sends, &scheduler, body, &digests).await;
            sends.settle().await;
            outcome
        }
    };
    let first = ledger.sends(ledger.recorder(vec![seq]), Recovered::default());
    block(first, "from the kept run").await;
    ledger.kept(&ledger.recorder(vec![seq])).await;
    let second = ledger.sends(ledger.recorder(vec![seq]), Recovered::default());
    assert!(matches!(block(second, "from the next run").await, Outcome::Sent(_)));
    // Killed now; the run after the restart is the second's attempt again.
    let (restarted, recovered) = restarted(&log, &[seq]).await;
    let third = restarted.sends(restarted.recorder(vec![seq]), recovered);
    assert!(third.block_was_sent(&block_digest("the same block")));
    assert!(matches!(block(third, "from the next run, again").await, Outcome::Recorded(_)));
    assert_eq!(channel.sent_texts(), ["from the kept run", "from the next run"]);
}

/// A block message over the platform's limit goes in parts: a part sent before the kill
/// is recorded on its own, so the resumed run does not send it again.
#[tokio::test(start_paused = true)]
async fn each_part_of_a_long_block_message_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let log = InboundLog::open(&dir.path().join("inbound.log")).unwrap();
    let seq = accept(&log, "1").await;
    let channel = Arc::new(MemoryChannel::new("memory", "default"));
    let blocks = [block_digest("a long block")];
    let sends = RunSends::new(DeliveryLedger::new(Arc::new(log.clone())).recorder(vec![seq]), Recovered::default(), 0);
    let first = OutboundScheduler::new(channel.clone());
    let parts = block_message(&sends, &["part one", "part two"], &blocks).await;
    sends.send_block(&first, parts[0].clone(), MarkupDialect::Plain).await.unwrap();
    sends.settle().await;
    // Killed before the second part.

    let (second, recovered) = restarted(&log, &[seq]).await;
    let sends = RunSends::new(second.recorder(vec![seq]), recovered, 0);
    let scheduler = OutboundScheduler::new(channel.clone());
    let parts = block_message(&sends, &["part one", "part two"], &blocks).await;
    let again = sends.send_block(&scheduler, parts[0].clone(), MarkupDialect::Plain).await;
    assert!(matches!(again.unwrap(), Outcome::Recorded(_)));
    sends.send_block(&scheduler, parts[1].clone(), MarkupDialect::Plain).await.unwrap();
    assert_eq!(channel.sent_texts(), ["part one", "part two"]);
}

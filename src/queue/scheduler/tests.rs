//! The queue modes on a paused clock, with an executor the test drives: each run blocks
//! until the test finishes it, so every interleaving is explicit.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry_channel::{ChatKind, ChatRef, InboundMessage, Sender};
use tokio::sync::{mpsc, oneshot};

use super::*;

/// A run as the test sees it.
struct Started {
    prompt: String,
    ids: Vec<i64>,
    cancel: CancellationToken,
    steer: SteerInbox,
    finish: oneshot::Sender<RunReport>,
}

struct TestExecutor {
    started: mpsc::UnboundedSender<Started>,
}

#[async_trait]
impl RunExecutor for TestExecutor {
    async fn execute(&self, job: RunJob) -> RunReport {
        let (finish, finished) = oneshot::channel();
        let cancel = job.cancel.clone();
        let _ = self.started.send(Started {
            prompt: job.prompt,
            ids: job.messages.iter().map(|m| m.id).collect(),
            cancel: job.cancel,
            steer: job.steer,
            finish,
        });
        tokio::select! {
            report = finished => report.unwrap_or_default(),
            _ = cancel.cancelled() => RunReport::default(),
        }
    }
}

/// The journal as the scheduler sees it: which messages are still unanswered.
#[derive(Default)]
struct TestJournal {
    unanswered: Mutex<Vec<QueuedMessage>>,
}

#[async_trait]
impl AnsweredLog for TestJournal {
    async fn forget(&self, ids: &[i64]) -> Result<(), crate::queue::JournalError> {
        self.unanswered.lock().unwrap().retain(|m| !ids.contains(&m.id));
        Ok(())
    }
}

struct Harness {
    scheduler: Scheduler,
    journal: Arc<TestJournal>,
    started: mpsc::UnboundedReceiver<Started>,
    /// This scheduler's `ferry_queue_depth` (the process-wide one is shared by every test).
    depth: Gauge,
}

impl Harness {
    async fn new() -> Self {
        let journal = Arc::new(TestJournal::default());
        let (tx, started) = mpsc::unbounded_channel();
        let depth = Gauge::default();
        let scheduler =
            Scheduler::with_depth_gauge(Arc::new(TestExecutor { started: tx }), journal.clone(), 4, depth.clone());
        Self { scheduler, journal, started, depth }
    }

    /// A message as the dispatcher would have journaled it.
    async fn message(&self, chat: &str, text: &str) -> QueuedMessage {
        self.message_in("agent:main:main", chat, text).await
    }

    async fn message_in(&self, session_key: &str, chat: &str, text: &str) -> QueuedMessage {
        let inbound = InboundMessage::new(
            "memory",
            "default",
            ChatRef::new(ChatKind::Direct, chat),
            Sender::user(chat),
            text,
            text,
        );
        let mut unanswered = self.journal.unanswered.lock().unwrap();
        let message = QueuedMessage {
            id: unanswered.last().map_or(1, |m| m.id + 1),
            session_key: session_key.into(),
            message: inbound,
            prompt: text.into(),
            enqueued_at: chrono::Utc::now(),
        };
        unanswered.push(message.clone());
        message
    }

    async fn next_run(&mut self) -> Started {
        self.started.recv().await.expect("a run starts")
    }

    /// A message from `chat` whose run could not deliver and kept it for later (its
    /// channel was down), once the lane settled.
    async fn kept_after_a_failed_run(&mut self, chat: &str, text: &str) -> QueuedMessage {
        let kept = self.message(chat, text).await;
        self.scheduler.submit(kept.clone(), settings(QueueMode::Collect)).await;
        let run = self.next_run().await;
        run.finish.send(RunReport { retry_later: vec![kept.clone()], ..RunReport::default() }).unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
        kept
    }

    async fn journaled(&self) -> usize {
        self.journal.unanswered.lock().unwrap().len()
    }
}

/// A steer-mode run of chat `a` started for "first", with "change of plan" steered into it.
async fn run_with_a_steered_message(h: &mut Harness) -> (QueuedMessage, QueuedMessage, Started) {
    let steer = settings(QueueMode::Steer);
    let first = h.message("a", "first").await;
    h.scheduler.submit(first.clone(), steer).await;
    let run = h.next_run().await;
    run.steer.open();
    let steered = h.message("a", "change of plan").await;
    assert_eq!(h.scheduler.submit(steered.clone(), steer).await.admission, Admission::Steered);
    assert_eq!(run.steer.drain(), ["change of plan"]);
    (first, steered, run)
}

fn settings(mode: QueueMode) -> QueueSettings {
    QueueSettings { mode, debounce: Duration::from_millis(1000), cap: 20, drop: DropPolicy::Summarize }
}

#[tokio::test(start_paused = true)]
async fn collect_mode_batches_messages_that_arrive_during_a_run() {
    let mut h = Harness::new().await;
    let messages = [
        h.message("a", "first").await,
        h.message("a", "B").await,
        h.message("a", "C").await,
        h.message("a", "D").await,
    ];
    let collect = settings(QueueMode::Collect);
    assert_eq!(h.scheduler.submit(messages[0].clone(), collect).await.admission, Admission::Started);
    let first = h.next_run().await;
    for (position, message) in messages[1..].iter().enumerate() {
        assert_eq!(
            h.scheduler.submit(message.clone(), collect).await.admission,
            Admission::Queued { position: position + 1 }
        );
    }
    assert_eq!(h.scheduler.status("agent:main:main"), LaneStatus { running: true, streaming: false, queued: 3 });

    first.finish.send(RunReport::default()).unwrap();
    let batch = h.next_run().await;
    assert_eq!(
        batch.prompt,
        "[Queued messages while agent was busy]\n---\nQueued #1\nB\n---\nQueued #2\nC\n---\nQueued #3\nD"
    );
    assert_eq!(batch.ids, messages[1..].iter().map(|m| m.id).collect::<Vec<_>>());
    assert_eq!(h.journaled().await, 3, "queued messages stay journaled until their run finished");

    batch.finish.send(RunReport::default()).unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(h.journaled().await, 0);
    assert_eq!(h.scheduler.busy_sessions(), 0, "an idle session leaves no state behind");
}

#[tokio::test(start_paused = true)]
async fn collect_runs_messages_from_different_chats_one_by_one() {
    let mut h = Harness::new().await;
    let collect = settings(QueueMode::Collect);
    let (first, from_a, from_b) =
        (h.message("a", "first").await, h.message("a", "to a").await, h.message("b", "to b").await);
    h.scheduler.submit(first, collect).await;
    let run = h.next_run().await;
    h.scheduler.submit(from_a.clone(), collect).await;
    h.scheduler.submit(from_b.clone(), collect).await;
    run.finish.send(RunReport::default()).unwrap();
    let second = h.next_run().await;
    assert_eq!((second.prompt.as_str(), second.ids.as_slice()), ("to a", &[from_a.id][..]));
    second.finish.send(RunReport::default()).unwrap();
    let third = h.next_run().await;
    assert_eq!((third.prompt.as_str(), third.ids.as_slice()), ("to b", &[from_b.id][..]));
}

#[tokio::test(start_paused = true)]
async fn followup_mode_runs_each_message_on_its_own() {
    let mut h = Harness::new().await;
    let followup = settings(QueueMode::Followup);
    h.scheduler.submit(h.message("a", "first").await, followup).await;
    let run = h.next_run().await;
    h.scheduler.submit(h.message("a", "second").await, followup).await;
    h.scheduler.submit(h.message("a", "third").await, followup).await;
    run.finish.send(RunReport::default()).unwrap();
    let second = h.next_run().await;
    assert_eq!(second.prompt, "second");
    second.finish.send(RunReport::default()).unwrap();
    assert_eq!(h.next_run().await.prompt, "third");
}

#[tokio::test(start_paused = true)]
async fn every_new_message_restarts_the_quiet_window() {
    let mut h = Harness::new().await;
    let collect = settings(QueueMode::Collect);
    h.scheduler.submit(h.message("a", "first").await, collect).await;
    let run = h.next_run().await;
    h.scheduler.submit(h.message("a", "B").await, collect).await;
    let c = h.message("a", "C").await;
    run.finish.send(RunReport::default()).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    h.scheduler.submit(c, collect).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(h.started.try_recv().is_err(), "the first quiet window was restarted by C");
    let batch = h.next_run().await;
    assert!(batch.prompt.contains("Queued #2\nC"), "{}", batch.prompt);
}

#[tokio::test(start_paused = true)]
async fn steer_hands_the_message_to_a_streaming_run() {
    let mut h = Harness::new().await;
    let (_, _, run) = run_with_a_steered_message(&mut h).await;
    run.finish.send(RunReport::default()).unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(h.started.try_recv().is_err(), "no second run");
    assert_eq!(h.journaled().await, 0, "the steered message was answered by the run");
}

/// A run whose session's lease was lost (or lapsed on this replica) while it went on could
/// not write its reply: neither its own messages nor one steered into it are marked answered,
/// so the session's next holder finds them waiting.
#[tokio::test(start_paused = true)]
async fn a_fenced_run_leaves_its_messages_and_the_steered_ones_unanswered() {
    let mut h = Harness::new().await;
    let (_, _, run) = run_with_a_steered_message(&mut h).await;
    run.finish.send(RunReport { fenced: true, ..RunReport::default() }).unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(h.journaled().await, 2, "both wait for the session's next holder");
}

/// A run that steered a message in and then failed for a passing reason answered neither:
/// the steered message stays journaled and waits with the run's own for the next run.
#[tokio::test(start_paused = true)]
async fn a_message_steered_into_a_run_kept_for_later_is_kept_too() {
    let mut h = Harness::new().await;
    let steer = settings(QueueMode::Steer);
    let (first, steered, run) = run_with_a_steered_message(&mut h).await;
    run.finish.send(RunReport { retry_later: vec![first.clone()], ..RunReport::default() }).unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(h.journaled().await, 2, "neither was answered");

    h.scheduler.submit(h.message("a", "next").await, steer).await;
    let run = h.next_run().await;
    assert_eq!(run.ids, [first.id, steered.id, steered.id + 1], "the kept ones come first");
}

#[tokio::test(start_paused = true)]
async fn a_message_with_files_is_never_steered_but_gets_a_run_that_takes_them() {
    let mut h = Harness::new().await;
    for mode in [QueueMode::Steer, QueueMode::SteerBacklog] {
        let mode = settings(mode);
        h.scheduler.submit(h.message("a", "first").await, mode).await;
        let run = h.next_run().await;
        run.steer.open();
        let mut photo = h.message("a", "and this one").await;
        photo.message.attachments.push(ferry_channel::Attachment::remote(ferry_channel::AttachmentKind::Image, "p1"));
        assert_eq!(h.scheduler.submit(photo.clone(), mode).await.admission, Admission::Queued { position: 1 });
        assert!(run.steer.drain().is_empty(), "the run was not handed the message");
        run.finish.send(RunReport::default()).unwrap();
        let next = h.next_run().await;
        assert_eq!(next.ids, [photo.id]);
        next.finish.send(RunReport::default()).unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn steer_falls_back_to_followup_when_the_run_is_not_streaming() {
    let mut h = Harness::new().await;
    let steer = settings(QueueMode::Steer);
    h.scheduler.submit(h.message("a", "first").await, steer).await;
    let run = h.next_run().await;
    assert_eq!(
        h.scheduler.submit(h.message("a", "later").await, steer).await.admission,
        Admission::Queued { position: 1 }
    );
    run.finish.send(RunReport::default()).unwrap();
    assert_eq!(h.next_run().await.prompt, "later");
}

/// Messages that came before the run could take them are steered in ahead of one that
/// came once it could, in order; another chat's message keeps waiting for its own run.
#[tokio::test(start_paused = true)]
async fn a_message_steered_while_earlier_ones_of_its_chat_wait_goes_in_after_them() {
    let mut h = Harness::new().await;
    let steer = settings(QueueMode::Steer);
    let first = h.message("a", "first").await;
    h.scheduler.submit(first.clone(), steer).await;
    let run = h.next_run().await;
    let second = h.message("a", "second").await;
    assert_eq!(h.scheduler.submit(second.clone(), steer).await.admission, Admission::Queued { position: 1 });
    let other = h.message("b", "from another chat").await;
    h.scheduler.submit(other.clone(), steer).await;
    run.steer.open();
    let third = h.message("a", "third").await;
    assert_eq!(h.scheduler.submit(third.clone(), steer).await.admission, Admission::Steered);
    assert_eq!(run.steer.drain(), ["second", "third"]);
    assert_eq!(h.scheduler.status("agent:main:main").queued, 1, "only the other chat's message waits");
    run.finish.send(RunReport::default()).unwrap();
    let next = h.next_run().await;
    assert_eq!(next.ids, [other.id]);
    next.finish.send(RunReport::default()).unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(h.journaled().await, 0, "the steered ones were answered by the first run");
}

/// A waiting message with files cannot be steered; a message after it waits behind it
/// rather than being answered first.
#[tokio::test(start_paused = true)]
async fn a_message_after_a_waiting_one_with_files_waits_behind_it() {
    let mut h = Harness::new().await;
    let steer = settings(QueueMode::Steer);
    h.scheduler.submit(h.message("a", "first").await, steer).await;
    let run = h.next_run().await;
    let mut photo = h.message("a", "this photo").await;
    photo.message.attachments.push(ferry_channel::Attachment::remote(ferry_channel::AttachmentKind::Image, "p1"));
    h.scheduler.submit(photo.clone(), steer).await;
    run.steer.open();
    let later = h.message("a", "what do you see?").await;
    assert_eq!(h.scheduler.submit(later.clone(), steer).await.admission, Admission::Queued { position: 2 });
    assert!(run.steer.drain().is_empty());
    run.finish.send(RunReport::default()).unwrap();
    let next = h.next_run().await;
    assert_eq!(next.ids, [photo.id]);
}

#[tokio::test(start_paused = true)]
async fn steering_the_run_did_not_take_runs_as_a_follow_up() {
    let mut h = Harness::new().await;
    let steer = settings(QueueMode::Steer);
    h.scheduler.submit(h.message("a", "first").await, steer).await;
    let run = h.next_run().await;
    run.steer.open();
    let late = h.message("a", "too late").await;
    assert_eq!(h.scheduler.submit(late.clone(), steer).await.admission, Admission::Steered);
    run.finish.send(RunReport { unconsumed_steer: vec!["too late".into()], ..RunReport::default() }).unwrap();
    let follow_up = h.next_run().await;
    assert_eq!((follow_up.prompt.as_str(), follow_up.ids.as_slice()), ("too late", &[late.id][..]));
}

#[tokio::test(start_paused = true)]
async fn steer_backlog_steers_and_queues() {
    let mut h = Harness::new().await;
    let mode = settings(QueueMode::SteerBacklog);
    h.scheduler.submit(h.message("a", "first").await, mode).await;
    let run = h.next_run().await;
    run.steer.open();
    assert_eq!(h.scheduler.submit(h.message("a", "both").await, mode).await.admission, Admission::SteeredAndQueued);
    assert_eq!(run.steer.drain(), ["both"]);
    run.finish.send(RunReport::default()).unwrap();
    assert_eq!(h.next_run().await.prompt, "both");
}

#[tokio::test(start_paused = true)]
async fn interrupt_aborts_the_run_clears_the_queue_and_runs_the_newest() {
    let mut h = Harness::new().await;
    let collect = settings(QueueMode::Collect);
    h.scheduler.submit(h.message("a", "first").await, collect).await;
    let run = h.next_run().await;
    h.scheduler.submit(h.message("a", "stale").await, collect).await;
    let newest = h.message("a", "newest").await;
    assert_eq!(
        h.scheduler.submit(newest.clone(), settings(QueueMode::Interrupt)).await.admission,
        Admission::Interrupting
    );
    assert!(run.cancel.is_cancelled());
    assert_eq!(h.depth.get(), 1, "only the newest waits");
    // The executor returns when cancelled; the newest runs without a quiet window.
    let next = h.next_run().await;
    assert_eq!((next.prompt.as_str(), next.ids.as_slice()), ("newest", &[newest.id][..]));
    assert_eq!(h.depth.get(), 0);
    assert_eq!(h.journaled().await, 1, "the stale message was cleared, the aborted one answered");
}

#[tokio::test(start_paused = true)]
async fn the_cap_applies_each_drop_policy() {
    let mut h = Harness::new().await;
    let capped = |drop| QueueSettings { cap: 2, drop, ..settings(QueueMode::Collect) };

    h.scheduler.submit(h.message("a", "running").await, capped(DropPolicy::New)).await;
    let run = h.next_run().await;
    h.scheduler.submit(h.message("a", "q1").await, capped(DropPolicy::New)).await;
    h.scheduler.submit(h.message("a", "q2").await, capped(DropPolicy::New)).await;
    let rejected = h.scheduler.submit(h.message("a", "q3").await, capped(DropPolicy::New)).await;
    assert_eq!(rejected.admission, Admission::Rejected);

    let old = h.scheduler.submit(h.message("a", "q4").await, capped(DropPolicy::Old)).await;
    assert_eq!(old.admission, Admission::Queued { position: 2 });
    assert_eq!(old.dropped.iter().map(|m| m.message.text.as_str()).collect::<Vec<_>>(), ["q1"]);

    let summarized = h.scheduler.submit(h.message("a", "q5   with\nspaces").await, capped(DropPolicy::Summarize)).await;
    assert!(summarized.dropped.is_empty());
    assert_eq!(h.depth.get(), 2, "the queue depth stays at the cap");
    run.finish.send(RunReport::default()).unwrap();
    let batch = h.next_run().await;
    assert_eq!(h.depth.get(), 0);
    assert!(
        batch.prompt.starts_with("[Queue overflow] Dropped 1 message(s) due to cap.\nSummary:\n- q2\n\n"),
        "{}",
        batch.prompt
    );
    assert!(batch.prompt.ends_with("Queued #1\nq4\n---\nQueued #2\nq5   with\nspaces"), "{}", batch.prompt);
    // q2 was summarized, not answered: it stays journaled until the run carrying its
    // summary is done (a crash before then runs it again instead of losing it).
    let journaled: Vec<String> = h.journal.unanswered.lock().unwrap().iter().map(|m| m.message.text.clone()).collect();
    assert_eq!(journaled, ["q2", "q4", "q5   with\nspaces"]);
    batch.finish.send(RunReport::default()).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(h.journaled().await, 0);
}

#[tokio::test(start_paused = true)]
async fn stop_aborts_the_run_and_clears_the_queue() {
    let mut h = Harness::new().await;
    let collect = settings(QueueMode::Collect);
    h.scheduler.submit(h.message("a", "long task").await, collect).await;
    let run = h.next_run().await;
    h.scheduler.submit(h.message("a", "queued").await, collect).await;
    let stopped = h.scheduler.stop("agent:main:main", &StopScope::Session).await;
    assert_eq!(stopped, Stopped { aborted_run: true, cleared: 1 });
    assert!(run.cancel.is_cancelled());
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(h.started.try_recv().is_err());
    assert_eq!(h.journaled().await, 0);
    assert_eq!(
        h.scheduler.stop("agent:main:main", &StopScope::Session).await,
        Stopped { aborted_run: false, cleared: 0 }
    );
}

#[tokio::test(start_paused = true)]
async fn a_stop_for_one_place_leaves_another_places_run_and_messages_alone() {
    let mut h = Harness::new().await;
    let collect = settings(QueueMode::Collect);
    h.scheduler.submit(h.message("a", "a's long task").await, collect).await;
    let run = h.next_run().await;
    let (from_a, from_b) = (h.message("a", "a again").await, h.message("b", "b waits").await);
    h.scheduler.submit(from_a.clone(), collect).await;
    h.scheduler.submit(from_b.clone(), collect).await;

    let b_stops = StopScope::Place(ReplyPlace::of(&from_b));
    let stopped = h.scheduler.stop("agent:main:main", &b_stops).await;
    assert_eq!(stopped, Stopped { aborted_run: false, cleared: 1 }, "b's own message only");
    assert!(!run.cancel.is_cancelled(), "a's run goes on");
    assert_eq!(h.journaled().await, 2, "a's run and a's waiting message stay journaled");

    run.finish.send(RunReport::default()).unwrap();
    let next = h.next_run().await;
    assert_eq!((next.prompt.as_str(), next.ids.as_slice()), ("a again", &[from_a.id][..]));

    let a_stops = StopScope::Place(ReplyPlace::of(&from_a));
    assert_eq!(h.scheduler.stop("agent:main:main", &a_stops).await, Stopped { aborted_run: true, cleared: 0 });
    assert!(next.cancel.is_cancelled(), "a's /stop ends the run that answers a");
}

#[tokio::test(start_paused = true)]
async fn the_queue_depth_counts_the_messages_waiting_across_sessions() {
    let mut h = Harness::new().await;
    let collect = settings(QueueMode::Collect);
    for text in ["a1", "a2", "a3"] {
        h.scheduler.submit(h.message_in("agent:main:a", "a", text).await, collect).await;
    }
    let _a = h.next_run().await;
    assert_eq!(h.depth.get(), 2, "the running message does not wait");
    for text in ["b1", "b2"] {
        h.scheduler.submit(h.message_in("agent:main:b", "b", text).await, collect).await;
    }
    let b = h.next_run().await;
    assert_eq!(h.depth.get(), 3);

    h.scheduler.stop("agent:main:a", &StopScope::Session).await;
    assert_eq!(h.depth.get(), 1);
    b.finish.send(RunReport::default()).unwrap();
    assert_eq!(h.next_run().await.prompt, "b2");
    assert_eq!(h.depth.get(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_started_run_records_how_long_its_message_waited_in_the_session_lane() {
    // Other tests in this process start runs too: at least ours are counted.
    let waits = || crate::metrics::sample(r#"ferry_lane_wait_seconds_count{lane="session"}"#);
    let before = waits();
    let mut h = Harness::new().await;
    let collect = settings(QueueMode::Collect);
    h.scheduler.submit(h.message("a", "first").await, collect).await;
    let run = h.next_run().await;
    h.scheduler.submit(h.message("a", "second").await, collect).await;
    run.finish.send(RunReport::default()).unwrap();
    h.next_run().await;
    assert!(waits() - before >= 2.0);
}

#[tokio::test(start_paused = true)]
async fn journaled_messages_are_restored_and_run_in_order() {
    let mut h = Harness::new().await;
    h.message("a", "one").await;
    h.message("a", "two").await;
    let pending = h.journal.unanswered.lock().unwrap().clone();
    h.scheduler.restore(pending, |_| settings(QueueMode::Collect)).await;
    let run = h.next_run().await;
    assert_eq!(h.depth.get(), 0, "both run");
    assert_eq!(run.prompt, "[Queued messages while agent was busy]\n---\nQueued #1\none\n---\nQueued #2\ntwo");
}

#[tokio::test(start_paused = true)]
async fn in_steer_mode_the_messages_restored_after_a_restart_run_together() {
    let mut h = Harness::new().await;
    for text in ["one", "two", "three"] {
        h.message("a", text).await;
    }
    let pending = h.journal.unanswered.lock().unwrap().clone();
    h.scheduler.restore(pending, |_| settings(QueueMode::Steer)).await;
    let run = h.next_run().await;
    assert_eq!(run.ids.len(), 3, "they would all have been steered into the killed run");
    assert!(run.prompt.contains("one") && run.prompt.contains("three"), "{}", run.prompt);

    // Later, steer mode runs what could not be steered one message at a time, as before.
    let steer = settings(QueueMode::Steer);
    run.finish.send(RunReport::default()).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    h.scheduler.submit(h.message("a", "four").await, steer).await;
    let run = h.next_run().await;
    h.scheduler.submit(h.message("a", "five").await, steer).await;
    assert_eq!(run.ids.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn messages_a_failed_run_kept_stay_journaled_and_join_the_sessions_next_run() {
    let mut h = Harness::new().await;
    let first = h.message("a", "first").await;
    let collect = settings(QueueMode::Collect);
    h.scheduler.submit(first.clone(), collect).await;
    let run = h.next_run().await;
    run.finish.send(RunReport { retry_later: vec![first.clone()], ..RunReport::default() }).unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(h.journaled().await, 1, "kept in the journal for a restart");
    assert!(h.started.try_recv().is_err(), "no run starts by itself: the model just failed");
    assert_eq!(h.scheduler.busy_sessions(), 1, "the lane keeps the message");

    let second = h.message("a", "second").await;
    assert_eq!(h.scheduler.submit(second, collect).await.admission, Admission::Started);
    let run = h.next_run().await;
    assert_eq!(run.ids, [first.id, first.id + 1], "the kept message comes first");
    assert!(run.prompt.contains("first") && run.prompt.contains("second"), "{}", run.prompt);
    run.finish.send(RunReport::default()).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(h.journaled().await, 0);
    assert_eq!(h.scheduler.busy_sessions(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_run_whose_reply_record_answered_its_messages_needs_no_second_journal_write() {
    let mut h = Harness::new().await;
    let first = h.message("a", "first").await;
    h.scheduler.submit(first, settings(QueueMode::Collect)).await;
    let run = h.next_run().await;
    run.finish.send(RunReport { answered: true, ..RunReport::default() }).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    // The test journal only learns of answers through `forget`: the ledger wrote this one.
    assert_eq!(h.journaled().await, 1);
    assert_eq!(h.scheduler.busy_sessions(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_message_that_arrives_before_the_restore_waits_behind_the_restored_ones() {
    let mut h = Harness::new().await;
    let older = h.message("a", "left by the last process").await;
    let newer = h.message("a", "arrived while the channels started").await;
    let collect = settings(QueueMode::Collect);
    h.scheduler.hold();
    assert_eq!(h.scheduler.submit(newer.clone(), collect).await.admission, Admission::Queued { position: 1 });
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(h.started.try_recv().is_err(), "nothing runs before the restore");
    h.scheduler.restore(vec![older.clone()], |_| collect).await;
    let run = h.next_run().await;
    assert_eq!(run.ids, [older.id, newer.id], "the older message first");
}

/// A session shared by several chats (`dm_scope = "main"`): each run answers one chat, so no
/// batch, summary, kept message, steer or interrupt may carry one chat's messages into a run
/// answering another.
mod shared_session {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn collect_batches_each_chats_messages_for_a_run_of_their_own() {
        let mut h = Harness::new().await;
        let collect = settings(QueueMode::Collect);
        h.scheduler.submit(h.message("a", "first").await, collect).await;
        let run = h.next_run().await;
        let queued = [h.message("b", "b1").await, h.message("a", "a1").await, h.message("b", "b2").await];
        for message in &queued {
            h.scheduler.submit(message.clone(), collect).await;
        }
        run.finish.send(RunReport::default()).unwrap();
        let second = h.next_run().await;
        assert_eq!(second.ids, [queued[0].id, queued[2].id], "b's messages, together: {}", second.prompt);
        assert!(!second.prompt.contains("a1"), "{}", second.prompt);
        second.finish.send(RunReport::default()).unwrap();
        let third = h.next_run().await;
        assert_eq!((third.prompt.as_str(), third.ids.as_slice()), ("a1", &[queued[1].id][..]));
    }

    #[tokio::test(start_paused = true)]
    async fn the_cap_counts_each_chat_and_summaries_go_to_their_own_chats_run() {
        let mut h = Harness::new().await;
        let capped = QueueSettings { cap: 1, ..settings(QueueMode::Collect) };
        h.scheduler.submit(h.message("a", "running").await, capped).await;
        let run = h.next_run().await;
        let (a1, b1, a2) = (h.message("a", "a1").await, h.message("b", "b1").await, h.message("a", "a2").await);
        for message in [&a1, &b1, &a2] {
            let submitted = h.scheduler.submit(message.clone(), capped).await;
            assert!(matches!(submitted.admission, Admission::Queued { .. }), "{submitted:?}");
        }
        assert_eq!(h.depth.get(), 2, "a1 was summarized to make room for a2; b's message is not touched");
        run.finish.send(RunReport::default()).unwrap();
        let for_b = h.next_run().await;
        assert_eq!((for_b.prompt.as_str(), for_b.ids.as_slice()), ("b1", &[b1.id][..]), "no summary of a's message");
        for_b.finish.send(RunReport::default()).unwrap();
        let for_a = h.next_run().await;
        assert!(for_a.prompt.contains("Summary:\n- a1\n") && for_a.prompt.ends_with("a2"), "{}", for_a.prompt);
        for_a.finish.send(RunReport::default()).unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(h.journaled().await, 0, "the summarized message was answered by a's run");
    }

    #[tokio::test(start_paused = true)]
    async fn another_chats_message_is_neither_steered_into_the_run_nor_interrupts_it() {
        let mut h = Harness::new().await;
        h.scheduler.submit(h.message("a", "first").await, settings(QueueMode::Steer)).await;
        let run = h.next_run().await;
        run.steer.open();
        let from_b = h.message("b", "hello?").await;
        let steered = h.scheduler.submit(from_b.clone(), settings(QueueMode::Steer)).await;
        assert_eq!(steered.admission, Admission::Queued { position: 1 });
        assert!(run.steer.drain().is_empty());
        let backlog = h.scheduler.submit(h.message("b", "again").await, settings(QueueMode::SteerBacklog)).await;
        assert_eq!(backlog.admission, Admission::Queued { position: 2 });
        assert!(run.steer.drain().is_empty());
        let interrupt = h.scheduler.submit(h.message("b", "now!").await, settings(QueueMode::Interrupt)).await;
        assert_eq!(interrupt.admission, Admission::Queued { position: 3 });
        assert!(!run.cancel.is_cancelled(), "b cannot abort a's run");
        // a's own interrupt clears only a's waiting messages.
        h.scheduler.submit(h.message("a", "stale").await, settings(QueueMode::Collect)).await;
        let newest = h.message("a", "newest").await;
        let interrupting = h.scheduler.submit(newest.clone(), settings(QueueMode::Interrupt)).await;
        assert_eq!(interrupting.admission, Admission::Interrupting);
        assert!(run.cancel.is_cancelled());
        // The lane is in interrupt mode now: one message a run, in their order.
        let mut prompts = Vec::new();
        for _ in 0..4 {
            let next = h.next_run().await;
            prompts.push(next.prompt.clone());
            next.finish.send(RunReport::default()).unwrap();
        }
        assert_eq!(
            prompts,
            ["hello?", "again", "now!", "newest"],
            "b's messages keep their turn; a's stale one is gone"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(h.journaled().await, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_kept_message_joins_only_a_run_for_its_own_chat() {
        let mut h = Harness::new().await;
        let collect = settings(QueueMode::Collect);
        let kept = h.kept_after_a_failed_run("a", "kept").await;
        let from_b = h.message("b", "from b").await;
        h.scheduler.submit(from_b.clone(), collect).await;
        let for_b = h.next_run().await;
        assert_eq!((for_b.prompt.as_str(), for_b.ids.as_slice()), ("from b", &[from_b.id][..]));
        for_b.finish.send(RunReport::default()).unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(h.scheduler.busy_sessions(), 1, "the lane still keeps a's message");
        let from_a = h.message("a", "again").await;
        h.scheduler.submit(from_a.clone(), collect).await;
        let for_a = h.next_run().await;
        assert_eq!(for_a.ids, [kept.id, from_a.id]);
    }
}

#[tokio::test(start_paused = true)]
async fn kept_messages_run_once_their_channel_is_back() {
    let mut h = Harness::new().await;
    let kept = h.kept_after_a_failed_run("a", "kept").await;
    assert!(h.started.try_recv().is_err());

    h.scheduler.resume_kept("discord").await;
    assert!(h.started.try_recv().is_err(), "another channel coming up changes nothing");
    h.scheduler.resume_kept("memory").await;
    let rerun = h.next_run().await;
    assert_eq!((rerun.prompt.as_str(), rerun.ids.as_slice()), ("kept", &[kept.id][..]));
    rerun.finish.send(RunReport::default()).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!((h.journaled().await, h.scheduler.busy_sessions()), (0, 0));
}

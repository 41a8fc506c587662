use super::*;

const WINDOW_MS: i64 = 20 * 60 * 1000;
const T0: i64 = 1_750_000_000_000;

fn key(message_id: &str) -> MessageKey<'_> {
    MessageKey { channel: "telegram", account_id: "default", chat_id: "42", thread_id: "", message_id }
}

fn entry(text: &str) -> Accepted {
    Accepted {
        session_key: "agent:main:main".into(),
        prompt: text.into(),
        message: format!(r#"{{"text":"{text}"}}"#),
        enqueued_at: T0,
    }
}

fn open(dir: &tempfile::TempDir) -> InboundLog {
    InboundLog::open(&dir.path().join(INBOUND_LOG_FILE_NAME)).unwrap()
}

async fn accept(log: &InboundLog, id: &str, at: i64) -> Option<i64> {
    log.accept(&key(id), at, at - WINDOW_MS, &entry(id)).await.unwrap()
}

#[tokio::test]
async fn a_redelivery_is_refused_and_only_written_sightings_count_as_seen() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(&dir);
    assert!(!log.seen(&key("1"), T0 - WINDOW_MS));
    assert_eq!(accept(&log, "1", T0).await, Some(1));
    assert!(log.seen(&key("1"), T0 - WINDOW_MS));
    assert_eq!(accept(&log, "1", T0 + 1).await, None, "a redelivery writes nothing");
    assert!(log.record_seen(&key("2"), T0, T0 - WINDOW_MS).await.unwrap());
    assert!(!log.record_seen(&key("2"), T0, T0 - WINDOW_MS).await.unwrap());
    assert_eq!(accept(&log, "2", T0).await, None, "seen is seen, whatever it led to");
    assert_eq!(log.pending_count(), 1);
}

#[tokio::test]
async fn a_sighting_expires_after_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(&dir);
    assert_eq!(accept(&log, "1", T0).await, Some(1));
    assert_eq!(accept(&log, "1", T0 + WINDOW_MS - 1).await, None);
    assert_eq!(accept(&log, "1", T0 + WINDOW_MS).await, Some(2), "renewed once the window passed");
}

#[tokio::test]
async fn reopening_replays_pending_messages_sightings_and_ids() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = open(&dir);
        for id in ["1", "2", "3"] {
            accept(&log, id, T0).await;
        }
        log.record_seen(&key("4"), T0, T0 - WINDOW_MS).await.unwrap();
        log.answered(&[2]).await.unwrap();
    }
    let log = open(&dir);
    let pending = log.pending().unwrap();
    assert_eq!(pending, [LoggedMessage { seq: 1, entry: entry("1") }, LoggedMessage { seq: 3, entry: entry("3") }]);
    for id in ["1", "2", "3", "4"] {
        assert!(log.seen(&key(id), T0 - WINDOW_MS), "{id} is remembered");
    }
    assert_eq!(accept(&log, "5", T0).await, Some(4), "ids carry on");
}

#[tokio::test]
async fn a_torn_last_record_is_cut_off_and_the_log_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(INBOUND_LOG_FILE_NAME);
    {
        let log = open(&dir);
        accept(&log, "1", T0).await;
    }
    let whole = std::fs::metadata(&path).unwrap().len();
    // A crash in the middle of writing the next record.
    let mut torn = Vec::new();
    frame::accepted(&mut torn, 2, T0, &key("2"), &entry("2"));
    torn.truncate(torn.len() / 2);
    std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(&torn).unwrap();
    {
        let log = open(&dir);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), whole, "the torn record is gone");
        assert!(!log.seen(&key("2"), T0 - WINDOW_MS));
        assert_eq!(accept(&log, "2", T0).await, Some(2));
    }
    let log = open(&dir);
    assert_eq!(log.pending().unwrap().iter().map(|m| m.seq).collect::<Vec<_>>(), [1, 2]);
}

#[tokio::test]
async fn a_failed_write_records_nothing_and_a_retry_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(&dir);
    log.fail_next_appends(1);
    let error = log.accept(&key("1"), T0, T0 - WINDOW_MS, &entry("1")).await.unwrap_err();
    assert!(error.to_string().contains("injected failure"), "{error}");
    assert!(!log.seen(&key("1"), T0 - WINDOW_MS));
    assert_eq!(log.pending_count(), 0);
    assert!(accept(&log, "1", T0).await.is_some(), "the redelivery is not a duplicate");
    drop(log);
    assert_eq!(open(&dir).pending().unwrap().len(), 1);
}

#[tokio::test]
async fn racing_deliveries_have_exactly_one_first_and_share_a_failed_write() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(&dir);
    let race = |log: InboundLog| async move {
        let attempts = (0..8).map(|_| {
            let log = log.clone();
            tokio::spawn(async move { log.accept(&key("1"), T0, T0 - WINDOW_MS, &entry("1")).await })
        });
        futures::future::join_all(attempts).await.into_iter().map(|joined| joined.unwrap()).collect::<Vec<_>>()
    };
    log.fail_next_appends(1);
    let failed = race(log.clone()).await;
    // Those in the failed batch all fail; any in a later batch may then go first.
    let firsts = failed.iter().filter(|outcome| matches!(outcome, Ok(Some(_)))).count();
    assert!(firsts <= 1 && failed.iter().any(Result::is_err), "{failed:?}");
    let outcomes = race(log.clone()).await;
    let firsts_now = outcomes.iter().filter(|outcome| matches!(outcome, Ok(Some(_)))).count();
    assert_eq!(firsts + firsts_now, 1, "{failed:?} then {outcomes:?}");
    assert_eq!(log.pending_count(), 1);
}

#[tokio::test]
async fn compaction_keeps_pending_messages_and_live_sightings_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(INBOUND_LOG_FILE_NAME);
    let later = T0 + WINDOW_MS / 2;
    {
        let log = open(&dir);
        for id in ["1", "2", "3"] {
            accept(&log, id, T0).await;
        }
        log.answered(&[1, 3]).await.unwrap();
        for round in 0..200 {
            log.record_seen(&key(&format!("old-{round}")), T0 - WINDOW_MS, T0 - 2 * WINDOW_MS).await.unwrap();
        }
        // Sightings at `later` prune everything seen before `later - WINDOW_MS`.
        log.record_seen(&key("recent"), later, later - WINDOW_MS).await.unwrap();
        let before = std::fs::metadata(&path).unwrap().len();
        log.compact_now().unwrap();
        let after = std::fs::metadata(&path).unwrap().len();
        assert!(after < before / 4, "{before} -> {after}");
        assert_eq!(accept(&log, "4", later).await, Some(4), "appends go on in the new file");
    }
    let log = open(&dir);
    assert_eq!(log.pending().unwrap().iter().map(|m| m.seq).collect::<Vec<_>>(), [2, 4]);
    let cutoff = later - WINDOW_MS;
    for id in ["1", "2", "3", "4", "recent"] {
        assert!(log.seen(&key(id), cutoff), "{id} is still remembered");
    }
    assert!(!log.seen(&key("old-0"), T0 - 2 * WINDOW_MS), "expired sightings are gone");
    assert_eq!(accept(&log, "5", later).await, Some(5), "ids never go back after a compaction");
}

use std::io::Write as _;

#[tokio::test]
async fn delivery_records_of_unanswered_messages_survive_reopening_and_compaction() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = open(&dir);
        for id in ["1", "2", "3"] {
            accept(&log, id, T0).await;
        }
        log.record_delivery(&[1], "preview of 1".into(), false).await.unwrap();
        log.record_delivery(&[2, 3], "finals of 2 and 3".into(), false).await.unwrap();
        log.record_delivery(&[2, 3], "last final of 2 and 3".into(), true).await.unwrap();
        assert_eq!(log.pending_count(), 1, "the completing record answered 2 and 3 in the same write");
    }
    let log = open(&dir);
    assert_eq!(log.pending_count(), 1);
    let bodies = |log: &InboundLog| {
        log.unanswered().unwrap().deliveries.into_iter().map(|d| (d.seqs, d.body)).collect::<Vec<_>>()
    };
    assert_eq!(bodies(&log), [(vec![1], "preview of 1".to_owned())], "only replies still unfinished");
    log.compact_now().unwrap();
    assert_eq!(bodies(&open(&dir)), [(vec![1], "preview of 1".to_owned())], "compaction keeps them");
    log.answered(&[1]).await.unwrap();
    log.compact_now().unwrap();
    assert!(bodies(&open(&dir)).is_empty(), "and drops them once answered");
}

//! The inbound store: dedupe inside the window, journal ids in order, answers, the delivery
//! ledger's records, and all of it across a reopen.

use std::sync::Arc;

use super::{Harness, conformance};
use crate::state::inbound::{Accepted, MessageKey};

const MINUTE: i64 = 60_000;

fn key(message_id: &str) -> MessageKey<'_> {
    MessageKey { channel: "slack", account_id: "default", chat_id: "C1", thread_id: "", message_id }
}

fn entry(prompt: &str) -> Accepted {
    Accepted {
        session_key: "agent:main:slack:channel:c1".into(),
        prompt: prompt.into(),
        message: format!("{{\"text\":\"{prompt}\"}}"),
        enqueued_at: 1_000,
    }
}

async fn a_message_is_accepted_once_inside_the_window(harness: &Harness) {
    let inbound = &harness.stores.inbound;
    let at = 100 * MINUTE;
    let cutoff = at - 20 * MINUTE;
    assert!(!inbound.seen(&key("m1"), cutoff).await.unwrap(), "a lookup records nothing");
    let first = inbound.accept(&key("m1"), at, cutoff, &entry("hi")).await.unwrap();
    assert!(first.is_some());
    assert!(inbound.seen(&key("m1"), cutoff).await.unwrap());
    assert_eq!(inbound.accept(&key("m1"), at + 1, cutoff + 1, &entry("hi")).await.unwrap(), None);
    assert!(!inbound.record_seen(&key("m1"), at + 2, cutoff + 2).await.unwrap(), "a sighting of it is a redelivery");
    // Once the sighting is outside the window, the same id is a new message.
    let later = at + 21 * MINUTE;
    let again = inbound.accept(&key("m1"), later, later - 20 * MINUTE, &entry("hi")).await.unwrap();
    assert!(again.unwrap() > first.unwrap(), "{again:?} after {first:?}");
}

async fn every_part_of_the_key_tells_messages_apart(harness: &Harness) {
    let inbound = &harness.stores.inbound;
    let base = key("m1");
    let variants = [
        base,
        MessageKey { channel: "discord", ..base },
        MessageKey { account_id: "work", ..base },
        MessageKey { chat_id: "C2", ..base },
        MessageKey { thread_id: "t1", ..base },
        MessageKey { message_id: "m2", ..base },
        // Where the parts split matters too.
        MessageKey { chat_id: "C", thread_id: "1", ..base },
    ];
    for variant in &variants {
        assert!(inbound.record_seen(variant, 10, 0).await.unwrap(), "{variant:?}");
    }
}

async fn racing_deliveries_have_exactly_one_winner_and_ids_follow_submission(harness: &Harness) {
    let inbound = harness.stores.inbound.clone();
    let attempts = (0..16).map(|_| {
        let inbound = inbound.clone();
        tokio::spawn(async move { inbound.accept(&key("race"), 10, 0, &entry("x")).await.unwrap() })
    });
    let winners: Vec<i64> =
        futures::future::join_all(attempts).await.into_iter().filter_map(|won| won.unwrap()).collect();
    assert_eq!(winners.len(), 1, "{winners:?}");

    let ids: Vec<String> = (0..50).map(|n| format!("order-{n}")).collect();
    let accepts = ids.iter().map(|id| {
        let inbound = Arc::clone(&inbound);
        async move { inbound.accept(&key(id), 10, 0, &entry(id)).await.unwrap().unwrap() }
    });
    let accepted = futures::future::join_all(accepts).await;
    assert!(accepted.windows(2).all(|pair| pair[0] < pair[1]), "ids grow in submission order: {accepted:?}");
    assert!(accepted[0] > winners[0]);
}

async fn answered_messages_leave_the_journal_and_sightings_never_enter_it(harness: &Harness) {
    let inbound = &harness.stores.inbound;
    inbound.record_seen(&key("ignored"), 10, 0).await.unwrap();
    let a = inbound.accept(&key("a"), 10, 0, &entry("a")).await.unwrap().unwrap();
    let b = inbound.accept(&key("b"), 11, 0, &entry("b")).await.unwrap().unwrap();
    let c = inbound.accept(&key("c"), 12, 0, &entry("c")).await.unwrap().unwrap();
    assert_eq!(inbound.pending_count().await.unwrap(), 3);
    let left = inbound.unanswered().await.unwrap();
    assert_eq!(left.messages.iter().map(|m| m.seq).collect::<Vec<_>>(), [a, b, c], "oldest first");
    assert_eq!(left.messages[1].entry, entry("b"), "the message comes back as accepted");
    inbound.answered(&[a, c]).await.unwrap();
    inbound.answered(&[]).await.unwrap();
    let left = inbound.unanswered().await.unwrap();
    assert_eq!(left.messages.iter().map(|m| m.seq).collect::<Vec<_>>(), [b]);
    assert_eq!(inbound.pending_count().await.unwrap(), 1);
    assert!(inbound.next_id().await.unwrap() > c);
}

async fn delivery_records_stay_until_the_record_that_completes_the_reply(harness: &Harness) {
    let inbound = &harness.stores.inbound;
    let a = inbound.accept(&key("a"), 10, 0, &entry("a")).await.unwrap().unwrap();
    let b = inbound.accept(&key("b"), 11, 0, &entry("b")).await.unwrap().unwrap();
    let other = inbound.accept(&key("other"), 12, 0, &entry("o")).await.unwrap().unwrap();
    inbound.record_delivery(&[a, b], "preview 7".into(), false).await.unwrap();
    inbound.record_delivery(&[a, b], "finals 2".into(), false).await.unwrap();
    inbound.record_delivery(&[other], "preview 9".into(), false).await.unwrap();
    let left = inbound.unanswered().await.unwrap();
    let bodies: Vec<(&[i64], &str)> = left.deliveries.iter().map(|d| (d.seqs.as_slice(), d.body.as_str())).collect();
    assert_eq!(bodies, [(&[a, b][..], "preview 7"), (&[a, b][..], "finals 2"), (&[other][..], "preview 9")]);
    // The completing record marks both messages answered in the same write.
    inbound.record_delivery(&[a, b], "delivered".into(), true).await.unwrap();
    let left = inbound.unanswered().await.unwrap();
    assert_eq!(left.messages.iter().map(|m| m.seq).collect::<Vec<_>>(), [other]);
    assert_eq!(left.deliveries.iter().map(|d| d.body.as_str()).collect::<Vec<_>>(), ["preview 9"]);
}

async fn a_restart_keeps_what_was_seen_and_what_waits(harness: &Harness) {
    let inbound = &harness.stores.inbound;
    let waiting = inbound.accept(&key("waiting"), 10, 0, &entry("w")).await.unwrap().unwrap();
    inbound.record_delivery(&[waiting], "preview 3".into(), false).await.unwrap();
    inbound.record_seen(&key("seen"), 10, 0).await.unwrap();

    let reopened = harness.reopen().await;
    let inbound = &reopened.inbound;
    assert!(!inbound.record_seen(&key("seen"), 11, 0).await.unwrap(), "still seen after the restart");
    assert_eq!(inbound.accept(&key("waiting"), 11, 0, &entry("w")).await.unwrap(), None);
    let left = inbound.unanswered().await.unwrap();
    assert_eq!(left.messages.iter().map(|m| m.seq).collect::<Vec<_>>(), [waiting]);
    assert_eq!(left.deliveries.len(), 1);
    assert!(inbound.next_id().await.unwrap() > waiting, "ids never go back");
    let next = inbound.accept(&key("new"), 12, 0, &entry("n")).await.unwrap().unwrap();
    assert!(next > waiting);
}

conformance!(
    a_message_is_accepted_once_inside_the_window,
    every_part_of_the_key_tells_messages_apart,
    racing_deliveries_have_exactly_one_winner_and_ids_follow_submission,
    answered_messages_leave_the_journal_and_sightings_never_enter_it,
    delivery_records_stay_until_the_record_that_completes_the_reply,
    a_restart_keeps_what_was_seen_and_what_waits,
);

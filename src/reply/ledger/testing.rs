//! What the ledger's tests (and those of its users: block streaming, recovery) share: a
//! message accepted into a throwaway inbound log, and what a restart finds for a reply.

use std::sync::Arc;

use super::{DeliveryLedger, RecoveredSends};
use crate::state::inbound::{Accepted, MessageKey};
use crate::state::sqlite::inbound_log::InboundLog;

/// Accepts message `message_id` of chat 42 on the `memory` channel into `log`.
pub async fn accept(log: &InboundLog, message_id: &str) -> i64 {
    let key = MessageKey { channel: "memory", account_id: "default", chat_id: "42", thread_id: "", message_id };
    let entry = Accepted { session_key: "s".into(), prompt: "q".into(), message: "{}".into(), enqueued_at: 0 };
    log.accept(&key, 1, 0, &entry).await.unwrap().unwrap()
}

/// What a restart finds in `log` for the reply to `seqs`, as the executor hands it on.
pub async fn restarted(log: &InboundLog, seqs: &[i64]) -> (DeliveryLedger, RecoveredSends) {
    let ledger = DeliveryLedger::new(Arc::new(log.clone()));
    ledger.recover(log.unanswered().unwrap().deliveries).await;
    let recovered = ledger
        .take(seqs)
        .first()
        .map(|reply| {
            let mut recovered = RecoveredSends::default();
            recovered.absorb(reply);
            recovered
        })
        .unwrap_or_default();
    (ledger, recovered)
}

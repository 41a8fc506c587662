//! What the delivery ledger writes about a run's reply, one event a record.
//!
//! Events are JSON inside the inbound log's `Delivery` frames: they are written a few times
//! per run (not per streamed token), read back only after a crash, and must stay readable
//! across versions, so a self-describing format wins over a compact one.

use ferry_channel::{MarkupDialect, MessageRef, OutboundMessage};
use serde::{Deserialize, Serialize};

use crate::types::conversation::ChatMessage;

/// One step in the delivery of a run's reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum LedgerEvent {
    /// The run's preview message exists on the platform (written as soon as its id is known,
    /// so a restart can stream into it again or delete it, never leave it frozen).
    Preview { channel: String, account_id: String, message: MessageRef },
    /// The reply's final messages, shaped, rendered and split, written before the first is
    /// sent: a restart delivers exactly these (under the same idempotency keys) instead of
    /// asking the model again.
    Finals {
        channel: String,
        account_id: String,
        messages: Vec<OutboundMessage>,
        /// The preview the finals replace, if the run streamed one.
        preview: Option<MessageRef>,
        /// The one final is edited into the preview rather than sent.
        edit_in_place: bool,
        /// The channel's markup, for the plain-text resend of a rejected final.
        markup: MarkupDialect,
        /// Messages steered into the run while it went on: the reply answers them too.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        joined: Vec<i64>,
    },
    /// Final `index` is on the platform as `message_id`.
    Delivered { index: usize, message_id: String },
    /// The preview was deleted (the finals were sent as messages of their own).
    PreviewGone,
    /// A send made while the run went on (a `message` tool send, a streamed block) is on
    /// the platform as `message_id`; `key` names it across a restart (`super::sends`).
    Sent {
        key: String,
        message_id: String,
        /// A block message, as written before [`LedgerEvent::BlockMessage`] held them: the
        /// digests of the streamed blocks it carried ([`super::sends::block_digest`]). Read
        /// from older records; no longer written.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        blocks: Vec<String>,
    },
    /// The files of the send `key` were uploaded ahead of it, as these platform ids (one
    /// per attachment): a send repeated after a restart shares them rather than uploading
    /// them again (`super::uploads`).
    Uploaded { key: String, files: Vec<Option<String>> },
    /// A block message about to be sent, on a platform that settles a repeated send by its
    /// key (Discord's nonce, Slack's lookup): written before its first part is sent, so a
    /// resumed run sends these very parts again, reconciled, whatever it streams and merges
    /// this time (`super::sends`).
    BlockMessage {
        /// Its parts, rendered and keyed.
        parts: Vec<OutboundMessage>,
        /// The digests of the streamed blocks it carries.
        blocks: Vec<String>,
    },
    /// The run's own messages since its last step (its user message, assistant turns, tool
    /// results, messages steered into it), written after each tool call that changes
    /// something: a run re-done after a crash resumes from here instead of asking the
    /// model to do it all again.
    Step {
        messages: Vec<ChatMessage>,
        /// Messages steered into the run so far.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        joined: Vec<i64>,
        /// The run that wrote it (the id its transcript and log lines carry): which attempt
        /// recorded what, when a crash is looked into.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        run_id: Option<String>,
        /// The run ended here (its messages are all it said; written before its transcript
        /// is saved): a run re-done for these messages delivers what it said rather than
        /// asking the model again.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        ended: bool,
        /// It holds the run's messages from the start (its first step; a resumed run records
        /// what it resumed again, as its messages may be a batch of other seqs): it replaces
        /// what earlier attempts recorded rather than following it.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        whole: bool,
    },
    /// The run failed for a passing reason and its messages were kept for a later run,
    /// which knows from the saved transcript what this one sent: its sends get keys of
    /// their own (`super::sends`), never taken for this run's.
    Kept,
    /// The reply needed no finals (its streamed blocks were the whole answer): written
    /// with the record that answers its messages.
    Completed,
}

impl LedgerEvent {
    pub fn encode(&self) -> String {
        // A derived `Serialize` of plain data into a string cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    pub fn decode(body: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(body)
    }
}

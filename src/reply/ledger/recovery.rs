//! Reading the ledger back after a restart: what each unanswered message's reply had come
//! to when the previous process stopped.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use ferry_channel::{MarkupDialect, MessageRef, OutboundMessage};

use super::record::LedgerEvent;
use super::sends::{BlockMessage, SentKeys, add_block_messages};
use super::uploads::UploadedFiles;
use crate::state::inbound::LoggedDelivery;
use crate::types::conversation::ChatMessage;

/// A reply a previous process left unfinished.
#[derive(Debug, Clone, PartialEq)]
pub struct RecoveredReply {
    /// The messages the reply answers.
    pub seqs: Vec<i64>,
    pub channel: String,
    pub account_id: String,
    /// Its preview message, unless it was deleted.
    pub preview: Option<MessageRef>,
    /// Its final messages, if the run had finished.
    pub finals: Option<RecordedFinals>,
    /// Finals already on the platform: index → message id.
    pub delivered: BTreeMap<usize, String>,
    /// What the run sent while it went on (`message` tool sends, streamed blocks), by key:
    /// a run re-done for these messages does not send them again.
    pub sent: SentKeys,
    /// How many runs for these messages failed for a passing reason and kept them for
    /// later ([`LedgerEvent::Kept`]): the next run's sends are of a later generation.
    pub kept: u32,
    /// The run's own messages as far as its last step ([`LedgerEvent::Step`]): a run
    /// re-done for these messages resumes from them.
    pub steps: Vec<ChatMessage>,
    /// The messages `steps` answer: `seqs`, or those of an earlier attempt the run resumed
    /// from and was killed before its own first step. Messages of `seqs` not among them
    /// had arrived since, and the re-done run answers them after the steps.
    pub stepped: Vec<i64>,
    /// Messages steered into the run before its last step.
    pub joined: Vec<i64>,
    /// Digests of the streamed blocks its block messages carried.
    pub blocks: BTreeSet<String>,
    /// Its block messages recorded before they were sent, in order: a run re-done for its
    /// messages sends them again, reconciled, before anything it streams.
    pub block_messages: Vec<BlockMessage>,
    /// The files uploaded ahead of its sends ([`LedgerEvent::Uploaded`]), by send key.
    pub uploads: UploadedFiles,
    /// Its run ended (the last step holds all it said): a run re-done for its messages
    /// delivers that instead of asking the model again.
    pub ended: bool,
}

/// The final messages of a finished run, as recorded before the first was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedFinals {
    pub messages: Vec<OutboundMessage>,
    pub edit_in_place: bool,
    pub markup: MarkupDialect,
    /// Messages steered into the run: the reply answers them too.
    pub joined: Vec<i64>,
}

/// A preview nothing will stream into or finalize any more: it is deleted at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrphanPreview {
    pub channel: String,
    pub account_id: String,
    pub message: MessageRef,
}

/// What [`fold`] found.
#[derive(Debug, Default)]
pub struct Recovery {
    /// Each unanswered message's latest reply.
    pub by_seq: HashMap<i64, Arc<RecoveredReply>>,
    pub orphans: Vec<OrphanPreview>,
}

/// Folds the ledger records of unanswered messages into one reply per run. A message that
/// several runs tried (a process killed more than once) belongs to the latest; previews of
/// the earlier ones that nothing reuses are orphans.
pub fn fold(deliveries: Vec<LoggedDelivery>) -> Recovery {
    let mut replies: Vec<(usize, RecoveredReply)> = Vec::new();
    let mut replaced: Vec<OrphanPreview> = Vec::new();
    for (order, LoggedDelivery { seqs, body }) in deliveries.into_iter().enumerate() {
        let event = match LedgerEvent::decode(&body) {
            Ok(event) => event,
            Err(error) => {
                tracing::warn!(?seqs, %error, "a delivery ledger record does not decode; skipping it");
                continue;
            }
        };
        let index = match replies.iter().position(|(_, reply)| reply.seqs == seqs) {
            Some(index) => index,
            None => {
                replies.push((0, RecoveredReply::empty(seqs)));
                replies.len() - 1
            }
        };
        let (last, reply) = &mut replies[index];
        *last = order;
        match event {
            LedgerEvent::Preview { channel, account_id, message } => {
                if let Some(old) = reply.preview.replace(message.clone())
                    && old != message
                {
                    replaced.push(OrphanPreview {
                        channel: channel.clone(),
                        account_id: account_id.clone(),
                        message: old,
                    });
                }
                (reply.channel, reply.account_id) = (channel, account_id);
            }
            LedgerEvent::Finals { channel, account_id, messages, preview, edit_in_place, markup, joined } => {
                (reply.channel, reply.account_id) = (channel, account_id);
                reply.preview = preview;
                reply.finals = Some(RecordedFinals { messages, edit_in_place, markup, joined });
            }
            LedgerEvent::Delivered { index, message_id } => {
                reply.delivered.insert(index, message_id);
            }
            LedgerEvent::PreviewGone => reply.preview = None,
            LedgerEvent::Sent { key, message_id, blocks } => {
                reply.sent.insert(key, message_id);
                reply.blocks.extend(blocks);
            }
            LedgerEvent::Uploaded { key, files } => {
                reply.uploads.insert(key, files);
            }
            LedgerEvent::BlockMessage { parts, blocks } => reply.block_messages.push(BlockMessage { parts, blocks }),
            LedgerEvent::Step { messages, joined, run_id: _, ended, whole } => {
                if whole {
                    reply.steps = messages;
                } else {
                    reply.steps.extend(messages);
                }
                reply.ended |= ended;
                reply.stepped.clone_from(&reply.seqs);
                for seq in joined {
                    if !reply.joined.contains(&seq) {
                        reply.joined.push(seq);
                    }
                }
            }
            // The kept run's transcript was saved with the session: the next run starts anew.
            LedgerEvent::Kept => {
                reply.kept += 1;
                reply.steps.clear();
                reply.stepped.clear();
                reply.blocks.clear();
                reply.block_messages.clear();
                reply.ended = false;
            }
            // Written with the record that answered the messages: never among the unanswered.
            LedgerEvent::Completed => {}
        }
    }
    // Each message goes with the reply written to last.
    let mut latest: HashMap<i64, usize> = HashMap::new();
    for (index, (last, reply)) in replies.iter().enumerate() {
        for seq in &reply.seqs {
            let keep = latest.get(seq).is_none_or(|&other| replies[other].0 < *last);
            if keep {
                latest.insert(*seq, index);
            }
        }
    }
    let live: Vec<bool> = (0..replies.len()).map(|index| latest.values().any(|&chosen| chosen == index)).collect();
    // A run killed twice, its messages batched differently the second time, recorded its
    // sends under two replies: what either sent stays sent (and a kept run counts for both).
    // What either sent stays sent.
    let of_others: Vec<RecoveredReply> = replies
        .iter()
        .enumerate()
        .map(|(index, (_, reply))| {
            let mut others = RecoveredReply::empty(Vec::new());
            for (other, (_, older)) in replies.iter().enumerate() {
                if other != index && older.seqs.iter().any(|seq| reply.seqs.contains(seq)) {
                    others.sent.extend(older.sent.iter().map(|(key, id)| (key.clone(), id.clone())));
                    others.blocks.extend(older.blocks.iter().cloned());
                    others.uploads.extend(older.uploads.iter().map(|(key, files)| (key.clone(), files.clone())));
                    add_block_messages(&mut others.block_messages, older.block_messages.iter().cloned());
                    others.kept = others.kept.max(older.kept);
                }
            }
            others
        })
        .collect();
    // A run resumed from an earlier attempt's steps and killed before its own first step
    // (which would have held them, whole) still owes what that attempt said: it takes up the
    // steps of the latest earlier attempt at any of its messages. A kept run starts anew.
    let inherited: Vec<Option<RecoveredReply>> = replies
        .iter()
        .map(|(last, reply)| {
            if !reply.steps.is_empty() || reply.kept > 0 {
                return None;
            }
            replies
                .iter()
                .filter(|(order, older)| {
                    order < last && !older.steps.is_empty() && older.seqs.iter().any(|seq| reply.seqs.contains(seq))
                })
                .max_by_key(|(order, _)| *order)
                .map(|(_, older)| RecoveredReply {
                    steps: older.steps.clone(),
                    stepped: older.stepped.clone(),
                    ended: older.ended,
                    joined: older.joined.clone(),
                    ..RecoveredReply::empty(Vec::new())
                })
        })
        .collect();
    for ((_, reply), older) in replies.iter_mut().zip(inherited) {
        if let Some(older) = older {
            reply.steps = older.steps;
            reply.stepped = older.stepped;
            reply.ended = older.ended;
            for seq in older.joined {
                if !reply.joined.contains(&seq) {
                    reply.joined.push(seq);
                }
            }
        }
    }
    for ((_, reply), others) in replies.iter_mut().zip(of_others) {
        for (key, id) in others.sent {
            reply.sent.entry(key).or_insert(id);
        }
        reply.blocks.extend(others.blocks);
        for (key, files) in others.uploads {
            reply.uploads.entry(key).or_insert(files);
        }
        // The other attempts' block messages were streamed before this one's.
        let own = std::mem::replace(&mut reply.block_messages, others.block_messages);
        add_block_messages(&mut reply.block_messages, own);
        reply.kept = reply.kept.max(others.kept);
    }
    let live_previews: Vec<MessageRef> = replies
        .iter()
        .zip(&live)
        .filter(|(_, live)| **live)
        .filter_map(|((_, reply), _)| reply.preview.clone())
        .collect();
    let mut orphans: Vec<OrphanPreview> = replaced;
    for ((_, reply), live) in replies.iter().zip(&live) {
        if !live && let Some(preview) = &reply.preview {
            orphans.push(OrphanPreview {
                channel: reply.channel.clone(),
                account_id: reply.account_id.clone(),
                message: preview.clone(),
            });
        }
    }
    orphans.retain(|orphan| !live_previews.contains(&orphan.message));
    orphans.dedup();
    let shared: Vec<Option<Arc<RecoveredReply>>> =
        replies.into_iter().zip(live).map(|((_, reply), live)| live.then(|| Arc::new(reply))).collect();
    let by_seq = latest.into_iter().filter_map(|(seq, index)| Some((seq, shared[index].clone()?))).collect();
    Recovery { by_seq, orphans }
}

impl RecoveredReply {
    fn empty(seqs: Vec<i64>) -> Self {
        Self {
            seqs,
            channel: String::new(),
            account_id: String::new(),
            preview: None,
            finals: None,
            delivered: BTreeMap::new(),
            sent: SentKeys::new(),
            kept: 0,
            steps: Vec::new(),
            stepped: Vec::new(),
            joined: Vec::new(),
            blocks: BTreeSet::new(),
            block_messages: Vec::new(),
            uploads: UploadedFiles::new(),
            ended: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use ferry_channel::{ChatKind, ChatRef, Target};

    use super::*;

    fn preview(id: &str) -> MessageRef {
        MessageRef {
            target: Target { chat: ChatRef::new(ChatKind::Direct, "7"), thread_id: None },
            message_id: id.into(),
        }
    }

    fn record(seqs: &[i64], event: LedgerEvent) -> LoggedDelivery {
        LoggedDelivery { seqs: seqs.to_vec(), body: event.encode() }
    }

    fn shown(id: &str) -> LedgerEvent {
        LedgerEvent::Preview { channel: "telegram".into(), account_id: "default".into(), message: preview(id) }
    }

    #[test]
    fn a_run_killed_mid_stream_leaves_its_preview_to_reuse() {
        let recovery = fold(vec![record(&[5, 6], shown("100"))]);
        let reply = &recovery.by_seq[&5];
        assert_eq!(reply.preview, Some(preview("100")));
        assert!(Arc::ptr_eq(reply, &recovery.by_seq[&6]));
        assert!(reply.finals.is_none() && recovery.orphans.is_empty());
    }

    #[test]
    fn finals_and_their_deliveries_fold_into_one_reply() {
        let finals = LedgerEvent::Finals {
            channel: "telegram".into(),
            account_id: "default".into(),
            messages: vec![
                OutboundMessage::text(preview("1").target, "a"),
                OutboundMessage::text(preview("1").target, "b"),
            ],
            preview: Some(preview("100")),
            edit_in_place: false,
            markup: MarkupDialect::TelegramHtml,
            joined: vec![],
        };
        let recovery = fold(vec![
            record(&[5], shown("100")),
            record(&[5], finals),
            record(&[5], LedgerEvent::Delivered { index: 0, message_id: "101".into() }),
        ]);
        let reply = &recovery.by_seq[&5];
        assert_eq!(reply.finals.as_ref().map(|finals| finals.messages.len()), Some(2));
        assert_eq!(reply.delivered, BTreeMap::from([(0, "101".to_owned())]));
        assert_eq!(reply.preview, Some(preview("100")));
    }

    #[test]
    fn a_newer_run_of_the_same_messages_wins_and_an_unused_older_preview_is_an_orphan() {
        let recovery = fold(vec![
            record(&[5], shown("100")),
            record(&[5, 6], shown("200")),
            record(
                &[5],
                LedgerEvent::Preview {
                    channel: "telegram".into(),
                    account_id: "default".into(),
                    message: preview("300"),
                },
            ),
        ]);
        // [5] was written to last: it owns message 5; [5, 6] still owns 6.
        assert_eq!(recovery.by_seq[&5].preview, Some(preview("300")));
        assert_eq!(recovery.by_seq[&6].preview, Some(preview("200")));
        let orphans: Vec<&str> = recovery.orphans.iter().map(|orphan| orphan.message.message_id.as_str()).collect();
        assert_eq!(orphans, ["100"], "replaced by 300 and reused by nothing");
    }

    #[test]
    fn sends_of_a_run_killed_twice_and_batched_anew_stay_sent() {
        let sent = |key: &str| LedgerEvent::Sent { key: key.into(), message_id: format!("id-{key}"), blocks: vec![] };
        let recovery = fold(vec![record(&[5], sent("m5:message:0")), record(&[5, 6], sent("m5:message:1"))]);
        let keys: Vec<&str> = recovery.by_seq[&5].sent.keys().map(String::as_str).collect();
        assert_eq!(keys, ["m5:message:0", "m5:message:1"]);
        assert_eq!(recovery.by_seq[&6].sent.len(), 2);
    }

    #[test]
    fn an_ended_run_is_ended_until_a_kept_run_starts_anew() {
        let step = |run: &str, ended: bool| LedgerEvent::Step {
            messages: vec![ChatMessage::user(run)],
            joined: vec![],
            run_id: Some(run.into()),
            ended,
            whole: false,
        };
        let recovery = fold(vec![record(&[5], step("a", false)), record(&[5], step("b", true))]);
        let reply = &recovery.by_seq[&5];
        assert!(reply.ended);
        assert_eq!(reply.steps.len(), 2);

        let recovery = fold(vec![record(&[5], step("a", true)), record(&[5], LedgerEvent::Kept)]);
        let reply = &recovery.by_seq[&5];
        assert!(!reply.ended && reply.steps.is_empty(), "{reply:?}");
    }

    #[test]
    fn a_resumed_run_recording_its_messages_whole_under_a_new_batch_stands_alone() {
        let user = ChatMessage::user("q");
        let call = ChatMessage::assistant(
            "",
            vec![crate::types::conversation::ToolCall {
                id: "c".into(),
                name: "message".into(),
                arguments: "{}".into(),
            }],
        );
        let result = ChatMessage::tool_result("c", "message", "ok", false);
        let step = |messages: Vec<ChatMessage>, run: &str, whole: bool| LedgerEvent::Step {
            messages,
            joined: vec![],
            run_id: Some(run.into()),
            ended: false,
            whole,
        };
        // Killed after its call was recorded; resumed in a batch with message 6, whose run
        // records what it resumed again, then its result: message 5 goes with the newer.
        let recovery = fold(vec![
            record(&[5], step(vec![user.clone(), call.clone()], "a", true)),
            record(&[5, 6], step(vec![user.clone(), call.clone(), result.clone()], "b", true)),
        ]);
        let reply = &recovery.by_seq[&5];
        assert_eq!(reply.seqs, [5, 6]);
        assert_eq!(reply.steps, [user.clone(), call.clone(), result], "whole, from the user's message");

        // Within one reply, a whole step replaces what an earlier attempt recorded.
        let recovery = fold(vec![
            record(&[5], step(vec![user.clone(), call.clone()], "a", true)),
            record(&[5], step(vec![user.clone()], "b", true)),
        ]);
        assert_eq!(recovery.by_seq[&5].steps, [user]);
    }

    /// Message 5's run ended and was killed before its reply was recorded; the run resuming
    /// it in a batch with message 6 was killed before its own first step. What the first
    /// said is still owed (for message 5 only), not asked of the model again.
    #[test]
    fn a_resumed_run_killed_before_its_first_step_still_owes_what_it_resumed() {
        let said = vec![ChatMessage::user("five"), ChatMessage::assistant("answer to five", Vec::new())];
        let ended = LedgerEvent::Step {
            messages: said.clone(),
            joined: vec![],
            run_id: Some("a".into()),
            ended: true,
            whole: true,
        };
        let recovery = fold(vec![record(&[5], ended.clone()), record(&[5, 6], shown("200"))]);
        let reply = &recovery.by_seq[&5];
        assert_eq!(reply.seqs, [5, 6]);
        assert_eq!(reply.steps, said);
        assert!(reply.ended);
        assert_eq!(reply.stepped, [5], "message 6 arrived since: the re-done run answers it after the steps");
        assert_eq!(reply.preview, Some(preview("200")));

        // A kept run starts anew.
        let recovery = fold(vec![record(&[5], ended), record(&[5, 6], LedgerEvent::Kept)]);
        assert!(recovery.by_seq[&5].steps.is_empty());
    }

    #[test]
    fn a_deleted_preview_is_neither_reused_nor_an_orphan_and_garbage_is_skipped() {
        let recovery = fold(vec![
            record(&[5], shown("100")),
            LoggedDelivery { seqs: vec![5], body: "{not json".into() },
            record(&[5], LedgerEvent::PreviewGone),
        ]);
        assert_eq!(recovery.by_seq[&5].preview, None);
        assert!(recovery.orphans.is_empty());
    }
}

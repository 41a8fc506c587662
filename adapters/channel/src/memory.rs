//! An in-process [`Channel`]: for tests of everything above the adapters, and for embedding
//! Ferry where messages come from code rather than a chat platform.
//!
//! It behaves like a strict platform: it enforces its text limit, refuses edits and deletes
//! of messages it never sent, treats an edit to the same text as success (like Telegram's
//! "message is not modified"), and can be told to fail the next call of a kind — before it
//! happens, or after (the call applied, its answer lost, as with a dropped connection). With
//! [`SendReconciliation::Lookup`] it finds its sent messages by idempotency key. Everything
//! it is asked to do is recorded, and [`MemoryChannel::visible_messages`] shows what a user
//! would see in each chat.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use futures::StreamExt;
use tokio::sync::mpsc;

use crate::{
    Ack, AckReceiver, Attachment, Channel, ChannelCapabilities, ChannelError, ChatRef, Download, InboundDelivery,
    InboundMessage, InboundStream, MessageRef, OutboundMessage, SendReconciliation, Sender, SentMessage, Target,
    TextFormat,
};

/// The kinds of outbound call, for injecting failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperationKind {
    Send,
    Edit,
    Delete,
    Typing,
}

/// One call the channel accepted, in the order it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation {
    Sent { message_id: String, message: OutboundMessage },
    Edited { message: MessageRef, text: String, format: TextFormat },
    Deleted { message: MessageRef },
    Typing { target: Target },
}

/// A message as a user of the chat would currently see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VisibleMessage {
    pub message_id: String,
    pub target: Target,
    pub text: String,
}

/// See the [module documentation](self).
pub struct MemoryChannel {
    name: String,
    account_id: String,
    capabilities: ChannelCapabilities,
    state: Mutex<State>,
}

struct State {
    inbound_tx: mpsc::UnboundedSender<InboundDelivery>,
    /// Held until [`Channel::start`] hands it out; messages injected before start wait here.
    inbound_rx: Option<mpsc::UnboundedReceiver<InboundDelivery>>,
    next_inbound_id: u64,
    next_outbound_id: u64,
    operations: Vec<Operation>,
    /// Sent and not deleted, keyed by message id, in send order (ids increase).
    visible: BTreeMap<u64, VisibleMessage>,
    /// Injected failures: the call's kind, the error, and whether the call is applied first.
    failures: VecDeque<(OperationKind, ChannelError, bool)>,
    /// Files [`Channel::download`] serves, by attachment reference.
    files: BTreeMap<String, Vec<u8>>,
}

impl MemoryChannel {
    /// A channel with every capability and no practical text limit.
    pub fn new(name: impl Into<String>, account_id: impl Into<String>) -> Self {
        Self::with_capabilities(name, account_id, ChannelCapabilities::unrestricted())
    }

    /// A channel that imitates a platform's limits.
    pub fn with_capabilities(
        name: impl Into<String>,
        account_id: impl Into<String>,
        capabilities: ChannelCapabilities,
    ) -> Self {
        let (inbound_tx, inbound_rx) = mpsc::unbounded_channel();
        Self {
            name: name.into(),
            account_id: account_id.into(),
            capabilities,
            state: Mutex::new(State {
                inbound_tx,
                inbound_rx: Some(inbound_rx),
                next_inbound_id: 1,
                next_outbound_id: 1,
                operations: Vec::new(),
                visible: BTreeMap::new(),
                failures: VecDeque::new(),
                files: BTreeMap::new(),
            }),
        }
    }

    /// A text message from `sender_id` in `chat`, with the next inbound message id.
    pub fn message(&self, chat: ChatRef, sender_id: &str, text: &str) -> InboundMessage {
        let message_id = {
            let mut state = self.state();
            let id = state.next_inbound_id;
            state.next_inbound_id += 1;
            id.to_string()
        };
        InboundMessage::new(&self.name, &self.account_id, chat, Sender::user(sender_id), message_id, text)
    }

    /// Makes `bytes` downloadable as the attachment `reference`, as a platform holds the
    /// files its users send.
    pub fn serve_file(&self, reference: impl Into<String>, bytes: Vec<u8>) {
        self.state().files.insert(reference.into(), bytes);
    }

    /// Delivers a message to whoever consumes the inbound stream. The returned receiver
    /// tells whether the core accepted it.
    pub fn inject(&self, message: InboundMessage) -> AckReceiver {
        let (ack, receiver) = Ack::pair();
        // The stream's receiver lives in `state` until start and in the consumer after; if
        // the consumer is gone the delivery is dropped and the receiver reports Abandoned,
        // just as a platform would see an unconfirmed message.
        let _ = self.state().inbound_tx.send(InboundDelivery { message, ack });
        receiver
    }

    /// Ends the inbound stream, as a platform client that gave up for good would (a revoked
    /// token): the consumer sees the stream finish. Sending still works.
    pub fn close_inbound(&self) {
        let (dead, _) = mpsc::unbounded_channel();
        self.state().inbound_tx = dead;
    }

    /// Makes the next call of `kind` fail with `error`. Several queue up in order.
    pub fn fail_next(&self, kind: OperationKind, error: ChannelError) {
        self.state().failures.push_back((kind, error, false));
    }

    /// Makes the next call of `kind` happen and then report `error`, as a platform whose
    /// answer was lost (a connection dropped after the request was applied).
    pub fn fail_next_after_applying(&self, kind: OperationKind, error: ChannelError) {
        self.state().failures.push_back((kind, error, true));
    }

    /// Every call accepted so far, in order.
    pub fn operations(&self) -> Vec<Operation> {
        self.state().operations.clone()
    }

    /// The text of every message sent, in order, whatever happened to it later.
    pub fn sent_texts(&self) -> Vec<String> {
        self.state()
            .operations
            .iter()
            .filter_map(|op| match op {
                Operation::Sent { message, .. } => Some(message.text.clone()),
                _ => None,
            })
            .collect()
    }

    /// What a user would see now: sent messages with edits applied, deletions removed.
    pub fn visible_messages(&self) -> Vec<VisibleMessage> {
        self.state().visible.values().cloned().collect()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The lock is never held across an await or a panic-prone call, so poisoning means
        // a test already panicked; keep the data usable for its report.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The next injected failure of `kind`: `Err` to fail before the call, `Ok(Some)` to
    /// fail with it after applying the call.
    fn take_failure(state: &mut State, kind: OperationKind) -> Result<Option<ChannelError>, ChannelError> {
        let Some(index) = state.failures.iter().position(|(k, ..)| *k == kind) else { return Ok(None) };
        match state.failures.remove(index) {
            Some((_, error, false)) => Err(error),
            Some((_, error, true)) => Ok(Some(error)),
            None => Ok(None),
        }
    }

    fn visible_key(state: &State, message: &MessageRef) -> Result<u64, ChannelError> {
        message
            .message_id
            .parse::<u64>()
            .ok()
            .filter(|id| state.visible.get(id).is_some_and(|m| m.target == message.target))
            .ok_or_else(|| ChannelError::Rejected { reason: format!("message {} not found", message.message_id) })
    }

    fn check_length(&self, text: &str) -> Result<(), ChannelError> {
        let len = text.chars().count();
        if len > self.capabilities.text_limit {
            return Err(ChannelError::TooLong { len, limit: self.capabilities.text_limit });
        }
        Ok(())
    }
}

#[async_trait]
impl Channel for MemoryChannel {
    fn name(&self) -> &str {
        &self.name
    }

    fn account_id(&self) -> &str {
        &self.account_id
    }

    fn capabilities(&self) -> &ChannelCapabilities {
        &self.capabilities
    }

    async fn start(&self) -> Result<InboundStream, ChannelError> {
        let receiver = self
            .state()
            .inbound_rx
            .take()
            .ok_or(ChannelError::Rejected { reason: "the in-memory channel was already started".to_owned() })?;
        let stream = futures::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|delivery| (delivery, receiver))
        });
        Ok(stream.boxed())
    }

    async fn send(&self, message: OutboundMessage) -> Result<SentMessage, ChannelError> {
        let mut state = self.state();
        let after = Self::take_failure(&mut state, OperationKind::Send)?;
        self.check_length(&message.text)?;
        let id = state.next_outbound_id;
        state.next_outbound_id += 1;
        let message_id = id.to_string();
        state.visible.insert(
            id,
            VisibleMessage {
                message_id: message_id.clone(),
                target: message.target.clone(),
                text: message.text.clone(),
            },
        );
        state.operations.push(Operation::Sent { message_id: message_id.clone(), message });
        after.map_or(Ok(SentMessage { message_id }), Err)
    }

    async fn download(&self, attachment: &Attachment) -> Result<Download, ChannelError> {
        let bytes = self.state().files.get(&attachment.reference).cloned().ok_or_else(|| ChannelError::Rejected {
            reason: format!("no file {:?} on this channel", attachment.reference),
        })?;
        let declared_len = Some(bytes.len() as u64);
        // In chunks, as a network body arrives, so size limits are checked mid-stream.
        let chunks: Vec<Result<bytes::Bytes, ChannelError>> =
            bytes.chunks(64 * 1024).map(|chunk| Ok(bytes::Bytes::copy_from_slice(chunk))).collect();
        Ok(Download { declared_len, body: futures::stream::iter(chunks).boxed() })
    }

    async fn edit(&self, message: &MessageRef, text: &str, format: TextFormat) -> Result<(), ChannelError> {
        let mut state = self.state();
        let after = Self::take_failure(&mut state, OperationKind::Edit)?;
        self.check_length(text)?;
        let key = Self::visible_key(&state, message)?;
        if let Some(visible) = state.visible.get_mut(&key) {
            if visible.text == text {
                // "Not modified" is success: the message already shows this text.
                return after.map_or(Ok(()), Err);
            }
            visible.text = text.to_owned();
        }
        state.operations.push(Operation::Edited { message: message.clone(), text: text.to_owned(), format });
        after.map_or(Ok(()), Err)
    }

    async fn delete(&self, message: &MessageRef) -> Result<(), ChannelError> {
        let mut state = self.state();
        let after = Self::take_failure(&mut state, OperationKind::Delete)?;
        let key = Self::visible_key(&state, message)?;
        state.visible.remove(&key);
        state.operations.push(Operation::Deleted { message: message.clone() });
        after.map_or(Ok(()), Err)
    }

    async fn find_sent(&self, sought: &OutboundMessage) -> Result<Option<SentMessage>, ChannelError> {
        if self.capabilities.send_reconciliation != SendReconciliation::Lookup {
            return Err(ChannelError::Unsupported { operation: "find_sent" });
        }
        let Some(key) = sought.idempotency_key.as_deref() else { return Ok(None) };
        let state = self.state();
        let found = state.operations.iter().find_map(|op| match op {
            Operation::Sent { message_id, message }
                if message.target == sought.target
                    && message.idempotency_key.as_deref() == Some(key)
                    && message_id.parse::<u64>().is_ok_and(|id| state.visible.contains_key(&id)) =>
            {
                Some(SentMessage { message_id: message_id.clone() })
            }
            _ => None,
        });
        Ok(found)
    }

    async fn typing(&self, target: &Target) -> Result<(), ChannelError> {
        let mut state = self.state();
        let after = Self::take_failure(&mut state, OperationKind::Typing)?;
        state.operations.push(Operation::Typing { target: target.clone() });
        after.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::{AckOutcome, ChatKind};

    fn dm(id: &str) -> ChatRef {
        ChatRef::new(ChatKind::Direct, id)
    }

    #[tokio::test]
    async fn messages_injected_before_start_are_delivered_in_order() {
        let channel = MemoryChannel::new("memory", "default");
        let first = channel.message(dm("alice"), "alice", "one");
        let second = channel.message(dm("alice"), "alice", "two");
        let _ = channel.inject(first);
        let _ = channel.inject(second);
        let mut inbound = channel.start().await.unwrap();
        let texts = [inbound.next().await.unwrap(), inbound.next().await.unwrap()]
            .map(|delivery| (delivery.message.message_id.clone(), delivery.message.text.clone()));
        assert_eq!(texts, [("1".to_owned(), "one".to_owned()), ("2".to_owned(), "two".to_owned())]);
    }

    #[tokio::test]
    async fn the_injector_learns_whether_the_core_accepted() {
        let channel = MemoryChannel::new("memory", "default");
        let mut inbound = channel.start().await.unwrap();
        let accepted = channel.inject(channel.message(dm("a"), "a", "keep"));
        let abandoned = channel.inject(channel.message(dm("a"), "a", "lose"));
        inbound.next().await.unwrap().ack.accept();
        drop(inbound.next().await.unwrap());
        assert_eq!(accepted.outcome().await, AckOutcome::Accepted);
        assert_eq!(abandoned.outcome().await, AckOutcome::Abandoned);
    }

    #[tokio::test]
    async fn starting_twice_is_an_error() {
        let channel = MemoryChannel::new("memory", "default");
        let _inbound = channel.start().await.unwrap();
        assert!(channel.start().await.is_err());
    }

    #[tokio::test]
    async fn sends_over_the_text_limit_are_refused_like_a_platform_would() {
        let capabilities = ChannelCapabilities { text_limit: 5, ..ChannelCapabilities::unrestricted() };
        let channel = MemoryChannel::with_capabilities("memory", "default", capabilities);
        let target = Target { chat: dm("a"), thread_id: None };
        let error = channel.send(OutboundMessage::text(target.clone(), "héllo!")).await.unwrap_err();
        assert_eq!(error, ChannelError::TooLong { len: 6, limit: 5 });
        // The limit counts characters, not bytes.
        channel.send(OutboundMessage::text(target, "héllo")).await.unwrap();
        assert_eq!(channel.sent_texts(), ["héllo"]);
    }

    #[tokio::test]
    async fn edits_and_deletes_change_what_the_user_sees() {
        let channel = MemoryChannel::new("memory", "default");
        let target = Target { chat: dm("a"), thread_id: None };
        let first = channel.send(OutboundMessage::text(target.clone(), "draft")).await.unwrap();
        let second = channel.send(OutboundMessage::text(target.clone(), "other")).await.unwrap();
        let first = MessageRef { target: target.clone(), message_id: first.message_id };
        channel.edit(&first, "final", TextFormat::Plain).await.unwrap();
        // Editing to the same text is "not modified": success, and nothing recorded.
        channel.edit(&first, "final", TextFormat::Plain).await.unwrap();
        channel.delete(&MessageRef { target: target.clone(), message_id: second.message_id }).await.unwrap();

        let visible: Vec<_> = channel.visible_messages().into_iter().map(|m| m.text).collect();
        assert_eq!(visible, ["final"]);
        assert_eq!(channel.operations().len(), 4);
        assert_eq!(channel.sent_texts(), ["draft", "other"]);
    }

    #[tokio::test]
    async fn editing_a_message_in_another_chat_is_rejected() {
        let channel = MemoryChannel::new("memory", "default");
        let sent = channel.send(OutboundMessage::text(Target { chat: dm("a"), thread_id: None }, "x")).await.unwrap();
        let elsewhere = MessageRef { target: Target { chat: dm("b"), thread_id: None }, message_id: sent.message_id };
        assert!(matches!(channel.edit(&elsewhere, "y", TextFormat::Plain).await, Err(ChannelError::Rejected { .. })));
        assert!(channel.delete(&elsewhere).await.is_err());
    }

    #[tokio::test]
    async fn injected_failures_hit_only_the_named_operation_once() {
        let channel = Arc::new(MemoryChannel::new("memory", "default"));
        let target = Target { chat: dm("a"), thread_id: None };
        let limited = ChannelError::RateLimited { retry_after: Some(Duration::from_millis(1200)) };
        channel.fail_next(OperationKind::Send, limited.clone());

        channel.typing(&target).await.unwrap();
        let error = channel.send(OutboundMessage::text(target.clone(), "hi")).await.unwrap_err();
        assert_eq!(error, limited);
        assert!(error.is_retryable());
        assert_eq!(error.retry_after(), Some(Duration::from_millis(1200)));
        channel.send(OutboundMessage::text(target, "hi")).await.unwrap();
        assert_eq!(channel.sent_texts(), ["hi"]);
    }

    #[tokio::test]
    async fn the_channel_works_behind_a_trait_object() {
        let channel: Arc<dyn Channel> = Arc::new(MemoryChannel::new("memory", "acct"));
        assert_eq!((channel.name(), channel.account_id()), ("memory", "acct"));
        let sent = channel.send(OutboundMessage::text(Target { chat: dm("a"), thread_id: None }, "x")).await.unwrap();
        assert_eq!(sent.message_id, "1");
    }
}

//! Files uploaded ahead of their send, under the delivery ledger.
//!
//! Where a platform uploads a file and shares it in a message as two steps (Slack), a
//! process killed between them, or before it learned the share's id, left a file uploaded
//! that a restart knows nothing of: it uploaded the file again and could show it twice. So
//! a send with files and an idempotency key uploads them first
//! ([`OutboundScheduler::upload_ahead`]), records their ids ([`LedgerEvent::Uploaded`]),
//! and then sends. A send repeated after a restart carries the recorded ids: the channel
//! finds their share, or shares those same files, never new ones. One ledger write per
//! message with files, on such platforms only.

use std::collections::BTreeMap;

use ferry_channel::OutboundMessage;

use super::{LedgerEvent, Recorder};
use crate::reply::outbound::OutboundScheduler;

/// The platform's ids of the files uploaded ahead of a send, by the send's idempotency key
/// (one per attachment, in order; `None` for one not uploaded ahead).
pub type UploadedFiles = BTreeMap<String, Vec<Option<String>>>;

/// `message` with its files uploaded: as a killed attempt recorded them (`recovered`), or
/// uploaded now and recorded with `recorder`. A message without files or key, or on a
/// platform that uploads with the send, comes back as it was.
pub async fn uploaded_ahead(
    scheduler: &OutboundScheduler,
    recorder: Option<&Recorder>,
    recovered: &UploadedFiles,
    mut message: OutboundMessage,
) -> OutboundMessage {
    let Some(key) = message.idempotency_key.clone() else { return message };
    if message.attachments.is_empty() {
        return message;
    }
    if let Some(files) = recovered.get(&key) {
        for (attachment, file) in message.attachments.iter_mut().zip(files) {
            attachment.uploaded.clone_from(file);
        }
        return message;
    }
    let Some(recorder) = recorder else { return message };
    let message = scheduler.upload_ahead(message).await;
    let files: Vec<Option<String>> = message.attachments.iter().map(|attachment| attachment.uploaded.clone()).collect();
    if files.iter().any(Option::is_some) {
        recorder.record(&LedgerEvent::Uploaded { key, files }, false).await;
    }
    message
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use async_trait::async_trait;
    use ferry_channel::memory::{MemoryChannel, Operation};
    use ferry_channel::{
        Attachment, AttachmentKind, Channel, ChannelCapabilities, ChannelError, ChatKind, ChatRef, InboundStream,
        SendReconciliation, SentMessage, Target,
    };

    use super::*;
    use crate::reply::ledger::testing::{accept, restarted};
    use crate::reply::ledger::{DeliveryLedger, RecoveredSends, RunSends};
    use crate::state::sqlite::inbound_log::InboundLog;

    /// A platform that uploads a file and shares it apart (as Slack does): `upload_ahead`
    /// gives each file an id, counted.
    struct UploadsApart {
        inner: MemoryChannel,
        uploads: AtomicUsize,
        shared: Mutex<Vec<Option<String>>>,
    }

    #[async_trait]
    impl Channel for UploadsApart {
        fn name(&self) -> &str {
            self.inner.name()
        }

        fn account_id(&self) -> &str {
            self.inner.account_id()
        }

        fn capabilities(&self) -> &ChannelCapabilities {
            self.inner.capabilities()
        }

        async fn start(&self) -> Result<InboundStream, ChannelError> {
            self.inner.start().await
        }

        async fn upload_ahead(&self, mut message: OutboundMessage) -> Result<OutboundMessage, ChannelError> {
            for attachment in message.attachments.iter_mut().filter(|attachment| attachment.uploaded.is_none()) {
                let number = self.uploads.fetch_add(1, Ordering::SeqCst) + 1;
                attachment.uploaded = Some(format!("F{number}"));
            }
            Ok(message)
        }

        async fn send(&self, message: OutboundMessage) -> Result<SentMessage, ChannelError> {
            for attachment in &message.attachments {
                if attachment.uploaded.is_none() {
                    // Uploaded with the send.
                    self.uploads.fetch_add(1, Ordering::SeqCst);
                }
                self.shared.lock().unwrap().push(attachment.uploaded.clone());
            }
            self.inner.send(message).await
        }

        async fn find_sent(&self, message: &OutboundMessage) -> Result<Option<SentMessage>, ChannelError> {
            self.inner.find_sent(message).await
        }
    }

    fn with_file(text: &str) -> OutboundMessage {
        let target = Target { chat: ChatRef::new(ChatKind::Direct, "42"), thread_id: None };
        let mut message = OutboundMessage::text(target, text);
        let mut file = Attachment::remote(AttachmentKind::Document, "report");
        file.path = Some("/var/lib/ferry/media/report.txt".into());
        message.attachments.push(file);
        message
    }

    /// A `message` send with a file: the file is uploaded ahead and its id recorded, then
    /// the process is killed before the share. The run resumed after the restart shares that
    /// same file: one upload in all, never two files in the chat.
    #[tokio::test(start_paused = true)]
    async fn a_file_uploaded_before_a_kill_is_shared_after_the_restart_not_uploaded_again() {
        let dir = tempfile::tempdir().unwrap();
        let log = InboundLog::open(&dir.path().join("inbound.log")).unwrap();
        let seq = accept(&log, "1").await;
        let capabilities = ChannelCapabilities {
            send_reconciliation: SendReconciliation::Lookup,
            ..ChannelCapabilities::unrestricted()
        };
        let channel = Arc::new(UploadsApart {
            inner: MemoryChannel::with_capabilities("memory", "default", capabilities),
            uploads: AtomicUsize::new(0),
            shared: Mutex::new(Vec::new()),
        });
        let killed = DeliveryLedger::new(Arc::new(log.clone()));
        let sends = killed.sends(killed.recorder(vec![seq]), RecoveredSends::default());
        let mut message = with_file("the report");
        message.idempotency_key = Some(sends.message_key("call-a"));
        let scheduler = OutboundScheduler::new(channel.clone());
        let ahead = uploaded_ahead(
            &scheduler,
            Some(killed.recorder(vec![seq])).as_ref(),
            &UploadedFiles::new(),
            message.clone(),
        )
        .await;
        assert_eq!(ahead.attachments[0].uploaded.as_deref(), Some("F1"));
        // Killed here: uploaded, not shared.

        let (ledger, recovered) = restarted(&log, &[seq]).await;
        assert_eq!(
            recovered.uploads.get(message.idempotency_key.as_deref().unwrap()),
            Some(&vec![Some("F1".to_owned())])
        );
        let sends: RunSends = ledger.sends(ledger.recorder(vec![seq]), recovered);
        sends.send(&OutboundScheduler::new(channel.clone()), message).await.unwrap();
        assert_eq!(channel.uploads.load(Ordering::SeqCst), 1, "uploaded once");
        assert_eq!(*channel.shared.lock().unwrap(), [Some("F1".to_owned())], "the file uploaded before the kill");
        let sent = channel.inner.operations().into_iter().filter(|op| matches!(op, Operation::Sent { .. })).count();
        assert_eq!(sent, 1);
    }

    /// A platform that uploads with the send (Telegram, Discord) writes nothing ahead.
    #[tokio::test(start_paused = true)]
    async fn where_files_go_with_the_send_nothing_is_recorded_ahead() {
        let dir = tempfile::tempdir().unwrap();
        let log = InboundLog::open(&dir.path().join("inbound.log")).unwrap();
        let seq = accept(&log, "1").await;
        let scheduler = OutboundScheduler::new(Arc::new(MemoryChannel::new("memory", "default")));
        let ledger = DeliveryLedger::new(Arc::new(log.clone()));
        let mut message = with_file("the report");
        message.idempotency_key = Some("m1:message:call-a".into());
        let same =
            uploaded_ahead(&scheduler, Some(&ledger.recorder(vec![seq])), &UploadedFiles::new(), message.clone()).await;
        assert_eq!(same, message);
        let (_, recovered) = restarted(&log, &[seq]).await;
        assert!(recovered.uploads.is_empty());
    }
}

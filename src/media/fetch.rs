//! Bringing an inbound attachment's bytes to this machine within the chat's size limit.
//!
//! The limit is checked three times, each as early as it can be: against the size the
//! platform announced with the message (nothing is requested), against the size the
//! download announces (nothing is read), and as the bytes arrive (the download stops the
//! moment it passes the limit). A file of any size therefore costs at most `limit` bytes of
//! memory, whatever the platform or the sender claims.

use std::path::Path;

use ferry_channel::{Attachment, Channel, ChannelError};
use futures::StreamExt;

/// Why an attachment's bytes could not be had.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The file is over the limit: `size` is what was announced or already received.
    #[error("the file is {size} bytes, over the limit of {limit} bytes")]
    TooLarge { size: u64, limit: u64 },
    #[error("the platform did not give the file: {0}")]
    Channel(#[from] ChannelError),
    #[error("cannot read the uploaded file: {0}")]
    Local(std::io::Error),
}

/// The bytes of `attachment`, from its channel (or, for an upload already on this machine,
/// from its `path`), at most `limit` of them.
pub async fn fetch(channel: &dyn Channel, attachment: &Attachment, limit: u64) -> Result<Vec<u8>, FetchError> {
    if let Some(size) = attachment.size_bytes.filter(|size| *size > limit) {
        return Err(FetchError::TooLarge { size, limit });
    }
    if let Some(path) = &attachment.path {
        return read_local(path, limit).await;
    }
    let download = channel.download(attachment).await?;
    if let Some(size) = download.declared_len.filter(|size| *size > limit) {
        return Err(FetchError::TooLarge { size, limit });
    }
    let capacity = download.declared_len.unwrap_or(0).min(limit);
    let mut bytes = Vec::with_capacity(usize::try_from(capacity).unwrap_or(0));
    let mut body = download.body;
    while let Some(chunk) = body.next().await {
        let chunk = chunk?;
        let size = (bytes.len() + chunk.len()) as u64;
        if size > limit {
            return Err(FetchError::TooLarge { size, limit });
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

async fn read_local(path: &Path, limit: u64) -> Result<Vec<u8>, FetchError> {
    let size = tokio::fs::metadata(path).await.map_err(FetchError::Local)?.len();
    if size > limit {
        return Err(FetchError::TooLarge { size, limit });
    }
    tokio::fs::read(path).await.map_err(FetchError::Local)
}

#[cfg(test)]
mod tests {
    use ferry_channel::memory::MemoryChannel;
    use ferry_channel::{AttachmentKind, ChannelError};

    use super::*;

    fn photo(size: Option<u64>) -> Attachment {
        Attachment { size_bytes: size, ..Attachment::remote(AttachmentKind::Image, "photo-1") }
    }

    #[tokio::test]
    async fn a_file_within_the_limit_arrives_whole() {
        let channel = MemoryChannel::new("memory", "default");
        let bytes: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        channel.serve_file("photo-1", bytes.clone());
        assert_eq!(fetch(&channel, &photo(None), 200_000).await.expect("fetched"), bytes);
    }

    #[tokio::test]
    async fn an_announced_size_over_the_limit_is_refused_before_asking() {
        // Nothing is served: asking the channel would fail with another error.
        let channel = MemoryChannel::new("memory", "default");
        let refused = fetch(&channel, &photo(Some(30 << 20)), 20 << 20).await;
        assert!(matches!(refused, Err(FetchError::TooLarge { size, limit }) if size == 30 << 20 && limit == 20 << 20));
    }

    #[tokio::test]
    async fn a_download_over_the_limit_is_refused_by_its_declared_length() {
        let channel = MemoryChannel::new("memory", "default");
        channel.serve_file("photo-1", vec![0; 100_001]);
        let refused = fetch(&channel, &photo(None), 100_000).await;
        assert!(matches!(refused, Err(FetchError::TooLarge { size: 100_001, .. })));
    }

    /// A platform that announces no length and streams forever, as a hostile or broken
    /// server may.
    struct EndlessChannel(ferry_channel::ChannelCapabilities);

    #[async_trait::async_trait]
    impl Channel for EndlessChannel {
        fn name(&self) -> &str {
            "endless"
        }
        fn account_id(&self) -> &str {
            "default"
        }
        fn capabilities(&self) -> &ferry_channel::ChannelCapabilities {
            &self.0
        }
        async fn start(&self) -> Result<ferry_channel::InboundStream, ChannelError> {
            Err(ChannelError::Closed)
        }
        async fn send(&self, _: ferry_channel::OutboundMessage) -> Result<ferry_channel::SentMessage, ChannelError> {
            Err(ChannelError::Closed)
        }
        async fn download(&self, _: &Attachment) -> Result<ferry_channel::Download, ChannelError> {
            let chunks = futures::stream::repeat_with(|| Ok(bytes::Bytes::from_static(&[7; 4096])));
            Ok(ferry_channel::Download { declared_len: None, body: chunks.boxed() })
        }
    }

    #[tokio::test]
    async fn a_download_without_a_length_stops_once_it_passes_the_limit() {
        let channel = EndlessChannel(ferry_channel::ChannelCapabilities::unrestricted());
        let refused = fetch(&channel, &photo(None), 1_000_000).await;
        assert!(matches!(refused, Err(FetchError::TooLarge { size, limit: 1_000_000 }) if size <= 1_000_000 + 4096));
    }

    #[tokio::test]
    async fn a_channel_error_is_passed_on_for_the_caller_to_explain() {
        let channel = MemoryChannel::new("memory", "default");
        let failed = fetch(&channel, &photo(None), 100).await;
        assert!(matches!(failed, Err(FetchError::Channel(ChannelError::Rejected { .. }))));
    }

    #[tokio::test]
    async fn an_upload_on_this_machine_is_read_from_its_path_within_the_limit() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("upload");
        std::fs::write(&path, b"hello").expect("write");
        let channel = MemoryChannel::new("memory", "default");
        let upload = Attachment { path: Some(path), ..Attachment::remote(AttachmentKind::Document, "x") };
        assert_eq!(fetch(&channel, &upload, 5).await.expect("read"), b"hello");
        assert!(matches!(fetch(&channel, &upload, 4).await, Err(FetchError::TooLarge { size: 5, limit: 4 })));
    }
}

//! The agent's files going out: what `message`'s `media` argument and a reply's `MEDIA:`
//! lines ([`crate::reply::media_lines`]) name, made into an [`Attachment`] a channel can
//! upload.
//!
//! A name is either an `http(s)` URL, fetched under `web_fetch`'s rules (the SSRF guard on
//! every hop, its timeout), or a path in the session's workspace, read through the same
//! kernel-confined open as the file tools: the agent cannot send a file it could not read.
//! The bytes are stored in the media store (named by their hash, so a resumed or retried
//! send uploads the same file) and their type is sniffed, never taken from the name.

#[cfg(feature = "media")]
use std::io::Cursor;
use std::sync::Arc;

use ferry_channel::{Attachment, AttachmentKind};

use super::{Media, sniff};
use crate::agent::tools::ToolError;
use crate::agent::tools::fs::read_to_send;
use crate::sandbox::Sandbox;

/// The largest file the agent may send: above every platform's bot limit but Slack's, and
/// a bound on the memory one send holds.
pub const OUTGOING_MAX_BYTES: u64 = 50 * 1024 * 1024;

/// What a run needs to attach files: the media (its store, and its fetcher for URLs:
/// without one URLs are refused) and the sandbox whose workspaces paths are read from
/// (none: paths are refused).
#[derive(Clone)]
pub struct Outgoing {
    media: Arc<Media>,
    sandbox: Option<Arc<Sandbox>>,
}

impl Outgoing {
    pub fn new(media: Arc<Media>, sandbox: Option<Arc<Sandbox>>) -> Self {
        Self { media, sandbox }
    }

    /// The file `named` (a workspace path of `session_key`, or a URL) as an attachment. The
    /// error is worded for the model, which can tell the user or try another file.
    pub async fn attach(&self, named: &str, session_key: &str) -> Result<Attachment, ToolError> {
        let named = named.trim();
        let (bytes, file_name) = if named.starts_with("http://") || named.starts_with("https://") {
            let web = self.media.web().ok_or_else(|| ToolError::new("files cannot be fetched from URLs here"))?;
            let (url, bytes) = web.fetch_file(named, OUTGOING_MAX_BYTES).await?;
            let name = url.path_segments().and_then(|mut segments| segments.next_back()).unwrap_or_default();
            (bytes, if name.is_empty() { "file".to_owned() } else { name.to_owned() })
        } else {
            let sandbox = self
                .sandbox
                .as_ref()
                .ok_or_else(|| ToolError::new("there is no workspace to send files from; give a URL"))?;
            let bytes = read_to_send(sandbox, session_key, named, OUTGOING_MAX_BYTES).await?;
            let name = std::path::Path::new(named).file_name().and_then(|name| name.to_str()).unwrap_or("file");
            (bytes, name.to_owned())
        };
        if bytes.is_empty() {
            return Err(ToolError::new(format!("`{named}` is empty; there is nothing to send")));
        }
        let sniffed = sniff(&bytes, Some(&file_name));
        let dimensions = (sniffed.kind == AttachmentKind::Image).then(|| dimensions(&bytes)).flatten();
        let size = bytes.len() as u64;
        let media = self.media.clone();
        let stored = tokio::task::spawn_blocking(move || media.store().put(&bytes))
            .await
            .map_err(|_| ToolError::new("storing the file failed"))?
            .map_err(|error| {
                tracing::error!(%error, "cannot store a file to send");
                ToolError::new("storing the file failed")
            })?;
        Ok(Attachment {
            kind: sniffed.kind,
            reference: file_name.clone(),
            mime_type: Some(sniffed.mime_type),
            file_name: Some(file_name),
            size_bytes: Some(size),
            path: Some(stored.path),
            dimensions,
            uploaded: None,
        })
    }
}

/// An image's pixel size from its header, without decoding it.
#[cfg(feature = "media")]
pub fn dimensions(bytes: &[u8]) -> Option<(u32, u32)> {
    image::ImageReader::new(Cursor::new(bytes)).with_guessed_format().ok()?.into_dimensions().ok()
}

/// Without the `media` feature no image header is read: platforms are sent the image without
/// its size, which they measure themselves.
#[cfg(not(feature = "media"))]
pub fn dimensions(_bytes: &[u8]) -> Option<(u32, u32)> {
    None
}

#[cfg(test)]
#[path = "outgoing/tests.rs"]
mod tests;

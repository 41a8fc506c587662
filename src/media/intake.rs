//! What a user's files become for the model: each attachment of a message is fetched within
//! the chat's size limit, sniffed, checked against the refused types, stored, and turned
//! into what a model can take ([`Media::receive`]):
//!
//! - an **image** is made model-ready ([`prepare_image`]) and kept as a [`MediaRef`] to that
//!   encoding, shown to models with image input;
//! - a **voice note or audio file** is transcribed when `[media.transcription]` is set;
//! - a **text document** (and a PDF's text) is put in the prompt up to
//!   `media.inline_text_chars`, with its name; a PDF is read in a child process
//!   ([`FileReader`]), and one that cannot be read is also told to its sender;
//! - anything else, and whatever failed, becomes a one-line note, so the model knows a file
//!   came and can say what it cannot read.
//!
//! A file that is refused (too large, a refused type, lost in download) is also told to its
//! sender ([`Received::refusals`]); the message's text runs all the same.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use ferry_channel::{Attachment, AttachmentKind, Channel};

use super::pdf::PdfError;
use super::reader::{FileReader, ReaderLimits};
use super::transcribe::{TranscribeError, Transcriber};
use super::{
    FetchError, ImageError, MediaStore, MediaStoreError, StoredMedia, fetch, human_size as megabytes, prepare_image,
    sniff,
};
use crate::agent::tools::web::WebFetch;
use crate::config::{Environment, MediaConfig};
use crate::types::conversation::{ImagePart, MediaRef};

/// The binary that parses users' files: the running daemon's own, through the kernel's link
/// to it. Unlike its path (`current_exe`), this still runs after the file was replaced by an
/// upgrade or a rebuild, and it is always the very version of the daemon, so both sides of
/// the reader's pipe speak the same protocol.
const OWN_BINARY: &str = "/proc/self/exe";

/// The daemon's media: the store, the operator's `[media]` settings and the transcription
/// service. Shared by the dispatcher (inbound files), the agent (images replayed from
/// history) and the web chat (uploads).
pub struct Media {
    store: MediaStore,
    config: MediaConfig,
    /// Fetches the URLs the agent attaches (`web_fetch`'s client and rules).
    web: Option<Arc<WebFetch>>,
    /// `[media.transcription]`, when configured.
    transcriber: Option<Transcriber>,
    /// Parses users' files (PDFs) in child processes, within `[media]`'s parse limits.
    reader: FileReader,
}

/// What one message's attachments gave.
#[derive(Debug, Default)]
pub struct Received {
    /// Text for the model, one block per file (a transcript, a document, a note), to follow
    /// the message's own text.
    pub text: Vec<String>,
    /// The files as the conversation remembers them; images carry their loaded part.
    pub media: Vec<MediaRef>,
    /// What the sender is told: files that were not taken, and why.
    pub refusals: Vec<String>,
}

impl Received {
    /// `text` followed by the blocks the files gave, a blank line apart.
    pub fn prompt_with(&self, text: &str) -> String {
        let mut prompt = text.to_owned();
        for block in &self.text {
            if !prompt.is_empty() {
                prompt.push_str("\n\n");
            }
            prompt.push_str(block);
        }
        prompt
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MediaSetupError {
    #[error(transparent)]
    Store(#[from] MediaStoreError),
    #[error(transparent)]
    Transcription(#[from] TranscribeError),
}

impl Media {
    /// The media of a daemon whose store is at `root`, with `config`'s settings (the
    /// transcription key may come from `env`). Files are parsed by this very binary started
    /// again as a child ([`OWN_BINARY`]). Fails when the directory cannot be used or the
    /// transcription key cannot be found.
    pub fn open(root: &Path, config: &MediaConfig, env: &Environment) -> Result<Self, MediaSetupError> {
        let ttl = Duration::from_secs(config.ttl_days.saturating_mul(24 * 60 * 60));
        let transcriber = config.transcription.as_ref().map(|settings| Transcriber::new(settings, env)).transpose()?;
        let limits = ReaderLimits {
            timeout: Duration::from_secs(config.parse_timeout_seconds),
            memory_bytes: config.parse_memory_mb.saturating_mul(1024 * 1024),
        };
        let reader = FileReader::new(PathBuf::from(OWN_BINARY), limits);
        Ok(Self { store: MediaStore::open(root, ttl)?, config: config.clone(), web: None, transcriber, reader })
    }

    /// Lets the agent attach files by URL, fetched by `web` (under its SSRF guard).
    pub fn with_web(mut self, web: WebFetch) -> Self {
        self.web = Some(Arc::new(web));
        self
    }

    pub(super) fn web(&self) -> Option<&WebFetch> {
        self.web.as_deref()
    }

    pub fn store(&self) -> &MediaStore {
        &self.store
    }

    pub fn config(&self) -> &MediaConfig {
        &self.config
    }

    /// Takes in the attachments of one message that arrived on `channel`. Never fails: what
    /// cannot be had becomes a note for the model and, when the sender should know, a
    /// refusal.
    pub async fn receive(self: &Arc<Self>, channel: &dyn Channel, attachments: &[Attachment]) -> Received {
        let mut received = Received::default();
        for attachment in attachments {
            self.receive_one(channel, attachment, &mut received).await;
        }
        received
    }

    async fn receive_one(self: &Arc<Self>, channel: &dyn Channel, attachment: &Attachment, received: &mut Received) {
        let name = label(attachment);
        let limit = self.config.max_bytes(channel.name());
        let bytes = match fetch(channel, attachment, limit).await {
            Ok(bytes) => bytes,
            Err(FetchError::TooLarge { size, limit }) => {
                received.refusals.push(format!(
                    "📎 {name} is {}, over the {} limit here, so I did not open it.",
                    megabytes(size),
                    megabytes(limit)
                ));
                received.text.push(format!(
                    "[{name} ({}) not opened: over the {} limit]",
                    megabytes(size),
                    megabytes(limit)
                ));
                return;
            }
            Err(error) => {
                tracing::warn!(channel = channel.name(), file = %name, %error, "cannot fetch an attachment");
                received.refusals.push(format!("📎 I could not download {name}. Please send it again."));
                received.text.push(format!("[{name} could not be downloaded]"));
                return;
            }
        };
        let sniffed = sniff(&bytes, attachment.file_name.as_deref());
        if self.config.denies(&sniffed.mime_type) {
            tracing::info!(channel = channel.name(), mime_type = %sniffed.mime_type, "refused an attachment by its type");
            received.refusals.push(format!("📎 {name} is a kind of file I do not accept ({}).", sniffed.mime_type));
            received
                .text
                .push(format!("[{name} ({}) refused: files of this type are not accepted]", sniffed.mime_type));
            return;
        }
        let size = bytes.len() as u64;
        let described = format!("{name} ({}, {})", sniffed.mime_type, megabytes(size));
        if sniffed.kind == AttachmentKind::Image {
            match self.take_image(bytes, attachment).await {
                Ok(media) => received.media.push(media),
                Err(Trouble::Image(error)) => received.text.push(format!("[{described} could not be shown: {error}]")),
                Err(Trouble::Store(error)) => self.store_trouble(&name, &error, received),
            }
            return;
        }
        let stored = match self.put(bytes.clone()).await {
            Ok(stored) => stored,
            Err(error) => return self.store_trouble(&name, &error, received),
        };
        let mut reference = MediaRef {
            kind: if is_audio(attachment, &sniffed.mime_type) { AttachmentKind::Audio } else { sniffed.kind },
            sha256: stored.sha256,
            mime_type: sniffed.mime_type.clone(),
            size_bytes: size,
            width: None,
            height: None,
            file_name: attachment.file_name.clone(),
            image: None,
        };
        let block = if reference.kind == AttachmentKind::Audio {
            self.transcript(bytes, attachment, &sniffed.mime_type, &described).await
        } else if sniffed.is_text {
            let text = String::from_utf8_lossy(&bytes);
            self.inlined(&described, &text, 0)
        } else if sniffed.mime_type == "application/pdf" {
            // One character more than is shown, so `inlined` notes the cut.
            let keep = self.config.inline_text_chars.saturating_add(1);
            match self.reader.pdf_text(bytes, keep).await {
                Ok(read) => self.inlined(&format!("{described}, its text"), &read.text, read.more_chars),
                Err(PdfError::NoText) => {
                    format!("[{described}: the PDF has no text layer (a scan?), so it cannot be read]")
                }
                Err(error) => {
                    tracing::info!(channel = channel.name(), file = %name, %error, "a PDF could not be read");
                    received.refusals.push(format!("📎 I could not read {name}: {error}."));
                    format!("[{described} could not be read: {error}]")
                }
            }
        } else {
            if sniffed.kind == AttachmentKind::Video {
                reference.kind = AttachmentKind::Video;
            }
            format!("[{described} received: this kind of file cannot be read]")
        };
        received.text.push(block);
        received.media.push(reference);
    }

    /// A voice note's or audio file's transcript block, or the note saying why there is none.
    async fn transcript(&self, bytes: Vec<u8>, attachment: &Attachment, mime_type: &str, described: &str) -> String {
        let Some(transcriber) = &self.transcriber else {
            return format!("[{described} not transcribed: no transcription service is configured]");
        };
        // Unnamed, it goes as `voice`; the transcriber adds the extension its type implies.
        let file_name = attachment.file_name.as_deref().unwrap_or("voice");
        match transcriber.transcribe(bytes, file_name, mime_type).await {
            Ok(text) if text.trim().is_empty() => format!("[{described}: the transcript is empty]"),
            Ok(text) => format!("[voice note transcript] {}", text.trim()),
            Err(error) => {
                tracing::warn!(%error, "transcribing a voice note failed");
                format!("[{described} could not be transcribed: {error}]")
            }
        }
    }

    /// A document's text in the prompt, cut at `media.inline_text_chars`; `more` characters
    /// after `text` were already left out.
    fn inlined(&self, described: &str, text: &str, more: usize) -> String {
        let cap = self.config.inline_text_chars;
        let (shown, left) = match text.char_indices().nth(cap) {
            Some((cut, _)) => (&text[..cut], text[cut..].chars().count() + more),
            None => (text, more),
        };
        let mut block = format!("[file {described}]\n{}", shown.trim_end());
        if left > 0 {
            block.push_str(&format!("\n[… {left} more characters not shown]"));
        }
        block.push_str("\n[end of file]");
        block
    }

    fn store_trouble(&self, name: &str, error: &MediaStoreError, received: &mut Received) {
        tracing::error!(file = %name, %error, "cannot store an attachment");
        received.refusals.push(format!("📎 I could not keep {name} just now. Please send it again in a moment."));
        received.text.push(format!("[{name} could not be stored]"));
    }

    /// An image made model-ready (on a blocking thread: decoding a photo is CPU work) and
    /// stored in that encoding.
    async fn take_image(self: &Arc<Self>, bytes: Vec<u8>, attachment: &Attachment) -> Result<MediaRef, Trouble> {
        let media = self.clone();
        let joined = tokio::task::spawn_blocking(move || -> Result<(ImagePart, StoredMedia), Trouble> {
            let part = prepare_image(&bytes).map_err(Trouble::Image)?;
            drop(bytes);
            let encoded =
                BASE64.decode(&part.data).map_err(|error| Trouble::Image(ImageError::Encode(error.to_string())))?;
            let stored = media.store.put(&encoded).map_err(Trouble::Store)?;
            Ok((part, stored))
        })
        .await;
        let (part, stored) = joined.map_err(|error| Trouble::Image(ImageError::Encode(error.to_string())))??;
        Ok(MediaRef {
            kind: AttachmentKind::Image,
            sha256: stored.sha256,
            mime_type: part.media_type.clone(),
            size_bytes: stored.size_bytes,
            width: Some(part.width),
            height: Some(part.height),
            file_name: attachment.file_name.clone(),
            image: Some(part),
        })
    }

    async fn put(self: &Arc<Self>, bytes: Vec<u8>) -> Result<StoredMedia, MediaStoreError> {
        let media = self.clone();
        match tokio::task::spawn_blocking(move || media.store.put(&bytes)).await {
            Ok(stored) => stored,
            Err(error) => {
                Err(MediaStoreError::Io { path: self.store.root().to_owned(), source: std::io::Error::other(error) })
            }
        }
    }

    /// The model-ready image `media` refers to, from the store; `None` when it is not an
    /// image or is no longer kept.
    pub async fn load_image(self: &Arc<Self>, media: &MediaRef) -> Option<ImagePart> {
        if media.kind != AttachmentKind::Image {
            return None;
        }
        let (width, height) = (media.width?, media.height?);
        let path = self.store.path_of(&media.sha256).ok()?;
        let bytes = match tokio::fs::read(&path).await {
            Ok(bytes) => bytes,
            Err(error) => {
                tracing::debug!(sha256 = %media.sha256, %error, "a remembered image is no longer stored");
                return None;
            }
        };
        Some(ImagePart { media_type: media.mime_type.clone(), data: BASE64.encode(bytes), width, height })
    }
}

/// Why an image was not taken.
enum Trouble {
    Image(ImageError),
    Store(MediaStoreError),
}

/// How a file is named to its sender and the model: its name, else what it is.
fn label(attachment: &Attachment) -> String {
    match (&attachment.file_name, attachment.kind) {
        (Some(name), _) if !name.trim().is_empty() => format!("\"{}\"", name.trim()),
        (_, AttachmentKind::Image) => "the photo".to_owned(),
        (_, AttachmentKind::Audio) => "the voice note".to_owned(),
        (_, AttachmentKind::Video) => "the video".to_owned(),
        (_, AttachmentKind::Document | AttachmentKind::Other) => "the file".to_owned(),
    }
}

/// Audio by its bytes, or a voice note the platform labelled as audio whose container
/// sniffs as video (a browser's WebM recording).
fn is_audio(attachment: &Attachment, mime_type: &str) -> bool {
    mime_type.starts_with("audio/") || (attachment.kind == AttachmentKind::Audio && mime_type.starts_with("video/"))
}

#[cfg(test)]
#[path = "intake/tests.rs"]
mod tests;

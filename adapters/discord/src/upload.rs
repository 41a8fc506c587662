//! Outbound files: what a message with an attachment uploads, and under which name.
//!
//! Discord takes files with the message itself: `POST /channels/{id}/messages` as
//! `multipart/form-data`, with the JSON body as the `payload_json` part, one `files[n]` part
//! per file, and `attachments: [{id: n, filename}]` in the JSON naming them (API docs,
//! "Uploading Files"). The request is sent by `rest.rs`; this module reads the file and
//! decides its name and type.
//!
//! How a file is shown is Discord's choice, made from the file's name: an image (`.png`,
//! `.jpg`, `.gif`, `.webp`) is shown inline, a video or audio file gets a player, anything
//! else is a download. The core names files by their content and sniffs their MIME type, so
//! a name without an extension gets the one its MIME type calls for; a name that has one is
//! kept, as the user or the agent chose it.
//!
//! The file is read whole: the core keeps it within the channel's `max_upload_bytes`
//! (10 MiB), and reading it again for every attempt means a retried send uploads the same
//! bytes (files in the media store are immutable).

use ferry_channel::{Attachment, ChannelError};
use serde_json::{Value, json};

/// Discord's limit on files in one message (API docs, "Create Message": up to 10).
pub(crate) const MAX_FILES: usize = 10;

/// The type sent for a file whose MIME type the core did not know.
const FALLBACK_MIME: &str = "application/octet-stream";

/// One file to upload, read from disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileUpload {
    /// The name Discord shows (and decides the preview by).
    pub(crate) file_name: String,
    /// The `Content-Type` of the file's part.
    pub(crate) mime_type: String,
    pub(crate) bytes: Vec<u8>,
}

/// Reads the files of an outbound message. Every attachment must name a local file
/// (`path`): the core only hands over files it has stored. A file that cannot be read is a
/// refusal, not a transient failure: trying again will not make it appear.
pub(crate) async fn read_files(attachments: &[Attachment]) -> Result<Vec<FileUpload>, ChannelError> {
    if attachments.len() > MAX_FILES {
        return Err(ChannelError::Rejected {
            reason: format!("{} files in one message; Discord takes at most {MAX_FILES}", attachments.len()),
        });
    }
    let mut files = Vec::with_capacity(attachments.len());
    for attachment in attachments {
        let file_name = upload_name(attachment);
        let Some(path) = &attachment.path else {
            return Err(ChannelError::Rejected {
                reason: format!("the outbound attachment {file_name:?} has no local file to upload"),
            });
        };
        let bytes = tokio::fs::read(path).await.map_err(|error| ChannelError::Rejected {
            reason: format!("cannot read the file to upload as {file_name:?} ({}): {error}", path.display()),
        })?;
        let mime_type = attachment.mime_type.clone().unwrap_or_else(|| FALLBACK_MIME.to_owned());
        files.push(FileUpload { file_name, mime_type, bytes });
    }
    Ok(files)
}

/// The `attachments` array of `payload_json`: entry `n` describes part `files[n]`.
pub(crate) fn attachments_json(files: &[FileUpload]) -> Value {
    files.iter().enumerate().map(|(id, file)| json!({ "id": id, "filename": file.file_name })).collect()
}

/// The name a file is uploaded under: the attachment's own name (else the stored file's),
/// without any directory, with an extension from its MIME type when it has none.
pub(crate) fn upload_name(attachment: &Attachment) -> String {
    let stored = attachment.path.as_ref().and_then(|path| path.file_name()).map(|name| name.to_string_lossy());
    let given = attachment.file_name.as_deref().or(stored.as_deref()).unwrap_or_default();
    // A name is shown, never opened as a path: keep its last component, without control
    // characters.
    let base = given.rsplit(['/', '\\']).next().unwrap_or_default();
    let clean: String = base.chars().filter(|c| !c.is_control()).collect();
    let clean = clean.trim();
    let name = if clean.is_empty() || clean == "." || clean == ".." { "file" } else { clean };
    let has_extension = name.rfind('.').is_some_and(|dot| dot > 0 && dot + 1 < name.len());
    match extension_for(attachment.mime_type.as_deref()) {
        Some(extension) if !has_extension => format!("{name}.{extension}"),
        _ => name.to_owned(),
    }
}

/// The usual extension of a MIME type, for the types Discord previews and a few common
/// documents.
fn extension_for(mime_type: Option<&str>) -> Option<&'static str> {
    let essence = mime_type?.split(';').next()?.trim().to_ascii_lowercase();
    Some(match essence.as_str() {
        "image/png" => "png",
        "image/jpeg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "video/mp4" => "mp4",
        "video/webm" => "webm",
        "video/quicktime" => "mov",
        "audio/mpeg" => "mp3",
        "audio/ogg" => "ogg",
        "audio/wav" | "audio/x-wav" => "wav",
        "audio/mp4" => "m4a",
        "audio/flac" => "flac",
        "application/pdf" => "pdf",
        "text/plain" => "txt",
        "application/json" => "json",
        "application/zip" => "zip",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use ferry_channel::AttachmentKind;

    use super::*;

    fn attachment(name: Option<&str>, mime: Option<&str>, path: Option<&str>) -> Attachment {
        let mut attachment = Attachment::remote(AttachmentKind::Document, "log name");
        attachment.file_name = name.map(str::to_owned);
        attachment.mime_type = mime.map(str::to_owned);
        attachment.path = path.map(PathBuf::from);
        attachment
    }

    #[test]
    fn a_name_without_an_extension_gets_the_one_its_type_calls_for() {
        assert_eq!(upload_name(&attachment(Some("chart"), Some("image/png"), None)), "chart.png");
        assert_eq!(upload_name(&attachment(Some("chart.PNG"), Some("image/png"), None)), "chart.PNG");
        assert_eq!(upload_name(&attachment(Some("report.v2"), Some("application/pdf"), None)), "report.v2");
        assert_eq!(upload_name(&attachment(Some("notes"), Some("application/x-unknown"), None)), "notes");
        assert_eq!(upload_name(&attachment(Some(".bashrc"), Some("text/plain"), None)), ".bashrc.txt");
    }

    #[test]
    fn the_stored_file_names_an_unnamed_attachment_and_paths_are_cut_to_their_last_part() {
        let stored = attachment(None, Some("image/jpeg"), Some("/var/lib/ferry/media/ab12cd"));
        assert_eq!(upload_name(&stored), "ab12cd.jpg");
        assert_eq!(upload_name(&attachment(Some("../../etc/passwd"), None, None)), "passwd");
        assert_eq!(upload_name(&attachment(Some("a\\b\u{0}c.txt"), None, None)), "bc.txt");
        assert_eq!(upload_name(&attachment(Some(".."), None, None)), "file");
        assert_eq!(upload_name(&attachment(None, None, None)), "file");
    }

    #[test]
    fn each_file_is_described_by_its_part_index() {
        let file = |name: &str| FileUpload { file_name: name.into(), mime_type: FALLBACK_MIME.into(), bytes: vec![] };
        assert_eq!(
            attachments_json(&[file("a.png"), file("b.pdf")]),
            json!([{"id": 0, "filename": "a.png"}, {"id": 1, "filename": "b.pdf"}])
        );
    }

    #[tokio::test]
    async fn a_missing_or_unreadable_file_is_a_refusal() {
        let error = read_files(&[attachment(Some("x.png"), None, None)]).await.unwrap_err();
        assert!(matches!(error, ChannelError::Rejected { .. }), "{error}");
        let missing = attachment(Some("x.png"), None, Some("/nonexistent/ferry/x.png"));
        assert!(matches!(read_files(&[missing]).await, Err(ChannelError::Rejected { .. })));
    }
}

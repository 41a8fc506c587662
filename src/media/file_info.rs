//! A stored file as a client sees it: its reference in the media store (the id a client
//! downloads it by), its name, type, size and, for an image, its pixel size. The web chat's
//! upload answers with one, and the files a reply or a `message` send carries reach web
//! chat clients as these (`files` on `chat` events and on the run's `lifecycle` end).
//! Never a local path: a client learns where nothing is on this machine.

use ferry_channel::Attachment;
use serde::Serialize;

use crate::types::conversation::MediaRef;

/// One stored file, for a client. Serializes as
/// `{ id, name?, mimeType, size, width?, height? }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FileInfo {
    /// The SHA-256 of the stored bytes (64 lowercase hex digits): the media store's name for
    /// the file, and the id in `GET /webchat/media/<id>`.
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Sniffed from the bytes.
    pub mime_type: String,
    /// Bytes.
    pub size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub width: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub height: Option<u32>,
}

impl FileInfo {
    /// A file the core sends ([`super::Outgoing::attach`]): it is in the media store, its
    /// path's file name is its hash. `None` for an attachment that is not a stored file.
    pub fn of_attachment(attachment: &Attachment) -> Option<Self> {
        let id = attachment.path.as_ref()?.file_name()?.to_str()?;
        if !is_reference(id) {
            return None;
        }
        Some(Self {
            id: id.to_owned(),
            name: attachment.file_name.clone(),
            mime_type: attachment.mime_type.clone().unwrap_or_else(|| "application/octet-stream".to_owned()),
            size: attachment.size_bytes.unwrap_or(0),
            width: attachment.dimensions.map(|(width, _)| width),
            height: attachment.dimensions.map(|(_, height)| height),
        })
    }

    /// A file a conversation remembers (a user's upload or photo).
    pub fn of_ref(media: &MediaRef) -> Self {
        Self {
            id: media.sha256.clone(),
            name: media.file_name.clone(),
            mime_type: media.mime_type.clone(),
            size: media.size_bytes,
            width: media.width,
            height: media.height,
        }
    }
}

/// Whether `id` has the form of a media reference: 64 lowercase hex digits.
pub fn is_reference(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
}

#[cfg(test)]
mod tests {
    use ferry_channel::AttachmentKind;

    use super::*;

    #[test]
    fn a_stored_attachment_is_known_by_its_hash_and_never_by_its_path() {
        let sha = "ab".repeat(32);
        let attachment = Attachment {
            mime_type: Some("image/png".into()),
            file_name: Some("chart.png".into()),
            size_bytes: Some(1234),
            path: Some(format!("/var/lib/ferry/media/ab/{sha}").into()),
            dimensions: Some((640, 480)),
            ..Attachment::remote(AttachmentKind::Image, "chart.png")
        };
        let info = FileInfo::of_attachment(&attachment).expect("a stored file");
        let json = serde_json::to_value(&info).expect("json");
        assert_eq!(
            json,
            serde_json::json!({"id": sha, "name": "chart.png", "mimeType": "image/png", "size": 1234, "width": 640, "height": 480})
        );
        let elsewhere = Attachment { path: Some("/tmp/chart.png".into()), ..attachment };
        assert_eq!(FileInfo::of_attachment(&elsewhere), None, "only files of the store have an id");
    }
}

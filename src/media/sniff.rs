//! What a file is, from its bytes: never from its name or the platform's label, which
//! the sender controls (a `photo.jpg` may be a program; Slack's sign-in page arrives as a
//! "file" when a token lacks its scope).

use ferry_channel::AttachmentKind;

/// The most bytes looked at to tell text from binary.
const TEXT_PROBE: usize = 8 * 1024;

/// A file's sniffed type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sniffed {
    pub mime_type: String,
    pub kind: AttachmentKind,
    /// Readable as UTF-8 text (plain text, markdown, CSV, JSON, source code).
    pub is_text: bool,
}

/// Sniffs `bytes`. A known magic number decides; otherwise UTF-8 without NUL bytes is text
/// (its subtype taken from `file_name`'s extension where it names a text format), and
/// anything else is `application/octet-stream`.
pub fn sniff(bytes: &[u8], file_name: Option<&str>) -> Sniffed {
    if let Some(found) = infer::get(bytes) {
        let mime_type = found.mime_type().to_owned();
        // infer knows a few text formats by their start (a `#!` script, `<?xml`).
        let is_text = found.matcher_type() == infer::MatcherType::Text && looks_like_text(bytes);
        let kind = if is_text { AttachmentKind::Document } else { AttachmentKind::from_mime(Some(&mime_type)) };
        return Sniffed { is_text, kind, mime_type };
    }
    if looks_like_text(bytes) {
        let mime_type = text_subtype(file_name).to_owned();
        return Sniffed { mime_type, kind: AttachmentKind::Document, is_text: true };
    }
    Sniffed { mime_type: "application/octet-stream".to_owned(), kind: AttachmentKind::Other, is_text: false }
}

/// UTF-8 without NUL in the first [`TEXT_PROBE`] bytes (a character cut at the end of the
/// probe does not count against it).
fn looks_like_text(bytes: &[u8]) -> bool {
    let probe = &bytes[..bytes.len().min(TEXT_PROBE)];
    if probe.is_empty() || probe.contains(&0) {
        return false;
    }
    match std::str::from_utf8(probe) {
        Ok(_) => true,
        Err(error) => error.error_len().is_none() && probe.len() == TEXT_PROBE,
    }
}

/// The text type a file name's extension names; `text/plain` for the rest.
fn text_subtype(file_name: Option<&str>) -> &'static str {
    let extension = file_name
        .and_then(|name| name.rsplit_once('.'))
        .map(|(_, extension)| extension.to_ascii_lowercase())
        .unwrap_or_default();
    match extension.as_str() {
        "md" | "markdown" => "text/markdown",
        "csv" => "text/csv",
        "tsv" => "text/tab-separated-values",
        "json" => "application/json",
        "html" | "htm" => "text/html",
        "xml" => "text/xml",
        "yaml" | "yml" => "application/yaml",
        _ => "text/plain",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magic_numbers_win_over_the_name() {
        let png = [0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13];
        let sniffed = sniff(&png, Some("notes.txt"));
        assert_eq!(
            (sniffed.mime_type.as_str(), sniffed.kind, sniffed.is_text),
            ("image/png", AttachmentKind::Image, false)
        );
        let mut elf = vec![0x7F, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0];
        elf.resize(64, 0);
        assert_eq!(sniff(&elf, Some("photo.jpg")).mime_type, "application/x-executable");
        assert_eq!(sniff(b"%PDF-1.7\n", None).mime_type, "application/pdf");
    }

    #[test]
    fn utf8_is_text_typed_by_its_extension_and_binary_is_not() {
        let csv = sniff("name,city\nZoë,Köln\n".as_bytes(), Some("people.CSV"));
        assert_eq!((csv.mime_type.as_str(), csv.is_text), ("text/csv", true));
        assert_eq!(sniff(b"fn main() {}", Some("main.rs")).mime_type, "text/plain");
        let binary = sniff(&[1, 2, 0, 3], Some("data.txt"));
        assert_eq!((binary.mime_type.as_str(), binary.kind), ("application/octet-stream", AttachmentKind::Other));
        assert!(!sniff(b"", None).is_text, "an empty file is not a document");
    }

    #[test]
    fn a_character_cut_by_the_probe_still_reads_as_text() {
        let mut text = "a".repeat(TEXT_PROBE - 1).into_bytes();
        text.extend_from_slice("é and more".as_bytes());
        assert!(sniff(&text, None).is_text);
    }
}

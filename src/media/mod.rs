//! Media: files users send and files the agent sends back, made ready for each side —
//! images decoded under limits and downscaled for models, voice notes transcribed, PDFs
//! read, everything kept in a store by hash and sent out within each platform's limits.
//!
//! Models take images only within limits (Anthropic: 5 MB of base64 per image; both vendors
//! scale anything larger than about 1,568 px down themselves, at the caller's cost), and
//! only in a few formats. Every image therefore passes through [`prepare_image`] before it
//! reaches a conversation: decoded under memory limits (a small file can claim gigapixels),
//! downscaled, re-encoded and measured. What comes out is an
//! [`ImagePart`](crate::types::conversation::ImagePart) that every provider can send as is.
//!
//! Documents and voice notes reach a model as text: a PDF through [`pdf_text`] (fenced against
//! hostile files: panics, self-drawing forms), run by a [`FileReader`] in a sandboxed child
//! process so that endless loops and memory bombs cost that child alone, a recording through
//! a [`Transcriber`] for the OpenAI-compatible endpoint of `[media.transcription]`.
//!
//! ```
//! # fn demo(bytes: &[u8]) -> Result<(), ferry::media::ImageError> {
//! let part = ferry::media::prepare_image(bytes)?;
//! assert!(part.width.max(part.height) <= ferry::media::MAX_SIDE);
//! println!("{}", part.describe()); // e.g. "image/jpeg 1568×1176, 312 KB"
//! # Ok(()) }
//! ```

mod fetch;
mod file_info;
mod image;
mod intake;
mod outgoing;
mod pdf;
pub(crate) mod reader;
mod sniff;
mod store;
pub(crate) mod transcribe;

pub use self::fetch::{FetchError, fetch};
pub use self::file_info::{FileInfo, is_reference};
pub use self::image::{
    ImageError, ImageLimits, MAX_BASE64_BYTES, MAX_DECODE_BYTES, MAX_DECODE_SIDE, MAX_SIDE, prepare_image,
    prepare_image_within,
};
pub use self::intake::{Media, MediaSetupError, Received};
pub use self::outgoing::{OUTGOING_MAX_BYTES, Outgoing, dimensions};
pub use self::pdf::{MAX_FORM_DEPTH, PdfError, pdf_text};
pub use self::reader::{FileReader, PdfText, ReaderLimits};
pub use self::sniff::{Sniffed, sniff};
pub use self::store::{MediaStore, MediaStoreError, StoredMedia, Swept, hex_digest};
pub use self::transcribe::{TranscribeError, Transcriber};

/// A file size for people: `30 MB`, `1.5 MB`, `512 KB` (binary units, as platforms state
/// their limits).
pub fn human_size(bytes: u64) -> String {
    const MB: u64 = 1024 * 1024;
    if bytes >= MB {
        let tenths = bytes * 10 / MB;
        if tenths.is_multiple_of(10) {
            format!("{} MB", tenths / 10)
        } else {
            format!("{}.{} MB", tenths / 10, tenths % 10)
        }
    } else {
        format!("{} KB", bytes.div_ceil(1024))
    }
}

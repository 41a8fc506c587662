//! One image made ready for a model: sniffed, decoded under limits, downscaled and
//! re-encoded until it fits ([`prepare_image`]).
//!
//! The steps, and why:
//! 1. **Sniff** the format from the first bytes, never from a file name: a tool reading
//!    `photo.png` may find a JPEG, or a text file.
//! 2. **Decode** PNG, JPEG, WebP or GIF (its first frame), refusing before any pixel is
//!    allocated an image whose header claims more than [`MAX_DECODE_SIDE`] pixels a side or
//!    [`MAX_DECODE_BYTES`] decoded: a few kilobytes of PNG can claim gigabytes. A JPEG's EXIF
//!    orientation is applied, since re-encoding drops the tag.
//! 3. **Downscale** to at most [`MAX_SIDE`] on the longest side, keeping the aspect ratio,
//!    never upscaling.
//! 4. **Re-encode**, always: it drops metadata (a photo's EXIF can hold its GPS position)
//!    and yields a format every provider takes. An image with transparency becomes PNG.
//!    An opaque one from a lossless source (PNG, GIF: screenshots, diagrams) becomes PNG too,
//!    so text stays sharp, unless that is too big; photos (JPEG, WebP) become JPEG. JPEG
//!    quality steps down, then the size does, until the base64 fits [`MAX_BASE64_BYTES`].

use crate::types::conversation::ImagePart;

// Decoding, resizing and encoding: the `media` feature.
#[cfg(feature = "media")]
mod codec;

/// The longest side, in pixels, of an image sent to a model. Anthropic's documented limit
/// before it downscales an image itself (costing time to first token, adding nothing), and
/// within what OpenAI's high-detail mode uses (issue 21).
pub const MAX_SIDE: u32 = 1_568;

/// The most base64 one image may take: Anthropic refuses an image whose base64 exceeds
/// 5 MiB (`image exceeds 5 MB maximum: … bytes > 5242880 bytes`); the limit counts the
/// base64 text, not the decoded bytes, so an image of 4.9 MB would be refused.
pub const MAX_BASE64_BYTES: usize = 5 * 1024 * 1024;

/// Images wider or taller than this are not decoded. Larger than any camera's output;
/// anything bigger is almost certainly a decompression bomb.
pub const MAX_DECODE_SIDE: u32 = 16_384;

/// The most memory one decoded image may take (its pixels, before downscaling). 256 MiB
/// holds a 64-megapixel RGBA photo, more than phones take, and stays well inside this
/// machine class's memory even with a few tool calls at once.
pub const MAX_DECODE_BYTES: u64 = 256 * 1024 * 1024;

/// The size an image must end up within. [`ImageLimits::default`] is what models take;
/// smaller limits suit previews and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageLimits {
    /// The longest side, in pixels.
    pub max_side: u32,
    /// The most base64 characters the encoded image may take.
    pub max_base64_bytes: usize,
}

impl Default for ImageLimits {
    fn default() -> Self {
        Self { max_side: MAX_SIDE, max_base64_bytes: MAX_BASE64_BYTES }
    }
}

/// Why an image could not be made ready. The messages are for the model (a tool's error
/// result) and for operators, so they name the format and sizes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    #[error("not an image: the first bytes match no image format (PNG, JPEG, WebP and GIF are supported)")]
    UnknownFormat,
    #[error("{0} images are not supported; PNG, JPEG, WebP and GIF are")]
    Unsupported(String),
    #[error("the {format} image is corrupt or truncated: {reason}")]
    Corrupt { format: &'static str, reason: String },
    #[error(
        "the {format} image is too large to open: {width}×{height} pixels (at most {MAX_DECODE_SIDE} pixels a side \
         and {} MB decoded)",
        MAX_DECODE_BYTES / (1024 * 1024)
    )]
    TooLarge { format: &'static str, width: u32, height: u32 },
    #[error("the image does not fit in {max_base64_bytes} bytes of base64, even at {width}×{height} pixels")]
    DoesNotFit { max_base64_bytes: usize, width: u32, height: u32 },
    #[error("cannot encode the image: {0}")]
    Encode(String),
    /// This ferry was built without the `media` feature: no image is decoded.
    #[error("images are not read here: decoding them {}", crate::config::features::needs("media"))]
    NotBuilt,
}

/// Makes `bytes` (a PNG, JPEG, WebP or GIF file) ready for a model, within
/// [`ImageLimits::default`]: at most [`MAX_SIDE`] px on its longest side and
/// [`MAX_BASE64_BYTES`] of base64. CPU-bound (tens of milliseconds for a photo in a release
/// build): async callers run it on a blocking thread.
pub fn prepare_image(bytes: &[u8]) -> Result<ImagePart, ImageError> {
    prepare_image_within(bytes, ImageLimits::default())
}

/// [`prepare_image`] within other limits.
#[cfg(feature = "media")]
pub fn prepare_image_within(bytes: &[u8], limits: ImageLimits) -> Result<ImagePart, ImageError> {
    codec::prepare(bytes, limits)
}

/// A build without the `media` feature decodes no image: the caller turns the error into the
/// one-line note every unreadable image becomes.
#[cfg(not(feature = "media"))]
pub fn prepare_image_within(_bytes: &[u8], _limits: ImageLimits) -> Result<ImagePart, ImageError> {
    Err(ImageError::NotBuilt)
}

#[cfg(test)]
#[cfg(feature = "media")]
mod tests;

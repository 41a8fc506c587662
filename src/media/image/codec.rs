//! Steps 1 to 4 of [`super`]'s doc: the part of image preparation that needs the `image` and
//! `fast_image_resize` crates (the `media` feature).

use std::io::Cursor;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use fast_image_resize::images::ImageRef;
use fast_image_resize::{FilterType as ResizeFilter, PixelType, ResizeAlg, ResizeOptions, Resizer};
use image::codecs::jpeg::JpegEncoder;
use image::codecs::png::{CompressionType, FilterType as PngFilter, PngEncoder};
use image::imageops::FilterType;
use image::metadata::Orientation;
use image::{DynamicImage, ExtendedColorType, ImageDecoder, ImageEncoder, ImageFormat, ImageReader, Limits};
use image::{RgbImage, RgbaImage};

use super::{ImageError, ImageLimits, MAX_DECODE_BYTES, MAX_DECODE_SIDE};
use crate::types::conversation::ImagePart;

/// JPEG qualities tried in turn until the image fits. 85 is visually lossless for photos;
/// below 40 artefacts hurt more than a smaller image does.
pub(super) const JPEG_QUALITIES: [u8; 4] = [85, 70, 55, 40];

/// Sizes tried in turn (as a share of the fitted size) when no encoding fits.
const SHRINK_STEPS: [f64; 5] = [1.0, 0.75, 0.5, 0.35, 0.25];

/// [`super::prepare_image_within`], built.
pub(super) fn prepare(bytes: &[u8], limits: ImageLimits) -> Result<ImagePart, ImageError> {
    let format = sniff(bytes)?;
    let decoded = decode(bytes, format)?;
    let (width, height) = fit(decoded.width(), decoded.height(), limits.max_side.max(1));
    let pixels = Pixels::from(decoded).resized(width, height);
    let lossless_first = matches!(format, ImageFormat::Png | ImageFormat::Gif);
    for step in SHRINK_STEPS {
        let (step_width, step_height) = scaled(width, height, step);
        let resized;
        let candidate = if (step_width, step_height) == (width, height) {
            &pixels
        } else {
            resized = pixels.resized_ref(step_width, step_height);
            &resized
        };
        if let Some(part) = candidate.encode_within(lossless_first, limits.max_base64_bytes)? {
            return Ok(part);
        }
    }
    let (width, height) = scaled(width, height, SHRINK_STEPS[SHRINK_STEPS.len() - 1]);
    Err(ImageError::DoesNotFit { max_base64_bytes: limits.max_base64_bytes, width, height })
}

/// The format the bytes are in, if it is one models take.
fn sniff(bytes: &[u8]) -> Result<ImageFormat, ImageError> {
    match image::guess_format(bytes) {
        Ok(format @ (ImageFormat::Png | ImageFormat::Jpeg | ImageFormat::WebP | ImageFormat::Gif)) => Ok(format),
        Ok(other) => {
            let name = other.extensions_str().first().map_or_else(|| format!("{other:?}"), |ext| ext.to_uppercase());
            Err(ImageError::Unsupported(name))
        }
        Err(_) => Err(ImageError::UnknownFormat),
    }
}

fn format_name(format: ImageFormat) -> &'static str {
    match format {
        ImageFormat::Png => "PNG",
        ImageFormat::Jpeg => "JPEG",
        ImageFormat::WebP => "WebP",
        ImageFormat::Gif => "GIF",
        _ => "image",
    }
}

/// Decodes the whole image (a GIF's or animated WebP's first frame), upright.
fn decode(bytes: &[u8], format: ImageFormat) -> Result<DynamicImage, ImageError> {
    let name = format_name(format);
    let corrupt = |error: image::ImageError| ImageError::Corrupt { format: name, reason: error.to_string() };
    // The header first, with only the allocation limit (it also bounds the PNG decoder's own
    // buffers), so a refusal can name the size the file claims.
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
    reader.limits(decode_limits(None));
    let mut decoder = reader.into_decoder().map_err(corrupt)?;
    let (width, height) = decoder.dimensions();
    let too_large = ImageError::TooLarge { format: name, width, height };
    if width > MAX_DECODE_SIDE || height > MAX_DECODE_SIDE || decoder.total_bytes() > MAX_DECODE_BYTES {
        return Err(too_large);
    }
    if width == 0 || height == 0 {
        return Err(ImageError::Corrupt { format: name, reason: "it has no pixels".into() });
    }
    decoder.set_limits(decode_limits(Some(MAX_DECODE_SIDE))).map_err(|_| too_large.clone())?;
    let orientation = decoder.orientation().unwrap_or(Orientation::NoTransforms);
    let mut image = DynamicImage::from_decoder(decoder).map_err(|error| match error {
        image::ImageError::Limits(_) => too_large,
        error => corrupt(error),
    })?;
    image.apply_orientation(orientation);
    Ok(image)
}

fn decode_limits(max_side: Option<u32>) -> Limits {
    let mut limits = Limits::default();
    limits.max_image_width = max_side;
    limits.max_image_height = max_side;
    limits.max_alloc = Some(MAX_DECODE_BYTES);
    limits
}

/// The size that fits `max_side` on the longest side with the same aspect ratio (rounded,
/// at least 1 px); the size itself when it already fits.
pub(super) fn fit(width: u32, height: u32, max_side: u32) -> (u32, u32) {
    let longest = width.max(height);
    if longest <= max_side {
        return (width, height);
    }
    let scale = |side: u32| {
        let scaled = (u64::from(side) * u64::from(max_side) + u64::from(longest) / 2) / u64::from(longest);
        u32::try_from(scaled).unwrap_or(max_side).clamp(1, max_side)
    };
    (scale(width), scale(height))
}

/// `width`×`height` times `step`, at least 1 px a side.
pub(super) fn scaled(width: u32, height: u32, step: f64) -> (u32, u32) {
    let side = |side: u32| ((f64::from(side) * step).round() as u32).clamp(1, side.max(1));
    (side(width), side(height))
}

/// Decoded pixels in the two layouts the encoders get: RGB when every pixel is opaque,
/// RGBA otherwise.
enum Pixels {
    Rgb(RgbImage),
    Rgba(RgbaImage),
}

impl From<DynamicImage> for Pixels {
    fn from(image: DynamicImage) -> Self {
        if !image.color().has_alpha() {
            return Pixels::Rgb(image.into_rgb8());
        }
        let rgba = image.into_rgba8();
        // Many PNGs carry an alpha channel they never use; those encode as opaque images.
        if rgba.pixels().all(|pixel| pixel.0[3] == u8::MAX) {
            Pixels::Rgb(DynamicImage::ImageRgba8(rgba).into_rgb8())
        } else {
            Pixels::Rgba(rgba)
        }
    }
}

impl Pixels {
    fn dimensions(&self) -> (u32, u32) {
        match self {
            Pixels::Rgb(image) => image.dimensions(),
            Pixels::Rgba(image) => image.dimensions(),
        }
    }

    /// These pixels at `width`×`height`; unchanged (no copy) when that is their size.
    fn resized(self, width: u32, height: u32) -> Self {
        if self.dimensions() == (width, height) { self } else { self.resized_ref(width, height) }
    }

    fn resized_ref(&self, width: u32, height: u32) -> Self {
        match self {
            Pixels::Rgb(image) => resize(image, width, height, PixelType::U8x3)
                .map(Pixels::Rgb)
                .unwrap_or_else(|| Pixels::Rgb(image::imageops::resize(image, width, height, FilterType::Triangle))),
            Pixels::Rgba(image) => resize(image, width, height, PixelType::U8x4)
                .map(Pixels::Rgba)
                .unwrap_or_else(|| Pixels::Rgba(image::imageops::resize(image, width, height, FilterType::Triangle))),
        }
    }

    /// The first encoding, in order of preference, whose base64 fits `max_base64_bytes`.
    fn encode_within(&self, lossless_first: bool, max_base64_bytes: usize) -> Result<Option<ImagePart>, ImageError> {
        let fits = |encoded: &[u8]| encoded.len().div_ceil(3).saturating_mul(4) <= max_base64_bytes;
        let (width, height) = self.dimensions();
        let part = |media_type: &str, encoded: Vec<u8>| ImagePart {
            media_type: media_type.to_owned(),
            data: BASE64.encode(encoded),
            width,
            height,
        };
        let image = match self {
            Pixels::Rgba(image) => {
                let png = encode_png(image.as_raw(), width, height, ExtendedColorType::Rgba8)?;
                return Ok(fits(&png).then(|| part("image/png", png)));
            }
            Pixels::Rgb(image) => image,
        };
        if lossless_first {
            let png = encode_png(image.as_raw(), width, height, ExtendedColorType::Rgb8)?;
            if fits(&png) {
                return Ok(Some(part("image/png", png)));
            }
        }
        for quality in JPEG_QUALITIES {
            let mut jpeg = Vec::new();
            JpegEncoder::new_with_quality(&mut jpeg, quality)
                .encode_image(image)
                .map_err(|error| ImageError::Encode(error.to_string()))?;
            if fits(&jpeg) {
                return Ok(Some(part("image/jpeg", jpeg)));
            }
        }
        Ok(None)
    }
}

/// `image` at `width`×`height` with fast_image_resize: a bilinear convolution widened when
/// shrinking (so it averages every source pixel, sharp enough for text at these sizes),
/// in SIMD and 8-bit fixed point, with alpha premultiplied. About ten times faster than
/// `image`'s own resize, which also holds a float copy of the image (75 MB for a 12-MP
/// photo). `None` only if the buffer does not match its size, which `ImageBuffer` rules out;
/// the caller then falls back to `image`'s resize.
fn resize<P: image::Pixel<Subpixel = u8>>(
    image: &image::ImageBuffer<P, Vec<u8>>,
    width: u32,
    height: u32,
    pixel_type: PixelType,
) -> Option<image::ImageBuffer<P, Vec<u8>>> {
    let source = ImageRef::new(image.width(), image.height(), image.as_raw(), pixel_type).ok()?;
    let mut target = fast_image_resize::images::Image::new(width, height, pixel_type);
    let options = ResizeOptions::new().resize_alg(ResizeAlg::Convolution(ResizeFilter::Bilinear));
    Resizer::new().resize(&source, &mut target, &options).ok()?;
    image::ImageBuffer::from_raw(width, height, target.into_vec())
}

fn encode_png(pixels: &[u8], width: u32, height: u32, color: ExtendedColorType) -> Result<Vec<u8>, ImageError> {
    let mut png = Vec::new();
    PngEncoder::new_with_quality(&mut png, CompressionType::Default, PngFilter::Adaptive)
        .write_image(pixels, width, height, color)
        .map_err(|error| ImageError::Encode(error.to_string()))?;
    Ok(png)
}

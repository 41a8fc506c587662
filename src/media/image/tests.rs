//! Images generated in memory, through every branch of [`prepare_image`].

use std::io::Cursor;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use image::codecs::gif::GifEncoder;
use image::codecs::jpeg::JpegEncoder;
use image::{DynamicImage, Frame, ImageFormat, Rgb, RgbImage, Rgba, RgbaImage};

use super::codec::{JPEG_QUALITIES, fit, scaled};
use super::*;

fn encoded(image: DynamicImage, format: ImageFormat) -> Vec<u8> {
    let mut bytes = Cursor::new(Vec::new());
    image.write_to(&mut bytes, format).expect("encode a test image");
    bytes.into_inner()
}

/// A smooth gradient: compresses like a screenshot or a photo, not like noise.
fn gradient(width: u32, height: u32) -> RgbImage {
    RgbImage::from_fn(width, height, |x, y| Rgb([(x * 255 / width) as u8, (y * 255 / height) as u8, 128]))
}

/// Deterministic noise (an LCG): the worst case for every encoder.
fn noise(width: u32, height: u32, channels: usize) -> Vec<u8> {
    let mut state = 0x2545_f491_u32;
    (0..width as usize * height as usize * channels)
        .map(|_| {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (state >> 24) as u8
        })
        .collect()
}

/// What a part decodes back to: its pixels as the model would see them.
fn decode_part(part: &ImagePart) -> DynamicImage {
    let bytes = BASE64.decode(&part.data).expect("valid base64");
    let format = image::guess_format(&bytes).expect("a known format");
    assert_eq!(format.to_mime_type(), part.media_type, "the media type matches the bytes");
    image::load_from_memory(&bytes).expect("the part decodes")
}

#[test]
fn a_wide_png_is_downscaled_to_1568_on_its_longest_side() {
    let png = encoded(DynamicImage::ImageRgb8(gradient(4000, 1000)), ImageFormat::Png);
    let part = prepare_image(&png).unwrap();
    assert_eq!((part.width, part.height), (1568, 392));
    assert_eq!(part.media_type, "image/png", "a lossless source without alpha stays PNG while it fits");
    assert!(part.data.len() <= MAX_BASE64_BYTES);
    let back = decode_part(&part);
    assert_eq!((back.width(), back.height()), (1568, 392));
}

#[test]
fn a_tall_jpeg_keeps_its_aspect_ratio_and_a_small_one_is_never_upscaled() {
    let tall = encoded(DynamicImage::ImageRgb8(gradient(600, 2400)), ImageFormat::Jpeg);
    let part = prepare_image(&tall).unwrap();
    assert_eq!((part.width, part.height), (392, 1568));
    assert_eq!(part.media_type, "image/jpeg");

    let small = encoded(DynamicImage::ImageRgb8(gradient(300, 200)), ImageFormat::Jpeg);
    let part = prepare_image(&small).unwrap();
    assert_eq!((part.width, part.height), (300, 200));
    assert_eq!(decode_part(&part).width(), 300);
}

#[test]
fn an_animated_gif_becomes_its_first_frame() {
    let red = RgbaImage::from_pixel(40, 30, Rgba([255, 0, 0, 255]));
    let blue = RgbaImage::from_pixel(40, 30, Rgba([0, 0, 255, 255]));
    let mut gif = Vec::new();
    GifEncoder::new(&mut gif).encode_frames([Frame::new(red), Frame::new(blue)]).expect("encode a GIF");

    let part = prepare_image(&gif).unwrap();
    assert_eq!((part.width, part.height, part.media_type.as_str()), (40, 30, "image/png"));
    let pixel = decode_part(&part).to_rgb8().get_pixel(20, 15).0;
    assert!(pixel[0] > 200 && pixel[2] < 50, "the first (red) frame, not the second: {pixel:?}");
}

#[test]
fn transparency_is_kept_as_png_and_an_unused_alpha_channel_is_dropped() {
    let mut see_through = RgbaImage::from_pixel(64, 64, Rgba([10, 200, 10, 255]));
    see_through.put_pixel(0, 0, Rgba([0, 0, 0, 0]));
    let part = prepare_image(&encoded(DynamicImage::ImageRgba8(see_through), ImageFormat::Png)).unwrap();
    assert_eq!(part.media_type, "image/png");
    assert_eq!(decode_part(&part).to_rgba8().get_pixel(0, 0).0[3], 0);

    // A lossless WebP (what the encoder writes) with an opaque alpha channel: a photo
    // format, so JPEG.
    let opaque = RgbaImage::from_pixel(64, 48, Rgba([10, 200, 10, 255]));
    let part = prepare_image(&encoded(DynamicImage::ImageRgba8(opaque), ImageFormat::WebP)).unwrap();
    assert_eq!((part.media_type.as_str(), part.width, part.height), ("image/jpeg", 64, 48));
}

#[test]
fn an_image_too_big_for_the_limit_steps_down_in_quality_then_in_size() {
    // Opaque noise: as PNG far over the limit, and as JPEG at the first quality just over it,
    // so a lower quality must be what fits.
    let rgb = RgbImage::from_raw(256, 256, noise(256, 256, 3)).unwrap();
    let mut best_jpeg = Vec::new();
    JpegEncoder::new_with_quality(&mut best_jpeg, JPEG_QUALITIES[0]).encode_image(&rgb).unwrap();
    let limit = BASE64.encode(&best_jpeg).len() - 1;
    let limits = ImageLimits { max_side: 256, max_base64_bytes: limit };
    let part = prepare_image_within(&encoded(DynamicImage::ImageRgb8(rgb), ImageFormat::Png), limits).unwrap();
    assert_eq!(part.media_type, "image/jpeg");
    assert!(part.data.len() <= limit, "{} > {limit}", part.data.len());
    assert_eq!((part.width, part.height), (256, 256), "a lower quality fits before a smaller size is tried");

    // Transparent noise must stay PNG, so only a smaller size fits.
    let rgba = RgbaImage::from_raw(256, 256, noise(256, 256, 4)).unwrap();
    let limits = ImageLimits { max_side: 256, max_base64_bytes: 120_000 };
    let part = prepare_image_within(&encoded(DynamicImage::ImageRgba8(rgba), ImageFormat::Png), limits).unwrap();
    assert_eq!(part.media_type, "image/png");
    assert!(part.data.len() <= 120_000, "{}", part.data.len());
    assert_eq!((part.width, part.height), (128, 128));

    let impossible = ImageLimits { max_side: 256, max_base64_bytes: 10 };
    let rgba = RgbaImage::from_raw(64, 64, noise(64, 64, 4)).unwrap();
    let error = prepare_image_within(&encoded(DynamicImage::ImageRgba8(rgba), ImageFormat::Png), impossible);
    assert!(matches!(error, Err(ImageError::DoesNotFit { .. })), "{error:?}");
}

#[test]
fn unknown_unsupported_and_corrupt_files_are_clear_errors() {
    assert_eq!(prepare_image(b"just some text, not an image"), Err(ImageError::UnknownFormat));
    assert_eq!(prepare_image(b""), Err(ImageError::UnknownFormat));

    let bmp = encoded(DynamicImage::ImageRgb8(gradient(8, 8)), ImageFormat::Png);
    let mut bmp_header = b"BM".to_vec();
    bmp_header.extend_from_slice(&bmp[2..]);
    let error = prepare_image(&bmp_header).unwrap_err();
    assert_eq!(error, ImageError::Unsupported("BMP".into()));
    assert_eq!(error.to_string(), "BMP images are not supported; PNG, JPEG, WebP and GIF are");

    // The format is sniffed from the bytes, so a PNG cut in half is a corrupt PNG.
    let png = encoded(DynamicImage::ImageRgb8(gradient(200, 200)), ImageFormat::Png);
    let error = prepare_image(&png[..png.len() / 2]).unwrap_err();
    assert!(matches!(error, ImageError::Corrupt { format: "PNG", .. }), "{error:?}");
    assert!(error.to_string().starts_with("the PNG image is corrupt or truncated: "), "{error}");

    let mut garbage = png[..16].to_vec();
    garbage.extend(noise(64, 1, 1));
    assert!(matches!(prepare_image(&garbage), Err(ImageError::Corrupt { format: "PNG", .. })));
}

/// A PNG of nothing but a header claiming `width`×`height` RGBA pixels, and an empty IDAT:
/// a few dozen bytes that would decode to gigabytes.
fn bomb_png(width: u32, height: u32) -> Vec<u8> {
    fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let mut crc = crc32fast::Hasher::new();
        crc.update(kind);
        crc.update(data);
        out.extend_from_slice(kind);
        out.extend_from_slice(data);
        out.extend_from_slice(&crc.finalize().to_be_bytes());
    }
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut header = Vec::new();
    header.extend_from_slice(&width.to_be_bytes());
    header.extend_from_slice(&height.to_be_bytes());
    header.extend_from_slice(&[8, 6, 0, 0, 0]);
    chunk(&mut png, b"IHDR", &header);
    chunk(&mut png, b"IDAT", &[0x78, 0x9c]);
    chunk(&mut png, b"IEND", &[]);
    png
}

#[test]
fn a_decompression_bomb_is_refused_from_its_header() {
    let error = prepare_image(&bomb_png(100_000, 100_000)).unwrap_err();
    assert_eq!(error, ImageError::TooLarge { format: "PNG", width: 100_000, height: 100_000 });
    assert!(error.to_string().contains("100000×100000 pixels"), "{error}");

    // Within the side limit, but 16,000² RGBA pixels would take a gigabyte.
    let error = prepare_image(&bomb_png(16_000, 16_000)).unwrap_err();
    assert_eq!(error, ImageError::TooLarge { format: "PNG", width: 16_000, height: 16_000 });
}

#[test]
fn fitting_keeps_the_aspect_ratio_and_never_upscales() {
    assert_eq!(fit(4000, 1000, 1568), (1568, 392));
    assert_eq!(fit(1000, 4000, 1568), (392, 1568));
    assert_eq!(fit(1568, 1568, 1568), (1568, 1568));
    assert_eq!(fit(800, 600, 1568), (800, 600));
    assert_eq!(fit(100_000, 1, 1568), (1568, 1));
    assert_eq!(scaled(1568, 392, 0.5), (784, 196));
    assert_eq!(scaled(3, 1, 0.25), (1, 1));
}

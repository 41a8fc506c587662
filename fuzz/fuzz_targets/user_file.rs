//! A file a user sends, as the intake reads it (`src/media/`): sniffed from its bytes
//! (`sniff`), and, when it claims to be an image, made ready for a model
//! (`prepare_image_within`: decoded under the decode limits, EXIF orientation applied,
//! downscaled, re-encoded until it fits). The first input byte picks the size the part must
//! fit (a side of 16 to 271 px, base64 of 2 to 257 KiB); the rest is the file. Small limits
//! keep each run fast while going through every shrink step.
//!
//! Asserts: never panics; a sniffed type is `type/subtype`; text is only ever claimed for
//! bytes without NUL that are UTF-8 (a character cut at the probe's end aside); a prepared
//! part fits its limits, says its true pixel size, and decodes as the format it names.
#![no_main]

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use ferry::media::{ImageLimits, prepare_image_within, sniff};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&knob, file)) = data.split_first() else { return };
    let sniffed = sniff(file, Some("upload.bin"));
    assert!(sniffed.mime_type.split_once('/').is_some_and(|(kind, sub)| !kind.is_empty() && !sub.is_empty()));
    if sniffed.is_text {
        assert!(!file.iter().take(8192).any(|byte| *byte == 0), "text with a NUL");
    }
    let limits = ImageLimits {
        max_side: 16 + u32::from(knob),
        max_base64_bytes: 2048 + usize::from(knob) * 1024,
    };
    let Ok(part) = prepare_image_within(file, limits) else { return };
    assert!(part.width.max(part.height) <= limits.max_side, "{}×{} over {}", part.width, part.height, limits.max_side);
    assert!(part.width > 0 && part.height > 0);
    assert!(part.data.len() <= limits.max_base64_bytes, "{} bytes of base64", part.data.len());
    let bytes = BASE64.decode(&part.data).expect("the part is base64");
    let format = image::guess_format(&bytes).expect("the part is an image");
    assert_eq!(format.to_mime_type(), part.media_type);
    let decoded = image::load_from_memory(&bytes).expect("the part decodes");
    assert_eq!((decoded.width(), decoded.height()), (part.width, part.height));
});

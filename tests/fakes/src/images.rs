//! Image parts in model requests: found in either provider's body, checked as the real APIs
//! check them, and read back for tests ([`RecordedRequest::images`]).
//!
//! The fakes accept images where their API does — Anthropic `image` blocks with a `base64`
//! source, in a user turn or inside a `tool_result`'s content; OpenAI `image_url` parts with a
//! `data:` URL, in a `user` message only — and refuse, in the vendor's error shape, an image
//! that is not valid base64, does not decode as a PNG, JPEG, WebP or GIF, is over
//! [`IMAGE_BASE64_LIMIT`], or (Anthropic) claims another media type or is over
//! [`ANTHROPIC_MAX_SIDE`]. Images given by `http(s)` URL are neither checked nor listed: the
//! fakes fetch nothing.
//!
//! [`RecordedRequest::images`]: crate::RecordedRequest::images

use std::io::Cursor;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::Value;

/// The most base64 one image may carry: Anthropic's limit (it counts the base64 text, 5 MiB)
/// and what Ferry promises every provider. OpenAI's real limit is higher; the fake holds it to
/// Ferry's promise.
pub const IMAGE_BASE64_LIMIT: usize = 5 * 1024 * 1024;

/// Anthropic refuses an image with a side over 8000 px.
pub const ANTHROPIC_MAX_SIDE: u32 = 8000;

/// The media types both APIs take.
const MEDIA_TYPES: [&str; 4] = ["image/jpeg", "image/png", "image/gif", "image/webp"];

/// One image a request carried, as the fake read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedImage {
    /// The role of the message that held it (`user`, or whatever a wrong client sent).
    pub role: String,
    /// The media type the request claimed: Anthropic's `media_type`, or the MIME type of
    /// OpenAI's data URL.
    pub media_type: String,
    /// The length of its base64 text.
    pub base64_len: usize,
    /// The length of the decoded bytes; 0 when the base64 is invalid.
    pub byte_len: usize,
    /// Width and height in pixels, when the bytes are an image the fake can read.
    pub pixels: Option<(u32, u32)>,
    /// The tool call whose result held it (Anthropic's `tool_use_id`); `None` for an image
    /// in a message of its own, which is where OpenAI-compatible clients put tool images.
    pub tool_use_id: Option<String>,
    /// The text part right before it in the same content (e.g. OpenAI's "Images returned by
    /// tool …" caption), if any.
    pub caption: Option<String>,
}

/// An image part as found in a body, before it is read.
pub(crate) struct FoundImage<'a> {
    /// Where it is, in the vendor's error-path style (`messages.2.content.0.content.1`).
    pub(crate) path: String,
    pub(crate) message: usize,
    pub(crate) role: &'a str,
    pub(crate) media_type: &'a str,
    /// The base64 text, or `None` when the part is malformed (no data, not a data URL).
    pub(crate) data: Option<&'a str>,
    pub(crate) tool_use_id: Option<&'a str>,
    pub(crate) caption: Option<&'a str>,
}

/// Why an image was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ImageProblem {
    Malformed,
    InvalidBase64,
    TooLarge { base64_len: usize },
    NotAnImage,
    WrongMediaType { actual: &'static str },
    TooManyPixels,
}

/// Every image in a request's `messages`, in order: Anthropic `image` blocks (top level or
/// inside a `tool_result`) and OpenAI `image_url` parts with a data URL.
pub(crate) fn find_images(messages: &[Value]) -> Vec<FoundImage<'_>> {
    let mut found = Vec::new();
    for (index, message) in messages.iter().enumerate() {
        let role = message.get("role").and_then(Value::as_str).unwrap_or_default();
        let Some(parts) = message.get("content").and_then(Value::as_array) else { continue };
        let at = |path: String, tool_use_id| Location { path, message: index, role, tool_use_id };
        collect(parts, &at(format!("messages.{index}.content"), None), &mut found);
        for (position, part) in parts.iter().enumerate() {
            if part.get("type").and_then(Value::as_str) != Some("tool_result") {
                continue;
            }
            let Some(inner) = part.get("content").and_then(Value::as_array) else { continue };
            let tool_use_id = part.get("tool_use_id").and_then(Value::as_str);
            collect(inner, &at(format!("messages.{index}.content.{position}.content"), tool_use_id), &mut found);
        }
    }
    found
}

struct Location<'a> {
    path: String,
    message: usize,
    role: &'a str,
    tool_use_id: Option<&'a str>,
}

/// The image parts of one content array.
fn collect<'a>(parts: &'a [Value], at: &Location<'a>, found: &mut Vec<FoundImage<'a>>) {
    let mut caption = None;
    for (position, part) in parts.iter().enumerate() {
        let text = |key: &str| part.get(key).and_then(Value::as_str);
        let (media_type, data) = match text("type") {
            Some("text") => {
                caption = text("text");
                continue;
            }
            Some("image") => {
                let source = part.get("source");
                let field = |key: &str| source.and_then(|s| s.get(key)).and_then(Value::as_str);
                if field("type") == Some("url") {
                    continue;
                }
                let data = field("data").filter(|_| field("type") == Some("base64"));
                (field("media_type").unwrap_or_default(), data)
            }
            Some("image_url") => {
                let url = part.pointer("/image_url/url").and_then(Value::as_str).unwrap_or_default();
                if url.starts_with("http://") || url.starts_with("https://") {
                    continue;
                }
                match url.strip_prefix("data:").and_then(|rest| rest.split_once(";base64,")) {
                    Some((media_type, data)) => (media_type, Some(data)),
                    None => ("", None),
                }
            }
            _ => continue,
        };
        found.push(FoundImage {
            path: format!("{}.{position}", at.path),
            message: at.message,
            role: at.role,
            media_type,
            data,
            tool_use_id: at.tool_use_id,
            caption,
        });
    }
}

/// Checks one image: valid base64 within the limit, a PNG, JPEG, WebP or GIF that decodes
/// completely, of the claimed type when `strict_type`, and within `max_side`.
pub(crate) fn check(image: &FoundImage<'_>, strict_type: bool, max_side: u32) -> Result<(), ImageProblem> {
    let data = image.data.ok_or(ImageProblem::Malformed)?;
    if data.len() > IMAGE_BASE64_LIMIT {
        return Err(ImageProblem::TooLarge { base64_len: data.len() });
    }
    let bytes = BASE64.decode(data).map_err(|_| ImageProblem::InvalidBase64)?;
    let format = image::guess_format(&bytes).map_err(|_| ImageProblem::NotAnImage)?;
    let actual = match format {
        image::ImageFormat::Png => "image/png",
        image::ImageFormat::Jpeg => "image/jpeg",
        image::ImageFormat::Gif => "image/gif",
        image::ImageFormat::WebP => "image/webp",
        _ => return Err(ImageProblem::NotAnImage),
    };
    if strict_type && image.media_type != actual {
        return Err(ImageProblem::WrongMediaType { actual });
    }
    let mut reader = image::ImageReader::with_format(Cursor::new(&bytes), format);
    let mut limits = image::Limits::default();
    limits.max_image_width = Some(16_384);
    limits.max_image_height = Some(16_384);
    reader.limits(limits);
    let decoded = reader.decode().map_err(|_| ImageProblem::NotAnImage)?;
    if decoded.width() > max_side || decoded.height() > max_side {
        return Err(ImageProblem::TooManyPixels);
    }
    Ok(())
}

/// Whether `media_type` is one the APIs take.
pub(crate) fn is_known_media_type(media_type: &str) -> bool {
    MEDIA_TYPES.contains(&media_type)
}

/// What a found image holds, for tests (no check: a refused request's images are listed too).
pub(crate) fn read(image: &FoundImage<'_>) -> ReceivedImage {
    let data = image.data.unwrap_or_default();
    let bytes = BASE64.decode(data).unwrap_or_default();
    let pixels = image::ImageReader::new(Cursor::new(&bytes))
        .with_guessed_format()
        .ok()
        .and_then(|reader| reader.into_dimensions().ok());
    ReceivedImage {
        role: image.role.to_owned(),
        media_type: image.media_type.to_owned(),
        base64_len: data.len(),
        byte_len: bytes.len(),
        pixels,
        tool_use_id: image.tool_use_id.map(str::to_owned),
        caption: image.caption.map(str::to_owned),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A 3×2 PNG, base64.
    fn png() -> String {
        let mut bytes = Cursor::new(Vec::new());
        image::RgbImage::new(3, 2).write_to(&mut bytes, image::ImageFormat::Png).unwrap();
        BASE64.encode(bytes.into_inner())
    }

    fn found<'a>(media_type: &'a str, data: &'a str) -> FoundImage<'a> {
        FoundImage {
            path: "messages.0.content.0".into(),
            message: 0,
            role: "user",
            media_type,
            data: Some(data),
            tool_use_id: None,
            caption: None,
        }
    }

    #[test]
    fn images_are_found_in_both_bodies_with_their_context() {
        let data = png();
        let anthropic = json!({ "messages": [
            { "role": "user", "content": [
                { "type": "tool_result", "tool_use_id": "t1", "content": [
                    { "type": "text", "text": "a.png" },
                    { "type": "image", "source": { "type": "base64", "media_type": "image/png", "data": data } },
                ]},
            ]},
        ]});
        let images = find_images(anthropic["messages"].as_array().unwrap());
        assert_eq!(images.len(), 1);
        assert_eq!(images[0].path, "messages.0.content.0.content.1");
        let received = read(&images[0]);
        assert_eq!(received.pixels, Some((3, 2)));
        assert_eq!((received.tool_use_id.as_deref(), received.caption.as_deref()), (Some("t1"), Some("a.png")));

        let openai = json!({ "messages": [
            { "role": "tool", "tool_call_id": "c1", "content": "a.png" },
            { "role": "user", "content": [
                { "type": "text", "text": "Images returned by tool read (call c1):" },
                { "type": "image_url", "image_url": { "url": format!("data:image/png;base64,{data}") } },
                { "type": "image_url", "image_url": { "url": "https://example.com/a.png" } },
            ]},
        ]});
        let images = find_images(openai["messages"].as_array().unwrap());
        assert_eq!(images.len(), 1, "URLs are not fetched or listed");
        let received = read(&images[0]);
        assert_eq!(
            (received.role.as_str(), received.media_type.as_str(), received.pixels),
            ("user", "image/png", Some((3, 2)))
        );
        assert_eq!(received.caption.as_deref(), Some("Images returned by tool read (call c1):"));
    }

    #[test]
    fn bad_images_are_refused_for_a_reason() {
        let data = png();
        assert_eq!(check(&found("image/png", &data), true, 8000), Ok(()));
        assert_eq!(
            check(&found("image/jpeg", &data), true, 8000),
            Err(ImageProblem::WrongMediaType { actual: "image/png" })
        );
        assert_eq!(check(&found("image/jpeg", &data), false, 8000), Ok(()));
        assert_eq!(check(&found("image/png", "not base64!"), true, 8000), Err(ImageProblem::InvalidBase64));
        assert_eq!(check(&found("image/png", &BASE64.encode("plain text")), true, 8000), Err(ImageProblem::NotAnImage));
        let truncated = BASE64.encode(&BASE64.decode(&data).unwrap()[..40]);
        assert_eq!(check(&found("image/png", &truncated), true, 8000), Err(ImageProblem::NotAnImage));
        assert_eq!(check(&found("image/png", &data), true, 2), Err(ImageProblem::TooManyPixels));
        let huge = "A".repeat(IMAGE_BASE64_LIMIT + 4);
        assert_eq!(
            check(&found("image/png", &huge), true, 8000),
            Err(ImageProblem::TooLarge { base64_len: IMAGE_BASE64_LIMIT + 4 })
        );
    }
}

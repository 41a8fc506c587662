//! The conversation as the agent loop and the providers see it, independent of any
//! vendor's wire format.

use serde::{Deserialize, Serialize};

/// One entry of the conversation sent to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum ChatMessage {
    User {
        text: String,
        /// Files that came with the message (issue 23), as references into the media store:
        /// the transcript never holds their bytes. Whatever a model reads of a file that is
        /// not an image (a transcript, a document's text, a note) is already in `text`;
        /// images are shown to models with image input, as [`MediaRef::image`] loaded for
        /// the request. Left out of the JSON when empty.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        media: Vec<MediaRef>,
    },
    Assistant {
        text: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
        /// The model's signed thinking blocks (Anthropic extended thinking), kept verbatim:
        /// a tool-use loop must send them back unmodified or the API refuses it.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        thinking: Vec<ThinkingBlock>,
    },
    /// The answer to one tool call, matched to it by `call_id`.
    ToolResult {
        call_id: String,
        name: String,
        /// The text the model reads.
        content: String,
        is_error: bool,
        /// Images the tool returned (a screenshot, an image file it read), already sized
        /// for models ([`crate::media::prepare_image`]). Shown to models with image input;
        /// the others get a one-line note per image. Left out of the JSON when empty, so
        /// transcripts written before images existed load unchanged.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<ImagePart>,
    },
}

impl ChatMessage {
    pub fn user(text: impl Into<String>) -> Self {
        ChatMessage::User { text: text.into(), media: Vec::new() }
    }

    /// A tool's answer without images.
    pub fn tool_result(
        call_id: impl Into<String>,
        name: impl Into<String>,
        content: impl Into<String>,
        is_error: bool,
    ) -> Self {
        ChatMessage::ToolResult {
            call_id: call_id.into(),
            name: name.into(),
            content: content.into(),
            is_error,
            images: Vec::new(),
        }
    }

    /// An assistant message without thinking blocks.
    pub fn assistant(text: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        ChatMessage::Assistant { text: text.into(), tool_calls, thinking: Vec::new() }
    }
}

/// A file a user sent, as a conversation remembers it: what it is and where its bytes are
/// in the [media store](crate::media::MediaStore), by hash.
///
/// For an image, the stored file is the model-ready encoding ([`crate::media::prepare_image`])
/// and `width`/`height` are its size. The agent loop loads images for the last few user
/// turns into `image` before a model call (`media.history_images`); every other image is
/// described by [`MediaRef::note`].
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MediaRef {
    pub kind: ferry_channel::AttachmentKind,
    /// Lowercase hex SHA-256 of the stored bytes.
    pub sha256: String,
    /// Sniffed from the bytes.
    pub mime_type: String,
    pub size_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub height: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_name: Option<String>,
    /// The image itself, loaded from the store for the request being built; never written
    /// to a transcript.
    #[serde(skip)]
    pub image: Option<ImagePart>,
}

impl MediaRef {
    /// What a model reads in place of an image it is not shown, e.g.
    /// `[photo 1280×960 not shown: this model has no image input]`.
    pub fn note(&self, why: &str) -> String {
        match (self.width, self.height) {
            (Some(width), Some(height)) => format!("[photo {width}×{height} not shown: {why}]"),
            _ => format!("[photo not shown: {why}]"),
        }
    }
}

impl std::fmt::Debug for MediaRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MediaRef")
            .field("kind", &self.kind)
            .field("sha256", &self.sha256)
            .field("mime_type", &self.mime_type)
            .field("size_bytes", &self.size_bytes)
            .field("width", &self.width)
            .field("height", &self.height)
            .field("file_name", &self.file_name)
            .field("image", &self.image.as_ref().map(|_| "loaded"))
            .finish()
    }
}

/// An image ready for a model: encoded (PNG or JPEG), base64 in `data`, within the size
/// every supported provider accepts. One type for every place images reach a model (tool
/// results now, inbound photos later), so the providers render them in one way.
///
/// Its `Debug` shows the size, never the bytes: conversations end up in logs, and SPEC §6.3
/// allows image sizes there, not image data.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImagePart {
    /// The encoded format, e.g. `image/png`.
    pub media_type: String,
    /// The encoded image, base64 (standard alphabet, padded).
    pub data: String,
    pub width: u32,
    pub height: u32,
}

impl ImagePart {
    /// The size of the encoded image in bytes (what the base64 in `data` decodes to).
    pub fn encoded_len(&self) -> usize {
        let padding = self.data.bytes().rev().take_while(|byte| *byte == b'=').count().min(2);
        (self.data.len() / 4 * 3).saturating_sub(padding)
    }

    /// The image's type, pixel size and encoded size, e.g. `image/png 800×600, 123 KB`:
    /// what events, logs and hooks show instead of the data.
    pub fn describe(&self) -> String {
        format!("{} {}×{}, {}", self.media_type, self.width, self.height, human_bytes(self.encoded_len()))
    }

    /// The image as a `data:` URL, the form OpenAI-compatible APIs take.
    pub fn data_url(&self) -> String {
        format!("data:{};base64,{}", self.media_type, self.data)
    }
}

impl std::fmt::Debug for ImagePart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImagePart")
            .field("media_type", &self.media_type)
            .field("width", &self.width)
            .field("height", &self.height)
            .field("data", &format_args!("<{} base64 chars>", self.data.len()))
            .finish()
    }
}

/// `512 B`, `123 KB`, `4.2 MB` (binary multiples, as file managers show them).
fn human_bytes(bytes: usize) -> String {
    const KIB: usize = 1024;
    const MIB: usize = 1024 * 1024;
    match bytes {
        0..KIB => format!("{bytes} B"),
        KIB..MIB => format!("{} KB", bytes.div_ceil(KIB)),
        _ => format!("{:.1} MB", bytes as f64 / MIB as f64),
    }
}

/// A thinking block as the model produced it. Only its producer can read the signature or
/// the redacted data; Ferry stores and returns them untouched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ThinkingBlock {
    Thinking { thinking: String, signature: String },
    Redacted { data: String },
}

/// A tool call the model made. `arguments` is the raw JSON text the model produced, which
/// may be invalid: validating it is the tool registry's job, so the model can be told.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// Gives every tool call in `messages[from..]` that has no result an error result saying
/// `why`, placed after the results its assistant message has. A run stopped while its tools
/// ran (`/stop`, its timeout) leaves such calls behind, and providers refuse a conversation
/// in which a call goes unanswered: without this, the session's next message would fail.
/// Returns how many results were added.
pub fn answer_open_tool_calls(messages: &mut Vec<ChatMessage>, from: usize, why: &str) -> usize {
    let mut added = 0;
    let mut index = from;
    while index < messages.len() {
        let ChatMessage::Assistant { tool_calls, .. } = &messages[index] else {
            index += 1;
            continue;
        };
        let calls = tool_calls.clone();
        let mut end = index + 1;
        while matches!(messages.get(end), Some(ChatMessage::ToolResult { .. })) {
            end += 1;
        }
        let answered: Vec<&str> = messages[index + 1..end]
            .iter()
            .filter_map(|message| match message {
                ChatMessage::ToolResult { call_id, .. } => Some(call_id.as_str()),
                _ => None,
            })
            .collect();
        let missing: Vec<ChatMessage> = calls
            .iter()
            .filter(|call| !answered.contains(&call.id.as_str()))
            .map(|call| ChatMessage::tool_result(call.id.clone(), call.name.clone(), why, true))
            .collect();
        added += missing.len();
        index = end + missing.len();
        messages.splice(end..end, missing);
    }
    added
}

/// Tokens a run consumed, summed over its model calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl Usage {
    pub fn add(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(data: &str) -> ImagePart {
        ImagePart { media_type: "image/png".into(), data: data.into(), width: 800, height: 600 }
    }

    #[test]
    fn a_user_message_keeps_its_media_references_but_never_the_loaded_image() {
        let photo = MediaRef {
            kind: ferry_channel::AttachmentKind::Image,
            sha256: "ab".repeat(32),
            mime_type: "image/jpeg".into(),
            size_bytes: 312_000,
            width: Some(1280),
            height: Some(960),
            file_name: None,
            image: Some(image("QUJD")),
        };
        assert_eq!(
            photo.note("this model has no image input"),
            "[photo 1280×960 not shown: this model has no image input]"
        );
        let message = ChatMessage::User { text: "look".into(), media: vec![photo.clone()] };
        let json = serde_json::to_string(&message).expect("serializes");
        assert!(!json.contains("QUJD"), "the transcript holds no image data: {json}");
        let ChatMessage::User { media, .. } = serde_json::from_str(&json).expect("loads") else {
            panic!("a user message")
        };
        assert_eq!(media, vec![MediaRef { image: None, ..photo }]);
        let older: ChatMessage =
            serde_json::from_str(r#"{"role":"user","text":"hi"}"#).expect("an old transcript loads");
        assert_eq!(older, ChatMessage::user("hi"));
    }

    #[test]
    fn a_tool_result_stored_before_images_existed_still_loads() {
        let old = r#"{"role":"tool_result","call_id":"c1","name":"current_time","content":"noon","is_error":false}"#;
        let message: ChatMessage = serde_json::from_str(old).unwrap();
        assert_eq!(message, ChatMessage::tool_result("c1", "current_time", "noon", false));
        // And one without images is written as before.
        assert_eq!(serde_json::to_string(&message).unwrap(), old);
    }

    #[test]
    fn a_tool_result_with_images_round_trips() {
        let message = ChatMessage::ToolResult {
            call_id: "c1".into(),
            name: "read".into(),
            content: "a.png".into(),
            is_error: false,
            images: vec![image("iVBORw0KGgo=")],
        };
        let json = serde_json::to_string(&message).unwrap();
        assert!(
            json.contains(r#""images":[{"media_type":"image/png","data":"iVBORw0KGgo=","width":800,"height":600}]"#)
        );
        assert_eq!(serde_json::from_str::<ChatMessage>(&json).unwrap(), message);
    }

    #[test]
    fn describe_and_debug_show_sizes_never_data() {
        // 8 bytes encoded: 12 base64 characters with one padding character.
        assert_eq!(image("iVBORw0KGgo=").encoded_len(), 8);
        assert_eq!(image("iVBORw0KGgo=").describe(), "image/png 800×600, 8 B");
        let big = image(&"A".repeat(4 * 42_000));
        assert_eq!(big.describe(), "image/png 800×600, 124 KB");
        let huge = image(&"A".repeat(4 * 1_400_000));
        assert_eq!(huge.describe(), "image/png 800×600, 4.0 MB");
        let debug = format!("{:?}", image("iVBORw0KGgo="));
        assert!(!debug.contains("iVBOR"), "{debug}");
        assert!(debug.contains("12 base64 chars"), "{debug}");
    }

    fn call(id: &str) -> ToolCall {
        ToolCall { id: id.into(), name: "exec".into(), arguments: "{}".into() }
    }

    #[test]
    fn calls_left_without_results_are_answered_in_place() {
        let mut messages = vec![
            ChatMessage::user("old"),
            ChatMessage::assistant("", vec![call("x")]),
            ChatMessage::user("new"),
            ChatMessage::assistant("", vec![call("a"), call("b"), call("c")]),
            ChatMessage::tool_result("a", "exec", "done", false),
        ];
        // Only the run's own part is repaired.
        assert_eq!(answer_open_tool_calls(&mut messages, 2, "stopped"), 2);
        assert_eq!(messages.len(), 7);
        assert_eq!(messages[5], ChatMessage::tool_result("b", "exec", "stopped", true));
        assert_eq!(messages[6], ChatMessage::tool_result("c", "exec", "stopped", true));
        assert_eq!(answer_open_tool_calls(&mut messages, 0, "lost"), 1);
        assert_eq!(messages[2], ChatMessage::tool_result("x", "exec", "lost", true));
        assert_eq!(answer_open_tool_calls(&mut messages, 0, "again"), 0);
    }
}

//! Model providers: one trait, a typed event stream, three implementations.
//!
//! A provider turns a [`ModelRequest`] into a stream of [`ModelEvent`]s — text and
//! reasoning deltas, tool calls assembled from pieces, usage, the stop reason — hiding its
//! vendor's wire format. Everything around the call that is the same for every vendor
//! (retrying before output, the idle-stream watchdog, turning failures into events) lives
//! in the agent loop, so each provider is only a translator:
//!
//! - [`openai::OpenAiProvider`]: OpenAI-compatible Chat Completions (OpenAI, Ollama, vLLM,
//!   llama.cpp server, OpenRouter);
//! - [`anthropic::AnthropicProvider`]: Anthropic Messages;
//! - [`echo::EchoProvider`]: offline, streams the user's text back.

pub mod anthropic;
pub mod echo;
mod error;
mod http;
pub mod openai;
mod resolve;
mod retry;
mod sse;

use async_trait::async_trait;
use futures::stream::BoxStream;
use serde::Serialize;

pub use error::ProviderError;
pub use resolve::{ResolveError, ResolvedModel, resolve_model};
pub use retry::RetryPolicy;
pub use sse::{SseEvent, StreamDecoder, decode_stream, sse_events};

use crate::models::ThinkingLevel;
use crate::types::conversation::{ChatMessage, ImagePart, MediaRef, ThinkingBlock, Usage};

/// The context window assumed for an OpenAI-compatible model of unknown size: what current
/// OpenAI models offer (128k tokens). A smaller local model needs `context_window` set, or it
/// is compacted only when it answers with a context-overflow error.
pub const DEFAULT_CONTEXT_WINDOW: u32 = 128_000;

/// What the model is asked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelRequest {
    /// The provider's model name (`gpt-4o-mini`, `claude-sonnet-4-5`, `llama3`).
    pub model: String,
    pub system: String,
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<ToolSpec>,
    /// Cap on the reply's length; providers that require one use their own default.
    pub max_output_tokens: Option<u32>,
    /// How hard the model is asked to think (`/think`); `Off` sends no thinking knob.
    pub thinking: ThinkingLevel,
    /// Whether the model takes image input (`models.providers.<name>.vision`). Without it,
    /// the images in the conversation reach the model as one line of text each
    /// ([`image_note`]), since a text-only model would refuse the request.
    pub vision: bool,
}

/// What a model without image input reads in place of an image: its size and why it is
/// not shown, so the model can tell the user rather than guess what the image holds.
pub fn image_note(image: &ImagePart) -> String {
    format!("[image {}×{} not shown: this model has no image input]", image.width, image.height)
}

/// A tool result's text with one [`image_note`] line per image: what a model without image
/// input gets. Borrowed when there are no images.
pub fn text_with_image_notes<'a>(text: &'a str, images: &[ImagePart]) -> std::borrow::Cow<'a, str> {
    if images.is_empty() {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut noted = text.to_owned();
    for image in images {
        if !noted.is_empty() {
            noted.push('\n');
        }
        noted.push_str(&image_note(image));
    }
    std::borrow::Cow::Owned(noted)
}

/// Why a remembered image is not shown to a model with image input: only the images of the
/// latest user turns are loaded (`media.history_images`), bounding what a long conversation
/// costs, or the image has expired from the store.
pub const IMAGE_NOT_REPLAYED: &str = "only the latest images are shown again";

/// A user message as a model sees it: the images it is shown, and its text with one note
/// for each image it is not (see [`MediaRef::note`]).
pub struct UserContent<'a> {
    pub text: std::borrow::Cow<'a, str>,
    pub images: Vec<&'a ImagePart>,
}

/// What of `text` and `media` a model with (or without) image input gets. Files that are not
/// images add nothing: what the model reads of them is already in the text.
pub fn user_content<'a>(text: &'a str, media: &'a [MediaRef], vision: bool) -> UserContent<'a> {
    let mut images = Vec::new();
    let mut notes = Vec::new();
    for item in media.iter().filter(|item| item.kind == ferry_channel::AttachmentKind::Image) {
        match &item.image {
            Some(image) if vision => images.push(image),
            _ if !vision => notes.push(item.note("this model has no image input")),
            _ => notes.push(item.note(IMAGE_NOT_REPLAYED)),
        }
    }
    if notes.is_empty() {
        return UserContent { text: std::borrow::Cow::Borrowed(text), images };
    }
    let mut noted = text.to_owned();
    for note in notes {
        if !noted.is_empty() {
            noted.push('\n');
        }
        noted.push_str(&note);
    }
    UserContent { text: std::borrow::Cow::Owned(noted), images }
}

/// A tool as the model sees it: a name, what it is for, and its parameters' JSON schema.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// Shared: every run's request lists the tools, and deep-copying their schemas was ~3%
    /// of the inbound benchmark's CPU.
    pub parameters: std::sync::Arc<serde_json::Value>,
}

/// One step of a streamed model reply.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelEvent {
    TextDelta(String),
    ReasoningDelta(String),
    /// A complete, signed thinking block, to be sent back verbatim in a tool-use loop.
    /// Carries nothing to show (its text came as `ReasoningDelta`s).
    Thinking(ThinkingBlock),
    /// A tool call begins. `index` identifies it among the calls of this reply.
    ToolCallStart {
        index: usize,
        id: String,
        name: String,
    },
    /// A piece of the call's JSON arguments; the pieces concatenate to the whole.
    ToolCallDelta {
        index: usize,
        arguments: String,
    },
    /// The call's arguments are complete.
    ToolCallEnd {
        index: usize,
    },
    Usage(Usage),
    /// The reply is complete.
    Stop(StopReason),
}

impl ModelEvent {
    /// Whether the event shows anything to a user. Once something was shown, a failed call
    /// is not retried: the retry could say something different.
    pub fn is_output(&self) -> bool {
        !matches!(self, ModelEvent::Usage(_) | ModelEvent::Stop(_) | ModelEvent::Thinking(_))
    }
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    EndTurn,
    ToolUse,
    MaxTokens,
    Other(String),
}

pub type ModelStream = BoxStream<'static, Result<ModelEvent, ProviderError>>;

/// A model endpoint. Implementations send one request per call and never retry: the
/// agent loop decides about retries, because only it knows whether output was shown.
#[async_trait]
pub trait ModelProvider: Send + Sync {
    /// The provider's name from the config, for logs and errors.
    fn name(&self) -> &str;

    /// The context window assumed when the config does not give one
    /// (`models.providers.<name>.context_window`). Compaction keeps prompts below it.
    fn default_context_window(&self) -> u32 {
        DEFAULT_CONTEXT_WINDOW
    }

    /// Sends the request and returns the reply as it streams. Fails before streaming when
    /// the request is refused (HTTP status, connection).
    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ProviderError>;
}

/// A conversation with users' photos, for the providers' tests: an older turn whose photo is
/// no longer loaded, then a photo sent without a caption.
#[cfg(test)]
pub(crate) fn with_user_photos(vision: bool) -> ModelRequest {
    let photo = |width: u32, height: u32, loaded: bool| MediaRef {
        kind: ferry_channel::AttachmentKind::Image,
        sha256: "ab".repeat(32),
        mime_type: "image/jpeg".into(),
        size_bytes: 4,
        width: Some(width),
        height: Some(height),
        file_name: None,
        image: loaded.then(|| ImagePart { media_type: "image/jpeg".into(), data: "/9j/4A==".into(), width, height }),
    };
    let notes = MediaRef { kind: ferry_channel::AttachmentKind::Document, ..photo(1, 1, false) };
    ModelRequest {
        model: "m".into(),
        system: String::new(),
        messages: vec![
            ChatMessage::User { text: "old one".into(), media: vec![photo(800, 600, false), notes] },
            ChatMessage::assistant("a cat", Vec::new()),
            ChatMessage::User { text: String::new(), media: vec![photo(1568, 1045, true)] },
        ],
        tools: Vec::new(),
        max_output_tokens: None,
        thinking: Default::default(),
        vision,
    }
}

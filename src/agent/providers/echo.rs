//! The offline provider: streams the user's last message back, in a few deltas, so Ferry
//! works end to end on a machine with no model configured.

use async_trait::async_trait;
use futures::StreamExt;

use super::{ModelEvent, ModelProvider, ModelRequest, ModelStream, ProviderError, StopReason, text_with_image_notes};
use crate::types::conversation::{ChatMessage, Usage};

/// How many deltas a reply is streamed in (fewer for very short text).
const DELTAS: usize = 4;

pub struct EchoProvider;

#[async_trait]
impl ModelProvider for EchoProvider {
    fn name(&self) -> &str {
        "echo"
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ProviderError> {
        let text = request
            .messages
            .iter()
            .rev()
            .find_map(|message| match message {
                ChatMessage::User { text, .. } => Some(text.clone()),
                _ => None,
            })
            .unwrap_or_default();
        let usage =
            Usage { input_tokens: estimate_tokens(request), output_tokens: (text.chars().count() / 4) as u64 + 1 };
        let mut events: Vec<Result<ModelEvent, ProviderError>> =
            split_into_deltas(&text).into_iter().map(|piece| Ok(ModelEvent::TextDelta(piece))).collect();
        events.push(Ok(ModelEvent::Usage(usage)));
        events.push(Ok(ModelEvent::Stop(StopReason::EndTurn)));
        Ok(futures::stream::iter(events).boxed())
    }
}

/// About four characters a token: good enough for an offline stand-in. Echo has no image
/// input: an image counts as the line of text a text-only model gets instead.
fn estimate_tokens(request: &ModelRequest) -> u64 {
    let text: usize = request
        .messages
        .iter()
        .map(|message| match message {
            ChatMessage::User { text, .. } | ChatMessage::Assistant { text, .. } => text.len(),
            ChatMessage::ToolResult { content, images, .. } => text_with_image_notes(content, images).len(),
        })
        .sum();
    ((text + request.system.len()) / 4) as u64 + 1
}

/// Cuts text into up to [`DELTAS`] pieces at whitespace near even intervals.
fn split_into_deltas(text: &str) -> Vec<String> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    if chars.len() < DELTAS * 2 {
        return if text.is_empty() { Vec::new() } else { vec![text.to_owned()] };
    }
    let mut pieces = Vec::with_capacity(DELTAS);
    let mut start = 0;
    for part in 1..DELTAS {
        let target = chars.len() * part / DELTAS;
        let cut =
            chars[target..].iter().find(|(_, c)| c.is_whitespace()).map_or(chars[target].0, |(offset, _)| *offset);
        if cut > start {
            pieces.push(text[start..cut].to_owned());
            start = cut;
        }
    }
    pieces.push(text[start..].to_owned());
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_concatenate_to_the_original() {
        for text in ["", "hi", "hello there, how are you doing today?", "ünïcödé wörds everywhere in this sentence"]
        {
            let pieces = split_into_deltas(text);
            assert_eq!(pieces.concat(), text);
            assert!(pieces.len() <= DELTAS);
        }
        assert_eq!(split_into_deltas("hello there, how are you doing today?").len(), DELTAS);
    }

    #[tokio::test]
    async fn echoes_the_last_user_message_and_stops() {
        let request = ModelRequest {
            model: "echo".into(),
            system: String::new(),
            messages: vec![ChatMessage::user("first"), ChatMessage::user("say this back please, in parts")],
            tools: vec![],
            max_output_tokens: None,
            thinking: Default::default(),
            vision: false,
        };
        let events: Vec<_> = EchoProvider.stream(&request).await.unwrap().collect().await;
        let text: String = events
            .iter()
            .filter_map(|event| match event {
                Ok(ModelEvent::TextDelta(piece)) => Some(piece.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, "say this back please, in parts");
        assert!(matches!(events.last(), Some(Ok(ModelEvent::Stop(StopReason::EndTurn)))));
    }

    #[test]
    fn an_image_counts_as_its_note_not_its_bytes() {
        let image = crate::types::conversation::ImagePart {
            media_type: "image/png".into(),
            data: "A".repeat(400_000),
            width: 1280,
            height: 960,
        };
        let request = |images: Vec<_>| ModelRequest {
            model: "echo".into(),
            system: String::new(),
            messages: vec![ChatMessage::ToolResult {
                call_id: "c".into(),
                name: "read".into(),
                content: "a.png".into(),
                is_error: false,
                images,
            }],
            tools: vec![],
            max_output_tokens: None,
            thinking: Default::default(),
            vision: false,
        };
        let note = "\n[image 1280×960 not shown: this model has no image input]".len() as u64;
        assert_eq!(estimate_tokens(&request(vec![image])), (("a.png".len() as u64 + note) / 4) + 1);
        assert_eq!(estimate_tokens(&request(vec![])), 2);
    }
}

//! An MCP tool result as a Ferry tool result: text as text; images through the same path
//! as the file tools' (decoded, downscaled, sized for models); resource links and embedded
//! resources as text naming them; audio as a note. `isError` results reach the model as
//! errors, with the server's words.

use base64::Engine as _;
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};

use crate::agent::tools::{ToolError, ToolOutput};

/// The Ferry result of one call.
pub async fn convert(result: CallToolResult) -> Result<ToolOutput, ToolError> {
    let mut texts = Vec::new();
    let mut images = Vec::new();
    for block in result.content {
        match block {
            ContentBlock::Text(text) => texts.push(text.text),
            ContentBlock::Image(image) => match decode_image(&image.data).await {
                Ok(prepared) => {
                    texts.push(format!("[image: {}]", prepared.describe()));
                    images.push(prepared);
                }
                Err(why) => texts.push(format!("[an image ({}) that could not be used: {why}]", image.mime_type)),
            },
            ContentBlock::Audio(audio) => {
                texts.push(format!("[audio ({}, {} base64 characters), not shown]", audio.mime_type, audio.data.len()))
            }
            ContentBlock::ResourceLink(link) => {
                let mut line = format!("[resource: {} <{}>", link.name, link.uri);
                if let Some(mime) = &link.mime_type {
                    line.push_str(&format!(" ({mime})"));
                }
                if let Some(description) = &link.description {
                    line.push_str(&format!(": {description}"));
                }
                line.push(']');
                texts.push(line);
            }
            ContentBlock::Resource(embedded) => match embedded.resource {
                ResourceContents::TextResourceContents { uri, text, .. } => {
                    texts.push(format!("[resource <{uri}>]\n{text}"));
                }
                ResourceContents::BlobResourceContents { uri, mime_type, blob, .. } => {
                    let mime = mime_type.unwrap_or_else(|| "application/octet-stream".into());
                    texts.push(format!("[resource <{uri}> ({mime}, {} base64 characters), not shown]", blob.len()));
                }
                _ => texts.push("[an embedded resource of a kind Ferry does not know, not shown]".into()),
            },
            _ => texts.push("[content of a kind Ferry does not know, not shown]".into()),
        }
    }
    // Structured content only: servers should send its text too, but not all do.
    if texts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        texts.push(structured.to_string());
    }
    let text = texts.join("\n");
    if result.is_error == Some(true) {
        let text = if text.trim().is_empty() { "the tool reported an error without saying what".into() } else { text };
        return Err(ToolError::new(text));
    }
    Ok(ToolOutput::with_images(text, images))
}

/// Decodes base64 image data and prepares it for models, off the async threads.
async fn decode_image(data: &str) -> Result<crate::types::conversation::ImagePart, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|error| format!("its data is not base64 ({error})"))?;
    tokio::task::spawn_blocking(move || crate::media::prepare_image(&bytes))
        .await
        .map_err(|_| "preparing it failed".to_owned())?
        .map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use rmcp::model::{ContentBlock as Content, Resource};
    use serde_json::json;

    use super::*;

    /// A 2×2 PNG.
    const PNG: &str =
        "iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAFklEQVR4nGP8z8DAwMDAxMDAwMDAAAANHQEDasKb6QAAAABJRU5ErkJggg==";

    #[tokio::test]
    async fn every_kind_of_content_becomes_text_or_an_image() {
        let link = Resource::new("file:///srv/report.pdf", "report");
        let result = CallToolResult::success(vec![
            Content::text("hello"),
            Content::image(PNG, "image/png"),
            Content::resource_link(link),
            Content::embedded_text("memo://1", "the memo"),
        ]);
        let output = convert(result).await.unwrap();
        assert_eq!(output.images.len(), 1);
        let lines: Vec<&str> = output.text.lines().collect();
        assert_eq!(lines[0], "hello");
        assert!(lines[1].starts_with("[image: image/png 2×2"), "{}", lines[1]);
        assert_eq!(lines[2], "[resource: report <file:///srv/report.pdf>]");
        assert_eq!(lines[3..], ["[resource <memo://1>]", "the memo"]);
    }

    #[tokio::test]
    async fn errors_and_bad_images_are_told_not_dropped() {
        let error = convert(CallToolResult::error(vec![Content::text("no such table")])).await.unwrap_err();
        assert_eq!(error.0, "no such table");
        let bare = convert(CallToolResult::error(Vec::new())).await.unwrap_err();
        assert!(bare.0.contains("without saying what"));
        let broken = convert(CallToolResult::success(vec![Content::image("not base64!", "image/png")])).await.unwrap();
        assert!(broken.images.is_empty() && broken.text.contains("could not be used"), "{}", broken.text);
        let structured = convert(CallToolResult::structured(json!({"sum": 5}))).await.unwrap();
        assert!(structured.text.contains("\"sum\":5"), "{}", structured.text);
    }
}

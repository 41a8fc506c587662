//! The images a run shows its model: those of the latest user turns, loaded from the media
//! store; older ones stay references, which the providers describe in a line
//! ([`crate::agent::providers::user_content`]).

use ferry_channel::AttachmentKind;

use crate::media::Media;
use crate::types::conversation::ChatMessage;

/// Loads the images of the last `turns` user messages that carry any, newest first, and
/// unloads older ones: a conversation's cost in images is bounded however long it gets. The
/// messages from `first_new` on (the one this run answers) always keep theirs, even with
/// `turns` at 0: the user is asking about them now.
pub(super) async fn load_recent_images(
    media: &std::sync::Arc<Media>,
    messages: &mut [ChatMessage],
    first_new: usize,
    turns: usize,
) {
    let mut shown = 0;
    for (index, message) in messages.iter_mut().enumerate().rev() {
        let ChatMessage::User { media: files, .. } = message else { continue };
        if !files.iter().any(|file| file.kind == AttachmentKind::Image) {
            continue;
        }
        let replay = shown < turns || index >= first_new;
        shown += 1;
        for file in files.iter_mut().filter(|file| file.kind == AttachmentKind::Image) {
            if !replay {
                file.image = None;
            } else if file.image.is_none() {
                file.image = media.load_image(file).await;
            }
        }
    }
}

// Every case loads real images, which the `media` feature decodes.
#[cfg(all(test, feature = "media"))]
mod tests {
    use std::io::Cursor;
    use std::sync::Arc;

    use ferry_channel::memory::MemoryChannel;
    use ferry_channel::{Attachment, AttachmentKind};
    use image::{ImageFormat, RgbImage};

    use super::*;
    use crate::config::MediaConfig;
    use crate::types::conversation::MediaRef;

    async fn photo(media: &Arc<Media>, shade: u8) -> MediaRef {
        let mut bytes = Cursor::new(Vec::new());
        RgbImage::from_pixel(40, 30, image::Rgb([shade, 0, 0])).write_to(&mut bytes, ImageFormat::Png).expect("png");
        let channel = MemoryChannel::new("memory", "default");
        channel.serve_file("p", bytes.into_inner());
        let mut received = media.receive(&channel, &[Attachment::remote(AttachmentKind::Image, "p")]).await;
        let mut reference = received.media.remove(0);
        reference.image = None;
        reference
    }

    fn media(dir: &tempfile::TempDir) -> Arc<Media> {
        let env = crate::config::Environment::from_process();
        Arc::new(Media::open(dir.path(), &MediaConfig::default(), &env).expect("media"))
    }

    /// For each user message with files: whether its first one is loaded.
    fn loaded(messages: &[ChatMessage]) -> Vec<bool> {
        messages
            .iter()
            .filter_map(|message| match message {
                ChatMessage::User { media, .. } => media.first().map(|file| file.image.is_some()),
                _ => None,
            })
            .collect()
    }

    #[tokio::test]
    async fn only_the_latest_turns_with_images_are_loaded() {
        let dir = tempfile::tempdir().expect("temp dir");
        let media = media(&dir);
        let mut messages = Vec::new();
        for shade in [10, 20, 30] {
            messages
                .push(ChatMessage::User { text: format!("photo {shade}"), media: vec![photo(&media, shade).await] });
            messages.push(ChatMessage::assistant("nice", Vec::new()));
            messages.push(ChatMessage::user("no photo here"));
        }
        let answered_from = messages.len();
        load_recent_images(&media, &mut messages, answered_from, 2).await;
        assert_eq!(loaded(&messages), [false, true, true]);
    }

    #[tokio::test]
    async fn the_message_being_answered_keeps_its_images_even_when_none_are_replayed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let media = media(&dir);
        let older = photo(&media, 10).await;
        let mut current = photo(&media, 20).await;
        current.image = media.load_image(&current).await;
        let mut messages = vec![
            ChatMessage::User { text: "before".into(), media: vec![older] },
            ChatMessage::User { text: "now".into(), media: vec![current] },
        ];
        load_recent_images(&media, &mut messages, 1, 0).await;
        assert_eq!(loaded(&messages), [false, true]);
    }
}

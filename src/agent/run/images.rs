//! The images a run shows its model: those of the latest user turns, loaded from the media
//! store; older ones stay references, which the providers describe in a line
//! ([`crate::agent::providers::user_content`]).

use ferry_channel::AttachmentKind;

use crate::agent::conversation::ChatMessage;
use crate::media::Media;

/// Loads the images of the last `turns` user messages that carry any, newest first, and
/// unloads older ones: a conversation's cost in images is bounded however long it gets.
pub(super) async fn load_recent_images(media: &std::sync::Arc<Media>, messages: &mut [ChatMessage], turns: usize) {
    let mut shown = 0;
    for message in messages.iter_mut().rev() {
        let ChatMessage::User { media: files, .. } = message else { continue };
        if !files.iter().any(|file| file.kind == AttachmentKind::Image) {
            continue;
        }
        let replay = shown < turns;
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

#[cfg(test)]
mod tests {
    use std::io::Cursor;
    use std::sync::Arc;

    use ferry_channel::memory::MemoryChannel;
    use ferry_channel::{Attachment, AttachmentKind};
    use image::{ImageFormat, RgbImage};

    use super::*;
    use crate::agent::conversation::MediaRef;
    use crate::config::MediaConfig;

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

    #[tokio::test]
    async fn only_the_latest_turns_with_images_are_loaded() {
        let dir = tempfile::tempdir().expect("temp dir");
        let media = Arc::new(
            Media::open(dir.path(), &MediaConfig::default(), &crate::config::Environment::from_process())
                .expect("media"),
        );
        let mut messages = Vec::new();
        for shade in [10, 20, 30] {
            messages
                .push(ChatMessage::User { text: format!("photo {shade}"), media: vec![photo(&media, shade).await] });
            messages.push(ChatMessage::assistant("nice", Vec::new()));
            messages.push(ChatMessage::user("no photo here"));
        }
        load_recent_images(&media, &mut messages, 2).await;
        let loaded: Vec<bool> = messages
            .iter()
            .filter_map(|message| match message {
                ChatMessage::User { media, .. } => media.first().map(|file| file.image.is_some()),
                _ => None,
            })
            .collect();
        assert_eq!(loaded, [false, true, true]);
    }
}

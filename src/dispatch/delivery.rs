//! Sending a final reply, until the reply pipeline's streaming and formatting take over:
//! text already shaped (see [`crate::reply::shaping`]) is split to the channel's limit, and
//! failures are logged.

use ferry_channel::{Channel, OutboundMessage, Target};

/// Sends `text` to `target`, split at the channel's text limit (at a line break or space
/// when one is near). Blank text sends nothing.
pub async fn deliver_text(channel: &dyn Channel, target: &Target, text: &str, run_id: &str) {
    let text = text.trim();
    if text.is_empty() {
        return;
    }
    let limit = channel.capabilities().text_limit.max(1);
    for (index, piece) in split_text(text, limit).into_iter().enumerate() {
        let mut message = OutboundMessage::text(target.clone(), piece);
        message.idempotency_key = Some(format!("{run_id}:{index}"));
        if let Err(error) = channel.send(message).await {
            tracing::error!(channel = channel.name(), chat_id = %target.chat.id, %error, "sending a reply failed");
        }
    }
}

/// Pieces of at most `limit` characters, cut after a newline or space in the last quarter
/// of a piece when there is one.
pub fn split_text(text: &str, limit: usize) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while rest.chars().count() > limit {
        let hard = rest.char_indices().nth(limit).map_or(rest.len(), |(byte, _)| byte);
        let window = &rest[..hard];
        let soft_floor = window.char_indices().nth(limit * 3 / 4).map_or(0, |(byte, _)| byte);
        let cut = window[soft_floor..]
            .rfind('\n')
            .or_else(|| window[soft_floor..].rfind(' '))
            .map_or(hard, |offset| soft_floor + offset + 1);
        pieces.push(rest[..cut].trim_end().to_owned());
        rest = rest[cut..].trim_start();
    }
    if !rest.is_empty() {
        pieces.push(rest.to_owned());
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_is_split_at_spaces_within_the_limit() {
        let text = "word ".repeat(30);
        let pieces = split_text(text.trim(), 22);
        assert!(pieces.iter().all(|p| p.chars().count() <= 22), "{pieces:?}");
        assert_eq!(pieces.join(" "), text.trim());
        assert_eq!(split_text("short", 10), ["short"]);
        assert_eq!(split_text(&"x".repeat(25), 10), ["x".repeat(10), "x".repeat(10), "x".repeat(5)]);
    }

    #[tokio::test]
    async fn blank_text_sends_nothing() {
        let channel = ferry_channel::memory::MemoryChannel::new("memory", "default");
        let target =
            Target { chat: ferry_channel::ChatRef::new(ferry_channel::ChatKind::Direct, "a"), thread_id: None };
        deliver_text(&channel, &target, "  \n", "run").await;
        assert!(channel.sent_texts().is_empty());
        deliver_text(&channel, &target, "hello", "run").await;
        assert_eq!(channel.sent_texts(), ["hello"]);
    }
}

//! Files joined to a reply's messages, within the channel's limits.
//!
//! A platform message carries at most one file, its text the caption ([`ferry_channel::Channel::send`]).
//! So a reply that is one short message and a file goes as one captioned file, as a person
//! would send it; a longer reply goes as its text messages and then one message per file.
//! A caption is kept within the channel's caption limit (Telegram: 1,024 characters) by
//! moving the rest into a text message after the file. A file bigger than the channel
//! takes is not sent; the chat gets a note saying so instead.

use ferry_channel::{Attachment, ChannelCapabilities, OutboundMessage, Target, TextFormat};

use crate::media::human_size as megabytes;

/// What a channel takes with a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FileLimits {
    /// The most characters a caption may have; `None`: as many as a message.
    pub caption_limit: Option<usize>,
    /// The largest file a bot may upload; `None`: no known limit.
    pub max_upload_bytes: Option<u64>,
}

impl FileLimits {
    /// What `capabilities` say a channel takes with a file.
    pub fn of(capabilities: &ChannelCapabilities) -> Self {
        Self { caption_limit: capabilities.caption_limit, max_upload_bytes: capabilities.max_upload_bytes }
    }

    /// Whether `file` can be uploaded; when not, the note the chat gets instead.
    pub fn refusal(&self, file: &Attachment) -> Option<String> {
        let (Some(limit), Some(size)) = (self.max_upload_bytes, file.size_bytes) else { return None };
        (size > limit).then(|| {
            let name = file.file_name.as_deref().unwrap_or(&file.reference);
            format!("📎 {name} ({}) is too large to send here (the limit is {}).", megabytes(size), megabytes(limit))
        })
    }
}

/// `messages` (a reply's text, in order) with `files` joined to them; each new message gets
/// an idempotency key from `key_prefix` and its index, so a resumed reply sends it once.
pub fn attach(
    mut messages: Vec<OutboundMessage>,
    files: &[Attachment],
    limits: FileLimits,
    target: &Target,
    key_prefix: &str,
) -> Vec<OutboundMessage> {
    let first_added = messages.len();
    let mut sendable = Vec::new();
    for file in files {
        match limits.refusal(file) {
            Some(note) => {
                let mut message = OutboundMessage::text(target.clone(), note);
                message.format = TextFormat::Plain;
                messages.push(message);
            }
            None => sendable.push(file.clone()),
        }
    }
    let mut files = sendable.into_iter();
    // One short message and a file: the message becomes the file's caption.
    if let [only] = messages.as_mut_slice()
        && only.attachments.is_empty()
        && limits.caption_limit.is_none_or(|limit| only.text.chars().count() <= limit)
        && let Some(first) = files.next()
    {
        only.attachments.push(first);
    }
    messages.extend(files.map(|file| {
        let mut message = OutboundMessage::text(target.clone(), String::new());
        message.attachments.push(file);
        message
    }));
    for (index, message) in messages.iter_mut().enumerate().skip(first_added) {
        message.idempotency_key = Some(format!("{key_prefix}:file:{index}"));
    }
    messages
}

/// `text` as a caption within `limit` characters, and what did not fit (cut at the last
/// line break or space before the limit), to be sent as text after the file.
pub fn split_caption(text: &str, limit: Option<usize>) -> (String, Option<String>) {
    let Some(limit) = limit else { return (text.to_owned(), None) };
    let Some((cut, _)) = text.char_indices().nth(limit) else { return (text.to_owned(), None) };
    let head = &text[..cut];
    let at = head.rfind('\n').or_else(|| head.rfind(' ')).filter(|at| *at > 0).unwrap_or(cut);
    let rest = text[at..].trim_start();
    (head[..at].trim_end().to_owned(), (!rest.is_empty()).then(|| rest.to_owned()))
}

#[cfg(test)]
mod tests {
    use ferry_channel::{AttachmentKind, ChatKind, ChatRef};

    use super::*;

    fn target() -> Target {
        Target { chat: ChatRef::new(ChatKind::Direct, "1"), thread_id: None }
    }

    fn file(name: &str, size: u64) -> Attachment {
        Attachment {
            file_name: Some(name.into()),
            size_bytes: Some(size),
            ..Attachment::remote(AttachmentKind::Image, name)
        }
    }

    fn texts(texts: &[&str]) -> Vec<OutboundMessage> {
        texts.iter().map(|text| OutboundMessage::text(target(), *text)).collect()
    }

    const TELEGRAM: FileLimits = FileLimits { caption_limit: Some(1024), max_upload_bytes: Some(50 << 20) };

    #[test]
    fn one_short_message_becomes_the_caption_of_the_first_file() {
        let sent = attach(texts(&["The chart."]), &[file("a.png", 10), file("b.png", 10)], TELEGRAM, &target(), "r");
        assert_eq!(sent.len(), 2);
        assert_eq!((sent[0].text.as_str(), sent[0].attachments.len()), ("The chart.", 1));
        assert_eq!((sent[1].text.as_str(), sent[1].attachments[0].reference.as_str()), ("", "b.png"));
        assert_eq!(sent[1].idempotency_key.as_deref(), Some("r:file:1"));
    }

    #[test]
    fn a_long_reply_keeps_its_text_and_sends_files_after_it() {
        let long = "x".repeat(1025);
        let sent = attach(texts(&[&long]), &[file("a.png", 10)], TELEGRAM, &target(), "r");
        assert_eq!(sent.len(), 2);
        assert!(sent[0].attachments.is_empty());
        assert_eq!(sent[1].attachments.len(), 1);
        let two = attach(texts(&["one", "two"]), &[file("a.png", 10)], TELEGRAM, &target(), "r");
        assert_eq!(two.len(), 3);
    }

    #[test]
    fn a_file_over_the_upload_limit_becomes_a_note() {
        let sent = attach(texts(&["Here."]), &[file("big.zip", 60 << 20)], TELEGRAM, &target(), "r");
        let shown: Vec<&str> = sent.iter().map(|message| message.text.as_str()).collect();
        assert_eq!(shown, ["Here.", "📎 big.zip (60 MB) is too large to send here (the limit is 50 MB)."]);
        assert!(sent.iter().all(|message| message.attachments.is_empty()));
    }

    #[test]
    fn a_reply_of_only_files_sends_them_alone() {
        let sent = attach(Vec::new(), &[file("a.png", 10)], TELEGRAM, &target(), "r");
        assert_eq!((sent.len(), sent[0].text.as_str()), (1, ""));
    }

    #[test]
    fn a_caption_is_cut_at_a_word_and_the_rest_follows() {
        assert_eq!(split_caption("short", Some(1024)), ("short".to_owned(), None));
        let (caption, rest) = split_caption("one two three", Some(8));
        assert_eq!((caption.as_str(), rest.as_deref()), ("one two", Some("three")));
        let (caption, rest) = split_caption("abcdefghij", Some(4));
        assert_eq!((caption.as_str(), rest.as_deref()), ("abcd", Some("efghij")));
        assert_eq!(split_caption("anything", None), ("anything".to_owned(), None));
    }
}

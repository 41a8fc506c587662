//! Reply shaping (SPEC §7): a turn's final payloads with their reply directives read and
//! taken out ([`super::directive`]), then the silent token ([`super::silent`]),
//! `HEARTBEAT_OK` stripping, the response prefix, messaging-tool dedup and the tool-error
//! fallback.
//!
//! Dedup exists because an agent that used the `message` tool to answer often also says so
//! ("Sent it to you!"): the user would get the answer and then a note about it, or the same
//! text twice. When the tool already wrote to the chat the turn came from, the turn's final
//! payloads are dropped; otherwise a final that repeats what the tool sent elsewhere in the
//! same chat (another thread) is dropped. Sends to another chat never silence the local
//! reply — the person who asked still hears back.

use super::directive::{self, ReplyTarget};
use super::silent;
use crate::agent::Payload;
use crate::agent::run::ToolFailure;
use crate::agent::tools::{Origin, ToolSend};

/// A turn's reply, shaped: the texts to send, in order, and the message the model asked
/// for it to be threaded to, if it did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShapedReply {
    pub texts: Vec<String>,
    /// From the first reply directive with a target, across the payloads. Whether the
    /// channel can thread replies is the turn's question.
    pub reply_to: Option<ReplyTarget>,
}

/// Shapes a turn's final payloads from `origin` in SPEC order: reply directives, the silent
/// token, `HEARTBEAT_OK`, the response prefix, messaging-tool dedup, then the tool-error
/// fallback, and last the verbose tool summaries. `sends` are the `message` tool's
/// successful sends during the turn, `failures` its failed tool calls, `tool_lines` one
/// verbose summary line per tool call (empty unless verbose is on).
pub fn shape_reply(
    payloads: &[Payload],
    failures: &[ToolFailure],
    origin: &Origin,
    sends: &[ToolSend],
    prefix: Option<&str>,
    tool_lines: &[String],
) -> ShapedReply {
    let mut reply_to = None;
    let mut texts: Vec<String> = Vec::new();
    let answered_here = tool_answered_here(origin, sends);
    // A tool's send here answers the turn, but not a failure after it: the user is told the
    // run failed (and whether their message is kept for later).
    for payload in payloads.iter().filter(|payload| !answered_here || payload.is_error) {
        let stripped = directive::strip(&payload.text);
        if reply_to.is_none() {
            reply_to = stripped.directives.reply_to;
        }
        let Some(text) = silent::shape_final(&stripped.text).and_then(|text| strip_heartbeat(&text)) else {
            continue;
        };
        let text = with_prefix(text, prefix);
        if !repeats_a_tool_send(origin, sends, &text) {
            texts.push(text);
        }
    }
    if texts.is_empty()
        && let Some(warning) = tool_error_fallback(failures, sends)
    {
        texts.push(warning);
    }
    // What the tools did comes before what the model concluded from it. When the tool
    // already answered here, nothing else of the turn is sent — its summary neither.
    if !tool_lines.is_empty() && !answered_here {
        texts.insert(0, with_prefix(tool_lines.join("\n"), prefix));
    }
    ShapedReply { texts, reply_to }
}

/// Words in an error that suggest the model can fix the call itself (a bad argument):
/// such a failure of a read-only tool is not worth telling the user about.
const RECOVERABLE: &[&str] = &["missing", "invalid", "required", "must be", "expected", "unknown field"];

/// Longest error excerpt shown to the user.
const FALLBACK_ERROR_CHARS: usize = 400;

/// `⚠️ <tool> failed: <first line of the error>` when nothing else will be sent: always
/// for a tool that changes things (the user must know it did not happen), for a read-only
/// tool only when the `message` tool sent nothing either and the error does not look like
/// one the model could have fixed.
pub fn tool_error_fallback(failures: &[ToolFailure], sends: &[ToolSend]) -> Option<String> {
    let failure = failures.iter().rev().find(|failure| failure.mutates).or_else(|| {
        let last = failures.last()?;
        let lowered = last.error.to_lowercase();
        (sends.is_empty() && !RECOVERABLE.iter().any(|word| lowered.contains(word))).then_some(last)
    })?;
    let first_line = failure.error.lines().find(|line| !line.trim().is_empty()).unwrap_or("").trim();
    let excerpt: String = first_line.chars().take(FALLBACK_ERROR_CHARS).collect();
    Some(format!("⚠️ {} failed: {excerpt}", failure.name))
}

/// What a heartbeat run answers when there is nothing to report.
pub const HEARTBEAT_TOKEN: &str = "HEARTBEAT_OK";

/// Markdown wrappers a model puts around a bare token (`**HEARTBEAT_OK**`).
const WRAPPERS: &[char] = &['*', '_', '`', '~'];

/// Shorter texts are too likely to match by accident ("ok", "done") to suppress anything.
const DEDUP_MIN_CHARS: usize = 10;

/// `text` without `HEARTBEAT_OK` at its start or end (markdown wrappers included); `None`
/// when nothing else is left.
pub fn strip_heartbeat(text: &str) -> Option<String> {
    let mut rest = text.trim();
    if let Some(after) = rest.trim_start_matches(WRAPPERS).strip_prefix(HEARTBEAT_TOKEN) {
        rest = after.trim_start_matches(WRAPPERS).trim_start();
    }
    if let Some(before) = rest.trim_end_matches(WRAPPERS).strip_suffix(HEARTBEAT_TOKEN) {
        rest = before.trim_end_matches(WRAPPERS).trim_end();
    }
    (!rest.is_empty()).then(|| rest.to_owned())
}

/// `text` with the operator's response prefix in front, unless it already starts with it
/// (a model that saw earlier prefixed replies tends to copy the prefix).
pub fn with_prefix(text: String, prefix: Option<&str>) -> String {
    match prefix.map(str::trim).filter(|prefix| !prefix.is_empty()) {
        Some(prefix) if !text.starts_with(prefix) => format!("{prefix} {text}"),
        _ => text,
    }
}

/// Whether the final payloads of a turn from `origin` should be dropped because the
/// `message` tool already delivered to that very place (channel, account, chat and thread).
/// `sends` are the tool's successful sends only.
pub fn tool_answered_here(origin: &Origin, sends: &[ToolSend]) -> bool {
    sends.iter().any(|send| same_chat(origin, send) && send.target.thread_id == origin.target.thread_id)
}

/// The send went to the chat the turn came from (any thread of it).
fn same_chat(origin: &Origin, send: &ToolSend) -> bool {
    send.channel == origin.channel
        && send.account_id == origin.account_id
        && send.target.chat.id == origin.target.chat.id
}

/// Whether the final `text` repeats something the `message` tool sent into the same chat
/// (another thread of it): the normalized texts, both at least 10 characters long,
/// contain one another. Sends to other chats are not considered.
pub fn repeats_a_tool_send(origin: &Origin, sends: &[ToolSend], text: &str) -> bool {
    let text = normalize(text);
    if text.chars().count() < DEDUP_MIN_CHARS {
        return false;
    }
    sends
        .iter()
        .filter(|send| same_chat(origin, send))
        .map(|send| normalize(&send.text))
        .filter(|sent| sent.chars().count() >= DEDUP_MIN_CHARS)
        .any(|sent| sent.contains(&text) || text.contains(&sent))
}

/// Lowercase, emoji removed, whitespace collapsed to single spaces: the form in which two
/// texts count as the same message.
pub fn normalize(text: &str) -> String {
    let mut normalized = String::with_capacity(text.len());
    for word in text.split_whitespace() {
        let word: String = word.chars().filter(|c| !is_emoji(*c)).flat_map(char::to_lowercase).collect();
        if word.is_empty() {
            continue;
        }
        if !normalized.is_empty() {
            normalized.push(' ');
        }
        normalized.push_str(&word);
    }
    normalized
}

/// Pictographs, symbols, flags and the joiners and selectors that build emoji sequences.
fn is_emoji(c: char) -> bool {
    matches!(u32::from(c),
        0x1F000..=0x1FAFF   // pictographs, emoticons, transport, flags, supplemental symbols
        | 0x2600..=0x27BF   // miscellaneous symbols, dingbats
        | 0x2B00..=0x2BFF   // arrows and stars used as emoji
        | 0xFE00..=0xFE0F   // variation selectors
        | 0x200D            // zero-width joiner
        | 0x20E3            // combining keycap
        | 0xE0020..=0xE007F // tag characters (subdivision flags)
    )
}

#[cfg(test)]
mod tests {
    use ferry_channel::{ChatKind, ChatRef, Target};

    use super::*;

    fn target(chat: &str, thread: Option<&str>) -> Target {
        Target { chat: ChatRef::new(ChatKind::Direct, chat), thread_id: thread.map(str::to_owned) }
    }

    fn origin(chat: &str, thread: Option<&str>) -> Origin {
        Origin { channel: "telegram".into(), account_id: "default".into(), target: target(chat, thread) }
    }

    fn sent(chat: &str, thread: Option<&str>, text: &str) -> ToolSend {
        ToolSend {
            channel: "telegram".into(),
            account_id: "default".into(),
            target: target(chat, thread),
            text: text.into(),
            message_id: "1".into(),
        }
    }

    #[test]
    fn heartbeat_ok_is_stripped_at_either_end_with_its_wrappers() {
        assert_eq!(strip_heartbeat("HEARTBEAT_OK"), None);
        assert_eq!(strip_heartbeat("  **HEARTBEAT_OK**  "), None);
        assert_eq!(strip_heartbeat("HEARTBEAT_OK All quiet.").as_deref(), Some("All quiet."));
        assert_eq!(strip_heartbeat("Disk is 91% full. `HEARTBEAT_OK`").as_deref(), Some("Disk is 91% full."));
        assert_eq!(
            strip_heartbeat("The HEARTBEAT_OK token means fine.").as_deref(),
            Some("The HEARTBEAT_OK token means fine.")
        );
    }

    #[test]
    fn the_response_prefix_is_added_once() {
        assert_eq!(with_prefix("hi".into(), Some("[bot]")), "[bot] hi");
        assert_eq!(with_prefix("[bot] hi".into(), Some("[bot]")), "[bot] hi");
        assert_eq!(with_prefix("hi".into(), None), "hi");
        assert_eq!(with_prefix("hi".into(), Some("  ")), "hi");
    }

    #[test]
    fn a_tool_send_to_the_same_place_answers_the_turn() {
        let sends = [sent("42", None, "Here is the report.")];
        assert!(tool_answered_here(&origin("42", None), &sends));
        assert!(!tool_answered_here(&origin("42", Some("7")), &sends), "another thread is another place");
        assert!(!tool_answered_here(&origin("43", None), &sends), "another chat");
        assert!(!tool_answered_here(&origin("42", None), &[]));
    }

    #[test]
    fn a_final_repeating_a_send_in_the_same_chat_is_a_duplicate() {
        let sends = [sent("42", Some("7"), "🚀 The deploy finished   at 10:02")];
        let here = origin("42", None);
        assert!(repeats_a_tool_send(&here, &sends, "the deploy finished at 10:02"));
        assert!(repeats_a_tool_send(&here, &sends, "Update: the DEPLOY finished at 10:02 🎉, all green"));
        assert!(!repeats_a_tool_send(&here, &sends, "Sent it to you"), "no containment either way");
        assert!(!repeats_a_tool_send(&here, &[sent("42", None, "ok")], "ok"), "too short to judge");
        assert!(
            !repeats_a_tool_send(&origin("99", None), &sends, "the deploy finished at 10:02"),
            "a send to another chat never silences this one"
        );
    }

    #[test]
    fn finals_go_through_every_step_in_order() {
        let payload = |text: &str| Payload { text: text.into(), is_error: false };
        let here = origin("42", None);
        let payloads = [payload("😄 NO_REPLY"), payload("  no_reply "), payload("**HEARTBEAT_OK**"), payload("Hi")];
        assert_eq!(shape_reply(&payloads, &[], &here, &[], Some("[bot]"), &[]).texts, ["[bot] 😄", "[bot] Hi"]);

        let tool_here = [sent("42", None, "The report is attached.")];
        assert!(shape_reply(&[payload("Sent it to you!")], &[], &here, &tool_here, None, &[]).texts.is_empty());
        let tool_elsewhere = [sent("99", None, "The report is attached.")];
        assert_eq!(
            shape_reply(&[payload("Sent it to you!")], &[], &here, &tool_elsewhere, None, &[]).texts,
            ["Sent it to you!"]
        );
        let failed = Payload { text: "⚠️ The model failed; I kept your message.".into(), is_error: true };
        assert_eq!(
            shape_reply(&[payload("Half an answer"), failed.clone()], &[], &here, &tool_here, None, &[]).texts,
            [failed.text],
            "a failure after a send here is still told"
        );
    }

    #[test]
    fn verbose_tool_lines_come_first_and_go_wherever_the_reply_goes() {
        let payload = |text: &str| Payload { text: text.into(), is_error: false };
        let here = origin("42", None);
        let lines = ["🔧 current\\_time".to_owned(), "🔧 search — q: rust".to_owned()];
        assert_eq!(
            shape_reply(&[payload("It is noon.")], &[], &here, &[], Some("[bot]"), &lines).texts,
            ["[bot] 🔧 current\\_time\n🔧 search — q: rust", "[bot] It is noon."]
        );
        assert_eq!(
            shape_reply(&[payload("NO_REPLY")], &[], &here, &[], None, &lines).texts.len(),
            1,
            "a silent reply still shows what the tools did"
        );
        let tool_here = [sent("42", None, "The report is attached.")];
        assert!(shape_reply(&[payload("Sent!")], &[], &here, &tool_here, None, &lines).texts.is_empty());
    }

    #[test]
    fn reply_directives_are_removed_and_the_first_target_is_kept() {
        let payload = |text: &str| Payload { text: text.into(), is_error: false };
        let here = origin("42", None);
        let shaped = shape_reply(&[payload("[[reply_to_current]] Yes, that one.")], &[], &here, &[], None, &[]);
        assert_eq!(shaped, ShapedReply { texts: vec!["Yes, that one.".into()], reply_to: Some(ReplyTarget::Current) });
        let payloads = [
            payload("[[ audio_as_voice ]]"),
            payload("[[ reply_to : 17 ]] Part one."),
            payload("[[reply_to_current]] Two."),
        ];
        let shaped = shape_reply(&payloads, &[], &here, &[], Some("[bot]"), &[]);
        assert_eq!(
            shaped.texts,
            ["[bot] Part one.", "[bot] Two."],
            "a payload that was only a directive is no message"
        );
        assert_eq!(shaped.reply_to, Some(ReplyTarget::Message("17".into())));
        let silent = shape_reply(&[payload("[[reply_to_current]] NO_REPLY")], &[], &here, &[], None, &[]);
        assert!(silent.texts.is_empty(), "the silent token is seen behind a directive");
    }

    fn failure(name: &str, error: &str, mutates: bool) -> ToolFailure {
        ToolFailure { name: name.into(), error: error.into(), mutates }
    }

    #[test]
    fn a_failed_tool_is_reported_when_nothing_else_would_be() {
        let silent = [Payload { text: "NO_REPLY".into(), is_error: false }];
        let here = origin("42", None);
        let write = [failure("write", "permission denied: /etc/passwd\nat line 3", true)];
        assert_eq!(
            shape_reply(&silent, &write, &here, &[], None, &[]).texts,
            ["⚠️ write failed: permission denied: /etc/passwd"]
        );
        let answered = [Payload { text: "I could not write it, sorry.".into(), is_error: false }];
        assert_eq!(shape_reply(&answered, &write, &here, &[], None, &[]).texts, ["I could not write it, sorry."]);

        let read = [failure("read", "connection refused", false)];
        assert_eq!(shape_reply(&silent, &read, &here, &[], None, &[]).texts, ["⚠️ read failed: connection refused"]);
        let fixable = [failure("read", "`path` is required", false)];
        assert!(
            shape_reply(&silent, &fixable, &here, &[], None, &[]).texts.is_empty(),
            "the model can fix that itself"
        );
        let long = [failure("message", &"x".repeat(1000), true)];
        assert_eq!(
            tool_error_fallback(&long, &[]).unwrap().chars().count(),
            "⚠️ message failed: ".chars().count() + 400
        );
    }

    #[test]
    fn normalizing_ignores_case_emoji_and_spacing() {
        assert_eq!(normalize("  Hello\n\n  WORLD 👋🏽 ❤️ "), "hello world");
        assert_eq!(normalize("🇩🇪"), "");
    }
}

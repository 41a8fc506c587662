//! The silent token (`NO_REPLY`, SPEC §7 shaping step 1): how an agent says "nothing to
//! add", and how Ferry makes sure none of it ever reaches a chat.
//!
//! For a final payload, [`shape_final`] drops a reply that is only the token (any case,
//! surrounding whitespace ignored), strips a token glued to the start (`NO_REPLYHello`) or
//! standing at the very end after whitespace or `*` (`Done. NO_REPLY`), and leaves every
//! other use alone (`NO_REPLY: reason`, a token in mid-text).
//!
//! While a reply streams, the text so far may be the beginning of the token (`NO`,
//! `NO_RE`). [`visible_while_streaming`] holds such a fragment back — at the start of the
//! reply or at its end after whitespace — so no preview, block or typing indicator ever
//! shows part of a silent reply. Ordinary text that merely starts like the token ("No
//! problem") is shown as soon as it stops being a possible prefix.

use crate::agent::prompt::SILENT_TOKEN;

/// A final payload's text after the silent-token rules; `None` when nothing is left to send.
pub fn shape_final(text: &str) -> Option<String> {
    let trimmed = text.trim();
    if trimmed.is_empty() || trimmed.eq_ignore_ascii_case(SILENT_TOKEN) {
        return None;
    }
    let shaped = strip_trailing(strip_glued(trimmed));
    let shaped = shaped.trim();
    (!shaped.is_empty()).then(|| shaped.to_owned())
}

/// `NO_REPLYHello` → `Hello`. A token followed by a space, `:` or other punctuation is
/// the model talking about the token, not using it, and stays.
fn strip_glued(text: &str) -> &str {
    match text.strip_prefix(SILENT_TOKEN) {
        Some(rest) if rest.chars().next().is_some_and(char::is_alphanumeric) => rest,
        _ => text,
    }
}

/// `Done. NO_REPLY` / `Done **NO_REPLY**` → `Done.` / `Done`.
fn strip_trailing(text: &str) -> &str {
    let unwrapped = text.trim_end_matches('*');
    let Some(before) = unwrapped.strip_suffix(SILENT_TOKEN) else { return text };
    match before.chars().next_back() {
        Some(c) if c.is_whitespace() || c == '*' => before.trim_end_matches('*').trim_end(),
        _ => text,
    }
}

/// The part of a streaming reply (`text` = everything so far) that may be shown now.
///
/// Empty when the whole reply so far could still become the silent token; otherwise the
/// text without a trailing fragment that could (`Done. NO_RE` shows `Done.`), without a
/// token glued to the start, and without trailing whitespace or `*`. As `text` grows, what this
/// returns only grows too (each result is a prefix of the next), so callers can stream the
/// difference.
pub fn visible_while_streaming(text: &str) -> &str {
    let start = text.len() - text.trim_start().len();
    let body = &text[start..];
    if could_become_token(body.trim_end()) {
        return "";
    }
    let body = strip_glued(body);
    // A trailing fragment that could still become the token, after whitespace or `*`.
    let trimmed = body.trim_end();
    let fragment_start = trimmed.rfind(|c: char| c.is_whitespace() || c == '*').map_or(0, |i| i + 1);
    let fragment = &trimmed[fragment_start..];
    let shown = if fragment_start > 0 && could_become_token(fragment) { &body[..fragment_start] } else { trimmed };
    // Trailing `*` may be the opening of `**NO_REPLY**`: shown once something follows it.
    shown.trim_end_matches(|c: char| c == '*' || c.is_whitespace())
}

/// Whether `text` (non-empty) is the token or a beginning of it, in any case.
fn could_become_token(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= SILENT_TOKEN.len()
        && SILENT_TOKEN.get(..text.len()).is_some_and(|prefix| prefix.eq_ignore_ascii_case(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_that_is_only_the_token_is_dropped_in_any_case() {
        for text in ["NO_REPLY", "  no_reply \n", "No_Reply", "", "   "] {
            assert_eq!(shape_final(text), None, "{text:?}");
        }
    }

    #[test]
    fn a_glued_or_trailing_token_is_stripped() {
        assert_eq!(shape_final("NO_REPLYHello").as_deref(), Some("Hello"));
        assert_eq!(shape_final("😄 NO_REPLY").as_deref(), Some("😄"));
        assert_eq!(shape_final("Done. NO_REPLY").as_deref(), Some("Done."));
        assert_eq!(shape_final("Done **NO_REPLY**").as_deref(), Some("Done"));
        assert_eq!(shape_final("Done.\n\nNO_REPLY\n").as_deref(), Some("Done."));
    }

    #[test]
    fn other_uses_of_the_token_are_left_alone() {
        for text in ["NO_REPLY: the user asked me to stay quiet", "Say NO_REPLY to stay silent.", "xNO_REPLY"] {
            assert_eq!(shape_final(text).as_deref(), Some(text), "{text:?}");
        }
        assert_eq!(shape_final("  No problem!  ").as_deref(), Some("No problem!"));
    }

    #[test]
    fn a_streamed_token_never_becomes_visible() {
        for partial in ["N", "NO", "NO_RE", "NO_REPLY", "  no_rep", "NO_REPLY\n"] {
            assert_eq!(visible_while_streaming(partial), "", "{partial:?}");
        }
    }

    #[test]
    fn ordinary_text_streams_once_it_cannot_be_the_token() {
        assert_eq!(visible_while_streaming("No"), "");
        assert_eq!(visible_while_streaming("No problem"), "No problem");
        assert_eq!(visible_while_streaming("Hello"), "Hello");
        assert_eq!(visible_while_streaming("NO_REPLY: because"), "NO_REPLY: because");
    }

    #[test]
    fn a_trailing_fragment_is_held_back_until_it_resolves() {
        assert_eq!(visible_while_streaming("Done. NO_RE"), "Done.");
        assert_eq!(visible_while_streaming("Done. **NO"), "Done.");
        assert_eq!(visible_while_streaming("Done. Nothing"), "Done. Nothing");
        assert_eq!(visible_while_streaming("NO_REPLYHel"), "Hel");
    }

    #[test]
    fn what_is_visible_only_grows_as_the_text_grows() {
        let text = "No problem. NO_RE NO_REPLY done **bold** NO_REPLY";
        let ends: Vec<usize> = (0..=text.len()).filter(|end| text.is_char_boundary(*end)).collect();
        for pair in ends.windows(2) {
            let (before, after) =
                (visible_while_streaming(&text[..pair[0]]), visible_while_streaming(&text[..pair[1]]));
            assert!(after.starts_with(before), "{before:?} then {after:?}");
        }
    }

    #[test]
    fn what_streams_is_always_a_prefix_of_what_is_finally_sent() {
        for final_text in ["Done. NO_REPLY", "No problem at all", "NO_REPLYHello there", "NO_REPLY: fine"] {
            let shaped = shape_final(final_text).unwrap_or_default();
            for end in (1..=final_text.len()).filter(|end| final_text.is_char_boundary(*end)) {
                let visible = visible_while_streaming(&final_text[..end]);
                assert!(shaped.starts_with(visible), "{final_text:?}[..{end}] showed {visible:?}, final {shaped:?}");
            }
        }
    }
}

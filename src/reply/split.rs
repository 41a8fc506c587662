//! Cutting a reply into messages that fit the channel's text limit.
//!
//! Interim: a plain cut at a newline or space near the limit. The platform formatter
//! replaces it with a split that knows code fences and markup.

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
}

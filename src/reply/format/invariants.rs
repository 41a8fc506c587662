//! What every rendered and split reply must satisfy, as checks: the property tests
//! (`properties`) and the fuzz targets (`fuzz/fuzz_targets/format_split.rs`) assert the same
//! things. Compiled for tests and with the `fuzzing` feature only.

use ferry_channel::MarkupDialect;

use super::part_as_plain;

/// Every markup a reply is rendered in, for checks that go through them all.
pub const DIALECTS: [MarkupDialect; 5] = [
    MarkupDialect::Plain,
    MarkupDialect::Markdown,
    MarkupDialect::TelegramHtml,
    MarkupDialect::DiscordMarkdown,
    MarkupDialect::SlackMrkdwn,
];

/// A part must end with every fence closed, by CommonMark's rules as `split` reads them: a run
/// of three or more backticks or tildes opens a fence (a backtick one only without a backtick
/// after it), and only a run of the same character, at least as long and alone on its line,
/// closes it. A fence line of the other character inside a fence is code: ```` ``` ```` in a
/// `~~~` block opens nothing.
pub fn fences_balanced(part: &str) -> bool {
    let mut open: Option<(char, usize)> = None;
    for line in part.lines() {
        let line = line.trim_start_matches([' ', '>', '\t']);
        let Some(marker) = line.chars().next().filter(|&c| c == '`' || c == '~') else { continue };
        // The marker is ASCII: its count of characters is its length in bytes.
        let length = line.chars().take_while(|&c| c == marker).count();
        if length < 3 {
            continue;
        }
        let rest = &line[length..];
        match open {
            Some((open_marker, open_length))
                if marker == open_marker && length >= open_length && rest.trim().is_empty() =>
            {
                open = None
            }
            None if !(marker == '`' && rest.contains('`')) => open = Some((marker, length)),
            _ => {}
        }
    }
    open.is_none()
}

const TELEGRAM_TAGS: [&str; 7] = ["b", "i", "s", "code", "pre", "a", "blockquote"];
const TELEGRAM_ENTITIES: [&str; 4] = ["&amp;", "&lt;", "&gt;", "&quot;"];

/// Only Telegram's tags, properly nested and all closed; `&` only in whole entities.
pub fn telegram_well_formed(part: &str) -> Result<(), String> {
    let mut open: Vec<&str> = Vec::new();
    let mut rest = part;
    while let Some(index) = rest.find(['<', '&']) {
        rest = &rest[index..];
        if rest.starts_with('&') {
            let entity =
                TELEGRAM_ENTITIES.iter().find(|e| rest.starts_with(**e)).ok_or(format!("bare & in {part:?}"))?;
            rest = &rest[entity.len()..];
            continue;
        }
        let end = rest.find('>').ok_or(format!("unclosed tag in {part:?}"))?;
        let tag = &rest[1..end];
        rest = &rest[end + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            if open.pop() != Some(name) {
                return Err(format!("</{name}> does not match in {part:?}"));
            }
        } else {
            let name = tag.split(' ').next().unwrap_or_default();
            if !TELEGRAM_TAGS.contains(&name) {
                return Err(format!("<{tag}> is not a Telegram tag in {part:?}"));
            }
            open.push(name);
        }
    }
    if open.is_empty() { Ok(()) } else { Err(format!("{open:?} left open in {part:?}")) }
}

/// `parts` are `input` in order, with only whitespace between them and around them.
pub fn rejoins(input: &str, parts: &[String]) -> Result<(), String> {
    let mut cursor = 0;
    for part in parts {
        let rest = &input[cursor..];
        let offset = rest.find(part.as_str()).ok_or(format!("{part:?} not found after {cursor}"))?;
        if !rest[..offset].trim().is_empty() {
            return Err(format!("{:?} lost before {part:?}", &rest[..offset]));
        }
        cursor += offset + part.len();
    }
    if input[cursor..].trim().is_empty() { Ok(()) } else { Err(format!("{:?} lost at the end", &input[cursor..])) }
}

/// Splitting lost no text: plain text rejoins exactly ([`rejoins`]); for Telegram HTML, the
/// parts' text without tags is the whole's (the tags closed and reopened at a cut are the
/// only thing added); for the markdown dialects, which close and reopen code fences at a
/// cut, the whole's text is in the parts in order. Whitespace is not compared: breaks drop
/// it.
pub fn keeps_text(rendered: &str, parts: &[String], dialect: MarkupDialect) -> Result<(), String> {
    let visible = |text: &str| -> Vec<char> { text.chars().filter(|c| !c.is_whitespace()).collect() };
    match dialect {
        MarkupDialect::Plain => rejoins(rendered, parts),
        MarkupDialect::TelegramHtml => {
            let whole = visible(&part_as_plain(rendered, dialect));
            let split: Vec<char> = parts.iter().flat_map(|part| visible(&part_as_plain(part, dialect))).collect();
            if whole == split {
                Ok(())
            } else {
                Err(format!(
                    "the parts' text {:?} is not the reply's {:?}",
                    split.iter().collect::<String>(),
                    whole.iter().collect::<String>()
                ))
            }
        }
        MarkupDialect::Markdown | MarkupDialect::DiscordMarkdown | MarkupDialect::SlackMrkdwn => {
            let split: Vec<char> = parts.iter().flat_map(|part| visible(part)).collect();
            let mut rest = split.iter();
            match visible(rendered).into_iter().position(|c| !rest.any(|&s| s == c)) {
                None => Ok(()),
                Some(at) => Err(format!("the reply's text from character {at} on is missing from the parts")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fences_balanced;

    #[test]
    fn a_fence_of_the_other_character_inside_a_fence_is_code() {
        // Found by the format_split fuzz target: the part was right, the check was not.
        assert!(fences_balanced("~~~| 1 < 22 ,|\ntext\n```item\n- **item**\n~~~"));
        assert!(fences_balanced("```rust\n~~~\n```"));
    }

    #[test]
    fn an_unclosed_fence_of_either_character_is_unbalanced() {
        assert!(!fences_balanced("~~~\ncode"));
        assert!(!fences_balanced("```\ncode\n~~~"));
        assert!(!fences_balanced("````\ncode\n```"));
        assert!(fences_balanced("> ````\n> code\n> `````"));
        assert!(fences_balanced("```x```"), "inline code, not a fence");
    }
}

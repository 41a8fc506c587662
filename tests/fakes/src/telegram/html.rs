//! Telegram's `parse_mode=HTML`: what the server accepts, what the user sees, and the exact error
//! text when it refuses.
//!
//! The rules follow the Bot API server (tdlib's `parse_html`), not a browser: a fixed set of
//! tags, the entities `&lt; &gt; &amp; &quot;` and numeric references, and a stray `&` that is
//! not an entity is kept literally. A `<` always starts a tag, so `1 < 2` fails with
//! `Unsupported start tag "" at byte offset 2`. Byte offsets are into the UTF-8 request text;
//! entity offsets in the result are in UTF-16 code units, as everywhere in the Bot API.

use serde_json::{Value, json};

/// Tags Telegram accepts in HTML parse mode (compared lowercased).
const SUPPORTED_TAGS: &[&str] = &[
    "a",
    "b",
    "strong",
    "i",
    "em",
    "u",
    "ins",
    "s",
    "strike",
    "del",
    "code",
    "pre",
    "tg-spoiler",
    "span",
    "tg-emoji",
    "blockquote",
];

/// Text after markup was applied: what the recipient sees, and its formatting.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Formatted {
    /// The visible text, tags removed and entities decoded.
    pub(crate) text: String,
    /// `MessageEntity` objects, offsets and lengths in UTF-16 code units.
    pub(crate) entities: Vec<Value>,
}

/// Length in UTF-16 code units, the unit of Bot API offsets and of the 4096 text limit.
pub(crate) fn utf16_len(text: &str) -> usize {
    text.encode_utf16().count()
}

/// Parses `text` as Telegram HTML. `Err` holds the detail that follows
/// `Bad Request: can't parse entities: ` in Telegram's answer.
pub(crate) fn parse(text: &str) -> Result<Formatted, String> {
    Parser { bytes: text.as_bytes(), out: Vec::new(), utf16: 0, open: Vec::new(), entities: Vec::new() }.run()
}

/// A tag opened and not yet closed.
struct OpenTag {
    name: String,
    /// `href` of `a`, language of `code`, class of `span`, or `expandable` for `blockquote`.
    argument: String,
    /// UTF-16 offset of the first character inside the tag.
    utf16_start: usize,
    /// Byte position in the output where the tag's content starts (for `<a>` without href).
    out_start: usize,
}

struct Parser<'a> {
    bytes: &'a [u8],
    out: Vec<u8>,
    utf16: usize,
    open: Vec<OpenTag>,
    entities: Vec<Value>,
}

fn is_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\r' | b'\n' | 0x0b | 0x0c)
}

impl Parser<'_> {
    /// The byte at `index`, or 0 past the end (the server works on a NUL-terminated string).
    fn at(&self, index: usize) -> u8 {
        self.bytes.get(index).copied().unwrap_or(0)
    }

    fn slice(&self, from: usize, to: usize) -> String {
        String::from_utf8_lossy(&self.bytes[from..to.min(self.bytes.len())]).into_owned()
    }

    fn push_char(&mut self, ch: char) {
        let mut buffer = [0; 4];
        self.out.extend_from_slice(ch.encode_utf8(&mut buffer).as_bytes());
        self.utf16 += ch.len_utf16();
    }

    /// Decodes the entity at `*pos` (which holds `&`) and moves past it, or returns `None` and
    /// leaves `*pos` alone when it is not one Telegram knows.
    fn entity(&self, pos: &mut usize) -> Option<char> {
        let mut end = *pos + 1;
        let code = if self.at(end) == b'#' {
            end += 1;
            let mut value: u32 = 0;
            let hex = self.at(end) == b'x';
            if hex {
                end += 1;
            }
            loop {
                let byte = self.at(end);
                let digit = if hex { (byte as char).to_digit(16) } else { (byte as char).to_digit(10) };
                let Some(digit) = digit else { break };
                value = value.saturating_mul(if hex { 16 } else { 10 }).saturating_add(digit);
                end += 1;
            }
            if value == 0 || value >= 0x10ffff || end - *pos >= 10 {
                return None;
            }
            char::from_u32(value)?
        } else {
            while self.at(end).is_ascii_alphabetic() {
                end += 1;
            }
            match &self.bytes[*pos + 1..end] {
                b"lt" => '<',
                b"gt" => '>',
                b"amp" => '&',
                b"quot" => '"',
                _ => return None,
            }
        };
        *pos = if self.at(end) == b';' { end + 1 } else { end };
        Some(code)
    }

    fn run(mut self) -> Result<Formatted, String> {
        let mut i = 0;
        while i < self.bytes.len() {
            let byte = self.bytes[i];
            if byte == b'&'
                && let Some(ch) = self.entity(&mut i)
            {
                self.push_char(ch);
                continue;
            }
            if byte != b'<' {
                // Count UTF-16 units at each character's first byte: 4-byte characters take two.
                if byte & 0xc0 != 0x80 {
                    self.utf16 += if byte >= 0xf0 { 2 } else { 1 };
                }
                self.out.push(byte);
                i += 1;
                continue;
            }
            i = if self.at(i + 1) == b'/' { self.end_tag(i)? } else { self.start_tag(i)? };
        }
        if let Some(tag) = self.open.last() {
            return Err(format!("Can't find end tag corresponding to start tag \"{}\"", tag.name));
        }
        for entity in &mut self.entities {
            if entity["type"] == "code"
                && let Some(object) = entity.as_object_mut()
            {
                object.remove("language");
            }
        }
        self.entities.sort_by_key(|entity| (entity["offset"].as_u64(), std::cmp::Reverse(entity["length"].as_u64())));
        let text = String::from_utf8(self.out).map_err(|_| {
            "Text contains invalid Unicode characters after decoding HTML entities, check for unmatched surrogate \
             code units"
                .to_owned()
        })?;
        Ok(Formatted { text, entities: self.entities })
    }

    /// Parses `<name attr="value" ...>` starting at `begin` and returns the position after `>`.
    fn start_tag(&mut self, begin: usize) -> Result<usize, String> {
        let mut i = begin + 1;
        while !is_space(self.at(i)) && self.at(i) != b'>' && self.at(i) != 0 {
            i += 1;
        }
        if self.at(i) == 0 {
            return Err(format!("Unclosed start tag at byte offset {begin}"));
        }
        let name = self.slice(begin + 1, i).to_lowercase();
        if !SUPPORTED_TAGS.contains(&name.as_str()) {
            return Err(format!("Unsupported start tag \"{name}\" at byte offset {begin}"));
        }
        let mut argument = String::new();
        while self.at(i) != b'>' {
            while self.at(i) != 0 && is_space(self.at(i)) {
                i += 1;
            }
            if self.at(i) == b'>' {
                break;
            }
            let attribute_start = i;
            while self.at(i) != 0 && !is_space(self.at(i)) && self.at(i) != b'=' && self.at(i) != b'>' {
                i += 1;
            }
            let attribute = self.slice(attribute_start, i).to_lowercase();
            if attribute.is_empty() {
                return Err(format!("Empty attribute name in the tag \"{name}\" at byte offset {begin}"));
            }
            while self.at(i) != 0 && is_space(self.at(i)) {
                i += 1;
            }
            if self.at(i) != b'=' {
                // `<blockquote expandable>` is the one attribute without a value.
                if name == "blockquote" && attribute == "expandable" {
                    argument = attribute;
                    continue;
                }
                if self.at(i) == 0 {
                    return Err(format!("Unclosed start tag at byte offset {begin}"));
                }
                return Err(format!(
                    "Expected equal sign in declaration of an attribute of the tag \"{name}\" at byte offset {begin}"
                ));
            }
            i += 1;
            while self.at(i) != 0 && is_space(self.at(i)) {
                i += 1;
            }
            if self.at(i) == 0 {
                return Err(format!("Unclosed start tag \"{name}\" at byte offset {begin}"));
            }
            let value = if self.at(i) == b'"' || self.at(i) == b'\'' {
                let quote = self.at(i);
                i += 1;
                let mut value = Vec::new();
                while self.at(i) != quote && self.at(i) != 0 {
                    if self.at(i) == b'&'
                        && let Some(ch) = self.entity(&mut i)
                    {
                        value.extend_from_slice(ch.encode_utf8(&mut [0; 4]).as_bytes());
                        continue;
                    }
                    value.push(self.at(i));
                    i += 1;
                }
                if self.at(i) == quote {
                    i += 1;
                }
                String::from_utf8_lossy(&value).into_owned()
            } else {
                let token_start = i;
                while self.at(i).is_ascii_alphanumeric() || self.at(i) == b'.' || self.at(i) == b'-' {
                    i += 1;
                }
                if !is_space(self.at(i)) && self.at(i) != b'>' {
                    return Err(format!("Unexpected end of name token at byte offset {token_start}"));
                }
                self.slice(token_start, i).to_lowercase()
            };
            if self.at(i) == 0 {
                return Err(format!("Unclosed start tag at byte offset {begin}"));
            }
            match (name.as_str(), attribute.as_str()) {
                ("a", "href") => argument = value,
                ("code", "class") if value.starts_with("language-") => argument = value["language-".len()..].to_owned(),
                ("span", "class") if value.starts_with("tg-") => argument = value,
                ("tg-emoji", "emoji-id") => argument = value,
                _ => {}
            }
        }
        if name == "span" && argument != "tg-spoiler" {
            return Err(format!("Tag \"span\" must have class \"tg-spoiler\" at byte offset {begin}"));
        }
        if name == "tg-emoji" && argument.is_empty() {
            return Err(format!("Custom emoji identifier must be non-empty at byte offset {begin}"));
        }
        self.open.push(OpenTag { name, argument, utf16_start: self.utf16, out_start: self.out.len() });
        Ok(i + 1)
    }

    /// Parses `</name>` starting at `begin`, closes the innermost tag, and returns the position
    /// after `>`.
    fn end_tag(&mut self, begin: usize) -> Result<usize, String> {
        if self.open.is_empty() {
            return Err(format!("Unexpected end tag at byte offset {begin}"));
        }
        let mut i = begin + 2;
        while self.at(i) != 0 && !is_space(self.at(i)) && self.at(i) != b'>' {
            i += 1;
        }
        let end_name = self.slice(begin + 2, i).to_lowercase();
        while self.at(i) != 0 && is_space(self.at(i)) {
            i += 1;
        }
        if self.at(i) != b'>' {
            return Err(format!("Unclosed end tag at byte offset {begin}"));
        }
        let Some(tag) = self.open.pop() else { unreachable!("checked non-empty above") };
        if !end_name.is_empty() && end_name != tag.name {
            return Err(format!(
                "Unmatched end tag at byte offset {begin}, expected \"</{}>\", found \"</{end_name}>\"",
                tag.name
            ));
        }
        if self.utf16 > tag.utf16_start {
            self.add_entity(tag);
        }
        Ok(i + 1)
    }

    fn add_entity(&mut self, tag: OpenTag) {
        let offset = tag.utf16_start;
        let length = self.utf16 - offset;
        let entity = match tag.name.as_str() {
            "b" | "strong" => json!({ "type": "bold" }),
            "i" | "em" => json!({ "type": "italic" }),
            "u" | "ins" => json!({ "type": "underline" }),
            "s" | "strike" | "del" => json!({ "type": "strikethrough" }),
            "tg-spoiler" | "span" => json!({ "type": "spoiler" }),
            "blockquote" if tag.argument == "expandable" => json!({ "type": "expandable_blockquote" }),
            "blockquote" => json!({ "type": "blockquote" }),
            "code" => {
                // `<pre><code class="language-x">` makes one `pre` entity with a language.
                if let Some(pre) = self.entities.last_mut()
                    && pre["type"] == "pre"
                    && pre["offset"] == offset
                    && pre["length"] == length
                    && !tag.argument.is_empty()
                {
                    pre["language"] = tag.argument.into();
                    return;
                }
                // Keep the language until the enclosing `pre` closes; `run` drops it from plain code.
                let mut code = json!({ "type": "code" });
                if !tag.argument.is_empty() {
                    code["language"] = tag.argument.into();
                }
                code
            }
            "pre" => {
                if let Some(code) = self.entities.last_mut()
                    && code["type"] == "code"
                    && code["offset"] == offset
                    && code["length"] == length
                {
                    code["type"] = "pre".into();
                    return;
                }
                json!({ "type": "pre" })
            }
            "a" => {
                let url = if tag.argument.is_empty() {
                    String::from_utf8_lossy(&self.out[tag.out_start..]).into_owned()
                } else {
                    tag.argument
                };
                if url.trim().is_empty() {
                    return;
                }
                json!({ "type": "text_link", "url": url })
            }
            // Custom emoji need a purchased username; the fake accepts the tag and drops it.
            _ => return,
        };
        let mut entity = entity;
        entity["offset"] = offset.into();
        entity["length"] = length.into();
        self.entities.push(entity);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(text: &str) -> String {
        parse(text).unwrap_err()
    }

    #[test]
    fn decodes_entities_and_strips_tags() {
        let parsed = parse("<b>bold</b> &lt;tag&gt; &amp; &quot;q&quot; &#65;&#x42; AT&T").unwrap();
        assert_eq!(parsed.text, "bold <tag> & \"q\" AB AT&T");
        assert_eq!(parsed.entities, vec![json!({ "type": "bold", "offset": 0, "length": 4 })]);
    }

    #[test]
    fn entity_offsets_are_utf16_units() {
        let parsed = parse("😀 <i>é</i> <a href=\"https://example.com/?a=1&amp;b=2\">link</a>").unwrap();
        assert_eq!(parsed.text, "😀 é link");
        assert_eq!(parsed.entities[0], json!({ "type": "italic", "offset": 3, "length": 1 }));
        assert_eq!(
            parsed.entities[1],
            json!({ "type": "text_link", "url": "https://example.com/?a=1&b=2", "offset": 5, "length": 4 })
        );
    }

    #[test]
    fn pre_with_language_code_is_one_entity() {
        let parsed = parse("<pre><code class=\"language-rust\">fn main() {}</code></pre>").unwrap();
        assert_eq!(parsed.entities, vec![json!({ "type": "pre", "language": "rust", "offset": 0, "length": 12 })]);
    }

    #[test]
    fn spoilers_and_quotes() {
        let parsed =
            parse("<tg-spoiler>a</tg-spoiler><span class=\"tg-spoiler\">b</span><blockquote expandable>c</blockquote>")
                .unwrap();
        let types: Vec<&str> = parsed.entities.iter().map(|entity| entity["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["spoiler", "spoiler", "expandable_blockquote"]);
    }

    #[test]
    fn refuses_markup_with_telegrams_words() {
        assert_eq!(error("hello <foo>x</foo>"), "Unsupported start tag \"foo\" at byte offset 6");
        assert_eq!(error("1 < 2"), "Unsupported start tag \"\" at byte offset 2");
        assert_eq!(error("<b>bold"), "Can't find end tag corresponding to start tag \"b\"");
        assert_eq!(error("x</b>"), "Unexpected end tag at byte offset 1");
        assert_eq!(error("<b>x</i>"), "Unmatched end tag at byte offset 4, expected \"</b>\", found \"</i>\"");
        assert_eq!(error("<b"), "Unclosed start tag at byte offset 0");
        assert_eq!(error("<span>x</span>"), "Tag \"span\" must have class \"tg-spoiler\" at byte offset 0");
    }
}

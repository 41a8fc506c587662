//! Which character encoding a fetched body is in, and the body decoded to text.
//!
//! Much of the web is still served in legacy encodings (windows-1252, Shift_JIS, GBK, …). A
//! server says which in the `Content-Type` header (`text/html; charset=Shift_JIS`); an HTML
//! page may say it instead in a `<meta charset="…">` or `<meta http-equiv="Content-Type"
//! content="text/html; charset=…">` near its start. [`detect`] follows the HTML standard's
//! order (WHATWG HTML §13.2.3, "Determining the character encoding"), as far as it applies to
//! a body that is already read:
//!
//! 1. a byte order mark (UTF-8, UTF-16LE, UTF-16BE) wins, as it does in browsers;
//! 2. else the header's `charset`, if it names an encoding;
//! 3. else, for HTML only, a `<meta>` in the first [`PRESCAN_BYTES`] bytes ([`prescan`]);
//! 4. else UTF-8, with anything that is not UTF-8 replaced by U+FFFD.
//!
//! Labels are read as browsers read them (encoding_rs implements the WHATWG Encoding
//! Standard): `iso-8859-1` and `latin1` mean windows-1252, `sjis` means Shift_JIS, and a
//! label no browser knows is ignored.

use encoding_rs::{Encoding, UTF_8, UTF_16BE, UTF_16LE, WINDOWS_1252, X_USER_DEFINED};

/// How far into an HTML body a `<meta>` declaration is looked for: the HTML standard's 1024
/// bytes (§13.2.3.2). A declaration further in does not count, in browsers either.
pub const PRESCAN_BYTES: usize = 1024;

/// Where the encoding [`detect`] chose came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A byte order mark at the start of the body.
    ByteOrderMark,
    /// The `charset` parameter of the `Content-Type` header.
    Header,
    /// A `<meta>` declaration in the page.
    Meta,
    /// Nothing said: UTF-8.
    Default,
}

/// The encoding of `body`, served with `content_type`, and where that came from; `html` says
/// whether the body is HTML (only HTML is searched for a `<meta>`). See the module doc.
pub fn detect(body: &[u8], content_type: Option<&str>, html: bool) -> (&'static Encoding, Source) {
    if let Some((encoding, _)) = Encoding::for_bom(body) {
        return (encoding, Source::ByteOrderMark);
    }
    if let Some(encoding) = content_type.and_then(header_charset) {
        return (encoding, Source::Header);
    }
    if html && let Some(encoding) = prescan(body) {
        return (encoding, Source::Meta);
    }
    (UTF_8, Source::Default)
}

/// `body` as text, in the encoding [`detect`] finds, without its byte order mark. Bytes that
/// are not valid in that encoding (or a character cut off where the body was cut) become
/// U+FFFD: a page is read, never refused, for its encoding.
pub fn decode(body: &[u8], content_type: Option<&str>, html: bool) -> String {
    let (encoding, _) = detect(body, content_type, html);
    // `decode` removes the BOM [`detect`] may have found (and lets it override, which
    // agrees with `detect`).
    let (text, _, _) = encoding.decode(body);
    text.into_owned()
}

/// The encoding a `Content-Type` value's `charset` parameter names: `text/html;
/// charset="Shift_JIS"` gives Shift_JIS; no parameter, or a label no browser knows, gives
/// `None`.
pub fn header_charset(content_type: &str) -> Option<&'static Encoding> {
    content_type.split(';').skip(1).find_map(|parameter| {
        let (name, value) = parameter.split_once('=')?;
        if !name.trim().eq_ignore_ascii_case("charset") {
            return None;
        }
        let value = value.trim();
        let value = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(value);
        Encoding::for_label(value.trim().as_bytes())
    })
}

/// The encoding an HTML page declares in a `<meta>` within its first [`PRESCAN_BYTES`]
/// bytes: the HTML standard's prescan (§13.2.3.2), which skips comments and the attributes of
/// other tags, so a `<meta charset>` inside a comment or an attribute value does not count.
/// `<meta http-equiv="content-type" content="…; charset=X">` counts only with both
/// attributes. UTF-16 declared this way means UTF-8 (a page that can be read this far as
/// ASCII is not UTF-16), and `x-user-defined` means windows-1252, as in browsers.
pub fn prescan(body: &[u8]) -> Option<&'static Encoding> {
    let mut scanner = Scanner { bytes: &body[..body.len().min(PRESCAN_BYTES)], at: 0 };
    while scanner.at < scanner.bytes.len() {
        let rest = scanner.rest();
        if rest.starts_with(b"<!--") {
            // To the `>` of the first `-->`; the dashes of `<!--` may be its dashes (`<!-->`).
            let end = find(&rest[2..], b"-->")?;
            scanner.at += 2 + end + 2;
        } else if starts_with_ignoring_case(rest, b"<meta") && rest.get(5).is_some_and(|&b| is_space(b) || b == b'/') {
            scanner.at += 5;
            if let Some(encoding) = scanner.meta()? {
                return Some(encoding);
            }
        } else if rest.starts_with(b"</") || (rest[0] == b'<' && rest.get(1).is_some_and(u8::is_ascii_alphabetic)) {
            let name_at = if rest[1] == b'/' { 2 } else { 1 };
            if rest.get(name_at).is_some_and(u8::is_ascii_alphabetic) {
                // Another tag: its name, then its attributes, whose values may hold anything.
                scanner.at += rest.iter().position(|&b| is_space(b) || b == b'>')?;
                while scanner.attribute()?.is_some() {}
            } else {
                // `</` and not a letter: a bogus comment, to the next `>`.
                scanner.at += rest.iter().position(|&b| b == b'>')?;
            }
        } else if rest.starts_with(b"<!") || rest.starts_with(b"<?") {
            scanner.at += rest.iter().position(|&b| b == b'>')?;
        }
        scanner.at += 1;
    }
    None
}

/// A tag's attribute as the prescan reads it: name and value, ASCII-lowercased.
type Attribute = (Vec<u8>, Vec<u8>);

/// A position in the bytes [`prescan`] reads. Its methods answer `None` when they run off the
/// end, which ends the prescan without an answer (the standard's "abort").
struct Scanner<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Scanner<'_> {
    fn rest(&self) -> &[u8] {
        &self.bytes[self.at.min(self.bytes.len())..]
    }

    fn byte(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    /// The attributes of a `<meta>` (the scanner just after `<meta`), and the encoding they
    /// declare, if they declare one the standard accepts.
    fn meta(&mut self) -> Option<Option<&'static Encoding>> {
        let mut seen: Vec<Vec<u8>> = Vec::new();
        let mut got_pragma = false;
        // Whether the charset came from `content` (and so needs `http-equiv`), once one is named.
        let mut need_pragma = None;
        // `None` until an attribute names a charset; `Some(None)` when the name is no encoding.
        let mut charset: Option<Option<&'static Encoding>> = None;
        while let Some((name, value)) = self.attribute()? {
            if seen.contains(&name) {
                continue;
            }
            match name.as_slice() {
                b"http-equiv" => got_pragma |= value == b"content-type",
                b"content" if charset.is_none() => {
                    if let Some(found) = charset_in_content(&value) {
                        charset = Some(Some(found));
                        need_pragma = Some(true);
                    }
                }
                b"charset" => {
                    charset = Some(Encoding::for_label(&value));
                    need_pragma = Some(false);
                }
                _ => {}
            }
            seen.push(name);
        }
        let accepted = match need_pragma {
            Some(true) if !got_pragma => None,
            Some(_) => charset.flatten(),
            None => None,
        };
        Some(accepted.map(|encoding| match encoding {
            encoding if encoding == UTF_16BE || encoding == UTF_16LE => UTF_8,
            encoding if encoding == X_USER_DEFINED => WINDOWS_1252,
            encoding => encoding,
        }))
    }

    /// The next attribute of a tag, name and value lowercased (the standard's "get an
    /// attribute"); `Some(None)` at the tag's `>`, with the scanner on it.
    fn attribute(&mut self) -> Option<Option<Attribute>> {
        while is_space(self.byte()?) || self.byte()? == b'/' {
            self.at += 1;
        }
        if self.byte()? == b'>' {
            return Some(None);
        }
        let mut name = Vec::new();
        let mut value = Vec::new();
        loop {
            match self.byte()? {
                b'=' if !name.is_empty() => {
                    self.at += 1;
                    break;
                }
                byte if is_space(byte) => {
                    while is_space(self.byte()?) {
                        self.at += 1;
                    }
                    if self.byte()? != b'=' {
                        return Some(Some((name, value)));
                    }
                    self.at += 1;
                    break;
                }
                b'/' | b'>' => return Some(Some((name, value))),
                byte => name.push(byte.to_ascii_lowercase()),
            }
            self.at += 1;
        }
        while is_space(self.byte()?) {
            self.at += 1;
        }
        match self.byte()? {
            quote @ (b'"' | b'\'') => loop {
                self.at += 1;
                match self.byte()? {
                    byte if byte == quote => {
                        self.at += 1;
                        return Some(Some((name, value)));
                    }
                    byte => value.push(byte.to_ascii_lowercase()),
                }
            },
            b'>' => return Some(Some((name, value))),
            byte => {
                value.push(byte.to_ascii_lowercase());
                self.at += 1;
            }
        }
        loop {
            match self.byte()? {
                byte if is_space(byte) || byte == b'>' => return Some(Some((name, value))),
                byte => value.push(byte.to_ascii_lowercase()),
            }
            self.at += 1;
        }
    }
}

/// The encoding named by `charset=` in a `<meta>`'s `content` (the standard's "extracting a
/// character encoding from a meta element"): `text/html; charset=shift_jis` gives Shift_JIS.
fn charset_in_content(content: &[u8]) -> Option<&'static Encoding> {
    let mut at = 0;
    loop {
        at += find_ignoring_case(&content[at..], b"charset")? + b"charset".len();
        let rest = &content[at..];
        let after_spaces = rest.iter().position(|&b| !is_space(b)).unwrap_or(rest.len());
        if rest.get(after_spaces) != Some(&b'=') {
            continue;
        }
        let value = &rest[after_spaces + 1..];
        let value = &value[value.iter().position(|&b| !is_space(b))?..];
        return match value[0] {
            quote @ (b'"' | b'\'') => {
                let end = value[1..].iter().position(|&b| b == quote)?;
                Encoding::for_label(&value[1..1 + end])
            }
            _ => {
                let end = value.iter().position(|&b| is_space(b) || b == b';').unwrap_or(value.len());
                Encoding::for_label(&value[..end])
            }
        };
    }
}

/// HTML's ASCII whitespace, as the prescan counts it: tab, LF, FF, CR, space.
fn is_space(byte: u8) -> bool {
    matches!(byte, b'\t' | b'\n' | b'\x0c' | b'\r' | b' ')
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

fn find_ignoring_case(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window.eq_ignore_ascii_case(needle))
}

fn starts_with_ignoring_case(bytes: &[u8], prefix: &[u8]) -> bool {
    bytes.get(..prefix.len()).is_some_and(|start| start.eq_ignore_ascii_case(prefix))
}

#[cfg(test)]
mod tests {
    use encoding_rs::{SHIFT_JIS, UTF_16LE};

    use super::*;

    /// "日本語のページ" in Shift_JIS.
    const JAPANESE_SJIS: &[u8] = b"\x93\xfa\x96{\x8c\xea\x82\xcc\x83y\x81[\x83W";

    fn html_with(head: &str, body: &[u8]) -> Vec<u8> {
        let mut page = format!("<!doctype html><html><head>{head}</head><body><p>").into_bytes();
        page.extend_from_slice(body);
        page.extend_from_slice(b"</p></body></html>");
        page
    }

    #[test]
    fn web_a_windows_1252_page_named_in_the_header_is_decoded() {
        let page = html_with("", b"\x93quoted\x94 Caf\xe9 \x80");
        assert_eq!(detect(&page, Some("text/html; charset=windows-1252"), true), (WINDOWS_1252, Source::Header));
        let text = decode(&page, Some("text/html; charset=windows-1252"), true);
        assert!(text.contains("<p>\u{201c}quoted\u{201d} Café €</p>"), "{text}");
    }

    #[test]
    fn web_iso_8859_1_is_read_as_browsers_read_it() {
        let body = b"na\xefve gar\xe7on, \x80 and \x85";
        for content_type in
            ["text/plain; charset=ISO-8859-1", "text/plain;charset=\"latin1\"", "text/plain; Charset=l1"]
        {
            assert_eq!(detect(body, Some(content_type), false).0, WINDOWS_1252, "{content_type}");
            // The label means windows-1252 on the web (WHATWG): 0x80 is the euro sign, not a
            // C1 control.
            assert_eq!(decode(body, Some(content_type), false), "naïve garçon, € and …", "{content_type}");
        }
    }

    #[test]
    fn web_a_shift_jis_page_is_decoded_from_its_meta_charset() {
        for head in [
            "<meta charset=\"Shift_JIS\">",
            "<meta charset=sjis>",
            "<META CHARSET='shift_jis' />",
            "<meta http-equiv=\"Content-Type\" content=\"text/html; charset=Shift_JIS\">",
            "<meta content='text/html;charset=\"x-sjis\"' http-equiv=content-type>",
        ] {
            let page = html_with(&format!("<title>t</title>{head}"), JAPANESE_SJIS);
            assert_eq!(detect(&page, Some("text/html"), true), (SHIFT_JIS, Source::Meta), "{head}");
            assert!(decode(&page, Some("text/html"), true).contains("<p>日本語のページ</p>"), "{head}");
        }
    }

    #[test]
    fn web_the_header_charset_wins_over_a_meta_one() {
        let page = html_with("<meta charset=\"shift_jis\">", b"\x93\xfa\x96{");
        assert_eq!(detect(&page, Some("text/html; charset=windows-1252"), true), (WINDOWS_1252, Source::Header));
        assert!(decode(&page, Some("text/html; charset=windows-1252"), true).contains("<p>\u{201c}ú\u{2013}{</p>"));
        // A header label no browser knows is ignored: the meta decides.
        assert_eq!(detect(&page, Some("text/html; charset=klingon"), true), (SHIFT_JIS, Source::Meta));
        assert!(decode(&page, Some("text/html; charset=klingon"), true).contains("<p>日本</p>"));
    }

    #[test]
    fn web_a_byte_order_mark_wins_and_is_removed() {
        let mut page = b"\xef\xbb\xbf".to_vec();
        page.extend(html_with("<meta charset=shift_jis>", "é".as_bytes()));
        assert_eq!(detect(&page, Some("text/html; charset=windows-1252"), true), (UTF_8, Source::ByteOrderMark));
        let text = decode(&page, Some("text/html; charset=windows-1252"), true);
        assert!(text.starts_with("<!doctype html>") && text.contains("<p>é</p>"), "{text}");
        let utf16: Vec<u8> = [0xff, 0xfe].into_iter().chain("hé".encode_utf16().flat_map(u16::to_le_bytes)).collect();
        assert_eq!(detect(&utf16, None, false), (UTF_16LE, Source::ByteOrderMark));
        assert_eq!(decode(&utf16, None, false), "hé");
    }

    #[test]
    fn web_without_a_declaration_a_body_is_utf_8_with_replacements() {
        let page = html_with("<title>t</title>", "日本 ok".as_bytes());
        assert_eq!(detect(&page, Some("text/html"), true), (UTF_8, Source::Default));
        assert!(decode(&page, Some("text/html"), true).contains("<p>日本 ok</p>"));
        let broken = html_with("", b"caf\xe9 \xe6\x97");
        assert!(decode(&broken, None, true).contains("<p>caf\u{fffd} \u{fffd}</p>"));
    }

    #[test]
    fn web_meta_declarations_that_do_not_count_are_ignored() {
        let ignored = [
            // Past the first 1024 bytes.
            format!("<title>{}</title><meta charset=shift_jis>", "x".repeat(PRESCAN_BYTES)),
            // In a comment, or inside another tag's attribute value.
            "<!-- <meta charset=shift_jis> -->".to_owned(),
            "<div title=\"<meta charset=shift_jis>\">".to_owned(),
            // `content` without `http-equiv="content-type"`.
            "<meta content=\"text/html; charset=shift_jis\">".to_owned(),
            "<meta http-equiv=refresh content=\"0; charset=shift_jis\">".to_owned(),
            // Not an encoding; a `charset=` that is not followed by one.
            "<meta charset=klingon>".to_owned(),
            "<meta charset=klingon http-equiv=content-type content=\"text/html; charset=shift_jis\">".to_owned(),
            "<meta http-equiv=content-type content=\"text/html; charset\">".to_owned(),
            // Not a meta tag.
            "<metadata charset=shift_jis>".to_owned(),
        ];
        for head in &ignored {
            let page = html_with(head, JAPANESE_SJIS);
            assert_eq!(detect(&page, Some("text/html"), true), (UTF_8, Source::Default), "{head}");
        }
        // The first declaration that names an encoding counts; a later one does not.
        let page = html_with("<meta charset=klingon><meta charset=shift_jis><meta charset=utf-8>", b"");
        assert_eq!(prescan(&page), Some(SHIFT_JIS));
        // A body that is not HTML is not searched.
        let text = b"<meta charset=shift_jis>\x93\xfa";
        assert_eq!(detect(text, Some("text/plain"), false), (UTF_8, Source::Default));
    }

    #[test]
    fn web_utf_16_declared_in_a_meta_means_utf_8() {
        assert_eq!(prescan(b"<meta charset=utf-16le>"), Some(UTF_8));
        assert_eq!(prescan(b"<meta charset=x-user-defined>"), Some(WINDOWS_1252));
    }

    #[test]
    fn web_a_prescan_that_runs_off_the_end_finds_nothing() {
        for cut in ["<meta charset=\"shift_jis", "<meta charset", "<!-- <meta charset=sjis>", "<div a=\"", "<meta"] {
            assert_eq!(prescan(cut.as_bytes()), None, "{cut}");
        }
        assert_eq!(prescan(b"<!--><meta charset=sjis>"), Some(SHIFT_JIS), "`<!-->` is a whole comment");
    }
}

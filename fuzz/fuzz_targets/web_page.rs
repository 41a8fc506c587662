//! A fetched web page, as `web_fetch` turns it into what the model reads
//! (`src/agent/tools/web/`): the body decoded (`charset::decode`: a byte order mark, the
//! header's charset, the `<meta>` prescan, else UTF-8) and the HTML converted to markdown
//! (`markdown::html_to_markdown`: html5ever's parse with its depth bound, the pass that makes
//! links absolute and drops `javascript:` ones, htmd, the tidy-up). The first input byte picks
//! the `Content-Type` the page was served with ([`CONTENT_TYPES`]); the rest is the body.
//!
//! Asserts: never panics; the encoding comes from where the rules say (a header charset that
//! names an encoding wins unless there is a byte order mark; a `<meta>` is only believed if the
//! first 1024 bytes hold `<meta` and `charset`); a UTF-8 body nothing else was declared for
//! decodes to itself; the title, if any, is one line with its whitespace collapsed; the
//! markdown is trimmed, has no trailing whitespace on a line and no run of blank lines.
//!
//! The conversion runs here on the fuzzing thread, not on `convert`'s thread with its 32 MiB
//! stack: with the main thread's 8 MiB, a stack overflow would still be a finding (the depth
//! bound is meant to keep the converter far below that).
#![no_main]

use ferry::agent::tools::web::charset::{self, PRESCAN_BYTES, Source};
use ferry::agent::tools::web::markdown::html_to_markdown;
use libfuzzer_sys::fuzz_target;
use url::Url;

/// The `Content-Type` headers a page may come with: none, HTML without a charset, with the
/// usual one, with legacy single- and multi-byte ones, with UTF-16, and with a label no
/// browser knows.
const CONTENT_TYPES: &[Option<&str>] = &[
    None,
    Some("text/html"),
    Some("text/html; charset=utf-8"),
    Some("text/html; charset=windows-1252"),
    Some("text/html; charset=\"Shift_JIS\""),
    Some("text/html;charset=gb18030"),
    Some("text/html; charset=utf-16le"),
    Some("text/html; charset=klingon"),
];

fn contains_ignoring_case(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|window| window.eq_ignore_ascii_case(needle))
}

fuzz_target!(|input: &[u8]| {
    let Some((&selector, body)) = input.split_first() else { return };
    let content_type = CONTENT_TYPES[usize::from(selector) % CONTENT_TYPES.len()];

    let (encoding, source) = charset::detect(body, content_type, true);
    let header = content_type.and_then(charset::header_charset);
    match source {
        Source::ByteOrderMark => {
            assert!([&b"\xef\xbb\xbf"[..], b"\xff\xfe", b"\xfe\xff"].iter().any(|bom| body.starts_with(bom)));
        }
        Source::Header => assert_eq!(Some(encoding), header),
        Source::Meta => {
            assert!(header.is_none(), "a header charset ({header:?}) lost to a <meta>");
            let head = &body[..body.len().min(PRESCAN_BYTES)];
            assert!(contains_ignoring_case(head, b"<meta") && contains_ignoring_case(head, b"charset"));
        }
        Source::Default => assert!(header.is_none(), "a header charset ({header:?}) was ignored"),
    }
    let text = charset::decode(body, content_type, true);
    if source == Source::Default
        && let Ok(utf8) = std::str::from_utf8(body)
    {
        assert_eq!(text, utf8, "a UTF-8 body changed in decoding");
    }

    let url = Url::parse("https://example.com/docs/page.html").expect("a URL");
    let page = html_to_markdown(&text, &url);
    if let Some(title) = &page.title {
        assert!(!title.is_empty(), "an empty title is no title");
        assert_eq!(title.split_whitespace().collect::<Vec<_>>().join(" "), *title, "the title's whitespace");
    }
    let markdown = &page.markdown;
    assert_eq!(markdown.trim(), markdown, "the markdown is trimmed");
    assert!(!markdown.contains("\n\n\n"), "a run of blank lines: {markdown:?}");
    for line in markdown.split('\n') {
        assert_eq!(line.trim_end(), line, "trailing whitespace: {markdown:?}");
    }
});

use proptest::prelude::*;

use super::*;

fn text(input: &str) -> String {
    strip(input).text.into_owned()
}

fn target(input: &str) -> Option<ReplyTarget> {
    strip(input).directives.reply_to
}

fn message(id: &str) -> Option<ReplyTarget> {
    Some(ReplyTarget::Message(id.to_owned()))
}

#[test]
fn reply_to_current_is_read_with_spaces_and_in_any_case() {
    for tag in ["[[reply_to_current]]", "[[ reply_to_current ]]", "[[\tREPLY_TO_CURRENT\t]]", "[[Reply_To_Current ]]"] {
        let input = format!("{tag} Yes, that one.");
        assert_eq!(text(&input), "Yes, that one.", "{input:?}");
        assert_eq!(target(&input), Some(ReplyTarget::Current), "{input:?}");
    }
}

#[test]
fn reply_to_an_id_is_read_with_spaces_around_the_name_colon_and_value() {
    for tag in ["[[reply_to:123]]", "[[reply_to: 123]]", "[[ reply_to : 123 ]]", "[[REPLY_TO :123]]"] {
        let input = format!("{tag} About that:");
        assert_eq!(text(&input), "About that:", "{input:?}");
        assert_eq!(target(&input), message("123"), "{input:?}");
    }
    assert_eq!(target("[[reply_to: 1700000000.123456]] hi"), message("1700000000.123456"), "a Slack ts");
}

#[test]
fn a_reply_to_without_a_usable_id_is_removed_and_threads_nothing() {
    for input in ["[[reply_to]] hi", "[[reply_to:]] hi", "[[reply_to:  ]] hi", "[[reply_to: two words]] hi"] {
        assert_eq!(text(input), "hi", "{input:?}");
        assert_eq!(target(input), None, "{input:?}");
    }
    let long = format!("[[reply_to: {}]] hi", "9".repeat(MAX_MESSAGE_ID_BYTES + 1));
    assert_eq!((text(&long).as_str(), target(&long)), ("hi", None));
}

#[test]
fn the_first_reply_directive_with_a_target_wins() {
    assert_eq!(target("[[reply_to: 5]] a [[reply_to_current]] b"), message("5"));
    assert_eq!(target("[[reply_to_current]] a [[reply_to: 5]] b"), Some(ReplyTarget::Current));
    assert_eq!(target("[[reply_to:]] a [[reply_to: 6]] b"), message("6"));
    assert_eq!(text("[[reply_to: 5]] a [[reply_to_current]] b"), "a b");
}

#[test]
fn audio_as_voice_is_recognised_and_removed() {
    let stripped = strip("Here it is.\n[[audio_as_voice]]");
    assert_eq!(stripped.text, "Here it is.");
    assert_eq!(stripped.directives, Directives { reply_to: None, audio_as_voice: true });
    assert!(strip("[[ Audio_As_Voice ]]").directives.audio_as_voice);
}

#[test]
fn unknown_lowercase_directives_are_removed_and_change_nothing() {
    let stripped = strip("[[tts]] Hello [[mood: cheerful]] there [[some_future_thing: a=b, c]]");
    assert_eq!(stripped.text, "Hello there");
    assert_eq!(stripped.directives, Directives::default());
}

#[test]
fn text_that_only_looks_like_a_directive_stays() {
    for input in [
        "[[not a directive]]",
        "See [[Wiki Page]] and [[Rust]].",
        "[[1]] and [[ ]] and [[]]",
        "[[reply_to_current] ] almost",
        "[[reply_to: [1]]] nested",
        "[reply_to_current] single brackets",
        "[[reply_to_current]x",
        "[[h2o]] digits are not a name",
    ] {
        assert_eq!(text(input), input, "{input:?}");
        assert_eq!(target(input), None, "{input:?}");
    }
}

#[test]
fn directives_in_code_are_left_alone() {
    let fenced = "Write it like this:\n\n```\n[[reply_to_current]] Yes\n[[reply_to: 12]]\n```\n\nDone.";
    assert_eq!(text(fenced), fenced);
    assert_eq!(target(fenced), None);
    let tilde = "~~~md\n[[audio_as_voice]]\n~~~";
    assert_eq!(text(tilde), tilde);
    let inline = "Use `[[reply_to_current]]` or ``[[reply_to: `id`]]`` to thread.";
    assert_eq!(text(inline), inline);
    let unclosed = "```\n[[reply_to_current]] still code";
    assert_eq!(text(unclosed), unclosed, "an unclosed fence runs to the end");
    // Around code, directives still count.
    assert_eq!(text("[[reply_to_current]] Run `ls [[x]]`."), "Run `ls [[x]]`.");
    assert_eq!(text("```\ncode\n```\n[[reply_to: 9]]"), "```\ncode\n```");
    assert_eq!(target("```\ncode\n```\n[[reply_to: 9]]"), message("9"));
    // An unmatched backtick is text (CommonMark): what follows is not code.
    assert_eq!(text("a ` b [[reply_to_current]] c"), "a ` b c");
}

#[test]
fn a_directive_alone_on_its_line_takes_the_line_with_it() {
    assert_eq!(text("[[reply_to_current]]\nYes."), "Yes.");
    assert_eq!(text("First.\n[[audio_as_voice]]\nSecond."), "First.\nSecond.");
    assert_eq!(text("First.\n  [[tts]]  [[x: 1]]\n\nSecond."), "First.\n\nSecond.");
    assert_eq!(text("Yes [[reply_to_current]]\nmore"), "Yes\nmore");
    assert_eq!(text("[[reply_to_current]]\n\n    indented code"), "    indented code");
}

#[test]
fn taking_a_directive_out_never_leaves_one_behind() {
    assert_eq!(text("[[a[[b]]]]"), "", "the outer text became a directive, then went too");
    assert_eq!(text("[[reply_to[[x]]_current]] hi"), "hi");
    assert_eq!(target("[[reply_to[[x]]_current]] hi"), Some(ReplyTarget::Current));
    // Taking the second directive out pairs the backticks differently: the first, code
    // until then, is prose now, and goes too.
    assert_eq!(text("`[[reply_to: 1]]``word`[[reply_to: 1]]`"), "```word``");
}

#[test]
fn text_without_directives_is_borrowed_untouched() {
    for input in ["plain", "  spaced  ", "a [link](x) and [[Wiki]]", ""] {
        assert!(matches!(strip(input).text, Cow::Borrowed(same) if same == input), "{input:?}");
    }
}

#[test]
fn streaming_holds_back_a_directive_still_being_written() {
    let tag = "[[ reply_to : 12 ]]";
    for end in 1..tag.len() {
        let partial = format!("Sure. {}", &tag[..end]);
        assert_eq!(strip_streaming(&partial).text, "Sure.", "{partial:?}");
    }
    let done = strip_streaming("Sure. [[ reply_to : 12 ]] Here");
    assert_eq!((done.text.as_ref(), done.directives.reply_to), ("Sure. Here", message("12")));
    // Clearly not a directive any more: shown.
    assert_eq!(strip_streaming("Sure. [[not a"), "Sure. [[not a".into_stripped());
    assert_eq!(strip_streaming("See [1"), "See [1".into_stripped());
    assert_eq!(strip_streaming("[[Wiki]] x"), "[[Wiki]] x".into_stripped());
    // In code, nothing is held back.
    assert_eq!(strip_streaming("```\n[[reply_to: 1"), "```\n[[reply_to: 1".into_stripped());
    // A final keeps an unclosed tag: the reply is over, it never became one.
    assert_eq!(text("Sure. [[reply_to: 12"), "Sure. [[reply_to: 12");
}

#[test]
fn streaming_gives_up_on_a_tag_that_runs_too_long() {
    let long = format!("Hi [[note: {}", "x".repeat(MAX_DIRECTIVE_BYTES));
    assert_eq!(strip_streaming(&long).text, long, "no longer held back");
}

trait IntoStripped {
    fn into_stripped(self) -> Stripped<'static>;
}

impl IntoStripped for &'static str {
    fn into_stripped(self) -> Stripped<'static> {
        Stripped { text: Cow::Borrowed(self), directives: Directives::default() }
    }
}

/// Pieces of model text that matter to the parser.
const FRAGMENTS: &[&str] = &[
    "word",
    " ",
    "  ",
    "\n",
    "\n\n",
    "\t",
    "[",
    "]",
    "[[",
    "]]",
    ":",
    "`",
    "```",
    "```\n",
    "\n```\n",
    "~~~\n",
    "reply_to",
    "reply_to_current",
    "REPLY_TO",
    "audio_as_voice",
    "tts",
    "_",
    "12",
    "1700.5",
    "Wiki",
    "é",
    "😀",
    "[[reply_to_current]]",
    "[[ reply_to : 42 ]]",
    "[[x]]",
    "[[not a directive]]",
    "`[[reply_to: 1]]`",
];

fn model_text() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(FRAGMENTS), 0..40).prop_map(|pieces| pieces.concat())
}

/// How a tag may be spelled: spaces anywhere the syntax allows them, any case.
fn tag() -> impl Strategy<Value = (String, Option<ReplyTarget>)> {
    let space = prop::sample::select(vec!["", " ", "  ", "\t"]);
    let name = prop::sample::select(vec![
        "reply_to_current",
        "Reply_To_Current",
        "REPLY_TO",
        "reply_to",
        "audio_as_voice",
        "zz",
    ]);
    (space.clone(), name, space.clone(), prop::option::of((space.clone(), "[0-9]{1,12}", space.clone())), space)
        .prop_map(|(a, name, b, value, c)| {
            let value_text = value.as_ref().map(|(s1, id, s2)| format!(":{s1}{id}{s2}")).unwrap_or_default();
            let tag = format!("[[{a}{name}{b}{value_text}{c}]]");
            let target = match name.to_ascii_lowercase().as_str() {
                "reply_to_current" => Some(ReplyTarget::Current),
                "reply_to" => value.map(|(_, id, _)| ReplyTarget::Message(id)),
                _ => None,
            };
            (tag, target)
        })
}

/// Whether any recognised directive remains in `text` outside code.
fn has_directive(text: &str) -> bool {
    let again = strip(text);
    again.text != text || again.directives != Directives::default()
}

proptest! {
    #[test]
    fn stripping_never_panics_and_never_leaves_a_directive(input in model_text()) {
        let final_text = strip(&input).text;
        prop_assert!(!has_directive(&final_text), "{input:?} → {final_text:?}");
        let streamed = strip_streaming(&input).text;
        prop_assert!(!has_directive(&streamed), "{input:?} → {streamed:?}");
    }

    #[test]
    fn arbitrary_text_never_panics(input in any::<String>()) {
        let _ = strip(&input);
        let _ = strip_streaming(&input);
        for end in (0..=input.len()).filter(|end| input.is_char_boundary(*end)) {
            let _ = strip_streaming(&input[..end]);
        }
    }

    #[test]
    fn a_tag_between_words_is_applied_and_never_shown_at_any_point_of_the_stream(
        (tag, expected) in tag(),
        before in "[a-z ]{0,20}",
        after in "[a-z .]{0,20}",
    ) {
        let full = format!("{before}{tag}{after}");
        let stripped = strip(&full);
        prop_assert_eq!(&stripped.directives.reply_to, &expected);
        prop_assert!(!stripped.text.contains("[["), "{:?} → {:?}", full, stripped.text);
        for end in 0..=full.len() {
            let shown = strip_streaming(&full[..end]).text;
            prop_assert!(!shown.contains('['), "{:?} shows {:?}", &full[..end], shown);
        }
    }

    #[test]
    fn a_tag_inside_code_is_kept_verbatim((tag, _) in tag(), words in "[a-z ]{0,20}") {
        let fenced = format!("{words}\n```\n{tag}\n```\n");
        prop_assert_eq!(strip(&fenced).text, fenced.as_str());
        let inline = format!("{words} `{tag}` {words}");
        prop_assert_eq!(strip(&inline).text, inline.as_str());
    }
}

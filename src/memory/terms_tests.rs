use proptest::prelude::*;

use super::*;

fn word(text: &str) -> Term {
    Term::Word(text.to_owned())
}

fn phrase(text: &str) -> Term {
    Term::Phrase(text.chars().map(String::from).collect())
}

#[test]
fn indexed_text_is_lowercase_words_with_each_cjk_character_apart() {
    assert_eq!(index_text("Hello, World!"), "hello world");
    assert_eq!(index_text("МОСКВА — столица"), "москва столица");
    assert_eq!(index_text("昨日、東京タワーに行った。"), "昨 日 東 京 タ ワ ー に 行 っ た");
    assert_eq!(index_text("서울에서 만나요"), "서 울 에 서 만 나 요");
    assert_eq!(index_text("Tokyo東京2024"), "tokyo 東 京 2024");
    assert_eq!(index_text("ﾄｰｷｮｰ 時々"), "ﾄ ｰ ｷ ｮ ｰ 時 々");
    assert_eq!(index_text("  😀 hi\n\n"), "hi");
    assert_eq!(index_text(""), "");
    assert_eq!(index_text("İSTANBUL İstanbul cafe\u{301}"), "istanbul istanbul cafe", "combining accents dropped");
}

/// Accented Latin letters are indexed and searched as their base letters, as SQLite's
/// tokenizer folds them, so both backends find `café` for `cafe` and `cafe` for `CAFÉ`.
/// Other scripts keep their marks: `й` is another letter than `и`.
#[test]
fn accented_latin_letters_are_folded_and_other_scripts_are_not() {
    assert_eq!(index_text("Café Ågren naïve façade"), "cafe agren naive facade");
    assert_eq!(index_text("Tiếng Việt Łódź Straße"), "tieng viet łodz straße", "ł and ß have no decomposition");
    assert_eq!(index_text("cafe\u{301} café"), "cafe cafe", "decomposed and precomposed alike");
    assert_eq!(index_text("йогурт ελληνικά が"), "йогурт ελληνικά が");
    assert_eq!(query_terms("CAFÉ Crème brûlée"), [word("cafe"), word("creme"), word("brulee")]);
    assert_eq!(query_terms("Ünïcödé"), [word("unicode")]);
}

#[test]
fn indexed_text_splits_what_postgres_would_keep_whole() {
    assert_eq!(index_text("bob@example.com /usr/bin v1.2.3 foo-bar"), "bob example com usr bin v1 2 3 foo bar");
}

#[test]
fn query_words_split_on_punctuation_in_any_script_without_repeats() {
    assert_eq!(
        query_terms(r#""foo" AND (bar) NOT -baz*"#),
        [word("foo"), word("and"), word("bar"), word("not"), word("baz")]
    );
    assert_eq!(query_terms("O'Brien's"), [word("o"), word("brien"), word("s")]);
    assert_eq!(query_terms(r"C:\Users\bob"), [word("c"), word("users"), word("bob")]);
    assert_eq!(query_terms("NEAR(a b, 3) ^start body:x"), ["near", "a", "b", "3", "start", "body", "x"].map(word));
    assert_eq!(query_terms("Москва МОСКВА москва"), [word("москва")]);
    assert_eq!(query_terms("Ünïcödé"), [word("unicode")], "accents folded");
    assert_eq!(query_terms("İstanbul"), [word("istanbul")], "not `i` and `stanbul`");
}

#[test]
fn a_run_of_cjk_characters_is_its_overlapping_pairs() {
    assert_eq!(query_terms("東京タワー"), ["東京", "京タ", "タワ", "ワー"].map(phrase));
    assert_eq!(query_terms("東京 タワー、東京"), ["東京", "タワ", "ワー"].map(phrase));
    assert_eq!(query_terms("서울에서 만나요"), ["서울", "울에", "에서", "만나", "나요"].map(phrase));
    assert_eq!(query_terms("Tokyo東京2024"), [word("tokyo"), phrase("東京"), word("2024")]);
    assert_eq!(query_terms("猫"), [phrase("猫")]);
}

#[test]
fn a_query_without_letters_or_digits_has_no_terms() {
    for query in ["", "   ", "😀🎉👍🏽", "\"*^()-:", "。、「」"] {
        let terms = query_terms(query);
        assert_eq!(terms, [], "{query:?}");
        assert_eq!((fts5_match(&terms, Matching::Any), tsquery(&terms, Matching::Any)), (None, None));
    }
}

#[test]
fn queries_are_capped_and_overlong_words_dropped() {
    let many: String = (0..100).map(|n| format!("w{n} ")).collect();
    let terms = query_terms(&many);
    assert_eq!(terms.len(), 32);
    assert_eq!(terms[31], word("w31"));
    let long = "x".repeat(MAX_WORD_BYTES + 1);
    assert_eq!(query_terms(&format!("{long} short")), [word("short")]);
    let run = "東京タワー".repeat(10);
    assert_eq!(query_terms(&run), ["東京", "京タ", "タワ", "ワー", "ー東"].map(phrase), "each pair once");
}

#[test]
fn fts5_expressions_quote_every_term() {
    let terms = query_terms(r#"say "hi" 東京"#);
    assert_eq!(fts5_match(&terms, Matching::Any).as_deref(), Some(r#""say" OR "hi" OR "東 京""#));
    let odd = [word(r#"a"b"#), Term::Word(String::new()), Term::Phrase(vec![]), word("c")];
    assert_eq!(
        fts5_match(&odd, Matching::Any).as_deref(),
        Some(r#""a""b" OR "c""#),
        "quotes doubled, empty terms skipped"
    );
    assert_eq!(fts5_match(&terms, Matching::All).as_deref(), Some(r#""say" AND "hi" AND "東 京""#));
}

#[test]
fn tsqueries_quote_every_lexeme_and_chain_phrases() {
    let terms = query_terms("Tokyo 東京タワー 京");
    let expected = "'tokyo' | ('東' <-> '京') | ('京' <-> 'タ') | ('タ' <-> 'ワ') | ('ワ' <-> 'ー') | '京'";
    assert_eq!(tsquery(&terms, Matching::Any).as_deref(), Some(expected));
    let odd = [word(r"o'b\c"), Term::Phrase(vec![String::new(), "x".into()]), Term::Phrase(vec![String::new()])];
    assert_eq!(
        tsquery(&odd, Matching::Any).as_deref(),
        Some(r"'o''b\\c' | 'x'"),
        "quotes and backslashes doubled, empties skipped"
    );
    assert_eq!(tsquery(&query_terms("a b"), Matching::All).as_deref(), Some("'a' & 'b'"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn no_query_makes_a_malformed_tsquery(query in any::<String>()) {
        for matching in [Matching::Any, Matching::All] {
        if let Some(tsquery) = tsquery(&query_terms(&query), matching) {
            // Only quoted lexemes, `|`, `&`, `<->` and parentheses outside the quotes.
            let mut outside = String::new();
            let mut quoted = false;
            for c in tsquery.chars() {
                if c == '\'' { quoted = !quoted } else if !quoted { outside.push(c) }
            }
            prop_assert!(!quoted, "{}", tsquery);
            prop_assert!(outside.replace("<->", "").chars().all(|c| " |&()".contains(c)), "{}", tsquery);
        }
        }
    }
}

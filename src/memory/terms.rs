//! One normalization of text for keyword search, shared by both backends: SQLite FTS5 (the
//! `unicode61` tokenizer) and PostgreSQL (`to_tsvector('simple', …)`), so the same words are
//! found on either, in any script.
//!
//! Indexed text and queries are cut the same way: lowercased, split on everything that is not
//! a letter or digit, and every CJK character (Han, kana, Hangul syllables) made a word of its
//! own, because Japanese and Chinese put no spaces between words and neither tokenizer
//! segments them. A run of CJK characters in a query becomes a phrase of those characters, so
//! `東京タワー` matches them consecutively. Query expressions are built from quoted terms
//! only: whatever a person or the model types, [`fts5_match`] and [`tsquery`] never produce a
//! syntax error.

/// The most terms a query keeps: enough for any real search, and a bound on the expression a
/// pasted page turns into.
const MAX_TERMS: usize = 32;

/// Longer words are dropped from queries: PostgreSQL refuses a tsquery operand of 2 KB or more
/// and never indexes such a word, so it could only fail or miss.
const MAX_WORD_BYTES: usize = 1024;

/// The most characters in one phrase; a longer CJK run is cut into consecutive phrases.
/// PostgreSQL nests `<->` one level per character, and a pasted paragraph of a few thousand
/// ran out of its stack ("stack depth limit exceeded"); a phrase this long is a sentence.
const MAX_PHRASE_CHARS: usize = 32;

/// One term of a keyword query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Term {
    /// A lowercased word of letters and digits.
    Word(String),
    /// CJK characters that must appear consecutively, one character per element.
    Phrase(Vec<String>),
}

/// The version of this normalization: a store whose chunks were indexed by an older one has
/// them indexed again when memory starts ([`crate::state::memory::MemoryStore::reindex`]).
/// 2: accented Latin letters folded.
pub const INDEX_VERSION: i64 = 2;

/// The text to put into the full-text index for `text`: lowercased, every CJK character a
/// word of its own, and everything that is not a letter or digit turned into a single space.
/// Combining accents are dropped, so a word stays whole in decomposed text and after
/// lowercasing `İ` (`i` and a combining dot), and accented Latin letters lose their accents
/// (`café` is indexed as `cafe`): SQLite's tokenizer folds those (`remove_diacritics 2`)
/// and PostgreSQL's `simple` configuration does not, so they are folded here for both.
///
/// Punctuation is removed here rather than left to the tokenizers because PostgreSQL's parser
/// does not split on it everywhere: it keeps `example.com`, `a@b.org`, `/usr/bin` and `1.2.3`
/// whole, so a search for `example` would miss them there and find them in SQLite.
pub fn index_text(text: &str) -> String {
    let mut indexed = String::with_capacity(text.len() + text.len() / 4);
    for c in folded_lowercase(text) {
        if is_combining_accent(c) {
            continue;
        }
        if is_cjk(c) {
            push_separator(&mut indexed);
            indexed.push(c);
            indexed.push(' ');
        } else if c.is_alphanumeric() {
            indexed.push(c);
        } else {
            push_separator(&mut indexed);
        }
    }
    indexed.truncate(indexed.trim_end().len());
    indexed
}

/// The terms of a search `query`: lowercased words (split on anything not alphanumeric, in
/// any script) and phrases of CJK characters (at most `MAX_PHRASE_CHARS` each), without
/// repeats, at most `MAX_TERMS` of them, in the order they appear. Empty when the query has
/// no letters or digits (an emoji, only punctuation).
pub fn query_terms(query: &str) -> Vec<Term> {
    let mut terms: Vec<Term> = Vec::new();
    let mut word = String::new();
    let mut phrase: Vec<String> = Vec::new();
    for c in folded_lowercase(query) {
        if terms.len() >= MAX_TERMS {
            return terms;
        }
        if is_combining_accent(c) {
            continue;
        }
        if is_cjk(c) {
            finish_word(&mut word, &mut terms);
            if phrase.len() == MAX_PHRASE_CHARS {
                finish_phrase(&mut phrase, &mut terms);
            }
            phrase.push(c.to_string());
        } else {
            finish_phrase(&mut phrase, &mut terms);
            if c.is_alphanumeric() {
                word.push(c);
            } else {
                finish_word(&mut word, &mut terms);
            }
        }
    }
    finish_word(&mut word, &mut terms);
    finish_phrase(&mut phrase, &mut terms);
    terms.truncate(MAX_TERMS);
    terms
}

/// Which chunks a keyword query matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Matching {
    /// Those with any of the terms (ranked, so those with more of them come first).
    Any,
    /// Only those with every term.
    All,
}

/// An FTS5 `MATCH` expression for `terms`, each a double-quoted string, so it is never a
/// syntax error and no word is read as an operator (`AND`, `NEAR`, `*`, `^`, a column
/// filter). `None` without terms: there is nothing to search for.
pub fn fts5_match(terms: &[Term], matching: Matching) -> Option<String> {
    let quoted: Vec<String> = terms
        .iter()
        .filter_map(|term| match term {
            Term::Word(word) if !word.is_empty() => Some(fts5_string(word)),
            Term::Phrase(characters) if characters.iter().any(|c| !c.is_empty()) => {
                Some(fts5_string(&characters.join(" ")))
            }
            _ => None,
        })
        .collect();
    let joiner = match matching {
        Matching::Any => " OR ",
        Matching::All => " AND ",
    };
    (!quoted.is_empty()).then(|| quoted.join(joiner))
}

/// The argument of PostgreSQL's `to_tsquery('simple', $1)` for `terms`, each a quoted
/// lexeme and each phrase its lexemes in order (`<->`), so it is never a syntax error.
/// `None` without terms.
pub fn tsquery(terms: &[Term], matching: Matching) -> Option<String> {
    let quoted: Vec<String> = terms
        .iter()
        .filter_map(|term| match term {
            Term::Word(word) if !word.is_empty() => Some(tsquery_lexeme(word)),
            Term::Word(_) => None,
            Term::Phrase(characters) => {
                let lexemes: Vec<String> =
                    characters.iter().filter(|c| !c.is_empty()).map(|c| tsquery_lexeme(c)).collect();
                match lexemes.as_slice() {
                    [] => None,
                    [single] => Some(single.clone()),
                    _ => Some(format!("({})", lexemes.join(" <-> "))),
                }
            }
        })
        .collect();
    let joiner = match matching {
        Matching::Any => " | ",
        Matching::All => " & ",
    };
    (!quoted.is_empty()).then(|| quoted.join(joiner))
}

/// Whether `c` is written without spaces between words and so is indexed as a word of its
/// own: Han ideographs (with 々 〆 〇), Hiragana, Katakana (with the prolonged sound mark ー
/// and the half-width forms) and Hangul syllables. Punctuation in these blocks (、。「」・)
/// is not: it separates like any other.
pub(super) fn is_cjk(c: char) -> bool {
    let cjk = matches!(c,
        '\u{3005}'..='\u{3007}'          // 々 〆 〇
        | '\u{3041}'..='\u{309F}'        // Hiragana
        | '\u{30A0}'..='\u{30FF}'        // Katakana, with ー
        | '\u{31F0}'..='\u{31FF}'        // Katakana phonetic extensions
        | '\u{3400}'..='\u{4DBF}'        // CJK Extension A
        | '\u{4E00}'..='\u{9FFF}'        // CJK Unified Ideographs
        | '\u{AC00}'..='\u{D7AF}'        // Hangul syllables
        | '\u{F900}'..='\u{FAFF}'        // CJK Compatibility Ideographs
        | '\u{FF66}'..='\u{FF9F}'        // Half-width Katakana
        | '\u{1B000}'..='\u{1B16F}'      // Kana supplement and extensions
        | '\u{20000}'..='\u{323AF}'      // CJK Extensions B to H, compatibility supplement
    );
    cjk && c.is_alphanumeric()
}

/// `text` lowercased, its accented Latin letters as their base letter and accents (which
/// the callers drop). Other scripts are left whole: in Cyrillic, Greek, Indic scripts or
/// kana a mark can make another letter (`й` is not `и`), and SQLite folds only Latin too.
fn folded_lowercase(text: &str) -> impl Iterator<Item = char> + '_ {
    text.chars().flat_map(char::to_lowercase).flat_map(|c| {
        let mut parts = [c, '\0', '\0', '\0'];
        if is_accented_latin(c) {
            let mut len = 0;
            unicode_normalization::char::decompose_canonical(c, |part| {
                if let Some(slot) = parts.get_mut(len) {
                    *slot = part;
                    len += 1;
                }
            });
            parts.into_iter().take(len.max(1))
        } else {
            parts.into_iter().take(1)
        }
    })
}

/// Latin letters that may carry accents: Latin-1 Supplement, Latin Extended-A and -B, and
/// Latin Extended Additional (Vietnamese).
fn is_accented_latin(c: char) -> bool {
    matches!(c, '\u{00C0}'..='\u{024F}' | '\u{1E00}'..='\u{1EFF}')
}

/// A combining diacritical mark (U+0300 to U+036F): not a letter, but part of the word it
/// follows.
fn is_combining_accent(c: char) -> bool {
    matches!(c, '\u{0300}'..='\u{036F}')
}

/// Ends the current indexed word, unless the text is empty or already ends with a space.
fn push_separator(indexed: &mut String) {
    if !indexed.is_empty() && !indexed.ends_with(' ') {
        indexed.push(' ');
    }
}

fn finish_word(word: &mut String, terms: &mut Vec<Term>) {
    if !word.is_empty() && word.len() <= MAX_WORD_BYTES {
        push_term(Term::Word(std::mem::take(word)), terms);
    }
    word.clear();
}

/// A run of CJK characters becomes its overlapping pairs (`東京タワー` → `東京`, `京タ`,
/// `タワ`, `ワー`), each a two-character phrase: a sentence typed as a query (or a message
/// recall searches for) then matches the notes that share some of its words, ranked by how
/// many, instead of only notes holding the whole sentence. A single character is its own.
fn finish_phrase(phrase: &mut Vec<String>, terms: &mut Vec<Term>) {
    let run = std::mem::take(phrase);
    match run.len() {
        0 => {}
        1 => push_term(Term::Phrase(run), terms),
        _ => run.windows(2).for_each(|pair| push_term(Term::Phrase(pair.to_vec()), terms)),
    }
}

fn push_term(term: Term, terms: &mut Vec<Term>) {
    if terms.len() < MAX_TERMS && !terms.contains(&term) {
        terms.push(term);
    }
}

/// `text` as an FTS5 string: in double quotes, a double quote written twice.
fn fts5_string(text: &str) -> String {
    format!("\"{}\"", text.replace('"', "\"\""))
}

/// `text` as a tsquery lexeme: in single quotes, a quote and a backslash written twice.
fn tsquery_lexeme(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "''"))
}

#[cfg(test)]
#[path = "terms_tests.rs"]
mod tests;

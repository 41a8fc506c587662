//! The crate's import graph, read from its sources: which file names which, and which
//! top-level module uses which.
//!
//! A file names another when it `use`s something from it or writes a path into it
//! (`crate::state::Stores::open(…)`, `super::inbound::MessageKey`, `sessions::Row`); the path
//! is resolved to the deepest module it reaches, so naming a type that `state/mod.rs`
//! re-exports is an edge to `state/mod.rs`. Comments (doc comments included) and string
//! literals are not read. Declaring a child module (`mod x;`) is not an import.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One lexical token of Rust source: enough of it to follow paths.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    /// `::`
    PathSep,
    Punct(char),
    /// A string, character, lifetime or number: never part of a path.
    Literal,
}

/// Splits Rust source into tokens, skipping whitespace and comments.
fn tokenize(source: &str) -> Vec<Token> {
    let bytes = source.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let rest = &source[i..];
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            i += block_comment_len(rest);
        } else if let Some(len) = raw_string_len(rest) {
            tokens.push(Token::Literal);
            i += len;
        } else if c == b'"' || ((c == b'b' || c == b'c') && rest[1..].starts_with('"')) {
            let start = if c == b'"' { 1 } else { 2 };
            i += start + quoted_len(&rest[start..], b'"');
            tokens.push(Token::Literal);
        } else if c == b'\'' || (c == b'b' && rest[1..].starts_with('\'')) {
            let start = if c == b'\'' { 1 } else { 2 };
            i += start + char_or_lifetime_len(&rest[start..]);
            tokens.push(Token::Literal);
        } else if c == b'_' || c.is_ascii_alphabetic() || (c == b'r' && rest[1..].starts_with('#')) {
            let body = rest.strip_prefix("r#").unwrap_or(rest);
            let len = body.find(|ch: char| !(ch == '_' || ch.is_alphanumeric())).unwrap_or(body.len());
            tokens.push(Token::Ident(body[..len].to_owned()));
            i += len + (rest.len() - body.len());
        } else if c.is_ascii_digit() {
            let len = rest.find(|ch: char| !(ch == '_' || ch == '.' || ch.is_alphanumeric())).unwrap_or(rest.len());
            tokens.push(Token::Literal);
            i += len;
        } else if rest.starts_with("::") {
            tokens.push(Token::PathSep);
            i += 2;
        } else {
            let ch = rest.chars().next().unwrap_or(' ');
            tokens.push(Token::Punct(ch));
            i += ch.len_utf8();
        }
    }
    tokens
}

/// The length of the (possibly nested) block comment `text` starts with.
fn block_comment_len(text: &str) -> usize {
    let mut depth = 0;
    let mut i = 0;
    while i < text.len() {
        if text[i..].starts_with("/*") {
            depth += 1;
            i += 2;
        } else if text[i..].starts_with("*/") {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += text[i..].chars().next().map_or(1, char::len_utf8);
        }
    }
    text.len()
}

/// The length of a raw string literal (`r"…"`, `r#"…"#`, `br#"…"#`) `text` starts with.
fn raw_string_len(text: &str) -> Option<usize> {
    let after_prefix =
        text.strip_prefix("br").or_else(|| text.strip_prefix("cr")).or_else(|| text.strip_prefix('r'))?;
    let hashes = after_prefix.len() - after_prefix.trim_start_matches('#').len();
    let body = after_prefix[hashes..].strip_prefix('"')?;
    let end = format!("\"{}", "#".repeat(hashes));
    let close = body.find(&end).map_or(body.len(), |at| at + end.len());
    Some(text.len() - body.len() + close)
}

/// The length of a quoted literal's rest, up to and including the closing `quote`.
fn quoted_len(text: &str, quote: u8) -> usize {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b if b == quote => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

/// After a `'`: the length of a character literal's rest (`a'`, `\n'`), or of a lifetime's
/// name (`a`, `static`).
fn char_or_lifetime_len(text: &str) -> usize {
    let mut chars = text.char_indices();
    match chars.next() {
        Some((_, '\\')) => quoted_len(text, b'\''),
        Some((_, first)) => {
            let after = first.len_utf8();
            if text[after..].starts_with('\'') {
                after + 1
            } else {
                text.find(|ch: char| !(ch == '_' || ch.is_alphanumeric())).unwrap_or(text.len())
            }
        }
        None => 0,
    }
}

/// A module path below the crate root (`["state", "postgres"]`).
type ModPath = Vec<String>;

/// The crate's files and the import edges between them.
#[derive(Debug, Default)]
pub struct ImportGraph {
    /// Each module that has a file of its own, with that file (relative to the root).
    files: BTreeMap<ModPath, String>,
    /// Which files each file names.
    pub edges: BTreeMap<String, BTreeSet<String>>,
}

impl ImportGraph {
    /// Reads the crate whose root module is `root/src/lib.rs`.
    pub fn read(root: &Path) -> Self {
        let mut graph = Self::default();
        let lib = root.join("src/lib.rs");
        graph.declare(root, Vec::new(), &lib);
        let modules: Vec<(ModPath, String)> = graph.files.iter().map(|(m, f)| (m.clone(), f.clone())).collect();
        for (module, file) in modules {
            let source = std::fs::read_to_string(root.join(&file)).unwrap_or_else(|e| panic!("{file}: {e}"));
            let named = graph.named_by(&module, &tokenize(&source));
            graph.edges.insert(file.clone(), named.into_iter().filter(|named| *named != file).collect());
        }
        graph
    }

    /// Records `file` as `module`'s and follows its `mod x;` declarations.
    fn declare(&mut self, root: &Path, module: ModPath, file: &Path) {
        let relative = file.strip_prefix(root).unwrap_or(file).to_string_lossy().replace('\\', "/");
        self.files.insert(module.clone(), relative);
        let source = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let tokens = tokenize(&source);
        let owns_dir = matches!(file.file_name().and_then(|n| n.to_str()), Some("lib.rs" | "mod.rs" | "main.rs"));
        let dir = if owns_dir { file.parent().unwrap_or(root).to_path_buf() } else { file.with_extension("") };
        for (at, window) in tokens.windows(3).enumerate() {
            let [Token::Ident(keyword), Token::Ident(name), Token::Punct(';')] = window else { continue };
            if keyword != "mod" {
                continue;
            }
            let child = path_attribute(&tokens[..at], &source, name)
                .map(|path| file.parent().unwrap_or(root).join(path))
                .or_else(|| {
                    [dir.join(format!("{name}.rs")), dir.join(name).join("mod.rs")].into_iter().find(|p| p.is_file())
                });
            if let Some(child) = child {
                let mut path = module.clone();
                path.push(name.clone());
                self.declare(root, path, &child);
            }
        }
    }

    /// The files `tokens` (the source of `module`'s file) name.
    fn named_by(&self, module: &ModPath, tokens: &[Token]) -> BTreeSet<String> {
        let mut named = BTreeSet::new();
        // Inline modules (`mod tests { … }`) open a scope: `super::` inside one is the file.
        let mut scopes: Vec<(ModPath, usize)> = vec![(module.clone(), 0)];
        let mut depth = 0;
        let mut i = 0;
        while i < tokens.len() {
            let current = scopes.last().map(|(path, _)| path.clone()).unwrap_or_default();
            match &tokens[i] {
                Token::Ident(word) if word == "mod" => {
                    if let (Some(Token::Ident(name)), Some(Token::Punct('{'))) = (tokens.get(i + 1), tokens.get(i + 2))
                    {
                        let mut inner = current.clone();
                        inner.push(name.clone());
                        depth += 1;
                        scopes.push((inner, depth));
                        i += 3;
                        continue;
                    }
                }
                Token::Ident(word) if word == "use" => {
                    let mut paths = Vec::new();
                    i = use_tree(tokens, i + 1, Vec::new(), &mut paths);
                    for path in paths {
                        named.extend(self.resolve(&current, &path));
                    }
                    continue;
                }
                Token::Punct('{') => depth += 1,
                Token::Punct('}') => {
                    if scopes.len() > 1 && scopes.last().is_some_and(|(_, at)| *at == depth) {
                        scopes.pop();
                    }
                    depth -= 1;
                }
                Token::Ident(first) if tokens.get(i + 1) == Some(&Token::PathSep) => {
                    let continues_a_path = i > 0 && tokens[i - 1] == Token::PathSep;
                    if !continues_a_path {
                        let mut path = vec![first.clone()];
                        let mut j = i + 1;
                        while let (Some(Token::PathSep), Some(Token::Ident(next))) = (tokens.get(j), tokens.get(j + 1))
                        {
                            path.push(next.clone());
                            j += 2;
                        }
                        named.extend(self.resolve(&current, &path));
                        i = j;
                        continue;
                    }
                }
                _ => {}
            }
            i += 1;
        }
        named
    }

    /// The file a path written in `module` reaches, if it is one of the crate's.
    fn resolve(&self, module: &ModPath, path: &[String]) -> Option<String> {
        let first = path.first()?;
        let absolute: ModPath = match first.as_str() {
            "crate" => path[1..].to_vec(),
            "self" | "super" => {
                let mut base = module.clone();
                let mut rest = path;
                while let Some(step) = rest.first() {
                    match step.as_str() {
                        "super" => {
                            base.pop();
                        }
                        "self" => {}
                        _ => break,
                    }
                    rest = &rest[1..];
                }
                base.extend(rest.iter().cloned());
                base
            }
            // A child module named without `self::` (2018 paths); anything else is another
            // crate, a local item or a variable.
            child => {
                let mut candidate = module.clone();
                candidate.push(child.to_owned());
                if !self.files.contains_key(&candidate) {
                    return None;
                }
                candidate.extend(path[1..].iter().cloned());
                candidate
            }
        };
        (0..=absolute.len()).rev().find_map(|len| self.files.get(&absolute[..len]).cloned())
    }

    /// The module a file belongs to, at the top level (`src/state/postgres/mod.rs` →
    /// `state`); `None` for the crate root.
    pub fn top_module(&self, file: &str) -> Option<String> {
        self.files.iter().find(|(_, f)| *f == file).and_then(|(module, _)| module.first().cloned())
    }

    /// Every top-level module.
    pub fn top_modules(&self) -> BTreeSet<String> {
        self.files.keys().filter_map(|module| module.first().cloned()).collect()
    }

    /// Which top-level modules each names, with one file edge that shows it.
    pub fn module_edges(&self) -> BTreeMap<String, BTreeMap<String, (String, String)>> {
        let mut edges: BTreeMap<String, BTreeMap<String, (String, String)>> = BTreeMap::new();
        for (from, targets) in &self.edges {
            let Some(from_module) = self.top_module(from) else { continue };
            for to in targets {
                let Some(to_module) = self.top_module(to) else { continue };
                if to_module != from_module {
                    edges
                        .entry(from_module.clone())
                        .or_default()
                        .entry(to_module)
                        .or_insert_with(|| (from.clone(), to.clone()));
                }
            }
        }
        edges
    }

    /// Whether `file` is `module`'s own file or one of its submodules' (`src/state/mod.rs`
    /// is `src/state/postgres/inbound.rs`'s ancestor).
    pub fn is_ancestor(&self, ancestor: &str, file: &str) -> bool {
        let module_of = |f: &str| self.files.iter().find(|(_, x)| x.as_str() == f).map(|(m, _)| m.clone());
        match (module_of(ancestor), module_of(file)) {
            (Some(a), Some(f)) => f.len() > a.len() && f.starts_with(&a),
            _ => false,
        }
    }
}

/// Reads the use tree starting at `tokens[i]`, collecting each full path it names into
/// `out`; returns the index after it.
fn use_tree(tokens: &[Token], mut i: usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix;
    loop {
        match tokens.get(i) {
            Some(Token::Punct('{')) => {
                i += 1;
                while !matches!(tokens.get(i), Some(Token::Punct('}')) | None) {
                    i = use_tree(tokens, i, path.clone(), out);
                    if tokens.get(i) == Some(&Token::Punct(',')) {
                        i += 1;
                    }
                }
                return i + 1;
            }
            Some(Token::Punct('*')) => {
                out.push(path);
                return i + 1;
            }
            Some(Token::PathSep) => i += 1,
            Some(Token::Ident(name)) => {
                if name != "self" || path.is_empty() {
                    path.push(name.clone());
                }
                i += 1;
                if let (Some(Token::Ident(word)), Some(Token::Ident(_))) = (tokens.get(i), tokens.get(i + 1))
                    && word == "as"
                {
                    i += 2;
                }
                if tokens.get(i) != Some(&Token::PathSep) {
                    out.push(path);
                    return i;
                }
            }
            _ => {
                if !path.is_empty() {
                    out.push(path);
                }
                return i;
            }
        }
    }
}

/// The `#[path = "…"]` on the `mod name;` declaration ending `before`, if any.
fn path_attribute(before: &[Token], source: &str, name: &str) -> Option<PathBuf> {
    // Tokens drop the literal's text; the declaration is rare enough to find in the source.
    let declaration = format!("mod {name};");
    let at = source.find(&declaration)?;
    let head = &source[..at];
    let attribute = head.rfind("#[path = \"")?;
    let between = &head[attribute..];
    if between.matches(']').count() > 1 || before.is_empty() {
        return None;
    }
    let value = between.strip_prefix("#[path = \"")?;
    Some(PathBuf::from(&value[..value.find('"')?]))
}

/// The shortest chain of modules from `from` back to `from`, if there is one.
pub fn cycle_through(edges: &BTreeMap<String, BTreeMap<String, (String, String)>>, from: &str) -> Option<Vec<String>> {
    let mut previous: BTreeMap<String, String> = BTreeMap::new();
    let mut queue: std::collections::VecDeque<String> = std::collections::VecDeque::new();
    queue.push_back(from.to_owned());
    while let Some(at) = queue.pop_front() {
        for next in edges.get(&at).map(|targets| targets.keys().cloned().collect::<Vec<_>>()).unwrap_or_default() {
            if next == from {
                let mut chain = vec![from.to_owned(), at.clone()];
                let mut step = at;
                while let Some(before) = previous.get(&step) {
                    chain.insert(1, before.clone());
                    step = before.clone();
                }
                chain.dedup();
                chain.push(from.to_owned());
                return Some(chain);
            }
            if next != from && !previous.contains_key(&next) {
                previous.insert(next.clone(), at.clone());
                queue.push_back(next);
            }
        }
    }
    None
}

/// Whether `source` names `ident` outside comments and strings.
pub fn names(source: &str, ident: &str) -> bool {
    tokenize(source).iter().any(|token| matches!(token, Token::Ident(name) if name == ident))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idents(source: &str) -> Vec<String> {
        tokenize(source)
            .into_iter()
            .filter_map(|t| match t {
                Token::Ident(name) => Some(name),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn comments_strings_and_lifetimes_are_not_paths() {
        let source = r##"
            /// crate::doc::link
            fn f<'a>(x: &'a str) -> char { let _ = "crate::in_string"; let _ = r#"crate::raw"#; '\'' }
            /* crate::block /* nested */ still */
        "##;
        assert_eq!(idents(source), ["fn", "f", "x", "str", "char", "let", "_", "let", "_"]);
    }

    #[test]
    fn use_trees_expand_into_every_path() {
        let tokens = tokenize("use crate::{a::{B, c::D as E}, f::*, self as g};");
        let mut out = Vec::new();
        use_tree(&tokens, 1, Vec::new(), &mut out);
        let joined: Vec<String> = out.iter().map(|path| path.join("::")).collect();
        assert_eq!(joined, ["crate::a::B", "crate::a::c::D", "crate::f", "crate"]);
    }
}

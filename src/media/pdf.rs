//! A PDF's text, so a document a user sends can be put in the prompt (issue 23).
//!
//! The text comes from [`pdf_extract`] (on `lopdf`), which reads fonts' ToUnicode maps and the
//! standard encodings. A PDF from a chat is hostile input, and the parser is not hardened for
//! it, so it is fenced in three ways:
//!
//! - a panic inside the parser (it unwraps freely) is caught and becomes
//!   [`PdfError::Unreadable`];
//! - before any content is run, the nesting of Form XObjects is measured: the parser follows
//!   `Do` into a form by plain recursion, with no depth limit and no cycle check, so one small
//!   file whose form draws itself would overflow the stack, and a stack overflow aborts the
//!   whole process (no `catch_unwind` can stop that). Deeper than [`MAX_FORM_DEPTH`], or
//!   cyclic, is refused;
//! - the daemon never runs it itself: [`FileReader`](super::FileReader) runs it in a child
//!   process (sandboxed, with CPU and memory limits, killed at a deadline), because a parser
//!   loop that never ends or a memory bomb cannot be fenced inside a process: a thread
//!   cannot be killed, and an allocation that fails aborts the whole process.
//!
//! [`pdf_text`] is what that child runs.

#[cfg(feature = "pdf")]
use std::collections::{HashMap, HashSet};
#[cfg(feature = "pdf")]
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use serde::{Deserialize, Serialize};

#[cfg(feature = "pdf")]
use pdf_extract::content::Content;
#[cfg(feature = "pdf")]
use pdf_extract::{Dictionary, Document, Object, ObjectId, PlainTextOutput};

/// How deeply Form XObjects may nest (a form drawing a form drawing …). Real documents nest a
/// few levels; each level costs the parser a few kilobytes of stack, and the reader's main
/// thread has at least 2 MiB, so this leaves a wide margin.
pub const MAX_FORM_DEPTH: usize = 32;

/// Why a PDF gave no text. Serialized: the child process that reads a PDF sends it back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum PdfError {
    /// Not a PDF, truncated, corrupt, or built in a way the parser cannot follow (it
    /// panicked, or its forms nest too deeply). The reason is for logs.
    #[error("the PDF cannot be read: {0}")]
    Unreadable(String),
    /// Encrypted with a user password. (A PDF encrypted only against editing, with an empty
    /// user password, is decrypted and read.)
    #[error("the PDF is password-protected")]
    Encrypted,
    /// Read, but it holds no text: a scan or a document of images only.
    #[error("the PDF has no text layer (a scan or images only)")]
    NoText,
    /// Reading took longer than the reader's deadline (`[media] parse_timeout_seconds`).
    #[error("reading the PDF took longer than {} s", .0.as_secs_f32())]
    TooSlow(Duration),
    /// Reading needed more memory than the reader's limit, in megabytes
    /// (`[media] parse_memory_mb`).
    #[error("reading the PDF needed more than {0} MB of memory")]
    OutOfMemory(u64),
    /// This ferry was built without the `pdf` feature: no PDF is read.
    #[error("PDFs are not read here: reading them {}", crate::config::features::needs("pdf"))]
    NotBuilt,
}

/// The text of the PDF in `bytes`, lines as the parser lays them out, runs of blank lines
/// squeezed, trimmed. Never empty: no text is [`PdfError::NoText`]. Never panics.
/// CPU-bound, and on a hostile file unbounded in time and memory: the daemon calls it only
/// through [`FileReader`](super::FileReader), in a child process.
#[cfg(feature = "pdf")]
pub fn pdf_text(bytes: &[u8]) -> Result<String, PdfError> {
    let text = catch_unwind(AssertUnwindSafe(|| extract(bytes))).map_err(|panic| {
        let reason = panic
            .downcast_ref::<&str>()
            .map(|reason| (*reason).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no reason given".to_owned());
        PdfError::Unreadable(format!("the parser panicked: {reason}"))
    })??;
    let text = tidy(&text);
    if text.is_empty() { Err(PdfError::NoText) } else { Ok(text) }
}

/// A build without the `pdf` feature reads no PDF; the sender's model is told why.
#[cfg(not(feature = "pdf"))]
pub fn pdf_text(_bytes: &[u8]) -> Result<String, PdfError> {
    Err(PdfError::NotBuilt)
}

#[cfg(feature = "pdf")]
fn extract(bytes: &[u8]) -> Result<String, PdfError> {
    let document = Document::load_mem(bytes).map_err(|error| PdfError::Unreadable(error.to_string()))?;
    // lopdf decrypts on load when the user password is empty; still encrypted means it is not.
    if document.is_encrypted() {
        return Err(PdfError::Encrypted);
    }
    FormGraph::of(&document).check()?;
    let mut text = String::new();
    let mut output = PlainTextOutput::new(&mut text);
    pdf_extract::output_doc(&document, &mut output).map_err(|error| PdfError::Unreadable(error.to_string()))?;
    Ok(text)
}

/// Lines without trailing spaces, at most one blank line in a row, no blank edges.
#[cfg(feature = "pdf")]
fn tidy(text: &str) -> String {
    let mut tidied = String::with_capacity(text.len());
    let mut blank_run = 0;
    for line in text.lines().map(str::trim_end) {
        if line.is_empty() {
            blank_run += 1;
            continue;
        }
        if !tidied.is_empty() {
            tidied.push_str(if blank_run > 0 { "\n\n" } else { "\n" });
        }
        blank_run = 0;
        tidied.push_str(line);
    }
    tidied
}

/// Where the parser's `Do` recursion can go, found without running it. A `Do` looks its
/// name up in the resources in force; an XObject with its own `/Resources` runs in those,
/// one without inherits the caller's. So a step of the recursion is an XObject *in* a
/// resource dictionary, and it leads to the XObjects its content calls, looked up there.
/// Content is read as the parser reads it, and any stream counts, not only forms: the
/// parser runs an image's bytes as content too.
#[cfg(feature = "pdf")]
struct FormGraph<'a> {
    document: &'a Document,
    /// Every resource dictionary, by the object holding it (the dictionary itself when it
    /// is an object of its own).
    resources: HashMap<ObjectId, &'a Dictionary>,
    /// XObjects with resources of their own: which dictionary that is.
    own_resources: HashMap<ObjectId, ObjectId>,
}

/// An XObject, and the resource dictionary in force when it is called.
#[cfg(feature = "pdf")]
type Step = (ObjectId, ObjectId);

#[cfg(feature = "pdf")]
impl<'a> FormGraph<'a> {
    fn of(document: &'a Document) -> Self {
        let mut graph = Self { document, resources: HashMap::new(), own_resources: HashMap::new() };
        for (&id, object) in &document.objects {
            let (dict, is_stream) = match object {
                Object::Dictionary(dict) => (dict, false),
                Object::Stream(stream) => (&stream.dict, true),
                _ => continue,
            };
            let (holder, resources) = match dict.get(b"Resources") {
                Ok(Object::Reference(target)) => (*target, document.get_dictionary(*target).ok()),
                Ok(Object::Dictionary(resources)) => (id, Some(resources)),
                _ => continue,
            };
            let Some(resources) = resources else { continue };
            graph.resources.insert(holder, resources);
            if is_stream {
                graph.own_resources.insert(id, holder);
            }
        }
        graph
    }

    /// Refuses a cycle, or a chain of more than [`MAX_FORM_DEPTH`] XObjects. Every XObject a
    /// resource dictionary lists is a possible start, called or not.
    fn check(&self) -> Result<(), PdfError> {
        let mut walk = Walk { graph: self, calls: HashMap::new(), longest: HashMap::new(), on_path: HashSet::new() };
        for (&holder, &resources) in &self.resources {
            let Some(listed) = xobjects(self.document, resources) else { continue };
            for (_, xobject) in listed.iter() {
                if let Ok(id) = xobject.as_reference() {
                    walk.longest_from((id, holder), 0)?;
                }
            }
        }
        Ok(())
    }

    /// The XObject `name` stands for in the resources held by `holder`.
    fn lookup(&self, holder: ObjectId, name: &[u8]) -> Option<ObjectId> {
        let resources = self.resources.get(&holder)?;
        xobjects(self.document, resources)?.get(name).ok()?.as_reference().ok()
    }

    /// The names the content of stream `id` calls with `Do`.
    fn calls(&self, id: ObjectId) -> Vec<Vec<u8>> {
        let Some(Object::Stream(stream)) = self.document.objects.get(&id) else { return Vec::new() };
        // As the parser reads a stream: decompressed when it can be, else raw.
        let bytes = if stream.filters().is_ok() {
            stream.decompressed_content().unwrap_or_else(|_| stream.content.clone())
        } else {
            stream.content.clone()
        };
        let Ok(content) = Content::decode(&bytes) else { return Vec::new() };
        content
            .operations
            .iter()
            .filter(|operation| operation.operator == "Do")
            .filter_map(|operation| operation.operands.first()?.as_name().ok().map(<[u8]>::to_vec))
            .collect()
    }
}

/// A depth-first walk that remembers the longest chain below each step, so every step is
/// expanded once, and stops (as an error) before its own recursion gets deep.
#[cfg(feature = "pdf")]
struct Walk<'g, 'a> {
    graph: &'g FormGraph<'a>,
    calls: HashMap<ObjectId, Vec<Vec<u8>>>,
    longest: HashMap<Step, usize>,
    on_path: HashSet<Step>,
}

#[cfg(feature = "pdf")]
impl Walk<'_, '_> {
    /// How many XObjects the longest chain starting at `step` enters.
    fn longest_from(&mut self, step: Step, depth: usize) -> Result<usize, PdfError> {
        if let Some(&known) = self.longest.get(&step) {
            return Ok(known);
        }
        let too_deep = || PdfError::Unreadable(format!("its forms nest more than {MAX_FORM_DEPTH} deep"));
        if !self.on_path.insert(step) {
            return Err(PdfError::Unreadable("a form draws itself".to_owned()));
        }
        if depth >= MAX_FORM_DEPTH {
            return Err(too_deep());
        }
        let (id, holder) = step;
        let in_force = self.graph.own_resources.get(&id).copied().unwrap_or(holder);
        let graph = self.graph;
        let names = self.calls.entry(id).or_insert_with(|| graph.calls(id)).clone();
        let mut below = 0;
        for name in names {
            if let Some(next) = self.graph.lookup(in_force, &name) {
                below = below.max(self.longest_from((next, in_force), depth + 1)?);
            }
        }
        self.on_path.remove(&step);
        let longest = 1 + below;
        if longest > MAX_FORM_DEPTH {
            return Err(too_deep());
        }
        self.longest.insert(step, longest);
        Ok(longest)
    }
}

/// A resource dictionary's `/XObject` dictionary.
#[cfg(feature = "pdf")]
fn xobjects<'a>(document: &'a Document, resources: &'a Dictionary) -> Option<&'a Dictionary> {
    match resources.get(b"XObject") {
        Ok(Object::Dictionary(xobjects)) => Some(xobjects),
        Ok(Object::Reference(id)) => document.get_dictionary(*id).ok(),
        _ => None,
    }
}

#[cfg(test)]
#[cfg(feature = "pdf")]
pub(super) mod tests;

/// Without the feature every PDF is the same answer, worded for the sender's model.
#[cfg(all(test, not(feature = "pdf")))]
#[test]
fn without_the_pdf_feature_no_pdf_is_read_and_the_reason_names_it() {
    let error = pdf_text(b"%PDF-1.4\n").unwrap_err();
    assert_eq!(error, PdfError::NotBuilt);
    assert!(error.to_string().contains("--features pdf"), "{error}");
}

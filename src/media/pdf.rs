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

use std::time::Duration;

use serde::{Deserialize, Serialize};

// The parser and its fences: the `pdf` feature.
#[cfg(feature = "pdf")]
mod parse;

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
    parse::text(bytes)
}

/// A build without the `pdf` feature reads no PDF; the sender's model is told why.
#[cfg(not(feature = "pdf"))]
pub fn pdf_text(_bytes: &[u8]) -> Result<String, PdfError> {
    Err(PdfError::NotBuilt)
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

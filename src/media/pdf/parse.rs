//! [`super::pdf_text`], built: the parser run under its fences (see [`super`]'s doc).

use std::collections::{HashMap, HashSet};
use std::panic::{AssertUnwindSafe, catch_unwind};

use pdf_extract::content::Content;
use pdf_extract::{Dictionary, Document, Object, ObjectId, PlainTextOutput};

use super::{MAX_FORM_DEPTH, PdfError};

pub(super) fn text(bytes: &[u8]) -> Result<String, PdfError> {
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
pub(super) fn tidy(text: &str) -> String {
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
struct FormGraph<'a> {
    document: &'a Document,
    /// Every resource dictionary, by the object holding it (the dictionary itself when it
    /// is an object of its own).
    resources: HashMap<ObjectId, &'a Dictionary>,
    /// XObjects with resources of their own: which dictionary that is.
    own_resources: HashMap<ObjectId, ObjectId>,
}

/// An XObject, and the resource dictionary in force when it is called.
type Step = (ObjectId, ObjectId);

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
struct Walk<'g, 'a> {
    graph: &'g FormGraph<'a>,
    calls: HashMap<ObjectId, Vec<Vec<u8>>>,
    longest: HashMap<Step, usize>,
    on_path: HashSet<Step>,
}

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
fn xobjects<'a>(document: &'a Document, resources: &'a Dictionary) -> Option<&'a Dictionary> {
    match resources.get(b"XObject") {
        Ok(Object::Dictionary(xobjects)) => Some(xobjects),
        Ok(Object::Reference(id)) => document.get_dictionary(*id).ok(),
        _ => None,
    }
}

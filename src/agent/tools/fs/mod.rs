//! The file tools, `read`, `write` and `edit` (`group:fs`): files in the session's
//! workspace ([`crate::sandbox::Sandbox::place`]), and never outside it ([`confine`]).

mod confine;
#[cfg(test)]
mod tests;

use std::io::{Read as _, Write as _};
use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

pub use confine::{PathError, Workspace};

use super::{ToolContext, ToolError, ToolOutput, TypedTool};
use crate::sandbox::Sandbox;

/// The largest file `read` and `edit` take whole; bigger ones are for `exec` (`head`, `sed`).
const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;
/// Lines `read` returns when the model names no `limit`.
const DEFAULT_LINES: usize = 2000;

impl From<PathError> for ToolError {
    fn from(error: PathError) -> Self {
        ToolError::new(error.to_string())
    }
}

/// The session's workspace, opened; run off the async threads (it touches the disk).
async fn workspace<T: Send + 'static>(
    sandbox: &Arc<Sandbox>,
    context: &ToolContext,
    work: impl FnOnce(Workspace) -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    workspace_of(sandbox, &context.session_key, work).await
}

/// A file of `session_key`'s workspace, whole, when it is at most `limit` bytes: a file the
/// agent sends (`message`'s `media`, a reply's `MEDIA:` line), confined as `read` is.
pub async fn read_to_send(
    sandbox: &Arc<Sandbox>,
    session_key: &str,
    path: &str,
    limit: u64,
) -> Result<Vec<u8>, ToolError> {
    let path = path.to_owned();
    workspace_of(sandbox, session_key, move |workspace| {
        read_within(&workspace, &path, limit, "is a directory, not a file", "that can be sent")
    })
    .await
}

async fn workspace_of<T: Send + 'static>(
    sandbox: &Arc<Sandbox>,
    session_key: &str,
    work: impl FnOnce(Workspace) -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    let sandbox = sandbox.clone();
    let session_key = session_key.to_owned();
    tokio::task::spawn_blocking(move || {
        let placement = sandbox
            .place(&session_key)
            .map_err(|error| ToolError::new(format!("the workspace is not available: {error}")))?;
        let workspace = Workspace::open(&placement.workspace)
            .map_err(|error| ToolError::new(format!("the workspace is not available: {error}")))?;
        work(workspace)
    })
    .await
    .map_err(|_| ToolError::new("the file operation failed"))?
}

/// The image formats `read` hands the model as images.
#[cfg(feature = "media")]
const IMAGE_FORMATS: &[image::ImageFormat] =
    &[image::ImageFormat::Png, image::ImageFormat::Jpeg, image::ImageFormat::WebP, image::ImageFormat::Gif];

/// Whether `bytes` are an image a model could be shown (PNG, JPEG, WebP, GIF). Without the
/// `media` feature the file's magic number says so, and `prepare_image` explains why it
/// cannot be shown.
fn is_model_image(bytes: &[u8]) -> bool {
    #[cfg(feature = "media")]
    return image::guess_format(bytes).is_ok_and(|format| IMAGE_FORMATS.contains(&format));
    #[cfg(not(feature = "media"))]
    return ["image/png", "image/jpeg", "image/webp", "image/gif"]
        .contains(&crate::media::sniff(bytes, None).mime_type.as_str());
}

/// Reads a whole text file (at most [`MAX_FILE_BYTES`]).
fn read_text(workspace: &Workspace, path: &str) -> Result<String, ToolError> {
    let bytes = read_bytes(workspace, path)?;
    text_of(path, bytes)
}

/// The file's bytes as text, unless it is binary or not UTF-8.
fn text_of(path: &str, bytes: Vec<u8>) -> Result<String, ToolError> {
    if bytes.iter().take(8192).any(|byte| *byte == 0) {
        return Err(ToolError::new(format!("`{path}` is a binary file ({} bytes), not text", bytes.len())));
    }
    String::from_utf8(bytes).map_err(|_| ToolError::new(format!("`{path}` is not UTF-8 text")))
}

/// Reads a whole file (at most [`MAX_FILE_BYTES`]).
fn read_bytes(workspace: &Workspace, path: &str) -> Result<Vec<u8>, ToolError> {
    read_within(
        workspace,
        path,
        MAX_FILE_BYTES,
        "is a directory; list it with exec (`ls`)",
        "this tool reads; use exec (head, tail, grep)",
    )
}

/// A whole file of at most `limit` bytes (also when it grows while being read). The errors
/// end with `directory` for a directory and `purpose` for a file too large.
fn read_within(
    workspace: &Workspace,
    path: &str,
    limit: u64,
    directory: &str,
    purpose: &str,
) -> Result<Vec<u8>, ToolError> {
    let mut file = workspace.read(path)?;
    let meta = file.metadata().map_err(|error| ToolError::new(format!("`{path}`: {error}")))?;
    if meta.is_dir() {
        return Err(ToolError::new(format!("`{path}` {directory}")));
    }
    let too_large = |size: u64| ToolError::new(format!("`{path}` is {size} bytes, more than the {limit} {purpose}"));
    if meta.len() > limit {
        return Err(too_large(meta.len()));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    std::io::Read::by_ref(&mut file)
        .take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| ToolError::new(format!("`{path}`: {error}")))?;
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// The file, relative to the workspace.
    pub path: String,
    /// The first line to return, counting from 1.
    pub offset: Option<usize>,
    /// How many lines to return (default 2000).
    pub limit: Option<usize>,
}

/// `read`: a text file of the workspace, by lines.
pub struct ReadFile {
    sandbox: Arc<Sandbox>,
}

impl ReadFile {
    pub fn new(sandbox: Arc<Sandbox>) -> Self {
        Self { sandbox }
    }
}

#[async_trait]
impl TypedTool for ReadFile {
    type Args = ReadArgs;
    const NAME: &'static str = "read";
    const DESCRIPTION: &'static str = "Read a file in your workspace: text, or an image (PNG, JPEG, WebP, GIF), \
        which you are shown. For text, `offset` (first line, from 1) and `limit` (lines, default 2000) read a part \
        of a long file.";

    async fn run(&self, args: ReadArgs, context: &ToolContext) -> Result<ToolOutput, ToolError> {
        workspace(&self.sandbox, context, move |workspace| {
            let bytes = read_bytes(&workspace, &args.path)?;
            if is_model_image(&bytes) {
                let image = crate::media::prepare_image(&bytes)
                    .map_err(|error| ToolError::new(format!("`{}`: {error}", args.path)))?;
                let text = format!("{} ({} bytes): {}", args.path, bytes.len(), image.describe());
                return Ok(ToolOutput::with_images(text, vec![image]));
            }
            let text = text_of(&args.path, bytes)?;
            Ok(lines(&text, args.offset.unwrap_or(1).max(1), args.limit.unwrap_or(DEFAULT_LINES).max(1)).into())
        })
        .await
    }
}

/// Lines `first..first + count` of `text`, with a note when there are more.
fn lines(text: &str, first: usize, count: usize) -> String {
    let total = text.lines().count();
    if total == 0 {
        return "(the file is empty)".to_owned();
    }
    if first > total {
        return format!("(the file has {total} lines; offset {first} is past its end)");
    }
    let shown: Vec<&str> = text.lines().skip(first - 1).take(count).collect();
    let last = first - 1 + shown.len();
    let mut result = shown.join("\n");
    if first > 1 || last < total {
        result.push_str(&format!("\n\n[lines {first}-{last} of {total}; use offset and limit for the rest]"));
    }
    result
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    /// The file, relative to the workspace. Missing directories are created.
    pub path: String,
    /// The whole new content.
    pub content: String,
}

/// `write`: creates or replaces a file of the workspace.
pub struct WriteFile {
    sandbox: Arc<Sandbox>,
}

impl WriteFile {
    pub fn new(sandbox: Arc<Sandbox>) -> Self {
        Self { sandbox }
    }
}

#[async_trait]
impl TypedTool for WriteFile {
    type Args = WriteArgs;
    const NAME: &'static str = "write";
    const DESCRIPTION: &'static str =
        "Create or replace a file in your workspace with `content`; missing directories are created.";
    const MUTATES: bool = true;

    async fn run(&self, args: WriteArgs, context: &ToolContext) -> Result<ToolOutput, ToolError> {
        workspace(&self.sandbox, context, move |workspace| {
            let mut file = workspace.create(&args.path)?;
            file.write_all(args.content.as_bytes())
                .map_err(|error| ToolError::new(format!("`{}`: {error}", args.path)))?;
            Ok(format!("wrote {} bytes to {}", args.content.len(), args.path).into())
        })
        .await
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditArgs {
    /// The file, relative to the workspace.
    pub path: String,
    /// The exact text to replace; it must occur once unless `replace_all` is set.
    pub old_text: String,
    /// The text to put in its place.
    pub new_text: String,
    /// Replace every occurrence instead of exactly one.
    #[serde(default)]
    pub replace_all: Option<bool>,
}

/// `edit`: an exact replacement in a file of the workspace.
pub struct EditFile {
    sandbox: Arc<Sandbox>,
}

impl EditFile {
    pub fn new(sandbox: Arc<Sandbox>) -> Self {
        Self { sandbox }
    }
}

#[async_trait]
impl TypedTool for EditFile {
    type Args = EditArgs;
    const NAME: &'static str = "edit";
    const DESCRIPTION: &'static str = "Replace `old_text` with `new_text` in a file of your workspace. `old_text` must \
        match exactly once (include surrounding lines to make it unique), or set `replace_all`.";
    const MUTATES: bool = true;

    async fn run(&self, args: EditArgs, context: &ToolContext) -> Result<ToolOutput, ToolError> {
        workspace(&self.sandbox, context, move |workspace| {
            let text = read_text(&workspace, &args.path)?;
            let edited = replace(&text, &args.old_text, &args.new_text, args.replace_all.unwrap_or(false))
                .map_err(|why| ToolError::new(format!("`{}`: {why}", args.path)))?;
            let mut file = workspace.create(&args.path)?;
            file.write_all(edited.text.as_bytes())
                .map_err(|error| ToolError::new(format!("`{}`: {error}", args.path)))?;
            Ok(format!("replaced {} occurrence(s) in {}", edited.replaced, args.path).into())
        })
        .await
    }
}

struct Edited {
    text: String,
    replaced: usize,
}

/// `text` with `old` replaced, or why not (naming how many matches there were).
fn replace(text: &str, old: &str, new: &str, all: bool) -> Result<Edited, String> {
    if old.is_empty() {
        return Err("old_text is empty; give the exact text to replace".to_owned());
    }
    let matches = text.matches(old).count();
    match (matches, all) {
        (0, _) => Err("old_text was not found (0 matches); read the file and copy the text exactly".to_owned()),
        (1, _) | (_, true) => Ok(Edited { text: text.replace(old, new), replaced: matches }),
        (many, false) => Err(format!(
            "old_text matches {many} times; include more surrounding text so it matches once, or set replace_all"
        )),
    }
}

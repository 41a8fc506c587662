//! Files: the fake's CDN and the multipart uploads of create-message calls.
//!
//! **The CDN.** Every attachment (a user's, injected with
//! [`FakeDiscord::inject_message_with_files`], or one the bot uploaded) is served at
//! `{url}/attachments/{channel}/{attachment}/{filename}?ex=…&is=…&hm=…`, the shape of Discord's
//! signed CDN links: the query is the credential (no `Authorization` header is needed), a
//! request without the right `hm` is answered 404, and so is every link after
//! [`FakeDiscord::expire_attachment_links`], as when a link's day has passed. Answers carry
//! `Content-Length` and the file's `Content-Type`. Scripted statuses
//! ([`FakeDiscord::fail_next_download`]) and every request ([`FakeDiscord::cdn_requests`]) are
//! there for tests.
//!
//! **Uploads.** A create-message call sent as `multipart/form-data` carries its JSON body as
//! the `payload_json` part and its files as `files[n]` parts (API docs, "Uploading Files").
//! The fake checks them as Discord does: `payload_json` must be JSON (400, code 50109); each
//! entry of its `attachments` must name an uploaded part by `id` (400, code 50035; its
//! `filename` is the name shown); at most 10 files (400, code 50035); at most
//! [`UPLOAD_LIMIT`] bytes of files in all (413, code 40005 "Request entity too large"). The
//! content may then be empty. Every uploaded part is attached, named in `attachments` or not
//! (as Discord does when no `attachments` array is sent). Other form fields are ignored.
//! The `Attachment` objects of the answer and of [`SentMessage::attachments`] give each
//! file's id, name, size, type, CDN link and, for images the fake can decode, width and
//! height.
//!
//! [`SentMessage::attachments`]: super::SentMessage::attachments

use std::collections::BTreeMap;
use std::io::Cursor;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Multipart, Path, RawQuery, State as AxumState};
use axum::http::{Extensions, HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::state::State;
use super::{DiscordUser, FakeDiscord, Shared, lock};

/// The most bytes of files one message may carry: Discord's default upload limit (10 MiB)
/// for a bot, in a server without boosts.
pub const UPLOAD_LIMIT: usize = 10 * 1024 * 1024;

/// Discord's limit on files in one message (API docs, "Create Message").
pub const MAX_FILES: usize = 10;

/// What the fake's routes read of a request body at most: past [`UPLOAD_LIMIT`], so an
/// oversized upload gets the fake's own (Discord's) 413 rather than axum's.
pub(crate) const BODY_LIMIT: usize = 4 * UPLOAD_LIMIT;

/// A file a test attaches to a user's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiscordFile {
    /// The name Discord shows and puts in the link.
    pub filename: String,
    /// `content_type` in the attachment object; Discord omits it when it cannot tell.
    pub content_type: Option<String>,
    pub bytes: Vec<u8>,
}

impl DiscordFile {
    /// A file with this name, type and content. Images the fake can decode (PNG, JPEG, GIF,
    /// WebP) get their `width` and `height` in the attachment object.
    pub fn new(filename: impl Into<String>, content_type: Option<&str>, bytes: impl Into<Vec<u8>>) -> Self {
        Self { filename: filename.into(), content_type: content_type.map(str::to_owned), bytes: bytes.into() }
    }
}

/// A file the bot uploaded with a message, as the fake received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentAttachment {
    /// The attachment's snowflake id.
    pub id: u64,
    /// The name it is shown under: the `attachments` entry's `filename`, else the part's.
    pub filename: String,
    /// The `Content-Type` of its part.
    pub content_type: Option<String>,
    pub bytes: Vec<u8>,
    /// Its CDN link, as the answer gave it.
    pub url: String,
}

/// One request to the fake's CDN.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CdnRequest {
    /// The path, without the query.
    pub path: String,
    /// The status answered.
    pub status: u16,
    /// Whether it carried an `Authorization` header (a client should send none: the link is
    /// signed, and a bot token has no business at a file host).
    pub authorization: bool,
}

/// A file the CDN serves.
#[derive(Clone, Debug)]
pub(crate) struct CdnFile {
    pub(crate) bytes: Bytes,
    pub(crate) content_type: Option<String>,
    /// The `hm` query parameter the link was signed with.
    pub(crate) signature: String,
}

/// The CDN's files by path, the expired flag and the scripted statuses.
#[derive(Default)]
pub(crate) struct Cdn {
    pub(crate) files: BTreeMap<String, CdnFile>,
    /// Every link handed out so far has expired.
    pub(crate) expired: bool,
    pub(crate) faults: std::collections::VecDeque<u16>,
    pub(crate) requests: Vec<CdnRequest>,
}

/// A file part of an upload, as parsed.
#[derive(Clone, Debug)]
pub(crate) struct Part {
    /// `n` of `files[n]`.
    pub(crate) index: u64,
    pub(crate) filename: Option<String>,
    pub(crate) content_type: Option<String>,
    pub(crate) bytes: Bytes,
}

/// A `multipart/form-data` create, as parsed: the JSON body and the file parts, or why the
/// form could not be read (an answer the call ends with, after the shared checks).
pub(crate) struct Upload {
    pub(crate) payload: Result<Value, Response>,
    pub(crate) parts: Vec<Part>,
}

/// Whether a request is a multipart form.
pub(crate) fn is_multipart(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.trim_start().to_ascii_lowercase().starts_with("multipart/form-data"))
}

/// Reads a multipart create's parts. `extensions` are the request's own: they carry the
/// route's body limit ([`BODY_LIMIT`]), which axum's form reader applies.
pub(crate) async fn parse(headers: &HeaderMap, extensions: Extensions, body: Bytes) -> Upload {
    let mut request = axum::http::Request::new(Body::from(body));
    *request.extensions_mut() = extensions;
    if let Some(content_type) = headers.get(header::CONTENT_TYPE) {
        request.headers_mut().insert(header::CONTENT_TYPE, content_type.clone());
    }
    let malformed = |reason: String| Upload { payload: Err(super::rest::error(400, 0, &reason)), parts: Vec::new() };
    let mut form = match Multipart::from_request(request, &()).await {
        Ok(form) => form,
        Err(rejection) => return malformed(format!("Invalid multipart body: {rejection}")),
    };
    let mut payload = Ok(json!({}));
    let mut parts = Vec::new();
    loop {
        let field = match form.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(error) => return malformed(format!("Invalid multipart body: {error}")),
        };
        let name = field.name().unwrap_or_default().to_owned();
        let filename = field.file_name().map(str::to_owned);
        let content_type = field.content_type().map(str::to_owned);
        let bytes = match field.bytes().await {
            Ok(bytes) => bytes,
            Err(error) => return malformed(format!("Invalid multipart body: {error}")),
        };
        if name == "payload_json" {
            payload = serde_json::from_slice(&bytes)
                .map_err(|_| super::rest::error(400, 50109, "The request body contains invalid JSON."));
        } else if let Some(index) = file_index(&name) {
            parts.push(Part { index, filename, content_type, bytes });
        }
    }
    Upload { payload, parts }
}

/// `n` for a part named `files[n]`.
fn file_index(name: &str) -> Option<u64> {
    name.strip_prefix("files[")?.strip_suffix(']')?.parse().ok()
}

/// A file to attach: its name and part, once the upload passed the checks.
pub(crate) struct Accepted {
    pub(crate) filename: String,
    pub(crate) part: Part,
}

/// Checks an upload's files against `payload`'s `attachments` and Discord's limits.
/// The refusal is boxed, as a `Response` is large for a `Result`'s error.
pub(crate) fn check(payload: &Value, parts: &[Part]) -> Result<Vec<Accepted>, Box<Response>> {
    if parts.len() > MAX_FILES {
        return Err(invalid_attachments(json!({ "_errors": [
            { "code": "BASE_TYPE_MAX_LENGTH", "message": format!("Must be {MAX_FILES} or fewer in length.") }
        ] })));
    }
    let total: usize = parts.iter().map(|part| part.bytes.len()).sum();
    if total > UPLOAD_LIMIT {
        return Err(Box::new(super::rest::error(413, 40005, "Request entity too large")));
    }
    let mut names: BTreeMap<u64, String> = BTreeMap::new();
    let described = payload.get("attachments").and_then(Value::as_array).cloned().unwrap_or_default();
    for (position, entry) in described.iter().enumerate() {
        let id = match entry.get("id") {
            Some(Value::Number(id)) => id.as_u64(),
            Some(Value::String(id)) => id.parse().ok(),
            _ => None,
        };
        let Some(id) = id.filter(|id| parts.iter().any(|part| part.index == *id)) else {
            return Err(invalid_attachments(json!({ position.to_string(): { "_errors": [
                { "code": "ATTACHMENT_NOT_FOUND", "message": "Attachment data not found" }
            ] } })));
        };
        if let Some(filename) = entry.get("filename").and_then(Value::as_str) {
            names.insert(id, filename.to_owned());
        }
    }
    Ok(parts
        .iter()
        .map(|part| {
            let filename = names.get(&part.index).cloned().or_else(|| part.filename.clone());
            Accepted { filename: filename.unwrap_or_else(|| "unknown".to_owned()), part: part.clone() }
        })
        .collect())
}

fn invalid_attachments(errors: Value) -> Box<Response> {
    let body = json!({ "code": 50035, "message": "Invalid Form Body", "errors": { "attachments": errors } });
    Box::new((StatusCode::BAD_REQUEST, axum::Json(body)).into_response())
}

impl State {
    /// Puts a file on the CDN under `channel` and returns its `Attachment` object.
    pub(crate) fn publish(
        &mut self,
        base_url: &str,
        channel: u64,
        filename: &str,
        content_type: Option<&str>,
        bytes: Bytes,
    ) -> (u64, Value) {
        let id = self.next_id();
        let signature = format!("{:016x}", id.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let path = format!("/attachments/{channel}/{id}/{}", link_name(filename));
        let issued = super::state::unix_seconds();
        let query = format!("ex={:x}&is={issued:x}&hm={signature}&", issued + 86_400);
        let url = format!("{base_url}{path}?{query}");
        let mut attachment = json!({
            "id": id.to_string(),
            "filename": filename,
            "size": bytes.len(),
            "url": url,
            "proxy_url": url.replacen("/attachments/", "/media/attachments/", 1),
        });
        if let Some(content_type) = content_type {
            attachment["content_type"] = content_type.into();
        }
        if let Some((width, height)) = image_size(&bytes) {
            attachment["width"] = width.into();
            attachment["height"] = height.into();
        }
        let content_type = content_type.map(str::to_owned);
        self.cdn.files.insert(path, CdnFile { bytes, content_type, signature });
        (id, attachment)
    }
}

/// A file name as Discord puts it in a link: spaces and anything but `[A-Za-z0-9._-]` become
/// `_`.
fn link_name(filename: &str) -> String {
    let name: String =
        filename.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect();
    if name.is_empty() { "unknown".to_owned() } else { name }
}

/// The pixel size of an image the fake can decode.
fn image_size(bytes: &[u8]) -> Option<(u32, u32)> {
    image::ImageReader::new(Cursor::new(bytes)).with_guessed_format().ok()?.into_dimensions().ok()
}

/// `GET /attachments/{channel}/{id}/{filename}` (and the same under `/media`): the file's
/// bytes, if the link is signed right and has not expired.
pub(crate) async fn serve(
    AxumState(shared): AxumState<Arc<Shared>>,
    Path((channel, id, filename)): Path<(String, String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let path = format!("/attachments/{channel}/{id}/{filename}");
    let signature = query.unwrap_or_default().split('&').find_map(|pair| pair.strip_prefix("hm=").map(str::to_owned));
    let response = {
        let mut state = lock(&shared.state);
        let cdn = &mut state.cdn;
        let file = cdn.files.get(&path).filter(|file| !cdn.expired && signature.as_ref() == Some(&file.signature));
        match (cdn.faults.pop_front(), file) {
            (Some(429), _) => {
                let mut response = (StatusCode::TOO_MANY_REQUESTS, "rate limited").into_response();
                response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("3"));
                response
            }
            (Some(status), _) => {
                (StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), "scripted").into_response()
            }
            (None, Some(file)) => {
                let content_type = file.content_type.clone().unwrap_or_else(|| "application/octet-stream".to_owned());
                // axum sets Content-Length from the full body.
                ([(header::CONTENT_TYPE, content_type)], Body::from(file.bytes.clone())).into_response()
            }
            (None, None) => (StatusCode::NOT_FOUND, "This content is no longer available.").into_response(),
        }
    };
    let authorization = headers.contains_key(header::AUTHORIZATION);
    lock(&shared.state).cdn.requests.push(CdnRequest { path, status: response.status().as_u16(), authorization });
    shared.notify();
    response
}

impl FakeDiscord {
    /// A `MESSAGE_CREATE` from `author` in `channel` (which must exist) carrying `files`,
    /// each served by the fake's CDN; returns the message id. See the [module docs](self).
    pub fn inject_message_with_files(
        &self,
        channel: u64,
        author: &DiscordUser,
        content: &str,
        files: Vec<DiscordFile>,
    ) -> u64 {
        self.inject_with(channel, author, content, None, files)
    }

    /// A DM from `author` carrying `files`; returns `(dm channel id, message id)`.
    pub fn dm_with_files(&self, author: &DiscordUser, content: &str, files: Vec<DiscordFile>) -> (u64, u64) {
        let channel = self.dm_channel(author.id);
        (channel, self.inject_message_with_files(channel, author, content, files))
    }

    /// Every CDN link handed out so far expires: requests for them are answered 404 ("This
    /// content is no longer available."), as after a link's day has passed.
    pub fn expire_attachment_links(&self) {
        lock(&self.shared.state).cdn.expired = true;
    }

    /// The next CDN request is answered with `status` instead of the file (429 with
    /// `Retry-After: 3`). Statuses queue, each used once.
    pub fn fail_next_download(&self, status: u16) {
        lock(&self.shared.state).cdn.faults.push_back(status);
    }

    /// Every request to the CDN so far, in order.
    pub fn cdn_requests(&self) -> Vec<CdnRequest> {
        lock(&self.shared.state).cdn.requests.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(index: u64, len: usize) -> Part {
        Part { index, filename: Some(format!("f{index}.bin")), content_type: None, bytes: vec![0; len].into() }
    }

    #[test]
    fn uploads_are_named_by_their_attachments_entry_and_limited_in_size_and_number() {
        let payload = json!({"attachments": [{"id": 1, "filename": "shown.png"}, {"id": "0"}]});
        let accepted = check(&payload, &[part(0, 1), part(1, 1)]).unwrap();
        let names: Vec<_> = accepted.iter().map(|file| file.filename.as_str()).collect();
        assert_eq!(names, ["f0.bin", "shown.png"]);
        assert_eq!(check(&json!({}), &[part(0, UPLOAD_LIMIT)]).map(|files| files.len()).ok(), Some(1));
        let too_big = check(&json!({}), &[part(0, UPLOAD_LIMIT), part(1, 1)]).err().unwrap();
        assert_eq!(too_big.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let parts: Vec<_> = (0..11).map(|index| part(index, 1)).collect();
        assert_eq!(check(&json!({}), &parts).err().unwrap().status(), StatusCode::BAD_REQUEST);
        let dangling = json!({"attachments": [{"id": 3, "filename": "x"}]});
        assert_eq!(check(&dangling, &[part(0, 1)]).err().unwrap().status(), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn links_are_named_like_discords() {
        assert_eq!(link_name("my cat (1).png"), "my_cat__1_.png");
        assert_eq!(file_index("files[12]"), Some(12));
        assert_eq!(file_index("file"), None);
    }
}

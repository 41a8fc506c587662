//! The web chat's files over HTTP, beside the WebSocket: a browser uploads a file, then
//! names it in `chat.send`; it downloads the files a conversation shows by their id.
//!
//! - `POST /webchat/upload?name=<file name>`: the body is the file's bytes, as they are
//!   (no multipart: one file a request needs no envelope, the browser sends a `File` as the
//!   body with its `Content-Length`, and there is no parser between the socket and the size
//!   check). Refused with 413 when `Content-Length` or the bytes read pass
//!   `media.max_mb` for the web chat (`media.channel_max_mb.webchat`), with 415 when the
//!   sniffed type is refused (`media.deny_types`). Stored in the media store; the answer is
//!   a [`FileInfo`]: `{ id, name, mimeType, size, width?, height? }`.
//! - `GET /webchat/media/<id>`: a stored file, with its sniffed type, `nosniff`, a CSP that
//!   lets it run nothing, and `Content-Disposition: attachment` unless it is a raster image
//!   a browser may show (PNG, JPEG, GIF, WebP). 404 for an id not (or no longer) stored,
//!   400 for one that is not 64 hex digits.
//!
//! Both need `Authorization: Bearer <gateway.auth_token>` when a token is set, as `/metrics`
//! does. An `<img src>` cannot send that header, so the page fetches files with it and shows
//! them from `blob:` URLs it made. Errors are JSON, `{ "error": { "code", "message" } }`,
//! with a message the page shows as it is.
//!
//! Neither route exists without media (or with the web chat disabled).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use ferry_channel::{Attachment, AttachmentKind};
use futures::StreamExt;
use serde_json::json;

use super::CHANNEL_NAME;
use crate::gateway::GatewayState;
use crate::media::{FileInfo, Media, MediaStoreError, dimensions, human_size, is_reference, sniff};

/// The longest file name kept, in characters; the rest is cut.
const MAX_NAME_CHARS: usize = 200;

/// What a downloaded file may do once a browser has it: nothing (no script, no style, no
/// frame, no form), in a sandbox of its own even if opened directly.
const DOWNLOAD_CSP: &str = "default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; sandbox";

/// Types a browser may show inline: raster images it decodes without running anything.
/// (SVG is an image that can carry script: downloaded, never shown.)
const INLINE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// A refused request, as the page shows it.
struct Refusal {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl Refusal {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into() }
    }

    fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "UNAUTHORIZED",
            "files need `Authorization: Bearer <gateway.auth_token>`; reload the page with ?token=…",
        )
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let body = axum::Json(json!({ "error": { "code": self.code, "message": self.message } }));
        let mut response = (self.status, body).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// `POST /webchat/upload`: see the module docs.
pub async fn upload(State(state): State<Arc<GatewayState>>, headers: HeaderMap, uri: Uri, body: Body) -> Response {
    match receive(&state, &headers, &uri, body).await {
        Ok(file) => axum::Json(file).into_response(),
        Err(refusal) => refusal.into_response(),
    }
}

async fn receive(state: &GatewayState, headers: &HeaderMap, uri: &Uri, body: Body) -> Result<FileInfo, Refusal> {
    if !state.presents_token(headers) {
        return Err(Refusal::unauthorized());
    }
    let media = state.media.clone().ok_or_else(not_found)?;
    let name = file_name(uri);
    let shown = name.as_deref().map_or_else(|| "The file".to_owned(), |name| format!("\"{name}\""));
    let limit = media.config().max_bytes(CHANNEL_NAME);
    let too_large = |size: u64| {
        Refusal::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "TOO_LARGE",
            format!("{shown} is {}, over the {} limit for files here.", human_size(size), human_size(limit)),
        )
    };
    let announced = headers.get(header::CONTENT_LENGTH).and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
    if let Some(size) = announced.filter(|size| *size > limit) {
        return Err(too_large(size));
    }
    let capacity = announced.unwrap_or(0).min(limit);
    let mut bytes = Vec::with_capacity(usize::try_from(capacity).unwrap_or(0));
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|error| {
            tracing::info!(%error, "a web chat upload broke off");
            Refusal::new(StatusCode::BAD_REQUEST, "BROKEN", "The upload broke off; please try again.")
        })?;
        let size = (bytes.len() + chunk.len()) as u64;
        if size > limit {
            return Err(too_large(size));
        }
        bytes.extend_from_slice(&chunk);
    }
    if bytes.is_empty() {
        return Err(Refusal::new(StatusCode::BAD_REQUEST, "EMPTY", format!("{shown} is empty.")));
    }
    let stored = tokio::task::spawn_blocking(move || keep(&media, &bytes, name)).await;
    stored.map_err(|_| store_trouble())?
}

/// Sniffs, checks the type and stores; blocking (hashing, writing).
fn keep(media: &Media, bytes: &[u8], name: Option<String>) -> Result<FileInfo, Refusal> {
    let sniffed = sniff(bytes, name.as_deref());
    if media.config().denies(&sniffed.mime_type) {
        tracing::info!(mime_type = %sniffed.mime_type, "refused a web chat upload by its type");
        let shown = name.as_deref().map_or_else(|| "The file".to_owned(), |name| format!("\"{name}\""));
        return Err(Refusal::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "REFUSED_TYPE",
            format!("{shown} is a kind of file not accepted here ({}).", sniffed.mime_type),
        ));
    }
    let (width, height) = match (sniffed.kind == AttachmentKind::Image).then(|| dimensions(bytes)).flatten() {
        Some((width, height)) => (Some(width), Some(height)),
        None => (None, None),
    };
    let stored = media.store().put(bytes).map_err(|error| {
        tracing::error!(%error, "cannot store a web chat upload; the page is told to try again");
        store_trouble()
    })?;
    Ok(FileInfo { id: stored.sha256, name, mime_type: sniffed.mime_type, size: stored.size_bytes, width, height })
}

/// The upload's `name` query parameter, made a plain file name: its last path component,
/// without control characters, at most [`MAX_NAME_CHARS`].
fn file_name(uri: &Uri) -> Option<String> {
    let query = uri.query()?;
    let (_, raw) = url::form_urlencoded::parse(query.as_bytes()).find(|(key, _)| key == "name")?;
    let last = raw.rsplit(['/', '\\']).next().unwrap_or_default();
    let clean: String = last.chars().filter(|c| !c.is_control()).take(MAX_NAME_CHARS).collect();
    let clean = clean.trim();
    (!clean.is_empty() && clean != "." && clean != "..").then(|| clean.to_owned())
}

/// `GET /webchat/media/{id}`: see the module docs.
pub async fn download(State(state): State<Arc<GatewayState>>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    match serve(&state, &headers, &id).await {
        Ok(response) => response,
        Err(refusal) => refusal.into_response(),
    }
}

async fn serve(state: &GatewayState, headers: &HeaderMap, id: &str) -> Result<Response, Refusal> {
    if !state.presents_token(headers) {
        return Err(Refusal::unauthorized());
    }
    let media = state.media.clone().ok_or_else(not_found)?;
    if !is_reference(id) {
        return Err(Refusal::new(StatusCode::BAD_REQUEST, "BAD_ID", "a file id is 64 lowercase hex digits"));
    }
    let id = id.to_owned();
    let read = tokio::task::spawn_blocking(move || media.store().read(&id)).await.map_err(|_| store_trouble())?;
    let bytes = match read {
        Ok(bytes) => bytes,
        Err(MediaStoreError::Missing { .. } | MediaStoreError::BadReference(_)) => return Err(not_found()),
        Err(error) => {
            tracing::error!(%error, "cannot read a stored file for the web chat");
            return Err(store_trouble());
        }
    };
    let sniffed = sniff(&bytes, None);
    let inline = INLINE_TYPES.contains(&sniffed.mime_type.as_str());
    let content_type =
        if sniffed.is_text { format!("{}; charset=utf-8", sniffed.mime_type) } else { sniffed.mime_type };
    let mut response = Response::new(Body::from(bytes));
    let headers = response.headers_mut();
    let header_value =
        |value: &str| HeaderValue::from_str(value).unwrap_or(HeaderValue::from_static("application/octet-stream"));
    headers.insert(header::CONTENT_TYPE, header_value(&content_type));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(DOWNLOAD_CSP));
    headers.insert(header::CONTENT_DISPOSITION, HeaderValue::from_static(if inline { "inline" } else { "attachment" }));
    // The bytes under an id never change; only whoever holds the token may keep them.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("private, max-age=86400, immutable"));
    Ok(response)
}

/// The attachments `chat.send` names, as the dispatcher takes them in: each must be stored
/// (uploaded, and not yet expired). The error is worded for the page.
pub fn attachments_of(media: &Media, named: &[(String, Option<String>)]) -> Result<Vec<Attachment>, String> {
    let mut attachments = Vec::with_capacity(named.len());
    for (index, (id, name)) in named.iter().enumerate() {
        let Ok(path) = media.store().path_of(id) else {
            return Err(format!("params.attachments.{index}.id: not a file id (64 lowercase hex digits)"));
        };
        let bytes = match media.store().read(id) {
            Ok(bytes) => bytes,
            Err(MediaStoreError::Missing { .. }) => {
                return Err(format!(
                    "params.attachments.{index}: no file {id} is stored (unknown, or expired); upload it again"
                ));
            }
            Err(error) => {
                tracing::error!(%error, "cannot read an uploaded file for chat.send");
                return Err("a file could not be read just now; send it again".to_owned());
            }
        };
        let name = name.as_deref().map(str::trim).filter(|name| !name.is_empty());
        let name: Option<String> =
            name.map(|name| name.chars().filter(|c| !c.is_control()).take(MAX_NAME_CHARS).collect());
        let sniffed = sniff(&bytes, name.as_deref());
        let dimensions = (sniffed.kind == AttachmentKind::Image).then(|| dimensions(&bytes)).flatten();
        attachments.push(Attachment {
            kind: sniffed.kind,
            reference: id.clone(),
            mime_type: Some(sniffed.mime_type),
            file_name: name,
            size_bytes: Some(bytes.len() as u64),
            path: Some(path),
            dimensions,
            uploaded: None,
        });
    }
    Ok(attachments)
}

fn not_found() -> Refusal {
    Refusal::new(StatusCode::NOT_FOUND, "NOT_FOUND", "no such file (files expire after media.ttl_days)")
}

fn store_trouble() -> Refusal {
    Refusal::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "UNAVAILABLE",
        "Files cannot be kept right now; try again in a moment.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_uploads_name_is_a_plain_file_name() {
        let name = |query: &str| file_name(&format!("/webchat/upload?{query}").parse::<Uri>().expect("uri"));
        assert_eq!(name("name=photo%20one.png").as_deref(), Some("photo one.png"));
        assert_eq!(name("name=..%2F..%2Fetc%2Fpasswd").as_deref(), Some("passwd"));
        assert_eq!(name("name=C%3A%5Cdocs%5Cr%C3%A9sum%C3%A9.pdf").as_deref(), Some("résumé.pdf"));
        assert_eq!(name("name=a%0Ab").as_deref(), Some("ab"), "no control characters");
        assert_eq!(name("name=..").as_deref(), None);
        assert_eq!(name("other=1").as_deref(), None);
        assert_eq!(name(&format!("name={}", "x".repeat(500))).map(|n| n.chars().count()), Some(MAX_NAME_CHARS));
    }
}

//! Files on the fake Slack, both ways, in Slack's wire formats.
//!
//! - **Users' files** (inbound): a test registers a file ([`FakeSlack::user_file`]) and shares
//!   it in a message ([`FakeSlack::file_share`], a `message` event with `subtype: file_share`
//!   and `files[]`). The file is served at its `url_private` (`/files-pri/T…-F…/name`) and
//!   `url_private_download` (`/files-pri/T…-F…/download/name`) only with
//!   `Authorization: Bearer <bot token>`; without it, or with another token, Slack answers
//!   **HTTP 200 with its HTML sign-in page**, and so does the fake.
//! - **The bot's files** (outbound), the external upload flow that replaced `files.upload`
//!   (which now answers `method_deprecated`): `files.getUploadURLExternal` (`filename`,
//!   `length`) hands out an `upload_url` on the fake and a file id; the bytes are POSTed there
//!   (raw or as a multipart form) and must be `length` long; `files.completeUploadExternal`
//!   (`files=[{id, title}]`, `channel_id`, `thread_ts`, `initial_comment`) shares the file in a
//!   message and answers `files: [{id, title, …, shares}]` as Slack does. `files.info` and
//!   `files.delete` work on uploaded and users' files.
//!
//! The two file routes go through the same scripted faults as Web API methods, under the
//! names [`FakeSlack::DOWNLOAD_ROUTE`] and [`FakeSlack::UPLOAD_ROUTE`], and are recorded as
//! [`Call`]s under those names (with the bearer token the request carried, if any).
//!
//! Simplifications: a file id that was handed out but never uploaded or completed (or whose
//! upload expired, [`FakeSlack::expire_pending_uploads`]) is `file_not_found` to `files.info`
//! and `files.completeUploadExternal`; a completed file is
//! shared at once (Slack shares asynchronously: [`FakeSlack::defer_file_shares`] imitates a
//! share that `files.info` shows only later).

use std::collections::HashMap;
use std::io;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State as AxumState};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::state::Fault;
use super::web_api::{Answer, ok, refuse};
use super::{BOT_USER_ID, Call, Dropped, FakeSlack, PostedMessage, Shared, SlackEvent, TEAM_ID, TEXT_LIMIT, lock};
use crate::telegram::params::Params;

/// What Slack shows a request for a private file that carries no valid token.
pub const LOGIN_PAGE: &str = "<!DOCTYPE html><html lang=\"en-US\"><head><title>Slack</title></head>\
    <body><form action=\"/signin\" method=\"post\"><h1>Sign in to Slack</h1></form></body></html>";

/// A file the bot uploaded and shared, as `files.completeUploadExternal` left it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UploadedFile {
    pub id: String,
    /// The `filename` given to `files.getUploadURLExternal`.
    pub name: String,
    /// The `title` given to `files.completeUploadExternal`, if any.
    pub title: Option<String>,
    /// The upload's `Content-Type` (of the raw body, or of the multipart file part).
    pub mimetype: Option<String>,
    pub bytes: Vec<u8>,
    /// Where it was shared; `None` for a file completed without a channel.
    pub channel: Option<String>,
    pub thread_ts: Option<String>,
    /// The `initial_comment`, shown as the share message's text.
    pub comment: Option<String>,
    /// The share message's `ts`.
    pub ts: Option<String>,
}

/// A user's file the fake serves, registered by a test or uploaded by the bot.
#[derive(Clone, Debug)]
struct Hosted {
    id: String,
    user: String,
    name: String,
    title: String,
    mimetype: String,
    bytes: Vec<u8>,
    dimensions: Option<(u32, u32)>,
    /// Answer requests for it with a redirect to this URL instead.
    redirect_to: Option<String>,
}

/// An upload between `files.getUploadURLExternal` and `files.completeUploadExternal`.
#[derive(Clone, Debug)]
struct Pending {
    file_id: String,
    filename: String,
    length: usize,
    /// The bytes and their content type, once POSTed to the upload URL.
    body: Option<(Vec<u8>, Option<String>)>,
}

/// The fake's files, kept in its [`State`](super::state::State).
#[derive(Debug, Default)]
pub(crate) struct Files {
    hosted: Vec<Hosted>,
    /// By upload id (the last segment of the `upload_url`).
    pending: HashMap<String, Pending>,
    uploaded: Vec<UploadedFile>,
    next_id: u64,
    /// `files.info` calls per file before its shares show; `None`: shown at once, also in
    /// `files.completeUploadExternal`'s answer.
    defer_shares: Option<u32>,
    info_calls: HashMap<String, u32>,
    /// Every download answers the sign-in page, as for an app without `files:read`.
    access_revoked: bool,
}

impl Files {
    fn next_id(&mut self, prefix: char) -> String {
        self.next_id += 1;
        format!("{prefix}0{:08}", self.next_id)
    }

    fn hosted(&self, id: &str) -> Option<&Hosted> {
        self.hosted.iter().find(|file| file.id == id)
    }
}

/// A name as it appears in a file URL's path.
fn path_name(name: &str) -> String {
    name.bytes()
        .map(|byte| match byte {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'_' => (byte as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

fn file_urls(base: &str, id: &str, name: &str) -> (String, String) {
    let name = path_name(name);
    (format!("{base}/files-pri/{TEAM_ID}-{id}/{name}"), format!("{base}/files-pri/{TEAM_ID}-{id}/download/{name}"))
}

/// The extension Slack reports as `filetype`.
fn filetype(name: &str) -> String {
    name.rsplit_once('.').map(|(_, ext)| ext.to_ascii_lowercase()).unwrap_or_else(|| "binary".to_owned())
}

/// A file object as Slack sends it in events and `files.*` answers.
fn file_object(base: &str, hosted: &Hosted, shares: Value) -> Value {
    let (url_private, url_private_download) = file_urls(base, &hosted.id, &hosted.name);
    let mut file = json!({
        "id": hosted.id, "created": 1_700_000_000, "timestamp": 1_700_000_000,
        "name": hosted.name, "title": hosted.title, "mimetype": hosted.mimetype,
        "filetype": filetype(&hosted.name), "pretty_type": filetype(&hosted.name).to_uppercase(),
        "user": hosted.user, "user_team": TEAM_ID, "editable": false, "size": hosted.bytes.len(),
        "mode": "hosted", "is_external": false, "external_type": "", "is_public": false,
        "public_url_shared": false, "display_as_bot": false, "username": "",
        "url_private": url_private, "url_private_download": url_private_download,
        "permalink": format!("https://ferry-test.slack.com/files/{}/{}/{}", hosted.user, hosted.id, path_name(&hosted.name)),
        "has_rich_preview": false, "file_access": "visible", "shares": shares,
    });
    if let Some((width, height)) = hosted.dimensions {
        file["original_w"] = width.into();
        file["original_h"] = height.into();
    }
    file
}

/// `shares` as Slack reports them: `public` (channels) or `private` (private channels,
/// DMs), channel id → the share messages.
fn shares_of(uploaded: Option<&UploadedFile>) -> Value {
    let Some(UploadedFile { channel: Some(channel), ts: Some(ts), thread_ts, .. }) = uploaded else { return json!({}) };
    let mut share = json!({
        "reply_users": [], "reply_users_count": 0, "reply_count": 0, "ts": ts,
        "channel_name": channel.to_lowercase(), "team_id": TEAM_ID, "share_user_id": BOT_USER_ID, "source": "UNKNOWN",
    });
    if let Some(thread_ts) = thread_ts {
        share["thread_ts"] = thread_ts.clone().into();
    }
    let visibility = if channel.starts_with('C') { "public" } else { "private" };
    json!({ visibility: { channel.clone(): [share] } })
}

// ---- Web API methods -----------------------------------------------------------------------

/// `files.getUploadURLExternal`: `filename` and `length` (a positive byte count) required.
pub(crate) fn get_upload_url(shared: &Shared, params: &Params) -> Answer {
    let Some(filename) = params.str("filename").filter(|name| !name.trim().is_empty()).map(str::to_owned) else {
        return refuse("invalid_arguments");
    };
    let Some(length) =
        params.int("length").filter(|length| *length > 0).and_then(|length| usize::try_from(length).ok())
    else {
        return refuse("invalid_arguments");
    };
    let mut state = lock(&shared.state);
    let file_id = state.files.next_id('F');
    let upload_id = format!("{file_id}-{}", state.next_ts().replace('.', ""));
    state.files.pending.insert(upload_id.clone(), Pending { file_id: file_id.clone(), filename, length, body: None });
    drop(state);
    ok(json!({"upload_url": format!("{}/upload/v1/{upload_id}", shared.base_url()), "file_id": file_id}))
}

/// `files.completeUploadExternal`: shares each uploaded file in `channel_id` (or the first
/// of `channels`), in `thread_ts`, with `initial_comment` as the message text.
pub(crate) fn complete_upload(shared: &Shared, params: &Params) -> Answer {
    let Some(Value::Array(files)) = params.json("files") else { return refuse("invalid_arguments") };
    let channel = params
        .str("channel_id")
        .or_else(|| params.str("channels").and_then(|list| list.split(',').next()))
        .filter(|channel| !channel.is_empty())
        .map(str::to_owned);
    if channel.as_ref().is_some_and(|channel| !channel.starts_with(['C', 'D', 'G'])) {
        return refuse("channel_not_found");
    }
    let comment = params.str("initial_comment").filter(|text| !text.is_empty()).map(str::to_owned);
    if comment.as_ref().is_some_and(|text| text.chars().count() > TEXT_LIMIT) {
        return refuse("msg_too_long");
    }
    let thread_ts = params.str("thread_ts").filter(|ts| !ts.is_empty()).map(str::to_owned);
    let mut state = lock(&shared.state);
    let mut done = Vec::new();
    for entry in &files {
        let (Some(id), title) = (entry["id"].as_str(), entry["title"].as_str()) else {
            return refuse("invalid_arguments");
        };
        let found = state.files.pending.iter().find(|(_, p)| p.file_id == id && p.body.is_some());
        let Some((upload_id, pending)) = found.map(|(key, pending)| (key.clone(), pending.clone())) else {
            return refuse("file_not_found");
        };
        done.push((upload_id, pending, title.map(str::to_owned)));
    }
    if done.is_empty() {
        return refuse("invalid_arguments");
    }
    let ts = channel.as_ref().map(|_| state.next_ts());
    let base = shared.base_url();
    let mut answered = Vec::new();
    for (upload_id, pending, title) in done {
        state.files.pending.remove(&upload_id);
        let (bytes, mimetype) = pending.body.unwrap_or_default();
        let uploaded = UploadedFile {
            id: pending.file_id.clone(),
            name: pending.filename.clone(),
            title: title.clone(),
            mimetype: mimetype.clone(),
            bytes: bytes.clone(),
            channel: channel.clone(),
            thread_ts: thread_ts.clone(),
            comment: comment.clone(),
            ts: ts.clone(),
        };
        let hosted = Hosted {
            id: pending.file_id.clone(),
            user: BOT_USER_ID.to_owned(),
            title: title.unwrap_or_else(|| pending.filename.clone()),
            name: pending.filename,
            mimetype: mimetype.unwrap_or_else(|| "application/octet-stream".to_owned()),
            bytes,
            dimensions: None,
            redirect_to: None,
        };
        let shares = if state.files.defer_shares.is_some() { json!({}) } else { shares_of(Some(&uploaded)) };
        answered.push(file_object(&base, &hosted, shares));
        state.files.hosted.push(hosted);
        state.files.uploaded.push(uploaded);
    }
    if let (Some(channel), Some(ts)) = (channel, ts) {
        state.messages.push(PostedMessage {
            channel,
            ts,
            thread_ts,
            text: comment.unwrap_or_default(),
            edits: 0,
            metadata: None,
            files: answered.iter().filter_map(|file| file["id"].as_str().map(str::to_owned)).collect(),
        });
    }
    drop(state);
    shared.bump();
    ok(json!({"files": answered}))
}

/// `files.info`: a user's or the bot's file, with its shares.
pub(crate) fn info(shared: &Shared, params: &Params) -> Answer {
    let Some(id) = params.str("file") else { return refuse("invalid_arguments") };
    let mut state = lock(&shared.state);
    let files = &mut state.files;
    let Some(hosted) = files.hosted(id).cloned() else { return refuse("file_not_found") };
    let calls = files.info_calls.entry(id.to_owned()).or_default();
    let seen = *calls;
    *calls += 1;
    let uploaded = files.uploaded.iter().find(|file| file.id == id);
    let shares = match files.defer_shares {
        Some(after) if seen < after => json!({}),
        _ => shares_of(uploaded),
    };
    let file = file_object(&shared.base_url(), &hosted, shares);
    ok(json!({"file": file, "comments": [], "response_metadata": {"next_cursor": ""}}))
}

/// `files.delete`: the file and the messages that share it.
pub(crate) fn delete(shared: &Shared, params: &Params) -> Answer {
    let Some(id) = params.str("file").map(str::to_owned) else { return refuse("invalid_arguments") };
    let mut state = lock(&shared.state);
    let before = state.files.hosted.len();
    state.files.hosted.retain(|file| file.id != id);
    if state.files.hosted.len() == before {
        return refuse("file_not_found");
    }
    state.files.uploaded.retain(|file| file.id != id);
    state.messages.retain(|message| !message.files.contains(&id));
    drop(state);
    shared.bump();
    ok(json!({}))
}

// ---- The file routes -------------------------------------------------------------------------

/// The bearer token of a request, if it carried one.
fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    value.strip_prefix("Bearer ").map(str::to_owned)
}

/// A scripted fault for a file route, as a response; `None` to answer normally.
fn fault_response(shared: &Shared, index: usize, fault: Option<Fault>) -> Option<Response> {
    let (status, retry_after) = match fault? {
        Fault::RateLimited(secs) => {
            lock(&shared.state).rate_limited += 1;
            (StatusCode::TOO_MANY_REQUESTS, Some(secs))
        }
        Fault::Status(status) => (StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), None),
        Fault::Error(_) => (StatusCode::NOT_FOUND, None),
        Fault::DropBeforeApply | Fault::ApplyThenDrop => {
            shared.finish_dropped(index, Dropped::BeforeApply);
            return Some(dropped());
        }
    };
    shared.finish(index, status.as_u16());
    let mut response = (status, status.canonical_reason().unwrap_or("error")).into_response();
    if let Some(secs) = retry_after {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    Some(response)
}

fn dropped() -> Response {
    let failed = futures::stream::once(async {
        Err::<Bytes, io::Error>(io::Error::new(io::ErrorKind::ConnectionAborted, "scripted dropped connection"))
    });
    Response::new(Body::from_stream(failed))
}

/// `GET /files-pri/{team}-{file}/{name}` and `…/download/{name}`.
pub(crate) async fn download(
    AxumState(shared): AxumState<Arc<Shared>>,
    Path((key, rest)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let token = bearer(&headers);
    let index = shared.record(Call {
        method: FakeSlack::DOWNLOAD_ROUTE.to_owned(),
        params: json!({"path": format!("/files-pri/{key}/{rest}"), "token": token}),
        at: Instant::now(),
        status: None,
        dropped: None,
    });
    let fault = lock(&shared.state).take_fault(FakeSlack::DOWNLOAD_ROUTE);
    if let Some(response) = fault_response(&shared, index, fault) {
        return response;
    }
    let id = key.strip_prefix(&format!("{TEAM_ID}-")).unwrap_or(&key);
    let (hosted, revoked) = {
        let state = lock(&shared.state);
        (state.files.hosted(id).cloned(), state.files.access_revoked)
    };
    let authorized = !revoked && token.as_deref() == Some(shared.bot_token.as_str());
    let response = match hosted {
        Some(Hosted { redirect_to: Some(to), .. }) => {
            let mut response = StatusCode::FOUND.into_response();
            if let Ok(location) = HeaderValue::from_str(&to) {
                response.headers_mut().insert(header::LOCATION, location);
            }
            response
        }
        _ if !authorized => ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], LOGIN_PAGE).into_response(),
        None => (StatusCode::NOT_FOUND, "file_not_found").into_response(),
        Some(hosted) => {
            let mut response = (StatusCode::OK, hosted.bytes).into_response();
            let headers = response.headers_mut();
            if let Ok(mimetype) = HeaderValue::from_str(&hosted.mimetype) {
                headers.insert(header::CONTENT_TYPE, mimetype);
            }
            if rest.starts_with("download/")
                && let Ok(disposition) =
                    HeaderValue::from_str(&format!("attachment; filename=\"{}\"", path_name(&hosted.name)))
            {
                headers.insert(header::CONTENT_DISPOSITION, disposition);
            }
            response
        }
    };
    shared.finish(index, response.status().as_u16());
    response
}

/// `POST /upload/v1/{upload_id}`: the file's bytes, raw or as a multipart form's file part.
pub(crate) async fn upload(
    AxumState(shared): AxumState<Arc<Shared>>,
    Path(upload_id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|value| value.to_str().ok()).map(str::to_owned);
    let index = shared.record(Call {
        method: FakeSlack::UPLOAD_ROUTE.to_owned(),
        params: json!({"upload_id": upload_id, "content_type": content_type, "bytes": body.len(), "token": bearer(&headers)}),
        at: Instant::now(),
        status: None,
        dropped: None,
    });
    let fault = lock(&shared.state).take_fault(FakeSlack::UPLOAD_ROUTE);
    if let Some(response) = fault_response(&shared, index, fault) {
        return response;
    }
    let (bytes, mimetype) = match content_type.as_deref() {
        Some(multipart) if multipart.starts_with("multipart/form-data") => match multipart_file(multipart, &body) {
            Some(part) => part,
            None => return finish(&shared, index, StatusCode::BAD_REQUEST, "no file part in the form".to_owned()),
        },
        other => (body.to_vec(), other.map(str::to_owned)),
    };
    let (status, text) = {
        let mut state = lock(&shared.state);
        match state.files.pending.get_mut(&upload_id) {
            None => (StatusCode::NOT_FOUND, "upload not found".to_owned()),
            Some(pending) if pending.length != bytes.len() => (
                StatusCode::BAD_REQUEST,
                format!("length mismatch: {} bytes announced, {} sent", pending.length, bytes.len()),
            ),
            Some(pending) => {
                let length = bytes.len();
                pending.body = Some((bytes, mimetype.filter(|m| !m.is_empty())));
                (StatusCode::OK, format!("OK - {length}"))
            }
        }
    };
    finish(&shared, index, status, text)
}

fn finish(shared: &Shared, index: usize, status: StatusCode, text: String) -> Response {
    shared.finish(index, status.as_u16());
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response()
}

/// The first part of a `multipart/form-data` body that carries a file (`filename=`), or else
/// the part named `file`: its bytes and content type.
fn multipart_file(content_type: &str, body: &[u8]) -> Option<(Vec<u8>, Option<String>)> {
    let boundary = content_type.split(';').find_map(|p| p.trim().strip_prefix("boundary="))?.trim_matches('"');
    let delimiter = format!("--{boundary}");
    let mut parts = Vec::new();
    let mut rest = body;
    while let Some(start) = find(rest, delimiter.as_bytes()) {
        rest = &rest[start + delimiter.len()..];
        if rest.starts_with(b"--") {
            break;
        }
        let end = find(rest, format!("\r\n{delimiter}").as_bytes()).unwrap_or(rest.len());
        parts.push(&rest[..end]);
        rest = &rest[end..];
    }
    let parts = parts.into_iter().filter_map(|part| {
        let part = part.strip_prefix(b"\r\n").unwrap_or(part);
        let split = find(part, b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&part[..split]).to_ascii_lowercase();
        Some((head, part[split + 4..].to_vec()))
    });
    let mut named_file = None;
    for (head, bytes) in parts {
        let content_type =
            head.lines().find_map(|line| line.strip_prefix("content-type:")).map(|v| v.trim().to_owned());
        if head.contains("filename=") {
            return Some((bytes, content_type));
        }
        if head.contains("name=\"file\"") {
            named_file = Some((bytes, content_type));
        }
    }
    named_file
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|window| window == needle)
}

// ---- The test API ----------------------------------------------------------------------------

impl FakeSlack {
    /// The route name users' file downloads are recorded and scripted under
    /// ([`FakeSlack::rate_limit_next`], [`FakeSlack::drop_next_before_apply`], …).
    pub const DOWNLOAD_ROUTE: &'static str = "files-pri";
    /// The route name uploads to an `upload_url` are recorded and scripted under.
    pub const UPLOAD_ROUTE: &'static str = "upload";

    /// Registers a file `user` uploaded and returns its file object, as a message's `files[]`
    /// carries it (`url_private`, `url_private_download`, `size`, `original_w`/`original_h`
    /// for `dimensions`). Share it with [`FakeSlack::file_share`].
    pub fn user_file(
        &self,
        user: &str,
        name: &str,
        mimetype: &str,
        bytes: Vec<u8>,
        dimensions: Option<(u32, u32)>,
    ) -> Value {
        let mut state = self.state();
        let id = state.files.next_id('F');
        let hosted = Hosted {
            id,
            user: user.to_owned(),
            name: name.to_owned(),
            title: name.to_owned(),
            mimetype: mimetype.to_owned(),
            bytes,
            dimensions,
            redirect_to: None,
        };
        let file = file_object(&self.url(), &hosted, json!({}));
        state.files.hosted.push(hosted);
        file
    }

    /// A `message` event with `subtype: file_share` from `user` in `channel` (of
    /// `channel_type`) carrying `files` (from [`FakeSlack::user_file`]) and `text` (may be
    /// empty), delivered over Socket Mode.
    pub fn file_share(
        &self,
        channel: &str,
        channel_type: &str,
        user: &str,
        text: &str,
        files: Vec<Value>,
    ) -> SlackEvent {
        let mut body = Self::message_body(channel, channel_type, user, text, None);
        body["subtype"] = "file_share".into();
        body["upload"] = false.into();
        body["display_as_bot"] = false.into();
        body["files"] = files.into();
        self.push(body)
    }

    /// Requests for this user's file are answered `302 Found` with `Location: to`.
    pub fn redirect_file(&self, file_id: &str, to: &str) {
        if let Some(file) = self.state().files.hosted.iter_mut().find(|file| file.id == file_id) {
            file.redirect_to = Some(to.to_owned());
        }
    }

    /// From now on every file download answers the HTML sign-in page, whatever the token, as
    /// Slack does for an app without the `files:read` scope.
    pub fn revoke_file_access(&self) {
        self.state().files.access_revoked = true;
    }

    /// From now on `files.completeUploadExternal` answers with empty `shares` (as Slack does
    /// while it shares asynchronously) and `files.info` shows a file's shares only from its
    /// `after_info_calls + 1`-th call on (`u32::MAX`: never).
    pub fn defer_file_shares(&self, after_info_calls: u32) {
        self.state().files.defer_shares = Some(after_info_calls);
    }

    /// Forgets every file uploaded but not yet completed, as Slack does once such an upload
    /// has waited too long: `files.completeUploadExternal` and `files.info` then answer
    /// `file_not_found` for it.
    pub fn expire_pending_uploads(&self) {
        self.state().files.pending.clear();
    }

    /// Files the bot uploaded and completed, in order (deleted ones removed).
    pub fn uploaded_files(&self) -> Vec<UploadedFile> {
        self.state().files.uploaded.clone()
    }

    /// Waits until the bot has completed `count` uploads and returns them all.
    pub async fn wait_for_uploads(&self, count: usize) -> Vec<UploadedFile> {
        self.wait_until(|slack| slack.state().files.uploaded.len() >= count).await;
        self.uploaded_files()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_multipart_form_yields_its_file_part() {
        let body = b"--XyZ\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nhello\r\n--XyZ\r\n\
            Content-Disposition: form-data; name=\"filename\"; filename=\"a.png\"\r\nContent-Type: image/png\r\n\r\n\
            \x89PNG\r\n\x00\x01\r\n--XyZ--\r\n";
        let (bytes, content_type) = multipart_file("multipart/form-data; boundary=XyZ", body).unwrap();
        assert_eq!(bytes, b"\x89PNG\r\n\x00\x01");
        assert_eq!(content_type.as_deref(), Some("image/png"));
    }

    #[test]
    fn names_are_escaped_in_file_urls() {
        assert_eq!(path_name("my report (1).pdf"), "my%20report%20%281%29.pdf");
    }
}

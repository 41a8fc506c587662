//! The REST calls the adapter makes, one HTTP request each.
//!
//! Requests are built by serenity (its [`Route`]s give the `/api/v10/...` paths, the bot
//! `Authorization` header and the proxy prefix that points tests at a fake) and sent with the
//! adapter's own reqwest client, so that a failure keeps its status, its rate-limit headers
//! and its JSON body for [`crate::error::channel_error`]. Serenity's own rate limiter is not
//! used: the core's outbound scheduler owns budgets and retries, as for every channel.

use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{CONTENT_LENGTH, CONTENT_TYPE};
use reqwest::multipart::{Form, Part};
use serde_json::Value;
use serenity::http::{LightMethod, Request, Route};
use serenity::model::id::{ChannelId, MessageId};

use crate::error::{Failure, redact};
use crate::upload::FileUpload;

/// The HTTP timeout of one REST call. Longer than any answer Discord gives in practice,
/// shorter than the reply pipeline's 15 s block-send stall detector plus a margin.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

/// The HTTP timeout of a create that uploads files: up to 10 MiB must go up first, which
/// takes longer than [`REQUEST_TIMEOUT`] on a slow link. A timed-out upload is transient and
/// its repeat carries the same nonce, so Discord does not show it twice.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(120);

/// Why a REST call failed.
#[derive(Debug, Clone)]
pub(crate) enum CallError {
    /// Discord answered with a non-success status.
    Status(Failure),
    /// No answer: connection refused or dropped, a timeout, an unreadable success body.
    Network(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Status(failure) => f.write_str(&failure.message()),
            CallError::Network(reason) => f.write_str(reason),
        }
    }
}

/// A bot's REST client. Cheap to clone (reqwest clients share their pool).
#[derive(Clone)]
pub(crate) struct Rest {
    client: reqwest::Client,
    /// `Bot <token>`, the `Authorization` header value.
    authorization: String,
    token: String,
    /// Where `https://discord.com` is rewritten to (a fake in tests); `None` in production.
    proxy: Option<String>,
}

impl Rest {
    pub(crate) fn new(token: &str, proxy: Option<String>) -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|error| format!("cannot build the HTTP client: {error}"))?;
        Ok(Self { client, authorization: format!("Bot {token}"), token: token.to_owned(), proxy })
    }

    /// `GET /users/@me`: who the token belongs to.
    pub(crate) async fn current_user(&self) -> Result<Value, CallError> {
        self.call(Route::UserMe, LightMethod::Get, None).await
    }

    /// `GET /channels/{id}`: a channel's type, guild and parent (for threads).
    pub(crate) async fn channel(&self, channel_id: ChannelId) -> Result<Value, CallError> {
        self.call(Route::Channel { channel_id }, LightMethod::Get, None).await
    }

    /// `GET /channels/{id}/messages?after={id}&limit={n}`: up to `limit` (at most 100)
    /// messages written after `after`, the oldest of them; Discord lists them newest first.
    pub(crate) async fn messages_after(
        &self,
        channel_id: ChannelId,
        after: MessageId,
        limit: usize,
    ) -> Result<Value, CallError> {
        let params = vec![("after", after.to_string()), ("limit", limit.to_string())];
        let request = Request::new(Route::ChannelMessages { channel_id }, LightMethod::Get)
            .params(Some(params))
            .build(&self.client, &self.authorization, self.proxy.as_deref())
            .map_err(|error| CallError::Network(redact(&error.to_string(), &self.token)))?;
        self.send(request).await
    }

    /// `POST /channels/{id}/messages`.
    pub(crate) async fn create_message(&self, channel_id: ChannelId, body: &Value) -> Result<Value, CallError> {
        self.call(Route::ChannelMessages { channel_id }, LightMethod::Post, Some(body)).await
    }

    /// `PATCH /channels/{id}/messages/{id}`.
    pub(crate) async fn edit_message(
        &self,
        channel_id: ChannelId,
        message_id: MessageId,
        body: &Value,
    ) -> Result<Value, CallError> {
        self.call(Route::ChannelMessage { channel_id, message_id }, LightMethod::Patch, Some(body)).await
    }

    /// `DELETE /channels/{id}/messages/{id}`.
    pub(crate) async fn delete_message(&self, channel_id: ChannelId, message_id: MessageId) -> Result<(), CallError> {
        self.call(Route::ChannelMessage { channel_id, message_id }, LightMethod::Delete, None).await.map(drop)
    }

    /// `POST /channels/{id}/typing`: "typing…" for about ten seconds.
    pub(crate) async fn typing(&self, channel_id: ChannelId) -> Result<(), CallError> {
        self.call(Route::ChannelTyping { channel_id }, LightMethod::Post, None).await.map(drop)
    }

    /// `POST /channels/{id}/messages` as `multipart/form-data`: `payload_json` (the same
    /// body a text create sends, plus its `attachments`) and one `files[n]` part per file,
    /// with the file's own MIME type (see `upload.rs`).
    pub(crate) async fn create_message_with_files(
        &self,
        channel_id: ChannelId,
        payload: &Value,
        files: Vec<FileUpload>,
    ) -> Result<Value, CallError> {
        let mut form = Form::new().text("payload_json", payload.to_string());
        for (index, file) in files.into_iter().enumerate() {
            let bytes = Bytes::from(file.bytes);
            let len = bytes.len() as u64;
            let part = Part::stream_with_length(bytes.clone(), len).file_name(file.file_name.clone());
            // The core's types are sniffed, so they parse; a part whose type does not is sent
            // without one, which Discord takes as bytes.
            let part = match part.mime_str(&file.mime_type) {
                Ok(part) => part,
                Err(_) => Part::stream_with_length(bytes, len).file_name(file.file_name),
            };
            form = form.part(format!("files[{index}]"), part);
        }
        // Serenity builds the URL and the headers; its request is rebuilt around the form
        // because it would add `Content-Length: 0` to a request without a JSON body.
        let unbuildable = |error: String| CallError::Network(redact(&error, &self.token));
        let built = Request::new(Route::ChannelMessages { channel_id }, LightMethod::Post)
            .build(&self.client, &self.authorization, self.proxy.as_deref())
            .map_err(|error| unbuildable(error.to_string()))?
            .build()
            .map_err(|error| unbuildable(error.to_string()))?;
        let mut headers = built.headers().clone();
        headers.remove(CONTENT_LENGTH);
        headers.remove(CONTENT_TYPE);
        let request = self.client.post(built.url().clone()).headers(headers).timeout(UPLOAD_TIMEOUT).multipart(form);
        self.send(request).await
    }

    async fn call(&self, route: Route<'_>, method: LightMethod, body: Option<&Value>) -> Result<Value, CallError> {
        let body = body.map(|body| body.to_string().into_bytes());
        let request = Request::new(route, method)
            .body(body)
            .build(&self.client, &self.authorization, self.proxy.as_deref())
            .map_err(|error| CallError::Network(redact(&error.to_string(), &self.token)))?;
        self.send(request).await
    }

    /// Sends a built request and reads the answer in full: the JSON body of a success, or the
    /// status, rate-limit headers and body of a failure.
    async fn send(&self, request: reqwest::RequestBuilder) -> Result<Value, CallError> {
        let response =
            request.send().await.map_err(|error| CallError::Network(redact(&error.to_string(), &self.token)))?;
        let status = response.status().as_u16();
        let header = |name: &str| {
            response.headers().get(name).and_then(|value| value.to_str().ok()).and_then(|value| value.parse().ok())
        };
        let retry_after_header = header("retry-after");
        let reset_after_header = header("x-ratelimit-reset-after");
        let text = response.text().await.map_err(|error| CallError::Network(error.to_string()))?;
        let body =
            if text.trim().is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::Null) };
        if (200..300).contains(&status) {
            Ok(body)
        } else {
            Err(CallError::Status(Failure { status, body, retry_after_header, reset_after_header }))
        }
    }
}

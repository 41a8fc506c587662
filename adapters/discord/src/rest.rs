//! The REST calls the adapter makes, one HTTP request each.
//!
//! Requests are built by serenity (its [`Route`]s give the `/api/v10/...` paths, the bot
//! `Authorization` header and the proxy prefix that points tests at a fake) and sent with the
//! adapter's own reqwest client, so that a failure keeps its status, its rate-limit headers
//! and its JSON body for [`crate::error::channel_error`]. Serenity's own rate limiter is not
//! used: the core's outbound scheduler owns budgets and retries, as for every channel.

use std::time::Duration;

use serde_json::Value;
use serenity::http::{LightMethod, Request, Route};
use serenity::model::id::{ChannelId, MessageId};

use crate::error::{Failure, redact};

/// The HTTP timeout of one REST call. Longer than any answer Discord gives in practice,
/// shorter than the reply pipeline's 15 s block-send stall detector plus a margin.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

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

    async fn call(&self, route: Route<'_>, method: LightMethod, body: Option<&Value>) -> Result<Value, CallError> {
        let body = body.map(|body| body.to_string().into_bytes());
        let request = Request::new(route, method)
            .body(body)
            .build(&self.client, &self.authorization, self.proxy.as_deref())
            .map_err(|error| CallError::Network(redact(&error.to_string(), &self.token)))?;
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

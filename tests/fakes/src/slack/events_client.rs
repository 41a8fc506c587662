//! A stand-in for Slack's Events API delivery: POSTs event payloads to an app's request URL,
//! signed the way Slack signs them, and can also sign wrongly or with a stale timestamp for
//! negative tests.
//!
//! Slack's signature: `X-Slack-Signature: v0=<hex HMAC-SHA256(signing_secret, "v0:{ts}:{body}")>`
//! with `X-Slack-Request-Timestamp: {ts}` (Unix seconds). Retries carry `X-Slack-Retry-Num`
//! and `X-Slack-Retry-Reason`.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

/// What the app answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventsResponse {
    pub status: u16,
    pub body: String,
}

/// Signs and POSTs Events API requests to one request URL (e.g. the gateway's
/// `http://127.0.0.1:PORT/slack/events`).
#[derive(Clone, Debug)]
pub struct SlackEventsClient {
    url: String,
    signing_secret: String,
    http: reqwest::Client,
}

impl SlackEventsClient {
    pub fn new(url: impl Into<String>, signing_secret: impl Into<String>) -> Self {
        Self { url: url.into(), signing_secret: signing_secret.into(), http: reqwest::Client::new() }
    }

    /// `v0=` + hex HMAC-SHA256 of `v0:{timestamp}:{body}` under `secret`.
    pub fn sign(secret: &str, timestamp: u64, body: &str) -> String {
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
        let tag = ring::hmac::sign(&key, format!("v0:{timestamp}:{body}").as_bytes());
        let hex: String = tag.as_ref().iter().map(|byte| format!("{byte:02x}")).collect();
        format!("v0={hex}")
    }

    /// Unix seconds now.
    pub fn now() -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
    }

    /// A first delivery, correctly signed now.
    pub async fn deliver(&self, payload: &Value) -> EventsResponse {
        let body = payload.to_string();
        let timestamp = Self::now();
        let signature = Self::sign(&self.signing_secret, timestamp, &body);
        self.post(body, timestamp, &signature, None).await
    }

    /// Slack's `retry`-th retry of the same payload (same `event_id`), correctly signed.
    pub async fn redeliver(&self, payload: &Value, retry: u32) -> EventsResponse {
        let body = payload.to_string();
        let timestamp = Self::now();
        let signature = Self::sign(&self.signing_secret, timestamp, &body);
        self.post(body, timestamp, &signature, Some(retry)).await
    }

    /// Signed correctly, but with a timestamp `age_secs` in the past (a replay).
    pub async fn deliver_stale(&self, payload: &Value, age_secs: u64) -> EventsResponse {
        let body = payload.to_string();
        let timestamp = Self::now().saturating_sub(age_secs);
        let signature = Self::sign(&self.signing_secret, timestamp, &body);
        self.post(body, timestamp, &signature, None).await
    }

    /// Signed with the wrong secret.
    pub async fn deliver_badly_signed(&self, payload: &Value) -> EventsResponse {
        let body = payload.to_string();
        let timestamp = Self::now();
        let signature = Self::sign("not-the-signing-secret", timestamp, &body);
        self.post(body, timestamp, &signature, None).await
    }

    /// The `url_verification` handshake Slack does when a request URL is saved.
    pub async fn url_verification(&self, challenge: &str) -> EventsResponse {
        self.deliver(&json!({"token": "legacy-verification-token", "challenge": challenge, "type": "url_verification"}))
            .await
    }

    async fn post(&self, body: String, timestamp: u64, signature: &str, retry: Option<u32>) -> EventsResponse {
        let mut request = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("x-slack-request-timestamp", timestamp.to_string())
            .header("x-slack-signature", signature)
            .body(body);
        if let Some(retry) = retry {
            request =
                request.header("x-slack-retry-num", retry.to_string()).header("x-slack-retry-reason", "http_timeout");
        }
        match request.send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                EventsResponse { status, body: response.text().await.unwrap_or_default() }
            }
            // No answer at all: reported as status 0 so a test can assert on it.
            Err(error) => EventsResponse { status: 0, body: error.to_string() },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_match_slacks_documented_example() {
        // From Slack's "Verifying requests from Slack" guide.
        let body = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        assert_eq!(
            SlackEventsClient::sign("8f742231b10e8888abcd99yyyzzz85a5", 1_531_420_618, body),
            "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
        );
    }
}

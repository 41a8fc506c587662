//! What the HTTP providers share: the client, and turning a refused request into a
//! classified [`ProviderError`].

use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::{Response, StatusCode};

use super::ProviderError;
use super::error::first_line;

/// How long establishing a connection may take. Streaming itself has no total timeout:
/// the agent loop's idle watchdog ends a stalled stream instead.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// A client for one provider. Connections are pooled across runs.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .user_agent(concat!("ferry/", env!("CARGO_PKG_VERSION")))
        .build()
        // Building fails only if the TLS backend cannot initialize, which is a broken
        // binary, not a runtime condition; the default client reports the same then.
        .unwrap_or_default()
}

/// Sends a request, mapping transport failures and non-success statuses to errors.
pub async fn send(request: reqwest::RequestBuilder) -> Result<Response, ProviderError> {
    let response = request.send().await.map_err(|error| ProviderError::Connect { message: describe(&error) })?;
    if response.status().is_success() {
        return Ok(response);
    }
    let status = response.status();
    let retry_after = retry_after(response.headers());
    let body = response.text().await.unwrap_or_default();
    Err(classify(status, retry_after, &body))
}

/// The error for a refused request, from its status and its body.
pub fn classify(status: StatusCode, retry_after: Option<Duration>, body: &str) -> ProviderError {
    let (code, message) = error_details(body);
    if looks_like_context_overflow(code.as_deref(), &message) {
        return ProviderError::ContextOverflow { message };
    }
    let status_code = status.as_u16();
    if status_code == 402 || looks_like_billing(code.as_deref(), &message) {
        return ProviderError::Billing { status: status_code, message };
    }
    match status {
        StatusCode::TOO_MANY_REQUESTS => ProviderError::RateLimited { retry_after, message },
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => ProviderError::Unauthorized { status: status_code },
        // 529 is Anthropic's "overloaded".
        _ if status.is_server_error() || status_code == 529 => {
            ProviderError::Server { status: status_code, retry_after, message }
        }
        _ => ProviderError::Rejected { status: status_code, message },
    }
}

/// The error `code` (or `type`) and `message` of an OpenAI (`{"error":{…}}`) or Anthropic
/// (`{"type":"error","error":{…}}`) error body; for anything else, the body's first line.
pub fn error_details(body: &str) -> (Option<String>, String) {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let error = parsed.as_ref().and_then(|value| value.get("error"));
    let code = error
        .and_then(|error| error.get("code").or_else(|| error.get("type")))
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned);
    let message = error
        .and_then(|error| error.get("message").and_then(serde_json::Value::as_str).or_else(|| error.as_str()))
        .map(str::to_owned)
        .unwrap_or_else(|| first_line(body, 300));
    (code, message)
}

/// Whether an error says the prompt is too long for the model, in the words of OpenAI,
/// Anthropic, Ollama, llama.cpp and vLLM.
pub fn looks_like_context_overflow(code: Option<&str>, message: &str) -> bool {
    if code == Some("context_length_exceeded") {
        return true;
    }
    let message = message.to_lowercase();
    [
        "maximum context length",
        "context length exceeded",
        "context_length_exceeded",
        "prompt is too long",
        "exceed context limit",
        "exceeds the available context size",
        "context window",
        "too many tokens",
    ]
    .iter()
    .any(|phrase| message.contains(phrase))
}

/// Whether an error says the account is out of credit or quota: OpenAI's 429
/// `insufficient_quota`, Anthropic's `billing_error`, and the words other vendors use.
pub fn looks_like_billing(code: Option<&str>, message: &str) -> bool {
    if matches!(code, Some("insufficient_quota" | "billing_error" | "billing_hard_limit_reached")) {
        return true;
    }
    let message = message.to_lowercase();
    ["exceeded your current quota", "credit balance is too low", "insufficient credits", "payment required"]
        .iter()
        .any(|phrase| message.contains(phrase))
}

/// `retry-after-ms` (OpenAI) or `retry-after` in seconds or as an HTTP date.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok()).map(str::trim);
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return Some(Duration::from_secs_f64(ms.max(0.0) / 1000.0));
    }
    let value = header("retry-after")?;
    if let Ok(seconds) = value.parse::<f64>() {
        return Some(Duration::from_secs_f64(seconds.max(0.0)));
    }
    let date = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let wait = date.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some(wait.to_std().unwrap_or_default())
}

/// A transport error without the URL (which may carry a key in its query).
fn describe(error: &reqwest::Error) -> String {
    let kind = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "connection failed"
    } else {
        "request failed"
    };
    let mut cause = std::error::Error::source(error);
    let mut detail = String::new();
    while let Some(inner) = cause {
        detail = inner.to_string();
        cause = inner.source();
    }
    if detail.is_empty() { kind.to_owned() } else { format!("{kind}: {detail}") }
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    #[test]
    fn statuses_map_to_kinds() {
        let rate = classify(
            StatusCode::TOO_MANY_REQUESTS,
            Some(Duration::from_secs(2)),
            r#"{"error":{"message":"slow down"}}"#,
        );
        assert_eq!(
            rate,
            ProviderError::RateLimited { retry_after: Some(Duration::from_secs(2)), message: "slow down".into() }
        );
        assert!(matches!(classify(StatusCode::BAD_GATEWAY, None, "oops"), ProviderError::Server { status: 502, .. }));
        assert!(matches!(
            classify(
                StatusCode::from_u16(529).unwrap(),
                None,
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
            ),
            ProviderError::Server { status: 529, .. }
        ));
        assert_eq!(
            classify(StatusCode::UNAUTHORIZED, None, "bad key sk-123"),
            ProviderError::Unauthorized { status: 401 }
        );
        assert_eq!(
            classify(StatusCode::BAD_REQUEST, None, r#"{"error":{"message":"tools[0] invalid"}}"#),
            ProviderError::Rejected { status: 400, message: "tools[0] invalid".into() }
        );
    }

    #[test]
    fn quota_and_credit_errors_are_billing_even_as_a_429() {
        let openai = r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","code":"insufficient_quota"}}"#;
        assert!(matches!(classify(StatusCode::TOO_MANY_REQUESTS, None, openai), ProviderError::Billing { .. }));
        let anthropic =
            r#"{"type":"error","error":{"type":"billing_error","message":"Your credit balance is too low"}}"#;
        assert!(matches!(
            classify(StatusCode::PAYMENT_REQUIRED, None, anthropic),
            ProviderError::Billing { status: 402, .. }
        ));
    }

    #[test]
    fn context_overflow_is_recognised_across_vendors() {
        let openai = r#"{"error":{"message":"This model's maximum context length is 128000 tokens.","code":"context_length_exceeded"}}"#;
        let anthropic = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#;
        let llama = r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}"#;
        for body in [openai, anthropic, llama] {
            assert!(
                matches!(classify(StatusCode::BAD_REQUEST, None, body), ProviderError::ContextOverflow { .. }),
                "{body}"
            );
        }
    }

    #[test]
    fn retry_after_reads_seconds_milliseconds_and_dates() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", HeaderValue::from_static("1.5"));
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(1500)));
        headers.insert("retry-after-ms", HeaderValue::from_static("250"));
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(250)));
        let mut dated = HeaderMap::new();
        dated.insert("retry-after", HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"));
        assert_eq!(retry_after(&dated), Some(Duration::ZERO));
        assert_eq!(retry_after(&HeaderMap::new()), None);
    }
}

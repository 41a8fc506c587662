//! Drives the fake model servers with a plain HTTP client and checks the bytes they send.

mod anthropic;
mod embeddings;
mod images;
mod keys;
mod openai;
mod responder;
mod sse_client;
mod thinking;
mod transcription;

use std::future::Future;
use std::time::Duration;

/// Generous bound for things that should happen at once, so a bug fails instead of hanging.
pub async fn soon<T>(future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), future).await.expect("timed out")
}

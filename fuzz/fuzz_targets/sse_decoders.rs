//! A model's streamed reply: the SSE parser (`src/agent/providers/sse.rs`) and the OpenAI
//! and Anthropic decoders on top of it (`openai.rs`, `anthropic.rs`).
//!
//! The first byte of the input chooses how the rest, the HTTP body, is cut into network
//! chunks. Asserts: never panics; a body that is valid UTF-8 parses into the same events
//! however it is cut; each decoder's stream ends at its first error, has at most one `Stop`
//! and nothing after it, and only continues or ends tool calls it started; an Anthropic reply
//! that ends without an error ends with `Stop`.
#![no_main]

use std::collections::BTreeSet;

use ferry::agent::providers::anthropic::EventDecoder;
use ferry::agent::providers::openai::ChunkDecoder;
use ferry::agent::providers::{ModelEvent, ProviderError, SseEvent, StreamDecoder, decode_stream, sse_events};
use futures::StreamExt;
use futures::executor::block_on;
use libfuzzer_sys::fuzz_target;

type Chunk = Result<Vec<u8>, String>;

fn parse(chunks: Vec<Chunk>) -> Vec<Result<SseEvent, ProviderError>> {
    block_on(sse_events(futures::stream::iter(chunks)).collect())
}

/// `body` cut into chunks whose sizes cycle through ones derived from `seed` (1 to 16 bytes,
/// cutting UTF-8 characters and CRLF pairs in two).
fn chunked(body: &[u8], seed: u8) -> Vec<Chunk> {
    let sizes = [1 + (seed & 0x0F) as usize, 1 + (seed >> 4) as usize, 1 + (seed % 3) as usize];
    let mut chunks = Vec::new();
    let mut rest = body;
    for size in sizes.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (chunk, tail) = rest.split_at((*size).min(rest.len()));
        chunks.push(Ok(chunk.to_vec()));
        rest = tail;
    }
    chunks
}

fn decode(
    events: &[Result<SseEvent, ProviderError>],
    decoder: impl StreamDecoder,
) -> Vec<Result<ModelEvent, ProviderError>> {
    block_on(decode_stream(futures::stream::iter(events.to_vec()), decoder).collect())
}

/// The invariants every decoded stream keeps; `must_stop`: an error-free stream ends in `Stop`.
fn check(decoded: &[Result<ModelEvent, ProviderError>], must_stop: bool) {
    if let Some(error) = decoded.iter().position(Result::is_err) {
        assert_eq!(error, decoded.len() - 1, "the stream went on after an error: {decoded:?}");
    }
    let events: Vec<&ModelEvent> = decoded.iter().filter_map(|event| event.as_ref().ok()).collect();
    let stops = events.iter().filter(|event| matches!(event, ModelEvent::Stop(_))).count();
    assert!(stops <= 1, "{stops} stops: {decoded:?}");
    if let Some(stop) = events.iter().position(|event| matches!(event, ModelEvent::Stop(_))) {
        assert_eq!(stop, events.len() - 1, "events after the stop: {decoded:?}");
    }
    let mut started = BTreeSet::new();
    for event in &events {
        match event {
            ModelEvent::ToolCallStart { index, .. } => {
                started.insert(*index);
            }
            ModelEvent::ToolCallDelta { index, .. } | ModelEvent::ToolCallEnd { index } => {
                assert!(started.contains(index), "call {index} was never started: {decoded:?}");
            }
            _ => {}
        }
    }
    if must_stop && decoded.iter().all(Result::is_ok) {
        assert!(matches!(events.last(), Some(ModelEvent::Stop(_))), "no stop: {decoded:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&seed, body)) = data.split_first() else { return };
    let whole = parse(vec![Ok(body.to_vec())]);
    let pieces = parse(chunked(body, seed));
    if std::str::from_utf8(body).is_ok() {
        assert_eq!(whole, pieces, "the events depend on how the body was cut");
    }
    check(&decode(&whole, ChunkDecoder::default()), false);
    check(&decode(&whole, EventDecoder::default()), true);
});

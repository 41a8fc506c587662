//! Agent-loop benchmarks (issue 3): SSE parsing throughput on a 1 MB model stream, and the
//! loop's own overhead per turn with an in-process provider that answers instantly.
//!
//! Run with `cargo bench --bench agent`; results go in BENCHMARKS.md.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use futures::StreamExt;
use serde_json::json;

use ferry::agent::providers::openai::ChunkDecoder;
use ferry::agent::providers::{
    ModelEvent, ModelProvider, ModelRequest, ModelStream, ProviderError, ResolvedModel, RetryPolicy, StopReason,
    decode_stream, sse_events,
};
use ferry::agent::tools::{RecentSessions, ToolContext, ToolError, ToolOutput, ToolRegistry, TypedTool};
use ferry::agent::{AgentRunner, EventBus, RunRequest, RunSettings, RunnerParts};
use ferry::channels::ChannelRegistry;
use ferry::types::conversation::{ChatMessage, Usage};

/// An OpenAI-compatible stream of about `target` bytes: realistic chunks of a few words
/// each, the finish chunk, the usage chunk and `[DONE]`.
fn openai_stream(target: usize) -> Vec<u8> {
    let mut body = String::new();
    let words = ["The ", "quick ", "brown ", "fox ", "jumps ", "over ", "the ", "lazy ", "dog. ", "Ünïcödé ", "✓ "];
    let mut i = 0;
    while body.len() < target {
        let chunk = json!({
            "id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": "gpt-bench",
            "choices": [{ "index": 0, "delta": { "content": words[i % words.len()] }, "logprobs": null, "finish_reason": null }],
        });
        body.push_str(&format!("data: {chunk}\n\n"));
        i += 1;
    }
    body.push_str(
        "data: {\"id\":\"chatcmpl-bench\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    );
    body.push_str(
        "data: {\"id\":\"chatcmpl-bench\",\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\n",
    );
    body.push_str("data: [DONE]\n\n");
    body.into_bytes()
}

fn sse_parsing(c: &mut Criterion) {
    let stream = openai_stream(1 << 20);
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    let mut group = c.benchmark_group("sse");
    group.throughput(Throughput::Bytes(stream.len() as u64));
    group.bench_function("openai_1mb_stream", |b| {
        b.to_async(&runtime).iter_batched(
            // Network reads arrive in pieces; 16 KiB is a typical read size.
            || stream.chunks(16 * 1024).map(|piece| Ok::<_, String>(piece.to_vec())).collect::<Vec<_>>(),
            |pieces| async move {
                let mut events = decode_stream(sse_events(futures::stream::iter(pieces)), ChunkDecoder::default());
                let mut deltas = 0usize;
                while let Some(event) = events.next().await {
                    if let Ok(ModelEvent::TextDelta(_)) = event {
                        deltas += 1;
                    }
                }
                deltas
            },
            BatchSize::LargeInput,
        )
    });
    group.bench_function("sse_framing_only_1mb", |b| {
        b.to_async(&runtime).iter_batched(
            || stream.chunks(16 * 1024).map(|piece| Ok::<_, String>(piece.to_vec())).collect::<Vec<_>>(),
            |pieces| async move { sse_events(futures::stream::iter(pieces)).count().await },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

/// Answers every request at once: with one short text reply, or — when `use_tool` is set
/// and the tool has not answered yet — with a call of the no-op tool first.
struct InstantProvider {
    use_tool: bool,
    /// The reply's text deltas; one short sentence when empty.
    long_reply: Vec<String>,
}

#[async_trait]
impl ModelProvider for InstantProvider {
    fn name(&self) -> &str {
        "instant"
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ProviderError> {
        let tool_answered = matches!(request.messages.last(), Some(ChatMessage::ToolResult { .. }));
        let events = if self.use_tool && !tool_answered {
            vec![
                Ok(ModelEvent::ToolCallStart { index: 0, id: "call_1".into(), name: NoopTool::NAME.into() }),
                Ok(ModelEvent::ToolCallDelta { index: 0, arguments: "{}".into() }),
                Ok(ModelEvent::Stop(StopReason::ToolUse)),
            ]
        } else if !self.long_reply.is_empty() {
            let deltas = self.long_reply.iter().map(|delta| Ok(ModelEvent::TextDelta(delta.clone())));
            deltas.chain([Ok(ModelEvent::Stop(StopReason::EndTurn))]).collect()
        } else {
            vec![
                Ok(ModelEvent::TextDelta("Sure, here you go.".to_owned())),
                Ok(ModelEvent::Usage(Usage { input_tokens: 10, output_tokens: 5 })),
                Ok(ModelEvent::Stop(StopReason::EndTurn)),
            ]
        };
        Ok(futures::stream::iter(events).boxed())
    }
}

/// A tool that does nothing, so the tool round measures the loop, not the tool.
struct NoopTool;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

#[async_trait]
impl TypedTool for NoopTool {
    type Args = NoArgs;
    const NAME: &'static str = "noop";
    const DESCRIPTION: &'static str = "does nothing";

    async fn run(&self, _args: NoArgs, _context: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok("done".into())
    }
}

/// A 200,000-character reply in deltas of 20 characters, as a fast model streams it.
fn long_reply() -> Vec<String> {
    let sentence = "The quick brown fox jumps over the lazy dog. ";
    let text: String = sentence.chars().cycle().take(200_000).collect();
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(20).map(|piece| piece.iter().collect()).collect()
}

fn runner(use_tool: bool, long_reply: Vec<String>, workspace: &std::path::Path) -> AgentRunner {
    let mut tools = ToolRegistry::with_builtins();
    tools.register(NoopTool);
    AgentRunner::new(RunnerParts {
        model: ResolvedModel {
            provider: Arc::new(InstantProvider { use_tool, long_reply }),
            model: "instant".into(),
            context_window: None,
            vision: false,
            is_fallback_echo: false,
        }
        .into(),
        tools,
        bus: EventBus::new(),
        settings: RunSettings {
            timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
            max_tool_rounds: 20,
            max_reply_chars: 250_000,
            retry: RetryPolicy::default(),
            retry_after_output: RetryPolicy::after_output(Duration::from_secs(10)),
            compaction_reserve_tokens: 20_000,
            thinking: Default::default(),
        },
        workspace: workspace.to_owned(),
        channels: ChannelRegistry::new(),
        sessions: Arc::new(RecentSessions::default()),
        hooks: Default::default(),
        media: None,
        memory: None,
    })
}

fn loop_overhead(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let workspace = tempfile::tempdir().expect("workspace");
    std::fs::write(workspace.path().join("AGENTS.md"), "Be helpful and brief.\n".repeat(50)).expect("AGENTS.md");
    for (name, use_tool) in [("agent_turn_instant_provider", false), ("agent_turn_with_one_tool_round", true)] {
        let runner = runner(use_tool, Vec::new(), workspace.path());
        c.bench_function(name, |b| {
            b.to_async(&runtime).iter(|| {
                let runner = runner.clone();
                async move { runner.run(RunRequest::new("agent:main:bench", "hello"), None).await }
            })
        });
    }
}

/// A long reply through the run: every delta is an event for the run's listeners, so what an
/// event carries decides whether a reply costs O(n) or O(n²) in its length.
fn long_reply_run(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let workspace = tempfile::tempdir().expect("workspace");
    let runner = runner(false, long_reply(), workspace.path());
    let mut group = c.benchmark_group("long_reply");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(200_000));
    group.bench_function("agent_turn_200k_chars_20_char_deltas", |b| {
        b.to_async(&runtime).iter(|| {
            let runner = runner.clone();
            async move { runner.run(RunRequest::new("agent:main:bench", "hello"), None).await }
        })
    });
    group.finish();
}

criterion_group!(benches, sse_parsing, loop_overhead, long_reply_run);
criterion_main!(benches);

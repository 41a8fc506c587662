//! The agent loop end to end: the real OpenAI-compatible and Anthropic providers streaming
//! from the local fake model servers, through tools, retries, timeouts and cancellation.
//! Every test also checks the run's events end with exactly one terminal lifecycle event.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry::agent::providers::anthropic::AnthropicProvider;
use ferry::agent::providers::openai::OpenAiProvider;
use ferry::agent::providers::{
    ModelEvent, ModelProvider, ModelRequest, ModelStream, ProviderError, ResolvedModel, RetryPolicy, StopReason,
};
use ferry::agent::tools::{RecentSessions, ToolLists, ToolPolicy, ToolProfile, ToolRegistry};
use ferry::agent::{
    AbortReason, AgentEvent, AgentRunner, AgentStream, AssistantEvent, ChatMessage, EventBus, LifecycleEvent,
    RunOutcome, RunRequest, RunSettings, RunStatus, RunnerParts, SteerInbox, ToolEvent,
};
use ferry::channels::ChannelRegistry;
use ferry::config::Secret;
use ferry::hooks::{AfterToolCall, AgentEnd, AgentStartChange, BeforeAgentStart, HookResult, Hooks, Plugin};
use ferry::models::{FailoverReason, ThinkingLevel};
use ferry_fakes::{FakeAnthropic, FakeOpenAi, HttpError, Reply, ToolCall, Turn};
use futures::StreamExt;

#[path = "agent_loop/tool_images.rs"]
mod tool_images;
#[path = "agent_loop/tool_sources.rs"]
mod tool_sources;

/// Generous limits, so only the behaviour under test ends a run.
fn settings() -> RunSettings {
    RunSettings {
        timeout: Duration::from_secs(60),
        idle_timeout: Duration::from_secs(30),
        max_tool_rounds: 5,
        max_reply_chars: 200_000,
        retry: RetryPolicy { max_retries: 1, base_delay: Duration::from_millis(50), max_delay: Duration::from_secs(5) },
        retry_after_output: RetryPolicy::after_output(Duration::from_millis(50)),
        compaction_reserve_tokens: 20_000,
        thinking: Default::default(),
    }
}

fn runner(provider: Arc<dyn ModelProvider>, settings: RunSettings) -> (AgentRunner, tempfile::TempDir) {
    hooked_runner(provider, settings, Hooks::default())
}

fn hooked_runner(
    provider: Arc<dyn ModelProvider>,
    settings: RunSettings,
    hooks: Hooks,
) -> (AgentRunner, tempfile::TempDir) {
    runner_with_tools(provider, settings, hooks, ToolRegistry::with_builtins())
}

/// A runner whose model is `provider`, with `tools`, in a fresh workspace.
fn runner_with_tools(
    provider: Arc<dyn ModelProvider>,
    settings: RunSettings,
    hooks: Hooks,
    tools: ToolRegistry,
) -> (AgentRunner, tempfile::TempDir) {
    let workspace = tempfile::tempdir().expect("workspace");
    let runner = AgentRunner::new(RunnerParts {
        model: ResolvedModel {
            provider,
            model: "test-model".into(),
            context_window: None,
            vision: false,
            is_fallback_echo: false,
        }
        .into(),
        tools,
        bus: EventBus::new(),
        settings,
        workspace: workspace.path().to_owned(),
        channels: ChannelRegistry::new(),
        sessions: Arc::new(RecentSessions::default()),
        hooks,
        media: None,
        memory: None,
    });
    (runner, workspace)
}

fn openai(fake: &FakeOpenAi) -> Arc<dyn ModelProvider> {
    Arc::new(OpenAiProvider::new("fake-openai", &fake.url(), Some(Secret::new("sk-test"))))
}

fn anthropic(fake: &FakeAnthropic) -> Arc<dyn ModelProvider> {
    Arc::new(AnthropicProvider::new("fake-anthropic", &fake.url(), Some(Secret::new("ant-test"))))
}

/// Runs to the end and returns the outcome with every event, checking the event contract.
async fn run(runner: &AgentRunner, request: RunRequest) -> (RunOutcome, Vec<AgentEvent>) {
    let mut handle = runner.start(request);
    let mut events = Vec::new();
    while let Some(event) = handle.events.recv().await {
        events.push(event);
    }
    let outcome = handle.outcome().await.expect("run task");
    assert_event_contract(&events);
    (outcome, events)
}

fn assert_event_contract(events: &[AgentEvent]) {
    assert!(matches!(events.first().map(|e| &e.stream), Some(AgentStream::Lifecycle(LifecycleEvent::Start { .. }))));
    let terminal = events
        .iter()
        .filter(|e| matches!(&e.stream, AgentStream::Lifecycle(lifecycle) if lifecycle.is_terminal()))
        .count();
    assert_eq!(terminal, 1, "exactly one terminal lifecycle event: {events:#?}");
    assert!(
        matches!(&events.last().unwrap().stream, AgentStream::Lifecycle(l) if l.is_terminal()),
        "terminal event is last"
    );
    for pair in events.windows(2) {
        assert!(pair[1].seq > pair[0].seq, "seq must strictly increase");
    }
}

/// Each text delta with the text of its message so far, kept as a listener keeps it: events
/// carry only the new text; a message that ends or restarts begins anew.
fn deltas(events: &[AgentEvent]) -> Vec<(String, String)> {
    let (mut so_far, mut ended, mut deltas) = (String::new(), false, Vec::new());
    for event in events {
        match &event.stream {
            AgentStream::Assistant(AssistantEvent::Delta { delta }) => {
                if std::mem::take(&mut ended) {
                    so_far.clear();
                }
                so_far.push_str(delta);
                deltas.push((delta.clone(), so_far.clone()));
            }
            AgentStream::Assistant(AssistantEvent::MessageEnd { .. }) => ended = true,
            AgentStream::Assistant(AssistantEvent::Restart { .. }) => so_far.clear(),
            _ => {}
        }
    }
    deltas
}

fn terminal(events: &[AgentEvent]) -> &LifecycleEvent {
    match &events.last().expect("events").stream {
        AgentStream::Lifecycle(lifecycle) => lifecycle,
        other => panic!("last event is not lifecycle: {other:?}"),
    }
}

#[tokio::test]
async fn openai_streams_a_text_reply_as_ordered_deltas() {
    let fake = FakeOpenAi::start().await.unwrap().with_api_key("sk-test");
    fake.push(Reply::text(["Hel", "lo, ", "world", "!"]).with_usage(12, 4));
    let (runner, _workspace) = runner(openai(&fake), settings());

    let (outcome, events) = run(&runner, RunRequest::new("agent:main:main", "hi")).await;
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(
        deltas(&events),
        [("Hel", "Hel"), ("lo, ", "Hello, "), ("world", "Hello, world"), ("!", "Hello, world!")]
            .map(|(d, t)| (d.to_owned(), t.to_owned()))
    );
    assert_eq!(outcome.payloads.len(), 1);
    assert_eq!(outcome.payloads[0].text, "Hello, world!");
    assert_eq!((outcome.usage.input_tokens, outcome.usage.output_tokens), (12, 4));
    let LifecycleEvent::End { aborted: false, model: Some(answered), .. } = terminal(&events) else {
        panic!("the end names who answered: {:?}", terminal(&events))
    };
    assert_eq!(answered.profile, "default");
    let AgentStream::Lifecycle(LifecycleEvent::Start { model: Some(first), .. }) = &events[0].stream else {
        panic!("the start names who is asked: {:?}", events[0])
    };
    assert_eq!(first, answered);
    let request = &fake.requests()[0];
    assert_eq!(request.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(request.body["messages"][1], serde_json::json!({"role": "user", "content": "hi"}));
    assert_eq!(request.body["model"], "test-model");
    assert_eq!(outcome.transcript, [ChatMessage::user("hi"), ChatMessage::assistant("Hello, world!", vec![])]);
}

#[tokio::test]
async fn anthropic_streams_a_text_reply_with_thinking() {
    let fake = FakeAnthropic::start().await.unwrap().with_api_key("ant-test");
    fake.push(Reply::text(["Bonjour", " à ", "vous"]).with_thinking(["Let me greet."]).with_usage(9, 3));
    let (runner, _workspace) = runner(anthropic(&fake), settings());

    let (outcome, events) = run(&runner, RunRequest::new("k", "salut")).await;
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(outcome.payloads[0].text, "Bonjour à vous");
    assert_eq!(deltas(&events).len(), 3);
    assert!(events.iter().any(|e| matches!(&e.stream, AgentStream::Assistant(AssistantEvent::Reasoning { .. }))));
    assert_eq!((outcome.usage.input_tokens, outcome.usage.output_tokens), (9, 3));
    let request = &fake.requests()[0];
    assert_eq!(request.header("x-api-key"), Some("ant-test"));
    assert!(request.header("anthropic-version").is_some());
}

async fn two_round_tool_call(provider: Arc<dyn ModelProvider>, requests: impl Fn() -> Vec<serde_json::Value>) {
    let (runner, _workspace) = runner(provider, settings());
    let (outcome, events) = run(&runner, RunRequest::new("k", "what time is it?")).await;
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(outcome.payloads.last().unwrap().text, "It is noon.");

    let tool_events: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.stream {
            AgentStream::Tool(tool) => Some(tool.clone()),
            _ => None,
        })
        .collect();
    assert!(
        matches!(&tool_events[0], ToolEvent::Start { name, args, .. } if name == "current_time" && args.is_object())
    );
    assert!(matches!(&tool_events[1], ToolEvent::Result { is_error: false, result, .. } if result.contains("utc")));
    assert_eq!(tool_events.len(), 2);

    let bodies = requests();
    assert_eq!(bodies.len(), 2, "one request per round");
    let second = bodies[1].to_string();
    assert!(second.contains("call_time") && second.contains("utc"), "the tool result goes back to the model: {second}");
    assert!(matches!(&outcome.transcript[2], ChatMessage::ToolResult { is_error: false, .. }));
}

#[tokio::test]
async fn openai_runs_a_two_round_tool_call_with_split_arguments() {
    let fake = FakeOpenAi::start().await.unwrap();
    fake.push(Turn::tool_calls([ToolCall::new("call_time", "current_time", "{ }").split_at([1, 2])]));
    fake.push(Turn::text(["It is ", "noon."]));
    two_round_tool_call(openai(&fake), || fake.requests().into_iter().map(|r| r.body).collect()).await;
    let tools = &fake.requests()[0].body["tools"];
    assert!(tools.as_array().unwrap().iter().any(|t| t["function"]["name"] == "message"));
}

#[tokio::test]
async fn anthropic_runs_a_two_round_tool_call_with_split_arguments() {
    let fake = FakeAnthropic::start().await.unwrap();
    fake.push(
        Reply::tool_calls([ToolCall::new("call_time", "current_time", "{}").split_at([1])]).with_text(["Checking."]),
    );
    fake.push(Turn::text(["It is ", "noon."]));
    two_round_tool_call(anthropic(&fake), || fake.requests().into_iter().map(|r| r.body).collect()).await;
}

#[tokio::test]
async fn parallel_tool_calls_are_answered_in_order_and_bad_calls_become_error_results() {
    let fake = FakeOpenAi::start().await.unwrap();
    fake.push(Turn::tool_calls([
        ToolCall::new("a", "current_time", "{}"),
        ToolCall::new("b", "web_search", "{}"),
        ToolCall::new("c", "message", "{\"text\": \"unterminated"),
    ]));
    fake.push(Turn::text(["Done."]));
    let (runner, _workspace) = runner(openai(&fake), settings());

    let (outcome, _) = run(&runner, RunRequest::new("k", "go")).await;
    assert_eq!(outcome.status, RunStatus::Completed);
    let results: Vec<_> = outcome
        .transcript
        .iter()
        .filter_map(|m| match m {
            ChatMessage::ToolResult { call_id, is_error, content, .. } => {
                Some((call_id.as_str(), *is_error, content.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        results.iter().map(|(id, err, _)| (*id, *err)).collect::<Vec<_>>(),
        [("a", false), ("b", true), ("c", true)]
    );
    assert!(results[1].2.contains("unknown tool"), "{}", results[1].2);
    assert!(results[2].2.contains("not valid JSON"), "{}", results[2].2);
    assert_eq!(outcome.tool_failures.len(), 2);
    let second = fake.requests()[1].body.clone();
    let roles: Vec<_> =
        second["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap().to_owned()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "tool", "tool"]);
}

/// The value of one series in the `/metrics` text, 0 if absent. The registry is the
/// process's, shared by the tests running beside this one: tests compare values before
/// and after, on a provider name of their own where they can.
fn metric(series: &str) -> f64 {
    ferry::metrics::render()
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |value| value.parse().expect("a number"))
}

#[tokio::test]
async fn model_requests_are_measured_per_provider_failed_ones_as_errors() {
    let fake = FakeOpenAi::start().await.unwrap();
    fake.push(Turn::error(500, "boom"));
    fake.push(Turn::text(["measured"]));
    let provider = Arc::new(OpenAiProvider::new("metrics-probe", &fake.url(), None));
    let (runner, _workspace) = runner_with(provider);
    let series = [
        r#"ferry_model_errors_total{provider="metrics-probe"}"#,
        r#"ferry_model_request_seconds_count{provider="metrics-probe"}"#,
        r#"ferry_model_first_token_seconds_count{provider="metrics-probe"}"#,
    ];
    let before = series.map(metric);

    let (outcome, _) = run(&runner, RunRequest::new("k", "hi")).await;
    assert_eq!(outcome.status, RunStatus::Completed);
    let after = series.map(metric);
    let counted: Vec<f64> = after.iter().zip(before).map(|(after, before)| after - before).collect();
    assert_eq!(counted, [1.0, 1.0, 1.0], "one failed request, one complete with its first token");
}

#[tokio::test]
async fn every_run_counts_once_under_how_it_ended() {
    let ended = |status: &str| metric(&format!(r#"ferry_runs_finished_total{{status="{status}"}}"#));
    let before = [ended("ok"), ended("error"), ended("aborted"), metric("ferry_runs_started_total")];
    let fake = FakeOpenAi::start().await.unwrap();
    fake.push(Turn::text(["fine"]));
    fake.push(Turn::context_overflow());
    fake.push(Turn::stall(Reply::text(["slow", "never"]), 1));
    let (runner, _workspace) = runner(openai(&fake), settings());
    assert_eq!(run(&runner, RunRequest::new("k", "hi")).await.0.status, RunStatus::Completed);
    assert!(matches!(run(&runner, RunRequest::new("k", "hi")).await.0.status, RunStatus::Failed { .. }));
    let mut request = RunRequest::new("k", "hi");
    request.timeout = Some(Duration::from_millis(300));
    assert!(matches!(run(&runner, request).await.0.status, RunStatus::Aborted(_)));

    // Runs of the tests beside this one count too: at least ours are there.
    let after = [ended("ok"), ended("error"), ended("aborted"), metric("ferry_runs_started_total")];
    let counted: Vec<f64> = after.iter().zip(before).map(|(after, before)| after - before).collect();
    assert!(counted[..3].iter().all(|&n| n >= 1.0) && counted[3] >= 3.0, "{counted:?}");
}

#[tokio::test]
async fn a_rate_limit_is_retried_after_the_requested_wait() {
    let fake = FakeOpenAi::start().await.unwrap();
    fake.push(Turn::rate_limited(1));
    fake.push(Turn::text(["finally"]));
    let (runner, _workspace) = runner(openai(&fake), settings());

    let started = Instant::now();
    let (outcome, _) = run(&runner, RunRequest::new("k", "hi")).await;
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(outcome.payloads[0].text, "finally");
    assert_eq!(fake.requests().len(), 2);
    // A lower bound only: the retry must not come before the provider's retry-after.
    assert!(started.elapsed() >= Duration::from_secs(1), "retried after {:?}", started.elapsed());
}

#[tokio::test]
async fn a_blip_does_not_lock_the_only_key_out_for_its_cooldown() {
    let fake = FakeAnthropic::start().await.unwrap();
    fake.push(Turn::error(500, "boom"));
    fake.push(Turn::error(502, "bad gateway"));
    let (runner, _workspace) = runner(anthropic(&fake), settings());
    let (outcome, _) = run(&runner, RunRequest::new("k", "hi")).await;
    assert!(matches!(
        outcome.status,
        RunStatus::Failed { error: ProviderError::Unavailable { reason: FailoverReason::Timeout, .. } }
    ));

    // The key is cooling, but it failed without asking for a wait: the next run asks it.
    fake.push(Turn::text(["back again"]));
    let (outcome, _) = run(&runner, RunRequest::new("k2", "hi")).await;
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(outcome.payloads[0].text, "back again");
    assert_eq!(fake.requests().len(), 3);
}

#[tokio::test]
async fn server_errors_are_retried_once_then_reported() {
    let fake = FakeAnthropic::start().await.unwrap();
    fake.push(Turn::error(500, "boom"));
    fake.push(Turn::from(HttpError::new(503, "still down")));
    let (runner, _workspace) = runner(anthropic(&fake), settings());

    let (outcome, events) = run(&runner, RunRequest::new("k", "hi")).await;
    // With no other credential or model, the one there is was retried once, then put on
    // cooldown; the user is told when it may be back, and why (the last answer: 503).
    assert!(matches!(
        outcome.status,
        RunStatus::Failed {
            error: ProviderError::Unavailable { reason: FailoverReason::Overloaded, back_at: Some(_), .. }
        }
    ));
    assert_eq!(fake.requests().len(), 2);
    assert_eq!(outcome.payloads.len(), 1);
    assert!(outcome.payloads[0].is_error);
    assert!(outcome.payloads[0].text.contains("unavailable"), "{}", outcome.payloads[0].text);
    assert!(outcome.payloads[0].text.contains("It may be back at"), "{}", outcome.payloads[0].text);
    assert!(matches!(terminal(&events), LifecycleEvent::Error { .. }));
}

#[tokio::test]
async fn client_errors_and_context_overflow_are_not_retried() {
    let fake = FakeOpenAi::start().await.unwrap();
    fake.push(Turn::context_overflow());
    fake.push(Turn::text(["never"]));
    let (runner, _workspace) = runner(openai(&fake), settings());
    let (outcome, _) = run(&runner, RunRequest::new("k", "hi")).await;
    assert!(matches!(outcome.status, RunStatus::Failed { error: ProviderError::ContextOverflow { .. } }));
    assert!(outcome.payloads[0].text.contains("/new"));
    assert_eq!(fake.requests().len(), 1);

    let fake = FakeOpenAi::start().await.unwrap().with_api_key("right");
    let provider = Arc::new(OpenAiProvider::new("p", &fake.url(), Some(Secret::new("wrong-key-value"))));
    let (runner, _workspace) = runner_with(provider);
    let (outcome, events) = run(&runner, RunRequest::new("k", "hi")).await;
    assert!(matches!(
        outcome.status,
        RunStatus::Failed { error: ProviderError::Unavailable { reason: FailoverReason::Auth, .. } }
    ));
    assert!(outcome.payloads[0].text.contains("credentials"), "{}", outcome.payloads[0].text);
    let everything = format!("{events:?}{:?}", outcome.payloads);
    assert!(!everything.contains("wrong-key-value"), "the key leaked: {everything}");
}

fn runner_with(provider: Arc<dyn ModelProvider>) -> (AgentRunner, tempfile::TempDir) {
    runner(provider, settings())
}

#[tokio::test]
async fn a_stream_cut_after_output_began_is_asked_again_from_the_start() {
    let fake = FakeOpenAi::start().await.unwrap();
    fake.push(Turn::cut(Reply::text(["partial ", "answer ", "never finished"]), 2));
    fake.push(Turn::text(["second ", "attempt"]));
    let (runner, _workspace) = runner(openai(&fake), settings());

    let (outcome, events) = run(&runner, RunRequest::new("k", "hi")).await;
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(fake.requests().len(), 2, "asked again after the cut");
    assert_eq!(outcome.payloads.len(), 1, "{:?}", outcome.payloads);
    assert_eq!(outcome.payloads[0].text, "second attempt");
    let restarts = events
        .iter()
        .filter(|event| matches!(&event.stream, AgentStream::Assistant(AssistantEvent::Restart { attempt: 1 })))
        .count();
    assert_eq!(restarts, 1, "listeners are told the message starts over");
    assert_eq!(deltas(&events).last().unwrap().1, "second attempt", "the text so far restarts with it");
}

#[tokio::test]
async fn a_stream_that_keeps_failing_after_output_gives_up_after_two_more_attempts() {
    let fake = FakeOpenAi::start().await.unwrap();
    for _ in 0..3 {
        fake.push(Turn::cut(Reply::text(["partial ", "answer ", "never finished"]), 2));
    }
    fake.push(Turn::text(["never asked for"]));
    let (runner, _workspace) = runner(openai(&fake), settings());

    let (outcome, _events) = run(&runner, RunRequest::new("k", "hi")).await;
    assert!(matches!(&outcome.status, RunStatus::Failed { error } if error.is_transient()), "{:?}", outcome.status);
    assert_eq!(fake.requests().len(), 3, "the first call and two more");
    assert!(outcome.payloads[0].text.contains("cut off"));
}

#[tokio::test]
async fn a_stream_cut_before_any_output_is_retried() {
    let fake = FakeAnthropic::start().await.unwrap();
    fake.push(Turn::cut(Reply::text(["lost"]), 0));
    fake.push(Turn::text(["recovered"]));
    let (runner, _workspace) = runner(anthropic(&fake), settings());

    let (outcome, events) = run(&runner, RunRequest::new("k", "hi")).await;
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(outcome.payloads[0].text, "recovered");
    assert_eq!(deltas(&events).len(), 1);
}

#[tokio::test]
async fn an_idle_stream_is_aborted() {
    let fake = FakeOpenAi::start().await.unwrap();
    fake.push(Turn::stall(Reply::text(["thinking...", "never"]), 1));
    let no_retry = RetryPolicy { max_retries: 0, ..RetryPolicy::default() };
    let settings = RunSettings { idle_timeout: Duration::from_millis(300), retry_after_output: no_retry, ..settings() };
    let (runner, _workspace) = runner(openai(&fake), settings);

    let (outcome, events) = run(&runner, RunRequest::new("k", "hi")).await;
    assert!(matches!(outcome.status, RunStatus::Failed { error: ProviderError::Idle(_) }), "{:?}", outcome.status);
    assert!(matches!(terminal(&events), LifecycleEvent::Error { error, .. } if error.contains("sent nothing")));
    assert_eq!(fake.requests().len(), 1, "not retried when the policy allows no retry after output");
}

#[tokio::test]
async fn the_run_timeout_aborts_the_run() {
    let fake = FakeAnthropic::start().await.unwrap();
    fake.push(Turn::stall(Reply::text(["slow", "never"]), 1));
    let (runner, _workspace) = runner(anthropic(&fake), settings());
    let mut request = RunRequest::new("k", "hi");
    request.timeout = Some(Duration::from_millis(400));

    let (outcome, events) = run(&runner, request).await;
    assert_eq!(outcome.status, RunStatus::Aborted(AbortReason::Timeout));
    assert!(matches!(terminal(&events), LifecycleEvent::End { aborted: true, .. }));
    assert!(outcome.payloads.is_empty());
}

#[tokio::test]
async fn cancellation_aborts_a_run_mid_stream() {
    let fake = FakeOpenAi::start().await.unwrap();
    fake.push(Turn::stall(Reply::text(["first words", "never"]), 1));
    let (runner, _workspace) = runner(openai(&fake), settings());
    let request = RunRequest::new("k", "hi");
    let cancel = request.cancel.clone();

    let mut handle = runner.start(request);
    let mut events = Vec::new();
    while let Some(event) = handle.events.recv().await {
        let streaming = matches!(&event.stream, AgentStream::Assistant(AssistantEvent::Delta { .. }));
        events.push(event);
        if streaming {
            cancel.cancel();
        }
    }
    let outcome = handle.outcome().await.unwrap();
    assert_event_contract(&events);
    assert_eq!(outcome.status, RunStatus::Aborted(AbortReason::Cancelled));
    assert!(matches!(terminal(&events), LifecycleEvent::End { aborted: true, .. }));
}

/// A replica that stopped holding the run's session (paused past its lease) makes no more
/// model calls for it: the run ends as cancelled before asking.
#[tokio::test]
async fn a_run_whose_session_is_no_longer_held_asks_the_model_nothing() {
    let fake = FakeOpenAi::start().await.unwrap();
    fake.push(Turn::text(["never asked"]));
    let (runner, _workspace) = runner(openai(&fake), settings());
    let mut request = RunRequest::new("k", "hi");
    request.still_held = Some(Arc::new(|| false));
    let (outcome, events) = run(&runner, request).await;
    assert_eq!(outcome.status, RunStatus::Aborted(AbortReason::Cancelled));
    assert!(matches!(terminal(&events), LifecycleEvent::End { aborted: true, .. }));
    assert!(fake.requests().is_empty(), "the model was asked: {:?}", fake.requests().len());
}

#[tokio::test]
async fn malformed_stream_data_ends_the_run_with_a_clear_error() {
    let fake = FakeOpenAi::start().await.unwrap();
    fake.push(Turn::raw("data: {\"choices\":[]}\n\ndata: {not json\n\n"));
    let (runner, _workspace) = runner(openai(&fake), settings());
    let (outcome, events) = run(&runner, RunRequest::new("k", "hi")).await;
    assert!(matches!(outcome.status, RunStatus::Failed { error: ProviderError::Malformed { .. } }));
    assert!(matches!(terminal(&events), LifecycleEvent::Error { error, .. } if error.contains("malformed")));
}

#[tokio::test]
async fn unknown_anthropic_events_are_ignored() {
    let fake = FakeAnthropic::start().await.unwrap();
    fake.push(Turn::raw(concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\n\n",
        "event: shiny_new_event\ndata: {\"type\":\"shiny_new_event\"}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"ok\"}}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    )));
    let (runner, _workspace) = runner(anthropic(&fake), settings());
    let (outcome, _) = run(&runner, RunRequest::new("k", "hi")).await;
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(outcome.payloads[0].text, "ok");
}

#[tokio::test]
async fn the_tool_round_limit_forces_a_final_answer_without_tools() {
    let fake = FakeOpenAi::start().await.unwrap();
    fake.push(Turn::tool_calls([ToolCall::new("a", "current_time", "{}")]));
    fake.push(Turn::text(["Here is what I found."]));
    let settings = RunSettings { max_tool_rounds: 1, ..settings() };
    let (runner, _workspace) = runner(openai(&fake), settings);

    let (outcome, _) = run(&runner, RunRequest::new("k", "loop forever")).await;
    assert_eq!(outcome.status, RunStatus::Completed);
    let requests = fake.requests();
    assert!(requests[0].body.get("tools").is_some());
    assert!(requests[1].body.get("tools").is_none(), "the last round offers no tools");
}

/// A chat's policy takes a tool away: it is not offered, and a call to it anyway is refused
/// with the tools that are available, never run.
#[tokio::test]
async fn a_tool_the_chat_may_not_use_is_not_offered_and_not_run() {
    let fake = FakeOpenAi::start().await.unwrap();
    fake.push(Turn::tool_calls([ToolCall::new("a", "current_time", "{}")]));
    fake.push(Turn::text(["I cannot tell the time here."]));
    let (runner, _workspace) = runner(openai(&fake), settings());
    let deny_time = ToolLists { allow: Vec::new(), deny: vec!["current_time".into()] };
    let mut request = RunRequest::new("k", "what time is it?");
    request.tools = ToolPolicy::new(ToolProfile::Chat, deny_time).for_chat("telegram", "42", None);

    let (outcome, events) = run(&runner, request).await;
    assert_eq!(outcome.status, RunStatus::Completed);
    let requests = fake.requests();
    let offered: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|tool| tool["function"]["name"].as_str())
        .collect();
    assert!(!offered.contains(&"current_time") && offered.contains(&"message"), "{offered:?}");
    let result = events.iter().find_map(|event| match &event.stream {
        AgentStream::Tool(ToolEvent::Result { is_error: true, result, .. }) => Some(result.clone()),
        _ => None,
    });
    let result = result.expect("an error result");
    assert!(result.contains("not available in this chat") && !result.contains("current_time,"), "{result}");
}

/// A provider whose first reply calls two tools and, while that reply streams, a user
/// steers the run (deterministically: the push happens as the stream is consumed).
struct SteeredProvider {
    inbox: SteerInbox,
    requests: std::sync::Mutex<Vec<ModelRequest>>,
}

#[async_trait::async_trait]
impl ModelProvider for SteeredProvider {
    fn name(&self) -> &str {
        "steered"
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelStream, ProviderError> {
        let first = {
            let mut requests = self.requests.lock().unwrap();
            requests.push(request.clone());
            requests.len() == 1
        };
        if !first {
            let events = vec![
                Ok(ModelEvent::TextDelta("Switching to your new question.".into())),
                Ok(ModelEvent::Stop(StopReason::EndTurn)),
            ];
            return Ok(futures::stream::iter(events).boxed());
        }
        let inbox = self.inbox.clone();
        let events = vec![
            ModelEvent::ToolCallStart { index: 0, id: "a".into(), name: "current_time".into() },
            ModelEvent::ToolCallStart { index: 1, id: "b".into(), name: "current_time".into() },
            ModelEvent::Stop(StopReason::ToolUse),
        ];
        Ok(futures::stream::iter(events)
            .enumerate()
            .map(move |(position, event)| {
                if position == 1 {
                    inbox.push("actually, something else".to_owned()).expect("a streaming run accepts steering");
                }
                Ok(event)
            })
            .boxed())
    }
}

#[tokio::test]
async fn a_steering_message_skips_unstarted_tool_calls_and_reaches_the_model() {
    let inbox = SteerInbox::new();
    assert!(inbox.push("too early".to_owned()).is_err(), "a run that is not streaming yet refuses steering");
    let provider = Arc::new(SteeredProvider { inbox: inbox.clone(), requests: Default::default() });
    let (runner, _workspace) = runner(provider.clone(), settings());
    let mut request = RunRequest::new("k", "first question");
    request.steer = Some(inbox.clone());

    let (outcome, _) = run(&runner, request).await;
    assert_eq!(outcome.status, RunStatus::Completed);
    assert!(outcome.unconsumed_steer.is_empty());
    let skipped = outcome
        .transcript
        .iter()
        .filter(
            |m| matches!(m, ChatMessage::ToolResult { content, .. } if content == "skipped due to queued user message"),
        )
        .count();
    assert_eq!(skipped, 2, "neither tool call ran");
    let second = provider.requests.lock().unwrap()[1].messages.last().cloned();
    assert_eq!(second, Some(ChatMessage::user("actually, something else")));
    assert!(inbox.push("after the end".to_owned()).is_err(), "a finished run refuses steering");
}

#[tokio::test]
async fn the_system_prompt_carries_bootstrap_files_and_extra_instructions() {
    let fake = FakeAnthropic::start().await.unwrap();
    fake.push(Turn::text(["ok"]));
    let (runner, workspace) = runner(anthropic(&fake), settings());
    std::fs::write(workspace.path().join("SOUL.md"), "You are Ferry's test agent.").unwrap();
    let mut request = RunRequest::new("k", "hi");
    request.extra_system_prompt = Some("Answer in haiku.".into());

    run(&runner, request).await;
    let system = fake.requests()[0].body["system"].as_str().unwrap().to_owned();
    assert!(system.contains("### SOUL.md\nYou are Ferry's test agent."), "{system}");
    assert!(system.contains("Answer in haiku."), "{system}");
}

/// Adds context to the prompt and reports the tool calls and run ends it observes.
struct Observer {
    seen: tokio::sync::mpsc::UnboundedSender<String>,
}

#[async_trait::async_trait]
impl Plugin for Observer {
    fn name(&self) -> &str {
        "observer"
    }

    async fn before_agent_start(&self, event: &BeforeAgentStart) -> HookResult<Option<AgentStartChange>> {
        Ok(Some(AgentStartChange { system_prompt: None, context: Some(format!("Run {} is watched.", event.run_id)) }))
    }

    async fn after_tool_call(&self, event: &AfterToolCall) -> HookResult<()> {
        let _ = self.seen.send(format!("tool {} error={}", event.tool_name, event.is_error));
        Ok(())
    }

    async fn agent_end(&self, event: &AgentEnd) -> HookResult<()> {
        let _ = self.seen.send(format!("end {} with {} messages", event.status, event.messages.len()));
        Ok(())
    }
}

#[tokio::test]
async fn plugins_add_context_to_the_prompt_and_observe_tool_calls_and_the_end_of_the_run() {
    let fake = FakeOpenAi::start().await.unwrap();
    fake.push(Turn::tool_calls([ToolCall::new("call_time", "current_time", "{}")])).push(Turn::text(["noon"]));
    let (seen, mut observed) = tokio::sync::mpsc::unbounded_channel();
    let hooks = Hooks::builder().register(0, Observer { seen }).build();
    let (runner, _workspace) = hooked_runner(openai(&fake), settings(), hooks);
    let mut request = RunRequest::new("agent:main:main", "time?");
    request.run_id = "run-7".into();
    let (outcome, _) = run(&runner, request).await;
    assert_eq!(outcome.status, RunStatus::Completed);
    let system = fake.requests()[0].body["messages"][0]["content"].as_str().unwrap().to_owned();
    assert!(system.ends_with("\n\nRun run-7 is watched."), "{system}");
    let mut lines = Vec::new();
    while lines.len() < 2 {
        lines.push(tokio::time::timeout(Duration::from_secs(20), observed.recv()).await.unwrap().unwrap());
    }
    assert_eq!(lines, ["tool current_time error=false", "end completed with 4 messages"]);
}

#[tokio::test]
async fn a_runaway_reply_is_cut_at_the_run_limit_with_a_note_and_the_model_stopped() {
    let fake = FakeOpenAi::start().await.unwrap();
    // 40,000 characters of text, then a tool call the model never gets to make.
    let chunks: Vec<String> = (0..400).map(|i| format!("{:<99}\n", format!("line {i}"))).collect();
    fake.push(Reply::tool_calls([ToolCall::new("call_time", "current_time", "{}")]).with_text(chunks));
    fake.push(Turn::text(["never asked for"]));
    let (runner, _workspace) = runner(openai(&fake), RunSettings { max_reply_chars: 1_000, ..settings() });

    let (outcome, events) = run(&runner, RunRequest::new("k", "write forever")).await;
    assert_eq!(outcome.status, RunStatus::Completed);
    let text = &outcome.payloads[0].text;
    let (kept, note) = text.split_once("\n\n[Reply cut").expect("the reply says it was cut");
    assert_eq!(kept.chars().count(), 1_000, "cut exactly at the limit");
    assert!(note.contains("limit of 1000 characters"), "{note}");
    assert_eq!(deltas(&events).last().unwrap().1, *text, "the user sees the note too");
    assert!(!events.iter().any(|e| matches!(&e.stream, AgentStream::Tool(_))), "no tool ran after the cut");
    assert_eq!(fake.requests().len(), 1, "the run ended with the cut reply");
    assert_eq!(outcome.transcript[1], ChatMessage::assistant(text.clone(), vec![]));
}

#[tokio::test]
async fn the_reply_limit_counts_every_turn_of_a_run() {
    let fake = FakeOpenAi::start().await.unwrap();
    fake.push(Reply::tool_calls([ToolCall::new("call_time", "current_time", "{}")]).with_text(["a".repeat(700)]));
    fake.push(Turn::text(["b".repeat(200), "c".repeat(200)]));
    let (runner, _workspace) = runner(openai(&fake), RunSettings { max_reply_chars: 1_000, ..settings() });

    let (outcome, _) = run(&runner, RunRequest::new("k", "go")).await;
    assert_eq!(outcome.payloads[0].text, "a".repeat(700), "within the limit: whole, and its tool ran");
    let second = &outcome.payloads[1].text;
    assert!(second.starts_with(&format!("{}{}\n\n[Reply cut", "b".repeat(200), "c".repeat(100))), "{second}");
}

/// Extended thinking with tools, against the fake's strict checks (as the real API): the
/// continuation sends the thinking blocks back first and unmodified, signature included, or
/// it is refused.
#[tokio::test]
async fn an_anthropic_thinking_and_tool_use_loop_passes_its_signed_blocks_back() {
    let fake = FakeAnthropic::start().await.unwrap();
    fake.push(
        Reply::tool_calls([ToolCall::new("call_time", "current_time", "{}")])
            .with_redacted_thinking("opaque-1")
            .with_thinking(["I need ", "the time."]),
    );
    fake.push(Turn::text(["It is noon."]));
    let (runner, _workspace) = runner(anthropic(&fake), settings());
    let mut request = RunRequest::new("k", "what time is it?");
    request.thinking = Some(ThinkingLevel::Low);

    let (outcome, events) = run(&runner, request).await;
    assert_eq!(outcome.status, RunStatus::Completed, "{:?}", outcome.payloads);
    assert_eq!(outcome.payloads.last().map(|p| p.text.as_str()), Some("It is noon."));
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].thinking_budget(), Some(4096));
    assert_eq!(requests[0].max_tokens(), Some(4096 + 8192), "max_tokens leaves room for the budget");
    let assistant = &requests[1].body["messages"][1];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(assistant["content"][0], serde_json::json!({ "type": "redacted_thinking", "data": "opaque-1" }));
    assert_eq!(assistant["content"][1]["thinking"], "I need the time.");
    assert_eq!(assistant["content"][1]["signature"], fake.sign_thinking("I need the time."));
    let reasoning: String = events
        .iter()
        .filter_map(|event| match &event.stream {
            AgentStream::Assistant(AssistantEvent::Reasoning { delta }) => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(reasoning, "I need the time.", "the reasoning streams apart from the answer");
}

/// A model that refuses a thinking setting is asked again without one, and the user is
/// told once, not failed.
#[tokio::test]
async fn a_model_that_cannot_think_answers_without_thinking_and_says_so_once() {
    let fake = FakeOpenAi::start().await.unwrap();
    fake.push(Turn::error(400, "Unrecognized request argument supplied: reasoning_effort"));
    fake.push(Turn::text(["Hello."]));
    fake.push(Turn::text(["Again."]));
    let (runner, _workspace) = runner(openai(&fake), settings());
    let thinking = |text: &str| {
        let mut request = RunRequest::new("k", text);
        request.thinking = Some(ThinkingLevel::High);
        request
    };

    let (outcome, _) = run(&runner, thinking("hi")).await;
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(outcome.payloads[0].text, "Hello.");
    assert_eq!(outcome.notices.len(), 1);
    assert!(outcome.notices[0].contains("cannot think"), "{:?}", outcome.notices);
    let requests = fake.requests();
    assert_eq!(requests[0].reasoning_effort().as_deref(), Some("high"));
    assert_eq!(requests[1].reasoning_effort(), None);

    let (again, _) = run(&runner, thinking("and now?")).await;
    assert_eq!(again.payloads[0].text, "Again.");
    assert!(again.notices.is_empty(), "told once");
    assert_eq!(fake.requests()[2].reasoning_effort(), None, "not asked to think again");
}

/// `<think>` blocks in the text (DeepSeek-R1 style) never reach the answer, even split
/// across deltas, and a block followed by NO_REPLY is a silent reply.
#[tokio::test]
async fn inline_think_blocks_become_reasoning_and_leave_the_answer_clean() {
    let fake = FakeOpenAi::start().await.unwrap();
    fake.push(Turn::text(["<thi", "nk>The user ", "says hi.</th", "ink>\n\nHello", "!"]));
    fake.push(Turn::text(["<think>nothing to add</think>\n", "NO_REPLY"]));
    let (runner, _workspace) = runner(openai(&fake), settings());

    let (outcome, events) = run(&runner, RunRequest::new("k", "hi")).await;
    assert_eq!(outcome.payloads[0].text, "Hello!");
    for (_, text) in deltas(&events) {
        assert!(!text.contains('<') && !text.contains("says hi"), "a fragment reached a delta: {text:?}");
    }
    let (silent, _) = run(&runner, RunRequest::new("k", "ok")).await;
    assert_eq!(silent.payloads[0].text, "NO_REPLY", "the answer is exactly the silent token");
}

/// A tool that never answers, for stopping a run while a tool runs.
struct Hang;

#[async_trait::async_trait]
impl ferry::agent::tools::Tool for Hang {
    fn name(&self) -> &'static str {
        "hang"
    }
    fn description(&self) -> &'static str {
        "never returns"
    }
    fn parameters(&self) -> serde_json::Value {
        serde_json::json!({"type": "object"})
    }
    fn mutates(&self) -> bool {
        false
    }
    async fn call(
        &self,
        _arguments: serde_json::Value,
        _context: &ferry::agent::tools::ToolContext,
    ) -> Result<ferry::agent::tools::ToolOutput, ferry::agent::tools::ToolError> {
        std::future::pending().await
    }
}

#[tokio::test]
async fn a_run_stopped_during_its_tools_leaves_no_call_unanswered() {
    let fake = FakeOpenAi::start().await.unwrap();
    fake.push(Turn::tool_calls([ToolCall::new("a", "current_time", "{}"), ToolCall::new("b", "hang", "{}")]));
    fake.push(Turn::tool_calls([ToolCall::new("c", "current_time", "{}")]));
    fake.push(Turn::text(["Back."]));
    let mut tools = ToolRegistry::with_builtins();
    tools.register(Hang);
    let (runner, _workspace) = runner_with_tools(openai(&fake), settings(), Hooks::default(), tools);
    let request = RunRequest::new("k", "go");
    let cancel = request.cancel.clone();
    let mut handle = runner.start(request);
    while let Some(event) = handle.events.recv().await {
        if matches!(&event.stream, AgentStream::Tool(ToolEvent::Start { name, .. }) if name == "hang") {
            cancel.cancel();
        }
    }
    let outcome = handle.outcome().await.unwrap();
    assert_eq!(outcome.status, RunStatus::Aborted(AbortReason::Cancelled));
    let results: Vec<(&str, bool)> = outcome
        .transcript
        .iter()
        .filter_map(|m| match m {
            ChatMessage::ToolResult { call_id, is_error, .. } => Some((call_id.as_str(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(results, [("a", false), ("b", true)], "{:#?}", outcome.transcript);

    // The session goes on: its next run sends a conversation in which every call has its
    // answer, even from a transcript saved before stopped runs were repaired.
    let mut unrepaired = outcome.transcript.clone();
    unrepaired.pop();
    for history in [outcome.transcript, unrepaired] {
        let mut next = RunRequest::new("k", "again");
        next.history = history;
        let (outcome, _) = run(&runner, next).await;
        assert_eq!(outcome.status, RunStatus::Completed);
        let sent = fake.requests().last().unwrap().body.clone();
        let roles: Vec<_> =
            sent["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap().to_owned()).collect();
        assert_eq!(roles[..6], ["system", "user", "assistant", "tool", "tool", "user"], "{sent}");
        fake.push(Turn::tool_calls([ToolCall::new("c", "current_time", "{}")]));
        fake.push(Turn::text(["Back."]));
    }
}

/// A run resumed after a crash makes again the call its killed attempt recorded but did not
/// answer; its result goes right after that call, before the messages that arrived since,
/// or the model would be sent a tool result answering nothing (which providers refuse).
#[tokio::test]
async fn a_resumed_call_is_answered_before_the_messages_that_arrived_since() {
    let fake = FakeOpenAi::start().await.unwrap();
    fake.push(Turn::text(["It is noon, and hello."]));
    let (runner, _workspace) = runner(openai(&fake), settings());
    let mut request = RunRequest::new("k", "and hello");
    let call = ferry::agent::ToolCall { id: "call_time".into(), name: "current_time".into(), arguments: "{}".into() };
    request.resume.messages = vec![ChatMessage::user("what time is it?"), ChatMessage::assistant("", vec![call])];
    let (outcome, _) = run(&runner, request).await;
    assert_eq!(outcome.status, RunStatus::Completed, "{:?}", outcome.status);
    let roles: Vec<String> = fake.requests()[0].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| message["role"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "user"]);
    assert_eq!(fake.requests().len(), 1, "the model is asked once, after the call was made again");
}

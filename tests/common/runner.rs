//! The agent runner the end-to-end tests share: the fake OpenAI server as the model, the
//! built-in tools, short timeouts, no hooks. Tests change what they study with struct
//! update syntax (`RunnerParts { hooks, ..fake_model_runner(…) }`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ferry::agent::providers::openai::OpenAiProvider;
use ferry::agent::providers::{ResolvedModel, RetryPolicy};
use ferry::agent::tools::{RecentSessions, ToolRegistry};
use ferry::agent::{EventBus, RunSettings, RunnerParts};
use ferry::channels::ChannelRegistry;

pub fn fake_model_runner(model_url: &str, workspace: &Path, channels: &ChannelRegistry) -> RunnerParts {
    RunnerParts {
        model: ResolvedModel {
            provider: Arc::new(OpenAiProvider::new("fake", model_url, None)),
            model: "test".into(),
            context_window: None,
            vision: false,
            is_fallback_echo: false,
        }
        .into(),
        tools: ToolRegistry::with_builtins(),
        bus: EventBus::new(),
        settings: RunSettings {
            timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(30),
            max_tool_rounds: 5,
            max_reply_chars: 200_000,
            retry: RetryPolicy::default(),
            // Short: a test of a run kept for later takes no minutes.
            retry_after_output: RetryPolicy::after_output(Duration::from_millis(100)),
            compaction_reserve_tokens: 20_000,
            thinking: Default::default(),
        },
        workspace: workspace.to_owned(),
        channels: channels.clone(),
        sessions: Arc::new(RecentSessions::default()),
        hooks: Default::default(),
        media: None,
        memory: None,
    }
}

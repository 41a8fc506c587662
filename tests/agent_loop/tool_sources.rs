//! Tools listed at run time (an MCP server's, through `ToolSource`) in the loop: offered
//! anew every round, so a tool that appears mid-run is there for the next model call;
//! routed to their source; and like every tool, subject to `before_tool_call` hooks and
//! the chat's policy.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use ferry::agent::providers::ToolSpec;
use ferry::agent::tools::{ToolContext, ToolError, ToolOutput, ToolRegistry, ToolSource};
use ferry::agent::{RunRequest, RunStatus};
use ferry::hooks::{BeforeToolCall, HookResult, Hooks, Plugin, ToolCallDecision};
use ferry_fakes::{FakeOpenAi, ToolCall, Turn};
use serde_json::{Value, json};

use super::{openai, run, runner_with_tools, settings};

/// A server whose `srv__late` tool appears once `srv__safe` was called.
#[derive(Default)]
struct Listed {
    calls: Mutex<Vec<(String, Value)>>,
}

fn spec(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: format!("{name} of srv"),
        parameters: Arc::new(json!({"type": "object"})),
    }
}

#[async_trait]
impl ToolSource for Listed {
    fn specs(&self) -> Vec<ToolSpec> {
        let mut specs = vec![spec("srv__safe"), spec("srv__danger")];
        if !self.calls.lock().unwrap().is_empty() {
            specs.push(spec("srv__late"));
        }
        specs
    }

    fn owns(&self, name: &str) -> bool {
        name.starts_with("srv__")
    }

    fn mutates(&self, _name: &str) -> bool {
        true
    }

    async fn call(&self, name: &str, arguments: Value, _context: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.calls.lock().unwrap().push((name.to_owned(), arguments));
        Ok(format!("{name} done").into())
    }
}

struct NoDanger;

#[async_trait]
impl Plugin for NoDanger {
    fn name(&self) -> &str {
        "no-danger"
    }

    async fn before_tool_call(&self, call: &BeforeToolCall) -> HookResult<Option<ToolCallDecision>> {
        Ok((call.tool_name == "srv__danger").then(|| ToolCallDecision::Block { reason: "not here".into() }))
    }
}

fn offered(body: &Value) -> Vec<String> {
    body["tools"].as_array().unwrap().iter().filter_map(|t| t["function"]["name"].as_str().map(str::to_owned)).collect()
}

#[tokio::test]
async fn listed_tools_are_offered_each_round_routed_to_their_source_and_hooks_can_block_them() {
    let fake = FakeOpenAi::start().await.unwrap();
    fake.push(Turn::tool_calls([
        ToolCall::new("a", "srv__safe", r#"{"x": 1}"#),
        ToolCall::new("b", "srv__danger", "{}"),
    ]));
    fake.push(Turn::text(["Done."]));
    let source = Arc::new(Listed::default());
    let tools = ToolRegistry::with_builtins().with_source(source.clone());
    let hooks = Hooks::builder().register(0, NoDanger).build();
    let (runner, _workspace) = runner_with_tools(openai(&fake), settings(), hooks, tools);

    let (outcome, _) = run(&runner, RunRequest::new("k", "go")).await;
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(*source.calls.lock().unwrap(), [("srv__safe".to_owned(), json!({"x": 1}))], "danger never ran");
    let requests = fake.requests();
    let first = offered(&requests[0].body);
    assert!(first.contains(&"srv__safe".to_owned()) && !first.contains(&"srv__late".to_owned()), "{first:?}");
    assert!(offered(&requests[1].body).contains(&"srv__late".to_owned()), "listed anew for the next call");
    let results: Vec<&str> = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(results[0], "srv__safe done");
    assert!(results[1].starts_with("blocked by a hook: not here"), "{results:?}");
}

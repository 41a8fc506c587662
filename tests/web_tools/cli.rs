//! End to end: the real `ferry` binary (`ferry agent`, embedded) with a config, the fake OpenAI
//! model calling `web_fetch` / `web_search`, and what the model got back as the tool result.

use std::process::{Command, Output};

use ferry_fakes::{FakeOpenAi, ToolCall, Turn};
use serde_json::{Value, json};

use super::{Hits, SearchLog, fake_brave, fake_searxng, serve, site};

/// Runs `ferry --config <config> [-vv] agent --message …` against `model`, in a fresh home.
async fn ferry_agent(model: &FakeOpenAi, config: &str, env: &[(&str, &str)]) -> Output {
    let home = tempfile::tempdir().expect("home");
    let config_path = home.path().join("ferry.toml");
    std::fs::write(&config_path, config).expect("config");
    // A gateway port nothing listens on: the run is embedded.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string();
    let mut vars: Vec<(String, String)> = vec![
        ("FERRY__GATEWAY__PORT".into(), port),
        ("OPENAI_BASE_URL".into(), model.url()),
        ("OPENAI_API_KEY".into(), "sk-web".into()),
    ];
    vars.extend(env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    let config_arg = config_path.display().to_string();
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args(["-vv", "--config", &config_arg, "agent", "--message", "go and look"])
            .env_clear()
            .env("HOME", home.path())
            .envs(vars)
            .current_dir(home.path())
            .output()
            .expect("run ferry")
    })
    .await
    .expect("join")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The tools the model was offered in its first request.
fn offered(model: &FakeOpenAi) -> Vec<String> {
    let tools = model.requests()[0].body["tools"].as_array().cloned().unwrap_or_default();
    tools.iter().filter_map(|tool| tool["function"]["name"].as_str().map(str::to_owned)).collect()
}

/// The tool results the model got back, from its second request.
fn tool_results(model: &FakeOpenAi) -> Vec<String> {
    let requests = model.requests();
    let messages = requests[1].body["messages"].as_array().cloned().unwrap_or_default();
    messages
        .iter()
        .filter(|message| message["role"] == "tool")
        .map(|message| message["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn call(name: &str, arguments: Value) -> Turn {
    Turn::tool_calls([ToolCall::new("call_1", name, arguments.to_string())])
}

const CODING: &str = "[tools]\nprofile = \"coding\"\n";

#[tokio::test]
async fn the_model_reads_a_local_page_through_web_fetch_when_private_addresses_are_allowed() {
    let hits = Hits::default();
    let page = serve(site(&hits), [127, 0, 0, 1]).await;
    let model = FakeOpenAi::start().await.unwrap();
    model.push(call("web_fetch", json!({ "url": format!("{}/page", page.url()) }))).push(Turn::text(["Read it."]));

    let output = ferry_agent(&model, &format!("{CODING}[tools.web]\nallow_private = true\n"), &[]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout), "Read it.\n");
    let offered = offered(&model);
    assert!(offered.contains(&"web_fetch".to_owned()), "{offered:?}");
    assert!(!offered.contains(&"web_search".to_owned()), "no provider, no web_search: {offered:?}");
    let results = tool_results(&model);
    assert_eq!(results.len(), 1);
    assert!(results[0].starts_with(&format!("URL: {}/page\nStatus: 200 OK\n", page.url())), "{}", results[0]);
    assert!(results[0].contains("Title: Ferry test page"), "{}", results[0]);
    assert!(results[0].contains("# Welcome aboard") && results[0].contains("## Details"), "{}", results[0]);
    assert_eq!(hits.count(), 1);
}

#[tokio::test]
async fn the_model_is_refused_a_private_address_when_allow_private_is_off() {
    let hits = Hits::default();
    let page = serve(site(&hits), [127, 0, 0, 1]).await;
    let model = FakeOpenAi::start().await.unwrap();
    model.push(call("web_fetch", json!({ "url": format!("{}/page", page.url()) }))).push(Turn::text(["Refused."]));

    let output = ferry_agent(&model, CODING, &[]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(
        tool_results(&model),
        ["127.0.0.1 is a loopback address; fetching private addresses is off (tools.web.allow_private)"]
    );
    assert!(text(&output.stderr).contains("[tool web_fetch failed: 127.0.0.1 is a loopback address"));
    assert_eq!(hits.count(), 0, "the page was never requested");
}

#[tokio::test]
async fn the_chat_profile_offers_no_web_tools_even_with_a_provider() {
    let log = SearchLog::default();
    let searxng = fake_searxng(&log, true).await;
    let model = FakeOpenAi::start().await.unwrap();
    model.push(Turn::text(["Hi."]));
    let config = format!("[tools.web.search]\nprovider = \"searxng\"\nurl = \"{}/searx\"\n", searxng.url());
    let output = ferry_agent(&model, &config, &[]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    let offered = offered(&model);
    assert!(!offered.iter().any(|tool| tool.starts_with("web_")), "{offered:?}");
}

#[tokio::test]
async fn the_model_searches_the_web_through_a_configured_searxng() {
    let log = SearchLog::default();
    let searxng = fake_searxng(&log, true).await;
    let model = FakeOpenAi::start().await.unwrap();
    model.push(call("web_search", json!({ "query": "ferry chat", "count": 2 }))).push(Turn::text(["Found."]));
    let config = format!("{CODING}[tools.web.search]\nprovider = \"searxng\"\nurl = \"{}/searx\"\n", searxng.url());

    let output = ferry_agent(&model, &config, &[]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(offered(&model).contains(&"web_search".to_owned()));
    let result: Value = serde_json::from_str(&tool_results(&model)[0]).expect("JSON results");
    assert_eq!(
        result,
        json!({
            "query": "ferry chat",
            "results": [
                { "title": "Result 1", "url": "https://result1.example/", "snippet": "Snippet 1." },
                { "title": "Result 2", "url": "https://result2.example/", "snippet": "Snippet 2." },
            ]
        })
    );
    assert_eq!(log.requests().len(), 1);
}

#[tokio::test]
async fn brave_search_takes_its_key_from_brave_api_key_and_never_logs_it() {
    let log = SearchLog::default();
    let brave = fake_brave(&log).await;
    let model = FakeOpenAi::start().await.unwrap();
    model.push(call("web_search", json!({ "query": "ferry" }))).push(Turn::text(["Found."]));
    let config = format!("{CODING}[tools.web.search]\nprovider = \"brave\"\nurl = \"{}\"\n", brave.url());

    let output = ferry_agent(&model, &config, &[("BRAVE_API_KEY", "bsa-test")]).await;
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let result: Value = serde_json::from_str(&tool_results(&model)[0]).expect("JSON results");
    assert_eq!(result["results"].as_array().map(Vec::len), Some(5), "the default count");
    assert_eq!(log.requests()[0].1.as_deref(), Some("bsa-test"));
    assert!(!stderr.contains("bsa-test"), "the key leaked into the logs: {stderr}");

    // Without the key, Brave is a config error that names the key.
    let output = ferry_agent(&model, &config, &[]).await;
    let stderr = text(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("tools.web.search.api_key") && stderr.contains("BRAVE_API_KEY"), "{stderr}");
}

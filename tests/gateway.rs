//! The gateway end to end: a real WebSocket client (tokio-tungstenite) against the gateway
//! served on a local port, with the dispatcher and agent runs against the fake OpenAI
//! server.

#[path = "common/gateway.rs"]
mod gw;
#[path = "common/runner.rs"]
mod runner;

use std::sync::Arc;
use std::time::Duration;

use ferry::config::{Config, Secret};
use ferry_fakes::{Reply, Turn};
use futures::SinkExt;
use gw::{Client, PATIENCE, gateway};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

#[tokio::test]
async fn the_handshake_announces_methods_events_and_the_clients_session() {
    let gw = gateway(Config::default()).await;
    let (_client, hello) = Client::connect(&gw, "browser-1").await;
    assert_eq!(hello["type"], "hello-ok");
    assert_eq!(hello["sessionKey"], "agent:main:webchat:direct:browser-1", "each browser is a conversation of its own");
    let methods: Vec<&str> =
        hello["features"]["methods"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    for method in ["agent", "agent.wait", "chat.send", "chat.abort", "chat.history", "sessions.list", "health"] {
        assert!(methods.contains(&method), "{method} missing from {methods:?}");
    }
    assert_eq!(hello["features"]["events"], json!(["agent", "chat", "approval", "tick"]));

    let mut early = Client::open(&gw).await;
    let refused = early.request("health", json!({})).await;
    assert_eq!(refused["error"]["code"], "INVALID_REQUEST", "the first request must be connect");
}

#[tokio::test]
async fn two_browsers_are_two_conversations_unless_the_operator_chose_main() {
    let gw = gateway(Config::default()).await;
    gw.fake.push(Turn::text(["noted"]));
    let (mut ada, ada_hello) = Client::connect(&gw, "browser-ada").await;
    let (mut bob, bob_hello) = Client::connect(&gw, "browser-bob").await;
    assert_ne!(ada_hello["sessionKey"], bob_hello["sessionKey"]);
    ada.request("chat.send", json!({"message": "my locker code is 4711", "idempotencyKey": "a1"})).await;
    let waited = ada.request("agent.wait", json!({"runId": "a1", "timeoutMs": 15000})).await;
    assert_eq!(waited["payload"]["status"], "ok", "{waited}");
    let history = bob.request("chat.history", json!({})).await;
    assert_eq!(history["payload"]["messages"], json!([]), "Bob does not see Ada's conversation: {history}");

    let mut shared = Config::default();
    shared.session.dm_scope = ferry::config::DmScope::Main;
    let gw = gateway(shared).await;
    let (_, first) = Client::connect(&gw, "browser-ada").await;
    let (_, second) = Client::connect(&gw, "browser-bob").await;
    assert_eq!(
        (first["sessionKey"].clone(), second["sessionKey"].clone()),
        (json!("agent:main:main"), json!("agent:main:main"))
    );
}

#[tokio::test]
async fn a_wrong_or_missing_token_is_refused_and_the_socket_closed() {
    let mut config = Config::default();
    config.gateway.auth_token = Some(Secret::new("s3cret"));
    let gw = gateway(config).await;
    for auth in [json!({}), json!({"token": "guess"})] {
        let mut client = Client::open(&gw).await;
        let answer = client.request("connect", json!({"auth": auth, "client": {"id": "c"}})).await;
        assert_eq!(answer["error"]["code"], "UNAUTHORIZED", "{answer}");
        assert!(client.frame().await.is_none(), "the socket is closed after a refused handshake");
    }
    let mut client = Client::open(&gw).await;
    let answer = client.request("connect", json!({"auth": {"token": "s3cret"}, "client": {"id": "c"}})).await;
    assert_eq!(answer["ok"], true);
}

#[tokio::test]
async fn with_a_token_metrics_need_it_and_healthz_tells_strangers_only_ok() {
    let mut config = Config::default();
    config.gateway.auth_token = Some(Secret::new("s3cret"));
    let gw = gateway(config).await;
    let http = reqwest::Client::new();
    let get = |path: &str, token: Option<&str>| {
        let mut request = http.get(format!("http://{}{path}", gw.address));
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        request.send()
    };
    for token in [None, Some("guess"), Some("")] {
        let refused = get("/metrics", token).await.unwrap();
        assert_eq!(refused.status(), 401, "token {token:?}");
        assert_eq!(refused.headers()["www-authenticate"], "Bearer");
        assert!(!refused.text().await.unwrap().contains("ferry_"), "no metric leaks with the refusal");
        let health: Value = get("/healthz", token).await.unwrap().json().await.unwrap();
        assert_eq!(health, json!({"ok": true}), "nothing but ok for token {token:?}");
    }
    let metrics = get("/metrics", Some("s3cret")).await.unwrap();
    assert_eq!(metrics.status(), 200);
    assert!(metrics.text().await.unwrap().contains("# TYPE ferry_runs_started"));
    let health: Value = get("/healthz", Some("s3cret")).await.unwrap().json().await.unwrap();
    assert!(health["channels"].as_array().is_some_and(|channels| !channels.is_empty()), "{health}");
    assert!(health["uptimeMs"].is_u64());
}

#[tokio::test]
async fn agent_answers_before_the_run_ends_and_wait_only_waits() {
    let gw = gateway(Config::default()).await;
    let slow = Reply::text(["The ", "answer ", "is ", "42."]).with_chunk_delay(Duration::from_millis(250));
    gw.fake.push(Turn::Reply(slow));
    let (mut client, _) = Client::connect(&gw, "cli").await;
    let accepted = client.request("agent", json!({"message": "question", "idempotencyKey": "run-a"})).await;
    assert_eq!(accepted["payload"]["runId"], "run-a", "{accepted}");
    assert!(accepted["payload"]["acceptedAt"].is_string());

    let early = client.request("agent.wait", json!({"runId": "run-a", "timeoutMs": 50})).await;
    assert_eq!(early["payload"]["status"], "timeout", "{early}");
    let done = client.request("agent.wait", json!({"runId": "run-a", "timeoutMs": 15000})).await;
    assert_eq!(done["payload"]["status"], "ok", "the wait's timeout did not stop the run: {done}");
    assert!(done["payload"]["startedAt"].is_string() && done["payload"]["endedAt"].is_string());
    // `agent` without a sessionKey runs in the agent's main session.
    let history = client.request("chat.history", json!({"sessionKey": "agent:main:main"})).await;
    let last = history["payload"]["messages"].as_array().and_then(|m| m.last().cloned()).unwrap_or_default();
    assert_eq!(last["text"], "The answer is 42.", "a run reported ended has its transcript saved: {history}");

    // A waiter that comes after the end still gets the answer.
    let (mut late, _) = Client::connect(&gw, "late").await;
    let snapshot = late.request("agent.wait", json!({"runId": "run-a", "timeoutMs": 0})).await;
    assert_eq!(snapshot["payload"]["status"], "ok");
    // An unknown run is not waited for, however long the client offers to wait.
    let unknown = late.request("agent.wait", json!({"runId": "nope", "timeoutMs": 1_000_000_000_000u64})).await;
    assert_eq!(unknown["error"]["code"], "NOT_FOUND");
}

#[tokio::test]
async fn a_repeated_idempotency_key_returns_the_first_answer_and_runs_once() {
    let gw = gateway(Config::default()).await;
    gw.fake.push(Turn::text(["once"]));
    gw.fake.push(Turn::text(["twice?"]));
    let (mut client, _) = Client::connect(&gw, "cli").await;
    let first = client.request("agent", json!({"message": "hi", "idempotencyKey": "same"})).await;
    let again = client.request("agent", json!({"message": "hi", "idempotencyKey": "same"})).await;
    assert_eq!(first["payload"], again["payload"]);
    let done = client.request("agent.wait", json!({"runId": "same"})).await;
    assert_eq!(done["payload"]["status"], "ok");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(gw.fake.requests().len(), 1, "the retry started nothing");
}

#[tokio::test]
async fn bad_params_are_invalid_requests() {
    let gw = gateway(Config::default()).await;
    let (mut client, _) = Client::connect(&gw, "cli").await;
    let cases = [
        json!({"message": "", "idempotencyKey": "k1"}),
        json!({"message": "hi", "idempotencyKey": "k2", "colour": "blue"}),
        json!({"message": "hi", "idempotencyKey": "k3", "sessionKey": "not a key"}),
        json!({"message": "hi", "idempotencyKey": "k4", "agentId": "other"}),
        json!({"message": "hi", "idempotencyKey": "k5", "sessionKey": "agent:other:main"}),
        json!({"message": "hi"}),
    ];
    for params in cases {
        let answer = client.request("agent", params.clone()).await;
        assert_eq!(answer["error"]["code"], "INVALID_REQUEST", "{params} → {answer}");
    }
    assert!(gw.fake.requests().is_empty());
}

#[tokio::test]
async fn malformed_frames_are_answered_and_nothing_else_is_disturbed() {
    let gw = gateway(Config::default()).await;
    let (mut client, _) = Client::connect(&gw, "a").await;
    let (mut other, _) = Client::connect(&gw, "b").await;
    client.send_text("{not json").await;
    let answer = client.frame().await.unwrap();
    assert_eq!((answer["type"].as_str(), answer["error"]["code"].as_str()), (Some("res"), Some("INVALID_REQUEST")));
    client.send_text(r#"{"type":"req","id":"x","method":"no.such"}"#).await;
    assert_eq!(client.response("x").await["error"]["code"], "INVALID_REQUEST");
    assert_eq!(client.request("health", json!({})).await["payload"]["ok"], true, "the socket is still open");
    assert_eq!(other.request("health", json!({})).await["payload"]["ok"], true);
}

#[tokio::test]
async fn chat_send_streams_throttled_deltas_then_the_full_final() {
    let gw = gateway(Config::default()).await;
    let pieces: Vec<String> = (0..30).map(|i| format!("word{i} ")).collect();
    gw.fake.push(Turn::Reply(Reply::text(pieces.clone()).with_chunk_delay(Duration::from_millis(15))));
    let (mut client, hello) = Client::connect(&gw, "browser").await;
    let sent = client.request("chat.send", json!({"message": "talk to me", "idempotencyKey": "c1"})).await;
    assert_eq!(sent["payload"]["sessionKey"], hello["sessionKey"]);
    let events = client.chat_events("c1").await;
    let full = pieces.concat().trim().to_owned();
    let (last, deltas) = events.split_last().unwrap();
    assert_eq!(last["state"], "final");
    assert_eq!(last["message"]["text"].as_str().map(str::trim), Some(full.as_str()));
    assert!(!deltas.is_empty() && deltas.iter().all(|event| event["state"] == "delta"));
    assert!(deltas.len() < pieces.len(), "30 pieces 15 ms apart are merged into fewer deltas: {}", deltas.len());
    assert_eq!(
        deltas.last().unwrap()["message"]["text"].as_str().map(str::trim),
        Some(full.as_str()),
        "the whole text is flushed as a last delta before the final"
    );
    let texts: Vec<&str> = deltas.iter().filter_map(|event| event["message"]["text"].as_str()).collect();
    assert!(texts.windows(2).all(|pair| pair[1].starts_with(pair[0])), "each delta carries the text so far");

    // The `agent` events carry each piece and the text so far (SPEC §6.3), though a run's
    // events carry only the piece.
    let mut agent_deltas = Vec::new();
    while let Some(at) = client.events.iter().position(|frame| {
        frame["event"] == "agent"
            && frame["payload"]["stream"] == "assistant"
            && frame["payload"]["data"]["type"] == "delta"
    }) {
        agent_deltas.push(client.events.remove(at)["payload"]["data"].clone());
    }
    assert!(!agent_deltas.is_empty(), "agent events reach the client");
    let mut so_far = String::new();
    for data in &agent_deltas {
        let (delta, text) = (data["delta"].as_str().unwrap(), data["text"].as_str().unwrap());
        assert!(text.starts_with(so_far.as_str()) && text.ends_with(delta), "{data} after {so_far:?}");
        text.clone_into(&mut so_far);
    }
    if agent_deltas.len() == pieces.len() {
        assert_eq!(so_far, pieces.concat(), "no event was dropped, so the last one has the whole text");
    }

    let history = client.request("chat.history", json!({})).await;
    let messages = history["payload"]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{history}");
    assert_eq!((messages[0]["role"].as_str(), messages[0]["text"].as_str()), (Some("user"), Some("talk to me")));
}

#[tokio::test]
async fn commands_from_the_web_chat_are_answered_as_a_final_of_their_own() {
    let gw = gateway(Config::default()).await;
    let (mut client, _) = Client::connect(&gw, "browser").await;
    let sent = client.request("chat.send", json!({"message": "/new", "idempotencyKey": "n1"})).await;
    assert_eq!(sent["ok"], true);
    let events = client.chat_events("n1").await;
    assert_eq!(events.len(), 1);
    assert!(events[0]["message"]["text"].as_str().unwrap().contains("new conversation"), "{events:?}");
    assert!(gw.fake.requests().is_empty(), "a command is not a run");
}

#[tokio::test]
async fn http_endpoints_answer() {
    let gw = gateway(Config::default()).await;
    let health: Value = reqwest::get(format!("http://{}/healthz", gw.address)).await.unwrap().json().await.unwrap();
    assert_eq!(health["ok"], true);
    assert!(health["channels"].as_array().unwrap().iter().any(|c| c["name"] == "webchat"), "{health}");
    let page = reqwest::get(format!("http://{}/", gw.address)).await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    let page = page.text().await.unwrap();
    for script in ["markdown.js", "app.js"] {
        assert!(page.contains(&format!("src=\"{script}\"")), "the page loads {script}");
        let served = reqwest::get(format!("http://{}/{script}", gw.address)).await.unwrap();
        assert_eq!(served.status(), 200, "{script}");
        assert!(served.headers()["content-type"].to_str().unwrap().starts_with("text/javascript"), "{script}");
    }
    let extra = reqwest::get(format!("http://{}/extra", gw.address)).await.unwrap().text().await.unwrap();
    assert_eq!(extra, "mounted", "routes added with Gateway::with_routes are served");

    // A run, so the run counters have something to show.
    gw.fake.push(Turn::text(["counted"]));
    let (mut client, _) = Client::connect(&gw, "m").await;
    client.request("agent", json!({"message": "count me", "idempotencyKey": "m1"})).await;
    client.request("agent.wait", json!({"runId": "m1"})).await;
    let metrics = reqwest::get(format!("http://{}/metrics", gw.address)).await.unwrap();
    assert!(metrics.headers()["content-type"].to_str().unwrap().contains("openmetrics-text"));
    let text = metrics.text().await.unwrap();
    for family in ["ferry_runs_started", "ferry_runs_finished", "ferry_queue_depth", "ferry_model_request_seconds"] {
        assert!(text.contains(&format!("# TYPE {family}")), "{family} missing from:\n{text}");
    }
    assert!(text.contains(r#"ferry_inbound_messages_total{channel="webchat",outcome="run"}"#), "{text}");
    assert!(text.trim_end().ends_with("# EOF"));
}

#[tokio::test]
async fn a_channel_that_stops_receiving_shows_as_stopped_in_healthz() {
    let gw = gateway(Config::default()).await;
    let discord = Arc::new(ferry::channel::memory::MemoryChannel::new("discord", "default"));
    gw.dispatcher.attach(discord.clone()).await.unwrap();
    let health = || async {
        let body: Value = reqwest::get(format!("http://{}/healthz", gw.address)).await.unwrap().json().await.unwrap();
        body
    };
    let state_of = |body: &Value| {
        body["channels"].as_array().unwrap().iter().find(|c| c["name"] == "discord").unwrap()["state"].clone()
    };
    let before = health().await;
    assert_eq!((before["ok"].clone(), state_of(&before)), (json!(true), json!("running")), "{before}");

    // Its platform client gives up (say the token was revoked).
    discord.close_inbound();
    let after = tokio::time::timeout(PATIENCE, async {
        loop {
            let body = health().await;
            if state_of(&body) != "running" {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the channel shows as stopped");
    assert_eq!((after["ok"].clone(), state_of(&after)), (json!(false), json!("stopped")), "{after}");
    let webchat = after["channels"].as_array().unwrap().iter().find(|c| c["name"] == "webchat").unwrap();
    assert_eq!(webchat["state"], "running", "the others are unaffected");
}

#[tokio::test]
async fn agent_can_deliver_its_reply_to_a_chat_on_another_channel() {
    let gw = gateway(Config::default()).await;
    let telegram = Arc::new(ferry::channel::memory::MemoryChannel::new("telegram", "default"));
    gw.dispatcher.attach(telegram.clone()).await.unwrap();
    gw.fake.push(Turn::text(["Your daily report: all green."]));
    let (mut client, _) = Client::connect(&gw, "cron").await;
    let params = json!({
        "message": "write the daily report", "idempotencyKey": "d1",
        "deliver": true, "channel": "telegram", "to": "group:-100123"
    });
    assert_eq!(client.request("agent", params).await["ok"], true);
    let done = client.request("agent.wait", json!({"runId": "d1"})).await;
    assert_eq!(done["payload"]["status"], "ok");
    let delivered = tokio::time::timeout(PATIENCE, async {
        loop {
            if let Some(text) = telegram.sent_texts().first() {
                return text.clone();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    assert_eq!(delivered.await.unwrap(), "Your daily report: all green.");

    for (params, why) in [
        (json!({"message": "x", "idempotencyKey": "d2", "deliver": true, "channel": "telegram"}), "no `to`"),
        (
            json!({"message": "x", "idempotencyKey": "d3", "deliver": true, "channel": "discord", "to": "1"}),
            "not connected",
        ),
        (json!({"message": "x", "idempotencyKey": "d4", "channel": "telegram", "to": "1"}), "without deliver"),
    ] {
        assert_eq!(client.request("agent", params).await["error"]["code"], "INVALID_REQUEST", "{why}");
    }
}

#[tokio::test]
async fn a_silent_client_is_dropped_after_the_handshake_window_and_oversized_frames_close_the_socket() {
    let gw = gateway(Config::default()).await;
    let mut silent = Client::open(&gw).await;
    let waited = std::time::Instant::now();
    assert!(silent.frame().await.is_none(), "no connect within 10 s: the socket is closed");
    assert!(waited.elapsed() >= Duration::from_secs(9), "not before the window ends");

    let (mut client, _) = Client::connect(&gw, "big").await;
    let huge = format!(r#"{{"type":"req","id":"1","method":"health","params":{{"pad":"{}"}}}}"#, "x".repeat(2 << 20));
    let _ = client.ws.send(Message::Text(huge.clone().into())).await;
    let (_, close) = client.until_closed().await;
    let (code, reason) = close.expect("a close frame, not a reset");
    assert_eq!((code, reason.as_str()), (1009, "frame over 1048576 bytes"), "message too big");
    // The same before the handshake.
    let mut early = Client::open(&gw).await;
    let _ = early.ws.send(Message::Text(huge.into())).await;
    assert_eq!(early.until_closed().await.1.map(|(code, _)| code), Some(1009), "before connect too");
    let (mut other, _) = Client::connect(&gw, "small").await;
    assert_eq!(other.request("health", json!({})).await["payload"]["ok"], true, "the gateway carries on");
}

#[tokio::test]
async fn a_frame_that_is_not_utf8_is_answered_invalid_request_and_closed_with_1007() {
    use tokio_tungstenite::tungstenite::protocol::frame::Frame;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
    let gw = gateway(Config::default()).await;
    let (mut client, _) = Client::connect(&gw, "garbled").await;
    let bytes = b"{\"type\":\"req\",\"id\":\"1\",\"method\":\"health\xff\xfe\"}".to_vec();
    client.ws.send(Message::Frame(Frame::message(bytes, OpCode::Data(Data::Text), true))).await.unwrap();
    let (frames, close) = client.until_closed().await;
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0]["error"]["code"], "INVALID_REQUEST", "{frames:?}");
    assert_eq!(frames[0]["id"], Value::Null);
    assert_eq!(close.map(|(code, _)| code), Some(1007), "invalid frame payload data");

    let mut early = Client::open(&gw).await;
    let bytes = b"{\"type\":\"req\",\"id\":\"c\",\"method\":\"connect\xff\"}".to_vec();
    early.ws.send(Message::Frame(Frame::message(bytes, OpCode::Data(Data::Text), true))).await.unwrap();
    let (frames, close) = early.until_closed().await;
    assert_eq!(frames.first().map(|frame| frame["error"]["code"].clone()), Some(json!("INVALID_REQUEST")));
    assert_eq!(close.map(|(code, _)| code), Some(1007), "before connect too");
}

#[tokio::test]
async fn a_message_over_the_inbound_limit_is_refused_with_a_clear_error() {
    let mut config = Config::default();
    config.messages.max_inbound_chars = 1_000;
    let gw = gateway(config).await;
    let (mut client, _) = Client::connect(&gw, "verbose").await;
    for method in ["chat.send", "agent"] {
        let params = json!({"message": "é".repeat(1_001), "idempotencyKey": format!("{method}-long")});
        let refused = client.request(method, params).await;
        assert_eq!(refused["error"]["code"], "INVALID_REQUEST", "{refused}");
        let message = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("1001 characters") && message.contains("messages.max_inbound_chars"), "{message}");
    }
    let fits = client.request("chat.send", json!({"message": "é".repeat(1_000), "idempotencyKey": "fits"})).await;
    assert_eq!(fits["ok"], true, "exactly at the limit is fine: {fits}");
    assert_eq!(gw.fake.requests().len(), 0, "nothing too long reached the model");
}

#[tokio::test]
async fn a_connection_may_not_pile_up_unanswered_requests() {
    let gw = gateway(Config::default()).await;
    gw.fake.push(Turn::Reply(Reply::text(["slow ", "reply"]).with_chunk_delay(Duration::from_secs(3))));
    let (mut client, _) = Client::connect(&gw, "greedy").await;
    client.request("chat.send", json!({"message": "take your time", "idempotencyKey": "slow"})).await;
    for id in 0..=256 {
        let frame = json!({"type": "req", "id": format!("w{id}"), "method": "agent.wait",
            "params": {"runId": "slow", "timeoutMs": 1000}});
        client.send_text(&frame.to_string()).await;
    }
    let refused = client.response("w256").await;
    assert_eq!(refused["error"]["code"], "UNAVAILABLE", "{refused}");
    assert_eq!(refused["error"]["retryable"], true);
    assert_eq!(client.response("w0").await["payload"]["status"], "timeout", "the others are answered in time");
}

#[tokio::test]
async fn a_request_steered_into_a_running_run_ends_with_that_run() {
    let mut config = Config::default();
    config.messages.queue.mode = ferry::config::QueueMode::Steer;
    let gw = gateway(config).await;
    gw.fake
        .push(Turn::Reply(Reply::text(["Here ", "is ", "the ", "plan."]).with_chunk_delay(Duration::from_millis(300))));
    gw.fake.push(Turn::text(["Sure, in French then."]));
    let (mut client, _) = Client::connect(&gw, "steerer").await;
    client.request("chat.send", json!({"message": "make a plan", "idempotencyKey": "s1"})).await;
    tokio::time::timeout(PATIENCE, async {
        while !gw.dispatcher.scheduler().status("agent:main:webchat:direct:steerer").streaming {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap();
    client.request("chat.send", json!({"message": "in French please", "idempotencyKey": "s2"})).await;
    let waited = client.request("agent.wait", json!({"runId": "s2", "timeoutMs": 15000})).await;
    assert_eq!(waited["payload"]["status"], "ok", "the run that took it answered it: {waited}");
    assert_eq!(gw.fake.requests().len(), 2, "one run, two model turns");
}

/// Two agents: `main` (the default) and `helper`, whose model the fake sees as `helper`.
fn two_agents() -> Config {
    let mut config = Config::default();
    config.agents.list.insert("main".into(), Default::default());
    let helper = ferry::config::AgentSettings { name: Some("Helper".into()), ..Default::default() };
    config.agents.list.insert("helper".into(), helper);
    config
}

#[tokio::test]
async fn clients_pick_an_agent_by_id_and_each_agent_keeps_its_own_sessions() {
    let gw = gateway(two_agents()).await;
    let (mut client, hello) = Client::connect(&gw, "browser").await;
    assert_eq!(
        hello["agents"],
        json!([
            {"id": "main", "name": "main", "default": true, "sessionKey": "agent:main:webchat:direct:browser"},
            {"id": "helper", "name": "Helper", "default": false, "sessionKey": "agent:helper:webchat:direct:browser"},
        ]),
        "{hello}"
    );
    assert_eq!(hello["sessionKey"], "agent:main:webchat:direct:browser", "the default agent's conversation");

    gw.fake.push(Turn::text(["from helper"]));
    let sent = client.request("chat.send", json!({"message": "hi", "idempotencyKey": "h1", "agentId": "Helper"})).await;
    assert_eq!(sent["payload"]["sessionKey"], "agent:helper:webchat:direct:browser", "{sent}");
    client.chat_events("h1").await;
    gw.fake.push(Turn::text(["from main"]));
    client.request("chat.send", json!({"message": "hi", "idempotencyKey": "m1"})).await;
    client.chat_events("m1").await;
    let models: Vec<String> = gw
        .fake
        .requests()
        .iter()
        .map(|request| request.body["model"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(models, ["helper", "test"], "each agent's runner answered its own session");

    gw.fake.push(Turn::text(["main session"]));
    let accepted = client.request("agent", json!({"message": "x", "idempotencyKey": "a1", "agentId": "helper"})).await;
    assert_eq!(accepted["payload"]["sessionKey"], "agent:helper:main", "{accepted}");
    client.request("agent.wait", json!({"runId": "a1", "timeoutMs": 15000})).await;

    let listed = client.request("sessions.list", json!({"agentId": "helper"})).await;
    let keys: Vec<&str> =
        listed["payload"]["sessions"].as_array().unwrap().iter().filter_map(|s| s["key"].as_str()).collect();
    assert_eq!(keys.len(), 2, "{listed}");
    assert!(keys.iter().all(|key| key.starts_with("agent:helper:")), "{keys:?}");
    let all = client.request("sessions.list", json!({})).await;
    assert_eq!(all["payload"]["sessions"].as_array().unwrap().len(), 3, "{all}");

    let refused = [
        ("chat.send", json!({"message": "hi", "idempotencyKey": "r1", "agentId": "sales"})),
        (
            "agent",
            json!({"message": "hi", "idempotencyKey": "r2", "agentId": "helper", "sessionKey": "agent:main:main"}),
        ),
        ("sessions.list", json!({"agentId": "sales"})),
    ];
    for (method, params) in refused {
        let answer = client.request(method, params.clone()).await;
        assert_eq!(answer["error"]["code"], "INVALID_REQUEST", "{method} {params} → {answer}");
    }
    let unknown =
        client.request("chat.send", json!({"message": "hi", "idempotencyKey": "r3", "agentId": "sales"})).await;
    assert!(unknown["error"]["message"].as_str().unwrap().contains("agents: main, helper"), "{unknown}");
}

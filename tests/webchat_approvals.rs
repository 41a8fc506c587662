//! Requests to approve a command (`[tools.exec] ask`) through the gateway, as the web chat
//! sees them: the `chat` final that asks names the request, `chat.history` has it where it
//! happened — pending while it waits (so a reloaded page can offer the buttons again),
//! settled once it was approved, denied, withdrawn or timed out — and an `approval` event
//! tells every connection of the session when it settles.

#[path = "common/gateway.rs"]
mod gw;
#[path = "common/runner.rs"]
mod runner;

use ferry::agent::tools::ToolProfile;
use ferry::config::{Config, ExecAsk, SandboxMode};
use ferry_fakes::{ToolCall, Turn};
use gw::{Client, Gw, gateway_with_commands};
use serde_json::{Value, json};

/// The browser's client id, and the conversation the gateway makes of it.
const BROWSER: &str = "browser";
const SESSION: &str = "agent:main:webchat:direct:browser";

/// Every command is asked for, and runs on the host once approved (no sandbox needed).
fn asking(approval_timeout: u64) -> Config {
    let mut config = Config::default();
    config.tools.profile = ToolProfile::Coding;
    config.tools.exec.ask = ExecAsk::Always;
    config.tools.exec.approval_timeout = approval_timeout;
    config.tools.sandbox.mode = SandboxMode::Off;
    config
}

/// The model's next turn: `exec` with `command`, as call `call_id`.
fn runs(gw: &Gw, call_id: &str, command: &str) {
    let arguments = json!({ "command": command }).to_string();
    gw.fake.push(Turn::tool_calls([ToolCall::new(call_id, "exec", arguments)]));
}

async fn send(client: &mut Client, message: &str, key: &str) {
    let sent = client.request("chat.send", json!({"message": message, "idempotencyKey": key})).await;
    assert_eq!(sent["ok"], true, "{sent}");
}

/// The `chat` final that asks the chat to approve what call `call_id` of run `run_id` runs.
async fn asked(client: &mut Client, run_id: &str, call_id: &str) -> Value {
    let events = client.chat_events(&format!("{run_id}:{call_id}:approval")).await;
    let request = events.last().cloned().unwrap_or_default();
    assert_eq!(request["state"], "final", "{events:?}");
    request
}

/// The id of the request in a `chat` final or a history entry.
fn id_of(message: &Value) -> String {
    message["approval"]["id"].as_str().unwrap_or_else(|| panic!("no approval in {message}")).to_owned()
}

/// The `approval` event that settles request `id`: its payload.
async fn settled(client: &mut Client, id: &str) -> Value {
    let event = client
        .event(|frame| {
            frame["event"] == "approval" && frame["payload"]["id"] == id && frame["payload"]["state"] != "pending"
        })
        .await;
    event["payload"].clone()
}

/// The run's terminal `chat` event.
async fn ended(client: &mut Client, run_id: &str) -> Value {
    client.chat_events(run_id).await.pop().unwrap_or_default()
}

async fn history(client: &mut Client) -> Vec<Value> {
    let history = client.request("chat.history", json!({})).await;
    history["payload"]["messages"].as_array().cloned().unwrap_or_else(|| panic!("no messages in {history}"))
}

/// Each message of a history as (role, text), a request as ("approval", "<id> <state> <by>").
fn shown(messages: &[Value]) -> Vec<(String, String)> {
    let describe = |m: &Value| match m["role"].as_str() {
        Some("approval") => {
            let a = &m["approval"];
            format!("{} {} {}", a["id"].as_str().unwrap_or("?"), a["state"].as_str().unwrap_or("?"), a["by"])
        }
        _ => m["text"].as_str().unwrap_or_default().to_owned(),
    };
    messages.iter().map(|m| (m["role"].as_str().unwrap_or_default().to_owned(), describe(m))).collect()
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected.iter().map(|(role, text)| ((*role).to_owned(), (*text).to_owned())).collect()
}

#[tokio::test]
async fn a_waiting_request_is_in_the_history_after_a_reload_and_shows_approved_where_it_happened() {
    let gw = gateway_with_commands(asking(300)).await;
    let command = "echo approved-$((6*7))";
    runs(&gw, "call_exec", command);
    gw.fake.push(Turn::text(["It printed approved-42."]));
    let (mut page, _) = Client::connect(&gw, BROWSER).await;
    send(&mut page, "Run the check", "r1").await;

    let request = asked(&mut page, "r1", "call_exec").await;
    let id = id_of(&request);
    assert_eq!(
        (request["approval"]["state"].as_str(), request["approval"]["command"].as_str()),
        (Some("pending"), Some(command))
    );
    let text = request["message"]["text"].as_str().unwrap_or_default().to_owned();
    assert!(text.contains(&format!("/approve {id}")) && text.contains(command), "{text}");

    // A reload: a new connection of the same browser asks for the history.
    let (mut reloaded, _) = Client::connect(&gw, BROWSER).await;
    let messages = history(&mut reloaded).await;
    let waiting: Vec<&Value> = messages.iter().filter(|m| m["role"] == "approval").collect();
    assert_eq!(waiting.len(), 1, "{messages:?}");
    assert_eq!(
        (waiting[0]["approval"]["id"].as_str(), waiting[0]["approval"]["state"].as_str()),
        (Some(id.as_str()), Some("pending"))
    );
    assert_eq!(waiting[0]["text"], text.as_str(), "the request as the chat was asked");
    assert_eq!(messages.last(), Some(waiting[0]), "nothing after it yet: {messages:?}");

    send(&mut reloaded, &format!("/approve {id}"), "a1").await;
    for connection in [&mut page, &mut reloaded] {
        let answered = settled(connection, &id).await;
        assert_eq!((answered["state"].as_str(), answered["by"].as_str()), (Some("approved"), Some(BROWSER)));
        assert_eq!(answered["sessionKey"], SESSION);
    }
    assert_eq!(ended(&mut reloaded, "r1").await["message"]["text"], "It printed approved-42.");
    let result = gw.fake.requests().last().map(|r| r.body.to_string()).unwrap_or_default();
    assert!(result.contains("approved-42") && result.contains("exit code 0"), "the command ran: {result}");

    let (mut again, _) = Client::connect(&gw, BROWSER).await;
    assert_eq!(
        shown(&history(&mut again).await),
        pairs(&[
            ("user", "Run the check"),
            ("approval", &format!("{id} approved \"{BROWSER}\"")),
            ("assistant", "It printed approved-42."),
        ]),
        "the request sits between the question and the answer, settled"
    );
}

#[tokio::test]
async fn a_denied_request_and_one_whose_run_was_stopped_show_settled_and_cannot_be_answered_again() {
    let gw = gateway_with_commands(asking(300)).await;
    runs(&gw, "call_a", "echo one");
    gw.fake.push(Turn::text(["I did not run it."]));
    runs(&gw, "call_b", "echo two");
    let (mut page, _) = Client::connect(&gw, BROWSER).await;

    send(&mut page, "first", "r1").await;
    let denied = id_of(&asked(&mut page, "r1", "call_a").await);
    send(&mut page, &format!("/deny {denied}"), "d1").await;
    let answered = settled(&mut page, &denied).await;
    assert_eq!((answered["state"].as_str(), answered["by"].as_str()), (Some("denied"), Some(BROWSER)));
    assert_eq!(ended(&mut page, "r1").await["message"]["text"], "I did not run it.");

    send(&mut page, "second", "r2").await;
    let stopped = id_of(&asked(&mut page, "r2", "call_b").await);
    send(&mut page, "/stop", "s1").await;
    assert_eq!(settled(&mut page, &stopped).await["state"], "withdrawn");
    assert_eq!(ended(&mut page, "r2").await["state"], "aborted");

    for (id, key) in [(&denied, "late1"), (&stopped, "late2")] {
        send(&mut page, &format!("/approve {id}"), key).await;
        let answer = page.chat_events(key).await.pop().unwrap_or_default();
        let answer = answer["message"]["text"].as_str().unwrap_or_default().to_owned();
        assert!(answer.contains("cannot approve"), "a settled request takes no answer: {answer}");
    }

    let messages = history(&mut page).await;
    assert_eq!(
        shown(&messages)[..3],
        pairs(&[
            ("user", "first"),
            ("approval", &format!("{denied} denied \"{BROWSER}\"")),
            ("assistant", "I did not run it.")
        ]),
        "{messages:?}"
    );
    let states: Vec<(String, String)> = messages
        .iter()
        .filter(|m| m["role"] == "approval")
        .map(|m| (id_of(m), m["approval"]["state"].as_str().unwrap_or_default().to_owned()))
        .collect();
    assert_eq!(states, [(denied, "denied".to_owned()), (stopped, "withdrawn".to_owned())], "{messages:?}");
    assert_eq!(gw.fake.requests().len(), 3, "neither command ran past its request");
}

#[tokio::test]
async fn a_request_nobody_answers_times_out_and_shows_so_in_the_history() {
    let gw = gateway_with_commands(asking(1)).await;
    runs(&gw, "call_exec", "echo never");
    gw.fake.push(Turn::text(["Nobody approved it."]));
    let (mut page, _) = Client::connect(&gw, BROWSER).await;
    send(&mut page, "Run it", "r1").await;
    let id = id_of(&asked(&mut page, "r1", "call_exec").await);

    let timed_out = settled(&mut page, &id).await;
    assert_eq!((timed_out["state"].as_str(), timed_out.get("by")), (Some("timedOut"), None));
    assert_eq!(ended(&mut page, "r1").await["message"]["text"], "Nobody approved it.");
    assert_eq!(
        shown(&history(&mut page).await),
        pairs(&[
            ("user", "Run it"),
            ("approval", &format!("{id} timedOut null")),
            ("assistant", "Nobody approved it.")
        ])
    );
}

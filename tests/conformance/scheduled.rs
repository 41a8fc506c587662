//! Scheduled jobs (issue 39), end to end on each platform: a reminder the `cron` tool made
//! arrives in its chat once, with no model call; an `every` job fires until it is removed;
//! a reminder due while the gateway was killed fires once, marked late, after the restart;
//! a task's final reply is delivered once.

use std::time::Duration;

use chrono::{DateTime, Utc};
use ferry_fakes::{ToolCall, Turn};
use serde_json::{Value, json};

use super::{Harness, Platform, USER, last_tool_result, visible};

/// A `cron` tool call with these arguments.
fn cron(arguments: Value) -> Turn {
    Turn::tool_calls([ToolCall::new("call_cron", "cron", arguments.to_string())])
}

/// The `add` result the model was given in request `index`.
async fn added<P: Platform>(h: &Harness<P>, index: usize) -> Value {
    let result = last_tool_result(&h.request(index).await);
    let value: Value = serde_json::from_str(&result).unwrap_or_else(|_| panic!("{}: not JSON: {result}", P::NAME));
    assert!(value["id"].is_string(), "{}: the job was added: {value}", P::NAME);
    value
}

fn next_run(added: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(added["next_run_utc"].as_str().expect("next_run_utc")).expect("RFC 3339").to_utc()
}

/// Sleeps until `at` has passed (an absence is only proven by letting its time go by).
async fn until_past(at: DateTime<Utc>) {
    let left = (at - Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(left + Duration::from_millis(500)).await;
}

/// "Remind me in 2 seconds": the confirmation, then the reminder word for word, once, and
/// no model call for it.
pub async fn a_reminder_the_tool_made_arrives_once_without_a_model_call<P: Platform>() {
    let h = Harness::<P>::start("[agents.defaults]\nuser_timezone = \"Europe/Berlin\"").await;
    h.openai.push(cron(json!({ "action": "add", "schedule": { "in": "2s" }, "text": "Stretch your legs" })));
    h.openai.push(Turn::text(["I'll remind you."]));
    h.platform.dm(USER, "remind me in 2 seconds to stretch").await;
    let job = added(&h, 1).await;
    assert_eq!(job["tz"], "Europe/Berlin", "{}: the agent's zone: {job}", P::NAME);
    assert!(job["next_run_local"].as_str().unwrap_or_default().ends_with("+01:00"), "{}: {job}", P::NAME);
    h.until(|p| p.dm_messages(USER), |shown| visible(shown).contains(&"Stretch your legs".to_owned())).await;
    let shown = h.after_sentinel(USER).await;
    assert_eq!(visible(&shown), ["I'll remind you.", "Stretch your legs", "pong"], "{}", P::NAME);
    assert_eq!(h.openai.requests().len(), 3, "{}: the reminder itself asked no model", P::NAME);
    assert_eq!(counter(&h, "ferry_cron_fires_total").await, 1, "{}", P::NAME);
    counter_reaches(&h, "ferry_cron_fires_ended_total{status=\"ok\"}", 1).await;
    let health = crate::daemon::health(h.daemon.as_ref().expect("running").port).await;
    assert_eq!(health["scheduler"]["enabled"], true, "{}: the scheduler is in /healthz: {health}", P::NAME);
}

/// An `every` job fires again and again; `/jobs rm` stops it.
pub async fn an_every_job_fires_until_it_is_removed<P: Platform>() {
    let h = Harness::<P>::start("").await;
    h.openai
        .push(cron(json!({ "action": "add", "schedule": { "every": "10s" }, "text": "Drink water", "name": "water" })));
    h.openai.push(Turn::text(["Every 10 seconds, then."]));
    h.platform.dm(USER, "remind me to drink water every 10 seconds").await;
    let job = added(&h, 1).await;
    let id = job["id"].as_str().expect("an id").to_owned();
    let fired = |shown: &Vec<super::Shown>| visible(shown).iter().filter(|text| *text == "Drink water").count();
    h.until(|p| p.dm_messages(USER), |shown| fired(shown) >= 2).await;
    h.platform.dm(USER, &format!("/jobs rm {id}")).await;
    h.until(|p| p.dm_messages(USER), |shown| visible(shown).iter().any(|text| text.contains("Removed"))).await;
    let count = fired(&h.platform.dm_messages(USER));
    // The slot after the removal passes without a fire.
    until_past(Utc::now() + chrono::TimeDelta::seconds(11)).await;
    let shown = h.after_sentinel(USER).await;
    assert_eq!(fired(&shown), count, "{}: nothing fired after the removal: {:?}", P::NAME, visible(&shown));
    assert!(count >= 2, "{}", P::NAME);
}

/// A reminder due while the gateway was killed (SIGKILL) fires once after the restart,
/// saying it is late.
pub async fn a_reminder_due_while_the_gateway_was_down_fires_once_late<P: Platform>() {
    let mut h = Harness::<P>::start("").await;
    h.openai.push(cron(json!({ "action": "add", "schedule": { "in": "3s" }, "text": "Call mum" })));
    h.openai.push(Turn::text(["Noted."]));
    h.platform.dm(USER, "remind me in 3 seconds to call mum").await;
    let job = added(&h, 1).await;
    h.until(|p| p.dm_messages(USER), |shown| visible(shown).contains(&"Noted.".to_owned())).await;
    let home = h.daemon.take().expect("running").crash();
    // Down until well past the slot: the fire comes late.
    until_past(next_run(&job) + chrono::TimeDelta::seconds(31)).await;
    h.relaunch(home).await;
    let reminder = |shown: &Vec<super::Shown>| {
        visible(shown).into_iter().filter(|text| text.starts_with("Call mum")).collect::<Vec<_>>()
    };
    let got = h.until(|p| p.dm_messages(USER), |shown| !reminder(shown).is_empty()).await;
    let text = &reminder(&got)[0];
    assert!(text.contains("(late: was due "), "{}: marked late: {text:?}", P::NAME);
    let shown = h.after_sentinel(USER).await;
    assert_eq!(reminder(&shown).len(), 1, "{}: once: {:?}", P::NAME, visible(&shown));
    assert_eq!(counter(&h, "ferry_cron_late_fires_total").await, 1, "{}: counted late", P::NAME);
}

/// A task runs the agent when it is due, told that it is a scheduled run and the local
/// time; its final reply is delivered once.
pub async fn a_task_jobs_final_reply_is_delivered_once<P: Platform>() {
    let h = Harness::<P>::start("[agents.defaults]\nuser_timezone = \"America/New_York\"").await;
    h.openai.push(cron(json!({ "action": "add", "schedule": { "in": "2s" }, "task": "Summarize the open issues" })));
    h.openai.push(Turn::text(["I'll do that in a moment."]));
    h.openai.push(Turn::text(["Three issues are open."]));
    h.platform.dm(USER, "summarize the open issues in 2 seconds").await;
    added(&h, 1).await;
    let fire = h.request(2).await;
    let system = fire.body["messages"][0]["content"].as_str().unwrap_or_default().to_owned();
    assert!(system.contains("scheduled run"), "{}: told it is scheduled: {system}", P::NAME);
    assert!(system.contains("America/New_York"), "{}: told the local time: {system}", P::NAME);
    h.until(|p| p.dm_messages(USER), |shown| visible(shown).contains(&"Three issues are open.".to_owned())).await;
    let shown = h.after_sentinel(USER).await;
    assert_eq!(visible(&shown), ["I'll do that in a moment.", "Three issues are open.", "pong"], "{}", P::NAME);
}

/// A counter of the gateway's `/metrics`, 0 until it is exported.
async fn counter<P: Platform>(h: &Harness<P>, series: &str) -> u64 {
    let port = h.daemon.as_ref().expect("running").port;
    let metrics = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await.unwrap().text().await.unwrap();
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series).and_then(|rest| rest.trim().parse::<f64>().ok()))
        .map_or(0, |value| value as u64)
}

/// Waits until the counter `series` reaches `count`.
async fn counter_reaches<P: Platform>(h: &Harness<P>, series: &str, count: u64) {
    let reached = tokio::time::timeout(crate::daemon::PATIENCE, async {
        while counter(h, series).await < count {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(reached.is_ok(), "{}: {series} never reached {count}", P::NAME);
}

/// The heartbeat (on the platform whose DM chat id is the user's id): no model call while
/// HEARTBEAT.md is missing, over several beats; with tasks in it, `HEARTBEAT_OK` sends
/// nothing and the same alert is sent once.
pub async fn the_heartbeat_costs_nothing_without_tasks_and_alerts_once<P: Platform>() {
    let config = format!(
        "[agents.defaults.heartbeat]\nevery = \"10s\"\ntarget = \"{}:{USER}\"\nprompt = \"Check the list.\"",
        P::NAME
    );
    let h = Harness::<P>::start(&config).await;
    // The user has talked to the bot (a bot cannot open a chat with someone who has not).
    h.openai.push(Turn::text(["Hello."]));
    h.platform.dm(USER, "hi").await;
    h.until(|p| p.dm_messages(USER), |shown| !shown.is_empty()).await;
    let skipped = "ferry_cron_fires_ended_total{status=\"skipped\"}";
    counter_reaches(&h, skipped, 2).await;
    assert_eq!(h.openai.requests().len(), 1, "{}: no model call without HEARTBEAT.md", P::NAME);

    let home = h.daemon.as_ref().and_then(|daemon| daemon.home.as_ref()).expect("running").path().to_owned();
    let checklist = home.join(".local/share/ferry/workspace/HEARTBEAT.md");
    std::fs::create_dir_all(checklist.parent().unwrap()).unwrap();
    std::fs::write(&checklist, "# Heartbeat\n\n- Tell me if the build is red.\n").unwrap();
    h.openai.push(Turn::text(["HEARTBEAT_OK"]));
    h.openai.push(Turn::text(["The build is red."]));
    h.openai.push(Turn::text(["The build is red."]));
    let third = h.request(3).await;
    let prompt = third.body.to_string();
    assert!(prompt.contains("Tell me if the build is red."), "{}: the checklist is in the beat: {prompt}", P::NAME);
    // Headings only again: the beats after these make no call.
    std::fs::write(&checklist, "# Heartbeat\n").unwrap();
    counter_reaches(&h, "ferry_cron_fires_ended_total{status=\"ok\"}", 3).await;
    let shown = h.after_sentinel(USER).await;
    assert_eq!(visible(&shown), ["Hello.", "The build is red.", "pong"], "{}: OK silent, the alert once", P::NAME);
}

//! The web chat in a real browser: the `ferry gateway` binary (answered by the offline echo
//! provider, or by the fake OpenAI server when a test needs a particular reply), headless
//! Chromium driven through chromedriver (WebDriver), and the page doing what a person does —
//! wait for "connected", type, press Enter, read the streamed answer, reload and see the
//! history, start a new chat, pick another agent — plus what a person lives through: a second
//! browser, a gateway that goes away and comes back, a long conversation.
//!
//! Needs `/usr/bin/chromium` and `/usr/bin/chromedriver` (Debian: `chromium chromium-driver`).
//! Without them each test prints a loud notice and passes, unless `FERRY_REQUIRE_BROWSER=1`
//! (set by `.ci/run`), in which case it fails. Nothing is downloaded. The harness (gateway,
//! chromedriver, page helpers) is in `common/browser.rs`.
//!
//! Every wait polls for a visible condition under a generous bound; none asserts on timing.
//! The one figure measured (how long 500 messages of history take to show) is printed only.
#![cfg(unix)]

#[path = "common/browser.rs"]
mod harness;

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use fantoccini::{Client, Locator};
use ferry::agent::{ChatMessage, Usage};
use ferry::config::ResetConfig;
use ferry::session::SessionStore;
use ferry::state::Database;
use ferry::state::sqlite::SqliteSessionStore;
use ferry_fakes::{FakeOpenAi, Reply, ToolCall, Turn};
use harness::{
    PAGE_BOUND, World, banner_shown, client_id, final_answer_containing, hero_shown, page_text, poll, screenshot, send,
    session_key, texts, wait_for_hero, wait_for_history_with, wait_for_state,
};
use serde_json::json;

const MESSAGE: &str = "Hello from the browser test";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_chats_with_the_echo_agent_in_a_real_browser() {
    let Some(world) = World::start(None).await else { return };
    let client = world.browser().await;
    let outcome = chat_like_a_person(&client, &world).await;
    world.finish(outcome, [client]).await;
}

async fn chat_like_a_person(client: &Client, world: &World) -> Result<()> {
    client.goto(&world.gateway.url).await.context("open the page")?;
    wait_for_state(client, "connected").await?;
    let picker = client.find(Locator::Css(AGENT_PICKER)).await?;
    ensure!(!picker.is_displayed().await?, "one agent: the page offers no choice of agent");

    send(client, MESSAGE).await?;
    let answer = final_answer_containing(client, MESSAGE).await?;
    ensure!(answer.trim() == MESSAGE, "the echo provider answers with the text itself, got {answer:?}");
    let users = texts(client, ".msg.user .msg-body").await?;
    ensure!(users.iter().any(|text| text.trim() == MESSAGE), "the user's bubble is shown: {users:?}");
    let composer = client.find(Locator::Css("#composer")).await?;
    let composer_text = composer.prop("value").await?.unwrap_or_default();
    ensure!(composer_text.is_empty(), "Enter sends and clears the composer, left {composer_text:?}");

    screenshot(client, "webchat.png").await?;

    // A reload starts a new socket; the conversation comes back through chat.history.
    client.refresh().await?;
    wait_for_state(client, "connected").await?;
    wait_for_history_with(client, MESSAGE).await?;

    client.find(Locator::Css("#new-chat")).await?.click().await?;
    let notice = poll("the new conversation notice, and the old messages gone", || async {
        let notices = texts(client, ".notice").await?;
        let bodies = texts(client, ".msg .msg-body").await?;
        let notice = notices.into_iter().find(|t| t.to_lowercase().contains("new conversation"));
        Ok(notice.filter(|_| !bodies.iter().any(|t| t.contains(MESSAGE))))
    })
    .await?;
    // No emoji: where no emoji font is installed (this Chromium has none) it draws as a box.
    ensure!(notice.chars().all(|c| (c as u32) < 0x2000), "the notice has a symbol a font may lack: {notice:?}");
    ensure!(hero_shown(client).await?, "a new conversation is empty: the hero shows again");
    screenshot(client, "webchat-new-chat.png").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_browsers_get_conversations_of_their_own() {
    let Some(world) = World::start(None).await else { return };
    let first = world.browser().await;
    let second = world.browser().await;
    let outcome = two_browsers(&first, &second, &world).await;
    world.finish(outcome, [first, second]).await;
}

async fn two_browsers(first: &Client, second: &Client, world: &World) -> Result<()> {
    const FIRST: &str = "Only the first browser says this";
    const SECOND: &str = "Only the second browser says this";

    first.goto(&world.gateway.url).await?;
    wait_for_state(first, "connected").await?;
    wait_for_hero(first).await?;
    send(first, FIRST).await?;
    final_answer_containing(first, FIRST).await?;

    second.goto(&world.gateway.url).await?;
    wait_for_state(second, "connected").await?;
    // The hero shows once the history is known to be empty: the first browser's is not there.
    wait_for_hero(second).await?;
    let (first_key, second_key) = (session_key(first).await?, session_key(second).await?);
    ensure!(first_key != second_key, "each browser is a conversation of its own, both got {first_key}");
    let client_ids = [client_id(first).await?, client_id(second).await?];
    ensure!(client_ids[0] != client_ids[1], "each browser keeps its own client id: {client_ids:?}");
    ensure!(!page_text(second).await?.contains(FIRST), "the second browser shows the first one's message");

    send(second, SECOND).await?;
    final_answer_containing(second, SECOND).await?;
    ensure!(!page_text(first).await?.contains(SECOND), "the first browser saw the second one's conversation live");

    first.refresh().await?;
    wait_for_state(first, "connected").await?;
    wait_for_history_with(first, FIRST).await?;
    ensure!(session_key(first).await? == first_key, "a reload keeps the browser's conversation");
    ensure!(!page_text(first).await?.contains(SECOND), "the first browser's history has the second one's message");
    Ok(())
}

/// Two agents, both answered by the echo provider: `main` (the default, named by its id) and
/// `support`.
const TWO_AGENTS: &str = "[agents.list.main]\n\n[agents.list.support]\nname = \"Support\"";
/// The header's choice of agent.
const AGENT_PICKER: &str = "#agent";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_agents_the_picker_switches_conversations_and_a_reload_keeps_the_choice() {
    let Some(world) = World::start_with(None, TWO_AGENTS).await else { return };
    let client = world.browser().await;
    let outcome = pick_an_agent(&client, &world).await;
    world.finish(outcome, [client]).await;
}

async fn pick_an_agent(client: &Client, world: &World) -> Result<()> {
    const TO_MAIN: &str = "A question for the main agent";
    const TO_SUPPORT: &str = "A question for support";

    client.goto(&world.gateway.url).await?;
    wait_for_state(client, "connected").await?;
    let picker = client.find(Locator::Css(AGENT_PICKER)).await?;
    ensure!(picker.is_displayed().await?, "two agents: the picker shows");
    let label = texts(client, "label[for='agent']").await?;
    ensure!(label == ["Agent"], "the picker is labelled: {label:?}");
    let names = texts(client, &format!("{AGENT_PICKER} option")).await?;
    ensure!(names == ["main", "Support"], "the agents by name, the default first: {names:?}");
    ensure!(picker.prop("value").await?.as_deref() == Some("main"), "the default agent is preselected");
    let id = client_id(client).await?;
    let main_key = format!("agent:main:webchat:direct:{id}");
    let support_key = format!("agent:support:webchat:direct:{id}");
    ensure!(session_key(client).await? == main_key, "the page opens the conversation with main");
    wait_for_hero(client).await?;
    send(client, TO_MAIN).await?;
    final_answer_containing(client, TO_MAIN).await?;

    picker.select_by_label("Support").await?;
    poll("support's conversation, empty", || async {
        Ok((hero_shown(client).await? && !page_text(client).await?.contains(TO_MAIN)).then_some(()))
    })
    .await?;
    ensure!(session_key(client).await? == support_key, "the page follows the conversation with support");
    send(client, TO_SUPPORT).await?;
    final_answer_containing(client, TO_SUPPORT).await?;
    ensure!(!page_text(client).await?.contains(TO_MAIN), "main's messages show in support's conversation");
    screenshot(client, "webchat-agents.png").await?;

    // The gateway has each message in the browser's conversation with the agent it was sent to.
    let listed = world.gateway.rpc("sessions.list", json!({ "agentId": "support" })).await?;
    let keys: Vec<&str> =
        listed["sessions"].as_array().into_iter().flatten().filter_map(|s| s["key"].as_str()).collect();
    ensure!(keys == [support_key.as_str()], "support's sessions: {keys:?}");
    for (key, said, not_said) in [(&support_key, TO_SUPPORT, TO_MAIN), (&main_key, TO_MAIN, TO_SUPPORT)] {
        let history = world.gateway.rpc("chat.history", json!({ "sessionKey": key })).await?;
        let texts: Vec<&str> = history["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["text"].as_str())
            .map(str::trim)
            .collect();
        ensure!(texts == [said, said], "{key} holds its question and the echo: {texts:?}");
        ensure!(!texts.contains(&not_said), "{key} holds the other agent's message");
    }

    picker.select_by_label("main").await?;
    wait_for_history_with(client, TO_MAIN).await?;
    ensure!(!page_text(client).await?.contains(TO_SUPPORT), "support's messages show in main's conversation");

    // The choice outlives a reload.
    picker.select_by_label("Support").await?;
    wait_for_history_with(client, TO_SUPPORT).await?;
    client.refresh().await?;
    wait_for_state(client, "connected").await?;
    wait_for_history_with(client, TO_SUPPORT).await?;
    let picker = client.find(Locator::Css(AGENT_PICKER)).await?;
    ensure!(picker.prop("value").await?.as_deref() == Some("support"), "a reload keeps support picked");
    ensure!(session_key(client).await? == support_key, "a reload keeps the conversation with support");
    ensure!(!page_text(client).await?.contains(TO_MAIN), "main's messages show after the reload");

    // New chat starts over with support only; its answer shows here although the gateway
    // labels it with the browser's first conversation.
    client.find(Locator::Css("#new-chat")).await?.click().await?;
    poll("support's new conversation notice", || async {
        let notices = texts(client, ".notice").await?;
        let started = notices.iter().any(|text| text.to_lowercase().contains("new conversation"));
        Ok((started && !page_text(client).await?.contains(TO_SUPPORT)).then_some(()))
    })
    .await?;

    // An agent the gateway no longer has: the default again, main's conversation as it was.
    client.execute("localStorage.setItem('ferry.webchat.agent', 'retired');", vec![]).await?;
    client.refresh().await?;
    wait_for_state(client, "connected").await?;
    wait_for_history_with(client, TO_MAIN).await?;
    let picker = client.find(Locator::Css(AGENT_PICKER)).await?;
    ensure!(picker.prop("value").await?.as_deref() == Some("main"), "an unknown agent falls back to the default");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_reload_the_history_shows_without_the_empty_conversation_hero() {
    let Some(world) = World::start(None).await else { return };
    let client = world.browser().await;
    let outcome = reload_with_history(&client, &world).await;
    world.finish(outcome, [client]).await;
}

async fn reload_with_history(client: &Client, world: &World) -> Result<()> {
    client.goto(&world.gateway.url).await?;
    wait_for_state(client, "connected").await?;
    wait_for_hero(client).await?;
    send(client, MESSAGE).await?;
    final_answer_containing(client, MESSAGE).await?;
    ensure!(!hero_shown(client).await?, "the hero is gone once a message is added");

    client.refresh().await?;
    wait_for_state(client, "connected").await?;
    wait_for_history_with(client, MESSAGE).await?;
    ensure!(!hero_shown(client).await?, "the hero shows over a loaded history");
    Ok(())
}

/// What the fake model answers, by a word in the question.
const TABLE_REPLY: [&str; 6] = [
    "Here are the scores:\n\n| Name | Score |\n| --- | ---: |\n",
    "| Ada | 10 |\n| Linus | *9* |\n\n",
    "Read [the docs](https://example.com/docs) or https://example.org/faq, try `cargo run`, ",
    "and **mind** the tags: <b>not bold</b> <img src=x onerror=alert(1)>\n\n- one\n- two\n\n",
    "```rust\nfn main() {}\n",
    "```\n",
];
/// A fence written mid-line is inline code; one at the very end has nothing in it.
const FENCE_REPLY: &str = "```this``` starts a line, and ```that``` sits mid-line.\nHere is the code:\n```";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_models_reasoning_shows_collapsed_above_the_answer_once_asked_for() {
    let fake = FakeOpenAi::start().await.expect("start the fake model");
    fake.set_responder(|_| {
        Turn::from(Reply::text(["The answer ", "is 42."]).with_thinking(["Let me ", "work it out."]))
    });
    let Some(world) = World::start(Some(&fake.url())).await else { return };
    let client = world.browser().await;
    let outcome = reasoning(&client, &world, &fake).await;
    world.finish(outcome, [client]).await;
}

async fn reasoning(client: &Client, world: &World, fake: &FakeOpenAi) -> Result<()> {
    client.goto(&world.gateway.url).await?;
    wait_for_state(client, "connected").await?;
    send(client, "/reasoning on").await?;
    poll("the /reasoning answer", || async {
        Ok(page_text(client).await?.contains("Reasoning is shown").then_some(()))
    })
    .await?;

    send(client, "/think high").await?;
    poll("the /think answer", || async { Ok(page_text(client).await?.contains("Thinking: high").then_some(())) })
        .await?;
    // The model refuses the thinking setting once: it answers without, and the page says so
    // below the answer.
    fake.push(Turn::error(400, "Unrecognized request argument supplied: reasoning_effort"));

    send(client, "What is the answer?").await?;
    final_answer_containing(client, "The answer is 42.").await?;
    let notice = poll("the notice after the answer", || async {
        let notices = texts(client, ".notice-text").await?;
        Ok(notices.into_iter().find(|text| text.contains("cannot think")))
    })
    .await?;
    let last = client.find(Locator::Css("#messages > :last-child")).await?.text().await?;
    ensure!(last.contains(&notice), "the notice comes after the answer: {last:?}");
    let answer = ".msg.assistant[data-state='final']";
    let html = client.find(Locator::Css(answer)).await?.prop("outerHTML").await?.unwrap_or_default();
    let block = client
        .find(Locator::Css(&format!("{answer} details.reasoning")))
        .await
        .with_context(|| format!("a reasoning block in {html}"))?;
    let open = block.prop("open").await?.unwrap_or_default();
    ensure!(open == "false", "the reasoning starts collapsed, open = {open:?}");
    let hidden = block.prop("textContent").await?.unwrap_or_default();
    ensure!(hidden.contains("Let me work it out."), "the block holds the reasoning: {hidden:?}");
    let bodies = texts(client, &format!("{answer} .msg-body")).await?;
    ensure!(bodies.iter().all(|body| !body.contains("work it out")), "the answer is apart: {bodies:?}");
    block.find(Locator::Css("summary")).await?.click().await?;
    let shown = poll("the reasoning, opened", || async {
        let text = client.find(Locator::Css(&format!("{answer} .reasoning-text"))).await?.text().await?;
        Ok(text.contains("Let me work it out.").then_some(text))
    })
    .await?;
    ensure!(!shown.is_empty());
    screenshot(client, "webchat-reasoning.png").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markdown_from_the_model_renders_tables_and_code_and_never_an_empty_code_block() {
    let fake = FakeOpenAi::start().await.expect("start the fake model");
    fake.set_responder(|request| {
        let question = request.last_user_text().unwrap_or_default();
        if question.contains("table") {
            Turn::from(Reply::text(TABLE_REPLY).with_chunk_delay(Duration::from_millis(40)))
        } else {
            Turn::text([FENCE_REPLY])
        }
    });
    let Some(world) = World::start(Some(&fake.url())).await else { return };
    let client = world.browser().await;
    let outcome = markdown(&client, &world).await;
    world.finish(outcome, [client]).await;
}

async fn markdown(client: &Client, world: &World) -> Result<()> {
    client.goto(&world.gateway.url).await?;
    wait_for_state(client, "connected").await?;

    send(client, "Show me a table").await?;
    final_answer_containing(client, "Here are the scores").await?;
    let reply = ".msg.assistant[data-state='final'] .msg-body";
    let cells = texts(client, &format!("{reply} table td")).await?;
    ensure!(cells == ["Ada", "10", "Linus", "9"], "the table's cells, got {cells:?}");
    let headers = texts(client, &format!("{reply} table th")).await?;
    ensure!(headers == ["Name", "Score"], "the table's header, got {headers:?}");
    let aligned = client.find(Locator::Css(&format!("{reply} table td:nth-child(2)"))).await?;
    ensure!(aligned.css_value("text-align").await? == "right", "`---:` aligns the column right");
    ensure!(!texts(client, &format!("{reply} table em")).await?.is_empty(), "emphasis inside a cell");

    let links = client.find_all(Locator::Css(&format!("{reply} a"))).await?;
    let mut hrefs = Vec::new();
    for link in &links {
        hrefs.push(link.attr("href").await?.unwrap_or_default());
        ensure!(link.attr("target").await?.as_deref() == Some("_blank"), "links open in a new tab");
        let rel = link.attr("rel").await?.unwrap_or_default();
        ensure!(rel.contains("noopener") && rel.contains("noreferrer"), "links open safely, rel={rel:?}");
    }
    ensure!(hrefs == ["https://example.com/docs", "https://example.org/faq"], "a link and a bare URL: {hrefs:?}");
    let inline = texts(client, &format!("{reply} p code")).await?;
    ensure!(inline == ["cargo run"], "inline code, got {inline:?}");
    ensure!(texts(client, &format!("{reply} li")).await? == ["one", "two"], "a list");
    let code = texts(client, &format!("{reply} .code pre code")).await?;
    ensure!(code == ["fn main() {}"], "a fenced code block, got {code:?}");
    ensure!(texts(client, &format!("{reply} .code-lang")).await? == ["rust"], "the fence's language is shown");
    let body = texts(client, reply).await?.join("\n");
    ensure!(body.contains("<b>not bold</b>"), "HTML from the model shows as text: {body:?}");
    ensure!(client.find_all(Locator::Css(&format!("{reply} img, {reply} b"))).await?.is_empty(), "no HTML elements");

    send(client, "Quote some fences").await?;
    final_answer_containing(client, "Here is the code").await?;
    let last = ".msg.assistant[data-state='final']:last-of-type .msg-body";
    let inline = texts(client, &format!("{last} code")).await?;
    ensure!(inline == ["this", "that"], "fences within a line are inline code, got {inline:?}");
    let blocks = texts(client, &format!("{last} pre")).await?;
    ensure!(blocks.is_empty(), "an empty code block was drawn: {blocks:?}");
    screenshot(client, "webchat-markdown.png").await
}

/// Every command waits for approval; the model can run commands.
const ASK_ALWAYS: &str = "[tools]\nprofile = \"coding\"\n\n[tools.exec]\nask = \"always\"";
const APPROVED_COMMAND: &str = "echo approved-$((6*7))";
const APPROVED_ANSWER: &str = "The command printed approved-42.";
/// The request to approve a command, and its Approve button.
const REQUEST: &str = ".msg.assistant[data-approval]";
const APPROVE_BUTTON: &str = ".msg.assistant[data-approval] .approval-btn.approve";

/// The fake model: `exec` with [`APPROVED_COMMAND`], then [`APPROVED_ANSWER`].
async fn approval_model() -> FakeOpenAi {
    let fake = FakeOpenAi::start().await.expect("start the fake model");
    let arguments = json!({ "command": APPROVED_COMMAND }).to_string();
    fake.push(Turn::tool_calls([ToolCall::new("call_exec", "exec", arguments)]));
    fake.push(Turn::text([APPROVED_ANSWER]));
    fake
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_waiting_for_approval_runs_once_its_approve_button_is_clicked() {
    let fake = approval_model().await;
    let Some(world) = World::start_with(Some(&fake.url()), ASK_ALWAYS).await else { return };
    let client = world.browser().await;
    let outcome = approve_with_the_button(&client, &world, &fake).await;
    world.finish(outcome, [client]).await;
}

async fn approve_with_the_button(client: &Client, world: &World, fake: &FakeOpenAi) -> Result<()> {
    client.goto(&world.gateway.url).await?;
    wait_for_state(client, "connected").await?;
    send(client, "Run the check, please").await?;

    let (id, labels) = approval_request(client).await?;
    ensure!(labels == ["Approve", "Deny"], "the buttons, got {labels:?}");
    screenshot(client, "webchat-approval.png").await?;
    ensure!(fake.requests().len() == 1, "the run waits for the answer");

    client.find(Locator::Css(APPROVE_BUTTON)).await?.click().await?;
    let sent = poll("the /approve message sent for the click", || async {
        let users = texts(client, ".msg.user .msg-body").await?;
        Ok(users.into_iter().find(|text| text.starts_with("/approve")))
    })
    .await?;
    ensure!(sent.trim() == format!("/approve {id}"), "the button sends the command with its id: {sent:?}");
    approved_without_buttons(client).await?;
    final_answer_containing(client, APPROVED_ANSWER).await?;
    ensure_asked_before_answered(client).await?;
    let request = tokio::time::timeout(PAGE_BOUND, fake.wait_for_request(1)).await.context("the run went on")?;
    let messages = request.body["messages"].as_array().cloned().unwrap_or_default();
    let result = messages.iter().rev().find(|m| m["role"] == "tool").map(|m| m["content"].to_string());
    let result = result.context("no tool result in the model's request")?;
    ensure!(result.contains("approved-42") && result.contains("exit code 0"), "the command ran: {result}");
    screenshot(client, "webchat-approved.png").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_still_waiting_after_a_reload_can_be_approved_and_then_shows_settled() {
    let fake = approval_model().await;
    let Some(world) = World::start_with(Some(&fake.url()), ASK_ALWAYS).await else { return };
    let client = world.browser().await;
    let outcome = approve_after_a_reload(&client, &world, &fake).await;
    world.finish(outcome, [client]).await;
}

async fn approve_after_a_reload(client: &Client, world: &World, fake: &FakeOpenAi) -> Result<()> {
    client.goto(&world.gateway.url).await?;
    wait_for_state(client, "connected").await?;
    send(client, "Run the check, please").await?;
    let (id, _) = approval_request(client).await?;

    client.refresh().await?;
    wait_for_state(client, "connected").await?;
    let (again, labels) = approval_request(client).await?;
    ensure!(again == id && labels == ["Approve", "Deny"], "the same request, buttons again: {again} {labels:?}");
    ensure!(fake.requests().len() == 1, "the run still waits for the answer");
    client.find(Locator::Css(APPROVE_BUTTON)).await?.click().await?;
    approved_without_buttons(client).await?;
    final_answer_containing(client, APPROVED_ANSWER).await?;
    ensure_asked_before_answered(client).await?;

    client.refresh().await?;
    wait_for_state(client, "connected").await?;
    final_answer_containing(client, APPROVED_ANSWER).await?;
    approved_without_buttons(client).await?;
    ensure_asked_before_answered(client).await?;
    screenshot(client, "webchat-approval-settled.png").await
}

/// Waits for the request to approve a command with its buttons; returns its id (as its text
/// names it) and the buttons' labels.
async fn approval_request(client: &Client) -> Result<(String, Vec<String>)> {
    // Polled until the text shows: WebDriver reads no text while the bubble fades in.
    let (asked, labels) = poll("the approval request with its buttons", || async {
        let asked = texts(client, &format!("{REQUEST} .msg-body")).await?.into_iter().find(|t| t.contains("/approve"));
        let labels = texts(client, &format!("{REQUEST} .approval button")).await?;
        let ready = !labels.is_empty() && labels.iter().all(|label| !label.is_empty());
        Ok(asked.filter(|_| ready).map(|asked| (asked, labels)))
    })
    .await?;
    ensure!(asked.contains(APPROVED_COMMAND), "the exact command is shown: {asked:?}");
    let id = asked
        .split_once("/approve ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .with_context(|| format!("no id in {asked:?}"))?
        .to_owned();
    let named = client.find(Locator::Css(REQUEST)).await?.attr("data-approval").await?;
    ensure!(named.as_deref() == Some(id.as_str()), "the bubble names the request it shows: {named:?}");
    Ok((id, labels))
}

/// Waits until the request says it was approved (by this browser) and offers no button.
async fn approved_without_buttons(client: &Client) -> Result<()> {
    let outcome = poll("the request to show it was approved", || async {
        let outcome = texts(client, &format!("{REQUEST} .approval-outcome")).await?;
        Ok(outcome.into_iter().find(|text| !text.is_empty()))
    })
    .await?;
    ensure!(outcome.starts_with("Approved by you"), "how it ended: {outcome:?}");
    let buttons = client.find_all(Locator::Css(&format!("{REQUEST} .approval button"))).await?;
    ensure!(buttons.is_empty(), "a settled request offers no button");
    Ok(())
}

/// The request to approve the command shows above the answer the run gave after it.
async fn ensure_asked_before_answered(client: &Client) -> Result<()> {
    let order = client
        .execute(
            "return [...document.querySelectorAll('#messages > .msg')].map((m) =>
               m.dataset.approval ? 'request' : m.querySelector('.msg-body').textContent.trim());",
            vec![],
        )
        .await?;
    let order: Vec<String> = serde_json::from_value(order)?;
    let asked = order.iter().position(|m| m == "request").context("no request on the page")?;
    let answered = order.iter().position(|m| m.contains(APPROVED_ANSWER)).context("no answer on the page")?;
    ensure!(asked < answered, "the request shows above the answer that came after it: {order:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_reconnecting_while_the_gateway_is_away_and_catches_up_when_it_is_back() {
    let Some(mut world) = World::start(None).await else { return };
    let client = world.browser().await;
    let outcome = gateway_away(&client, &mut world).await;
    world.finish(outcome, [client]).await;
}

async fn gateway_away(client: &Client, world: &mut World) -> Result<()> {
    const BEFORE: &str = "Said before the gateway went away";
    const DURING: &str = "Typed while the gateway was away";

    client.goto(&world.gateway.url).await?;
    wait_for_state(client, "connected").await?;
    ensure!(!banner_shown(client).await?, "no banner while connected");
    send(client, BEFORE).await?;
    final_answer_containing(client, BEFORE).await?;

    world.gateway.stop().await?;
    wait_for_state(client, "reconnecting").await?;
    ensure!(banner_shown(client).await?, "the banner says the connection is lost");
    let banner = client.find(Locator::Css("#banner")).await?.text().await?;
    ensure!(banner.contains("Reconnecting"), "the banner says what happens: {banner:?}");
    screenshot(client, "webchat-reconnecting.png").await?;
    ensure!(client.find(Locator::Css("#new-chat")).await?.attr("disabled").await?.is_some(), "New chat waits");
    send(client, DURING).await?;
    let queued = poll("the typed message marked as waiting", || async {
        let metas = texts(client, ".msg.user[data-state='pending'] .msg-meta").await?;
        Ok(metas.into_iter().find(|meta| meta.contains("Waiting for the connection")))
    })
    .await?;
    ensure!(!queued.is_empty());

    world.gateway.start().await?;
    wait_for_state(client, "connected").await?;
    ensure!(!banner_shown(client).await?, "the banner goes once connected again");
    // The history is loaded again, and the message typed meanwhile goes out and is answered.
    final_answer_containing(client, DURING).await?;
    wait_for_history_with(client, BEFORE).await?;
    Ok(())
}

/// Messages seeded into one conversation for the long-history test: half questions, half
/// answers with some Markdown in them.
const LONG_HISTORY: usize = 500;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_messages_of_history_all_render_after_a_reload() {
    let Some(mut world) = World::start(None).await else { return };
    let client = world.browser().await;
    let outcome = long_history(&client, &mut world).await;
    world.finish(outcome, [client]).await;
}

async fn long_history(client: &Client, world: &mut World) -> Result<()> {
    client.goto(&world.gateway.url).await?;
    wait_for_state(client, "connected").await?;
    let key = session_key(client).await?;

    // The transcript is written while the gateway is down: one writer at a time.
    world.gateway.stop().await?;
    seed_transcript(&world.gateway.state_dir(), &key, LONG_HISTORY).await?;
    world.gateway.start().await?;

    client.refresh().await?;
    let rendered = poll("the whole history on the page", || async {
        let marked = client.execute(HISTORY_TIMINGS, vec![]).await?;
        Ok((!marked.is_null()).then_some(marked))
    })
    .await?;
    let bubbles = texts(client, ".msg .msg-body").await?;
    ensure!(bubbles.len() == LONG_HISTORY, "{} of {LONG_HISTORY} messages rendered", bubbles.len());
    ensure!(bubbles[0] == seeded_message(0).1, "oldest first, got {:?}", bubbles[0]);
    ensure!(bubbles[LONG_HISTORY - 1].starts_with("Step 249"), "newest last, got {:?}", bubbles[LONG_HISTORY - 1]);
    ensure!(!hero_shown(client).await?, "no hero over a long history");
    eprintln!(
        "{LONG_HISTORY} messages of history: on screen {:.0} ms after navigation; rendering them took {:.0} ms",
        rendered["sinceNavigation"].as_f64().unwrap_or(f64::NAN),
        rendered["render"].as_f64().unwrap_or(f64::NAN),
    );
    Ok(())
}

/// Reads the page's performance marks for the history: `null` until it rendered.
const HISTORY_TIMINGS: &str = r#"
    const marked = performance.getEntriesByName("ferry:history-rendered").pop();
    const render = performance.getEntriesByName("ferry:history-rendered:render").pop();
    return marked && render ? { sinceNavigation: marked.startTime, render: render.duration } : null;
"#;

/// Message `index` of the seeded conversation and its role.
fn seeded_message(index: usize) -> (&'static str, String) {
    let step = index / 2;
    if index.is_multiple_of(2) {
        return ("user", format!("Question {step}: what happens in step {step}?"));
    }
    let mut answer = format!("Step {step} does **one** thing:\n\n- reads `input-{step}`\n- writes `output-{step}`\n");
    if step.is_multiple_of(10) {
        answer.push_str("\n```sh\nferry run --step 1\n```\n\n| Step | Time |\n| --- | --- |\n| 1 | 2 s |\n");
    }
    ("assistant", answer)
}

/// Writes `count` messages into the transcript of session `key`, as runs would have.
async fn seed_transcript(state_dir: &Path, key: &str, count: usize) -> Result<()> {
    let database = Database::open(state_dir).await?;
    let store = SqliteSessionStore::new(database.clone());
    let session = store.resolve(key, chrono::Utc::now(), &ResetConfig::default()).await?.session;
    store.begin_run(key, &session.session_id, "seed").await?;
    let entries: Vec<ChatMessage> = (0..count)
        .map(|index| match seeded_message(index) {
            ("user", text) => ChatMessage::user(text),
            (_, text) => ChatMessage::assistant(text, Vec::new()),
        })
        .collect();
    store.close_run(key, "seed", &entries, Usage::default()).await?;
    drop(store);
    database.close().await;
    Ok(())
}

/// The photo a person uploads: larger than models take, so it reaches the model downscaled.
const PHOTO: (u32, u32) = (2000, 1000);
/// What the model gets: the longest side at `ferry::media::MAX_SIDE` (1568 px).
const PHOTO_FOR_MODEL: (u32, u32) = (1568, 784);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uploaded_photo_reaches_the_model_and_the_reply_shows_its_image_inline() {
    let fake = FakeOpenAi::start().await.expect("start the fake model");
    fake.push(Turn::text(["Here is the chart you asked for.\nMEDIA: chart.png"]));
    let files = tempfile::tempdir().expect("temp dir");
    let workspace = files.path().join("workspace");
    std::fs::create_dir_all(&workspace).expect("workspace");
    write_png(&workspace.join("chart.png"), (120, 80));
    let photo = files.path().join("photo.png");
    write_png(&photo, PHOTO);
    let config = format!(
        "[agents.defaults]\nmodel = \"fake/gpt-test\"\nworkspace = {workspace:?}\n\n\
         [models.providers.fake]\nkind = \"openai\"\nbase_url = \"{}\"\napi_key = \"sk-test\"\nvision = true\n\n\
         [tools.sandbox]\nscope = \"agent\"\n",
        fake.url()
    );
    let Some(world) = World::start_with(None, &config).await else { return };
    let client = world.browser().await;
    let outcome = photo_in_image_out(&client, &world, &fake, &photo).await;
    world.finish(outcome, [client]).await;
}

async fn photo_in_image_out(client: &Client, world: &World, fake: &FakeOpenAi, photo: &Path) -> Result<()> {
    client.goto(&world.gateway.url).await?;
    wait_for_state(client, "connected").await?;
    let attach = client.find(Locator::Css("#attach")).await?;
    ensure!(attach.is_displayed().await?, "the gateway takes files: the attach button shows");
    let path = photo.to_str().context("a UTF-8 path")?;
    client.find(Locator::Css("#file-input")).await?.send_keys(path).await?;
    poll("the photo uploaded, as a chip", || async {
        let ready = client.find_all(Locator::Css(".attachment[data-state='ready']")).await?;
        Ok((!ready.is_empty()).then_some(()))
    })
    .await?;
    let chip = texts(client, ".attachment").await?.join(" ");
    ensure!(chip.contains("photo.png") && chip.contains("KB"), "the chip shows name and size: {chip:?}");
    screenshot(client, "webchat-attachment.png").await?;
    // No text: the photo alone is the message.
    send(client, "").await?;
    final_answer_containing(client, "Here is the chart").await?;

    let requests = fake.requests();
    let images: Vec<_> = requests.iter().flat_map(|request| request.images()).collect();
    ensure!(images.len() == 1, "the model got one image, got {}", images.len());
    ensure!(images[0].pixels == Some(PHOTO_FOR_MODEL), "downscaled for the model: {:?}", images[0].pixels);
    let answer = texts(client, ".msg.assistant[data-state='final'] .msg-body").await?.join("\n");
    ensure!(!answer.contains("MEDIA:"), "the MEDIA: line never shows: {answer:?}");

    let loaded = |selector: &'static str| async move {
        let script = format!(
            "const img = document.querySelector({selector:?});
             return img && img.complete && img.src.startsWith('blob:') ? img.naturalWidth : 0;"
        );
        let width = client.execute(&script, vec![]).await?;
        Ok(width.as_u64().filter(|width| *width > 0))
    };
    let sent = poll("the user's photo in their bubble", || loaded(".msg.user .files img")).await?;
    ensure!(sent == u64::from(PHOTO.0), "the user's own photo, as uploaded: {sent}");
    let chart = poll("the reply's image, loaded", || loaded(".msg.assistant .files img")).await?;
    ensure!(chart == 120, "the chart from the workspace, {chart} px wide");
    screenshot(client, "webchat-media.png").await?;

    // After a reload the history shows the user's photo again (fetched with the token).
    client.refresh().await?;
    wait_for_state(client, "connected").await?;
    let restored = poll("the photo in the history", || loaded(".msg.user.restored .files img")).await?;
    ensure!(restored == u64::from(PHOTO_FOR_MODEL.0), "the stored, model-ready photo: {restored}");
    Ok(())
}

/// A PNG of `size` (a gradient: small to store, easy to tell apart).
fn write_png(path: &Path, (width, height): (u32, u32)) {
    let image = image::RgbImage::from_fn(width, height, |x, y| image::Rgb([(x % 256) as u8, (y % 256) as u8, 128]));
    image.save(path).expect("write a PNG");
}

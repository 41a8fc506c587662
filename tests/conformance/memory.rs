//! Long-term memory (issue 40), end to end on each platform: a fact person A's agent wrote
//! is found again after `/new` and shown in A's prompt; person B and a group never see it
//! (a canary checked in every model request of theirs); `/remember`, `/memory` and
//! `/forget` work on the user's own memory.

use ferry_fakes::{ToolCall, Turn};
use serde_json::{Value, json};

use super::{GROUP, Harness, Platform, USER, last_tool_result, visible};

/// Another person.
const OTHER: u64 = 77;
/// What only person A's memory holds.
const CANARY: &str = "canary-7f3a: favourite colour is teal";

fn tool(name: &str, arguments: Value) -> Turn {
    Turn::tool_calls([ToolCall::new(format!("call_{name}"), name, arguments.to_string())])
}

/// Every request body the model got from `from` on, as text.
fn bodies_from<P: Platform>(h: &Harness<P>, from: usize) -> Vec<String> {
    h.openai.requests()[from..].iter().map(|request| request.body.to_string()).collect()
}

/// A writes a fact; after `/new` a search finds it and `MEMORY.md` is in A's prompt. B and
/// the group search for it and find nothing, and no request of theirs carries it.
pub async fn a_person_s_memory_is_found_again_and_never_shown_to_anyone_else<P: Platform>() {
    let h = Harness::<P>::start("").await;
    h.openai.push(tool("memory_write", json!({ "path": "MEMORY.md", "content": CANARY, "mode": "append" })));
    h.openai.push(Turn::text(["Noted."]));
    h.platform.dm(USER, "my favourite colour is teal, remember that").await;
    let written: Value = serde_json::from_str(&last_tool_result(&h.request(1).await)).expect("JSON");
    assert_eq!(written["status"], "written", "{}: {written}", P::NAME);
    h.until(|p| p.dm_messages(USER), |shown| visible(shown).contains(&"Noted.".to_owned())).await;

    h.platform.dm(USER, "/new").await;
    h.until(|p| p.dm_messages(USER), |shown| visible(shown).iter().any(|text| text.contains("new conversation"))).await;
    h.openai.push(tool("memory_search", json!({ "query": "favourite colour" })));
    h.openai.push(Turn::text(["Teal."]));
    h.platform.dm(USER, "what is my favourite colour?").await;
    let asked = h.request(2).await;
    assert!(asked.body["messages"].to_string().contains(CANARY), "{}: MEMORY.md is in A's prompt", P::NAME);
    let found: Value = serde_json::from_str(&last_tool_result(&h.request(3).await)).expect("JSON");
    let results = found["results"].as_array().expect("results");
    assert_eq!(results.len(), 1, "{}: {found}", P::NAME);
    assert_eq!(results[0]["path"], "MEMORY.md", "{}: {found}", P::NAME);
    assert!(results[0]["snippet"].as_str().unwrap_or_default().contains(CANARY), "{}: {found}", P::NAME);
    h.until(|p| p.dm_messages(USER), |shown| visible(shown).contains(&"Teal.".to_owned())).await;

    let others_from = h.openai.requests().len();
    h.openai.push(tool("memory_search", json!({ "query": "favourite colour teal canary" })));
    h.openai.push(Turn::text(["I don't know yet."]));
    h.platform.dm(OTHER, "what is my favourite colour?").await;
    let found: Value = serde_json::from_str(&last_tool_result(&h.request(others_from + 1).await)).expect("JSON");
    assert_eq!(found["results"], json!([]), "{}: B finds nothing of A's: {found}", P::NAME);
    h.until(|p| p.dm_messages(OTHER), |shown| !shown.is_empty()).await;

    h.openai.push(tool("memory_search", json!({ "query": "favourite colour teal canary" })));
    h.openai.push(Turn::text(["No idea."]));
    h.platform.group(GROUP, USER, "what is my favourite colour?", true).await;
    let found: Value = serde_json::from_str(&last_tool_result(&h.request(others_from + 3).await)).expect("JSON");
    assert_eq!(found["results"], json!([]), "{}: the group finds nothing of A's, A asking included: {found}", P::NAME);
    h.group_message_containing("No idea.").await;
    for body in bodies_from(&h, others_from) {
        assert!(!body.contains("canary-7f3a"), "{}: A's memory reached B or the group: {body}", P::NAME);
    }
}

/// `/remember` keeps a fact in the user's memory, `/memory` shows it, `/forget` removes it.
pub async fn remember_memory_and_forget_commands_work_on_the_user_s_own_memory<P: Platform>() {
    let h = Harness::<P>::start("").await;
    h.platform.dm(USER, "/remember I take my coffee black").await;
    h.until(|p| p.dm_messages(USER), |shown| visible(shown).iter().any(|text| text.contains("Noted"))).await;
    h.platform.dm(USER, "/memory").await;
    let shown = h.until(|p| p.dm_messages(USER), |shown| shown.len() >= 2).await;
    let listing = &visible(&shown)[1];
    assert!(listing.contains("MEMORY.md") && listing.contains("I take my coffee black"), "{}: {listing}", P::NAME);
    h.platform.dm(OTHER, "/memory").await;
    let theirs = h.until(|p| p.dm_messages(OTHER), |shown| !shown.is_empty()).await;
    assert!(visible(&theirs)[0].contains("nothing in memory"), "{}: B's own, empty: {:?}", P::NAME, visible(&theirs));
    h.platform.dm(USER, "/forget coffee").await;
    let shown = h.until(|p| p.dm_messages(USER), |shown| shown.len() >= 3).await;
    assert!(visible(&shown)[2].contains("Forgotten: 1 line"), "{}: {:?}", P::NAME, visible(&shown));
    h.platform.dm(USER, "/memory").await;
    let shown = h.until(|p| p.dm_messages(USER), |shown| shown.len() >= 4).await;
    assert!(visible(&shown)[3].contains("nothing in memory"), "{}: {:?}", P::NAME, visible(&shown));
    assert!(h.openai.requests().is_empty(), "{}: the commands asked no model", P::NAME);
}

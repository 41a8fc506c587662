//! Long-term memory (issue 40), end to end on each platform: a fact person A's agent wrote
//! is found again after `/new` and shown in A's prompt; person B and a group never see it
//! (a canary checked in every model request of theirs); `/remember`, `/memory` and
//! `/forget` work on the user's own memory; a mirrored scope (`mirror_files`) reaches the
//! workspace's files and a hand edit of them comes back.

use ferry_fakes::{FakeEmbeddings, ToolCall, Turn};
use serde_json::{Value, json};

use super::{GROUP, Harness, Platform, Shown, USER, last_tool_result, visible};

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

/// With `[memory] mirror_files` on the user's scope (on a platform whose user ids are the
/// suite's numbers), `/remember` reaches `MEMORY.md` in the agent's workspace, and a hand
/// edit of that file is what `/memory` shows next.
pub async fn a_mirrored_scope_reaches_the_workspace_and_a_hand_edit_comes_back<P: Platform>() {
    let tables = format!("[memory]\nmirror_files = true\nmirror_scope = \"private:{}:{USER}\"", P::NAME);
    let h = Harness::<P>::start(&tables).await;
    let home = h.daemon.as_ref().and_then(|daemon| daemon.home.as_ref()).expect("the gateway's home").path();
    let file = home.join(".local/share/ferry/workspace/MEMORY.md");
    h.platform.dm(USER, "/remember I take my coffee black").await;
    h.until(|p| p.dm_messages(USER), |shown| visible(shown).iter().any(|text| text.contains("Noted"))).await;
    let mirrored = tokio::time::timeout(crate::daemon::PATIENCE, async {
        loop {
            match std::fs::read_to_string(&file) {
                Ok(text) if text.contains("I take my coffee black") => return text,
                _ => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            }
        }
    })
    .await;
    assert_eq!(mirrored.as_deref(), Ok("I take my coffee black\n"), "{}: written out to {}", P::NAME, file.display());

    std::fs::write(&file, "I take my coffee with oat milk now\n").expect("edit the mirrored file");
    // Each `/memory` is answered before the next is sent; the mirror reads the file within 2 s.
    let listing = tokio::time::timeout(crate::daemon::PATIENCE, async {
        let mut asked = 1;
        loop {
            h.platform.dm(USER, "/memory").await;
            asked += 1;
            let shown = h.until(|p| p.dm_messages(USER), |shown| shown.len() >= asked).await;
            let listing = visible(&shown)[asked - 1].clone();
            if listing.contains("oat milk") {
                return listing;
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{}: the hand edit never reached /memory", P::NAME));
    assert!(!listing.contains("coffee black"), "{}: the edit replaced the note: {listing}", P::NAME);
    assert!(h.openai.requests().is_empty(), "{}: the commands asked no model", P::NAME);
}

/// The results of the `memory_search` call answered in request `index`, as (path, snippet).
async fn search_results<P: Platform>(h: &Harness<P>, index: usize) -> Vec<(String, String)> {
    let found: Value = serde_json::from_str(&last_tool_result(&h.request(index).await)).expect("JSON");
    let results = found["results"].as_array().unwrap_or_else(|| panic!("{}: no results: {found}", P::NAME));
    results
        .iter()
        .map(|result| (result["path"].as_str().unwrap_or_default().to_owned(), result["snippet"].to_string()))
        .collect()
}

/// With an embeddings endpoint, a paraphrase that shares no word with the note finds it;
/// with the endpoint down, the same search answers (from keywords) instead of failing, and
/// a keyword still finds the note.
pub async fn hybrid_search_finds_a_paraphrase_and_keywords_answer_while_the_endpoint_is_down<P: Platform>() {
    let embeddings = FakeEmbeddings::start().await.expect("fake embeddings");
    embeddings.set_synonyms(&[&["car", "automobile"], &["red", "crimson"]]);
    let tables = format!(
        "[memory.embeddings]\nbase_url = \"{}\"\nmodel = \"fake-embed\"\napi_key = \"embed-key-1\"",
        embeddings.url()
    );
    let h = Harness::<P>::start(&tables).await;
    h.openai
        .push(tool("memory_write", json!({ "path": "memory/cars.md", "content": "My car is red", "mode": "append" })));
    h.openai.push(Turn::text(["Noted."]));
    h.platform.dm(USER, "remember: my car is red").await;
    h.until(|p| p.dm_messages(USER), |shown| visible(shown).contains(&"Noted.".to_owned())).await;
    tokio::time::timeout(crate::daemon::PATIENCE, embeddings.wait_for_inputs_embedded(1))
        .await
        .expect("the note was embedded in the background");

    h.openai.push(tool("memory_search", json!({ "query": "automobile crimson" })));
    h.openai.push(Turn::text(["Red."]));
    h.platform.dm(USER, "what colour is my automobile?").await;
    let found = search_results(&h, 3).await;
    assert_eq!(found.len(), 1, "{}: the paraphrase found the note: {found:?}", P::NAME);
    assert_eq!(found[0].0, "memory/cars.md", "{}", P::NAME);
    assert!(found[0].1.contains("My car is red"), "{}: {found:?}", P::NAME);
    h.until(|p| p.dm_messages(USER), |shown| visible(shown).contains(&"Red.".to_owned())).await;
    assert!(embeddings.requests().iter().all(|request| request.key.as_deref() == Some("embed-key-1")));

    embeddings.set_down(true);
    h.openai.push(tool("memory_search", json!({ "query": "automobile crimson" })));
    h.openai.push(tool("memory_search", json!({ "query": "my car" })));
    h.openai.push(Turn::text(["Still red."]));
    h.platform.dm(USER, "and now?").await;
    assert_eq!(search_results(&h, 5).await, [], "{}: no words in common, no vectors: nothing, and no error", P::NAME);
    let found = search_results(&h, 6).await;
    assert_eq!(found.len(), 1, "{}: keywords still answer: {found:?}", P::NAME);
    h.until(|p| p.dm_messages(USER), |shown| visible(shown).contains(&"Still red.".to_owned())).await;
    let port = h.daemon.as_ref().expect("running").port;
    let metrics = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("ferry_memory_searches_total{kind=\"hybrid\"} 1"), "{}: {metrics}", P::NAME);
    assert!(metrics.contains("ferry_memory_searches_total{kind=\"keyword\"} 2"), "{}", P::NAME);
    assert!(metrics.contains("ferry_memory_writes_total 1"), "{}", P::NAME);
    // The entry is refreshed every 10 s.
    let health = tokio::time::timeout(crate::daemon::PATIENCE, async {
        loop {
            let health = crate::daemon::health(port).await;
            if health["memory"]["documents"] == 1 {
                return health;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{}: /healthz never showed the document", P::NAME));
    assert_eq!(health["memory"]["embeddings"]["model"], "fake-embed", "{}: {health}", P::NAME);
    assert_eq!(health["memory"]["embeddings"]["embedded"], 1, "{}: {health}", P::NAME);
    assert_eq!(health["memory"]["search"], "hybrid", "{}: {health}", P::NAME);
}

/// A small model window, so one long answer brings the next message to a compaction.
const SMALL_WINDOW: &str = "[models.providers.small]\nkind = \"openai\"\nbase_url = \"{openai}\"\napi_key = \"sk-test\"\n\
     context_window = 4000\n\n[agents.defaults]\nmodel = \"small/tiny\"\n\n\
     [agents.defaults.compaction]\nreserve_tokens = 1000\n";

/// What the summarizer is told begins with this (`session::compaction`).
const SUMMARIZER: &str = "You compact conversations";

fn tool_names(request: &Value) -> Vec<String> {
    let tools = request["tools"].as_array().cloned().unwrap_or_default();
    tools.iter().filter_map(|tool| tool["function"]["name"].as_str().map(str::to_owned)).collect()
}

/// When a conversation is about to be compacted, the agent first gets one silent turn with
/// only the memory tools: what it writes there is kept, nothing of the turn is shown or
/// stays in the conversation, and the compaction and the answer follow as before.
pub async fn before_compaction_the_agent_saves_memories_silently<P: Platform>() {
    let h = Harness::<P>::start(SMALL_WINDOW).await;
    h.openai.push(Turn::text(["alpha ".repeat(2_500)]));
    h.platform.dm(USER, "tell me everything").await;
    // The answer comes in several messages (the platform's length limit): all of them.
    let alphas = |shown: &Vec<Shown>| visible(shown).iter().map(|text| text.matches("alpha").count()).sum::<usize>();
    let answered = h.until(|p| p.dm_messages(USER), |shown| alphas(shown) == 2_500).await.len();

    h.openai.push(tool(
        "memory_write",
        json!({ "path": "MEMORY.md", "content": "flush-canary: prefers green tea", "mode": "append" }),
    ));
    h.openai.push(Turn::text(["NO_REPLY"]));
    h.openai.push(Turn::text(["Summary: a long list of alphas."]));
    h.openai.push(Turn::text(["Fine."]));
    h.platform.dm(USER, "and now?").await;
    let shown = h.until(|p| p.dm_messages(USER), |shown| visible(shown).contains(&"Fine.".to_owned())).await;
    assert_eq!(visible(&shown[answered..]), ["Fine."], "{}: nothing of the flush is shown", P::NAME);

    let flush = h.request(1).await.body;
    let asked = flush["messages"].as_array().and_then(|messages| messages.last()).cloned().unwrap_or_default();
    assert!(asked["content"].to_string().contains("[memory flush"), "{}: {asked}", P::NAME);
    assert!(flush["messages"].to_string().contains("alpha alpha"), "{}: before the summary", P::NAME);
    assert_eq!(tool_names(&flush), ["memory_get", "memory_search", "memory_write"], "{}: memory tools only", P::NAME);
    let written: Value = serde_json::from_str(&last_tool_result(&h.request(2).await)).expect("JSON");
    assert_eq!(written["status"], "written", "{}: {written}", P::NAME);
    let summarize = h.request(3).await.body;
    assert!(summarize["messages"][0]["content"].as_str().is_some_and(|system| system.starts_with(SUMMARIZER)));
    let answer = h.request(4).await.body.to_string();
    assert!(answer.contains("Summary: a long list of alphas.") && answer.contains("and now?"), "{}", P::NAME);
    assert!(!answer.contains("[memory flush") && !answer.contains("alpha alpha"), "{}: the flush is gone", P::NAME);
    assert!(answer.contains("flush-canary"), "{}: MEMORY.md, as the flush left it, is in the prompt", P::NAME);
    assert_eq!(h.openai.requests().len(), 5, "{}: one flush for one compaction", P::NAME);

    h.platform.dm(USER, "/memory").await;
    let shown = h.until(|p| p.dm_messages(USER), |shown| shown.len() > answered + 1).await;
    assert!(visible(&shown).last().is_some_and(|listing| listing.contains("prefers green tea")), "{}", P::NAME);
}

/// A scheduled task running in the conversation's session compacts it like any run, but
/// without a memory flush: nobody told a scheduled run anything worth keeping.
pub async fn a_scheduled_run_compacts_without_a_memory_flush<P: Platform>() {
    let h = Harness::<P>::start(SMALL_WINDOW).await;
    let task = json!({ "action": "add", "schedule": { "in": "2s" }, "task": "Tidy up", "session": "current" });
    h.openai.push(tool("cron", task));
    // The run's answer makes the session long enough for the next run to compact it.
    h.openai.push(Turn::text(["alpha ".repeat(2_500)]));
    h.openai.push(Turn::text(["Summary: a job and many alphas."]));
    h.openai.push(Turn::text(["Tidied."]));
    h.platform.dm(USER, "tidy up in two seconds").await;
    h.until(|p| p.dm_messages(USER), |shown| visible(shown).contains(&"Tidied.".to_owned())).await;
    let bodies = bodies_from(&h, 0);
    assert_eq!(bodies.len(), 4, "{}: add, answer, summary, the task's answer: no flush", P::NAME);
    assert!(bodies[2].contains(SUMMARIZER), "{}", P::NAME);
    assert!(bodies.iter().all(|body| !body.contains("[memory flush")), "{}", P::NAME);
}

//! `web_fetch` asked for in a group chat (issue 21): the model reads a page through the tool
//! and answers the chat. The page is served by a small HTTP server in the test, which is on
//! loopback, so the same URL shows both sides of the SSRF guard: refused while
//! `tools.web.allow_private` is off (the default), read once a config turns it on.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::response::Html;
use axum::routing::get;
use ferry_fakes::{FakeServer, ToolCall, Turn};

use super::{GROUP, Harness, Platform, last_tool_result};

/// The group member who asks.
const ALICE: u64 = 7;

/// The page the model reads: a title, a heading, a relative link and a script, so its tool
/// result shows the conversion (markdown, the link made absolute, the script left out).
const PAGE: &str = "<!doctype html><html><head><title>Harbour notes</title>\
    <script>var tracking = 'pixel';</script></head><body><h1>Tides today</h1>\
    <p>High water at <strong>14:05</strong>; see <a href=\"/tables\">the tide tables</a>.</p></body></html>";

/// What the model is told when the guard refuses the page's address.
const REFUSAL: &str = "127.0.0.1 is a loopback address; fetching private addresses is off (tools.web.allow_private)";

/// The tables that offer `web_fetch` (with the chat tools), private addresses allowed or not.
fn web_tables(allow_private: bool) -> String {
    format!("[tools]\nallow = [\"web_fetch\"]\n\n[tools.web]\nallow_private = {allow_private}")
}

/// A local web server: [`PAGE`] at `/notes`, and a count of the requests it got.
struct Site {
    server: FakeServer,
    hits: Arc<AtomicUsize>,
}

impl Site {
    async fn start() -> Self {
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&hits);
        let router = Router::new().route(
            "/notes",
            get(move || async move {
                counted.fetch_add(1, Ordering::SeqCst);
                Html(PAGE)
            }),
        );
        Self { server: FakeServer::start(router).await.expect("the test site"), hits }
    }

    /// The page's URL, `http://127.0.0.1:PORT/notes`.
    fn page(&self) -> String {
        format!("{}/notes", self.server.url())
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// A `web_fetch` call for `url`.
fn fetch(url: &str) -> Turn {
    Turn::tool_calls([ToolCall::new("call_fetch", "web_fetch", serde_json::json!({ "url": url }).to_string())])
}

/// The same loopback URL under two configs. With `allow_private = false` the fetch is refused
/// before anything is sent to the page's server: the model gets the refusal, which names the
/// setting, as the tool result, and the chat still gets its answer. After a restart with
/// `allow_private = true`, the model gets the page as markdown and the chat its answer.
pub async fn web_fetch_reads_a_local_page_only_when_private_addresses_are_allowed<P: Platform>() {
    let site = Site::start().await;
    let mut h = Harness::<P>::start(&web_tables(false)).await;
    h.openai.push(fetch(&site.page()));
    h.openai.push(Turn::text(["I am not allowed to open that address."]));
    h.platform.group(GROUP, ALICE, "what do the harbour notes say?", true).await;

    let refused = last_tool_result(&h.request(1).await);
    assert_eq!(refused, REFUSAL, "{}: the guard's refusal is the tool result", P::NAME);
    h.group_message_containing("I am not allowed to open that address.").await;
    assert_eq!(site.hits(), 0, "{}: nothing was sent to the page's server", P::NAME);

    h.taken(1).await;
    h.restart_with(&web_tables(true)).await;
    h.openai.push(fetch(&site.page()));
    h.openai.push(Turn::text(["High water is at 14:05 today."]));
    h.platform.group(GROUP, ALICE, "and now?", true).await;

    let read = last_tool_result(&h.request(3).await);
    let (head, markdown) = read.split_once("\n\n").unwrap_or_else(|| panic!("{}: no page in {read:?}", P::NAME));
    assert_eq!(
        head,
        format!("URL: {}\nStatus: 200 OK\nContent-Type: text/html; charset=utf-8\nTitle: Harbour notes", site.page()),
        "{}",
        P::NAME
    );
    let link = format!("[the tide tables]({}/tables)", site.server.url());
    assert_eq!(markdown, format!("# Tides today\n\nHigh water at **14:05**; see {link}."), "{}", P::NAME);
    h.group_message_containing("High water is at 14:05 today.").await;
    assert_eq!(site.hits(), 1, "{}: the page was read once", P::NAME);
}

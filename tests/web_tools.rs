//! `web_fetch` and `web_search` against local servers: pages, redirects, limits, the SSRF guard
//! (addresses refused after resolution, on every hop and at connect time), fake SearXNG and
//! Brave APIs, and the real `ferry` binary offering the tools to a fake model.
//!
//! Every server here is on loopback. To test what the guard does after a *public* hop, a
//! server on 127.0.0.2 stands in for a public site (`AddressPolicy::treating_as_public`), and a
//! fixed `StaticLookup` makes names such as `news.example` resolve where a test needs them to.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use ferry::agent::tools::web::ssrf::{AddressPolicy, Lookup, StaticLookup};
use ferry::agent::tools::web::{FetchSettings, WebFetch, WebSearch};
use ferry::config::{Secret, WebSearchConfig, WebSearchProvider};
use ferry_fakes::FakeServer;

#[path = "web_tools/cli.rs"]
mod cli;

const PAGE: &str = r#"<!doctype html>
<html><head><title>Ferry test page</title><script>var tracking = 1;</script></head>
<body><nav><a href="/">Home</a></nav>
<h1>Welcome aboard</h1>
<p>This page has <a href="/docs/setup">a setup guide</a> and <em>emphasis</em>.</p>
<h2>Details</h2><ul><li>first</li><li>second</li></ul>
</body></html>"#;

/// "日本語のページ" in Shift_JIS.
const JAPANESE_SJIS: &[u8] = b"\x93\xfa\x96{\x8c\xea\x82\xcc\x83y\x81[\x83W";

/// An HTML page in Shift_JIS that says so only in a `<meta>`, with its title in Japanese too.
fn shift_jis_page(meta: &str) -> Vec<u8> {
    [format!("<!DOCTYPE html><html><head>{meta}<title>").as_bytes(), JAPANESE_SJIS, b"</title></head><body><h1>"]
        .into_iter()
        .chain([JAPANESE_SJIS, b"</h1></body></html>"])
        .flatten()
        .copied()
        .collect()
}

/// How many requests a server answered.
#[derive(Clone, Default)]
struct Hits(Arc<AtomicUsize>);

impl Hits {
    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

async fn count_hit(State(hits): State<Hits>, request: Request, next: Next) -> Response {
    hits.0.fetch_add(1, Ordering::SeqCst);
    next.run(request).await
}

/// The test site: a page, pages in legacy charsets, JSON, an image, errors, endless and stalled
/// bodies, redirect loops.
fn site(hits: &Hits) -> Router {
    let html =
        |content_type: &'static str, body: Vec<u8>| get(move || async move { ([(CONTENT_TYPE, content_type)], body) });
    Router::new()
        .route("/page", get(|| async { Html(PAGE) }))
        .route(
            "/latin1",
            get(|| async {
                ([(CONTENT_TYPE, "text/plain; charset=ISO-8859-1")], b"na\xefve gar\xe7on, \x80 5".to_vec())
            }),
        )
        .route("/cp1252", html("text/html; charset=windows-1252", b"<p>\x93Caf\xe9\x94 \x96 open</p>".to_vec()))
        .route("/sjis-meta", html("text/html", shift_jis_page("<meta charset=\"Shift_JIS\">")))
        .route(
            "/sjis-http-equiv",
            html("text/html", shift_jis_page("<meta http-equiv=\"Content-Type\" content=\"text/html; charset=sjis\">")),
        )
        // No content type: sniffed as HTML although it is not UTF-8.
        .route("/sjis-unlabelled", get(|| async { Body::from(shift_jis_page("<meta charset=shift_jis>")) }))
        .route("/header-wins", html("text/html; charset=windows-1252", shift_jis_page("<meta charset=shift_jis>")))
        .route(
            "/meta-without-charset",
            get(|| async {
                Html("<html><head><meta http-equiv=\"Content-Type\" content=\"text/html; charset\"></head><p>Still read.</p>")
            }),
        )
        .route("/json", get(|| async { ([(CONTENT_TYPE, "application/json")], r#"{"answer": 42}"#) }))
        .route("/image", get(|| async { ([(CONTENT_TYPE, "image/png")], b"\x89PNG\r\n\x1a\n".to_vec()) }))
        .route("/missing", get(|| async { (StatusCode::NOT_FOUND, "no such page here") }))
        .route("/big", get(|| async { "x".repeat(100_000) }))
        .route(
            "/endless",
            get(|| async {
                let chunk = Bytes::from(vec![b'a'; 8 * 1024]);
                Body::from_stream(futures::stream::repeat_with(move || Ok::<_, Infallible>(chunk.clone())))
            }),
        )
        .route("/stall", get(|| async { std::future::pending::<&str>().await }))
        .route("/loop/{n}", get(|Path(n): Path<u32>| async move { Redirect::temporary(&format!("/loop/{}", n + 1)) }))
        .route(
            "/chain/{n}",
            get(|Path(n): Path<u32>| async move {
                if n == 0 { Redirect::temporary("/page") } else { Redirect::temporary(&format!("/chain/{}", n - 1)) }
            }),
        )
        .layer(middleware::from_fn_with_state(hits.clone(), count_hit))
}

async fn serve(router: Router, ip: [u8; 4]) -> FakeServer {
    FakeServer::start_on(router, SocketAddr::from((ip, 0))).await.expect("a local server")
}

/// 127.0.0.2: the stand-in for a public site.
const STAND_IN: [u8; 4] = [127, 0, 0, 2];

fn settings(allow_private: bool) -> FetchSettings {
    FetchSettings {
        timeout: Duration::from_secs(10),
        max_bytes: 5_000_000,
        max_redirects: 5,
        policy: AddressPolicy::new(allow_private),
    }
}

fn fetcher(settings: FetchSettings) -> WebFetch {
    WebFetch::new(settings).expect("a client")
}

fn guarded_with(lookup: impl Lookup) -> WebFetch {
    let policy = AddressPolicy::new(false).treating_as_public([IpAddr::from(STAND_IN)]);
    WebFetch::with_lookup(FetchSettings { policy, ..settings(false) }, Arc::new(lookup)).expect("a client")
}

#[tokio::test]
async fn a_local_page_becomes_markdown_when_private_addresses_are_allowed() {
    let hits = Hits::default();
    let server = serve(site(&hits), [127, 0, 0, 1]).await;
    let result = fetcher(settings(true)).fetch(&format!("{}/page", server.url()), None).await.unwrap();
    let (head, content) = result.split_once("\n\n").unwrap();
    assert_eq!(
        head,
        format!(
            "URL: {}/page\nStatus: 200 OK\nContent-Type: text/html; charset=utf-8\nTitle: Ferry test page",
            server.url()
        )
    );
    assert!(content.contains("# Welcome aboard"), "{content}");
    assert!(content.contains("## Details"), "{content}");
    assert!(content.contains(&format!("[a setup guide]({}/docs/setup)", server.url())), "{content}");
    assert!(content.contains("_emphasis_") || content.contains("*emphasis*"), "{content}");
    assert!(!content.contains("tracking"), "scripts are left out: {content}");
}

#[tokio::test]
async fn a_loopback_address_is_refused_when_private_addresses_are_not_allowed() {
    let hits = Hits::default();
    let server = serve(site(&hits), [127, 0, 0, 1]).await;
    let error = fetcher(settings(false)).fetch(&format!("{}/page", server.url()), None).await.unwrap_err();
    assert_eq!(error.0, "127.0.0.1 is a loopback address; fetching private addresses is off (tools.web.allow_private)");
    let error = fetcher(settings(false)).fetch("http://169.254.169.254/latest/meta-data/", None).await.unwrap_err();
    assert!(error.0.contains("a link-local address"), "{error}");
    assert_eq!(hits.count(), 0, "nothing was sent");
}

#[tokio::test]
async fn a_host_name_that_resolves_to_a_private_address_is_refused_at_connect_time() {
    let hits = Hits::default();
    let server = serve(site(&hits), [127, 0, 0, 1]).await;
    let port = server.addr().port();

    // The system resolver: localhost is loopback, whichever of 127.0.0.1 and ::1 comes first.
    let error = fetcher(settings(false)).fetch(&format!("http://localhost:{port}/page"), None).await.unwrap_err();
    assert!(error.0.starts_with("localhost resolves to "), "{error}");
    assert!(error.0.contains("a loopback address; fetching private addresses is off"), "{error}");

    // A public-looking name whose DNS answers a loopback address.
    let lookup = StaticLookup::new().with("news.example", [IpAddr::from([127, 0, 0, 1])]);
    let error = guarded_with(lookup).fetch(&format!("http://news.example:{port}/page"), None).await.unwrap_err();
    assert_eq!(
        error.0,
        "news.example resolves to 127.0.0.1, a loopback address; fetching private addresses is off \
         (tools.web.allow_private)"
    );
    assert_eq!(hits.count(), 0, "no connection was made");
}

#[tokio::test]
async fn a_redirect_from_a_public_site_to_a_private_address_is_refused_on_the_hop() {
    let private_hits = Hits::default();
    let private = serve(site(&private_hits), [127, 0, 0, 1]).await;
    let port = private.addr().port();
    let public_hits = Hits::default();
    let to_literal = format!("http://127.0.0.1:{port}/page");
    let to_name = format!("http://internal.example:{port}/page");
    let public = serve(
        Router::new()
            .route("/to-literal", get(move || async move { Redirect::temporary(&to_literal) }))
            .route("/to-name", get(move || async move { Redirect::to(&to_name) }))
            .route("/to-self", get(|| async { Redirect::permanent("/json") }))
            .route("/json", get(|| async { ([(CONTENT_TYPE, "application/json")], "{}") }))
            .layer(middleware::from_fn_with_state(public_hits.clone(), count_hit)),
        STAND_IN,
    )
    .await;
    let lookup = StaticLookup::new()
        .with("public.example", [IpAddr::from(STAND_IN)])
        .with("internal.example", [IpAddr::from([127, 0, 0, 1])]);
    let fetch = guarded_with(lookup);
    let public_port = public.addr().port();

    // The stand-in is reachable, and so is a redirect that stays on it.
    let result = fetch.fetch(&format!("http://public.example:{public_port}/to-self"), None).await.unwrap();
    assert!(result.starts_with(&format!("URL: http://public.example:{public_port}/json\n")), "{result}");
    assert!(result.contains(&format!("Redirected from: http://public.example:{public_port}/to-self")), "{result}");

    let error = fetch.fetch(&format!("http://public.example:{public_port}/to-literal"), None).await.unwrap_err();
    assert!(error.0.starts_with("127.0.0.1 is a loopback address;"), "{error}");
    let error = fetch.fetch(&format!("http://127.0.0.2:{public_port}/to-name"), None).await.unwrap_err();
    assert!(error.0.starts_with("internal.example resolves to 127.0.0.1, a loopback address;"), "{error}");
    assert_eq!(public_hits.count(), 4);
    assert_eq!(private_hits.count(), 0, "no hop reached the private server");
}

/// Answers a public (stand-in) address the first time and loopback afterwards, as a
/// rebinding attacker's DNS server would.
struct Rebinding(AtomicUsize);

impl Lookup for Rebinding {
    fn lookup(&self, _host: String) -> futures::future::BoxFuture<'static, std::io::Result<Vec<IpAddr>>> {
        let first = self.0.fetch_add(1, Ordering::SeqCst) == 0;
        let address = if first { IpAddr::from(STAND_IN) } else { IpAddr::from([127, 0, 0, 1]) };
        Box::pin(async move { Ok(vec![address]) })
    }
}

#[tokio::test]
async fn a_name_that_rebinds_to_a_private_address_between_connections_is_refused() {
    let hits = Hits::default();
    // `Connection: close` makes the client connect (and so resolve) again for the redirect.
    let public = serve(
        Router::new()
            .route("/start", get(|| async { ([("connection", "close")], Redirect::temporary("/next")) }))
            .route("/next", get(|| async { "the private side" }))
            .layer(middleware::from_fn_with_state(hits.clone(), count_hit)),
        STAND_IN,
    )
    .await;
    let fetch = guarded_with(Rebinding(AtomicUsize::new(0)));
    let error = fetch.fetch(&format!("http://rebind.example:{}/start", public.addr().port()), None).await.unwrap_err();
    assert!(error.0.starts_with("rebind.example resolves to 127.0.0.1, a loopback address"), "{error}");
    assert_eq!(hits.count(), 1, "only the first, public, request was made");
}

#[tokio::test]
async fn an_oversize_body_is_cut_at_max_bytes_and_the_rest_is_not_read() {
    let hits = Hits::default();
    let server = serve(site(&hits), [127, 0, 0, 1]).await;
    let fetch = fetcher(FetchSettings { max_bytes: 10_000, ..settings(true) });

    let result = fetch.fetch(&format!("{}/big", server.url()), None).await.unwrap();
    assert!(result.contains("Note: only the first 10000 bytes were read (tools.web.max_bytes)"), "{result}");
    let content = result.split_once("\n\n").unwrap().1;
    assert_eq!(content, "x".repeat(10_000));

    // An endless body: reading stops at the cap instead of running into the timeout.
    let started = Instant::now();
    let result = fetch.fetch(&format!("{}/endless", server.url()), Some(500)).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert!(result.contains("only the first 10000 bytes were read"), "{result}");
    assert!(result.contains("[… content cut here: 500 of 10000 characters shown (max_chars)"), "{result}");
}

#[tokio::test]
async fn redirects_are_followed_up_to_max_redirects_and_one_more_is_an_error() {
    let hits = Hits::default();
    let server = serve(site(&hits), [127, 0, 0, 1]).await;
    let fetch = fetcher(FetchSettings { max_redirects: 3, ..settings(true) });

    let result = fetch.fetch(&format!("{}/chain/2", server.url()), None).await.unwrap();
    assert!(result.starts_with(&format!("URL: {}/page\n", server.url())), "{result}");
    assert!(result.contains(&format!("Redirected from: {}/chain/2\n", server.url())), "{result}");

    let before = hits.count();
    let error = fetch.fetch(&format!("{}/loop/0", server.url()), None).await.unwrap_err();
    assert_eq!(
        error.0,
        format!(
            "too many redirects: stopped after 3 (tools.web.max_redirects); {0}/loop/3 redirects on to {0}/loop/4",
            server.url()
        )
    );
    assert_eq!(hits.count() - before, 4, "the first request and three redirects");
}

#[tokio::test]
async fn errors_binary_types_and_text_are_told_apart() {
    let hits = Hits::default();
    let server = serve(site(&hits), [127, 0, 0, 1]).await;
    let fetch = fetcher(settings(true));
    let url = server.url();

    let error = fetch.fetch(&format!("{url}/missing"), None).await.unwrap_err();
    assert_eq!(error.0, format!("{url}/missing answered HTTP 404 Not Found; the response begins:\nno such page here"));
    let error = fetch.fetch(&format!("{url}/image"), None).await.unwrap_err();
    assert!(error.0.starts_with(&format!("{url}/image is not text (image/png)")), "{error}");
    let result = fetch.fetch(&format!("{url}/json"), None).await.unwrap();
    assert!(result.contains("Content-Type: application/json\n\n{\"answer\": 42}"), "{result}");
    let error = fetch.fetch("file:///etc/passwd", None).await.unwrap_err();
    assert!(error.0.contains("only http:// and https://"), "{error}");
    let error = fetch.fetch("example.com/page", None).await.unwrap_err();
    assert!(error.0.ends_with("is not a full URL: start it with https:// or http://"), "{error}");

    // Nothing listens on the port of a server that was shut down.
    let gone = serve(Router::new(), [127, 0, 0, 1]).await;
    let gone_url = format!("{}/", gone.url());
    gone.shutdown().await;
    let error = fetch.fetch(&gone_url, None).await.unwrap_err();
    assert!(error.0.starts_with(&format!("could not fetch {gone_url}: ")), "{error}");
    assert!(error.0.contains("refused"), "says why: {error}");
    assert_eq!(error.0.matches(&gone_url).count(), 1, "the URL once: {error}");
}

#[tokio::test]
async fn a_page_in_a_legacy_charset_is_decoded_from_its_header_or_else_its_meta() {
    let hits = Hits::default();
    let server = serve(site(&hits), [127, 0, 0, 1]).await;
    let fetch = fetcher(settings(true));
    let content = |result: String| result.split_once("\n\n").map(|(_, content)| content.to_owned()).unwrap();

    let latin1 = fetch.fetch(&format!("{}/latin1", server.url()), None).await.unwrap();
    // ISO-8859-1 is read as browsers read it, as windows-1252: 0x80 is the euro sign.
    assert_eq!(content(latin1), "naïve garçon, € 5");
    let cp1252 = fetch.fetch(&format!("{}/cp1252", server.url()), None).await.unwrap();
    assert_eq!(content(cp1252), "\u{201c}Café\u{201d} \u{2013} open");
    for path in ["/sjis-meta", "/sjis-http-equiv", "/sjis-unlabelled"] {
        let result = fetch.fetch(&format!("{}{path}", server.url()), None).await.unwrap();
        assert!(result.contains("\nTitle: 日本語のページ\n"), "{path}: {result}");
        assert_eq!(content(result), "# 日本語のページ", "{path}");
    }
    // The header's charset wins over the page's <meta>: Shift_JIS bytes read as windows-1252.
    let result = fetch.fetch(&format!("{}/header-wins", server.url()), None).await.unwrap();
    assert!(content(result).starts_with("# \u{201c}ú\u{2013}{"));
}

/// html5ever 0.38 panicked on this `<meta>` (`content` ends in "charset"), which made the
/// conversion, and so the fetch, fail.
#[tokio::test]
async fn a_meta_whose_content_ends_in_charset_does_not_stop_the_page_being_read() {
    let hits = Hits::default();
    let server = serve(site(&hits), [127, 0, 0, 1]).await;
    let result = fetcher(settings(true)).fetch(&format!("{}/meta-without-charset", server.url()), None).await;
    assert!(result.as_ref().is_ok_and(|page| page.ends_with("\n\nStill read.")), "{result:?}");
}

#[tokio::test]
async fn a_fetch_that_takes_too_long_is_stopped() {
    let hits = Hits::default();
    let server = serve(site(&hits), [127, 0, 0, 1]).await;
    let fetch = fetcher(FetchSettings { timeout: Duration::from_secs(1), ..settings(true) });
    let error = fetch.fetch(&format!("{}/stall", server.url()), None).await.unwrap_err();
    assert!(error.0.ends_with("took longer than 1 s (tools.web.timeout_seconds) and was stopped"), "{error}");
}

/// One request to a search API's fake: its query string and its Brave token header.
type SearchRequest = (String, Option<String>);

/// A search API's requests, as its fake saw them.
#[derive(Clone, Default)]
struct SearchLog(Arc<Mutex<Vec<SearchRequest>>>);

impl SearchLog {
    fn requests(&self) -> Vec<SearchRequest> {
        self.0.lock().unwrap().clone()
    }
}

fn query_pairs(query: &str) -> Vec<(String, String)> {
    url::form_urlencoded::parse(query.as_bytes()).into_owned().collect()
}

/// A SearXNG instance with the JSON format enabled, or (`json_enabled = false`) refusing it
/// with the 403 a default install gives.
async fn fake_searxng(log: &SearchLog, json_enabled: bool) -> FakeServer {
    let log = log.clone();
    let answer = move |request: Request| {
        let log = log.clone();
        async move {
            let query = request.uri().query().unwrap_or_default().to_owned();
            log.0.lock().unwrap().push((query, None));
            if !json_enabled {
                return (StatusCode::FORBIDDEN, "Forbidden").into_response();
            }
            let results: Vec<_> = (1..=8)
                .map(|n| {
                    serde_json::json!({
                        "url": format!("https://result{n}.example/"), "title": format!("Result {n}"),
                        "content": format!("Snippet {n}."), "engine": "fake", "score": 1.0,
                    })
                })
                .collect();
            axum::Json(serde_json::json!({ "query": "q", "number_of_results": 8, "results": results })).into_response()
        }
    };
    serve(Router::new().route("/searx/search", get(answer)), [127, 0, 0, 1]).await
}

/// The Brave Search API, requiring `X-Subscription-Token: bsa-test`.
async fn fake_brave(log: &SearchLog) -> FakeServer {
    let log = log.clone();
    let answer = move |headers: HeaderMap, request: Request| {
        let log = log.clone();
        async move {
            let token = headers.get("x-subscription-token").and_then(|value| value.to_str().ok()).map(str::to_owned);
            let query = request.uri().query().unwrap_or_default().to_owned();
            log.0.lock().unwrap().push((query.clone(), token.clone()));
            if token.as_deref() != Some("bsa-test") {
                return (StatusCode::UNAUTHORIZED, r#"{"type":"ErrorResponse"}"#).into_response();
            }
            let count: usize = query_pairs(&query)
                .iter()
                .find(|(key, _)| key == "count")
                .and_then(|(_, value)| value.parse().ok())
                .unwrap_or(20);
            let results: Vec<_> = (1..=count)
                .map(|n| {
                    serde_json::json!({
                        "title": format!("Brave &amp; result {n}"), "url": format!("https://brave{n}.example/"),
                        "description": format!("A <strong>matched</strong> snippet {n}."),
                    })
                })
                .collect();
            axum::Json(serde_json::json!({ "type": "search", "web": { "type": "search", "results": results } }))
                .into_response()
        }
    };
    serve(Router::new().route("/res/v1/web/search", get(answer)), [127, 0, 0, 1]).await
}

fn search_tool(provider: WebSearchProvider, url: String, api_key: Option<&str>) -> WebSearch {
    let config = WebSearchConfig { provider, url: Some(url), api_key: api_key.map(Secret::new) };
    WebSearch::from_config(&config, Duration::from_secs(5)).expect("a search tool")
}

#[tokio::test]
async fn searxng_results_come_back_as_titles_urls_and_snippets() {
    let log = SearchLog::default();
    let server = fake_searxng(&log, true).await;
    // On loopback: the operator's provider is not subject to the SSRF guard.
    let search = search_tool(WebSearchProvider::Searxng, format!("{}/searx/", server.url()), None);
    let results = search.search("rust ssrf guard", Some(3)).await.unwrap();
    assert_eq!(results.len(), 3);
    assert_eq!(
        (results[0].title.as_str(), results[0].url.as_str(), results[0].snippet.as_str()),
        ("Result 1", "https://result1.example/", "Snippet 1.")
    );
    let (query, _) = &log.requests()[0];
    assert_eq!(query_pairs(query), [("q".into(), "rust ssrf guard".into()), ("format".into(), "json".into())]);
    assert_eq!(search.search("default count", None).await.unwrap().len(), 5);
    assert_eq!(search.search("capped", Some(500)).await.unwrap().len(), 8, "all there are, up to 20");
}

#[tokio::test]
async fn a_searxng_without_the_json_format_is_explained() {
    let log = SearchLog::default();
    let server = fake_searxng(&log, false).await;
    let search = search_tool(WebSearchProvider::Searxng, format!("{}/searx", server.url()), None);
    let error = search.search("anything", None).await.unwrap_err();
    assert!(error.0.contains("HTTP 403 Forbidden") && error.0.contains("search.formats"), "{error}");
}

#[tokio::test]
async fn brave_gets_the_key_in_its_header_and_the_count() {
    let log = SearchLog::default();
    let server = fake_brave(&log).await;
    let search = search_tool(WebSearchProvider::Brave, server.url(), Some("bsa-test"));
    let results = search.search("ferry", Some(3)).await.unwrap();
    assert_eq!(results.len(), 3);
    assert_eq!(results[2].title, "Brave & result 3");
    assert_eq!(results[2].snippet, "A **matched** snippet 3.");
    let (query, token) = &log.requests()[0];
    assert_eq!(query_pairs(query), [("q".into(), "ferry".into()), ("count".into(), "3".into())]);
    assert_eq!(token.as_deref(), Some("bsa-test"));

    let wrong = search_tool(WebSearchProvider::Brave, server.url(), Some("bsa-wrong"));
    let error = wrong.search("ferry", None).await.unwrap_err();
    assert!(error.0.contains("HTTP 401 Unauthorized") && error.0.contains("BRAVE_API_KEY"), "{error}");
    assert!(!error.0.contains("bsa-wrong"), "the key stays out of results: {error}");
}

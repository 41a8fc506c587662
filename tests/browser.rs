//! The web chat in a real browser: the `ferry gateway` binary with no model configured (so the
//! offline echo provider answers), headless Chromium driven through chromedriver (WebDriver),
//! and the page doing what a person does — wait for "online", type, press Enter, read the
//! streamed answer, reload and see the history, start a new chat.
//!
//! Needs `/usr/bin/chromium` and `/usr/bin/chromedriver` (Debian: `chromium chromium-driver`).
//! Without them the test prints a loud notice and passes, unless `FERRY_REQUIRE_BROWSER=1`
//! (set by `.ci/run`), in which case it fails. Nothing is downloaded.
//!
//! Every wait polls for a visible condition under a generous bound; none asserts on timing.
#![cfg(unix)]

use std::future::Future;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use fantoccini::key::Key;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// When set to `1`, a missing browser fails the test instead of skipping it.
const REQUIRE_BROWSER_VAR: &str = "FERRY_REQUIRE_BROWSER";
/// How long the gateway and chromedriver may take to answer after spawning (a busy CI machine).
const STARTUP_BOUND: Duration = Duration::from_secs(60);
/// How long the page may take to show something (connect, stream a reply, render history).
const PAGE_BOUND: Duration = Duration::from_secs(30);
const POLL_EVERY: Duration = Duration::from_millis(100);

const MESSAGE: &str = "Hello from the browser test";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_chats_with_the_echo_agent_in_a_real_browser() {
    if let Some(missing) = [CHROMIUM, CHROMEDRIVER].into_iter().find(|path| !Path::new(path).exists()) {
        let required = std::env::var(REQUIRE_BROWSER_VAR).is_ok_and(|value| value == "1");
        assert!(
            !required,
            "{REQUIRE_BROWSER_VAR}=1 but {missing} is missing: install `chromium chromium-driver` (Debian)"
        );
        eprintln!("\n{}", "=".repeat(78));
        eprintln!("SKIPPED the web chat browser test: {missing} is not installed.");
        eprintln!("Install `chromium chromium-driver` (Debian) or set {REQUIRE_BROWSER_VAR}=1 to make this fail.");
        eprintln!("{}\n", "=".repeat(78));
        return;
    }

    let dir = tempfile::tempdir().expect("temp dir");
    let gateway = Gateway::start(dir.path()).await.expect("start the gateway");
    let driver = ChromeDriver::start(dir.path()).await.expect("start chromedriver");
    let client = driver.session().await.expect("open a browser session");

    let outcome = chat_like_a_person(&client, &gateway.url).await;
    // Close the browser whatever happened, so no Chromium outlives the test.
    let closed = client.close().await;
    if let Err(error) = outcome {
        panic!("{error:#}\n--- gateway log ---\n{}", gateway.log());
    }
    closed.expect("close the browser session");
}

async fn chat_like_a_person(client: &Client, url: &str) -> Result<()> {
    client.goto(url).await.context("open the page")?;
    wait_for_online(client).await?;

    let composer = client.find(Locator::Css("#composer")).await.context("the composer")?;
    composer.send_keys(MESSAGE).await?;
    composer.send_keys(&Key::Enter.to_string()).await?;

    let answer = poll("an assistant bubble with the echoed text", || async {
        let texts = texts(client, ".msg.assistant[data-state='final'] .msg-body").await?;
        Ok(texts.into_iter().find(|text| text.contains(MESSAGE)))
    })
    .await?;
    ensure!(answer.trim() == MESSAGE, "the echo provider answers with the text itself, got {answer:?}");
    let users = texts(client, ".msg.user .msg-body").await?;
    ensure!(users.iter().any(|text| text.trim() == MESSAGE), "the user's bubble is shown: {users:?}");
    let composer_text = composer.prop("value").await?.unwrap_or_default();
    ensure!(composer_text.is_empty(), "Enter sends and clears the composer, left {composer_text:?}");

    let screenshot = target_dir().join("webchat.png");
    std::fs::create_dir_all(screenshot.parent().expect("target dir"))?;
    std::fs::write(&screenshot, client.screenshot().await?).with_context(|| format!("{}", screenshot.display()))?;
    eprintln!("screenshot: {}", screenshot.display());

    // A reload starts a new socket; the conversation comes back through chat.history.
    client.refresh().await?;
    wait_for_online(client).await?;
    poll("the history after a reload", || async {
        let users = texts(client, ".msg.user .msg-body").await?;
        let assistants = texts(client, ".msg.assistant .msg-body").await?;
        let restored = users.iter().any(|t| t.trim() == MESSAGE) && assistants.iter().any(|t| t.trim() == MESSAGE);
        Ok(restored.then_some(()))
    })
    .await?;

    client.find(Locator::Css("#new-chat")).await?.click().await?;
    poll("the new conversation notice, and the old messages gone", || async {
        let users = texts(client, ".msg.user .msg-body").await?;
        let assistants = texts(client, ".msg.assistant .msg-body").await?;
        let announced = assistants.iter().any(|t| t.to_lowercase().contains("new conversation"));
        let cleared = !users.iter().chain(&assistants).any(|t| t.contains(MESSAGE));
        Ok((announced && cleared).then_some(()))
    })
    .await
}

async fn wait_for_online(client: &Client) -> Result<()> {
    poll("the connection status to be online", || async {
        let status = client.find(Locator::Css("#status")).await?;
        Ok((status.attr("data-state").await?.as_deref() == Some("online")).then_some(()))
    })
    .await
}

/// The visible text of every element matching `selector`, in document order.
async fn texts(client: &Client, selector: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for element in client.find_all(Locator::Css(selector)).await? {
        out.push(element.text().await?);
    }
    Ok(out)
}

/// Polls `check` until it yields a value; fails with `what` after [`PAGE_BOUND`]. Errors from
/// `check` (an element that went stale mid-render) count as "not yet".
async fn poll<T, F, Fut>(what: &str, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let started = Instant::now();
    let mut last_error = None;
    loop {
        match check().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => {}
            Err(error) => last_error = Some(error),
        }
        if started.elapsed() > PAGE_BOUND {
            bail!("waited {PAGE_BOUND:?} for {what}; last error: {last_error:?}");
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// `target/` of this workspace (or `CARGO_TARGET_DIR`), where the screenshot goes.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
}

/// A port nobody listens on right now (bound, then released for the child to take).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("bind a free port").port()
}

/// Polls `url` until it answers 200, while checking that `child` is still alive.
async fn wait_for_http(url: &str, child: &mut Child, name: &str) -> Result<()> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build()?;
    let started = Instant::now();
    loop {
        if let Ok(response) = http.get(url).send().await
            && response.status().is_success()
        {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            bail!("{name} exited before answering {url}: {status}");
        }
        if started.elapsed() > STARTUP_BOUND {
            bail!("{name} did not answer {url} within {STARTUP_BOUND:?}");
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// A child process killed (with its process group) when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        // The group takes chromedriver's Chromium with it if the session was not closed.
        let group = format!("-{}", self.0.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).stderr(Stdio::null()).status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `ferry gateway` on a free port with its own config and state directory.
struct Gateway {
    url: String,
    log_path: PathBuf,
    _process: Process,
}

impl Gateway {
    async fn start(dir: &Path) -> Result<Self> {
        let port = free_port();
        let config = dir.join("ferry.toml");
        std::fs::write(&config, format!("[gateway]\nport = {port}\n"))?;
        let log_path = dir.join("gateway.log");
        let log = std::fs::File::create(&log_path)?;
        // A clean environment: no model keys, so the offline echo provider answers.
        let mut child = Command::new(env!("CARGO_BIN_EXE_ferry"))
            .args(["gateway", "--config"])
            .arg(&config)
            .env_clear()
            .env("HOME", dir)
            .env("FERRY_STATE_DIR", dir.join("state"))
            .current_dir(dir)
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .context("spawn ferry gateway")?;
        let url = format!("http://127.0.0.1:{port}/");
        let ready = wait_for_http(&format!("{url}healthz"), &mut child, "ferry gateway").await;
        let gateway = Gateway { url, log_path, _process: Process(child) };
        if let Err(error) = ready {
            bail!("{error:#}\n--- gateway log ---\n{}", gateway.log());
        }
        Ok(gateway)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

/// chromedriver on a free port; [`ChromeDriver::session`] opens headless Chromium through it.
struct ChromeDriver {
    url: String,
    _process: Process,
}

impl ChromeDriver {
    async fn start(dir: &Path) -> Result<Self> {
        let port = free_port();
        let mut child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .env("HOME", dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .context("spawn chromedriver")?;
        let url = format!("http://127.0.0.1:{port}");
        let ready = wait_for_http(&format!("{url}/status"), &mut child, "chromedriver").await;
        let driver = ChromeDriver { url, _process: Process(child) };
        ready?;
        Ok(driver)
    }

    async fn session(&self) -> Result<Client> {
        let options = serde_json::json!({
            "binary": CHROMIUM,
            "args": [
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--window-size=1200,900",
            ],
        });
        let mut capabilities = serde_json::Map::new();
        capabilities.insert("goog:chromeOptions".to_owned(), options);
        // chromedriver speaks plain HTTP on 127.0.0.1: no TLS connector needed.
        let client = ClientBuilder::new(HttpConnector::new()).capabilities(capabilities).connect(&self.url).await?;
        Ok(client)
    }
}

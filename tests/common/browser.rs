//! What the browser tests (`tests/browser.rs`) stand on: the `ferry gateway` binary on a free
//! port with its own config and state directory, chromedriver and headless Chromium, and
//! helpers that read the page or wait for it to show something.
//!
//! Needs `/usr/bin/chromium` and `/usr/bin/chromedriver` (Debian: `chromium chromium-driver`).
//! Without them [`World::start`] prints a loud notice and the test passes, unless
//! `FERRY_REQUIRE_BROWSER=1` (set by `.ci/run`), in which case it fails. Nothing is downloaded.

use std::fs::OpenOptions;
use std::future::Future;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use fantoccini::key::Key;
use fantoccini::{Client, ClientBuilder, Locator};
use futures::{SinkExt, StreamExt};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio_tungstenite::tungstenite::Message;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// When set to `1`, a missing browser fails the test instead of skipping it.
const REQUIRE_BROWSER_VAR: &str = "FERRY_REQUIRE_BROWSER";
/// How long the gateway and chromedriver may take to answer after spawning, and the gateway
/// to exit after SIGTERM (a busy CI machine).
const STARTUP_BOUND: Duration = Duration::from_secs(60);
/// How long the page may take to show something (connect, stream a reply, render history).
pub const PAGE_BOUND: Duration = Duration::from_secs(30);
const POLL_EVERY: Duration = Duration::from_millis(100);

// ------------------------------------------------------------------------ page helpers

/// Types `text` into the composer and presses Enter.
pub async fn send(client: &Client, text: &str) -> Result<()> {
    let composer = client.find(Locator::Css("#composer")).await.context("the composer")?;
    composer.send_keys(text).await?;
    composer.send_keys(&Key::Enter.to_string()).await?;
    Ok(())
}

/// Waits for a settled assistant bubble whose text contains `needle`; returns its text.
pub async fn final_answer_containing(client: &Client, needle: &str) -> Result<String> {
    poll(&format!("an answer containing {needle:?}"), || async {
        let texts = texts(client, ".msg.assistant[data-state='final'] .msg-body").await?;
        Ok(texts.into_iter().find(|text| text.contains(needle)))
    })
    .await
}

/// Waits for the history to show `text` as both the user's message and the echoed answer.
pub async fn wait_for_history_with(client: &Client, text: &str) -> Result<()> {
    poll(&format!("the history with {text:?}"), || async {
        let users = texts(client, ".msg.user .msg-body").await?;
        let assistants = texts(client, ".msg.assistant .msg-body").await?;
        let restored = users.iter().any(|t| t.trim() == text) && assistants.iter().any(|t| t.trim() == text);
        Ok(restored.then_some(()))
    })
    .await
}

pub async fn wait_for_state(client: &Client, state: &str) -> Result<()> {
    poll(&format!("the connection state to be {state}"), || async {
        let status = client.find(Locator::Css("#status")).await?;
        Ok((status.attr("data-state").await?.as_deref() == Some(state)).then_some(()))
    })
    .await
}

pub async fn wait_for_hero(client: &Client) -> Result<()> {
    poll("the empty conversation's hero", || async { Ok(hero_shown(client).await?.then_some(())) }).await
}

pub async fn hero_shown(client: &Client) -> Result<bool> {
    Ok(client.find(Locator::Css("#empty")).await?.is_displayed().await?)
}

pub async fn banner_shown(client: &Client) -> Result<bool> {
    Ok(client.find(Locator::Css("#banner")).await?.is_displayed().await?)
}

/// The conversation the page shows: the session the gateway gave this browser
/// (`hello-ok.sessionKey`), or its conversation with the agent picked.
pub async fn session_key(client: &Client) -> Result<String> {
    let status = client.find(Locator::Css("#status")).await?;
    status.attr("data-session").await?.context("the page shows no session key")
}

pub async fn client_id(client: &Client) -> Result<String> {
    let id = client.execute("return localStorage.getItem('ferry.webchat.clientId');", vec![]).await?;
    id.as_str().map(str::to_owned).context("no client id in localStorage")
}

pub async fn page_text(client: &Client) -> Result<String> {
    Ok(client.find(Locator::Css("#messages")).await?.text().await?)
}

/// Saves what the page looks like now under `target/`, for a person to look at.
pub async fn screenshot(client: &Client, name: &str) -> Result<()> {
    let path = target_dir().join(name);
    std::fs::create_dir_all(path.parent().expect("target dir"))?;
    std::fs::write(&path, client.screenshot().await?).with_context(|| format!("{}", path.display()))?;
    eprintln!("screenshot: {}", path.display());
    Ok(())
}

/// The visible text of every element matching `selector`, in document order.
pub async fn texts(client: &Client, selector: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for element in client.find_all(Locator::Css(selector)).await? {
        out.push(element.text().await?);
    }
    Ok(out)
}

/// Polls `check` until it yields a value; fails with `what` after [`PAGE_BOUND`]. Errors from
/// `check` (an element that went stale mid-render) count as "not yet".
pub async fn poll<T, F, Fut>(what: &str, mut check: F) -> Result<T>
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

// ------------------------------------------------------------------------ harness

/// A test's gateway and chromedriver, in a temporary directory.
pub struct World {
    pub gateway: Gateway,
    driver: ChromeDriver,
    _dir: TempDir,
}

impl World {
    /// `None` (after a loud notice) when the browser is not installed and not required.
    /// `model` is an OpenAI-compatible base URL; without one the echo provider answers.
    pub async fn start(model: Option<&str>) -> Option<Self> {
        Self::start_with(model, "").await
    }

    /// [`World::start`] with `config` (TOML tables) added to the gateway's config.
    pub async fn start_with(model: Option<&str>, config: &str) -> Option<Self> {
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
            return None;
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let gateway = Gateway::launch(dir.path(), model, config).await.expect("start the gateway");
        let driver = ChromeDriver::start(dir.path()).await.expect("start chromedriver");
        Some(Self { gateway, driver, _dir: dir })
    }

    /// A new browser session: its own Chromium with a fresh profile (own localStorage).
    pub async fn browser(&self) -> Client {
        self.driver.session().await.expect("open a browser session")
    }

    /// Closes the browsers whatever happened, so no Chromium outlives the test; a failure
    /// panics with the gateway's log.
    pub async fn finish<const N: usize>(self, outcome: Result<()>, clients: [Client; N]) {
        let mut closed = Vec::new();
        for client in clients {
            closed.push(client.close().await);
        }
        if let Err(error) = outcome {
            panic!("{error:#}\n--- gateway log ---\n{}", self.gateway.log());
        }
        for close in closed {
            close.expect("close the browser session");
        }
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

impl Process {
    /// SIGTERM, then waits for the process to exit (SIGKILL after [`STARTUP_BOUND`]).
    async fn terminate(mut self) -> Result<()> {
        Command::new("kill").args(["-TERM", &self.0.id().to_string()]).status().context("run kill")?;
        let started = Instant::now();
        while self.0.try_wait()?.is_none() {
            if started.elapsed() > STARTUP_BOUND {
                bail!("the process did not exit within {STARTUP_BOUND:?} of SIGTERM");
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
        Ok(())
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // The group takes chromedriver's Chromium with it if the session was not closed.
        let group = format!("-{}", self.0.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).stderr(Stdio::null()).status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `ferry gateway` on a free port with its own config and state directory; it can be stopped
/// and started again on the same port, as an operator's restart would.
pub struct Gateway {
    pub url: String,
    dir: PathBuf,
    config: PathBuf,
    log_path: PathBuf,
    /// The OpenAI-compatible server the agent talks to; the echo provider without one.
    model: Option<String>,
    process: Option<Process>,
}

impl Gateway {
    /// `extra`: TOML tables after `[gateway]`.
    async fn launch(dir: &Path, model: Option<&str>, extra: &str) -> Result<Self> {
        let port = free_port();
        let config = dir.join("ferry.toml");
        std::fs::write(&config, format!("[gateway]\nport = {port}\n\n{extra}\n"))?;
        let mut gateway = Gateway {
            url: format!("http://127.0.0.1:{port}/"),
            dir: dir.to_owned(),
            config,
            log_path: dir.join("gateway.log"),
            model: model.map(str::to_owned),
            process: None,
        };
        gateway.start().await?;
        Ok(gateway)
    }

    /// Starts the gateway (again); returns once `/healthz` answers.
    pub async fn start(&mut self) -> Result<()> {
        let log = OpenOptions::new().create(true).append(true).open(&self.log_path)?;
        let mut command = Command::new(env!("CARGO_BIN_EXE_ferry"));
        // A clean environment: no model keys, so only the model named here answers.
        command
            .args(["gateway", "--config"])
            .arg(&self.config)
            .env_clear()
            .env("HOME", &self.dir)
            .env("FERRY_STATE_DIR", self.state_dir())
            .current_dir(&self.dir)
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0);
        if let Some(model) = &self.model {
            command.env("OPENAI_BASE_URL", model);
        }
        let mut child = command.spawn().context("spawn ferry gateway")?;
        let ready = wait_for_http(&format!("{}healthz", self.url), &mut child, "ferry gateway").await;
        self.process = Some(Process(child));
        if let Err(error) = ready {
            bail!("{error:#}\n--- gateway log ---\n{}", self.log());
        }
        Ok(())
    }

    /// Stops the gateway as SIGTERM does in production; its port and state stay for
    /// [`Gateway::start`].
    pub async fn stop(&mut self) -> Result<()> {
        match self.process.take() {
            Some(process) => process.terminate().await.context("stop the gateway"),
            None => Ok(()),
        }
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.join("state")
    }

    /// Asks the gateway itself, not the page: a socket of its own (client id `browser-test`),
    /// the `connect` handshake, then `method`; returns that answer's payload.
    pub async fn rpc(&self, method: &str, params: Value) -> Result<Value> {
        let url = format!("{}ws", self.url.replacen("http://", "ws://", 1));
        let call = async {
            let (mut socket, _) = tokio_tungstenite::connect_async(url.as_str()).await.context("open /ws")?;
            let hello = ("connect", json!({ "client": { "id": "browser-test", "version": "test" } }));
            let mut payload = Value::Null;
            // Each request's id is its method: one of each.
            for (method, params) in [hello, (method, params)] {
                let request = json!({ "type": "req", "id": method, "method": method, "params": params });
                socket.send(Message::Text(request.to_string().into())).await?;
                payload = loop {
                    let frame = socket
                        .next()
                        .await
                        .with_context(|| format!("the socket closed before {method}'s answer"))??;
                    let Message::Text(text) = frame else { continue };
                    let frame: Value = serde_json::from_str(&text)?;
                    if frame["type"] == "res" && frame["id"] == method {
                        if frame["ok"] != true {
                            bail!("{method} failed: {frame}");
                        }
                        break frame["payload"].clone();
                    }
                };
            }
            let _ = socket.close(None).await;
            Ok(payload)
        };
        tokio::time::timeout(PAGE_BOUND, call).await.with_context(|| format!("no answer to {method} in time"))?
    }

    pub fn log(&self) -> String {
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

    /// A new Chromium; chromedriver gives each session a fresh temporary profile.
    async fn session(&self) -> Result<Client> {
        let options = json!({
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

//! One MCP tool call's round trip over stdio, and what Ferry adds to it (the target:
//! at most 1 ms beyond the server's own time at p50). Prints p50/p99 per variant.
//!
//! Three clients call the same tool of the same server program, each on its own process of
//! it, interleaved call by call so load on the machine hits them alike:
//! - **Ferry**: `McpTools::call` — the registry's lookup, rmcp, the pipe, the server, the
//!   result converted into a `ToolOutput`; the path a model's tool call takes.
//! - **rmcp alone**: `Peer::call_tool` on a bare rmcp client, no Ferry code: splits Ferry's
//!   overhead into rmcp's and Ferry's own.
//! - **raw**: the `tools/call` request rmcp sends (`_meta.progressToken` included) written by
//!   hand as one line to the server's stdin, and the reply line read back (after an initialize
//!   handshake done by hand): the server's own time plus the pipes, the baseline.
//!
//! Two servers: the reference `server-everything` (node) and its `echo` tool, and a minimal
//! server in this binary (serde_json on blocking stdio, microseconds per request), on which
//! the pipes and the client are nearly all there is, so Ferry's overhead shows plainly.
//!
//! `eval "$(tests/mcp/setup)"` first, then `cargo bench --bench mcp` (`MCP_BENCH_N` sets the
//! calls per variant, default 2000, after 200 warm-up calls each). The daemon's log
//! subscriber is installed at its default level (INFO; `RUST_LOG` changes it), as in
//! `ferry gateway`.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry::agent::tools::{RecentSessions, ToolContext, ToolSource};
use ferry::channels::ChannelRegistry;
use ferry::config::{Environment, McpConfig, McpServerConfig, Secret};
use ferry::logging::{self, LogFormat, Verbosity};
use ferry::mcp::{McpTools, Phase};
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// Set in the environment of this binary started as the minimal server.
const SERVE_VAR: &str = "FERRY_MCP_BENCH_SERVE";
/// The revision the raw client offers and the minimal server answers: the one rmcp's
/// handshake ends on with both servers.
const PROTOCOL: &str = "2025-11-25";
const WARM_UP: usize = 200;

/// A server program to start: for Ferry as `[mcp.servers.NAME]`, for the others by hand.
struct Program {
    /// The server's name in Ferry's config, and in the output.
    name: &'static str,
    command: String,
    args: Vec<String>,
    env: BTreeMap<String, String>,
    /// What its `echo` puts before the message.
    echo_prefix: &'static str,
}

impl Program {
    fn server_config(&self) -> McpServerConfig {
        McpServerConfig {
            command: Some(self.command.clone()),
            args: self.args.clone(),
            env: self.env.iter().map(|(key, value)| (key.clone(), Secret::new(value.as_str()))).collect(),
            ..McpServerConfig::default()
        }
    }

    /// The command as Ferry starts it: an environment of `PATH`, `HOME` and its `env`.
    fn command(&self) -> Command {
        let mut command = Command::new(&self.command);
        command.args(&self.args).env_clear().kill_on_drop(true);
        for variable in ["PATH", "HOME"] {
            if let Ok(value) = std::env::var(variable) {
                command.env(variable, value);
            }
        }
        command.envs(&self.env);
        command
    }
}

/// The baseline client: JSON-RPC lines on the server's pipes, nothing else.
struct RawClient {
    _child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    line: String,
}

impl RawClient {
    async fn start(program: &Program) -> Self {
        let mut child = program
            .command()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the server");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut client = Self { _child: child, stdin, stdout, line: String::new() };
        let initialize = json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
        });
        client.round_trip(format!("{initialize}\n").as_bytes(), 0).await;
        let reply: Value = serde_json::from_str(&client.line).expect("initialize reply");
        assert_eq!(reply["result"]["protocolVersion"], PROTOCOL, "{reply}");
        client.stdin.write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n").await.unwrap();
        client
    }

    /// Writes `request` and reads lines until the reply to `id` (it is then in `self.line`);
    /// returns how many other lines (notifications) came first.
    async fn round_trip(&mut self, request: &[u8], id: u64) -> usize {
        self.stdin.write_all(request).await.expect("write to the server");
        let mut skipped = 0;
        loop {
            self.line.clear();
            let read = self.stdout.read_line(&mut self.line).await.expect("read from the server");
            assert!(read > 0, "the server closed its stdout");
            if is_reply_to(&self.line, id) {
                return skipped;
            }
            skipped += 1;
        }
    }
}

/// Whether `line` is the reply to request `id`: a byte search, so that the baseline holds
/// no JSON parsing (both servers write compact JSON).
fn is_reply_to(line: &str, id: u64) -> bool {
    let key = format!("\"id\":{id}");
    line.match_indices(&key).any(|(at, _)| matches!(line.as_bytes().get(at + key.len()), Some(b',' | b'}')))
}

fn context() -> ToolContext {
    ToolContext {
        sender_id: None,
        memory_scope: None,
        run_id: "bench".into(),
        session_key: "agent:main:main".into(),
        call_id: "call".into(),
        origin: None,
        channels: ChannelRegistry::new(),
        sessions: Arc::new(RecentSessions::default()),
        skills: Arc::default(),
        sends: Arc::default(),
        updates: None,
        outgoing: None,
        schedulers: None,
        send_ledger: None,
    }
}

/// The three clients on one server program, and their samples.
struct Variants {
    ferry: Arc<McpTools>,
    offered: String,
    rmcp: RunningService<RoleClient, ()>,
    raw: RawClient,
    context: ToolContext,
    /// The raw client's next request id; also numbers the messages, so each reply is checked
    /// against its own call.
    next_id: u64,
    /// Lines the raw client read that were not its reply (notifications).
    skipped: usize,
    /// Ferry's, rmcp alone's and the raw client's, in that order.
    samples: [Vec<Duration>; 3],
}

impl Variants {
    async fn start(program: &Program) -> Self {
        let config = McpConfig {
            servers: BTreeMap::from([(program.name.to_owned(), program.server_config())]),
            ..McpConfig::default()
        };
        let ferry = McpTools::start(&config, &Environment::from_process());
        ferry.settled(Duration::from_secs(30)).await;
        let status = ferry.status();
        assert!(status.iter().all(|server| server.phase == Phase::Ready), "{status:#?}");
        let (transport, _) =
            TokioChildProcess::builder(program.command()).stderr(Stdio::null()).spawn().expect("start the server");
        let rmcp = ().serve(transport).await.expect("rmcp handshake");
        let raw = RawClient::start(program).await;
        let negotiated = rmcp.peer_info().map(|info| info.protocol_version.to_string());
        println!(
            "{}: protocol {} (Ferry), {} (rmcp alone), {PROTOCOL} (raw)",
            program.name,
            status[0].protocol.as_deref().unwrap_or("?"),
            negotiated.as_deref().unwrap_or("?")
        );
        let offered = format!("{}__echo", program.name);
        let samples = [Vec::new(), Vec::new(), Vec::new()];
        Self { ferry, offered, rmcp, raw, context: context(), next_id: 1, skipped: 0, samples }
    }

    /// One call through each client, in turn; each checked after its timer stopped.
    async fn round(&mut self, program: &Program, keep: bool) {
        let id = self.next_id;
        self.next_id += 1;
        let message = format!("ping {id}");
        let want = format!("{}{message}", program.echo_prefix);

        let arguments = json!({ "message": message });
        let started = Instant::now();
        let output = self.ferry.call(&self.offered, arguments, &self.context).await;
        let ferry = started.elapsed();
        assert_eq!(output.expect("Ferry's call").text, want);

        let arguments = json!({ "message": message });
        let params = CallToolRequestParams::new("echo").with_arguments(arguments.as_object().cloned().unwrap());
        let started = Instant::now();
        let result = self.rmcp.peer().call_tool(params).await;
        let rmcp = started.elapsed();
        let text = result.expect("rmcp's call").content.into_iter().find_map(|block| block.as_text().cloned());
        assert_eq!(text.map(|text| text.text), Some(want.clone()));

        // The request as rmcp writes it, progress token included.
        let request = json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"_meta": {"progressToken": id}, "arguments": arguments, "name": "echo"},
        });
        let request = format!("{request}\n");
        let started = Instant::now();
        let skipped = self.raw.round_trip(request.as_bytes(), id).await;
        let raw = started.elapsed();
        let reply: Value = serde_json::from_str(&self.raw.line).expect("the reply is JSON");
        assert_eq!(reply["result"]["content"][0]["text"], want.as_str(), "{reply}");

        if keep {
            self.skipped += skipped;
            for (samples, took) in self.samples.iter_mut().zip([ferry, rmcp, raw]) {
                samples.push(took);
            }
        }
    }

    async fn shutdown(self) {
        self.ferry.shutdown().await;
        let _ = self.rmcp.cancel().await;
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index].as_secs_f64() * 1000.0
}

async fn measure(program: &Program, calls: usize) {
    let mut variants = Variants::start(program).await;
    for _ in 0..WARM_UP {
        variants.round(program, false).await;
    }
    let started = Instant::now();
    for _ in 0..calls {
        variants.round(program, true).await;
    }
    let took = started.elapsed();
    let skipped = variants.skipped;
    let [mut ferry, mut rmcp, mut raw] = std::mem::take(&mut variants.samples);
    variants.shutdown().await;
    for samples in [&mut ferry, &mut rmcp, &mut raw] {
        samples.sort();
    }
    println!(
        "{}: {calls} calls per client, interleaved, after {WARM_UP} each ({:.1} s; {skipped} notifications skipped by \
         the raw client) (ms)",
        program.name,
        took.as_secs_f64()
    );
    let rows = [("Ferry (McpTools::call)", &ferry), ("rmcp alone (Peer::call_tool)", &rmcp), ("raw (baseline)", &raw)];
    for (name, samples) in rows {
        println!("  {name:<30} p50 {:>7.3}  p99 {:>7.3}", percentile(samples, 0.5), percentile(samples, 0.99));
    }
    let added = |samples: &[Duration], p| percentile(samples, p) - percentile(&raw, p);
    for (name, samples) in [("added by Ferry", &ferry), ("added by rmcp alone", &rmcp)] {
        println!("  {name:<30} p50 {:>+7.3}  p99 {:>+7.3}", added(samples, 0.5), added(samples, 0.99));
    }
}

/// The minimal server: `initialize`, `tools/list` with one `echo` tool, `tools/call` of it,
/// `ping`; one compact JSON line per reply, written as soon as the request is read.
fn serve() {
    use std::io::{BufRead, Write};
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let Ok(request) = serde_json::from_str::<Value>(&line) else { continue };
        let Some(id) = request.get("id") else { continue };
        let result = match request["method"].as_str().unwrap_or_default() {
            "initialize" => json!({
                "protocolVersion": PROTOCOL,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "ferry-bench-echo", "version": "0"},
            }),
            "tools/list" => json!({"tools": [{
                "name": "echo",
                "description": "Returns the message unchanged.",
                "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
            }]}),
            "tools/call" => {
                let message = request["params"]["arguments"]["message"].as_str().unwrap_or_default();
                json!({"content": [{"type": "text", "text": message}]})
            }
            "ping" => json!({}),
            other => {
                let error = json!({"code": -32601, "message": format!("no method {other}")});
                let _ = writeln!(stdout, "{}", json!({"jsonrpc": "2.0", "id": id, "error": error}));
                let _ = stdout.flush();
                continue;
            }
        };
        let _ = writeln!(stdout, "{}", json!({"jsonrpc": "2.0", "id": id, "result": result}));
        let _ = stdout.flush();
    }
}

fn main() {
    if std::env::var_os(SERVE_VAR).is_some() {
        serve();
        return;
    }
    let var = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
    let (Some(node), Some(everything)) = (var("FERRY_MCP_NODE"), var("FERRY_MCP_EVERYTHING")) else {
        eprintln!(
            "the MCP bench needs the test servers: run `eval \"$(tests/mcp/setup)\"` first (FERRY_MCP_NODE and \
             FERRY_MCP_EVERYTHING are not set)"
        );
        std::process::exit(2);
    };
    let calls: usize = var("MCP_BENCH_N").and_then(|n| n.parse().ok()).unwrap_or(2000);
    logging::init(
        LogFormat::Pretty,
        Verbosity { default: tracing::Level::INFO, raised: 0 },
        var("RUST_LOG").as_deref(),
    );
    let programs = [
        Program {
            name: "everything",
            command: node,
            args: vec![everything, "stdio".into()],
            env: BTreeMap::new(),
            echo_prefix: "Echo: ",
        },
        Program {
            name: "minimal",
            command: std::env::current_exe().expect("this binary").display().to_string(),
            args: Vec::new(),
            env: BTreeMap::from([(SERVE_VAR.to_owned(), "1".to_owned())]),
            echo_prefix: "",
        },
    ];
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    // The clients run on a worker thread, as the agent's runs do, not on the thread that
    // blocks on the runtime: a caller there paid 10–15 µs more per call through rmcp.
    let bench = runtime.spawn(async move {
        for program in &programs {
            measure(program, calls).await;
        }
    });
    runtime.block_on(bench).expect("the bench task");
}

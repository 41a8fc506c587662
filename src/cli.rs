//! The `ferry` command line (SPEC §2). Names and flags here are a contract with operators
//! and scripts: change them only with the spec.

use std::path::PathBuf;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};
use tracing::Level;

#[derive(Debug, Parser)]
#[command(name = "ferry", version, about = "Run AI agents in Telegram, Discord, Slack and a built-in web chat.")]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Config file (default lookup: $FERRY_CONFIG, ./ferry.toml, $XDG_CONFIG_HOME/ferry/ferry.toml).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Log line format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormatArg::Pretty)]
    pub log_format: LogFormatArg,
    /// Log more on stderr, one level per -v (-v, -vv, -vvv). Commands log warnings and errors
    /// by default, `gateway` INFO as well; RUST_LOG sets the filter when -v is not given.
    #[arg(short, long, global = true, action = ArgAction::Count)]
    pub verbose: u8,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormatArg {
    Pretty,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon: channels, lanes, WebSocket RPC and the web chat.
    Gateway,
    /// Run one agent turn and print the reply as it streams.
    Agent(AgentArgs),
    /// Validate or print the configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Approve people who asked to talk to the bot in direct messages.
    #[command(subcommand)]
    Pairing(PairingCommand),
    /// Inspect conversation sessions.
    #[command(subcommand)]
    Sessions(SessionsCommand),
    /// The agents of the config and the bindings that route chats to them.
    #[command(subcommand)]
    Agents(AgentsCommand),
    /// The Model Context Protocol servers of the config.
    #[command(subcommand)]
    Mcp(McpCommand),
    /// The state database: bring its schema up to date, or move it to another backend.
    #[command(subcommand)]
    State(StateCommand),
    /// Scheduled jobs (reminders, recurring tasks): every chat's, with or without a gateway.
    #[command(subcommand)]
    Cron(CronCommand),
    /// Long-term memory: what each person's and each chat's memory holds.
    #[command(subcommand)]
    Memory(MemoryCommand),
}

#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// Every scope with its documents and size, and the search index's state.
    Status,
    /// Search memory: one scope's, or every scope's.
    Search {
        query: String,
        /// A scope, e.g. private:telegram:42 (see `ferry memory status`).
        #[arg(long)]
        scope: Option<String>,
        /// The agent whose memory (default: the default agent).
        #[arg(long)]
        agent: Option<String>,
        #[arg(long, default_value_t = 10)]
        limit: usize,
    },
    /// Write memory documents out as files: <dir>/<agent>/<scope>/MEMORY.md, memory/*.md.
    Export {
        /// Only this scope.
        #[arg(long)]
        scope: Option<String>,
        /// Where to write (created; existing files are replaced).
        #[arg(long, default_value = "memory-export")]
        to: std::path::PathBuf,
    },
    /// Read documents back from a directory laid out as `export` writes it.
    Import { dir: std::path::PathBuf },
}

#[derive(Debug, Subcommand)]
pub enum CronCommand {
    /// Every job: id, name, schedule, next run in its zone, target chat.
    List,
    /// Schedule a reminder (--text) or a task (--task) for a chat.
    Add(Box<CronAddArgs>),
    /// Remove a job and its run history.
    Remove { id: String },
    /// Stop a job firing until it is resumed.
    Pause { id: String },
    /// Fire a paused job again, from its next slot.
    Resume { id: String },
    /// Fire a job now (the running gateway does, within 30 seconds).
    Run { id: String },
    /// A job's run history, newest first.
    Runs {
        id: String,
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
}

#[derive(Debug, Args)]
pub struct CronAddArgs {
    /// The chat it goes to: <channel>:<chat id>, e.g. telegram:42, slack:channel:C123.
    #[arg(long)]
    pub to: String,
    /// Once, at an ISO-8601 time (with an offset, or read in --tz).
    #[arg(long)]
    pub at: Option<String>,
    /// Once, after a while: 90s, 20m, 2h, 1d.
    #[arg(long = "in")]
    pub r#in: Option<String>,
    /// Again and again, this often (at least 10s).
    #[arg(long)]
    pub every: Option<String>,
    /// A 5-field cron expression, read in --tz.
    #[arg(long)]
    pub cron: Option<String>,
    /// An IANA zone (default: the agent's user_timezone, else the host's).
    #[arg(long)]
    pub tz: Option<String>,
    /// A reminder, sent word for word.
    #[arg(long)]
    pub text: Option<String>,
    /// A task the agent does then; its reply is delivered.
    #[arg(long)]
    pub task: Option<String>,
    #[arg(long)]
    pub name: Option<String>,
    /// The bot account, when the channel has several.
    #[arg(long)]
    pub account: Option<String>,
    /// A thread in the chat.
    #[arg(long)]
    pub thread: Option<String>,
    /// The agent that runs a task (default: the default agent).
    #[arg(long)]
    pub agent: Option<String>,
}

impl Command {
    /// The log level when neither `-v` nor `RUST_LOG` says otherwise: the daemon tells its
    /// operator what it is doing; a one-shot command prints its answer and only warnings and
    /// errors besides.
    pub fn default_log_level(&self) -> Level {
        match self {
            Command::Gateway => Level::INFO,
            _ => Level::WARN,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum AgentsCommand {
    /// Each agent: its model, its workspace and the bindings that route chats to it.
    List,
}

#[derive(Debug, Args)]
pub struct AgentArgs {
    /// The message to send to the agent.
    #[arg(long, short)]
    pub message: String,
    /// Session key to continue (default: the agent's main session).
    #[arg(long)]
    pub session: Option<String>,
    /// Which agent answers.
    #[arg(long)]
    pub agent: Option<String>,
    /// Print the run's events as JSON lines instead of the reply text.
    #[arg(long)]
    pub json: bool,
    /// Abort the run after this many seconds (default: agents.defaults.timeout_seconds).
    #[arg(long, value_name = "S")]
    pub timeout: Option<u64>,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Check the configuration; exits non-zero with the file, key and reason if it is invalid.
    Check,
    /// Print the effective configuration (file + environment + defaults), secrets as ***.
    Show,
}

#[derive(Debug, Subcommand)]
pub enum PairingCommand {
    /// Pending pairing requests.
    List,
    /// Approve a pairing code a user received.
    Approve {
        /// The channel the code was issued on (telegram, discord, slack), as `ferry pairing
        /// list` shows it: `telegram:work` for an account other than `default`.
        channel: String,
        /// The 8-character code.
        code: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Connect to every configured server and print its state and tools.
    List,
}

#[derive(Debug, Subcommand)]
pub enum StateCommand {
    /// Bring the configured backend's schema up to date (the gateway also does on start).
    Migrate,
    /// Copy one backend's state into another (run it with the gateway stopped).
    Copy {
        /// The backend to read: the state directory's SQLite database and inbound log.
        #[arg(long, value_enum)]
        from: CopySource,
        /// The backend to write: the database of state.postgres_url (or FERRY_DATABASE_URL).
        #[arg(long, value_enum)]
        to: CopyTarget,
        /// Replace whatever state the target already holds.
        #[arg(long)]
        force: bool,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum CopySource {
    Sqlite,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum CopyTarget {
    Postgres,
}

#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// Sessions with key, last update and token counts.
    List,
}

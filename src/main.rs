//! The `ferry` binary: parses the command line and hands off to [`commands`]. Adapters are
//! wired in by [`wiring`], the only place that names them.

mod agent_command;
mod agents_command;
mod cli;
mod commands;
mod cron_command;
mod daemon;
mod mcp_command;
mod memory_command;
mod state_command;
mod wiring;

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;

use cli::{Cli, Command, ConfigCommand, LogFormatArg};
use ferry::config::Environment;
use ferry::logging::{self, LogFormat, Verbosity};

/// mimalloc instead of glibc's malloc: the inbound path allocates and frees many small
/// objects across threads (messages, tasks, events), where glibc spent ~25% of the inbound
/// benchmark's CPU in `_int_malloc`, `malloc_consolidate` and `unlink_chunk`. Built with
/// `no_thp`: by default mimalloc asks for transparent huge pages for its arenas, which took
/// an idle gateway from 16 to 24 MB resident.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (`mimalloc.h`, v3: the sixteenth option); the
/// crate's bindings name no constant for it.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Freed memory goes back to the OS at once instead of after mimalloc's default delay: a
/// Telegram burst otherwise peaked ~2 MB higher (31 MB against the 30 MB budget), for no
/// measurable gain in throughput.
fn return_freed_memory_at_once() {
    // SAFETY: sets one integer option; mimalloc reads options with atomics.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) }
}

fn main() -> ExitCode {
    // `ferry __sandbox-exec …`: confine this process and become a tool's command. First,
    // before any thread exists: a multi-threaded process cannot enter a user namespace.
    ferry::sandbox::launcher::dispatch(&std::env::args_os().collect::<Vec<_>>());
    return_freed_memory_at_once();
    let cli = Cli::parse();
    let format = match cli.global.log_format {
        LogFormatArg::Pretty => LogFormat::Pretty,
        LogFormatArg::Json => LogFormat::Json,
    };
    let env = Environment::from_process();
    let verbosity = Verbosity { default: cli.command.default_log_level(), raised: cli.global.verbose };
    logging::init(format, verbosity, env.var("RUST_LOG"));

    match run(cli, &env) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli, env: &Environment) -> anyhow::Result<()> {
    match cli.command {
        Command::Config(ConfigCommand::Check) => commands::config_check(&cli.global, env),
        Command::Config(ConfigCommand::Show) => commands::config_show(&cli.global, env),
        Command::Agent(args) => runtime()?.block_on(agent_command::agent(&cli.global, args, env)),
        Command::Gateway => runtime()?.block_on(daemon::gateway(&cli.global, env)),
        Command::Pairing(command) => runtime()?.block_on(commands::pairing(&cli.global, command, env)),
        Command::Sessions(cli::SessionsCommand::List) => runtime()?.block_on(commands::sessions_list(&cli.global, env)),
        Command::Agents(cli::AgentsCommand::List) => agents_command::list(&cli.global, env),
        Command::Mcp(cli::McpCommand::List) => runtime()?.block_on(mcp_command::list(&cli.global, env)),
        Command::State(cli::StateCommand::Migrate) => runtime()?.block_on(state_command::migrate(&cli.global, env)),
        Command::State(cli::StateCommand::Copy { force, .. }) => {
            runtime()?.block_on(state_command::copy_sqlite_to_postgres(&cli.global, force, env))
        }
        Command::Cron(command) => runtime()?.block_on(cron_command::run(&cli.global, command, env)),
        Command::Memory(command) => runtime()?.block_on(memory_command::run(&cli.global, command, env)),
    }
}

/// The stack of each runtime thread. Platform payloads are parsed on these threads, and the
/// deepest one serde_json lets through (128 levels) must fit: a Telegram update with a
/// `reply_to_message` chain that deep took ~140 KiB a level in teloxide's parser and
/// overflowed tokio's default 2 MiB, aborting the whole process. The memory is reserved,
/// not used: only pages a thread touches count.
const THREAD_STACK_BYTES: usize = 64 * 1024 * 1024;

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .thread_stack_size(THREAD_STACK_BYTES)
        .enable_all()
        .build()
        .context("starting the async runtime")
}

//! `ferry memory status | search | export | import`: the operator's view of long-term
//! memory, on the state store, with or without a running gateway. Search here is by
//! keywords and, when `[memory.embeddings]` is set and reachable, vectors too, as the
//! agent's `memory_search` is.

use std::path::{Path, PathBuf};

use anyhow::Context;
use chrono::Utc;
use ferry::config::{Config, Environment};
use ferry::memory::embed::Embedder;
use ferry::memory::{Memory, WriteMode, paths};
use ferry::state::memory::{MemoryScope, MemoryStore};
use ferry::state::{self, Stores};

use crate::cli::{GlobalArgs, MemoryCommand};
use crate::commands::load_config;

pub async fn run(global: &GlobalArgs, command: MemoryCommand, env: &Environment) -> anyhow::Result<()> {
    let loaded = load_config(global, env)?;
    let config = loaded.config;
    let state_dir = state::resolve_state_dir(&config, env)?;
    let stores = Stores::open(&config, &state_dir).await?;
    let result = execute(&config, &stores, command, env).await;
    stores.close().await;
    result
}

async fn execute(config: &Config, stores: &Stores, command: MemoryCommand, env: &Environment) -> anyhow::Result<()> {
    let store = stores.memory.as_ref();
    let memory = Memory::new(stores.memory.clone(), config.memory.clone());
    let embedder = match &config.memory.embeddings {
        Some(settings) => Some(Embedder::new(settings, env).context("[memory.embeddings]")?),
        None => None,
    };
    match command {
        MemoryCommand::Status => status(store, embedder.as_ref()).await,
        MemoryCommand::Search { query, scope, agent, limit } => {
            let agent = agent.unwrap_or_else(|| config.agents.default_id().to_owned());
            let scopes = match scope {
                Some(scope) => vec![MemoryScope::new(agent, scope)],
                None => store.scopes(Some(&agent)).await?.into_iter().map(|summary| summary.scope).collect(),
            };
            // What an older build stored is found as the daemon would find it.
            memory.index_as_this_version().await?;
            let today = Utc::now().date_naive();
            let mut any = false;
            for scope in scopes {
                for found in memory.search(&scope, &query, limit, 0.0, embedder.as_ref(), today).await? {
                    any = true;
                    let snippet = found.snippet.replace('\n', " ");
                    println!(
                        "{:.3}  {} {}:{}-{}  {snippet}",
                        found.score, scope.scope, found.path, found.start_line, found.end_line
                    );
                }
            }
            if !any {
                println!("nothing found");
            }
            Ok(())
        }
        MemoryCommand::Export { scope, to } => {
            let mut written = 0;
            for summary in store.scopes(None).await? {
                if scope.as_ref().is_some_and(|wanted| *wanted != summary.scope.scope) {
                    continue;
                }
                let dir = to.join(file_name(&summary.scope.agent_id)).join(file_name(&summary.scope.scope));
                for doc in store.list(&summary.scope).await? {
                    let Some(content) = store.get(&summary.scope, &doc.path).await? else { continue };
                    let file = dir.join(&doc.path);
                    if let Some(parent) = file.parent() {
                        std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
                    }
                    std::fs::write(&file, content.content).with_context(|| format!("writing {}", file.display()))?;
                    written += 1;
                }
            }
            println!("exported {written} document(s) to {}", to.display());
            Ok(())
        }
        MemoryCommand::Import { dir } => {
            let mut imported = 0;
            for (scope, path, file) in importable(&dir)? {
                let content = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
                let today = Utc::now().date_naive();
                memory
                    .write(&scope, Some(&path), &content, &WriteMode::Replace, today)
                    .await
                    .with_context(|| format!("importing {}", file.display()))?;
                imported += 1;
            }
            println!("imported {imported} document(s) from {}", dir.display());
            Ok(())
        }
    }
}

async fn status(store: &dyn MemoryStore, embedder: Option<&Embedder>) -> anyhow::Result<()> {
    let stats = store.stats(embedder.map(Embedder::model)).await?;
    println!(
        "{} scope(s), {} document(s), {} bytes, {} search chunk(s)",
        stats.scopes, stats.docs, stats.bytes, stats.chunks
    );
    match embedder {
        Some(embedder) => println!(
            "embeddings: {} — {} text(s) embedded, {} waiting",
            embedder.model(),
            stats.embedded,
            stats.unembedded
        ),
        None => println!("embeddings: off (keyword search only)"),
    }
    for summary in store.scopes(None).await? {
        println!(
            "  {} {}: {} document(s), {} bytes",
            summary.scope.agent_id, summary.scope.scope, summary.docs, summary.bytes
        );
    }
    Ok(())
}

/// A scope or agent id as one directory name: `/` (never in a real id) cannot nest.
fn file_name(part: &str) -> String {
    part.replace('/', "%2f")
}

/// `(scope, document path, file)` for every document under `dir` laid out as `export`
/// writes it; files that are no memory document are refused, naming them.
fn importable(dir: &Path) -> anyhow::Result<Vec<(MemoryScope, String, PathBuf)>> {
    let mut found = Vec::new();
    for agent in read_dir(dir)? {
        for scope in read_dir(&agent)? {
            let scope_id = MemoryScope::new(name_of(&agent).replace("%2f", "/"), name_of(&scope).replace("%2f", "/"));
            let mut files = Vec::new();
            let long_term = scope.join(paths::LONG_TERM);
            if long_term.is_file() {
                files.push(long_term);
            }
            let notes = scope.join("memory");
            if notes.is_dir() {
                files.extend(read_dir(&notes)?);
            }
            for file in files {
                let relative = file.strip_prefix(&scope).unwrap_or(&file).to_string_lossy().into_owned();
                let path = paths::check(&relative).with_context(|| format!("{}", file.display()))?;
                found.push((scope_id.clone(), path, file));
            }
        }
    }
    Ok(found)
}

fn read_dir(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .collect();
    entries.sort();
    Ok(entries)
}

fn name_of(path: &Path) -> String {
    path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default()
}

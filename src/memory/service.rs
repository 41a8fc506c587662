//! The daemon's one memory: the store, the embeddings endpoint when configured, and the
//! background tasks keeping every chunk embedded and (with `mirror_files`) a scope mirrored
//! to workspace files, shared by every agent (each gets an [`AgentMemory`] in its own zone).

use std::sync::Arc;

use chrono_tz::Tz;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::embed::{EmbedError, Embedder, IndexState, keep_embedded};
use super::{AgentMemory, Memory, mirror};
use crate::config::{Config, Environment, ResolvedAgent};
use crate::state::memory::MemoryStore;

/// How often memory's `/healthz` entry is refreshed.
const HEALTH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);
/// How often scopes whose vectors went unsearched for [`super::vectors::IDLE`] are dropped.
const SWEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// Memory as the daemon runs it; `stop` ends the background embedding and mirroring.
pub struct MemoryService {
    memory: Memory,
    embedder: Option<Embedder>,
    index: IndexState,
    stop: CancellationToken,
    indexer: Option<JoinHandle<()>>,
    sweeper: Option<JoinHandle<()>>,
    /// The file mirror's task, when `mirror_files` is on ([`MemoryService::start_mirror`]).
    mirror: Option<JoinHandle<()>>,
}

/// [`Memory::index_as_this_version`] when the daemon starts, logged. Searches made
/// meanwhile may miss some of what older builds stored.
async fn reindex(memory: Memory) {
    match memory.index_as_this_version().await {
        Ok(0) => {}
        Ok(chunks) => tracing::info!(chunks, "memory's search index rebuilt for this version's word normalization"),
        Err(error) => tracing::warn!(
            %error,
            "cannot rebuild memory's search index for this version; searches may miss accented words stored \
             by an older version until ferry restarts"
        ),
    }
}

impl MemoryService {
    /// Memory for `config` on `store`, with the embedding task started when
    /// `[memory.embeddings]` is set; `None` when `memory.enabled` is off.
    pub fn start(config: &Config, store: Arc<dyn MemoryStore>, env: &Environment) -> Result<Option<Self>, EmbedError> {
        if !config.memory.enabled {
            return Ok(None);
        }
        let memory = Memory::new(store.clone(), config.memory.clone());
        tokio::spawn(reindex(memory.clone()));
        let embedder = config.memory.embeddings.as_ref().map(|settings| Embedder::new(settings, env)).transpose()?;
        let index = IndexState::default();
        let stop = CancellationToken::new();
        let indexer = embedder.clone().map(|embedder| {
            tokio::spawn(keep_embedded(store, embedder, memory.written.clone(), index.clone(), stop.clone()))
        });
        let vectors = memory.vectors.clone();
        let sweeper = embedder.is_some().then(|| {
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(SWEEP_INTERVAL).await;
                    vectors.drop_idle(super::vectors::IDLE);
                }
            })
        });
        Ok(Some(Self { memory, embedder, index, stop, indexer, sweeper, mirror: None }))
    }

    /// Starts mirroring `mirror_scope` to each of `agents`' workspaces when `mirror_files`
    /// is on ([`mirror`]); `stop` ends it.
    pub fn start_mirror(&mut self, agents: &[ResolvedAgent]) {
        let mirrors = mirror::open_all(&self.memory, agents);
        if !mirrors.is_empty() {
            self.mirror = Some(tokio::spawn(mirror::keep_mirrored(mirrors, self.stop.clone())));
        }
    }

    /// One agent's access, "today" read in `tz`.
    pub fn for_agent(&self, tz: Tz) -> AgentMemory {
        AgentMemory { memory: self.memory.clone(), embedder: self.embedder.clone(), tz }
    }

    /// Memory's `/healthz` entry: how much is kept, and the embedding index's state (the
    /// model, how much waits for a vector, the endpoint's last failure while it fails).
    pub async fn health(&self) -> serde_json::Value {
        let model = self.embedder.as_ref().map(Embedder::model);
        let stats = match self.memory.store.stats(model).await {
            Ok(stats) => stats,
            Err(error) => return serde_json::json!({ "enabled": true, "error": error.to_string() }),
        };
        let index = self.index.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let embeddings = model.map(|model| {
            serde_json::json!({
                "model": model,
                "embedded": stats.embedded,
                "waiting": stats.unembedded,
                "lastError": index.last_error,
            })
        });
        serde_json::json!({
            "enabled": true,
            "scopes": stats.scopes,
            "documents": stats.docs,
            "bytes": stats.bytes,
            "chunks": stats.chunks,
            "search": if model.is_some() { "hybrid" } else { "keyword" },
            "embeddings": embeddings,
        })
    }

    /// Hands memory's `/healthz` entry to `publish` every [`HEALTH_INTERVAL`], until the
    /// returned task is aborted.
    pub fn report_health(&self, publish: impl Fn(serde_json::Value) + Send + Sync + 'static) -> JoinHandle<()> {
        let service = Self {
            memory: self.memory.clone(),
            embedder: self.embedder.clone(),
            index: self.index.clone(),
            stop: self.stop.clone(),
            indexer: None,
            sweeper: None,
            mirror: None,
        };
        tokio::spawn(async move {
            loop {
                publish(service.health().await);
                tokio::time::sleep(HEALTH_INTERVAL).await;
            }
        })
    }

    /// Ends the background embedding (a batch in flight is dropped; its text is embedded
    /// after the next start) and mirroring (a round cut short is settled at the next start).
    pub async fn stop(self) {
        self.stop.cancel();
        if let Some(sweeper) = self.sweeper {
            sweeper.abort();
        }
        for task in [self.indexer, self.mirror].into_iter().flatten() {
            let _ = task.await;
        }
    }
}

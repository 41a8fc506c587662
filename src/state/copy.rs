//! `ferry state copy --from sqlite --to postgres`: moves an existing install's state into
//! PostgreSQL, so a single-machine gateway can become several replicas without losing its
//! sessions, pairings, cooldowns or the messages it still owes an answer.
//!
//! Everything is written in one PostgreSQL transaction: the copy lands whole or not at all.
//! Row ids are kept (compaction entries and delivery records refer to them) and the id
//! sequences are moved past them, so new rows never reuse an id. A target that already
//! holds state is refused unless `force`, which empties it first; copying again with
//! `force` gives the same result, so an interrupted move is simply run again.
//!
//! Run it with the gateway stopped: what the gateway writes while the copy reads is not
//! copied.

use std::collections::HashMap;

use chrono::Utc;
use deadpool_postgres::Transaction;
use tokio_postgres::types::ToSql;

use super::StorageError;
use super::inbound::{Accepted, DEDUPE_WINDOW, SeenKey};
use super::postgres::{PgBackend, pg_error};
use super::sqlite::Database;

/// The tables a copy writes, in the order it fills them.
const TABLES: [&str; 15] = [
    "memory_documents",
    "memory_versions",
    "memory_scopes",
    "memory_embeddings",
    "memory_chunks",
    "scheduled_jobs",
    "scheduled_runs",
    "sessions",
    "transcript_entries",
    "pairing_requests",
    "pairing_approved",
    "auth_profile_health",
    "inbound_seen",
    "inbound_journal",
    "delivery_records",
];

/// Rows sent in one statement at most.
const CHUNK: usize = 2_000;

/// What a copy moved, table by table.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CopyReport {
    pub sessions: usize,
    pub transcript_entries: usize,
    pub pairing_requests: usize,
    pub pairing_approved: usize,
    pub cooldowns: usize,
    /// Messages seen inside the dedupe window (a redelivery after the move is still a
    /// duplicate).
    pub sightings: usize,
    /// Accepted messages still waiting for their answer.
    pub unanswered: usize,
    pub delivery_records: usize,
    /// Scheduled jobs, and the rows of their run history.
    pub scheduled_jobs: usize,
    pub scheduled_runs: usize,
    /// Memory documents, and their search chunks (indexed again on PostgreSQL).
    pub memory_documents: usize,
    pub memory_chunks: usize,
}

/// A column's type in both backends: text, a 64-bit integer, a boolean (an integer on
/// SQLite), or bytes (a BLOB on SQLite, `bytea` on PostgreSQL).
#[derive(Clone, Copy)]
enum Kind {
    Text,
    Int,
    Bool,
    Bytes,
}

/// Tables copied column by column as they are, with each column's type.
const AS_IS: [(&str, &[(&str, Kind)]); 6] = [
    (
        "scheduled_jobs",
        &[
            ("id", Kind::Text),
            ("agent_id", Kind::Text),
            ("name", Kind::Text),
            ("owner", Kind::Text),
            ("created_by", Kind::Text),
            ("scope_channel", Kind::Text),
            ("scope_account", Kind::Text),
            ("scope_chat", Kind::Text),
            ("target_channel", Kind::Text),
            ("target_account", Kind::Text),
            ("target_chat", Kind::Text),
            ("target_chat_kind", Kind::Text),
            ("target_thread", Kind::Text),
            ("schedule_kind", Kind::Text),
            ("at_ms", Kind::Int),
            ("every_secs", Kind::Int),
            ("anchor_ms", Kind::Int),
            ("cron_expr", Kind::Text),
            ("tz", Kind::Text),
            ("payload_kind", Kind::Text),
            ("payload", Kind::Text),
            ("session_key", Kind::Text),
            ("missed", Kind::Text),
            ("grace_secs", Kind::Int),
            ("state", Kind::Text),
            ("next_run_ms", Kind::Int),
            ("running_slot_ms", Kind::Int),
            ("running_seq", Kind::Int),
            ("running_claimed_ms", Kind::Int),
            ("failures", Kind::Int),
            ("last_error", Kind::Text),
            ("last_alert_hash", Kind::Text),
            ("last_alert_ms", Kind::Int),
            ("created_ms", Kind::Int),
            ("updated_ms", Kind::Int),
        ],
    ),
    (
        "scheduled_runs",
        &[
            ("id", Kind::Int),
            ("job_id", Kind::Text),
            ("slot_ms", Kind::Int),
            ("status", Kind::Text),
            ("started_ms", Kind::Int),
            ("finished_ms", Kind::Int),
            ("delivered", Kind::Bool),
            ("late", Kind::Bool),
            ("error", Kind::Text),
            ("note", Kind::Text),
        ],
    ),
    (
        "memory_documents",
        &[
            ("agent_id", Kind::Text),
            ("scope", Kind::Text),
            ("path", Kind::Text),
            ("content", Kind::Text),
            ("version", Kind::Int),
            ("updated_ms", Kind::Int),
        ],
    ),
    (
        "memory_versions",
        &[
            ("agent_id", Kind::Text),
            ("scope", Kind::Text),
            ("path", Kind::Text),
            ("version", Kind::Int),
            ("content", Kind::Text),
            ("written_ms", Kind::Int),
        ],
    ),
    (
        "memory_scopes",
        &[
            ("agent_id", Kind::Text),
            ("scope", Kind::Text),
            ("docs", Kind::Int),
            ("bytes", Kind::Int),
            ("updated_ms", Kind::Int),
        ],
    ),
    ("memory_embeddings", &[("model", Kind::Text), ("hash", Kind::Text), ("vector", Kind::Bytes)]),
];

/// One value of an [`AS_IS`] row.
#[derive(Debug)]
enum Cell {
    Text(Option<String>),
    Int(Option<i64>),
    Bool(Option<bool>),
    Bytes(Option<Vec<u8>>),
}

impl Cell {
    fn as_sql(&self) -> &(dyn ToSql + Sync) {
        match self {
            Cell::Text(value) => value,
            Cell::Int(value) => value,
            Cell::Bool(value) => value,
            Cell::Bytes(value) => value,
        }
    }
}

/// Every row of an [`AS_IS`] table.
fn read_as_is(database: &Database, table: &str, columns: &[(&str, Kind)]) -> Result<Vec<Vec<Cell>>, CopyError> {
    // A job's fire in flight keeps its journal id on its run's row on SQLite (schema 9).
    let running_seq = format!("{} AS running_seq", super::sqlite::running_seq_expression());
    let names: Vec<&str> = columns
        .iter()
        .map(|(name, _)| if table == "scheduled_jobs" && *name == "running_seq" { running_seq.as_str() } else { *name })
        .collect();
    database
        .read(|c| {
            c.prepare(&format!("SELECT {} FROM {table}", names.join(", ")))?
                .query_map([], |row| {
                    columns
                        .iter()
                        .enumerate()
                        .map(|(index, (_, kind))| {
                            Ok(match kind {
                                Kind::Text => Cell::Text(row.get(index)?),
                                Kind::Int => Cell::Int(row.get(index)?),
                                Kind::Bool => Cell::Bool(row.get(index)?),
                                Kind::Bytes => Cell::Bytes(row.get(index)?),
                            })
                        })
                        .collect::<rusqlite::Result<Vec<Cell>>>()
                })?
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(read)
}

/// Writes the rows of an [`AS_IS`] table, one prepared statement.
async fn write_as_is(
    tx: &Transaction<'_>,
    table: &str,
    columns: &[(&str, Kind)],
    rows: &[Vec<Cell>],
) -> Result<(), CopyError> {
    if rows.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = columns.iter().map(|(name, _)| *name).collect();
    let places: Vec<String> = (1..=columns.len()).map(|index| format!("${index}")).collect();
    let statement = tx
        .prepare(&format!("INSERT INTO {table} ({}) VALUES ({})", names.join(", "), places.join(", ")))
        .await
        .map_err(write)?;
    for row in rows {
        let params: Vec<&(dyn ToSql + Sync)> = row.iter().map(Cell::as_sql).collect();
        tx.execute(&statement, &params).await.map_err(write)?;
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error(
        "the PostgreSQL database already holds Ferry state ({tables}); copy into an empty database, or pass --force \
         to replace it"
    )]
    NotEmpty { tables: String },
    #[error("reading the SQLite state: {0}")]
    Read(StorageError),
    #[error("writing to PostgreSQL: {0}")]
    Write(StorageError),
}

fn read<E: Into<StorageError>>(error: E) -> CopyError {
    CopyError::Read(error.into())
}

fn write(error: tokio_postgres::Error) -> CopyError {
    CopyError::Write(pg_error(error))
}

/// Copies the SQLite state of `database` into `target` (migrated), in one transaction.
pub async fn sqlite_to_postgres(database: &Database, target: &PgBackend, force: bool) -> Result<CopyReport, CopyError> {
    let source = Source::read(database)?;
    let mut client = target.client().await.map_err(CopyError::Write)?;
    let transaction = client.transaction().await.map_err(write)?;
    let occupied = occupied_tables(&transaction).await?;
    if !occupied.is_empty() {
        if !force {
            return Err(CopyError::NotEmpty { tables: occupied.join(", ") });
        }
        transaction.batch_execute(&format!("TRUNCATE {}", TABLES.join(", "))).await.map_err(write)?;
    }
    let report = source.write(&transaction).await?;
    transaction.commit().await.map_err(write)?;
    Ok(report)
}

async fn occupied_tables(transaction: &Transaction<'_>) -> Result<Vec<&'static str>, CopyError> {
    let mut occupied = Vec::new();
    for table in TABLES {
        let row = transaction.query_one(&format!("SELECT EXISTS (SELECT 1 FROM {table})"), &[]).await.map_err(write)?;
        if row.get::<_, bool>(0) {
            occupied.push(table);
        }
    }
    Ok(occupied)
}

type SessionRow = (String, String, i64, i64, i64, i64, i64, String);
type EntryRow = (i64, String, Option<i64>, Option<String>, String, String, i64);
type RequestRow = (String, String, Option<String>, String, i64, i64);
type ApprovedRow = (String, String, Option<String>, i64);
type HealthRow = (String, String, Option<String>, Option<String>, i64, Option<String>);
/// `(agent, scope, path, first line, last line, text, hash, indexed text)`.
type MemoryChunkRow = (String, String, String, i64, i64, String, String, String);

/// Everything read from the SQLite side before anything is written.
struct Source {
    sessions: Vec<SessionRow>,
    entries: Vec<EntryRow>,
    requests: Vec<RequestRow>,
    approved: Vec<ApprovedRow>,
    health: Vec<HealthRow>,
    sightings: Vec<(SeenKey, i64)>,
    unanswered: Vec<(i64, SeenKey, Accepted)>,
    deliveries: Vec<(Vec<i64>, String)>,
    next_id: i64,
    memory_chunks: Vec<MemoryChunkRow>,
    /// The [`AS_IS`] tables' rows, in that order.
    as_is: Vec<Vec<Vec<Cell>>>,
}

impl Source {
    fn read(database: &Database) -> Result<Self, CopyError> {
        let sessions = database
            .read(|c| {
                c.prepare(
                    "SELECT key, session_id, created_at, updated_at, input_tokens, output_tokens, compaction_count, \
                     overrides FROM sessions",
                )?
                .query_map([], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?, r.get(7)?))
                })?
                .collect::<rusqlite::Result<Vec<SessionRow>>>()
            })
            .map_err(read)?;
        let entries = database
            .read(|c| {
                c.prepare(
                    "SELECT id, session_id, parent_id, run_id, role, content, created_at FROM transcript_entries \
                     ORDER BY id",
                )?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?)))?
                .collect::<rusqlite::Result<Vec<EntryRow>>>()
            })
            .map_err(read)?;
        let requests = database
            .read(|c| {
                c.prepare("SELECT channel, sender_id, sender_name, code, created_at, expires_at FROM pairing_requests")?
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)))?
                    .collect::<rusqlite::Result<Vec<RequestRow>>>()
            })
            .map_err(read)?;
        let approved = database
            .read(|c| {
                c.prepare("SELECT channel, sender_id, sender_name, approved_at FROM pairing_approved")?
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                    .collect::<rusqlite::Result<Vec<ApprovedRow>>>()
            })
            .map_err(read)?;
        let health = database
            .read(|c| {
                c.prepare(
                    "SELECT provider, profile, cooling_until, reason, error_count, last_used FROM auth_profile_health",
                )?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)))?
                .collect::<rusqlite::Result<Vec<HealthRow>>>()
            })
            .map_err(read)?;
        let log = database.inbound_log();
        let cutoff = (Utc::now() - DEDUPE_WINDOW).timestamp_millis();
        let sightings = log.sightings(cutoff).map_err(read)?;
        let left = log.unanswered().map_err(read)?;
        let mut keys: HashMap<i64, SeenKey> = log.pending_keys().map_err(read)?;
        let unanswered = left
            .messages
            .into_iter()
            .filter_map(|message| keys.remove(&message.seq).map(|key| (message.seq, key, message.entry)))
            .collect();
        let deliveries = left.deliveries.into_iter().map(|delivery| (delivery.seqs, delivery.body)).collect();
        // A chunk's indexed text lives in the FTS table; PostgreSQL builds its tsvector from it.
        let memory_chunks = database
            .read(|c| {
                c.prepare(
                    "SELECT c.agent_id, c.scope, c.path, c.start_line, c.end_line, c.text, c.hash, f.body \
                     FROM memory_chunks c JOIN memory_fts f ON f.rowid = c.id ORDER BY c.id",
                )?
                .query_map([], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?, r.get(7)?))
                })?
                .collect::<rusqlite::Result<Vec<MemoryChunkRow>>>()
            })
            .map_err(read)?;
        Ok(Self {
            sessions,
            entries,
            requests,
            approved,
            health,
            sightings,
            unanswered,
            deliveries,
            next_id: log.next_seq(),
            memory_chunks,
            as_is: AS_IS
                .iter()
                .map(|(table, columns)| read_as_is(database, table, columns))
                .collect::<Result<_, _>>()?,
        })
    }

    async fn write(self, tx: &Transaction<'_>) -> Result<CopyReport, CopyError> {
        let report = CopyReport {
            sessions: self.sessions.len(),
            transcript_entries: self.entries.len(),
            pairing_requests: self.requests.len(),
            pairing_approved: self.approved.len(),
            cooldowns: self.health.len(),
            sightings: self.sightings.len(),
            unanswered: self.unanswered.len(),
            delivery_records: self.deliveries.len(),
            scheduled_jobs: self.as_is.first().map_or(0, Vec::len),
            scheduled_runs: self.as_is.get(1).map_or(0, Vec::len),
            memory_documents: self.as_is.get(2).map_or(0, Vec::len),
            memory_chunks: self.memory_chunks.len(),
        };
        for ((table, columns), rows) in AS_IS.iter().zip(&self.as_is) {
            write_as_is(tx, table, columns, rows).await?;
        }
        for chunk in self.sessions.chunks(CHUNK) {
            insert(
                tx,
                "INSERT INTO sessions (key, session_id, created_at, updated_at, input_tokens, output_tokens, \
                 compaction_count, overrides) SELECT k, s, c, u, i, o, n::integer, v FROM unnest($1::text[], \
                 $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[], $8::text[]) \
                 AS t(k, s, c, u, i, o, n, v)",
                &[
                    &column(chunk, |r| r.0.as_str()),
                    &column(chunk, |r| r.1.as_str()),
                    &column(chunk, |r| r.2),
                    &column(chunk, |r| r.3),
                    &column(chunk, |r| r.4),
                    &column(chunk, |r| r.5),
                    &column(chunk, |r| r.6),
                    &column(chunk, |r| r.7.as_str()),
                ],
            )
            .await?;
        }
        for chunk in self.entries.chunks(CHUNK) {
            let ids: Vec<i64> = chunk.iter().map(|r| r.0).collect();
            let sessions: Vec<&str> = chunk.iter().map(|r| r.1.as_str()).collect();
            let parents: Vec<Option<i64>> = chunk.iter().map(|r| r.2).collect();
            let runs: Vec<Option<&str>> = chunk.iter().map(|r| r.3.as_deref()).collect();
            let roles: Vec<&str> = chunk.iter().map(|r| r.4.as_str()).collect();
            let contents: Vec<&str> = chunk.iter().map(|r| r.5.as_str()).collect();
            let times: Vec<i64> = chunk.iter().map(|r| r.6).collect();
            insert(
                tx,
                "INSERT INTO transcript_entries (id, session_id, parent_id, run_id, role, content, created_at) \
                 SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], \
                 $7::bigint[])",
                &[&ids, &sessions, &parents, &runs, &roles, &contents, &times],
            )
            .await?;
        }
        for chunk in self.requests.chunks(CHUNK) {
            insert(
                tx,
                "INSERT INTO pairing_requests (channel, sender_id, sender_name, code, created_at, expires_at) \
                 SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[])",
                &[
                    &column(chunk, |r| r.0.as_str()),
                    &column(chunk, |r| r.1.as_str()),
                    &column(chunk, |r| r.2.as_deref()),
                    &column(chunk, |r| r.3.as_str()),
                    &column(chunk, |r| r.4),
                    &column(chunk, |r| r.5),
                ],
            )
            .await?;
        }
        for chunk in self.approved.chunks(CHUNK) {
            insert(
                tx,
                "INSERT INTO pairing_approved (channel, sender_id, sender_name, approved_at) \
                 SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[])",
                &[
                    &column(chunk, |r| r.0.as_str()),
                    &column(chunk, |r| r.1.as_str()),
                    &column(chunk, |r| r.2.as_deref()),
                    &column(chunk, |r| r.3),
                ],
            )
            .await?;
        }
        for chunk in self.health.chunks(CHUNK) {
            insert(
                tx,
                "INSERT INTO auth_profile_health (provider, profile, cooling_until, reason, error_count, last_used) \
                 SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[])",
                &[
                    &column(chunk, |r| r.0.as_str()),
                    &column(chunk, |r| r.1.as_str()),
                    &column(chunk, |r| r.2.as_deref()),
                    &column(chunk, |r| r.3.as_deref()),
                    &column(chunk, |r| r.4),
                    &column(chunk, |r| r.5.as_deref()),
                ],
            )
            .await?;
        }
        for chunk in self.sightings.chunks(CHUNK) {
            let part = |index: usize| chunk.iter().map(|(key, _)| key.0[index].as_str()).collect::<Vec<&str>>();
            let times: Vec<i64> = chunk.iter().map(|(_, at)| *at).collect();
            insert(
                tx,
                "INSERT INTO inbound_seen (channel, account_id, chat_id, thread_id, message_id, seen_at) \
                 SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[])",
                &[&part(0), &part(1), &part(2), &part(3), &part(4), &times],
            )
            .await?;
        }
        for chunk in self.unanswered.chunks(CHUNK) {
            let part = |index: usize| chunk.iter().map(|(_, key, _)| key.0[index].as_str()).collect::<Vec<&str>>();
            let ids: Vec<i64> = chunk.iter().map(|(id, ..)| *id).collect();
            let sessions: Vec<&str> = chunk.iter().map(|(.., entry)| entry.session_key.as_str()).collect();
            let prompts: Vec<&str> = chunk.iter().map(|(.., entry)| entry.prompt.as_str()).collect();
            let messages: Vec<&str> = chunk.iter().map(|(.., entry)| entry.message.as_str()).collect();
            let times: Vec<i64> = chunk.iter().map(|(.., entry)| entry.enqueued_at).collect();
            insert(
                tx,
                "INSERT INTO inbound_journal (id, channel, account_id, chat_id, thread_id, message_id, session_key, \
                 prompt, message, enqueued_at) SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], \
                 $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::bigint[])",
                &[&ids, &part(0), &part(1), &part(2), &part(3), &part(4), &sessions, &prompts, &messages, &times],
            )
            .await?;
        }
        for chunk in self.memory_chunks.chunks(CHUNK) {
            let starts: Vec<i32> = chunk.iter().map(|r| i32::try_from(r.3).unwrap_or(i32::MAX)).collect();
            let ends: Vec<i32> = chunk.iter().map(|r| i32::try_from(r.4).unwrap_or(i32::MAX)).collect();
            insert(
                tx,
                "INSERT INTO memory_chunks (agent_id, scope, path, start_line, end_line, text, hash, tsv) \
                 SELECT a, s, p, l, e, t, h, to_tsvector('simple', b) FROM unnest($1::text[], $2::text[], \
                 $3::text[], $4::int[], $5::int[], $6::text[], $7::text[], $8::text[]) AS c(a, s, p, l, e, t, h, b)",
                &[
                    &column(chunk, |r| r.0.as_str()),
                    &column(chunk, |r| r.1.as_str()),
                    &column(chunk, |r| r.2.as_str()),
                    &starts,
                    &ends,
                    &column(chunk, |r| r.5.as_str()),
                    &column(chunk, |r| r.6.as_str()),
                    &column(chunk, |r| r.7.as_str()),
                ],
            )
            .await?;
        }
        for (ids, body) in &self.deliveries {
            insert(tx, "INSERT INTO delivery_records (message_ids, body) VALUES ($1, $2)", &[ids, body]).await?;
        }
        // New rows continue after the copied ones; journal ids after every id the log gave.
        for (table, floor) in [
            ("transcript_entries", 1),
            ("inbound_journal", self.next_id - 1),
            ("delivery_records", 1),
            ("scheduled_runs", 1),
        ] {
            let sql = format!(
                "SELECT setval(pg_get_serial_sequence('{table}', 'id'), \
                 GREATEST((SELECT COALESCE(MAX(id), 0) FROM {table}), $1::bigint, 1))"
            );
            tx.query_one(&sql, &[&floor]).await.map_err(write)?;
        }
        Ok(report)
    }
}

/// One column of `rows`, as a statement's array parameter.
fn column<'a, T, U>(rows: &'a [T], part: impl Fn(&'a T) -> U) -> Vec<U> {
    rows.iter().map(part).collect()
}

async fn insert(tx: &Transaction<'_>, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, CopyError> {
    tx.execute(sql, params).await.map_err(write)
}

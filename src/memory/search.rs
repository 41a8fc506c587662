//! Finding what a scope remembers: keyword search always (SQLite FTS5, PostgreSQL
//! `tsvector`), merged by reciprocal rank fusion with vector search when an embeddings
//! endpoint is configured and reachable; dated notes fade with a 30-day half-life.
//!
//! Keyword results are the chunks with every word of the query, best first, followed, when
//! those are fewer than the search needs, by the chunks with any of them.
//!
//! Scores are the fused score over its best possible value (first in every list that was
//! searched), so a perfect match is 1.0 whether or not vectors took part, and `min_score`
//! means the same in both modes.

use std::collections::HashMap;
use std::time::Duration;

use chrono::NaiveDate;

use super::documents::{Memory, MemoryError};
use super::embed::Embedder;
use super::rank::{RRF_K, decay, reciprocal_rank_fusion};
use super::terms::{Matching, fts5_match, query_terms, tsquery};
use super::vectors::Place;
use crate::state::memory::{KeywordQuery, MemoryScope};

/// The most results one search returns.
pub const MAX_RESULTS: usize = 20;
/// Results when the caller does not say.
pub const DEFAULT_RESULTS: usize = 6;
/// The longest snippet returned, in characters; `memory_get` reads the rest.
const SNIPPET_CHARS: usize = 700;
/// How long embedding a query may take before search answers from keywords alone.
const QUERY_EMBED_TIMEOUT: Duration = Duration::from_secs(5);

/// One result: where it is, what it says, how well it matches.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub path: String,
    pub start_line: u32,
    pub end_line: u32,
    pub snippet: String,
    /// 0 to 1, higher is better.
    pub score: f64,
}

impl Memory {
    /// The scope's best matches for `query`: at most `max_results` (capped at
    /// [`MAX_RESULTS`]), none scoring under `min_score`. `embedder` adds vector search;
    /// when it fails the keywords answer alone, with a warning in the log.
    pub async fn search(
        &self,
        scope: &MemoryScope,
        query: &str,
        max_results: usize,
        min_score: f64,
        embedder: Option<&Embedder>,
        today: NaiveDate,
    ) -> Result<Vec<Found>, MemoryError> {
        let wanted = max_results.clamp(1, MAX_RESULTS);
        let candidates = wanted * 4;
        let terms = query_terms(query);
        let mut texts: HashMap<Place, String> = HashMap::new();
        let mut lists: Vec<Vec<Place>> = Vec::new();
        if !terms.is_empty() {
            let mut list = Vec::with_capacity(candidates);
            // Chunks with every word first, then (when they are too few) those with any:
            // ranking every chunk that has one common word costs far more than finding the
            // few that have them all.
            let passes: &[Matching] = if terms.len() > 1 { &[Matching::All, Matching::Any] } else { &[Matching::Any] };
            let mut searched = false;
            for matching in passes {
                if list.len() >= candidates {
                    break;
                }
                let (Some(fts5), Some(tsquery)) = (fts5_match(&terms, *matching), tsquery(&terms, *matching)) else {
                    continue;
                };
                searched = true;
                for hit in self.store.search(scope, &KeywordQuery { fts5, tsquery }, candidates).await? {
                    let place = (hit.path, hit.start_line, hit.end_line);
                    if list.len() < candidates && !texts.contains_key(&place) {
                        texts.insert(place.clone(), hit.text);
                        list.push(place);
                    }
                }
            }
            if searched {
                lists.push(list);
            }
        }
        let mut hybrid = false;
        if let Some(embedder) = embedder
            && !query.trim().is_empty()
        {
            match self.nearest(scope, query, embedder, candidates).await {
                Ok(Some(nearest)) => {
                    hybrid = true;
                    let mut list = Vec::with_capacity(nearest.len());
                    for (place, text) in nearest {
                        texts.entry(place.clone()).or_insert(text);
                        list.push(place);
                    }
                    lists.push(list);
                }
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(%error, "memory search answers from keywords alone: the query could not be embedded");
                }
            }
        }
        crate::metrics::metrics().memory_searched(hybrid);
        if lists.is_empty() {
            return Ok(Vec::new());
        }
        let best = lists.len() as f64 / (RRF_K + 1.0);
        let mut found: Vec<Found> = reciprocal_rank_fusion(&lists, RRF_K)
            .into_iter()
            .map(|((path, start_line, end_line), fused)| {
                let score = decay(fused / best, &path, today);
                let snippet = snippet(texts.get(&(path.clone(), start_line, end_line)).map_or("", String::as_str));
                Found { path, start_line, end_line, snippet, score }
            })
            .filter(|found| found.score >= min_score)
            .collect();
        found.sort_by(|a, b| b.score.total_cmp(&a.score));
        found.truncate(wanted);
        Ok(found)
    }

    /// The scope's chunks nearest to `query` by cosine, best first, with their text; `None`
    /// while nothing is embedded under the model yet (a new or changed model).
    async fn nearest(
        &self,
        scope: &MemoryScope,
        query: &str,
        embedder: &Embedder,
        limit: usize,
    ) -> Result<Option<Vec<(Place, String)>>, String> {
        let vectors =
            self.vectors.of(self.store.as_ref(), scope, embedder.model()).await.map_err(|error| error.to_string())?;
        if vectors.is_empty() {
            return Ok(None);
        }
        let embedded =
            embedder.embed(&[query.to_owned()], QUERY_EMBED_TIMEOUT).await.map_err(|error| error.to_string())?;
        let Some(wanted) = embedded.first() else { return Ok(None) };
        let nearest = vectors.nearest(wanted, limit);
        let ids: Vec<i64> = nearest.iter().map(|(_, id, _)| *id).collect();
        let texts: HashMap<i64, String> =
            self.store.chunk_texts(scope, &ids).await.map_err(|error| error.to_string())?.into_iter().collect();
        // A chunk whose document was written since the vectors were read is gone: left out.
        Ok(Some(
            nearest.into_iter().filter_map(|(_, id, place)| texts.get(&id).map(|text| (place, text.clone()))).collect(),
        ))
    }
}

/// `text` cut to [`SNIPPET_CHARS`] characters, marked when cut.
fn snippet(text: &str) -> String {
    match text.char_indices().nth(SNIPPET_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

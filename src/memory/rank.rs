//! How memory search orders what it found: keyword and vector results (cosine similarity,
//! `super::vectors`) merged by reciprocal rank fusion, and dated notes fading with age so
//! last week's note outranks last year's while `MEMORY.md` and named notes never fade.
//!
//! Rank fusion needs no common scale between the lists (bm25 and cosine are not comparable),
//! only their order: an item near the top of both lists beats one at the top of only one.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use chrono::NaiveDate;

/// The `k` of reciprocal rank fusion, the value of the original paper (Cormack et al., 2009)
/// that IronClaw and most hybrid search engines use: it damps how much the very first ranks
/// outweigh the rest (issue 40).
pub const RRF_K: f64 = 60.0;

/// A dated note's score halves every this many days (issue 40).
pub const DATED_HALF_LIFE_DAYS: f64 = 30.0;

/// `lists` (each best first) merged into one, best first: each key scores
/// Σ 1 / (k + rank) over the lists it appears in (rank 1-based, the first place in a list if it
/// appears twice). Equal scores keep the order in which keys first appear, reading the lists
/// in order, so the result is deterministic. `k` is expected to be positive ([`RRF_K`]).
pub fn reciprocal_rank_fusion<K: Eq + Hash + Clone>(lists: &[Vec<K>], k: f64) -> Vec<(K, f64)> {
    let mut fused: Vec<(K, f64)> = Vec::new();
    let mut position: HashMap<K, usize> = HashMap::new();
    for list in lists {
        let mut seen: HashSet<&K> = HashSet::with_capacity(list.len());
        for (index, key) in list.iter().enumerate() {
            if !seen.insert(key) {
                continue;
            }
            let score = 1.0 / (k + (index + 1) as f64);
            match position.get(key) {
                Some(&at) => fused[at].1 += score,
                None => {
                    position.insert(key.clone(), fused.len());
                    fused.push((key.clone(), score));
                }
            }
        }
    }
    // A stable sort: ties stay in order of first appearance.
    fused.sort_by(|a, b| b.1.total_cmp(&a.1));
    fused
}

/// The day of a dated note, `memory/YYYY-MM-DD.md`; `None` for every other path
/// (`MEMORY.md`, `memory/<name>.md`), which never decay.
pub fn dated_note_day(path: &str) -> Option<NaiveDate> {
    let day = path.strip_prefix("memory/")?.strip_suffix(".md")?;
    let date = NaiveDate::parse_from_str(day, "%Y-%m-%d").ok()?;
    // Only the one spelling `paths::daily` writes: not `2026-1-5`, not `+2026-01-05`.
    (date.format("%Y-%m-%d").to_string() == day).then_some(date)
}

/// `score` of a result from `path` as of `today`: a dated note's halves every
/// [`DATED_HALF_LIFE_DAYS`] of its age (a note dated in the future counts as today's), every
/// other document's is unchanged.
pub fn decay(score: f64, path: &str, today: NaiveDate) -> f64 {
    match dated_note_day(path) {
        Some(day) => {
            let age_days = today.signed_duration_since(day).num_days().max(0) as f64;
            score * 0.5f64.powf(age_days / DATED_HALF_LIFE_DAYS)
        }
        None => score,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(y: i32, m: u32, d: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(y, m, d).unwrap()
    }

    #[test]
    fn an_item_in_both_lists_outranks_items_in_one() {
        let keyword = vec!["a", "both", "c"];
        let vector = vec!["d", "e", "both"];
        let fused = reciprocal_rank_fusion(&[keyword, vector], RRF_K);
        assert_eq!(fused[0].0, "both");
        assert!((fused[0].1 - (1.0 / 62.0 + 1.0 / 63.0)).abs() < 1e-12, "{}", fused[0].1);
        assert!((fused[1].1 - 1.0 / 61.0).abs() < 1e-12);
        let order: Vec<&str> = fused.iter().map(|(key, _)| *key).collect();
        assert_eq!(order, ["both", "a", "d", "e", "c"], "ties in order of first appearance");
    }

    #[test]
    fn fusion_counts_a_key_once_per_list_at_its_best_rank() {
        let fused = reciprocal_rank_fusion(&[vec![1, 2, 1]], RRF_K);
        assert_eq!(fused, [(1, 1.0 / 61.0), (2, 1.0 / 62.0)]);
        assert!(reciprocal_rank_fusion::<u8>(&[], RRF_K).is_empty());
        assert!(reciprocal_rank_fusion::<u8>(&[vec![], vec![]], RRF_K).is_empty());
    }

    #[test]
    fn fusion_is_deterministic_for_equal_scores() {
        let lists = vec![vec!["x", "y"], vec!["y", "x"]];
        for _ in 0..10 {
            let fused = reciprocal_rank_fusion(&lists, RRF_K);
            assert_eq!(fused.iter().map(|(key, _)| *key).collect::<Vec<_>>(), ["x", "y"]);
            assert_eq!(fused[0].1, fused[1].1);
        }
    }

    #[test]
    fn only_dated_notes_have_a_day() {
        assert_eq!(dated_note_day("memory/2026-11-28.md"), Some(day(2026, 11, 28)));
        for path in [
            "MEMORY.md",
            "memory/people.md",
            "memory/2026-11-28.txt",
            "memory/2026-11-28-trip.md",
            "memory/2026-1-28.md",
            "memory/2026-13-01.md",
            "memory/2026-02-30.md",
            "memory/+202-11-28.md",
            "notes/2026-11-28.md",
            "memory/２０２６-11-28.md",
            "",
        ] {
            assert_eq!(dated_note_day(path), None, "{path}");
        }
    }

    #[test]
    fn dated_notes_halve_every_thirty_days_and_others_never_fade() {
        let today = day(2026, 11, 28);
        assert_eq!(decay(0.8, "memory/2026-11-28.md", today), 0.8);
        assert!((decay(0.8, "memory/2026-10-29.md", today) - 0.4).abs() < 1e-12);
        assert!((decay(1.0, "memory/2026-09-29.md", today) - 0.25).abs() < 1e-12);
        assert!((decay(1.0, "memory/2026-11-13.md", today) - 0.5f64.sqrt()).abs() < 1e-12);
        assert_eq!(decay(0.8, "memory/2026-12-25.md", today), 0.8, "a future date is not boosted");
        assert_eq!(decay(0.8, "MEMORY.md", today), 0.8);
        assert_eq!(decay(0.8, "memory/people.md", today), 0.8);
        assert!(decay(1.0, "memory/0001-01-01.md", today) >= 0.0);
    }
}

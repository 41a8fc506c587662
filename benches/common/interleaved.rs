//! Two ways of doing one thing, timed in interleaved rounds so that load on the machine hits
//! both alike, and reported as p50 and p99 each plus what the second adds at p50. Shared by
//! the `pdf_reader` and `sandbox` benches (`#[path]`-included).

use std::future::Future;
use std::time::Duration;

/// How many timed rounds to run: the number in the environment variable `var`, else `default`.
pub fn rounds(var: &str, default: usize) -> usize {
    std::env::var(var).ok().and_then(|n| n.parse().ok()).unwrap_or(default)
}

/// Runs `warm_up` untimed rounds, then `rounds` timed ones; each round runs `baseline`, then
/// `variant`, and each call returns the time it measured itself (so setup and checks stay
/// outside the timer). Returns both sets of samples, sorted.
pub async fn interleaved<B, BF, V, VF>(
    warm_up: usize,
    rounds: usize,
    mut baseline: B,
    mut variant: V,
) -> (Vec<Duration>, Vec<Duration>)
where
    B: FnMut() -> BF,
    BF: Future<Output = Duration>,
    V: FnMut() -> VF,
    VF: Future<Output = Duration>,
{
    for _ in 0..warm_up {
        baseline().await;
        variant().await;
    }
    let (mut first, mut second) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for _ in 0..rounds {
        first.push(baseline().await);
        second.push(variant().await);
    }
    first.sort();
    second.sort();
    (first, second)
}

/// The `p` quantile (0.0 to 1.0) of `sorted` samples, in milliseconds; 0 without samples.
pub fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index].as_secs_f64() * 1000.0
}

/// Prints the p50 and p99 of the `baseline` and the `variant` samples, each under its label,
/// then the variant's p50 minus the baseline's under `added`.
pub fn report(baseline: (&str, &[Duration]), variant: (&str, &[Duration]), added: &str) {
    let width = [baseline.0, variant.0, added].iter().map(|label| label.chars().count()).max().unwrap_or(0) + 3;
    for (name, samples) in [baseline, variant] {
        println!("{name:<width$} p50 {:>6.2}  p99 {:>6.2}", percentile_ms(samples, 0.5), percentile_ms(samples, 0.99));
    }
    let added_ms = percentile_ms(variant.1, 0.5) - percentile_ms(baseline.1, 0.5);
    println!("{added:<width$} p50 {added_ms:>+6.2}");
}

//! Scheduled jobs (issue 39) on SQLite: 100,000 jobs in the store (2,000 chats of 50 jobs,
//! 100 agents; `every`, `cron` and `at` schedules in four zones, all due between one hour
//! and eight days from now), measured through the real store and the real fire planner
//! ([`ferry::cron::fire::Planner`]):
//!
//! 1. **idle tick**: what the ticker does each time it wakes with nothing due,
//!    `claim_due` then `next_due`: median and p99 over 2,000 ticks. Target: at most 1 ms.
//! 2. **idle scheduler**: a task doing exactly the ticker's idle loop (a tick, then
//!    `select!` on a sleep until the next due time, at most 30 s, and the store's
//!    `changes()`), left alone for 3 s: the loop's wake-ups and the process's CPU time,
//!    split by thread (tokio workers, where the loop runs, and the database's own
//!    background threads). Target: unmeasurable.
//! 3. **fired jobs**: 3,200 of the 100,000 made due (`JobChange::RunAt`, as `ferry cron
//!    run` does), then the ticker's claim loop (`claim_due` until a batch is not full):
//!    time per fired job, which includes journaling each fire in the inbound log. Three
//!    rounds, on different jobs. Target: at most 50 µs per fired job. Then each fire is
//!    finished (`finish`, one at a time), timed separately.
//!
//! Run with `cargo bench --bench cron`; results go in BENCHMARKS.md.

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use ferry::cron::fire::Planner;
use ferry::cron::stored;
use ferry::state::inbound::{DEDUPE_WINDOW, MessageKey};
use ferry::state::jobs::{
    CLAIM_BATCH, ChatScope, ClaimedFire, FireOutcome, FirePlan, FirePlanner, Job, JobChange, JobLimits, JobPayload,
    JobState, JobStore, JobTarget,
};
use ferry::state::{Database, Stores};
use ferry::types::schedule::Schedule;

/// The binary's allocator, so the bench measures what `ferry gateway` runs with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CHATS: usize = 2_000;
const JOBS_PER_CHAT: usize = 50;
const JOBS: usize = CHATS * JOBS_PER_CHAT;
const AGENTS: usize = 100;
const LIMITS: JobLimits = JobLimits { per_chat: 50, per_agent: 1_000_000 };

const IDLE_TICKS: usize = 2_000;
const IDLE_WINDOW: Duration = Duration::from_secs(3);
/// 100 full claim batches.
const FIRED: usize = 100 * CLAIM_BATCH;
const FIRE_ROUNDS: usize = 3;
/// Round `r` fires jobs `r`, `r + STRIDE`, `r + 2·STRIDE`, …: every kind, chat and agent.
const STRIDE: usize = 31;

/// The ticker's longest sleep (`cron::ticker::MAX_SLEEP`).
const MAX_SLEEP: Duration = Duration::from_secs(30);

const HOUR_MS: i64 = 3_600_000;
const WEEK_MS: i64 = 7 * 24 * HOUR_MS;

const ZONES: [Tz; 4] =
    [chrono_tz::Europe::Berlin, chrono_tz::America::New_York, chrono_tz::Asia::Tokyo, chrono_tz::UTC];

fn main() {
    // SAFETY: sets one integer option of the allocator, as `ferry`'s `main` does.
    unsafe { libmimalloc_sys::mi_option_set(15, 0) }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    runtime.block_on(measure());
}

async fn measure() {
    let state = tempfile::tempdir().expect("state dir");
    let database = Database::open(state.path()).await.expect("database");
    let stores = Stores::sqlite(&database);
    let jobs = stores.jobs.clone();

    println!("== scheduled jobs on SQLite: {} jobs, {} chats, {} agents ==", thousands(JOBS), thousands(CHATS), AGENTS);
    fill(jobs.as_ref()).await;
    idle_ticks(jobs.as_ref()).await;
    idle_scheduler(jobs.clone()).await;
    let mut per_fire = Vec::new();
    let mut fires = Vec::new();
    for round in 0..FIRE_ROUNDS {
        let (time, fired) = fire_round(jobs.as_ref(), round).await;
        per_fire.push(time);
        fires = fired;
    }
    per_fire.sort();
    println!("fired jobs, median of {FIRE_ROUNDS} rounds: {} per fired job (target <= 50 µs)", micros(per_fire[1]));
    breakdown(&stores, &fires).await;
    drop(stores);
    database.close().await;
}

/// Job `index`: in chat `index % CHATS` (so each chat has [`JOBS_PER_CHAT`]), due between one
/// hour and eight days from `now_ms`, by its index.
fn job(index: usize, now_ms: i64) -> Job {
    let chat = index % CHATS;
    let chat_id = format!("{}", 100_000_000 + chat);
    let next_run_ms = now_ms + HOUR_MS + (index as i64) * WEEK_MS / JOBS as i64;
    let next = instant(next_run_ms);
    let schedule = match index % 3 {
        0 => {
            let every_secs = [600, 3_600, 86_400][index / 3 % 3];
            Schedule::Every { every_secs, anchor: instant(next_run_ms - every_secs as i64 * 1_000) }
        }
        1 => Schedule::Cron { expr: format!("{} {} * * {}", index % 60, index / 60 % 24, ["*", "1-5"][index % 2]) },
        _ => Schedule::At { at: next },
    };
    let payload = if index.is_multiple_of(2) {
        JobPayload::Text(format!("reminder {index}: stretch, drink water"))
    } else {
        JobPayload::Task(format!("task {index}: summarize what changed in the repository since yesterday"))
    };
    Job {
        id: format!("job-{index:06}"),
        agent_id: format!("agent-{}", chat % AGENTS),
        name: format!("job {index}"),
        owner: format!("user-{chat}"),
        created_by: "user".into(),
        scope: Some(ChatScope { channel: "telegram".into(), account_id: "default".into(), chat_id: chat_id.clone() }),
        target: JobTarget {
            channel: "telegram".into(),
            account_id: "default".into(),
            chat_id,
            chat_kind: if chat.is_multiple_of(4) { "group" } else { "direct" }.into(),
            thread_id: None,
        },
        schedule: stored::store(&schedule, ZONES[index % ZONES.len()]),
        payload,
        session_key: None,
        missed: "run_once".into(),
        grace_secs: None,
        state: JobState::Active,
        next_run_ms: Some(next_run_ms),
        running: None,
        failures: 0,
        last_error: None,
        last_alert: None,
        created_ms: now_ms,
    }
}

/// Adds the jobs one `add` at a time, as users and the agent do.
async fn fill(jobs: &dyn JobStore) {
    let now_ms = Utc::now().timestamp_millis();
    let started = Instant::now();
    let mut last_thousand = Duration::ZERO;
    for index in 0..JOBS {
        let job = job(index, now_ms);
        let add = Instant::now();
        jobs.add(&job, LIMITS).await.expect("add");
        if index >= JOBS - 1_000 {
            last_thousand += add.elapsed();
        }
    }
    let took = started.elapsed();
    println!(
        "filling: {} jobs added one at a time in {:.1} s ({} per add on average, {} each for the last 1,000)",
        thousands(JOBS),
        took.as_secs_f64(),
        micros(took / JOBS as u32),
        micros(last_thousand / 1_000),
    );
}

/// The ticker's tick with nothing due: `claim_due`, then `next_due`.
async fn idle_ticks(jobs: &dyn JobStore) {
    for _ in 0..100 {
        assert!(jobs.claim_due(&Planner).await.expect("claim").is_empty(), "nothing is due");
        black_box(jobs.next_due().await.expect("next due"));
    }
    let (mut ticks, mut claims, mut nexts) = (Vec::new(), Vec::new(), Vec::new());
    let cpu = cpu_time();
    for _ in 0..IDLE_TICKS {
        let start = Instant::now();
        let claimed = jobs.claim_due(&Planner).await.expect("claim");
        let claimed_at = Instant::now();
        let next = jobs.next_due().await.expect("next due");
        let end = Instant::now();
        assert!(claimed.is_empty() && next.is_some_and(|due| due > Utc::now().timestamp_millis()), "nothing is due");
        ticks.push(end - start);
        claims.push(claimed_at - start);
        nexts.push(end - claimed_at);
    }
    let cpu = cpu_time() - cpu;
    for samples in [&mut ticks, &mut claims, &mut nexts] {
        samples.sort();
    }
    println!(
        "idle tick (claim_due + next_due, nothing due), {} ticks: median {}, p99 {}, max {} (target <= 1 ms); \
         claim_due median {}, next_due median {}; CPU {} per tick",
        thousands(IDLE_TICKS),
        micros(percentile(&ticks, 0.5)),
        micros(percentile(&ticks, 0.99)),
        micros(percentile(&ticks, 1.0)),
        micros(percentile(&claims, 0.5)),
        micros(percentile(&nexts, 0.5)),
        micros(cpu / IDLE_TICKS as u32),
    );
}

/// The ticker's loop with nothing due for the whole window: how often it wakes and what
/// CPU the process uses meanwhile.
async fn idle_scheduler(jobs: Arc<dyn JobStore>) {
    let wakes = Arc::new(AtomicU64::new(0));
    let sleeps = Arc::new(std::sync::Mutex::new(Vec::new()));
    let task = tokio::spawn({
        let (wakes, sleeps) = (wakes.clone(), sleeps.clone());
        async move {
            loop {
                // The ticker's tick…
                loop {
                    let claimed = jobs.claim_due(&Planner).await.expect("claim");
                    assert!(claimed.is_empty(), "nothing is due");
                    if claimed.len() < CLAIM_BATCH {
                        break;
                    }
                }
                let now = Utc::now().timestamp_millis();
                let sleep = match jobs.next_due().await.expect("next due") {
                    Some(due) if due <= now => Duration::from_millis(10),
                    Some(due) => Duration::from_millis(u64::try_from(due - now).unwrap_or(0)).min(MAX_SLEEP),
                    None => MAX_SLEEP,
                };
                sleeps.lock().expect("sleeps").push(sleep);
                // …and its wait.
                tokio::select! {
                    () = tokio::time::sleep(sleep) => {}
                    () = jobs.changes().notified() => {}
                }
                wakes.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    // The adds left a wake-up pending (`notify_one` keeps one permit): let it pass first.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let settled = wakes.load(Ordering::Relaxed);
    let (cpu, threads) = (cpu_time(), thread_times());
    tokio::time::sleep(IDLE_WINDOW).await;
    let (cpu, threads_after) = (cpu_time() - cpu, thread_times());
    let woke = wakes.load(Ordering::Relaxed) - settled;
    task.abort();
    let _ = task.await;

    let mut by_name: HashMap<String, Duration> = HashMap::new();
    for (tid, (name, after)) in &threads_after {
        let before = threads.get(tid).map_or(Duration::ZERO, |(_, before)| *before);
        *by_name.entry(name.clone()).or_default() += after.saturating_sub(before);
    }
    let mut by_name: Vec<_> = by_name.into_iter().collect();
    by_name.sort_by_key(|entry| std::cmp::Reverse(entry.1));
    let split: Vec<String> = by_name.iter().map(|(name, used)| format!("{name} {}", millis(*used))).collect();
    let last_sleep = sleeps.lock().expect("sleeps").last().copied().unwrap_or_default();
    println!(
        "idle scheduler, {:.0} s window, nothing due before the first job's next run: {woke} wake-ups of the loop \
         (it sleeps {:.0} s at a time); process CPU {} in the window ({} per second); by thread: {}",
        IDLE_WINDOW.as_secs_f64(),
        last_sleep.as_secs_f64(),
        millis(cpu),
        millis(cpu / IDLE_WINDOW.as_secs() as u32),
        split.join(", "),
    );
}

/// Makes [`FIRED`] jobs due, fires them with the ticker's claim loop, then finishes each.
/// Returns the time per fired job, and the fires.
async fn fire_round(jobs: &dyn JobStore, round: usize) -> (Duration, Vec<ClaimedFire>) {
    let changing = Instant::now();
    make_due(jobs, round).await;
    let per_change = changing.elapsed() / FIRED as u32;
    let planner = TimedPlanner::default();
    let cpu = cpu_time();
    let started = Instant::now();
    let mut fires = Vec::with_capacity(FIRED);
    let mut claims = 0;
    loop {
        let claimed = jobs.claim_due(&planner).await.expect("claim");
        claims += 1;
        let full = claimed.len() >= CLAIM_BATCH;
        fires.extend(claimed);
        if !full {
            break;
        }
    }
    let took = started.elapsed();
    let cpu = cpu_time() - cpu;
    assert_eq!(fires.len(), FIRED, "every job made due fires once");
    let per_fire = took / FIRED as u32;
    let planning = Duration::from_nanos(planner.nanos.load(Ordering::Relaxed)) / FIRED as u32;

    let finished_ms = Utc::now().timestamp_millis();
    let outcome = FireOutcome {
        status: "ok".into(),
        delivered: true,
        error: None,
        finished_ms,
        retry_at_ms: None,
        pause: false,
        alert: None,
    };
    let finishing = Instant::now();
    for fire in &fires {
        assert!(jobs.finish(&fire.job.id, fire.slot_ms, &outcome).await.expect("finish"), "in flight");
    }
    let per_finish = finishing.elapsed() / FIRED as u32;
    println!(
        "fired jobs, round {}: {} fires in {claims} claims, {:.1} ms: {} per fired job (CPU {}; of which the \
         planner building the message {}); finish {} per fire; making them due: {} per `change`",
        round + 1,
        thousands(FIRED),
        took.as_secs_f64() * 1e3,
        micros(per_fire),
        micros(cpu / FIRED as u32),
        micros(planning),
        micros(per_finish),
        micros(per_change),
    );
    (per_fire, fires)
}

/// The ids of the jobs round `round` fires.
fn round_ids(round: usize) -> Vec<String> {
    (0..FIRED).map(|k| format!("job-{:06}", round + k * STRIDE)).collect()
}

/// Makes round `round`'s jobs due now, one `change` at a time, as `ferry cron run` does.
async fn make_due(jobs: &dyn JobStore, round: usize) {
    let due_at = Utc::now().timestamp_millis() - 1;
    for id in round_ids(round) {
        assert!(jobs.change(&id, JobChange::RunAt { at_ms: due_at }).await.expect("run now"), "{id} runs");
    }
}

/// What a fired job's cost is made of, each part timed alone through the public API: the
/// claim's transaction without the journal (a planner that fires nothing and postpones the
/// job: no run row, no journal; so a lower bound), one inbound-log append like the journal's,
/// and a one-row write through the database's group commit like the journal id's
/// (`change`, which also moves the job in the due index: an upper bound). The last two are
/// timed one at a time, as `claim_due` does them, and 32 at once, as a batch could.
async fn breakdown(stores: &Stores, fires: &[ClaimedFire]) {
    let jobs = stores.jobs.as_ref();
    let round = FIRE_ROUNDS;
    make_due(jobs, round).await;
    // Each claim postpones a batch and returns no fire: one claim per batch made due.
    let started = Instant::now();
    for _ in 0..FIRED / CLAIM_BATCH {
        assert!(jobs.claim_due(&Postpone).await.expect("claim").is_empty(), "nothing fires");
    }
    let claim_only = started.elapsed() / FIRED as u32;
    let next = jobs.next_due().await.expect("next due");
    assert!(next.is_some_and(|due| due > Utc::now().timestamp_millis()), "every job made due was claimed");

    let inbound = stores.inbound.as_ref();
    let append = |n: usize| {
        let fire = &fires[n % fires.len()];
        let target = &fire.job.target;
        let key = [
            target.channel.clone(),
            target.account_id.clone(),
            target.chat_id.clone(),
            target.thread_id.clone().unwrap_or_default(),
            format!("bench:{n}"),
        ];
        (fire, key)
    };
    let accept = |n: usize| {
        let (fire, key) = append(n);
        async move {
            let [channel, account_id, chat_id, thread_id, message_id] = &key;
            let key = MessageKey { channel, account_id, chat_id, thread_id, message_id };
            let at = fire.accepted.enqueued_at;
            inbound.accept(&key, at, at - DEDUPE_WINDOW.num_milliseconds(), &fire.accepted).await.expect("accept");
        }
    };
    let started = Instant::now();
    for n in 0..FIRED {
        accept(n).await;
    }
    let append_alone = started.elapsed() / FIRED as u32;
    let started = Instant::now();
    for batch in 0..FIRED / CLAIM_BATCH {
        futures::future::join_all((0..CLAIM_BATCH).map(|k| accept(FIRED + batch * CLAIM_BATCH + k))).await;
    }
    let append_batched = started.elapsed() / FIRED as u32;

    let later = Utc::now().timestamp_millis() + WEEK_MS;
    let ids = round_ids(round);
    let started = Instant::now();
    for id in &ids {
        jobs.change(id, JobChange::RunAt { at_ms: later }).await.expect("change");
    }
    let write_alone = started.elapsed() / FIRED as u32;
    let started = Instant::now();
    for batch in ids.chunks(CLAIM_BATCH) {
        futures::future::join_all(batch.iter().map(|id| jobs.change(id, JobChange::RunAt { at_ms: later + 1 }))).await;
    }
    let write_batched = started.elapsed() / FIRED as u32;
    println!(
        "per fired job, the parts alone: claim transaction without a fire {} (lower bound); inbound-log append {} one \
         at a time, {} when 32 go at once; one-row write through the group commit {} one at a time, {} when 32 go \
         at once",
        micros(claim_only),
        micros(append_alone),
        micros(append_batched),
        micros(write_alone),
        micros(write_batched),
    );
}

/// Fires nothing: the job is postponed a week, so a claim is its transaction alone.
struct Postpone;

impl FirePlanner for Postpone {
    fn plan(&self, job: &Job, _now_ms: i64) -> FirePlan {
        FirePlan { fire: None, skipped: None, next_run_ms: job.next_run_ms.map(|due| due + WEEK_MS) }
    }
}

/// The real planner, timed.
#[derive(Default)]
struct TimedPlanner {
    nanos: AtomicU64,
}

impl FirePlanner for TimedPlanner {
    fn plan(&self, job: &Job, now_ms: i64) -> FirePlan {
        let start = Instant::now();
        let plan = Planner.plan(job, now_ms);
        self.nanos.fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
        plan
    }
}

fn instant(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).expect("in range")
}

/// CPU time (user + system) this process has used so far.
fn cpu_time() -> Duration {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let of = |time: libc::timeval| Duration::new(time.tv_sec as u64, time.tv_usec as u32 * 1_000);
    of(usage.ru_utime) + of(usage.ru_stime)
}

/// Each thread of this process: its name and the CPU time it has run (`schedstat`, ns).
fn thread_times() -> HashMap<String, (String, Duration)> {
    let mut threads = HashMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return threads };
    for task in tasks.flatten() {
        let path = task.path();
        let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default().trim().to_owned();
        let ran = std::fs::read_to_string(path.join("schedstat"))
            .ok()
            .and_then(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
            .map(Duration::from_nanos);
        if let Some(ran) = ran {
            // Tokio names its workers `tokio-runtime-worker` (cut to 15 bytes); the main
            // thread carries the binary's name.
            let name = if name.starts_with("cron-") { "main".to_owned() } else { name };
            threads.insert(task.file_name().to_string_lossy().into_owned(), (name, ran));
        }
    }
    threads
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn micros(duration: Duration) -> String {
    format!("{:.1} µs", duration.as_secs_f64() * 1e6)
}

fn millis(duration: Duration) -> String {
    format!("{:.2} ms", duration.as_secs_f64() * 1e3)
}

fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

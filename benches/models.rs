//! Choosing the model and credentials of a model call (issue 20): what the router adds to
//! every call on the happy path — the route (candidates and their ready profiles in
//! rotation order), the first attempt, and recording its success (least-recently-used
//! order, session stickiness). Target: at most 1 µs per model call.
//! Run with `cargo bench --bench models`.

use std::hint::black_box;

use chrono::Utc;
use criterion::{Criterion, criterion_group, criterion_main};

use ferry::config::{Config, Environment, ModelSetting, ProfileConfig, ProviderConfig, ProviderKind, Secret};
use ferry::models::profiles::ProfileBook;
use ferry::models::{ModelCatalog, ModelRouter};

/// A primary with three keys and a fallback provider with one.
fn router() -> ModelRouter {
    let mut config = Config::default();
    let profile = |key: &str| ProfileConfig { api_key: Some(Secret::new(key)), api_key_env: None };
    let mut primary = ProviderConfig {
        kind: ProviderKind::Openai,
        base_url: Some("http://127.0.0.1:9/v1".into()),
        api_key: Some(Secret::new("a")),
        context_window: None,
        vision: ferry::config::Vision::All(false),
        profiles: Default::default(),
    };
    primary.profiles.insert("b".into(), profile("b"));
    primary.profiles.insert("c".into(), profile("c"));
    let fallback = ProviderConfig { kind: ProviderKind::Anthropic, profiles: Default::default(), ..primary.clone() };
    config.models.providers.insert("p1".into(), primary);
    config.models.providers.insert("p2".into(), fallback);
    config.agents.defaults.model = Some(ModelSetting { primary: "p1/m1".into(), fallbacks: vec!["p2/m2".into()] });
    let env = Environment::new(std::iter::empty::<(&str, &str)>(), "/");
    ModelRouter::new(ModelCatalog::resolve(&config, &env).expect("the bench config resolves"))
}

fn selection(c: &mut Criterion) {
    let router = router();
    let sessions: Vec<String> = (0..64).map(|i| format!("agent:main:telegram:direct:{i}")).collect();
    let mut next = 0;
    c.bench_function("models/route_first_attempt_and_success", |b| {
        b.iter(|| {
            let session = &sessions[next % sessions.len()];
            next += 1;
            let mut route = router.route(session, None);
            let attempt = route.next_attempt().expect("a ready profile");
            router.succeeded(session, black_box(&attempt));
        })
    });

    let book = ProfileBook::new();
    let ids: Vec<String> = ["default", "b", "c"].iter().map(|id| (*id).to_owned()).collect();
    let now = Utc::now();
    book.mark_used("p1", "b", now);
    c.bench_function("models/profile_order_3_profiles", |b| {
        b.iter(|| black_box(book.order("p1", black_box(&ids), Some("b"), now)))
    });
}

criterion_group!(benches, selection);
criterion_main!(benches);

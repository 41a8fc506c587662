//! Which model and which credentials answer a model call, and what a failure does to them.
//!
//! Every model call asks the [`ModelRouter`] for a [`Route`]: the candidates (the primary
//! model and its fallbacks, or the model a session chose with `/model`), each with its
//! ready profiles in rotation order. The agent loop takes attempts from the route until one
//! answers; each failure worth switching for puts its profile on cooldown (counted, logged,
//! persisted) so the next call does not hit it again. A session keeps the profile that last
//! answered it while that profile is ready, which keeps the provider's prompt cache warm.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::ModelUsed;
use super::catalog::{Candidate, ModelCatalog, Profile};
use super::profiles::{Availability, FailoverReason, ProfileBook, ProfileHealth};
use crate::agent::providers::{ProviderError, ResolvedModel};
use crate::metrics::{ModelMetrics, metrics};
use crate::state::health::HealthStore;

/// Sessions whose last answering profile is remembered; past this the memory starts over
/// (stickiness is an optimisation: losing it costs one cold prompt cache).
const STICKY_SESSIONS: usize = 10_000;

/// Chooses models and credentials for every run of one agent.
pub struct ModelRouter {
    catalog: ModelCatalog,
    /// Shared with the `ferry_auth_profiles_cooling` sampler (weakly).
    book: Arc<ProfileBook>,
    /// The model and profile that last answered each session.
    answered: Mutex<HashMap<String, ModelUsed>>,
    /// Where cooldowns are kept across restarts, when there is a state database.
    health: Option<HealthStore>,
    model_metrics: HashMap<String, ModelMetrics>,
    /// Models (`provider/model`) that refused a thinking setting: asked without one.
    cannot_think: Mutex<HashSet<String>>,
}

/// One try: a model, and the credentials to ask it with.
#[derive(Clone)]
pub struct Attempt {
    pub candidate: Candidate,
    pub profile: Profile,
}

impl Attempt {
    /// `provider/model@profile`, for logs and the failover metric.
    pub fn label(&self) -> String {
        format!("{}/{}@{}", self.candidate.provider.name, self.candidate.model, self.profile.id)
    }

    /// The attempt as one client, for work outside the failover loop.
    pub fn resolved(&self, is_fallback_echo: bool) -> ResolvedModel {
        ResolvedModel {
            provider: self.profile.client.clone(),
            model: self.candidate.model.clone(),
            context_window: self.candidate.provider.context_window,
            vision: self.candidate.accepts_images(),
            is_fallback_echo,
        }
    }

    pub fn used(&self) -> ModelUsed {
        ModelUsed {
            provider: self.candidate.provider.name.clone(),
            model: self.candidate.model.clone(),
            profile: self.profile.id.clone(),
        }
    }
}

impl ModelRouter {
    pub fn new(catalog: ModelCatalog) -> Self {
        let mut model_metrics = HashMap::new();
        for candidate in catalog.chain.iter().chain(&catalog.allowed) {
            let name = &candidate.provider.name;
            if !model_metrics.contains_key(name) {
                model_metrics.insert(name.clone(), metrics().model(name));
            }
        }
        let book = Arc::new(ProfileBook::new());
        let sampled = Arc::downgrade(&book);
        metrics().sample_profiles_cooling(move || Some(sampled.upgrade()?.cooling_count(Utc::now())));
        Self {
            catalog,
            book,
            answered: Mutex::new(HashMap::new()),
            health: None,
            model_metrics,
            cannot_think: Mutex::new(HashSet::new()),
        }
    }

    /// Keeps cooldowns in `store`, first restoring the ones it holds: a restart inside a
    /// cooldown does not try the cooling key again.
    pub async fn with_health(mut self, store: HealthStore) -> Self {
        match store.load().await {
            Ok(rows) => self.book.restore(rows),
            Err(error) => tracing::warn!(%error, "cannot read the auth profiles' cooldowns; starting with none"),
        }
        self.health = Some(store);
        self
    }

    /// Shares `other`'s cooldowns (and where they are kept): several agents of one gateway
    /// calling the same provider with the same keys see one key's 429 at once, as one
    /// agent's runs do.
    pub fn sharing_cooldowns(mut self, other: &ModelRouter) -> Self {
        self.book = other.book.clone();
        self.health.clone_from(&other.health);
        self
    }

    pub fn catalog(&self) -> &ModelCatalog {
        &self.catalog
    }

    /// The primary model as one client, for callers outside the failover loop.
    pub fn primary(&self) -> ResolvedModel {
        self.catalog.primary()
    }

    /// The attempts for one model call of `session_key`: the `chosen` model only (a
    /// session's `/model`), else the primary and its fallbacks.
    pub fn route(&self, session_key: &str, chosen: Option<&Candidate>) -> Route<'_> {
        let candidates = match chosen {
            Some(candidate) => vec![candidate.clone()],
            None => self.catalog.chain.clone(),
        };
        let sticky = lock(&self.answered).get(session_key).cloned();
        Route {
            router: self,
            candidates,
            chosen: chosen.is_some(),
            next_candidate: 0,
            pending: Vec::new(),
            sticky,
            now: Utc::now(),
            given: false,
        }
    }

    /// The model and credentials a call of `session_key` would try first, as one client:
    /// what sizes its context budget and writes its compaction summaries. The primary when
    /// nothing is ready (the call then fails over or reports the outage itself).
    pub fn first_choice(&self, session_key: &str, chosen: Option<&Candidate>) -> ResolvedModel {
        match self.route(session_key, chosen).next_attempt() {
            Some(attempt) => attempt.resolved(self.catalog.is_fallback_echo),
            None => self.primary(),
        }
    }

    /// The provider's request metrics.
    pub fn model_metrics(&self, provider: &str) -> ModelMetrics {
        match self.model_metrics.get(provider) {
            Some(found) => found.clone(),
            None => metrics().model(provider),
        }
    }

    /// `attempt` answered `session_key`: its profile is healthy and the session sticks to it.
    pub fn succeeded(&self, session_key: &str, attempt: &Attempt) {
        let provider = &attempt.candidate.provider.name;
        self.book.mark_used(provider, &attempt.profile.id, Utc::now());
        if let Some(health) = self.book.mark_success(provider, &attempt.profile.id) {
            self.persist(health);
        }
        let mut answered = lock(&self.answered);
        let unchanged = answered.get(session_key).is_some_and(|used| {
            used.provider == *provider && used.profile == attempt.profile.id && used.model == attempt.candidate.model
        });
        if !unchanged {
            if answered.len() >= STICKY_SESSIONS {
                answered.clear();
            }
            answered.insert(session_key.to_owned(), attempt.used());
        }
    }

    /// `attempt` failed for `reason`: its profile cools down (and the cooldown is kept). A
    /// profile already cooling (the last one left, asked again after its wait) may have its
    /// cooldown lengthened, but it is the same incident: counted and logged once.
    pub fn failed(&self, attempt: &Attempt, reason: FailoverReason, retry_after: Option<Duration>) {
        let provider = &attempt.candidate.provider.name;
        let now = Utc::now();
        let new_incident = self.book.is_ready(provider, &attempt.profile.id, now);
        let health = self.book.mark_failure(provider, &attempt.profile.id, reason, retry_after, now);
        if new_incident {
            tracing::warn!(
                provider = %provider,
                profile = %attempt.profile.id,
                reason = reason.as_str(),
                until = ?health.cooling_until,
                "auth profile put on cooldown"
            );
            metrics().profile_cooldown(provider, reason.as_str());
        } else {
            tracing::debug!(provider = %provider, profile = %attempt.profile.id, until = ?health.cooling_until, "a cooling auth profile failed again");
        }
        self.persist(health);
    }

    /// The model and profile that last answered `session_key`, for `/status`.
    pub fn last_answered(&self, session_key: &str) -> Option<ModelUsed> {
        lock(&self.answered).get(session_key).cloned()
    }

    /// Whether `model` (`provider/model`) refused a thinking setting before.
    pub fn cannot_think(&self, model: &str) -> bool {
        lock(&self.cannot_think).contains(model)
    }

    /// Records that `model` refused a thinking setting; true the first time.
    pub fn mark_cannot_think(&self, model: &str) -> bool {
        lock(&self.cannot_think).insert(model.to_owned())
    }

    fn persist(&self, health: ProfileHealth) {
        let Some(store) = self.health.clone() else { return };
        // Off the model call's path: losing a cooldown to a crash costs one more failed call.
        tokio::spawn(async move {
            if let Err(error) = store.save(health).await {
                tracing::warn!(%error, "cannot keep an auth profile's cooldown");
            }
        });
    }
}

/// The attempts left for one model call.
pub struct Route<'r> {
    router: &'r ModelRouter,
    candidates: Vec<Candidate>,
    chosen: bool,
    next_candidate: usize,
    /// The current candidate's ready profiles not tried yet, last first.
    pending: Vec<Attempt>,
    sticky: Option<ModelUsed>,
    now: DateTime<Utc>,
    /// An attempt was handed out (so the last resort is not needed).
    given: bool,
}

impl Route<'_> {
    /// The next attempt: the current candidate's next ready profile, else the next
    /// candidate's first. Cooling profiles are not tried, but for the [last
    /// resort](Self::last_resort) when none is ready.
    pub fn next_attempt(&mut self) -> Option<Attempt> {
        let next = self.next_ready().or_else(|| if self.given { None } else { self.last_resort() });
        self.given |= next.is_some();
        next
    }

    fn next_ready(&mut self) -> Option<Attempt> {
        loop {
            if let Some(attempt) = self.pending.pop() {
                // A profile may have started cooling since the candidate was ordered (a
                // fallback on the same provider).
                if self.router.book.is_ready(&attempt.candidate.provider.name, &attempt.profile.id, Utc::now()) {
                    return Some(attempt);
                }
                continue;
            }
            let candidate = self.candidates.get(self.next_candidate)?.clone();
            self.next_candidate += 1;
            let provider = &candidate.provider;
            let sticky = self.sticky.as_ref().filter(|used| used.provider == provider.name).map(|used| &*used.profile);
            let order = self.router.book.order(&provider.name, &provider.profile_ids, sticky, self.now);
            self.pending = order
                .into_iter()
                .rev()
                .filter(|(_, availability)| matches!(availability, Availability::Ready))
                .filter_map(|(id, _)| provider.profile(id).cloned())
                .map(|profile| Attempt { candidate: candidate.clone(), profile })
                .collect();
        }
    }

    /// With nothing ready, a profile cooling after it failed to answer (a server error, a
    /// dropped connection, a stall: no wait asked for, no credential refused) is tried all the
    /// same, the one back soonest: otherwise one blip would refuse every chat of a bot with a
    /// single key for minutes, without asking. Profiles a provider told to wait (429, 503,
    /// 529), refused (401/403) or found out of credit stay out until their cooldown ends.
    fn last_resort(&self) -> Option<Attempt> {
        let now = Utc::now();
        let mut soonest: Option<(DateTime<Utc>, Attempt)> = None;
        for candidate in &self.candidates {
            let provider = &candidate.provider;
            for (id, availability) in self.router.book.order(&provider.name, &provider.profile_ids, None, now) {
                let Availability::Cooling { until, reason: FailoverReason::Timeout } = availability else { continue };
                let Some(profile) = provider.profile(id) else { continue };
                if soonest.as_ref().is_none_or(|(best, _)| until < *best) {
                    soonest = Some((until, Attempt { candidate: candidate.clone(), profile: profile.clone() }));
                }
            }
        }
        soonest.map(|(_, attempt)| attempt)
    }

    /// The error for a call no attempt could answer: the soonest any candidate is back, and
    /// why they are out (`last` when a call just failed; else the cooling reason).
    pub fn unavailable(&self, last: Option<&ProviderError>) -> ProviderError {
        let now = Utc::now();
        let back_at = self
            .candidates
            .iter()
            .filter_map(|candidate| {
                self.router.book.soonest_ready(&candidate.provider.name, &candidate.provider.profile_ids, now)
            })
            .min();
        let reason = last
            .and_then(ProviderError::failover_reason)
            .or_else(|| self.candidates.iter().find_map(|candidate| self.cooling_reason(candidate, now)))
            .unwrap_or(FailoverReason::Timeout);
        ProviderError::Unavailable { back_at, reason, chosen: self.chosen }
    }

    fn cooling_reason(&self, candidate: &Candidate, now: DateTime<Utc>) -> Option<FailoverReason> {
        let provider = &candidate.provider;
        self.router.book.order(&provider.name, &provider.profile_ids, None, now).into_iter().find_map(
            |(_, availability)| match availability {
                Availability::Cooling { reason, .. } => Some(reason),
                Availability::Ready => None,
            },
        )
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A router with one model and one credential: tests, and embedders that bring their own
/// provider.
impl From<ResolvedModel> for ModelRouter {
    fn from(model: ResolvedModel) -> Self {
        ModelRouter::new(ModelCatalog::single(model))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Environment};

    fn cooling_gauge() -> String {
        crate::metrics::render()
            .lines()
            .find(|line| line.starts_with("ferry_auth_profiles_cooling "))
            .unwrap()
            .to_owned()
    }

    #[tokio::test]
    async fn a_cooling_profile_that_fails_again_is_one_incident() {
        let router =
            ModelRouter::new(ModelCatalog::resolve(&Config::default(), &Environment::new([("", ""); 0], "/")).unwrap());
        let attempt = router.route("k", None).next_attempt().unwrap();
        router.failed(&attempt, FailoverReason::RateLimit, Some(Duration::from_secs(30)));
        router.failed(&attempt, FailoverReason::RateLimit, Some(Duration::from_secs(90)));
        let provider = &attempt.candidate.provider.name;
        let series = format!("ferry_auth_profile_cooldowns_total{{provider=\"{provider}\",reason=\"rate_limit\"}} ");
        let text = crate::metrics::render();
        let counted = text.lines().find_map(|line| line.strip_prefix(&series)).unwrap_or_else(|| panic!("{text}"));
        assert_eq!(counted, "1");
        assert!(router.route("k", None).next_attempt().is_none(), "still cooling");
    }

    #[tokio::test]
    async fn with_nothing_ready_a_profile_that_merely_failed_to_answer_is_tried_once_more() {
        let router =
            ModelRouter::new(ModelCatalog::resolve(&Config::default(), &Environment::new([("", ""); 0], "/")).unwrap());
        let only = router.route("k", None).next_attempt().unwrap();
        router.failed(&only, FailoverReason::Timeout, None);
        let mut route = router.route("k", None);
        let again = route.next_attempt().expect("a server error does not lock a single key out");
        assert_eq!(again.label(), only.label());
        assert!(route.next_attempt().is_none(), "once per call");

        for told in
            [FailoverReason::RateLimit, FailoverReason::Overloaded, FailoverReason::Auth, FailoverReason::Billing]
        {
            let router = ModelRouter::new(
                ModelCatalog::resolve(&Config::default(), &Environment::new([("", ""); 0], "/")).unwrap(),
            );
            router.failed(&only, told, None);
            assert!(router.route("k", None).next_attempt().is_none(), "{told:?} is waited out");
        }
    }

    #[tokio::test]
    async fn the_cooling_gauge_follows_the_clock_and_forgets_a_dropped_router() {
        let catalog = ModelCatalog::resolve(&Config::default(), &Environment::new([("", ""); 0], "/")).unwrap();
        let router = ModelRouter::new(catalog);
        let until = Utc::now() + chrono::TimeDelta::milliseconds(300);
        let health = |provider: &str| ProfileHealth {
            provider: provider.to_owned(),
            profile: "default".to_owned(),
            cooling_until: Some(until),
            reason: Some(FailoverReason::RateLimit),
            error_count: 1,
            last_used: None,
        };
        router.book.restore([health("openai"), health("anthropic")]);
        assert_eq!(cooling_gauge(), "ferry_auth_profiles_cooling 2");

        // The cooldowns end with no call to the router at all.
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(cooling_gauge(), "ferry_auth_profiles_cooling 0");

        router.book.restore([ProfileHealth {
            cooling_until: Some(Utc::now() + chrono::TimeDelta::hours(1)),
            ..health("openai")
        }]);
        assert_eq!(cooling_gauge(), "ferry_auth_profiles_cooling 1");
        drop(router);
        assert_eq!(cooling_gauge(), "ferry_auth_profiles_cooling 0", "a dropped router counts nothing");
    }

    #[tokio::test]
    async fn agents_sharing_cooldowns_wait_out_one_anothers_rate_limits() {
        let catalog = || ModelCatalog::resolve(&Config::default(), &Environment::new([("", ""); 0], "/")).unwrap();
        let (first, apart) = (ModelRouter::new(catalog()), ModelRouter::new(catalog()));
        let second = ModelRouter::new(catalog()).sharing_cooldowns(&first);
        let attempt = first.route("agent:main:k", None).next_attempt().unwrap();
        first.failed(&attempt, FailoverReason::RateLimit, Some(Duration::from_secs(60)));
        assert!(second.route("agent:helper:k", None).next_attempt().is_none(), "the same key is cooling");
        assert!(apart.route("agent:other:k", None).next_attempt().is_some(), "a router of its own is not told");
    }
}

//! Routing: whether an inbound message may run, and which session it belongs to (SPEC §3).
//!
//! The [`Router`] takes every normalized [`InboundMessage`] from the adapters and answers
//! with a [`RouteDecision`]. The checks run in a fixed order, cheapest-to-undo first:
//!
//! 1. [`dedupe`] — a redelivered message is dropped before anything with an effect happens
//!    (it is recorded as seen once the decision is made, see [`Router::route_and_admit`]);
//! 2. bots — messages from bots are ignored unless the channel sets `allow_bots`;
//! 3. [`access`] — DM and group policies, with [`pairing`] codes for unknown DM senders;
//! 4. [`mention`] — in groups that require a mention, messages not addressed to the bot
//!    are held as context for the next one that is.
//!
//! A message that passes gets its [`SessionKey`] ([`session_key`]), of the agent its
//! [`bindings`] choose, and the prompt text the agent will see. What happens next (queueing, running) is the `queue` stage's business.
//!
//! ```no_run
//! use std::sync::Arc;
//! use ferry::config::Config;
//! use ferry::routing::{RouteDecision, Router, SystemClock};
//! use ferry::state::Stores;
//! # async fn example(message: ferry::channel::InboundMessage) -> anyhow::Result<()> {
//! let config = Config::default();
//! // SQLite in the state directory, or PostgreSQL, as `[state]` says.
//! let stores = Stores::open(&config, "/var/lib/ferry".as_ref()).await?;
//! let router = Router::new(&config, &stores, Arc::new(SystemClock))?;
//! match router.route(&message).await? {
//!     RouteDecision::Run { session_key, prompt, .. } => println!("run {session_key}: {prompt}"),
//!     RouteDecision::Pairing { reply } | RouteDecision::Denied { reply: Some(reply), .. } => {
//!         println!("tell the sender: {reply}")
//!     }
//!     _ => {}
//! }
//! # Ok(()) }
//! ```

pub mod access;
pub mod bindings;
pub mod clock;
pub mod dedupe;
pub mod mention;
pub mod pairing;
pub mod session_key;

use std::sync::Arc;

use ferry_channel::{ChatKind, InboundMessage};
use tracing::Instrument;

pub use access::{Access, AccessRules, ChannelAccess, DenyReason};
pub use bindings::{BindingConflict, BindingTable};
pub use clock::{Clock, ManualClock, SystemClock};
pub use dedupe::{Admitted, DedupeError, DedupeStore};
pub use mention::{Gate, InvalidMentionPattern, MentionGate};
pub use pairing::{ApprovedSender, PairingError, PairingRequest, PairingStore, PendingPairing, pairing_scope};
pub use session_key::{InvalidSessionKey, SessionKey, ThreadLabel, ThreadLabels, is_main_session, session_key};

use crate::config::{Config, DmScope};
use crate::state::Stores;

/// The agent that answers when the operator names none.
pub const DEFAULT_AGENT_ID: &str = crate::config::MAIN_AGENT;

/// What to do with one inbound message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteDecision {
    /// Run the agent on `prompt` in the session `session_key`.
    Run {
        session_key: SessionKey,
        /// The message text; in a group, wrapped with the messages held since the bot's last
        /// reply (see [`mention`]).
        prompt: String,
        /// From a group or channel rather than a DM.
        is_group: bool,
    },
    /// Seen before (a redelivery): drop it silently.
    Duplicate,
    /// Not for the bot; nothing is sent back.
    Ignored(IgnoreReason),
    /// An unknown DM sender: send them `reply`, which carries their pairing code and how the
    /// operator approves it.
    Pairing { reply: String },
    /// Not allowed. `reply`, when there is one, tells the sender what they can do.
    Denied { reason: DenyReason, reply: Option<String> },
    /// Addressed to the bot, but longer than `messages.max_inbound_chars`: not run, and
    /// the sender is told.
    TooLong { chars: usize, limit: usize },
}

/// Why a message was ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IgnoreReason {
    /// Sent by a bot on a channel without `allow_bots`.
    FromBot,
    /// A group message that does not address the bot; it was kept as context.
    NotMentioned,
}

/// Why routing could not decide. The message must not be acknowledged to its platform: the
/// router has forgotten it (best effort), so its redelivery will be routed afresh.
#[derive(Debug, thiserror::Error)]
pub enum RoutingError {
    /// Two bindings equally specific for one chat (validation refuses such a config).
    #[error(transparent)]
    Bindings(#[from] BindingConflict),
    #[error(transparent)]
    InvalidMentionPattern(#[from] InvalidMentionPattern),
    #[error(transparent)]
    Pairing(#[from] PairingError),
    #[error(transparent)]
    Dedupe(#[from] DedupeError),
    /// The message would run, but it could not be recorded (with its admission).
    #[error("cannot admit a message: {0}")]
    Admission(DedupeError),
}

impl RoutingError {
    /// The state store could not be reached (a database restart, a cut connection): routing
    /// the same message again may succeed in a moment.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Self::Dedupe(error) | Self::Admission(error) => error.is_unavailable(),
            Self::Pairing(PairingError::Query { source, .. }) => source.is_unavailable(),
            Self::Bindings(_) | Self::InvalidMentionPattern(_) | Self::Pairing(_) => false,
        }
    }
}

/// A routing decision and, for a message that runs and was journaled, its admission.
#[derive(Debug)]
pub struct Routed {
    pub decision: RouteDecision,
    /// `Some` exactly when `decision` is [`RouteDecision::Run`] and a journal entry was given.
    pub admitted: Option<Admitted>,
}

/// Decides whether each inbound message runs, which agent answers it and in which session.
///
/// Safe to share between tasks (`Arc<Router>`): stores are SQLite-backed and the in-memory
/// group histories sit behind a lock held only for a few map operations.
#[derive(Debug)]
pub struct Router {
    /// Which agent answers each chat (`[[bindings]]`).
    bindings: BindingTable,
    dm_scope: DmScope,
    access: AccessRules,
    mention: MentionGate,
    pairing: PairingStore,
    dedupe: DedupeStore,
    /// Whether each channel's `thread_id` is a thread or a topic; see [`ThreadLabels`].
    thread_labels: ThreadLabels,
    clock: Arc<dyn Clock>,
    /// `messages.max_inbound_chars`.
    max_inbound_chars: usize,
}

impl Router {
    /// A router for `config`'s agents and bindings, with every channel's threads labelled
    /// `thread`; see [`Router::with_thread_labels`].
    pub fn new(config: &Config, stores: &Stores, clock: Arc<dyn Clock>) -> Result<Self, RoutingError> {
        Ok(Self {
            bindings: BindingTable::build(config.agents.default_id(), &config.bindings)?,
            dm_scope: config.session.dm_scope,
            access: AccessRules::from_config(config),
            mention: MentionGate::from_config(config)?,
            pairing: PairingStore::new(stores.pairing.clone(), clock.clone()),
            dedupe: DedupeStore::new(stores.inbound.clone(), clock.clone()),
            thread_labels: ThreadLabels::new(),
            clock,
            max_inbound_chars: config.messages.max_inbound_chars,
        })
    }

    /// Says which channels' thread ids are forum topics (`:topic:<id>` in session keys).
    pub fn with_thread_labels(mut self, thread_labels: ThreadLabels) -> Self {
        self.thread_labels = thread_labels;
        self
    }

    /// Decides about one message: dedupe, bots, access (with pairing), then mention gating.
    /// The message is recorded as seen, so a redelivery is a [`RouteDecision::Duplicate`].
    pub async fn route(&self, message: &InboundMessage) -> Result<RouteDecision, RoutingError> {
        Ok(self.route_and_admit(message, None).await?.decision)
    }

    /// Like [`Router::route`]; a message that will run is journaled with `encoded` (the
    /// message as JSON) in the same record that marks it as seen. The dispatcher journals
    /// every message that runs but a command: a crash can then never leave a message
    /// marked as seen (so its redelivery would be dropped) but not queued.
    ///
    /// On error nothing was recorded and the platform should redeliver. Deciding has
    /// in-memory effects that a redelivery repeats: a held group message is held again.
    pub async fn route_and_admit(
        &self,
        message: &InboundMessage,
        encoded: Option<String>,
    ) -> Result<Routed, RoutingError> {
        let span = tracing::debug_span!(
            "route",
            channel = %message.channel,
            chat_id = %message.chat.id,
            message_id = %message.message_id,
        );
        async {
            let duplicate = Routed { decision: RouteDecision::Duplicate, admitted: None };
            let decision = self.decide(message).await?;
            let admitted = match (&decision, encoded) {
                (RouteDecision::Duplicate, _) => return Ok(duplicate),
                (RouteDecision::Run { session_key, prompt, .. }, Some(encoded)) => {
                    let admitted = self
                        .dedupe
                        .admit(message, session_key.as_str(), prompt, encoded)
                        .await
                        .map_err(RoutingError::Admission)?;
                    match admitted {
                        Some(admitted) => Some(admitted),
                        None => return Ok(duplicate),
                    }
                }
                _ => {
                    if !self.dedupe.first_sighting(message).await? {
                        return Ok(duplicate);
                    }
                    None
                }
            };
            Ok(Routed { decision, admitted })
        }
        .instrument(span)
        .await
    }

    /// Bots, access and pairing, session key, mention gating; a redelivery is caught before
    /// pairing or mention gating act on it.
    async fn decide(&self, message: &InboundMessage) -> Result<RouteDecision, RoutingError> {
        let require_mention = match self.access.decide(message) {
            Access::Allowed { require_mention } => require_mention,
            Access::IgnoredBot => return Ok(RouteDecision::Ignored(IgnoreReason::FromBot)),
            Access::Denied(reason) => {
                tracing::debug!(%reason, "message denied");
                return Ok(RouteDecision::Denied { reason, reply: None });
            }
            Access::NeedsPairing => {
                let scope = pairing::pairing_scope(&message.channel, &message.account_id);
                if !self.pairing.is_approved(&scope, &message.sender.id).await? {
                    if self.redelivered(message).await? {
                        return Ok(RouteDecision::Duplicate);
                    }
                    return self.pair(message).await;
                }
                false
            }
        };
        let session_key = self.session_key_of(message);
        let is_group = message.chat.kind != ChatKind::Direct;
        // Checked before a group holds it as context, so an oversized message is never kept.
        if let Some(chars) = too_long(&message.text, self.max_inbound_chars) {
            if is_group && !self.mention.addresses_bot(message, require_mention) {
                return Ok(RouteDecision::Ignored(IgnoreReason::NotMentioned));
            }
            tracing::info!(chars, limit = self.max_inbound_chars, "message too long; not run");
            return Ok(RouteDecision::TooLong { chars, limit: self.max_inbound_chars });
        }
        let prompt = if is_group {
            if self.redelivered(message).await? {
                return Ok(RouteDecision::Duplicate);
            }
            match self.mention.admit(&session_key, message, require_mention) {
                Gate::Run { prompt } => prompt,
                Gate::Held => return Ok(RouteDecision::Ignored(IgnoreReason::NotMentioned)),
            }
        } else {
            message.text.clone()
        };
        tracing::debug!(%session_key, "message will run");
        Ok(RouteDecision::Run { session_key, prompt, is_group })
    }

    /// The longest message that runs, in characters (`messages.max_inbound_chars`).
    pub fn max_inbound_chars(&self) -> usize {
        self.max_inbound_chars
    }

    /// The session `message` belongs to: the one its gateway client named, else the one
    /// its channel, chat and sender give, of the agent the client named or the bindings
    /// choose.
    pub fn session_key_of(&self, message: &InboundMessage) -> SessionKey {
        let request = message.request.as_ref();
        match request.and_then(|request| request.session_key.as_deref()).map(SessionKey::parse) {
            Some(Ok(key)) => return key,
            Some(Err(error)) => tracing::warn!(%error, "ignoring the session a client named; routing the message"),
            None => {}
        }
        let agent = match request.and_then(|request| request.agent_id.as_deref()) {
            Some(agent) => agent,
            None => self.bindings.agent_for(message),
        };
        session_key(agent, self.dm_scope, message, self.thread_labels.for_channel(&message.channel))
    }

    /// The agent that answers `message` when neither its client nor its session names one.
    pub fn agent_for(&self, message: &InboundMessage) -> &str {
        self.bindings.agent_for(message)
    }

    /// Whether `message` was already recorded: asked before a step whose effect a
    /// redelivery must not repeat (a pairing reply, a group's held history). Elsewhere the
    /// write that records the message finds out, and the lookup is saved.
    async fn redelivered(&self, message: &InboundMessage) -> Result<bool, DedupeError> {
        let seen = self.dedupe.seen(message).await?;
        if seen {
            tracing::debug!("dropping a redelivered message");
        }
        Ok(seen)
    }

    /// An unknown DM sender under `dm_policy = "pairing"`: their code, or "try later".
    async fn pair(&self, message: &InboundMessage) -> Result<RouteDecision, RoutingError> {
        let sender = &message.sender;
        let scope = pairing::pairing_scope(&message.channel, &message.account_id);
        match self.pairing.request(&scope, &sender.id, sender.name.as_deref()).await? {
            PairingRequest::Issued(pending) => {
                tracing::info!(
                    sender_id = %sender.id,
                    "an unknown sender asked to talk to the bot and got a pairing code; see `ferry pairing list`"
                );
                Ok(RouteDecision::Pairing { reply: pairing::pairing_reply(&pending, self.clock.now()) })
            }
            PairingRequest::Existing(pending) => {
                tracing::debug!(sender_id = %sender.id, "a sender waiting for approval wrote again");
                Ok(RouteDecision::Pairing { reply: pairing::pairing_reply(&pending, self.clock.now()) })
            }
            PairingRequest::TooManyPending => {
                tracing::warn!(
                    sender_id = %sender.id,
                    "too many pairing codes pending on this channel; the sender was told to try later"
                );
                Ok(RouteDecision::Denied {
                    reason: DenyReason::PairingBusy,
                    reply: Some(pairing::PAIRING_BUSY_REPLY.to_owned()),
                })
            }
        }
    }
}

/// `text`'s length in characters when it is over `limit`; counting only when the bytes
/// alone do not settle it.
pub fn too_long(text: &str, limit: usize) -> Option<usize> {
    if text.len() <= limit {
        return None;
    }
    let chars = text.chars().count();
    (chars > limit).then_some(chars)
}
